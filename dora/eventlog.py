"""The event log: one row per event, written by both bodies, read by metrics and plots.

Columns: `COLUMNS` (time, event, instance, trajectory, prompt, versions, tokens, detail), with three
typed ones that make the log self-sufficient for
metrics: `dur_s` (length of the activity that ends at this row), `busy_s` (device-seconds
of that activity: a segment's decode-slot share, a trainer step's compute) and `prefill_s`
(device-seconds of prefill in a segment).

Event names and what their columns mean:

| event       | row at                          | tokens                      | busy_s / prefill_s            |
|-------------|---------------------------------|-----------------------------|-------------------------------|
| sample      | group drawn from the dataset    | group size                  |                               |
| regenerate  | group abandoned, sampled again  | group size                  |                               |
| dispatch    | segment starts (queued)         | prompt + already generated  |                               |
| migrate_in  | segment starts after migration  | context carried             |                               |
| resume      | segment starts after interrupt  | context re-prefilled        |                               |
| finish      | segment ends: trajectory done   | tokens made in the segment  | decode share / prefill        |
| abort       | segment ends: discarded         | tokens made in the segment  | decode share / prefill        |
| migrate_out | segment ends: moved away        | tokens made in the segment  | decode share / prefill        |
| interrupt   | segment ends: weights swapped   | tokens made in the segment  | decode share / prefill        |
| lost        | segment ends: instance failed   | tokens made in the segment  | decode share / prefill        |
| end         | segment cut by the end of run   | tokens made in the segment  | decode share / prefill        |
| preempt     | KV overflow, re-prefill later   | tokens to re-prefill        | detail "pinned context": a    |
|             |                                 |                             | context pinned between turns  |
| tool_start  | a turn ended, tool call starts  | context (KV kept, pinned)   | dur_s = the call's wait       |
| tool_end    | tool output joins the context   | tool-output tokens          | dur_s = the call's wait       |
| load_start  | instance starts loading version |                             |                               |
| load_end    | version ready on the instance   |                             | dur_s = load time             |
| load_fail   | a load failed, retried          |                             | dur_s = the lost load time    |
| train       | trajectory consumed by trainer  | response tokens             |                               |
| train_start | trainer step starts             | trained tokens (all)        |                               |
| train_end   | trainer step compute ends       | trained tokens (all)        | busy_s = compute device-s     |
| train_lent  | the step's compute on lent rollout devices | lent devices    | busy_s = their compute device-s |
| publish     | version available to rollout    |                             | dur_s = publish time          |
| trainer_restart | trainer crashed, resumed; detail says where | | dur_s = restart time     |
| weight_sync_start | collective broadcast of a version starts | (0)             | detail: to which instances    |
| weight_sync_end | the broadcast ends (staged there) | bytes sent, once         | dur_s = broadcast time        |
| fail        | instance failed                 |                             |                               |
| recover     | instance back                   |                             |                               |
| lend        | instance lent to the trainer    | its devices                 |                               |
| return      | lent instance serves again      |                             | dur_s = reshard time          |
| leftover    | group in flight at end of run   | group size                  |                               |
| run_end     | end of the measured run         |                             |                               |
| sched       | an event given to the policy    | detail: JSON of the event and the actions it returned (exec; for replay) |

A multi-turn trajectory's tool calls do not end its segment: its tokens, decode share and
useful prefill (prompt and tool output) are on the segment's end row; tool_start/tool_end mark
the time it spends out of the batch (its slot free, its KV pinned on the instance).

Instance is -1 for trainer and dataset rows. Run-level facts (devices, slots, policy) are
stored in the parquet metadata under `dora.run`.
"""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dora.errors import InputError
from dora.io import atomic_path

COLUMNS = ("t_s", "event", "instance", "trajectory", "prompt_id", "version", "trainer_version",
           "tokens", "detail", "dur_s", "busy_s", "prefill_s")
SEGMENT_START = ("dispatch", "migrate_in", "resume")
SEGMENT_END = ("finish", "abort", "migrate_out", "interrupt", "lost", "end")
META_KEY = b"dora.run"


_ROW = np.dtype([("t_s", "f8"), ("event", "i2"), ("instance", "i4"), ("trajectory", "i8"), ("prompt_id", "i8"),
                 ("version", "i4"), ("trainer_version", "i4"), ("tokens", "i8"), ("dur_s", "f8"),
                 ("busy_s", "f8"), ("prefill_s", "f8")])
# one row as packed bytes, field for field as _ROW (native order, no padding): the log keeps its
# rows packed in one buffer that becomes a _ROW array at the end (no Python object per row)
_NAMES: tuple[str, ...] = tuple(_ROW.names or ())
_PACK = struct.Struct("=" + "".join({"f8": "d", "i8": "q", "i4": "i", "i2": "h"}[_ROW[n].str[1:]] for n in _NAMES))
assert _PACK.size == _ROW.itemsize
pack_row = _PACK.pack  # pack_row(t_s, event code, instance, ..., prefill_s) -> one row's bytes


def _cast(rows: list[tuple]) -> bytes:
    """Rows holding a value struct refuses (a float for an integer), cast as numpy casts them."""
    return np.array(rows, dtype=_ROW).tobytes()


class EventLog:
    """Append-only log: rows are packed into one byte buffer as they come (68 bytes per row, no
    Python object kept per row) and read as a typed numpy array by `to_frame`."""

    def __init__(self, run_info: dict | None = None):
        self.run_info: dict = dict(run_info or {})
        self._buf = bytearray()  # packed rows
        self.detail: dict[int, str] = {}  # row -> detail (sparse)
        self._codes: dict[str, int] = {}
        self._names: list[str] = []

    def code(self, name: str) -> int:
        c = self._codes.get(name)
        if c is None:
            c = self._codes[name] = len(self._names)
            self._names.append(name)
        return c

    def add(self, t: float, event: str, instance: int = -1, traj: int = -1, prompt_id: int = -1,
            version: int = -1, trainer_version: int = -1, tokens: int = 0, detail: str = "",
            dur_s: float = 0.0, busy_s: float = 0.0, prefill_s: float = 0.0) -> None:
        c = self._codes.get(event)
        if c is None:
            c = self.code(event)
        if detail:
            self.detail[len(self)] = detail
        try:
            self._buf += pack_row(t, c, instance, traj, prompt_id, version, trainer_version, tokens, dur_s, busy_s,
                                  prefill_s)
        except struct.error:
            self._buf += _cast([(t, c, instance, traj, prompt_id, version, trainer_version, tokens, dur_s, busy_s,
                                 prefill_s)])

    def extend(self, rows: list[tuple]) -> None:
        """Append rows given as (t_s, event code, instance, trajectory, prompt_id, version,
        trainer_version, tokens, dur_s, busy_s, prefill_s) with no detail (codes from `code`)."""
        try:
            self._buf += b"".join(itertools.starmap(pack_row, rows))
        except struct.error:
            self._buf += _cast(rows)

    def appender(self) -> Callable[[bytes], None]:
        """A function appending rows packed by `pack_row` (no detail; codes from `code`), for hot
        loops: `put(pack_row(t_s, code, instance, ...))` costs no Python call of this class."""
        return self._buf.extend

    def __len__(self) -> int:
        return len(self._buf) // _ROW.itemsize

    def to_frame(self) -> pd.DataFrame:
        rec = np.frombuffer(bytes(self._buf), dtype=_ROW)  # a copy: the log may grow further
        n = len(rec)
        # numeric columns go in as strided views of `rec`: the frame copies them into one block
        # per dtype
        cols = {name: rec[name] for name in _NAMES}
        cols["event"] = _categorical(rec["event"], self._names + ["?"]) if n else pd.Categorical([])
        cols["detail"] = _details(self.detail, n)
        df = pd.DataFrame({c: cols[c] for c in COLUMNS}, copy=True)
        df.attrs["run"] = self.run_info
        return df


def _categorical(codes: np.ndarray, names: list[str]) -> pd.Categorical:
    """The event names of `codes` (-1: the last name) as a Categorical whose categories are the
    names present, sorted (as pd.Categorical(values) would make them), without building the
    millions of strings first."""
    present = np.flatnonzero(np.bincount(codes.astype(np.intp) % len(names), minlength=len(names)))
    order = sorted(present, key=lambda k: names[k])
    lut = np.full(len(names), -1, dtype=np.int64)
    lut[order] = np.arange(len(order))
    return pd.Categorical.from_codes(lut[codes], [names[k] for k in order])


_STR = pd.Series([""]).dtype  # what pandas makes of a column of strings (str; object before pandas 3)


def _details(detail: dict[int, str], n: int):
    """The sparse `detail` texts as a column of n strings ("" elsewhere). With pandas' arrow
    strings it is built by arrow from a dictionary of the distinct texts (no object per row)."""
    if not isinstance(_STR, pd.StringDtype) or _STR.storage != "pyarrow":
        col = np.full(n, "", dtype=object)
        for r, d in detail.items():
            col[r] = d
        return col
    words: dict[str, int] = {"": 0}
    idx = np.zeros(n, dtype=np.int32)
    if detail:
        rows = np.fromiter(detail.keys(), dtype=np.int64, count=len(detail))
        idx[rows] = [words.setdefault(d, len(words)) for d in detail.values()]
    arr = pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(list(words), type=pa.large_string()))
    return pd.array(arr.cast(pa.large_string()), dtype=_STR)


def events_path(base: str | Path, policy: str, several: bool) -> Path:
    """OUT.parquet for one policy; OUT.<policy>.parquet when several share the flag."""
    p = Path(base)
    return p.with_name(f"{p.stem}.{policy}{p.suffix or '.parquet'}") if several else p


def write_events(df: pd.DataFrame, path: str | Path) -> None:
    """Write an event log parquet (atomically: a temp file renamed into place)."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[META_KEY] = json.dumps(df.attrs.get("run", {}), sort_keys=True, default=str).encode()
    table = table.replace_schema_metadata(meta)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_events(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"event log {p}: file not found; write one with --events OUT.parquet")
    try:
        table = pq.read_table(p)
    except Exception as e:
        raise InputError(f"event log {p}: not a readable parquet file ({type(e).__name__}); pass an event log "
                         "written with --events of dora.sim or dora.exec") from None
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise InputError(f"event log {p}: column '{missing[0]}' missing (an event log has {', '.join(COLUMNS)}); "
                         "pass one written with --events of dora.sim or dora.exec")
    df = table.to_pandas()
    df["event"] = df["event"].astype("category")
    raw = (table.schema.metadata or {}).get(META_KEY)
    try:
        run = json.loads(raw) if raw else {}
    except ValueError:
        raise InputError(f"event log {p}: its metadata 'dora.run' is not valid JSON; write the log again with "
                         "dora.sim or dora.exec --events") from None
    if not isinstance(run, dict):
        raise InputError(f"event log {p}: its metadata 'dora.run' is {type(run).__name__}, not a mapping; write the "
                         "log again with dora.sim or dora.exec --events")
    df.attrs["run"] = run
    df.attrs["path"] = str(p)
    return df
