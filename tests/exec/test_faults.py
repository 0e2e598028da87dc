"""Faults in the real executor (dora/exec/faults.py): real runs of the tiny model that survive

- a rollout actor killed with `ray.kill` mid-run (its trajectories lost and regenerated, a
  replacement actor back with the newest weights) and the trainer actor killed mid-step
  (restarted from its last checkpoint, exactly-once group consumption), on Ray;
- weight loads that fail part-way (retried; retired after too many failures), in-process;

each ending with C2 lost = duplicated = 0 and C3 = 0 in dora.metrics of the run's event log.
And the engine itself: after a failed load it serves nothing until a load succeeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dora.config import build
from dora.exec.run_config import ExecConfig
from dora.sched.registry import POLICIES, names
from dora.sched.record import recorded, replay

STEPS, B, G = 4, 2, 4


ALL = list(names())  # every registered policy


def _config(model, out, runtime: str, faults: dict, backend: str = "hf", policies=("dora",), **extra) -> ExecConfig:
    return build(ExecConfig, {
        "model": str(model), "policies": list(policies), "steps": STEPS, "out": str(out), "runtime": runtime,
        "rollout": {"instances": 2, "backend": backend, "max_num_seqs": 16, "max_model_len": 512},
        "task": {"num_prompts": 64, "max_new_tokens": 96},
        "trainer": {"threads": 1},
        "policy": {"eta": 2, "batch_size": B, "group_size": G, "sync": {"colocated": False},
                   "dora": {"repartition_load": 0.75}},
        "faults": faults, **extra,
    })


def _run(cfg: ExecConfig):
    from dora.exec.run import run_policies

    try:
        results = run_policies(cfg, progress=False)
    finally:
        if cfg.runtime == "ray":
            import ray

            ray.shutdown()
    return results[0] if len(results) == 1 else {r.policy: r for r in results}


@pytest.fixture(scope="module")
def killed_run(tiny_model_dir, tmp_path_factory):
    """On Ray: rollout actor 0 killed while it generates the first groups (a replacement comes
    back), and the trainer actor killed during step 3; checkpoints every step."""
    pytest.importorskip("ray")
    out = tmp_path_factory.mktemp("killed")
    cfg = _config(tiny_model_dir, out, "ray", {"kill_instance_at_step": 0, "kill_instance": 0,
                                                "restart_instances": True, "kill_trainer_at_step": 3},
                  checkpoint_every=1)
    return cfg, _run(cfg)


@pytest.fixture(scope="module")
def load_fail_run(tiny_model_dir, tmp_path_factory):
    """In-process: instance 0's first load (of version >= 1) fails once (retried), instance 1's
    first load of a version >= 2 fails 1 + load_retries times (retired); and the trainer killed
    during step 4 with checkpoints every 2 steps (the v2 checkpoint is complete by then: the
    local trainer runs its calls in order), so step 3 is re-trained before step 4 is redone."""
    out = tmp_path_factory.mktemp("loadfail")
    cfg = _config(tiny_model_dir, out, "local", {"load_fail_at": [[0, 1], [1, 2], [1, 2]], "load_retries": 1,
                                                  "kill_trainer_at_step": 4}, checkpoint_every=2)
    return cfg, _run(cfg)


def _guarantees(cfg, res, policy: str = "dora") -> None:
    m = res.metrics
    assert m["steps"] == STEPS and m["trained_samples"] == STEPS * B * G
    assert m["c2_lost"] == 0 and m["c2_duplicated"] == 0
    assert m["c3_violations"] == 0 and m["staleness_max"] <= cfg.policy.eta
    if policy != "partial":  # partial breaks C1 by design
        assert m["c1_violations"] == 0
    assert [s["step"] for s in res.steps] == list(range(1, STEPS + 1))
    # the same policy decisions when the log's events (failures included) are replayed
    assert replay(recorded(res.events), POLICIES[policy](cfg.policy)) == []


def _rows(df, event: str):
    return df[df["event"] == event]


@pytest.fixture(scope="module")
def every_policy_run(tiny_model_dir, tmp_path_factory):
    """In-process, each policy in turn: rollout instance 0 killed once version 1 is out (replaced)
    and the trainer killed during step 3, checkpoints every step."""
    out = tmp_path_factory.mktemp("every")
    cfg = _config(tiny_model_dir, out, "local", {"kill_instance_at_step": 1, "kill_instance": 0,
                                                  "restart_instances": True, "kill_trainer_at_step": 3},
                  policies=ALL, checkpoint_every=1)
    return cfg, _run(cfg)


@pytest.mark.parametrize("policy", ALL)
def test_every_policy_survives_killed_actors(every_policy_run, policy):
    cfg, runs = every_policy_run
    res = runs[policy]
    _guarantees(cfg, res, policy)
    df = res.events
    fail, lost = _rows(df, "fail"), _rows(df, "lost")
    assert list(fail["instance"]) == [0] and len(lost) >= 1 and set(lost["instance"]) == {0}
    assert set(lost["prompt_id"]) <= set(_rows(df, "regenerate")["prompt_id"])
    assert list(_rows(df, "recover")["instance"]) == [0]
    assert len(_rows(df, "trainer_restart")) == 1
    per = _rows(df, "train").groupby("prompt_id")["trainer_version"].agg(["size", "nunique"])
    assert (per["size"] == G).all() and (per["nunique"] == 1).all() and len(per) == STEPS * B


# ---- killed rollout actor -------------------------------------------------------------------

def test_killed_rollout_actor_is_survived(killed_run):
    cfg, res = killed_run
    _guarantees(cfg, res)
    df = res.events
    fail = _rows(df, "fail")
    assert list(fail["instance"]) == [0] and "injected kill" in fail["detail"].iloc[0]
    t_fail = float(fail["t_s"].iloc[0])
    lost = _rows(df, "lost")
    assert len(lost) >= 1 and set(lost["instance"]) == {0}
    assert (lost["t_s"] == t_fail).all() and (lost["detail"] == "instance failure").all()
    # every lost trajectory's group was regenerated, then trained once by other trajectories
    # (or still in flight at the end: `leftover`)
    regen = set(_rows(df, "regenerate").query("detail == 'lost'")["prompt_id"])
    assert set(lost["prompt_id"]) <= regen
    train = _rows(df, "train")
    assert set(lost["trajectory"]).isdisjoint(set(train["trajectory"]))
    assert set(lost["prompt_id"]) <= set(train["prompt_id"]) | set(_rows(df, "leftover")["prompt_id"])
    assert set(lost["prompt_id"]) & set(train["prompt_id"])
    # the policy heard it through the scheduler events the simulator sends
    sched = df[df["event"] == "sched"]["detail"].map(json.loads)
    kinds = [d["in"]["type"] for d in sched]
    assert kinds.count("InstanceFailed") == 1 and kinds.count("TrajectoryLost") == len(lost)
    assert kinds.count("InstanceRecovered") == 1
    # a replacement actor came back holding a published version (the newest when it was up)
    rec = _rows(df, "recover")
    assert list(rec["instance"]) == [0] and float(rec["t_s"].iloc[0]) > t_fail
    back, held = float(rec["t_s"].iloc[0]), int(rec["version"].iloc[0])
    published = [0] + _rows(df, "publish").query("t_s <= @back")["version"].astype(int).tolist()
    assert held in published
    # nothing ran on instance 0 between the failure and the recovery
    assert _rows(df, "dispatch").query("instance == 0 and @t_fail < t_s < @back").empty


# ---- killed and restarted trainer -----------------------------------------------------------

@pytest.mark.parametrize("run, step", [("killed_run", 3), ("load_fail_run", 4)])
def test_killed_trainer_resumes_with_exactly_once_consumption(request, run, step):
    """On Ray (checkpoint every step) and in-process (every 2 steps: one step re-trained)."""
    cfg, res = request.getfixturevalue(run)
    _guarantees(cfg, res)
    df = res.events
    rs = _rows(df, "trainer_restart")
    assert len(rs) == 1 and f"redo step {step}" in rs["detail"].iloc[0]
    assert int(rs["trainer_version"].iloc[0]) == step - 1
    if run == "load_fail_run":
        assert "checkpoint v2, re-trained 1 steps" in rs["detail"].iloc[0]
    train = _rows(df, "train")
    # every group trained in exactly one step, with all G samples; no trajectory twice
    per = train.groupby("prompt_id").agg(n=("trajectory", "size"), steps=("trainer_version", "nunique"))
    assert (per["n"] == G).all() and (per["steps"] == 1).all() and len(per) == STEPS * B
    assert train["trajectory"].is_unique
    # the final checkpoint's data state names the same groups, and the trainer did STEPS steps
    ckpt = Path(cfg.out) / "dora" / "checkpoint"  # the final one, written at the end of the run
    data = json.loads((ckpt / "data_state.json").read_text())
    assert data["version"] == STEPS and sorted(data["trained_groups"]) == sorted(per.index.tolist())
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["steps"] == STEPS and state["version"] == STEPS
    assert sum(r["count"] for r in state["staleness"]) == STEPS * B * G  # each trajectory consumed once


@pytest.mark.parametrize("sync", ["tensors", "checkpoint", "collective"])
def test_trainer_killed_while_publishing_is_restarted(tiny_model_dir, tmp_path, sync):
    """In-process: the trainer dies as it publishes version 3 (the weights it gathers, saves or
    broadcasts never reach the engines). A new trainer resumes from the v2 checkpoint, redoes step 3
    and publishes it; every version is published once, the step keeps its one train_end row, and
    every group is trained exactly once."""
    cfg = _config(tiny_model_dir, tmp_path, "local", {"kill_trainer_at_step": 3, "kill_trainer_during": "publish"},
                  checkpoint_every=1, rollout={"instances": 2, "backend": "hf", "max_num_seqs": 16,
                                               "max_model_len": 512, "weight_sync": sync})
    res = _run(cfg)
    _guarantees(cfg, res)
    df = res.events
    rs = _rows(df, "trainer_restart")
    assert len(rs) == 1
    assert "while publishing version 3" in rs["detail"].iloc[0] and "redo step 3" in rs["detail"].iloc[0]
    assert sorted(_rows(df, "publish")["version"].tolist()) == list(range(1, STEPS + 1))
    assert len(_rows(df, "train_start")) == len(_rows(df, "train_end")) == STEPS
    train = _rows(df, "train")
    assert train["trajectory"].is_unique and (train.groupby("prompt_id").size() == G).all()
    if sync == "collective":  # the cut broadcast is closed with nothing sent
        ends = _rows(df, "weight_sync_end")
        assert (ends["detail"].str.contains("the trainer died") & (ends["tokens"] == 0)).sum() == 1


def test_trainer_killed_while_idle_catching_up_a_replacement(tiny_model_dir, tmp_path):
    """In-process, collective sync: instance 0 dies once version 2 is out; its replacement comes
    back while the trainer waits for data (the trainer is idle most of this run), and the trainer
    dies as it sends the replacement the newest version. The replacement waits for the next
    publication; the next step's start finds the trainer dead and a new one redoes that step from
    the checkpoint. Whether the replacement is up while the trainer is idle depends on the host's
    speed (a slow host can have the trainer busy then, and the version goes with the next
    publication instead): up to three runs, each keeping C1-C3, one of which must hit the case."""
    for attempt in range(3):
        cfg = _config(tiny_model_dir, tmp_path / f"run{attempt}", "local",
                      {"kill_instance_at_step": 2, "kill_instance": 0, "restart_instances": True,
                       "kill_trainer_at_step": 1, "kill_trainer_during": "catch_up"}, checkpoint_every=1)
        res = _run(cfg)
        _guarantees(cfg, res)
        df = res.events
        assert sorted(_rows(df, "publish")["version"].tolist()) == list(range(1, STEPS + 1))
        ends = _rows(df, "weight_sync_end")
        cut = ends[ends["detail"].str.contains("the trainer died")]
        if len(cut):
            break
    assert len(cut) == 1, "in 3 runs the replacement always came back while the trainer was busy"
    assert int(cut["tokens"].iloc[0]) == 0 and "instances [0]" in cut["detail"].iloc[0]
    assert len(_rows(df, "trainer_restart")) == 1
    rec = _rows(df, "recover")
    assert list(rec["instance"]) == [0] and float(rec["t_s"].iloc[0]) > float(cut["t_s"].iloc[0])


def test_catch_up_kill_needs_a_replacement_over_collective_sync(tmp_path):
    from dora.errors import InputError

    faults = {"kill_trainer_at_step": 1, "kill_trainer_during": "catch_up"}
    with pytest.raises(InputError, match="catch_up happens only when a replacement engine catches up"):
        build(ExecConfig, {"model": str(tmp_path), "checkpoint_every": 1, "faults": faults}).validate()


# ---- failed weight loads --------------------------------------------------------------------

def test_failed_load_is_retried_or_the_instance_retired(load_fail_run):
    cfg, res = load_fail_run
    _guarantees(cfg, res)
    df = res.events
    lf = _rows(df, "load_fail")
    assert list(lf["instance"]).count(0) == 1 and list(lf["instance"]).count(1) == 2
    ends = _rows(df, "load_end")
    # instance 0: one failure, then the retry loaded that version
    f0 = lf.query("instance == 0")
    v0, t0 = int(f0["version"].iloc[0]), float(f0["t_s"].iloc[0])
    assert v0 >= 1 and len(ends.query("instance == 0 and version == @v0 and t_s >= @t0")) == 1
    # instance 1: 1 + load_retries failures of one version, then retired: it never loaded it nor ran again
    f1 = lf.query("instance == 1")
    v1 = int(f1["version"].iloc[0])
    assert v1 >= 2 and (f1["version"] == v1).all()
    fail = _rows(df, "fail")
    assert list(fail["instance"]) == [1] and "retired" in fail["detail"].iloc[0]
    t_ret = float(fail["t_s"].iloc[0])
    assert ends.query("instance == 1 and version >= @v1").empty
    assert _rows(df, "dispatch").query("instance == 1 and t_s > @t_ret").empty
    # no instance generated under a version before that version's load had completed there
    seg = df[df["event"].isin(["finish", "abort", "migrate_out", "interrupt", "lost", "end"])]
    for inst, version, t in zip(seg["instance"], seg["version"], seg["t_s"]):
        if version > 0:
            done = ends.query("instance == @inst and version == @version")
            assert len(done) and float(done["t_s"].min()) <= t, (inst, version, t)


def test_engine_serves_nothing_between_a_failed_and_a_good_load(tiny_ckpt, reference_model):
    """hf engine: a load cut short leaves it not serving (a request waits); the retry with the
    intact weights serves exactly the new weights (logprobs equal the reference's)."""
    import torch

    from dora.exec.engine import EngineConfig, GenRequest, SamplingConfig, make_engine
    from dora.exec.faults import cut_last_tensor
    from dora.exec.logprobs import sequence_logprobs

    eng = make_engine(EngineConfig(model=str(tiny_ckpt), backend="hf", device="cpu", max_num_seqs=4,
                                   max_model_len=256))
    try:
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in reference_model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
        state = {k: v.clone() for k, v in reference_model.state_dict().items() if k != "lm_head.weight"}
        with pytest.raises(Exception, match="shape"):
            eng.load_weights(1, cut_last_tensor(state))
        assert not eng.serving and eng.version == 0
        req = GenRequest("r", [40, 41, 42, 43], 24, 0, SamplingConfig(seed=0), stop_token_ids=())
        eng.submit(req)  # its version is the loaded one, but the weights are half-replaced: it waits
        assert eng.poll(timeout=0.3) == [] and eng.peek("r") is None  # held, not running
        assert eng.running_ids() == ["r"] and eng.num_running() == 0
        eng.load_weights(1, state)
        assert eng.serving and eng.version == 1
        (back,) = eng.poll(timeout=5)
        assert back.request_id == "r" and back.finish_reason == "abort" and back.token_ids == []
        eng.submit(GenRequest("s", [40, 41, 42, 43], 24, 1, SamplingConfig(seed=0), stop_token_ids=()))
        (res,) = eng.poll(timeout=60)
        ref = sequence_logprobs(reference_model, [res.prompt_ids + res.token_ids], [len(res.prompt_ids)])[0]
        assert len(res.token_ids) == 24 and res.versions == [1] * 24
        assert float((torch.tensor(res.logprobs) - ref).abs().max()) <= 1e-3
    finally:
        eng.close()


def test_local_runtime_kill_fails_calls_as_ray_does():
    """LocalRuntime.kill: the call running, the calls queued and every later call raise
    ActorDiedError (Ray: RayActorError); the actor's object is closed."""
    import threading

    from dora.exec.local_runtime import ActorDiedError, LocalActor, LocalRuntime

    class Body:
        def __init__(self):
            self.closed = threading.Event()

        def block(self, ev):
            ev.wait(10)
            return "done"

        def ping(self):
            return "pong"

        def close(self):
            self.closed.set()

    actor = LocalActor(Body).wait_built()
    assert LocalRuntime.get(actor.ping.remote()) == "pong"
    ev = threading.Event()
    running, queued = actor.block.remote(ev), actor.ping.remote()
    LocalRuntime.kill(actor)
    for fut in (running, queued, actor.ping.remote()):
        with pytest.raises(ActorDiedError):
            LocalRuntime.get(fut)
    ev.set()
    assert actor._obj.result().closed.wait(10)


# ---- the same on vLLM engines --------------------------------------------------------------

@pytest.mark.slow
def test_vllm_run_survives_killed_actors_and_a_failed_load(tiny_model_dir, tmp_path):
    """vLLM engines on Ray: rollout actor 0 killed (replaced), the trainer killed during step 3,
    and instance 1's first load fails inside vLLM's weight loader. vLLM cannot redo an in-place
    reload that failed part-way, so instance 1 is retired at once (no retry) and replaced."""
    pytest.importorskip("ray")
    pytest.importorskip("vllm")
    cfg = _config(tiny_model_dir, tmp_path, "ray", {"kill_instance_at_step": 0, "kill_instance": 0,
                                                    "restart_instances": True, "kill_trainer_at_step": 3,
                                                    "load_fail_at": [[1, 1]]},
                  backend="vllm", checkpoint_every=1)
    res = _run(cfg)
    _guarantees(cfg, res)
    df = res.events
    fail = _rows(df, "fail")
    assert sorted(fail["instance"]) == [0, 1] and len(_rows(df, "lost").query("instance == 0")) >= 1
    assert "cannot redo a load" in fail.query("instance == 1")["detail"].iloc[0]
    assert sorted(_rows(df, "recover")["instance"]) == [0, 1]
    assert len(_rows(df, "trainer_restart")) == 1
    lf = _rows(df, "load_fail")
    assert list(lf["instance"]) == [1] and "EngineStateLost" in lf["detail"].iloc[0]
    t_fail1 = float(fail.query("instance == 1")["t_s"].iloc[0])
    t_back1 = float(_rows(df, "recover").query("instance == 1")["t_s"].iloc[0])
    assert _rows(df, "dispatch").query("instance == 1 and @t_fail1 < t_s < @t_back1").empty


# ---- the knobs --------------------------------------------------------------------------------

@pytest.mark.parametrize("override, needle", [
    ("faults.kill_instance_at_step=-2", "faults.kill_instance_at_step"),
    ("faults.kill_instance=5", "faults.kill_instance: 5 does not exist"),
    ("faults.kill_instance_at_step=3", "never reached"),
    ("faults.kill_trainer_at_step=2", "checkpoint_every"),
    ("faults.kill_trainer_at_step=0", "faults.kill_trainer_at_step"),
    ("faults.load_fail_at=[[0]]", "faults.load_fail_at[0]"),
    ("faults.load_retries=-1", "faults.load_retries"),
    ("faults.kill_everything=1", "unknown key"),
])
def test_bad_fault_knobs_exit_2_with_one_line(tiny_model_dir, tmp_path, capsys, override, needle):
    from dora.exec.__main__ import main

    args = ["--model", str(tiny_model_dir), "--out", str(tmp_path / "run"), "--steps", "3",
            "--set", "faults.kill_instance_at_step=1", "--set", override]
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "run").exists()
