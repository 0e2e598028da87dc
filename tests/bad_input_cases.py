"""The per-CLI bad-input rows (each a command line that must exit 2 with one line on stderr and
write nothing), the input files they name under IN/ (`make_inputs`) and how a row's IN/ and OUT/
become real paths. The rows by family are in tests/bad_input_families.py; the tests and the docs
table in tests/test_bad_input.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

@dataclass(frozen=True)
class Row:
    module: str  # python -m MODULE
    args: tuple[str, ...]  # IN/ and OUT/ are replaced by the input and output folders
    needle: str  # must appear in the error line
    what: str  # the input tried, in words

    @property
    def id(self) -> str:
        sub = " sweep" if self.args[:1] == ("sweep",) else ""
        return f"{self.module.split('.')[-1]}{sub}: {self.what}"


def _r(module: str, what: str, needle: str, *args: str) -> Row:
    return Row(module, tuple(args), needle, what)


SIM, SWEEP, TRACE, PLOTS, PRESETS, EXEC = "dora.sim", "dora.sim", "dora.trace", "dora.plots", "dora.sim.presets", \
    "dora.exec"
T = ("--trace", "IN/trace.parquet", "--batch-size", "2", "--instances", "2", "--max-seqs", "4",
     "--trainer-devices", "1", "--steps", "2")  # a valid small run (a row's own flags come later and win)
OUTS = ("--json", "OUT/runs.json", "--events", "OUT/ev.parquet", "--quiet")  # outputs that must not appear
SW = ("sweep", *T, "--out", "OUT/s.parquet", "--quiet", "--jobs", "1")
EV = "IN/events.parquet"  # a valid event log
M = ("--model", "IN/model", "--out", "OUT/run", "--json", "OUT/runs.json")  # a checkpoint directory (shallow)

ROWS: list[Row] = [
    # ---- python -m dora.sim: flags
    _r(SIM, "--instances abc (not an integer)", "invalid int value", *T, "--instances", "abc", *OUTS),
    _r(SIM, "--instances 0", "instances", *T, "--instances", "0", *OUTS),
    _r(SIM, "--devices-per-instance 0", "devices_per_instance", *T, "--devices-per-instance", "0", *OUTS),
    _r(SIM, "--max-seqs 0", "must be >= 1 decode slot, or auto", *T, "--max-seqs", "0", *OUTS),
    _r(SIM, "--trainer-devices -1", "trainer_devices", *T, "--trainer-devices", "-1", *OUTS),
    _r(SIM, "--steps 1", "steps", *T, "--steps", "1", *OUTS),
    _r(SIM, "--eta -1", "eta", *T, "--eta", "-1", *OUTS),
    _r(SIM, "--batch-size 0", "batch_size", *T, "--batch-size", "0", *OUTS),
    _r(SIM, "--batch-size larger than the trace's groups", "batch_size", *T, "--batch-size", "1000", *OUTS),
    _r(SIM, "--seed 1.5", "invalid int value", *T, "--seed", "1.5", *OUTS),
    _r(SIM, "--policy fifo (unknown policy)", "invalid choice", *T, "--policy", "fifo", *OUTS),
    _r(SIM, "--policy one_step with --eta 0", "eta", *T, "--policy", "one_step", "--eta", "0", *OUTS),
    _r(SIM, "--hardware without --model", "--model", *T, "--hardware", "H800", *OUTS),
    _r(SIM, "--hardware B300 (unknown preset)", "B300", *T, "--hardware", "B300", "--model", "qwen2.5-7b", *OUTS),
    _r(SIM, "--model llama (unknown preset)", "llama", *T, "--hardware", "H800", "--model", "llama", *OUTS),
    _r(SIM, "--mtbf-s -1", "mtbf_s", *T, "--mtbf-s", "-1", *OUTS),
    _r(SIM, "--repair-s 0", "repair_s", *T, "--repair-s", "0", *OUTS),
    # ---- dora.sim: trace files
    _r(SIM, "--trace of a missing file", "not found", "--trace", "IN/missing.parquet", *OUTS),
    _r(SIM, "--trace of a text file", "not a readable parquet", "--trace", "IN/text.parquet", *OUTS),
    _r(SIM, "--trace of a parquet with other columns", "prompt_id", "--trace", "IN/wrong_schema.parquet", *OUTS),
    _r(SIM, "--trace with float lengths", "response_len", "--trace", "IN/float_len.parquet", *OUTS),
    _r(SIM, "--trace with a length 0", "response_len", "--trace", "IN/zero_len.parquet", *OUTS),
    _r(SIM, "--trace with a null length", "null", "--trace", "IN/null_len.parquet", *OUTS),
    _r(SIM, "--trace with ragged groups", "ragged", "--trace", "IN/ragged.parquet", *OUTS),
    _r(SIM, "--trace with no rows", "no rows", "--trace", "IN/empty.parquet", *OUTS),
    _r(SIM, "--trace with a trajectory of 0 turns", "turns", "--trace", "IN/zero_turns.parquet", *OUTS),
    _r(SIM, "--trace with more turns than tokens", "response_len", "--trace", "IN/many_turns.parquet", *OUTS),
    _r(SIM, "--trace with a negative tool wait", "tool_wait_s", "--trace", "IN/neg_wait.parquet", *OUTS),
    _r(SIM, "--trace with tool columns but no turns", "without a 'turns' column", "--trace",
       "IN/tools_no_turns.parquet", *OUTS),
    _r(SIM, "kv_tokens below the trace's longest trajectory", "kv_tokens", *T, "--set", "cluster.kv_tokens=2",
       *OUTS),
    # ---- dora.sim: YAML and --set
    _r(SIM, "--config of a missing file", "not found", *T, "--config", "IN/missing.yaml", *OUTS),
    _r(SIM, "--config with an unknown key", "bogus", *T, "--config", "IN/unknown_key.yaml", *OUTS),
    _r(SIM, "--config with an unknown nested key", "cluster.instancez", *T, "--config", "IN/nested_unknown.yaml",
       *OUTS),
    _r(SIM, "--config that is not YAML", "not valid YAML", *T, "--config", "IN/malformed.yaml", *OUTS),
    _r(SIM, "--config whose top level is a list", "mapping", *T, "--config", "IN/list.yaml", *OUTS),
    _r(SIM, "--config with cluster: {kv_tokens: lots}", "kv_tokens", *T, "--config", "IN/wrong_type.yaml", *OUTS),
    _r(SIM, "--cost with an unknown coefficient", "decode_bass_s", *T, "--cost", "IN/cost_unknown.yaml", *OUTS),
    _r(SIM, "--set without =VALUE", "KEY=VALUE", *T, "--set", "policy.eta", *OUTS),
    _r(SIM, "--set of an unknown key", "etta", *T, "--set", "policy.etta=2", *OUTS),
    _r(SIM, "--set of a section to a value", "policy", *T, "--set", "policy=3", *OUTS),
    _r(SIM, "--set cluster.instances=many", "instances", *T, "--set", "cluster.instances=many", *OUTS),
    _r(SIM, "--set policy.dora.predictor=oracle", "predictor", *T, "--set", "policy.dora.predictor=oracle", *OUTS),
    _r(SIM, "--set cost.decode_base_s=-1", "decode_base_s", *T, "--set", "cost.decode_base_s=-1", *OUTS),
    _r(SIM, "--set policies=[sync,sync]", "twice", *T, "--set", "policies=[sync,sync]", *OUTS),
    _r(SIM, "--set policy.laminar.repack_occupancy=0", "repack_occupancy", *T,
       "--set", "policy.laminar.repack_occupancy=0", *OUTS),
    _r(SIM, "--set faults.fail_at=[[1.0, 99]] (no instance 99)", "fail_at", *T,
       "--set", "faults.fail_at=[[1.0, 99]]", *OUTS),
    _r(SIM, "--set faults.fail_at=[[1.0]]", "fail_at", *T, "--set", "faults.fail_at=[[1.0]]", *OUTS),
    _r(SIM, "--set faults.load_fail_prob=1", "load_fail_prob", *T, "--set", "faults.load_fail_prob=1", *OUTS),
    # ---- dora.sim: outputs
    _r(SIM, "--json names a directory", "directory", *T, "--json", "OUT", "--quiet"),
    _r(SIM, "--plot OUT/x.txt (not an image type)", "x.txt", *T, "--plot", "OUT/x.txt", *OUTS),
    _r(SIM, "--perfetto OUT/x.png (not .json)", "x.png", *T, "--perfetto", "OUT/x.png", *OUTS),
    # ---- python -m dora.sim sweep
    _r(SWEEP, "no --grid", "empty grid", *SW),
    _r(SWEEP, "no --out", "--out", "sweep", *T, "--grid", "cluster.instances=1,2"),
    _r(SWEEP, "--grid without =", "KEY=V1", *SW, "--grid", "cluster.instances"),
    _r(SWEEP, "--grid of an unknown key", "instancez", *SW, "--grid", "cluster.instancez=1,2"),
    _r(SWEEP, "--grid of a section", "section", *SW, "--grid", "cluster=1,2"),
    _r(SWEEP, "--grid policies=...", "--policy", *SW, "--grid", "policies=sync,dora"),
    _r(SWEEP, "--grid with an empty value", "empty value", *SW, "--grid", "policy.eta=1,"),
    _r(SWEEP, "--grid linked keys with a missing part", "part", *SW, "--grid", "cluster.instances,policy.eta=1:2,3"),
    _r(SWEEP, "--grid with a repeated value", "twice", *SW, "--grid", "policy.eta=2,2"),
    _r(SWEEP, "--grid of a bad value", "instances", *SW, "--grid", "cluster.instances=2,0"),
    _r(SWEEP, "--grid hardware=B300", "B300", *SW, "--grid", "hardware=B300"),
    _r(SWEEP, "the same key on two axes", "more than one axis", *SW, "--grid", "policy.eta=1,2",
       "--grid", "policy.eta,steps=3:2,4:2"),
    _r(SWEEP, "--trace-param of an unknown parameter", "tail_alfa", *SW, "--trace-param", "tail_alfa=1,2"),
    _r(SWEEP, "--trace-preset without --trace-param", "--trace-preset", *SW, "--grid", "policy.eta=1,2",
       "--trace-preset", "moe_longtail"),
    _r(SWEEP, "--jobs 0", "--jobs", *SW, "--grid", "policy.eta=1,2", "--jobs", "0"),
    _r(SWEEP, "--out OUT/s.txt (not .parquet/.csv)", "file type", "sweep", *T, "--quiet",
       "--grid", "policy.eta=1,2", "--out", "OUT/s.txt"),
    _r(SWEEP, "--trace of a missing file", "not found", "sweep", "--trace", "IN/missing.parquet",
       "--grid", "policy.eta=1,2", "--out", "OUT/s.parquet", "--quiet"),
    # ---- python -m dora.trace
    _r(TRACE, "no subcommand", "required", ),
    _r(TRACE, "unknown subcommand", "invalid choice", "merge"),
    _r(TRACE, "generate without --out", "--out", "generate", "--steps", "2"),
    _r(TRACE, "generate --steps 0", "steps", "generate", "--out", "OUT/t.parquet", "--steps", "0"),
    _r(TRACE, "generate --steps abc", "steps", "generate", "--out", "OUT/t.parquet", "--steps", "abc"),
    _r(TRACE, "generate --rho 2", "rho", "generate", "--out", "OUT/t.parquet", "--rho", "2"),
    _r(TRACE, "generate --tail-alpha -1", "tail_alpha", "generate", "--out", "OUT/t.parquet", "--tail-alpha", "-1"),
    _r(TRACE, "generate --turns-mean 0.5", "turns_mean", "generate", "--out", "OUT/t.parquet", "--turns-mean", "0.5"),
    _r(TRACE, "generate --mix-share 0.3 without --mix-median", "mix_median", "generate", "--out", "OUT/t.parquet",
       "--mix-share", "0.3"),
    _r(TRACE, "generate --preset huge", "invalid choice", "generate", "--out", "OUT/t.parquet", "--preset", "huge"),
    _r(TRACE, "generate --out a directory", "directory", "generate", "--out", "OUT", "--steps", "2"),
    _r(TRACE, "generate --out OUT/t.csv (not .parquet)", "t.csv", "generate", "--out", "OUT/t.csv", "--steps", "2"),
    _r(TRACE, "stats of a missing file", "not found", "stats", "IN/missing.parquet"),
    _r(TRACE, "stats of a text file", "not a readable parquet", "stats", "IN/text.parquet"),
    _r(TRACE, "stats of a parquet with other columns", "prompt_id", "stats", "IN/wrong_schema.parquet"),
    _r(TRACE, "stats of a trace with ragged groups", "ragged", "stats", "IN/ragged.parquet"),
    # ---- python -m dora.plots
    _r(PLOTS, "no subcommand", "required"),
    _r(PLOTS, "unknown plot", "invalid choice", "pie", EV, "--out", "OUT/p.png"),
    _r(PLOTS, "timeline without --out", "--out", "timeline", EV),
    _r(PLOTS, "timeline of a missing file", "not found", "timeline", "IN/missing.parquet", "--out", "OUT/t.png"),
    _r(PLOTS, "timeline of a text file", "readable parquet", "timeline", "IN/text.parquet", "--out", "OUT/t.png"),
    _r(PLOTS, "timeline of a trace (not an event log)", "column", "timeline", "IN/trace.parquet",
       "--out", "OUT/t.png"),
    _r(PLOTS, "timeline --out OUT/t.txt", "t.txt", "timeline", EV, "--out", "OUT/t.txt"),
    _r(PLOTS, "timeline --out a directory", "directory", "timeline", EV, "--out", "OUT"),
    _r(PLOTS, "timeline --bins 0", "--bins", "timeline", EV, "--out", "OUT/t.png", "--bins", "0"),
    _r(PLOTS, "timeline --window 5 1 (end before start)", "window", "timeline", EV, "--out", "OUT/t.png",
       "--window", "5", "1"),
    _r(PLOTS, "timeline --window a b", "invalid float value", "timeline", EV, "--out", "OUT/t.png",
       "--window", "a", "b"),
    _r(PLOTS, "timeline --step 99 (past the run)", "step 99", "timeline", EV, "--out", "OUT/t.png", "--step", "99"),
    _r(PLOTS, "timeline --step 0", "step 0", "timeline", EV, "--out", "OUT/t.png", "--step", "0"),
    _r(PLOTS, "perfetto of two logs", "one event log", "perfetto", EV, EV, "--out", "OUT/p.json"),
    _r(PLOTS, "perfetto --out OUT/p.png", "p.png", "perfetto", EV, "--out", "OUT/p.png"),
    _r(PLOTS, "lengths of a text file", "readable parquet", "lengths", "IN/text.parquet", "--out", "OUT/l.png"),
    _r(PLOTS, "sweep of a missing table", "not found", "sweep", "IN/missing.csv", "--out", "OUT/s.png"),
    _r(PLOTS, "sweep --x of a column the table lacks", "nope", "sweep", "IN/table.csv", "--x", "nope",
       "--out", "OUT/s.png"),
    _r(PLOTS, "sweep of a table without metrics", "e2e_samples_per_s", "sweep", "IN/not_a_sweep.csv",
       "--out", "OUT/s.png"),
    # ---- python -m dora.sim.presets
    _r(PRESETS, "no --model", "--model", "--hardware", "H800"),
    _r(PRESETS, "--hardware B300", "B300", "--hardware", "B300", "--model", "qwen2.5-7b"),
    _r(PRESETS, "--model llama", "llama", "--hardware", "H800", "--model", "llama"),
    _r(PRESETS, "--devices-per-instance -1", "devices", "--hardware", "H800", "--model", "qwen2.5-7b",
       "--devices-per-instance", "-1"),
    _r(PRESETS, "--devices-per-instance 1 for a model that does not fit", "cannot hold", "--hardware", "H800",
       "--model", "longcat-flash", "--devices-per-instance", "1"),
    _r(PRESETS, "--yaml names a directory", "directory", "--hardware", "H800", "--model", "qwen2.5-7b",
       "--yaml", "OUT"),
    # ---- python -m dora.exec (every row fails before an engine or Ray starts)
    _r(EXEC, "no --model", "model", "--out", "OUT/run", "--json", "OUT/runs.json"),
    _r(EXEC, "--model of a missing path", "not found", "--model", "IN/no_such_model", "--out", "OUT/run"),
    _r(EXEC, "--model of a file", "is a file", "--model", "IN/text.parquet", "--out", "OUT/run"),
    _r(EXEC, "--model of a directory without config.json", "config.json", "--model", "IN", "--out", "OUT/run"),
    _r(EXEC, "--model whose config.json is not JSON", "JSON", "--model", "IN/model_badjson", "--out", "OUT/run"),
    _r(EXEC, "--model without weights", "weights", "--model", "IN/model_noweights", "--out", "OUT/run"),
    _r(EXEC, "--model with a truncated safetensors file", "safetensors", "--model", "IN/model_badweights",
       "--out", "OUT/run"),
    _r(EXEC, "--policy fifo", "invalid choice", *M, "--policy", "fifo"),
    _r(EXEC, "--instances 0", "instances", *M, "--instances", "0"),
    _r(EXEC, "--backend tgi", "invalid choice", *M, "--backend", "tgi"),
    _r(EXEC, "--steps 1", "steps", *M, "--steps", "1"),
    _r(EXEC, "--group-size 0", "group_size", *M, "--group-size", "0"),
    _r(EXEC, "--eta x", "invalid int value", *M, "--eta", "x"),
    _r(EXEC, "--set rollout.dtype=fp8", "dtype", *M, "--set", "rollout.dtype=fp8"),
    _r(EXEC, "--set rollout.temperature=0", "temperature", *M, "--set", "rollout.temperature=0"),
    _r(EXEC, "--set trainer.lr=0", "lr", *M, "--set", "trainer.lr=0"),
    _r(EXEC, "--set trainer.betas=[0.9]", "betas", *M, "--set", "trainer.betas=[0.9]"),
    _r(EXEC, "--set trainer.loss.correction=none", "correction", *M, "--set", "trainer.loss.correction=none"),
    _r(EXEC, "--set task.reward=bleu", "reward", *M, "--set", "task.reward=bleu"),
    _r(EXEC, "--set task.max_new_tokens above max_model_len", "max_model_len", *M,
       "--set", "task.max_new_tokens=4096"),
    _r(EXEC, "--set runtime=k8s", "runtime", *M, "--set", "runtime=k8s"),
    _r(EXEC, "--local with nccl weight sync", "nccl", *M, "--local", "--set", "rollout.weight_sync_backend=nccl"),
    _r(EXEC, "--set rollout.kv_connector=true on the hf backend", "kv_connector", *M, "--backend", "hf",
       "--set", "rollout.kv_connector=true"),
    _r(EXEC, "laminar's repack_kv on vllm without the KV connector", "repack_kv", *M, "--policy", "laminar",
       "--set", "policy.laminar.repack_kv=true"),
    _r(EXEC, "--set policy.dora.versions_per_instance=2", "versions_per_instance", *M,
       "--set", "policy.dora.versions_per_instance=2"),
    _r(EXEC, "--config with an unknown key", "bogus", *M, "--config", "IN/unknown_key.yaml"),
    _r(EXEC, "--policy-config with an unknown key", "etaa", *M, "--policy-config", "IN/policy_unknown.yaml"),
    _r(EXEC, "--dataset of a missing file", "not found", *M, "--dataset", "IN/missing.jsonl"),
    _r(EXEC, "--dataset of a .txt file", "format", *M, "--dataset", "IN/data.txt"),
    _r(EXEC, "--dataset with a line that is not JSON", "JSON", *M, "--dataset", "IN/bad.jsonl"),
    _r(EXEC, "--dataset parquet without prompt/answer", "prompt", *M, "--dataset", "IN/wrong_schema.parquet"),
    _r(EXEC, "--out names a file", "is a file", "--model", "IN/model", "--out", "IN/text.parquet"),
    _r(EXEC, "--json names a directory", "directory", "--model", "IN/model", "--json", "OUT"),
    _r(EXEC, "--set faults.kill_instance=5", "does not exist", *M, "--set", "faults.kill_instance_at_step=1",
       "--set", "faults.kill_instance=5"),
    _r(EXEC, "--set faults.kill_trainer_at_step=2 without checkpoint_every", "checkpoint_every", *M,
       "--set", "faults.kill_trainer_at_step=2"),
    _r(EXEC, "--set faults.load_fail_at=[[0]]", "load_fail_at[0]", *M, "--set", "faults.load_fail_at=[[0]]"),
    _r(EXEC, "--set faults.kill_everything=1", "unknown key", *M, "--set", "faults.kill_everything=1"),
    _r(EXEC, "--set checkpoint_every=-1", "checkpoint_every", *M, "--set", "checkpoint_every=-1"),
]


# ---------------------------------------------------------------- inputs


def _table(path: Path, cols: dict, schema: dict | None = None) -> None:
    pq.write_table(pa.table(cols) if schema is None else pa.table(cols, schema=pa.schema(schema)), path)


def make_inputs(d: Path) -> Path:
    """The files the rows name under IN/ (small, valid where the row is about something else)."""
    from dora.eventlog import write_events
    from dora.config import build
    from dora.sim.config import SimConfig
    from dora.sim.run import simulate
    from dora.trace import load_trace, write_trace

    d.mkdir(parents=True, exist_ok=True)
    n, g = 6, 2
    ok = {"prompt_id": np.repeat(np.arange(n, dtype=np.int64), g), "sample_idx": np.tile(np.arange(g, dtype=np.int32), n),
          "prompt_len": np.full(n * g, 8, np.int32), "response_len": np.arange(1, n * g + 1, dtype=np.int32) * 10}
    write_trace(d / "trace.parquet", ok, {"generator": "tests.test_bad_input"})
    (d / "text.parquet").write_text("prompt_id,sample_idx\n0,0\n")
    _table(d / "wrong_schema.parquet", {"a": [1, 2], "b": ["x", "y"]})
    _table(d / "float_len.parquet", {**ok, "response_len": ok["response_len"].astype(np.float64)})
    _table(d / "zero_len.parquet", {**ok, "response_len": np.where(np.arange(n * g) == 3, 0, ok["response_len"])})
    _table(d / "null_len.parquet", {**ok, "response_len": pa.array([None] + ok["response_len"][1:].tolist(), pa.int32())})
    _table(d / "ragged.parquet", {k: v[:-1] for k, v in ok.items()})
    _table(d / "empty.parquet", {k: v[:0] for k, v in ok.items()})
    turns = {"turns": np.full(n * g, 2, np.int32), "tool_wait_s": np.full(n * g, 1.5),
             "tool_tokens": np.full(n * g, 16, np.int32)}
    _table(d / "zero_turns.parquet", {**ok, **turns, "turns": np.where(np.arange(n * g) == 5, 0, 2).astype(np.int32)})
    _table(d / "many_turns.parquet", {**ok, **turns, "turns": np.where(np.arange(n * g) == 0, 11, 2).astype(np.int32)})
    _table(d / "neg_wait.parquet", {**ok, **turns, "tool_wait_s": np.where(np.arange(n * g) == 2, -1.0, 1.5)})
    _table(d / "tools_no_turns.parquet", {**ok, "tool_tokens": turns["tool_tokens"]})
    (d / "unknown_key.yaml").write_text("steps: 3\nbogus: 1\n")
    (d / "nested_unknown.yaml").write_text("cluster:\n  instancez: 4\n")
    (d / "malformed.yaml").write_text("steps: [1, 2\n")
    (d / "list.yaml").write_text("- 1\n- 2\n")
    (d / "wrong_type.yaml").write_text("cluster:\n  kv_tokens: lots\n")
    (d / "cost_unknown.yaml").write_text("decode_bass_s: 0.1\n")
    (d / "policy_unknown.yaml").write_text("policy:\n  etaa: 2\n")
    (d / "data.txt").write_text("count 3 to 1 : 3 2 1\n")
    (d / "bad.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": \n')
    (d / "not_a_sweep.csv").write_text("a,b\n1,2\n")
    (d / "table.csv").write_text("policy,policy.eta,e2e_samples_per_s\ndora,1,2.0\ndora,2,3.0\n")
    header = b'{"__metadata__":{}}'
    empty_st = len(header).to_bytes(8, "little") + header  # a valid safetensors file with no tensors
    qwen = json.dumps({"model_type": "qwen2"})
    for name, files in {"model": {"config.json": qwen, "model.safetensors": empty_st, "tokenizer.json": "{}"},
                        "model_badjson": {"config.json": "{model_type: qwen2", "model.safetensors": empty_st,
                                          "tokenizer.json": "{}"},
                        "model_noweights": {"config.json": qwen, "tokenizer.json": "{}"},
                        "model_badweights": {"config.json": qwen, "model.safetensors": b"\x00" * 4,
                                             "tokenizer.json": "{}"}}.items():
        (d / name).mkdir(exist_ok=True)
        for f, content in files.items():
            (d / name / f).write_bytes(content if isinstance(content, bytes) else content.encode())
    cfg = build(SimConfig, {"trace": str(d / "trace.parquet"), "steps": 2,
                            "cluster": {"instances": 2, "devices_per_instance": 1, "max_seqs": 4, "kv_tokens": 1000,
                                        "trainer_devices": 1}, "policy": {"eta": 1, "batch_size": 2}})
    write_events(simulate(load_trace(cfg.trace), cfg, "dora", progress=False).events, d / EV.split("/")[1])
    cfg3 = replace(cfg, steps=3)
    write_events(simulate(load_trace(cfg.trace), cfg3, "dora", progress=False).events, d / "ev3.parquet")
    return d


def argv(row: Row, inp: Path, out: Path) -> list[str]:
    return [a.replace("IN", str(inp), 1) if a == "IN" or a.startswith("IN/") else
            a.replace("OUT", str(out), 1) if a == "OUT" or a.startswith("OUT/") else a for a in row.args]

