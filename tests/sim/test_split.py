"""--gpus N: trainer shares (hand-computed), the colocated/disaggregated device counts, the search."""

from __future__ import annotations

import pytest

from dora.errors import InputError
from dora.sim.split import Split, check_gpus, config_for, refine, search, trainer_options
from dora.trace import load_trace
from tests.conftest import small_config


def test_trainer_options_by_hand():
    assert trainer_options(256, 1) == [32, 64, 96, 128, 160, 192, 224]
    # 128 devices, 2 per instance: rollout devices 128 * 7/8 = 112 -> 56 instances, T = 16; ...
    assert trainer_options(128, 2) == [16, 32, 48, 64, 80, 96, 112]
    # 10 devices, 4 per instance: 10 * 7/8 / 4 = 2.19 -> 2 instances (T = 2); 10 * 1/8 / 4 -> at least 1 (T = 6)
    assert trainer_options(12, 4) == [4, 8]
    assert trainer_options(8, 2, splits=4) == [2, 4, 6]


def test_refine_takes_midpoints_of_the_neighbours():
    tried = [32, 64, 96, 128]
    assert refine(64, tried, 256, 1) == [48, 80]
    assert refine(32, tried, 256, 1) == [16, 48]  # below the first: halfway to 1 trainer device
    assert refine(128, tried, 256, 1) == [112, 192]  # above the last: halfway to 255
    assert refine(64, tried, 256, 4) == [48, 80]  # multiples of 4 rollout devices


@pytest.mark.parametrize("gpus, dpi, what", [(3, 2, "at least 2 x 2"), (9, 2, "not a multiple")])
def test_bad_device_counts_are_refused(gpus, dpi, what):
    with pytest.raises(InputError, match=what):
        check_gpus(gpus, dpi)


def test_each_split_uses_all_devices(small_trace):
    cfg = small_config(small_trace, policies=["sync", "one_step", "dora"], steps=3)
    trace = load_trace(small_trace)
    best, rows = search(cfg, trace, 16, splits=4, quiet=True)
    dpi = cfg.cluster.devices_per_instance
    for r in rows:
        n = r["instances"] * dpi + r["trainer_devices"]
        assert n == 16, r
    assert best["sync"].colocated and not best["dora"].colocated
    assert sum(1 for r in rows if r["policy"] == "sync") == 1  # colocated: nothing to search
    dora_ts = sorted(r["trainer_devices"] for r in rows if r["policy"] == "dora")
    assert dora_ts[:3] == sorted(set(dora_ts))[:3] and {4, 8, 12} <= set(dora_ts)
    top = max((r for r in rows if r["policy"] == "dora"), key=lambda r: r["e2e_samples_per_s"])
    assert best["dora"] == Split(top["instances"], top["trainer_devices"], False)
    c = config_for(cfg, best["dora"]).cluster
    assert (c.instances, c.trainer_devices) == (best["dora"].instances, best["dora"].trainer_devices)
