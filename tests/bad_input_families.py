"""Bad-input rows by family (beside the per-CLI rows of tests/test_bad_input.py): config and
profile files, numeric flags, output paths, event-log and trace metadata, sweep grids, plots,
tune, calibrate, compare, presets and executor configs. `make_family_inputs` writes the files
they name under IN/; `ROWS` is the list test_bad_input runs (in-process, and as subprocesses
under -m slow).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq

from tests.bad_input_cases import ROWS as CLI_ROWS, EV, EXEC, M, OUTS, PLOTS, PRESETS, SIM, SW, T, TRACE, Row, _r

LONG = "n" * 300  # a file name longer than any file system takes
PROFILE_OK = "IN/profile.json"


def make_family_inputs(d: Path) -> None:
    """The files of these rows under IN/ (d); IN/events.parquet and IN/trace.parquet exist."""
    files = {
        "not_utf8.yaml": b"steps: 3\nnote: caf\xe9\n",
        "dup_key.yaml": b"steps: 3\nsteps: 4\n",
        "dup_nested.yaml": b"cluster:\n  instances: 2\n  instances: 3\n",
        "nan.yaml": b"cost:\n  decode_base_s: .nan\n",
        "inf.yaml": b"cost:\n  weight_load_s: .inf\n",
        "neg_inf.yaml": b"faults:\n  mtbf_s: -.inf\n",
        "scalar.yaml": b"5\n",
        "string.yaml": b"hello\n",
        "null_cluster.yaml": b"cluster: null\n",
        "null_cost.yaml": b"cost: null\n",
        "null_policy.yaml": b"policy: null\n",
        "null_faults.yaml": b"faults:\n",
        "list_cluster.yaml": b"cluster: [1, 2]\n",
        "list_policy.yaml": b"policy: [eta]\n",
        "scalar_policy.yaml": b"policy: 5\n",
        "scalar_task.yaml": b"task: 5\n",
        "null_rollout.yaml": b"rollout: null\n",
        "steps_text.yaml": b"steps: ten\n",
        "dpi_text.yaml": b"cluster:\n  devices_per_instance: ten\n",
        "eta_bool.yaml": b"policy:\n  eta: true\n",
        "eta_text.yaml": b"policy:\n  eta: two\n",
        "cost_text.yaml": b"weight_load_s: fast\n",
        "seed_frac.yaml": b"seed: 1.5\n",
        "int_key.yaml": b"1: 2\n",
        "lr_nan.yaml": b"trainer:\n  lr: .nan\n",
        "instances_text.yaml": b"rollout:\n  instances: two\n",
        "tab.yaml": b"steps:\t3\n",
        "sweep_nan.csv": b"policy,policy.eta,e2e_samples_per_s\ndora,1,nan\ndora,2,nan\n",
        "sweep_inf.csv": b"policy,policy.eta,e2e_samples_per_s\ndora,1,inf\ndora,2,1\n",
        "sweep_xnan.csv": b"policy,policy.eta,e2e_samples_per_s\ndora,nan,1\ndora,2,2\n",
        "sweep_text.csv": b"policy,policy.eta,e2e_samples_per_s\ndora,1,abc\ndora,2,2\n",
    }
    for name, content in files.items():
        (d / name).write_bytes(content)
    os.mkfifo(d / "fifo.yaml")  # reading it would wait for a writer forever
    (d / "dangling.json").symlink_to(d / "nowhere" / "x.json")
    (d / "dangling_dir").symlink_to(d / "nowhere")
    (d / "dangling.yaml").symlink_to(d / "nowhere.yaml")
    ev = pq.read_table(d / "events.parquet")
    run = json.loads(ev.schema.metadata[b"dora.run"])
    meta = dict(ev.schema.metadata)
    for name, raw in {"ev_nometa": None, "ev_badmeta": b"{not json", "ev_listmeta": b"[1, 2]",
                      "ev_noeta": json.dumps({k: v for k, v in run.items() if k != "eta"}).encode(),
                      "ev_nodevices": json.dumps({**run, "rollout_devices": 0}).encode(),
                      "ev_notrainer": json.dumps({**run, "trainer_devices": 0, "colocated": False}).encode(),
                      "ev_nogroup": json.dumps({k: v for k, v in run.items() if k != "group_size"}).encode(),
                      "ev_noslots": json.dumps({k: v for k, v in run.items() if k != "max_seqs"}).encode(),
                      "ev_eta_text": json.dumps({**run, "eta": "two"}).encode()}.items():
        m = {k: v for k, v in meta.items() if k != b"dora.run"}
        if raw is not None:
            m[b"dora.run"] = raw
        pq.write_table(ev.replace_schema_metadata(m), d / f"{name}.parquet")
    tr = pq.read_table(d / "trace.parquet")
    tmeta = dict(tr.schema.metadata)
    for name, raw in {"trace_badmeta": b"{params: 1", "trace_listmeta": b"[]",
                      "trace_badparams": json.dumps({"params": [1]}).encode(),
                      "trace_badcv": json.dumps({"params": {"moe_imbalance_cv": "high"}}).encode(),
                      "trace_negcv": json.dumps({"params": {"moe_imbalance_cv": -0.5}}).encode()}.items():
        pq.write_table(tr.replace_schema_metadata({**tmeta, b"dora.trace": raw}), d / f"{name}.parquet")
    _profiles(d)


def _profiles(d: Path) -> None:
    """A valid profile (a few rows in every table) and broken copies of it for calibrate."""
    from dora.profile import FORMAT, TABLES

    prof: dict = {"format": FORMAT, "backend": "hf", "trainer_devices": 1, "t0_wall_s": 0.0}
    for name, cols in TABLES.items():
        prof[name] = {c: ([1.0, 2.0, 3.0, 4.0] if c not in ("mode", "kind") else ["x"] * 4) for c in cols}
    (d / "profile.json").write_text(json.dumps(prof))
    broken = {
        "prof_format": {**prof, "format": "other/1"},
        "prof_notable": {k: v for k, v in prof.items() if k != "decode_steps"},
        "prof_nocol": {**prof, "train_steps": {"tokens": [1.0], "samples": [1.0]}},
        "prof_ragged": {**prof, "publishes": {"version": [1, 2], "dt_s": [1.0]}},
        "prof_text": {**prof, "train_steps": {**prof["train_steps"], "dt_s": [1.0, "x", 2.0, 3.0]}},
        "prof_bool": {**prof, "train_steps": {**prof["train_steps"], "dt_s": [1.0, True, 2.0, 3.0]}},
        "prof_table_list": {**prof, "prefills": [1, 2]},
        "prof_vllm": {**prof, "backend": "vllm"},
        "prof_nobackend": {k: v for k, v in prof.items() if k != "backend"},
        "prof_trainer0": {**prof, "trainer_devices": 0},
    }
    for name, p in broken.items():
        (d / f"{name}.json").write_text(json.dumps(p))
    (d / "prof_nan.json").write_text(json.dumps(prof).replace('"dt_s": [1.0', '"dt_s": [NaN', 1))
    (d / "prof_list.json").write_text("[1, 2]\n")
    (d / "prof_notjson.json").write_text("{format: 1\n")
    (d / "prof_latin1.json").write_bytes(b'{"format": "caf\xe9"}')


ROWS: list[Row] = []


def _add(*rows: Row) -> None:
    ROWS.extend(rows)


# ---- config files (YAML): encoding, duplicate keys, non-finite numbers, wrong shapes
for flag, file, what, needle in [
    ("--config", "not_utf8.yaml", "not UTF-8", "UTF-8"), ("--cost", "not_utf8.yaml", "not UTF-8", "UTF-8"),
    ("--config", "dup_key.yaml", "a duplicate key", "twice"), ("--config", "dup_nested.yaml", "a duplicate nested key",
                                                                "twice"),
    ("--cost", "dup_key.yaml", "a duplicate key", "twice"), ("--config", "nan.yaml", "cost .nan", "decode_base_s"),
    ("--config", "inf.yaml", "cost .inf", "weight_load_s"), ("--config", "neg_inf.yaml", "faults -.inf", "mtbf_s"),
    ("--config", "scalar.yaml", "a number at the top level", "mapping"),
    ("--config", "string.yaml", "a string at the top level", "mapping"),
    ("--cost", "list.yaml", "a list at the top level", "mapping"),
    ("--config", "null_cluster.yaml", "cluster: null", "cluster"), ("--config", "null_cost.yaml", "cost: null", "cost"),
    ("--config", "null_policy.yaml", "policy: null", "policy"), ("--config", "null_faults.yaml", "faults: (empty)",
                                                                  "faults"),
    ("--config", "list_cluster.yaml", "cluster: a list", "cluster"), ("--config", "list_policy.yaml", "policy: a list",
                                                                      "policy"),
    ("--config", "scalar_policy.yaml", "policy: 5", "policy"),
    ("--config", "dpi_text.yaml", "devices_per_instance: ten", "devices_per_instance"),
    ("--config", "eta_text.yaml", "policy.eta: two", "eta"), ("--cost", "cost_text.yaml", "weight_load_s: fast",
                                                              "weight_load_s"),
    ("--config", "seed_frac.yaml", "seed: 1.5", "seed"), ("--config", "eta_bool.yaml", "eta: true", "eta"),
    ("--config", "int_key.yaml", "a number as a key", "key"), ("--config", "tab.yaml", "a tab in the YAML", "YAML"),
    ("--config", "IN", "a folder", "directory"), ("--cost", "IN/missing.yaml", "a missing file", "not found"),
    ("--config", "dangling.yaml", "a dangling link", "not found"),
    ("--config", "fifo.yaml", "a named pipe", "not a regular file"), ("--cost", "fifo.yaml", "a named pipe",
                                                                      "not a regular file"),
]:
    path = file if file.startswith("IN") else f"IN/{file}"
    _add(_r(SIM, f"{flag} {what}", needle, *T, flag, path, *OUTS))
for flag, file, what, needle in [
    ("--config", "not_utf8.yaml", "not UTF-8", "UTF-8"), ("--policy-config", "not_utf8.yaml", "not UTF-8", "UTF-8"),
    ("--config", "dup_key.yaml", "a duplicate key", "twice"), ("--config", "lr_nan.yaml", "trainer.lr .nan", "lr"),
    ("--config", "null_policy.yaml", "policy: null", "policy"),
    ("--config", "scalar_policy.yaml", "policy: 5", "policy"),
    ("--policy-config", "null_policy.yaml", "policy: null", "policy"),
    ("--policy-config", "scalar_policy.yaml", "policy: 5", "policy"),
    ("--policy-config", "list_policy.yaml", "policy: a list", "policy"),
    ("--policy-config", "scalar.yaml", "a number at the top level", "mapping"),
    ("--config", "scalar_task.yaml", "task: 5", "task"), ("--config", "null_rollout.yaml", "rollout: null", "rollout"),
    ("--config", "instances_text.yaml", "rollout.instances: two", "instances"),
    ("--config", "steps_text.yaml", "steps: ten", "steps"), ("--config", "list.yaml", "a list at the top level",
                                                             "mapping"),
]:
    _add(_r(EXEC, f"{flag} {what}", needle, *M, flag, f"IN/{file}"))

# ---- numeric flags: negative, zero, NaN, infinite, absurdly large
HUGE = "99999999999999"
for flag, value, needle in [
    ("--instances", "-3", "instances"), ("--instances", HUGE, "memory"), ("--instances", "nan", "invalid int"),
    ("--max-seqs", "-1", "must be >= 1 decode slot, or auto"), ("--max-seqs", HUGE, "memory"), ("--max-seqs", "1e3", "neither a whole number of slots nor auto"),
    ("--trainer-devices", "0", "trainer_devices"), ("--trainer-devices", HUGE, "memory"),
    ("--devices-per-instance", "-2", "devices_per_instance"), ("--steps", "0", "steps"), ("--steps", "-4", "steps"),
    ("--steps", HUGE, "memory"), ("--steps", "inf", "invalid int"), ("--batch-size", "-1", "batch_size"),
    ("--batch-size", HUGE, "batch_size"), ("--eta", "-100", "eta"), ("--eta", "nan", "invalid int"), ("--eta", HUGE, "memory"),
    ("--seed", "x", "invalid int"), ("--seed", "-1", "seed"), ("--mtbf-s", "nan", "mtbf_s"),
    ("--mtbf-s", "inf", "mtbf_s"),
    ("--mtbf-s=-inf", None, "mtbf_s"), ("--repair-s", "nan", "repair_s"), ("--mtbf-s", "0.03", "--mtbf-s"),
    ("--repair-s", "-5", "repair_s"),
    ("--repair-s", "1e999", "repair_s"),
]:
    label = flag if value is None else f"{flag} {value if value != HUGE else 'huge'}"
    _add(_r(SIM, label, needle, *T, flag, *([value] if value else []),
            *OUTS))
for key, value, needle in [
    ("cluster.kv_tokens", "-1", "kv_tokens"), ("cluster.kv_tokens", ".nan", "kv_tokens"),
    ("cost.weight_load_s", ".inf", "weight_load_s"), ("cost.decode_base_s", ".nan", "decode_base_s"),
    ("policy.eta", "1e400", "eta"), ("steps", "2.5", "steps"), ("steps", "[2]", "steps"), ("seed", "{}", "seed"),
    ("cluster", "null", "cluster"), ("policy.dora.repartition_load", ".nan", "repartition_load"),
    ("policy.dora.widen_max", "0.5", "widen_max"), ("policy.dora.host_max", "0", "host_max"),
    ("cost.host_cores", "1e-100", "host_cores"), ("cost.decode_base_s", "1e300", "decode_base_s"),
    ("faults.straggler_slowdown", "1e300", "straggler_slowdown"), ("imbalance.redraw_s", "1e-9", "memory"),
]:
    cv = ("--set", "cost.moe_imbalance_cv=0.2") if key.startswith("imbalance") else ()  # redraws need an imbalance
    _add(_r(SIM, f"--set {key}={value}", needle, *T, "--set", f"{key}={value}", *cv, *OUTS))
for flag, value, needle in [
    ("--instances", "-1", "instances"), ("--steps", "0", "steps"), ("--batch-size", "0", "batch_size"),
    ("--group-size", "-2", "group_size"), ("--eta", "-1", "eta"), ("--seed", "1.5", "invalid int"),
    ("--seed", "-5", "seed"),
    ("--instances", "nan", "invalid int"), ("--instances", HUGE, "memory"),
]:
    _add(_r(EXEC, f"{flag} {value if value != HUGE else 'huge'}", needle, *M, flag, value))
GEN = ("generate", "--out", "OUT/t.parquet")
for flag, value, needle in [
    ("--steps", "-1", "steps"), ("--steps", "nan", "steps"), ("--steps", HUGE, "memory"),
    ("--prompts-per-step", "0", "prompts_per_step"), ("--group-size", HUGE, "memory"), ("--median", "nan", "median"),
    ("--sigma", "inf", "sigma"), ("--rho", "nan", "rho"), ("--max-len", "0", "max_len"), ("--seed", "x", "seed"),
    ("--tail-prob", "1.5", "tail_prob"), ("--drift", "-inf", "drift"), ("--seed", "-1", "seed"),
    ("--turns-mean", "4e18", "turns_mean"),
]:
    _add(_r(TRACE, f"generate {flag} {value if value != HUGE else 'huge'}", needle, *GEN, flag, value))

# ---- output paths: a folder, under a file, a dangling link, a name too long, a read-only place
OUTPUTS = [  # (module, label, args before the path, flag, file name, args after)
    (SIM, "--json", T, "--json", "runs.json", ("--quiet",)),
    (SIM, "--events", T, "--events", "ev.parquet", ("--quiet",)),
    (SIM, "--plot", T, "--plot", "p.png", ("--quiet",)),
    (SIM, "--perfetto", T, "--perfetto", "p.json", ("--quiet",)),
    (SIM, "sweep --out", ("sweep", *T, "--grid", "policy.eta=1,2", "--quiet"), "--out", "s.parquet", ()),
    (SIM, "sweep --csv", SW + ("--grid", "policy.eta=1,2"), "--csv", "s.csv", ()),
    (SIM, "sweep --plot", SW + ("--grid", "policy.eta=1,2"), "--plot", "s.png", ()),
    (SIM, "tune --out", ("tune", *T, "--budget", "1", "--quiet"), "--out", "t.yaml", ()),
    (SIM, "tune --csv", ("tune", *T, "--budget", "1", "--quiet"), "--csv", "t.csv", ()),
    (SIM, "calibrate --out", ("calibrate", PROFILE_OK), "--out", "c.yaml", ()),
    (SIM, "compare --json", ("compare", EV, EV), "--json", "c.json", ()),
    (PRESETS, "--yaml", ("--hardware", "H800", "--model", "qwen2.5-7b"), "--yaml", "c.yaml", ()),
    (PLOTS, "timeline --out", ("timeline", EV), "--out", "t.png", ()),
    (PLOTS, "perfetto --out", ("perfetto", EV), "--out", "p.json", ()),
    (TRACE, "generate --out", ("generate", "--steps", "2"), "--out", "t.parquet", ()),
    (EXEC, "--json", ("--model", "IN/model"), "--json", "runs.json", ()),
    (EXEC, "--events", ("--model", "IN/model"), "--events", "ev.parquet", ()),
    (EXEC, "--trace-out", ("--model", "IN/model"), "--trace-out", "t.parquet", ()),
    (EXEC, "--profile-out", ("--model", "IN/model"), "--profile-out", "p.json", ()),
]
for module, label, before, flag, name, after in OUTPUTS:
    for what, path, needle in [
        ("names a folder", "OUT", "directory"),
        ("under a file", f"IN/text.parquet/{name}", "not a folder"),
        ("a dangling link", "IN/dangling.json" if name.endswith(".json") else f"IN/dangling_dir/{name}", "dangling"),
        ("a name too long", f"OUT/{LONG}{Path(name).suffix}", "longer"),
        ("in a read-only place (/proc)", f"/proc/dora-out{Path(name).suffix}", "cannot create"),
    ]:
        _add(_r(module, f"{label} {what}", needle, *before, flag, path, *after))
for what, path, needle in [("an existing file", "IN/text.parquet", "is a file"),
                           ("a dangling link", "IN/dangling_dir", "dangling"),
                           ("a name too long", f"OUT/{LONG}", "longer"), ("under a file", "IN/text.parquet/run",
                                                                          "not a folder")]:
    _add(_r(EXEC, f"--out {what}", needle, "--model", "IN/model", "--out", path))
_add(_r(SIM, "sweep --trace-cache an existing file", "is a file", *SW, "--trace-param", "tail_alpha=1.2,2",
        "--trace-preset", "moe_longtail", "--trace-cache", "IN/text.parquet"))

# ---- event-log and trace metadata (no silent defaults)
for name, what, needle in [
    ("ev_nometa", "no run metadata", "run metadata"), ("ev_badmeta", "run metadata not JSON", "JSON"),
    ("ev_listmeta", "run metadata a list", "mapping"), ("ev_noeta", "no eta (C3 unknowable)", "eta"),
    ("ev_nodevices", "0 rollout devices", "rollout_devices"), ("ev_notrainer", "0 trainer devices, not colocated",
                                                               "trainer_devices"),
    ("ev_nogroup", "no group_size", "group_size"), ("ev_eta_text", "eta 'two'", "eta"),
]:
    _add(_r(SIM, f"compare: real log with {what}", needle, "compare", f"IN/{name}.parquet", EV))
for name, what, needle in [("trace_badmeta", "metadata not JSON", "metadata"),
                           ("trace_listmeta", "metadata a list", "metadata"),
                           ("trace_badparams", "params a list", "metadata"),
                           ("trace_badcv", "moe_imbalance_cv 'high'", "moe_imbalance_cv"),
                           ("trace_negcv", "moe_imbalance_cv -0.5", "moe_imbalance_cv")]:
    _add(_r(SIM, f"--trace with {what}", needle, *T, "--trace", f"IN/{name}.parquet", *OUTS))
for name in ("trace_badmeta", "trace_listmeta"):
    _add(_r(TRACE, f"stats of a trace with {name.split('_')[1]}", "metadata", "stats", f"IN/{name}.parquet"))
    _add(_r(PLOTS, f"lengths of a trace with {name.split('_')[1]}", "metadata", "lengths", f"IN/{name}.parquet",
            "--out", "OUT/l.png"))
for name in ("ev_badmeta", "ev_listmeta"):
    _add(_r(PLOTS, f"timeline of a log with {name.split('_')[1]}", "dora.run", "timeline", f"IN/{name}.parquet",
            "--out", "OUT/t.png"))

# ---- sweep grids
for grid, what, needle in [
    ("cluster.instances=a,b", "non-numeric values for an integer key", "instances"),
    ("cluster.instances=1.5,2", "a fractional value for an integer key", "instances"),
    ("cluster.instances,cluster.max_seqs=1:2:3,2:4:5", "linked keys with an extra part", "part"),
    ("cluster.instances,cluster.max_seqs=2:4,3", "linked keys with a missing part", "part"),
    ("policy.eta=-1,2", "a negative eta", "eta"), ("steps=2,99999999999999", "a huge step count", "memory"),
    ("=1,2", "an empty key", "empty key"), ("cluster..instances=1,2", "an empty key part", "instances"),
    ("policy.eta=.nan,1", "NaN for an integer key", "eta"), ("cost.weight_load_s=.inf,1", "an infinite cost",
                                                               "weight_load_s"),
    ("model=qwen2.5-7b", "model without hardware", "--hardware"), ("seed=x,y", "text seeds", "seed"),
]:
    _add(_r(SIM, f"sweep --grid {what}", needle, *SW, "--grid", grid))
for extra, what, needle in [
    (("--grid", "policy.eta=1,2", "--jobs", "-1"), "--jobs -1", "--jobs"),
    (("--trace-param", "tail_alpha=-1,2", "--trace-preset", "moe_longtail"), "--trace-param a bad value",
     "tail_alpha"),
    (("--trace-param", "steps=1.5,2", "--trace-preset", "moe_longtail"), "--trace-param a fractional step count",
     "steps"),
    (("--trace-param", "tail_alpha=1.2,2"), "--trace-param on a trace without generator parameters", "--trace-preset"),
    (("--trace-param", "steps=99999999999,2", "--trace-preset", "moe_longtail"), "--trace-param a huge trace",
     "memory"),
]:
    _add(_r(SIM, f"sweep {what}", needle, *SW, *extra))

# ---- tune, calibrate, compare, presets
TUNE = ("tune", *T, "--quiet")
for extra, what, needle in [
    (("--budget", "-1"), "--budget -1", "--budget"), (("--min-gain", "nan"), "--min-gain nan", "--min-gain"),
    (("--min-gain", "-0.5"), "--min-gain -0.5", "--min-gain"), (("--max-versions-per-instance", "0"),
                                                                "--max-versions-per-instance 0", "versions"),
    (("--eta-max", "-1"), "--eta-max -1", "--eta-max"), (("--eta-max", HUGE), "--eta-max huge", "memory"), (("--policy", "sync"), "--policy sync", "dora"),
    (("--out", "OUT/t.txt"), "--out not YAML", "file type"), (("--csv", "OUT/t.json"), "--csv not CSV", "file type"),
    (("--budget", "x"), "--budget x", "invalid int"),
    (("--budget", "1000000", "--eta-max", "1000000", "--steps", "100"), "a budget of days", "over the limit"),
    (("--search-seed", "1.5"), "--search-seed 1.5", "invalid int"),
]:
    _add(_r(SIM, f"tune {what}", needle, *TUNE, *extra))
CAL = ("calibrate", "--out", "OUT/c.yaml")
for args, what, needle in [
    (("IN/missing.json",), "a missing profile", "not found"),
    (("IN/fifo.yaml",), "a named pipe", "not a regular file"), (("IN/text.parquet",), "a binary file", "profile"),
    (("IN/prof_notjson.json",), "a profile that is not JSON", "JSON"), (("IN/prof_list.json",), "a JSON list",
                                                                        "format"),
    (("IN/prof_latin1.json",), "a profile that is not UTF-8", "UTF-8"), (("IN/prof_format.json",), "another format",
                                                                         "format"),
    (("IN/prof_notable.json",), "a missing table", "decode_steps"), (("IN/prof_nocol.json",), "a missing column",
                                                                     "dt_s"),
    (("IN/prof_ragged.json",), "columns of different lengths", "lengths"), (("IN/prof_text.json",), "text in a column",
                                                                             "not a number"),
    (("IN/prof_bool.json",), "true in a column", "not a number"), (("IN/prof_nan.json",), "NaN in a column",
                                                                    "not a number"),
    (("IN/prof_table_list.json",), "a table that is a list", "prefills"),
    ((PROFILE_OK, "IN/prof_vllm.json"), "profiles of two backends", "backends"),
    (("IN/prof_nobackend.json",), "a profile without its backend", "backend"),
    (("IN/prof_trainer0.json",), "a profile with 0 trainer devices", "trainer_devices"),
    ((PROFILE_OK, "--host-cores", "-1"), "--host-cores -1", "host-cores"),
    ((PROFILE_OK, "--host-cores", "nan"), "--host-cores nan", "host-cores"),
    ((PROFILE_OK, "--out", "OUT/c.txt"), "--out not YAML", "file type"), ((), "no profile", "required"),
]:
    _add(_r(SIM, f"calibrate {what}", needle, *CAL, *args))
for args, what, needle in [
    (("IN/missing.parquet", EV), "a missing real log", "not found"), ((EV, "IN/text.parquet"), "a text sim log",
                                                                       "readable parquet"),
    (("IN/trace.parquet", EV), "a trace as the real log", "column"), ((EV,), "one log", "required"),
    ((EV, EV, "--max-rel-err", "-1"), "--max-rel-err -1", "max-rel-err"),
    ((EV, EV, "--max-rel-err", "nan"), "--max-rel-err nan", "max-rel-err"),
    ((EV, EV, "--json", "OUT/c.csv"), "--json not .json", "file type"),
]:
    _add(_r(SIM, f"compare {what}", needle, "compare", *args))
for args, what, needle in [
    (("--devices-per-instance", "nan"), "--devices-per-instance nan", "invalid int"),
    (("--yaml", "OUT/c.json"), "--yaml not YAML", "file type"),
]:
    _add(_r(PRESETS, what, needle, "--hardware", "H800", "--model", "qwen2.5-7b", *args))

# ---- plots
TL = ("timeline", EV, "--out", "OUT/t.png")
for extra, what, needle in [
    (("--window", "nan", "5"), "--window nan 5", "window"), (("--window", "0", "inf"), "--window 0 inf", "window"),
    (("--window", "3", "3"), "--window of zero width", "window"), (("--window", "-5", "-1"), "--window before 0",
                                                                   "window"),
    (("--bins", "-1"), "--bins -1", "--bins"), (("--bins", HUGE), "--bins huge", "--bins"),
    (("--max-rows", "0"), "--max-rows 0", "--max-rows"), (("--step", "-1"), "--step -1", "step"),
    (("--step", "1", "--window", "0", "1"), "--step with --window", "not both"),
    (("--step", "x"), "--step x", "invalid int"),
]:
    _add(_r(PLOTS, f"timeline {what}", needle, *TL, *extra))
_add(_r(PLOTS, "timeline --step 3 of two logs where only one has it", "step 3", "timeline", EV, "IN/ev3.parquet",
        "--out", "OUT/t.png", "--step", "3"))
for extra, what, needle in [
    (("bubbles", "IN/ev_nodevices.parquet"), "bubbles of a log with 0 devices", "rollout_devices"),
    (("slots", "IN/ev_noslots.parquet"), "slots of a log without max_seqs", "max_seqs"),
    (("staleness", "IN/text.parquet"), "staleness of a text file", "readable parquet"),
    (("sweep", "IN/table.csv", "--y", "nope"), "sweep --y of a column the table lacks", "nope"),
    (("sweep", "IN/not_utf8.yaml"), "sweep of a YAML file", "table"),
    (("sweep", "IN/sweep_nan.csv", "--x", "policy.eta"), "sweep of NaN throughputs", "finite"),
    (("sweep", "IN/sweep_inf.csv", "--x", "policy.eta"), "sweep of an infinite throughput", "finite"),
    (("sweep", "IN/sweep_xnan.csv", "--x", "policy.eta"), "sweep with a NaN setting", "finite"),
    (("sweep", "IN/sweep_text.csv", "--x", "policy.eta"), "sweep of text throughputs", "not numeric"),
    (("lengths", "IN/missing.parquet"), "lengths of a missing trace", "not found"),
]:
    _add(_r(PLOTS, what, needle, *extra, "--out", "OUT/p.png"))

_PER_CLI = {(r.module, r.args) for r in CLI_ROWS}
ROWS[:] = [r for r in ROWS if (r.module, r.args) not in _PER_CLI]  # (a few output rows are per-CLI rows too)
