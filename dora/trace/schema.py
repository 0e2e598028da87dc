"""Trace schema (documented in docs/traces.md): one parquet row per trajectory, validated on load."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dora.errors import InputError
from dora.io import atomic_path

REQUIRED_COLUMNS = {
    "prompt_id": pa.int64(),
    "sample_idx": pa.int32(),
    "prompt_len": pa.int32(),
    "response_len": pa.int32(),
}
OPTIONAL_INT_COLUMNS = {"step": pa.int32(), "version": pa.int32(), "instance": pa.int32(),
                        "turns": pa.int32(), "tool_tokens": pa.int32()}
OPTIONAL_FLOAT_COLUMNS = {"reward": pa.float64(), "t_start_s": pa.float64(), "t_end_s": pa.float64(),
                          "tool_wait_s": pa.float64()}
# Multi-turn (agentic) trajectories: `turns` assistant turns (>= 1, at most response_len: each turn
# generates at least one token), with a tool call after every turn but the last. Each of the
# turns - 1 calls waits `tool_wait_s` seconds (per call, not the total) and appends `tool_tokens`
# tokens of tool output (per call) to the context. response_len stays the total generated tokens.
TURN_COLUMNS = ("turns", "tool_wait_s", "tool_tokens")
FINISH_REASONS = ("stop", "length")
META_KEY = b"dora.trace"


@dataclass
class Trace:
    """A validated trace, rows sorted by (step, prompt_id, sample_idx).

    Groups are contiguous: group g occupies rows [g*G, (g+1)*G).
    """

    path: str
    prompt_id: np.ndarray  # int64, one per row
    sample_idx: np.ndarray  # int32
    prompt_len: np.ndarray  # int32
    response_len: np.ndarray  # int32
    step: np.ndarray | None = None  # int32
    finish_reason: np.ndarray | None = None  # object ('stop'/'length')
    metadata: dict = field(default_factory=dict)
    turns: np.ndarray | None = None  # int32 >= 1 (None: every trajectory is one turn)
    tool_wait_s: np.ndarray | None = None  # float64 >= 0, seconds of each tool call
    tool_tokens: np.ndarray | None = None  # int32 >= 0, tool-output tokens appended per tool call

    @property
    def group_size(self) -> int:
        return int(self.sample_idx.max()) + 1

    @property
    def num_groups(self) -> int:
        return len(self.prompt_id) // self.group_size

    def __len__(self) -> int:
        return len(self.prompt_id)

    @property
    def recorded_cap(self) -> int | None:
        """The length cap the metadata records: the generator's max_len, or an import's --max-len."""
        cap = self.metadata.get("params", {}).get("max_len") or self.metadata.get("max_len")
        return int(cap) if cap else None

    @property
    def max_len(self) -> int:
        """Length cap: recorded in the metadata, else the longest response."""
        return self.recorded_cap or int(self.response_len.max())

    def group_prompt_ids(self) -> np.ndarray:
        return self.prompt_id[:: self.group_size]

    def tool_tokens_total(self) -> np.ndarray:
        """Tool-output tokens each trajectory appends to its context over all its tool calls."""
        if self.turns is None or self.tool_tokens is None:
            return np.zeros(len(self.prompt_id), dtype=np.int64)
        return (self.turns.astype(np.int64) - 1) * self.tool_tokens

    def truncated(self) -> np.ndarray:
        if self.finish_reason is not None:
            return self.finish_reason == "length"
        return self.response_len >= self.max_len


def _bad(path: str, column: str, row: int | None, what: str, fix: str) -> InputError:
    where = f"column '{column}'" + (f", row {row} (0-based)" if row is not None else "")
    return InputError(f"bad trace {path}: {where}: {what}; {fix}")


def load_trace(path: str | Path) -> Trace:
    """Read and validate a trace; raise InputError on the first problem found."""
    p = str(path)
    if not Path(p).is_file():
        raise InputError(f"trace {p}: file not found; pass a parquet trace, e.g. traces/moe_longtail.parquet")
    try:
        table = pq.read_table(p)
    except Exception as e:  # pyarrow raises several types for non-parquet files
        raise InputError(f"trace {p}: not a readable parquet file ({type(e).__name__}); "
                         "write traces with `python -m dora.trace generate` or pyarrow") from None
    if table.num_rows == 0:
        raise InputError(f"bad trace {p}: the file has no rows; write one row per trajectory (e.g. with "
                         "`python -m dora.trace generate`)")
    names = set(table.column_names)
    for col in REQUIRED_COLUMNS:
        if col not in names:
            raise _bad(p, col, None, "missing",
                       f"add it (required columns are {', '.join(REQUIRED_COLUMNS)})")
    cols: dict[str, np.ndarray] = {}
    for col, want in {**REQUIRED_COLUMNS, **{k: v for k, v in OPTIONAL_INT_COLUMNS.items() if k in names}}.items():
        arr = table.column(col)
        if not pa.types.is_integer(arr.type):
            raise _bad(p, col, None, f"has type {arr.type}, expected an integer type ({want})",
                       "cast the column to integers")
        if arr.null_count:
            row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
            raise _bad(p, col, row, "is null", "fill or drop rows with missing values")
        cols[col] = arr.to_numpy().astype(want.to_pandas_dtype())
    floats: dict[str, np.ndarray] = {}
    for col in OPTIONAL_FLOAT_COLUMNS:
        if col in names:
            arr = table.column(col)
            if not (pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type)):
                raise _bad(p, col, None, f"has type {arr.type}, expected a number", "cast the column to float64")
            vals = arr.to_numpy(zero_copy_only=False).astype(np.float64)
            bad = np.flatnonzero(~np.isfinite(vals))
            if len(bad):
                r = int(bad[0])
                what = "is null" if arr.null_count and arr.is_null().to_numpy(zero_copy_only=False)[r] else \
                    f"value {vals[r]} is NaN or infinite"
                raise _bad(p, col, r, what, "fill or drop rows with missing values")
            floats[col] = vals
    for col in ("prompt_len", "response_len"):
        bad = np.flatnonzero(cols[col] < 1)
        if len(bad):
            r = int(bad[0])
            raise _bad(p, col, r, f"value {int(cols[col][r])} is not >= 1",
                       "fix or drop the row (lengths are token counts of at least 1)")
    for col in ("sample_idx", "step"):
        if col in cols:
            bad = np.flatnonzero(cols[col] < 0)
            if len(bad):
                r = int(bad[0])
                raise _bad(p, col, r, f"value {int(cols[col][r])} is negative", "fix the row (indices start at 0)")
    _check_turns(p, cols, floats)
    finish = None
    if "finish_reason" in names:
        fr = table.column("finish_reason")
        if not (pa.types.is_string(fr.type) or pa.types.is_large_string(fr.type)
                or (pa.types.is_dictionary(fr.type) and pa.types.is_string(fr.type.value_type))):
            raise _bad(p, "finish_reason", None, f"has type {fr.type}, expected strings",
                       f"use one of {FINISH_REASONS}")
        finish = np.asarray(fr.to_pandas(), dtype=object)
        ok = np.isin(finish, FINISH_REASONS)
        if not ok.all():
            r = int(np.flatnonzero(~ok)[0])
            raise _bad(p, "finish_reason", r, f"value {finish[r]!r} is not one of {FINISH_REASONS}",
                       "use 'stop' or 'length'")
    _check_groups(p, cols["prompt_id"], cols["sample_idx"])
    step = cols.get("step")
    keys = (cols["sample_idx"], cols["prompt_id"]) if step is None else (cols["sample_idx"], cols["prompt_id"], step)
    order = np.lexsort(keys)
    meta = {}
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw:
        try:
            meta = json.loads(raw)
        except ValueError:
            meta = None
        if not isinstance(meta, dict) or not isinstance(meta.get("params", {}), dict):
            raise InputError(f"bad trace {p}: its metadata 'dora.trace' is not a JSON mapping (with 'params' a "
                             "mapping); write it again with dora.trace.write_trace, or without that metadata")
    return Trace(
        path=p,
        prompt_id=cols["prompt_id"][order],
        sample_idx=cols["sample_idx"][order],
        prompt_len=cols["prompt_len"][order],
        response_len=cols["response_len"][order],
        step=None if step is None else step[order],
        finish_reason=None if finish is None else finish[order],
        metadata=meta,
        turns=None if "turns" not in cols else cols["turns"][order],
        tool_wait_s=None if "tool_wait_s" not in floats else floats["tool_wait_s"][order],
        tool_tokens=None if "tool_tokens" not in cols else cols["tool_tokens"][order],
    )


def _check_turns(p: str, cols: dict[str, np.ndarray], floats: dict[str, np.ndarray]) -> None:
    """The multi-turn columns: turns in [1, response_len], tool_wait_s and tool_tokens >= 0, and
    the tool columns only with a turns column."""
    if "turns" not in cols:
        for col in ("tool_wait_s", "tool_tokens"):
            if col in cols or col in floats:
                raise _bad(p, col, None, "given without a 'turns' column",
                           "add turns (tool calls per trajectory = turns - 1) or drop the column")
        return
    turns = cols["turns"]
    bad = np.flatnonzero(turns < 1)
    if len(bad):
        r = int(bad[0])
        raise _bad(p, "turns", r, f"value {int(turns[r])} is not >= 1",
                   "fix or drop the row (a trajectory has at least one turn)")
    bad = np.flatnonzero(turns > cols["response_len"])
    if len(bad):
        r = int(bad[0])
        raise _bad(p, "turns", r, f"value {int(turns[r])} is more than response_len {int(cols['response_len'][r])}",
                   "lower turns or drop the row (each turn generates at least one token)")
    for col, vals in (("tool_tokens", cols.get("tool_tokens")), ("tool_wait_s", floats.get("tool_wait_s"))):
        if vals is None:
            continue
        bad = np.flatnonzero(vals < 0)
        if len(bad):
            r = int(bad[0])
            raise _bad(p, col, r, f"value {vals[r]} is negative",
                       "fix or drop the row (tool calls take >= 0 seconds and tokens)")


def _check_groups(p: str, prompt_id: np.ndarray, sample_idx: np.ndarray) -> None:
    """Every prompt has samples 0..G-1 exactly once, with one G for the whole file."""
    order = np.lexsort((sample_idx, prompt_id))
    pid, sid = prompt_id[order], sample_idx[order]
    starts = np.flatnonzero(np.r_[True, pid[1:] != pid[:-1]])
    sizes = np.diff(np.r_[starts, len(pid)])
    g = int(sizes[0])
    bad_size = np.flatnonzero(sizes != g)
    if len(bad_size):
        k = int(bad_size[0])
        r = int(order[starts[k]])
        raise _bad(p, "prompt_id", r,
                   f"group {int(pid[starts[k]])} has {int(sizes[k])} samples but group {int(pid[0])} has {g}",
                   "give every prompt group the same number of samples, or drop the groups that differ "
                   "(ragged groups are refused)")
    expect = np.tile(np.arange(g, dtype=sid.dtype), len(starts))
    bad = np.flatnonzero(sid != expect)
    if len(bad):
        r = int(order[bad[0]])
        raise _bad(p, "sample_idx", r,
                   f"prompt {int(pid[bad[0]])} has sample_idx values that are not 0..{g - 1} exactly once",
                   "number the samples of each group 0..G-1")


def write_trace(path: str | Path, columns: dict[str, np.ndarray], metadata: dict) -> None:
    """Write a trace parquet with the schema's types and provenance metadata."""
    arrays, fields = [], []
    for name, want in {**REQUIRED_COLUMNS, **OPTIONAL_INT_COLUMNS, **OPTIONAL_FLOAT_COLUMNS}.items():
        if name in columns:
            arrays.append(pa.array(np.asarray(columns[name]), type=want))
            fields.append(pa.field(name, want, nullable=False))
    if "finish_reason" in columns:
        arrays.append(pa.array(list(columns["finish_reason"]), type=pa.string()).dictionary_encode())
        fields.append(pa.field("finish_reason", pa.dictionary(pa.int32(), pa.string()), nullable=False))
    schema = pa.schema(fields, metadata={META_KEY: json.dumps(metadata, sort_keys=True).encode()})
    table = pa.Table.from_arrays(arrays, schema=schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", compression_level=9)
