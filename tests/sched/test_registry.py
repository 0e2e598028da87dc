"""The policy registry: a sixth policy is one file (a class, its config dataclass, one `register`
call), and both bodies, the CLI, its config keys and the plots pick it up from there."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from dora.config import build, to_dict
from dora.errors import InputError
from dora.sched.config import PolicyConfig
from dora.sched.registry import POLICIES, names, register, unregister
from dora.sched.state import GroupView, InstView
from dora.sched.streaming import StreamingPolicy


# ---- the whole of a new policy -----------------------------------------------------------------
@dataclass
class DrainRefreshConfig:
    eager: bool = True  # refresh drained instances at each publication (False: only as work finishes)

    def validate(self) -> None:
        pass


class DrainRefreshPolicy(StreamingPolicy):
    """Stream; an instance loads the newest version once it has drained (laminar without repack)."""

    name = "drain_refresh"

    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__(cfg)
        self.eager = cfg.drain_refresh.eager

    def _refresh(self, inst: InstView) -> None:
        latest = self.view.latest_version
        if inst.alive and inst.loading < 0 and latest not in inst.versions and not inst.active:
            self.load(inst, latest)

    def on_start(self) -> None:
        self.admit()

    def on_published(self, version: int) -> None:
        if self.eager:
            for inst in self.view.instances.values():
                self._refresh(inst)
        self.admit()

    def after_finish(self, traj: int, inst: InstView, group_done: GroupView | None) -> None:
        self._refresh(inst)

    def after_aborts(self) -> None:
        for inst in self.view.instances.values():
            self._refresh(inst)

    def on_loaded(self, inst: InstView, version: int) -> None:
        self._refresh(inst)
        self.admit()

    def on_instance_recovered(self, inst: InstView) -> None:
        self._refresh(inst)
        super().on_instance_recovered(inst)

    def ready_batch(self) -> list[GroupView] | None:
        if len(self.view.buffer) < self.B or self.any_overdue(self.inflight.values()):
            return None
        if not self.staleness_ok_counts(self.stalest_counts(self.B)):
            return None
        return self.stalest_first(self.B)


# ---- the tests -----------------------------------------------------------------------------------
@pytest.fixture
def sixth():
    register(DrainRefreshPolicy, DrainRefreshConfig)
    yield "drain_refresh"
    unregister("drain_refresh")
    assert "drain_refresh" not in names() and "drain_refresh" not in PolicyConfig.SECTION_TYPES


def test_built_ins_in_their_order():
    assert names()[:5] == ("sync", "one_step", "partial", "laminar", "dora")
    assert set(PolicyConfig.SECTION_TYPES) >= {"sync", "partial", "laminar", "dora"}


def test_its_config_keys_sit_beside_the_others(sixth):
    pc = build(PolicyConfig, {"eta": 2, "drain_refresh": {"eager": False}, "dora": {"consolidate": False}})
    assert pc.drain_refresh.eager is False and pc.dora.consolidate is False and pc.laminar.repack is True
    d = to_dict(pc)
    assert d["drain_refresh"] == {"eager": False} and "sections" not in d
    assert build(PolicyConfig, d) == pc  # round trip
    with pytest.raises(InputError, match="drain_refresh.eager: expected true/false"):
        build(PolicyConfig, {"drain_refresh": {"eager": "maybe"}})
    with pytest.raises(InputError, match="no_such_policy: unknown key"):
        build(PolicyConfig, {"no_such_policy": {}})


def test_a_name_is_registered_once():
    class Other(DrainRefreshPolicy):
        name = "dora"

    with pytest.raises(ValueError, match="registered already"):
        register(Other)


def test_the_simulator_runs_it_from_the_command_line(sixth, small_trace, tmp_path):
    from dora.sim.__main__ import main

    out = tmp_path / "r.json"
    assert main(["--trace", str(small_trace), "--instances", "8", "--trainer-devices", "4", "--max-seqs", "16",
                 "--batch-size", "8", "--eta", "2", "--steps", "4", "--policy", "laminar", "--policy", sixth,
                 "--set", "policy.drain_refresh.eager=true", "--set", "policy.laminar.repack=false",
                 "--json", str(out), "--quiet"]) == 0
    runs = {r["policy"]: r for r in json.loads(out.read_text())["runs"]}
    m = runs[sixth]["metrics"]
    assert m["steps"] == 4 and m["trained_samples"] == 4 * 8 * 8
    assert m["c1_violations"] == m["c2_lost"] == m["c2_duplicated"] == m["c3_violations"] == 0
    assert runs[sixth]["config"]["policy"]["eager"] is True  # its own section, in the run's config
    # eager, it is laminar without repack, decision for decision
    assert m["e2e_samples_per_s"] == runs["laminar"]["metrics"]["e2e_samples_per_s"]
    assert m["weight_loads"] == runs["laminar"]["metrics"]["weight_loads"]


def test_plots_give_it_a_colour_of_its_own(sixth):
    from dora.plots.style import policy_color, policy_order

    assert policy_order()[-1] == sixth
    assert policy_color(sixth) not in {policy_color(p) for p in names()[:5]}


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from dora.exec.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_the_executor_runs_it(sixth, tiny_model_dir, tmp_path):
    """In-process runtime, transformers engines: the same registry entry, the same config key."""
    from dora.exec.run import run_policies
    from dora.exec.run_config import ExecConfig

    cfg = build(ExecConfig, {
        "model": str(tiny_model_dir), "policies": [sixth], "steps": 2, "out": str(tmp_path / "exec"),
        "runtime": "local", "rollout": {"instances": 2, "backend": "hf", "max_num_seqs": 16, "max_model_len": 512},
        "task": {"num_prompts": 32, "max_new_tokens": 48}, "trainer": {"threads": 1},
        "policy": {"eta": 2, "batch_size": 2, "group_size": 4, "drain_refresh": {"eager": False}}})
    (res,) = run_policies(cfg, progress=False)
    m = res.metrics
    assert res.policy == sixth and res.config["policy"]["eager"] is False
    assert m["steps"] == 2 and m["trained_samples"] == 2 * 2 * 4
    assert m["c1_violations"] == m["c2_lost"] == m["c2_duplicated"] == m["c3_violations"] == 0


def test_each_built_in_config_sits_beside_its_policy_uncompiled():
    """`policy.<name>.*` defaults live in dora/sched/policies/<name>_config.py, a plain Python module
    (mypyc would drop the `Literal` annotations the config loader reads)."""
    import sys

    for name in ("sync", "partial", "laminar", "dora"):
        cls = PolicyConfig.SECTION_TYPES[name]
        assert cls.__module__ == f"dora.sched.policies.{name}_config"
        assert sys.modules[cls.__module__].__file__.endswith(f"{name}_config.py")
    assert "one_step" not in PolicyConfig.SECTION_TYPES  # no knobs of its own
