"""MoE expert-parallel imbalance that changes over time.

Each instance's slowdown is lognormal with mean 1 and the configured CV (`moe_imbalance_cv`,
from the cost model or the trace). With `redraw_s` > 0 it is redrawn every `redraw_s`
simulated seconds, as an AR(1) process on its logarithm,

    log f' = mu + rho * (log f - mu) + sqrt(1 - rho^2) * sigma * z,   sigma^2 = log(1 + cv^2), mu = -sigma^2 / 2,

so the marginal distribution stays the same and `rho` sets how much of an instance's
imbalance carries over (routing skew moves with the batch's content and with training). A new
factor applies from the instance's first decode step starting at or after the redraw time.
`redraw_s` = 0 keeps the per-instance factors fixed for the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dora.errors import InputError, too_small


@dataclass
class ImbalanceConfig:
    redraw_s: float = 0.0  # seconds between redraws of every instance's MoE slowdown (0: fixed)
    rho: float = 0.5  # correlation of consecutive draws (log scale)

    def validate(self) -> None:
        if not self.redraw_s >= 0:
            raise too_small("redraw_s", self.redraw_s, 0, "seconds (0 = fixed factors)")
        if not -1 < self.rho < 1:
            raise InputError(f"rho: must be in (-1, 1), got {self.rho}")


class ImbalanceProcess:
    """Redraws of the MoE slowdown factors (one random stream, independent of the others)."""

    def __init__(self, cfg: ImbalanceConfig, cv: float, seed: int):
        self.cfg = cfg
        self.sigma = float(np.sqrt(np.log1p(cv * cv))) if cv > 0 else 0.0
        self.mu = -self.sigma ** 2 / 2.0
        self.rng = np.random.default_rng([seed, 4])

    def active(self) -> bool:
        return self.cfg.redraw_s > 0 and self.sigma > 0

    def next(self, f: np.ndarray) -> np.ndarray:
        rho = self.cfg.rho
        z = self.rng.standard_normal(len(f))
        return np.exp(self.mu + rho * (np.log(f) - self.mu) + np.sqrt(1 - rho * rho) * self.sigma * z)
