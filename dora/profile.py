"""A real run's timing profile (written by dora.exec, read by `python -m dora.sim calibrate`).

Written as JSON (`profile.json` in each policy's --out directory, or `--profile-out`). Every
table is column-oriented (a dict of equal-length lists):

- `decode_steps` (instance, t_s, running, ctx_tokens, prefill_tokens, decode_tokens, dt_s): engine,
  one row per engine step. vLLM: dt_s is the interval between iterations, covering the prefill
  chunks scheduled in it (-1 after an idle gap); hf: the decode forward + sampling alone.
- `prefills` (instance, t_s, sequences, tokens, dt_s): engine, one row per prefill batch (hf only;
  vLLM prefills inside its steps).
- `weight_loads` (instance, version, mode, dt_s): event log, load_start -> load_end as the
  orchestrator saw it (what an instance is unavailable for).
- `engine_loads` (instance, version, kind, dt_s): engine, the in-process weight swap alone.
- `train_steps` (tokens, samples, dt_s): event log, train_start -> train_end (trainer compute;
  tokens = prompt + response tokens).
- `publishes` (version, dt_s): event log, train_end -> publish (gathering the new weights).
- `requests` (instance, t_sent_s, t_submit_s, t_first_token_s, t_finish_s, t_seen_s, new_tokens): one
  row per finished request segment. t_sent_s: the driver dispatched it (or migrated it in);
  t_submit_s, t_first_token_s, t_finish_s: the engine's stamps; t_seen_s: the driver got the
  result. All in seconds from the run's start. t_submit - t_sent is the submission latency,
  t_seen - t_finish the result latency (what `request_latency_s` in the cost model prices).
  Optional on read (profiles written before it lack it).
- `train_windows` (t_start_s, t_end_s): event log, each train_start -> train_end in seconds from
  the run's start (optional on read). With the top-level `t0_wall_s` (the engines' clock at the
  run's start) it places every decode step (`t_s` - t0_wall_s) inside or outside training.

Top-level keys: `format` ("dora.profile/1"), `policy`, `backend`, `model`, `instances`,
`max_num_seqs`, `devices_per_instance`, `trainer_devices`, `engine_startup_s` (list, per
instance), `wall_s`, `host_loadavg_1m` (the 1-minute load average at the end: a shared host slows
every timing), `host_cpus` (cores of the machine), `t0_wall_s` (time.time() at the run's start).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dora.errors import InputError
from dora.io import read_text, write_text

FORMAT = "dora.profile/1"
TABLES = {
    "decode_steps": ("instance", "t_s", "running", "ctx_tokens", "prefill_tokens", "decode_tokens", "dt_s"),
    "prefills": ("instance", "t_s", "sequences", "tokens", "dt_s"),
    "weight_loads": ("instance", "version", "mode", "dt_s"),
    "engine_loads": ("instance", "version", "kind", "dt_s"),
    "train_steps": ("tokens", "samples", "dt_s"),
    "publishes": ("version", "dt_s"),
    "requests": ("instance", "t_sent_s", "t_submit_s", "t_first_token_s", "t_finish_s", "t_seen_s", "new_tokens"),
    "train_windows": ("t_start_s", "t_end_s"),
}
OPTIONAL = ("requests", "train_windows")  # tables a profile may lack (older format revisions)
WRITTEN = "give a profile written by dora.exec"  # the fix for a malformed profile


def _table(name: str) -> dict[str, list]:
    return {c: [] for c in TABLES[name]}


def build_profile(events, engine_stats: list[dict], run_info: dict, requests=()) -> dict[str, Any]:
    """The profile of one run from its event log (DataFrame), each engine's `get_stats()` dict and
    the driver's request rows (tuples in the `requests` table's column order)."""
    prof: dict[str, Any] = {"format": FORMAT, **{k: run_info.get(k) for k in (
        "policy", "backend", "model", "instances", "devices_per_instance", "trainer_devices")},
        "max_num_seqs": run_info.get("max_seqs"), "engine_startup_s": []}
    prof.update({name: _table(name) for name in TABLES})
    for inst, st in enumerate(engine_stats):
        prof["engine_startup_s"].append(float(st.get("startup_s", 0.0)))
        d = prof["decode_steps"]
        for t, running, ctx, prefill, decode, dt in st.get("steps", []):
            for c, v in zip(TABLES["decode_steps"], (inst, t, running, ctx, prefill, decode, dt)):
                d[c].append(v)
        p = prof["prefills"]
        for t, seqs, tokens, dt in st.get("prefills", []):
            for c, v in zip(TABLES["prefills"], (inst, t, seqs, tokens, dt)):
                p[c].append(v)
        e = prof["engine_loads"]
        for _t, version, kind, dt in st.get("weight_loads", []):
            for c, v in zip(TABLES["engine_loads"], (inst, version, kind, dt)):
                e[c].append(v)
    q = prof["requests"]
    for row in requests:
        for c, v in zip(TABLES["requests"], row):
            q[c].append(v)
    ev = events["event"].astype(str).to_numpy()
    rows = events.to_dict("records")
    w, tr, pb = prof["weight_loads"], prof["train_steps"], prof["publishes"]
    samples = 0
    began = None
    for r, name in zip(rows, ev):
        if name == "load_end":
            for c, v in zip(TABLES["weight_loads"], (r["instance"], r["version"], r["detail"], r["dur_s"])):
                w[c].append(v)
        elif name == "train":
            samples += 1
        elif name == "train_start":
            began = r["t_s"]  # a step redone after a trainer restart starts again
        elif name == "train_end":
            for c, v in zip(TABLES["train_steps"], (r["tokens"], samples, r["dur_s"])):
                tr[c].append(v)
            if began is not None:
                prof["train_windows"]["t_start_s"].append(began)
                prof["train_windows"]["t_end_s"].append(r["t_s"])
                began = None
            samples = 0
        elif name == "publish":
            pb["version"].append(r["version"])
            pb["dt_s"].append(r["dur_s"])
    return _plain(prof)


def _plain(x: Any) -> Any:
    """numpy scalars -> Python numbers, recursively (for json)."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "item"):
        return x.item()
    return x


def write_profile(profile: dict, path: str | Path) -> Path:
    """Write atomically (temp file renamed into place)."""
    return write_text(path, json.dumps(profile))


def read_profile(path: str | Path) -> dict:
    """Load and check a profile; bad input raises InputError naming the file and the table."""
    p = Path(path)
    text = read_text(p, "profile", "record one with python -m dora.exec ... --profile-out FILE")
    try:
        prof = json.loads(text)
    except ValueError as e:
        raise InputError(f"profile {p}: not JSON ({type(e).__name__}); give a profile written by dora.exec") from None
    if not isinstance(prof, dict) or prof.get("format") != FORMAT:
        raise InputError(f"profile {p}: 'format' is not {FORMAT!r}; give a profile written by dora.exec")
    if prof.get("backend") not in ("vllm", "hf"):
        raise InputError(f"profile {p}: backend {prof.get('backend')!r} is not 'vllm' or 'hf'; give a profile written "
                         "by dora.exec")
    td = prof.get("trainer_devices")
    if isinstance(td, bool) or not isinstance(td, (int, float)) or not 1 <= td < math.inf:
        raise InputError(f"profile {p}: trainer_devices {td!r} is not a number >= 1; give a profile written by "
                         "dora.exec")
    for name, cols in TABLES.items():
        t = prof.get(name)
        if t is None and name in OPTIONAL:
            prof[name] = _table(name)
            continue
        if not isinstance(t, dict):
            raise InputError(f"profile {p}: table '{name}' missing; {WRITTEN}")
        lens = {c: len(t.get(c, [])) if isinstance(t.get(c), list) else -1 for c in cols}
        if -1 in lens.values():
            raise InputError(f"profile {p}: table '{name}' has no column '{min(lens, key=lens.get)}'; {WRITTEN}")
        if len(set(lens.values())) > 1:
            raise InputError(f"profile {p}: table '{name}' has columns of different lengths {lens}; {WRITTEN}")
        for c in cols:
            if c in ("mode", "kind"):
                continue
            for i, v in enumerate(t[c]):
                if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v):
                    raise InputError(f"profile {p}: table '{name}' column '{c}' row {i}: {v!r} is not a number; "
                                     f"{WRITTEN}")
    return prof
