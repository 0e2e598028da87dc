"""Column checks for imports: list cells exploded to one row per sample, integers, ids, labels.

Every check raises InputError naming the source column, the trace column it feeds, the first bad
row's place in the input and how to fix it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pandas as pd

from dora.errors import InputError
from dora.trace.schema import FINISH_REASONS

INT32_MAX = 2**31 - 1
Where = Callable[[int], str]  # row -> its place in the input, e.g. "line 7"


class ColumnError:
    """Builds the one-line error for (source column, trace column)."""

    def __init__(self, src: str, where: Where, source_col: str, target: str):
        self.src, self.where, self.source_col, self.target = src, where, source_col, target

    def __call__(self, row: int | None, what: str, fix: str) -> InputError:
        col = f"column '{self.source_col}'" + (f" ({self.target})" if self.source_col != self.target else "")
        at = f"{self.where(row)}: " if row is not None else ""
        return InputError(f"import {self.src}: {at}{col}: {what}; {fix}")


def _is_list(v) -> bool:
    return isinstance(v, (list, tuple, np.ndarray))


def list_cells(s: pd.Series, err: ColumnError) -> pd.Series | None:
    """The column as a Series of lists if it holds lists (JSON arrays, parquet lists, or CSV cells
    written as JSON arrays such as "[812, 95]"); None for a column of single values."""
    if s.dtype.kind not in "OSU" and not isinstance(s.dtype, pd.StringDtype):
        return None
    vals = s.to_numpy(dtype=object)
    is_list = np.fromiter((_is_list(v) for v in vals), bool, len(vals))
    is_text = np.fromiter((isinstance(v, str) and v.lstrip().startswith("[") for v in vals), bool, len(vals))
    if not (is_list.any() or is_text.any()):
        return None
    out = vals.copy()
    for i in np.flatnonzero(is_text):
        try:
            out[i] = json.loads(vals[i])
        except ValueError:
            raise err(int(i), f"cell {vals[i][:40]!r} is not a JSON list", 'write list cells as "[812, 95, 3021]"') \
                from None
    ok = np.fromiter((_is_list(v) for v in out), bool, len(out))
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise err(i, f"holds lists in some rows but {vals[i]!r} here",
                  "give every row a list (one element per sample), or no row")
    return pd.Series(out, index=s.index)


def explode(frame: pd.DataFrame, where: Where, src: str, names: dict[str, str]) -> tuple[pd.DataFrame, np.ndarray,
                                                                                        np.ndarray | None]:
    """One row per sample: list cells (equal length across a row's list columns) become rows, single
    values repeat. Returns (frame, source row of each new row, list element of each new row or None)."""
    lists = {}
    for col in frame.columns:
        got = list_cells(frame[col], ColumnError(src, where, names[col], col))
        if got is not None:
            lists[col] = got
    n = len(frame)
    if not lists:
        return frame, np.arange(n), None
    if "prompt_id" in lists:
        raise ColumnError(src, where, names["prompt_id"], "prompt_id")(
            None, "holds lists", "give one prompt id per row (list columns hold one element per sample)")
    first = next(iter(lists))
    lens = lists[first].map(len).to_numpy(dtype=np.int64)
    for col, cells in lists.items():
        other = cells.map(len).to_numpy(dtype=np.int64)
        bad = np.flatnonzero(other != lens)
        if len(bad):
            i = int(bad[0])
            raise ColumnError(src, where, names[col], col)(
                i, f"has {other[i]} elements but column '{names[first]}' has {lens[i]}",
                "list columns of one row need one element per sample each")
    empty = np.flatnonzero(lens == 0)
    if len(empty):
        raise ColumnError(src, where, names[first], first)(int(empty[0]), "is an empty list",
                                                           "drop rows of prompts without samples")
    rows = np.repeat(np.arange(n), lens)
    element = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    out = {}
    for col in frame.columns:
        if col in lists:
            out[col] = pd.Series([v for cell in lists[col] for v in cell], dtype=object)
        else:
            out[col] = pd.Series(frame[col].to_numpy()[rows])
    return pd.DataFrame(out), rows, element


WHOLE = "fix the cell (lengths, steps and ids are whole numbers)"


def integers(s: pd.Series, err: ColumnError, minimum: int, fix_min: str, limit: int = INT32_MAX) -> np.ndarray:
    """The column as int64: whole numbers (12 or 12.0), none missing, each in [minimum, limit]."""
    if s.dtype.kind in "iu":
        arr = s.to_numpy().astype(np.int64)
    else:
        vals = s.to_numpy(dtype=object)
        if s.dtype.kind == "b" or any(isinstance(v, bool) for v in vals):
            raise err(None, "holds true/false values, not integers", "map a column of whole numbers")
        num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64)
        missing = np.flatnonzero(~np.isfinite(num))
        if len(missing):
            i = int(missing[0])
            if pd.isna(vals[i]):
                raise err(i, "is missing", "fill the cell or drop the row")
            raise err(i, f"value {vals[i]!r} is not an integer", WHOLE)
        frac = np.flatnonzero(num != np.floor(num))
        if len(frac):
            i = int(frac[0])
            raise err(i, f"value {vals[i]!r} is not an integer", WHOLE)
        big = np.flatnonzero(np.abs(num) > min(limit, 2**53))
        if len(big):
            raise err(int(big[0]), f"value {vals[int(big[0])]!r} is too large",
                      f"fix the cell (values must be at most {limit:,})")
        arr = num.astype(np.int64)
    big = np.flatnonzero(np.abs(arr) > limit)
    if len(big):
        raise err(int(big[0]), f"value {arr[int(big[0])]} is too large",
                  f"fix the cell (values must be at most {limit:,})")
    bad = np.flatnonzero(arr < minimum)
    if len(bad):
        i = int(bad[0])
        what = f"value {arr[i]} is negative" if arr[i] < 0 else f"value {arr[i]} is not >= {minimum}"
        raise err(i, what, fix_min)
    return arr


def prompt_ids(s: pd.Series, err: ColumnError) -> np.ndarray:
    """Integer ids (int64) for a numeric column of whole numbers; otherwise each value as a string."""
    if s.dtype.kind in "iuf":
        return integers(s, err, -(2**63) + 1, "", limit=2**63 - 1)
    vals = s.to_numpy(dtype=object)
    missing = np.flatnonzero(pd.isna(vals))
    if len(missing):
        raise err(int(missing[0]), "is missing", "give every sample its prompt's id")
    return np.array([str(v) for v in vals], dtype=object)


def labels(s: pd.Series, err: ColumnError) -> np.ndarray:
    """finish_reason: each 'stop' or 'length'."""
    vals = s.to_numpy(dtype=object)
    ok = np.isin(vals, FINISH_REASONS)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise err(i, f"value {vals[i]!r} is not one of {FINISH_REASONS}",
                  "write 'stop' (ended by itself) or 'length' (cut at the length cap), or leave finish_reason unmapped")
    return vals


def floats(s: pd.Series, err: ColumnError) -> np.ndarray:
    """reward, tool_wait_s: finite numbers."""
    num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(num))
    if len(bad):
        i = int(bad[0])
        raise err(i, f"value {s.iloc[i]!r} is not a finite number", "fill the cell or leave the column unmapped")
    return num
