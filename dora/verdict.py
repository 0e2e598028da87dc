"""The verdict line that ends every policy table: the fastest policy that keeps C1–C3, its
margin over the next, whether that ranking survives perturbed cost coefficients, and which
policies were not ranked because their own run broke a contract.

The line is computed from the runs' metrics alone (`c1_violations`, `c2_lost`, `c2_duplicated`,
`c3_violations`, `e2e_samples_per_s`), so the simulator and the executor share it. The
sensitivity pass (`dora.sim.sensitivity`) supplies how many perturbed rankings kept the winner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONTRACT = (("c1_violations", "C1"), ("c2_lost", "C2"), ("c2_duplicated", "C2"), ("c3_violations", "C3"))


def broken(metrics: dict) -> list[str]:
    """The contracts (C1, C2, C3) a run broke, each once, in order."""
    out: list[str] = []
    for key, name in CONTRACT:
        if metrics.get(key, 0) and name not in out:
            out.append(name)
    return out


def ranked(runs: list[dict]) -> list[dict]:
    """Runs that kept C1–C3, fastest first (ties: table order)."""
    ok = [r for r in runs if not broken(r["metrics"])]
    return sorted(ok, key=lambda r: -r["metrics"]["e2e_samples_per_s"])


@dataclass
class Sensitivity:
    """How a ranking fared under perturbed cost models: `kept` of `total` named the same winner;
    `flips` names each perturbation that did not, with its winner."""

    kept: int
    total: int
    spread: float  # the +/- fraction each coefficient group was scaled by
    flips: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Verdict:
    winner: str | None
    rate: float
    runner_up: str | None
    margin: float  # winner's samples/s over the runner-up's (nan without one)
    unranked: list[tuple[str, list[str], float]]  # (policy, contracts broken, its samples/s)
    sensitivity: Sensitivity | None

    def line(self) -> str:
        if self.winner is None:
            head = "verdict: no policy kept C1-C3 on this run"
        elif self.runner_up is None:
            head = f"verdict: {self.winner} is the only policy run that keeps C1-C3 ({self.rate:.3f} samples/s)"
        else:
            head = (f"verdict: {self.winner} is the fastest policy that keeps C1-C3 ({self.rate:.3f} samples/s), "
                    f"{self.margin:.2f}x the next, {self.runner_up} ({self.rate / self.margin:.3f})")
        parts = [head]
        s = self.sensitivity
        if s is not None and self.winner is not None and s.total:
            pct = f"{s.spread:.0%}"
            if s.kept == s.total:
                parts.append(f"the winner holds under all {s.total} cost perturbations of +/-{pct}")
            else:
                flips = ", ".join(f"{name}: {w}" for name, w in s.flips)
                parts.append(f"the winner holds under {s.kept} of {s.total} cost perturbations of +/-{pct} "
                             f"(not under {flips})")
        for name, contracts, rate in self.unranked:
            faster = f", faster at {rate:.3f} samples/s" if self.winner is not None and rate > self.rate else ""
            parts.append(f"{name} breaks {'/'.join(contracts)} and is not ranked{faster}")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        s = self.sensitivity
        return {"winner": self.winner, "samples_per_s": self.rate, "runner_up": self.runner_up,
                "margin": self.margin, "line": self.line(),
                "unranked": [{"policy": n, "breaks": c, "samples_per_s": r} for n, c, r in self.unranked],
                "sensitivity": None if s is None else {"kept": s.kept, "total": s.total, "spread": s.spread,
                                                       "flips": [list(f) for f in s.flips]}}


def verdict(runs: list[dict], sensitivity: Sensitivity | None = None) -> Verdict:
    order = ranked(runs)
    unranked = [(r["policy"], broken(r["metrics"]), r["metrics"]["e2e_samples_per_s"]) for r in runs
                if broken(r["metrics"])]
    if not order:
        return Verdict(None, float("nan"), None, float("nan"), unranked, sensitivity)
    top = order[0]
    rate = top["metrics"]["e2e_samples_per_s"]
    if len(order) == 1:
        return Verdict(top["policy"], rate, None, float("nan"), unranked, sensitivity)
    nxt = order[1]
    other = nxt["metrics"]["e2e_samples_per_s"]
    margin = rate / other if other > 0 else float("inf")
    return Verdict(top["policy"], rate, nxt["policy"], margin, unranked, sensitivity)


def winner_of(rates: dict[str, float]) -> str:
    """The fastest of {policy: samples/s} (ties: first given)."""
    return max(rates, key=lambda k: rates[k])
