"""The cost-sensitivity pass: which coefficients each perturbation scales, and its count."""

from __future__ import annotations

import pytest

from dora.sim import sensitivity
from tests.conftest import small_config


def test_each_perturbation_scales_one_group(small_trace):
    cfg = small_config(small_trace)
    perts = sensitivity.perturbations(cfg, 0.2)
    assert [n for n, _ in perts] == ["rollout x0.8", "rollout x1.2", "training x0.8", "training x1.2",
                                     "weights x0.8", "weights x1.2"]
    base = cfg.cost
    for (name, pc), (group, f) in zip(perts, [(g, f) for g in sensitivity.GROUPS for f in (0.8, 1.2)]):
        for key in vars(base):
            want = getattr(base, key) * f if key in sensitivity.GROUPS[group] else getattr(base, key)
            assert getattr(pc.cost, key) == pytest.approx(want), (name, key)


def test_check_counts_the_perturbations_that_keep_the_winner(small_trace):
    cfg = small_config(small_trace, steps=3)
    s = sensitivity.check({"sync": cfg, "dora": cfg}, "dora", 0.2, quiet=True)
    assert s.total == 6 and s.kept + len(s.flips) == 6 and s.spread == 0.2
    s = sensitivity.check({"sync": cfg, "dora": cfg}, "nobody", 0.2, quiet=True)
    assert s.kept == 0 and len(s.flips) == 6
