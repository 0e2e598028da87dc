"""Hypothesis strategies for the CLI fuzzer (tests/test_fuzz.py): argv for every entry point,
built from a valid small command plus drawn flags whose values are numbers (negative, zero, NaN,
infinite, huge), words, input files (valid, broken, or written for the example: YAML configs,
traces, profiles) and output paths (valid, a folder, under a file, a dangling link, a name too
long, a read-only place, a wrong suffix).

An argv is a list of str in which `IN/` names the shared inputs (tests/test_bad_input's
make_inputs), `EX/` the example's own written files and `OUT/` its output folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from hypothesis import strategies as st

from tests.bad_input_cases import EV, M, T

NUMBERS = ["0", "1", "2", "3", "-1", "-7", "1.5", "0.25", "nan", "inf", "-inf", "1e999", "1e-300",
           "99999999999999", "4096", "2147483648", "0x10", "1_000", " 2", ""]
WORDS = ["abc", "é", "x" * 300, "-", "--", "null", "true", "[1, 2]", "{a: 1}", "sync", "dora", "H800",
         "qwen2.5-7b", "moe_longtail", "cluster.instances", "a=b", "%s", "../", "\t"]
IN_FILES = ["IN/trace.parquet", "IN/text.parquet", "IN/missing.parquet", "IN/ragged.parquet", "IN/empty.parquet",
            "IN/null_len.parquet", "IN/zero_len.parquet", "IN/many_turns.parquet", EV, "IN/ev3.parquet",
            "IN/ev_noeta.parquet", "IN/ev_badmeta.parquet", "IN/ev_nodevices.parquet", "IN/trace_badmeta.parquet",
            "IN/trace_badcv.parquet", "IN/table.csv", "IN/not_a_sweep.csv", "IN/profile.json", "IN/prof_nan.json",
            "IN/prof_ragged.json", "IN/unknown_key.yaml", "IN/not_utf8.yaml", "IN/dup_key.yaml", "IN/nan.yaml",
            "IN/null_policy.yaml", "IN/scalar_policy.yaml", "IN/dangling.yaml", "IN", "IN/model", "IN/data.txt",
            "IN/bad.jsonl"]
CONFIG_KEYS = ["steps", "seed", "trace", "policies", "reference", "cluster", "cluster.instances", "cluster.max_seqs",
               "cluster.kv_tokens", "cluster.trainer_devices", "cluster.devices_per_instance", "cost",
               "cost.decode_base_s", "cost.weight_load_s", "cost.moe_imbalance_cv", "cost.host_cores", "policy",
               "policy.eta", "policy.batch_size", "policy.group_size", "policy.dora.repartition_load",
               "policy.dora.versions_per_instance", "policy.laminar.repack_occupancy", "faults.mtbf_s",
               "faults.repair_s", "faults.fail_at", "faults.load_fail_prob", "weights", "imbalance", "bogus",
               "rollout.instances", "rollout.backend", "trainer.lr", "task.dataset", "runtime", "out"]
EXT = {"json": ".json", "parquet": ".parquet", "png": ".png", "csv": ".csv", "yaml": ".yaml"}


def numbers() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(NUMBERS), st.integers(-(2 ** 63), 2 ** 64).map(str),
                     st.floats(allow_nan=True, allow_infinity=True).map(repr))


def small_ints() -> st.SearchStrategy[str]:
    """Values a run takes (so that drawn commands also get past validation and run)."""
    return st.integers(0, 6).map(str)


def words() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(WORDS), st.text(st.characters(exclude_characters="\x00"), max_size=12))


def out_path(ext: str) -> st.SearchStrategy[str]:
    """An output path: mostly fine, else one that must be refused before any work."""
    suffix = EXT[ext]
    return st.sampled_from([f"OUT/a{suffix}", f"OUT/new/dir/a{suffix}", "OUT", f"IN/text.parquet/a{suffix}",
                            "IN/dangling.json" if ext == "json" else f"IN/dangling_dir/a{suffix}",
                            f"OUT/{'n' * 300}{suffix}", f"/proc/dora-fuzz{suffix}", "OUT/a.txt", "", "OUT/"])


# ---------------------------------------------------------------- files written for an example


@dataclass
class Written:
    """A file to write under EX/ before the command runs: name and bytes."""

    name: str
    data: bytes


def _leaf() -> st.SearchStrategy:
    return st.one_of(st.none(), st.booleans(), st.integers(-5, 10 ** 15),
                     st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from(["ten", "", "sync", "dora", "H800", "IN/trace.parquet"]),
                     st.lists(st.integers(-2, 5), max_size=3))


def _config_tree() -> st.SearchStrategy:
    """A nested mapping over known and unknown config keys."""
    def nest(pairs):
        out: dict = {}
        for key, value in pairs:
            node = out
            parts = key.split(".")
            for p in parts[:-1]:
                nxt = node.setdefault(p, {})
                if not isinstance(nxt, dict):
                    break
                node = nxt
            else:
                node[parts[-1]] = value
        return out

    return st.lists(st.tuples(st.sampled_from(CONFIG_KEYS), _leaf()), max_size=5).map(nest)


@st.composite
def yaml_file(draw, name: str = "c.yaml") -> Written:
    tree = draw(_config_tree())
    text = yaml.safe_dump(tree, allow_unicode=True) if tree else ""
    how = draw(st.sampled_from(["plain", "plain", "duplicate", "latin1", "truncate", "scalar", "tab"]))
    data = text.encode()
    if how == "duplicate" and text:
        first = text.splitlines()[0]
        data = (text + first + "\n").encode()
    elif how == "latin1":
        data = text.encode() + b"# caf\xe9\n"
    elif how == "truncate":
        data = data[: draw(st.integers(0, max(len(data) - 1, 0)))]
    elif how == "scalar":
        data = draw(st.sampled_from([b"5\n", b"[1, 2]\n", b"hello\n", b"null\n", b"{\n"]))
    elif how == "tab":
        data = b"steps:\t3\n"
    return Written(name, data)


@st.composite
def trace_file(draw, name: str = "t.parquet") -> Written:
    """A 6-group trace of 2 samples with drawn edits: lengths, a column type, metadata."""
    n, g = 6, 2
    resp = draw(st.lists(st.integers(-3, 2 ** 31 - 1) | st.integers(1, 200), min_size=n * g, max_size=n * g))
    cols = {"prompt_id": pa.array(np.repeat(np.arange(n), g), pa.int64()),
            "sample_idx": pa.array(np.tile(np.arange(g), n), pa.int32()),
            "prompt_len": pa.array([draw(st.sampled_from([8, 1, 0, 4000]))] * (n * g), pa.int32()),
            "response_len": pa.array(resp, pa.int64())}
    edit = draw(st.sampled_from(["none", "float", "drop", "turns", "meta", "metajson", "cv"]))
    meta = {b"dora.trace": json.dumps({"params": {"max_len": 4096}}).encode()}
    if edit == "float":
        cols["response_len"] = pa.array(np.asarray(resp, float), pa.float64())
    elif edit == "drop":
        del cols[draw(st.sampled_from(sorted(cols)))]
    elif edit == "turns":
        cols["turns"] = pa.array(draw(st.lists(st.integers(-1, 5), min_size=n * g, max_size=n * g)), pa.int32())
    elif edit == "meta":
        meta = {b"dora.trace": draw(st.binary(max_size=12))}
    elif edit == "metajson":
        meta = {b"dora.trace": json.dumps(draw(_leaf())).encode()}
    elif edit == "cv":
        meta = {b"dora.trace": json.dumps({"params": {"moe_imbalance_cv": draw(_leaf())}}).encode()}
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(cols).replace_schema_metadata(meta), sink)
    return Written(name, sink.getvalue().to_pybytes())


@st.composite
def profile_file(draw, name: str = "p.json") -> Written:
    from dora.profile import FORMAT, TABLES

    rows = draw(st.integers(0, 5))
    prof: dict = {"format": draw(st.sampled_from([FORMAT, FORMAT, "x", None])),
                  "backend": draw(st.sampled_from(["hf", "vllm", None, 3])), "trainer_devices": draw(_leaf())}
    for t, cols in TABLES.items():
        if draw(st.booleans()) or t not in ("requests", "train_windows"):
            prof[t] = {c: [draw(_leaf()) if draw(st.integers(0, 9)) == 0 else float(i + 1) for i in range(rows)]
                       for c in cols}
    return Written(name, json.dumps(prof).encode())


# ---------------------------------------------------------------- argv


def _value(kind: str):
    if kind == "num":
        return st.one_of(numbers(), small_ints())
    if kind == "word":
        return words()
    if kind == "in":
        return st.sampled_from(IN_FILES)
    if kind.startswith("out:"):
        return out_path(kind[4:])
    if kind == "set":
        return st.tuples(st.sampled_from(CONFIG_KEYS), st.one_of(numbers(), words())).map(lambda kv: f"{kv[0]}={kv[1]}")
    if kind == "grid":
        return grid()
    raise ValueError(kind)


@st.composite
def grid(draw) -> str:
    """KEYS=VALUES: one or two linked keys, each value a:b with (mostly) one part per key."""
    keys = draw(st.lists(st.sampled_from(CONFIG_KEYS[:25] + ["hardware", "model", "policies"]), min_size=1,
                         max_size=2))
    value = st.one_of(small_ints(), small_ints(), numbers(), words())
    points = draw(st.lists(st.lists(value, min_size=len(keys) - draw(st.integers(0, 1)), max_size=len(keys)),
                           max_size=3))
    return ",".join(keys) + "=" + ",".join(":".join(p) for p in points)


@dataclass(frozen=True)
class Entry:
    """One entry point: a valid base command and the flags the fuzzer draws (flag -> value kind;
    kind 'yaml'/'trace'/'profile' writes a file for the example; 'flag' takes no value)."""

    module: str
    base: tuple[str, ...]
    flags: tuple[tuple[str, str], ...]
    pos: int = -1  # where drawn positional values go in base (-1: at the end)


SIM_FLAGS = (("--instances", "num"), ("--max-seqs", "num"), ("--trainer-devices", "num"), ("--steps", "num"),
             ("--batch-size", "num"), ("--eta", "num"), ("--seed", "num"), ("--devices-per-instance", "num"),
             ("--mtbf-s", "num"), ("--repair-s", "num"), ("--set", "set"), ("--config", "yaml"), ("--cost", "yaml"),
             ("--trace", "trace"), ("--trace", "in"), ("--policy", "word"), ("--hardware", "word"),
             ("--model", "word"), ("--config", "in"))
OUT_FLAGS = (("--json", "out:json"), ("--events", "out:parquet"), ("--perfetto", "out:json"), ("--plot", "out:png"))
ONE = ("--policy", "dora", "--quiet")
ENTRIES = {
    "sim": Entry("dora.sim", T + ONE, SIM_FLAGS + OUT_FLAGS),
    "sweep": Entry("dora.sim", ("sweep", *T, *ONE, "--jobs", "1", "--out", "OUT/s.csv", "--grid", "policy.eta=1,2"),
                   SIM_FLAGS[:12] + (("--grid", "grid"), ("--grid", "grid"), ("--out", "out:csv"), ("--csv", "out:csv"),
                                     ("--jobs", "num"), ("--trace-preset", "word"), ("--plot", "out:png"))),
    "tune": Entry("dora.sim", ("tune", *T, "--quiet", "--budget", "1"),
                  SIM_FLAGS[:13] + (("--budget", "num"), ("--eta-max", "num"), ("--min-gain", "num"),
                                    ("--max-versions-per-instance", "num"), ("--out", "out:yaml"),
                                    ("--csv", "out:csv"))),
    "calibrate": Entry("dora.sim", ("calibrate", "IN/profile.json", "--out", "OUT/c.yaml"),
                       (("--host-cores", "num"), ("--out", "out:yaml"), ("", "profile"), ("", "in")), 2),
    "compare": Entry("dora.sim", ("compare", EV, EV),
                     (("--json", "out:json"), ("--max-rel-err", "num"), ("", "in")), 1),
    "presets": Entry("dora.sim.presets", ("--hardware", "H800", "--model", "qwen2.5-7b"),
                     (("--devices-per-instance", "num"), ("--yaml", "out:yaml"), ("--hardware", "word"),
                      ("--model", "word"))),
    "generate": Entry("dora.trace", ("generate", "--steps", "2", "--prompts-per-step", "4", "--group-size", "2",
                                     "--out", "OUT/t.parquet"),
                      tuple((f"--{k}", "num") for k in ("steps", "prompts-per-step", "group-size", "median", "sigma",
                                                        "rho", "max-len", "tail-alpha", "turns-mean", "mix-share"))
                      + (("--out", "out:parquet"), ("--preset", "word"))),
    "stats": Entry("dora.trace", ("stats", "IN/trace.parquet"), (("", "in"), ("", "trace"), ("--json", "flag")), 2),
    "timeline": Entry("dora.plots", ("timeline", EV, "--out", "OUT/t.png", "--bins", "50"),
                      (("--bins", "num"), ("--max-rows", "num"), ("--step", "num"), ("--out", "out:png"),
                       ("", "in")), 2),
    "window": Entry("dora.plots", ("timeline", EV, "--out", "OUT/t.png", "--bins", "50", "--window", "0"),
                    (("", "num"),)),
    "plots": Entry("dora.plots", ("bubbles", EV, "--out", "OUT/b.png"),
                   (("", "in"), ("--out", "out:png"), ("--title", "word")), 2),
    "perfetto": Entry("dora.plots", ("perfetto", EV, "--out", "OUT/p.json"), (("--out", "out:json"), ("", "in")), 2),
    "exec": Entry("dora.exec", M, (("--instances", "num"), ("--steps", "num"), ("--batch-size", "num"),
                                   ("--group-size", "num"), ("--eta", "num"), ("--policy", "word"),
                                   ("--backend", "word"), ("--set", "set"), ("--config", "yaml"),
                                   ("--policy-config", "yaml"), ("--dataset", "in"), ("--json", "out:json"),
                                   ("--events", "out:parquet"), ("--out", "out:json"), ("--model", "in"))),
}
WRITERS = {"yaml": yaml_file, "trace": trace_file, "profile": profile_file}
SUFFIX = {"yaml": ".yaml", "trace": ".parquet", "profile": ".json"}


@st.composite
def command(draw, entry: Entry) -> tuple[list[str], list[Written]]:
    """(argv, files to write under EX/) for one example of `entry`."""
    args = list(entry.base)
    pos = len(args) if entry.pos < 0 else entry.pos
    files: list[Written] = []
    for _ in range(draw(st.integers(0, 3))):
        flag, kind = draw(st.sampled_from(entry.flags))
        if kind in WRITERS:
            w = draw(WRITERS[kind](f"f{len(files)}{SUFFIX[kind]}"))
            files.append(w)
            value = f"EX/{w.name}"
        elif kind == "flag":
            args.append(flag)
            continue
        else:
            value = draw(_value(kind))
        if flag:
            args.extend([flag, value])
        else:
            args.insert(pos, value)
            pos += 1
    return args, files
