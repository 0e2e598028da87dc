"""dora.parallel: the same results serially, on local processes and on a (local) Ray cluster."""

from __future__ import annotations

import pytest

from dora.errors import InputError
from dora.parallel import check_jobs, run_tasks
from dora.sim.run import run_metrics
from tests.conftest import small_config


def _tasks(trace):
    cfg = small_config(trace, steps=3)
    return [(cfg, p) for p in ("sync", "laminar", "dora")]


def _rates(results):
    return {k: m["e2e_samples_per_s"] for k, m in results}


def test_processes_give_the_serial_results(small_trace):
    tasks = _tasks(small_trace)
    serial = _rates(run_tasks(run_metrics, tasks, jobs=1, quiet=True))
    assert _rates(run_tasks(run_metrics, tasks, jobs=2, quiet=True)) == serial
    assert sorted(serial) == [0, 1, 2]


def test_ray_gives_the_serial_results(small_trace):
    pytest.importorskip("ray")
    tasks = _tasks(small_trace)[:2]
    serial = _rates(run_tasks(run_metrics, tasks, jobs=1, quiet=True))
    assert _rates(run_tasks(run_metrics, tasks, ray_address="local", quiet=True)) == serial


def test_unreachable_ray_cluster_is_one_line(small_trace):
    pytest.importorskip("ray")
    with pytest.raises(InputError, match="--ray-address 127.0.0.1:9: cannot connect to a Ray cluster there"):
        list(run_tasks(run_metrics, _tasks(small_trace)[:1], ray_address="127.0.0.1:9", quiet=True))


def test_jobs():
    assert check_jobs(3) == 3 and check_jobs(None) >= 1
    with pytest.raises(InputError, match="--jobs 0"):
        check_jobs(0)
