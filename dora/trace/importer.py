"""Per-sample length logs to a trace: `python -m dora.trace import SRC -o OUT.parquet`.

Rules (docs/traces.md says them for users):
- columns: a trace column is read from the source column of the same name, or from the column
  `--map TRACE=SOURCE` names; response_len is required, prompt_id too unless response_len holds
  lists (then each row is one prompt);
- list cells (one row per prompt with a list of lengths) become one row per sample;
- a missing prompt length: every prompt_len is --prompt-len (default DEFAULT_PROMPT_LEN), with one
  warning line on stderr unless --prompt-len was given;
- groups are (step, prompt_id) when there is a step column, else prompt_id; samples are ordered by
  sample_idx when mapped, else by their order in the file, and renumbered 0..G-1;
- unequal groups: G is --group-size, else the most common group size (the larger on a tie);
  smaller groups are dropped, larger ones keep G samples drawn uniformly at random (seeded), not
  the first G: logs often list samples in completion order, and the first G would be the shortest;
- prompt ids: integer ids in [0, 2**31) that name one group each are kept; other ids (strings,
  integer ids that repeat across steps) become 0, 1, ... in order of first appearance, the
  originals recorded in the metadata (prompt_ids.values[i] is new id i's source id);
- --max-len N (the run's response length cap) is recorded, so responses of N tokens count as
  truncated when there is no finish_reason column;
- verl's rollout dump (--format verl): group key the prompt text, prompt_len and response_len its
  tokens under --tokenizer (an empty response counts 1 token: its end token), step and reward from
  verl's `step` and `score`.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dora.errors import InputError, too_small
from dora.trace.columns import INT32_MAX, ColumnError, explode, floats, integers, labels, prompt_ids
from dora.trace.generate import TraceParams
from dora.trace.schema import TURN_COLUMNS, write_trace
from dora.trace.sources import Source, detect_format, read_source, sha256
from dora.trace.tokens import TokenCounter

IMPORTER = "dora.trace.import/1"
TARGETS = ("prompt_id", "sample_idx", "prompt_len", "response_len", "step", "finish_reason", "reward", *TURN_COLUMNS)
DEFAULT_PROMPT_LEN = int(TraceParams.prompt_median)  # the generator's default prompt median (300)
VERL_MAP = {"prompt_id": "input", "prompt_len": "input", "response_len": "output", "step": "step", "reward": "score"}
LENGTH_FIX = "fix or drop the row (a length is a token count of at least 1)"


@dataclass
class ImportOptions:
    src: Path
    out: Path
    fmt: str | None = None
    mapping: dict[str, str] = field(default_factory=dict)
    group_size: int | None = None
    prompt_len: int | None = None
    tokenizer: str | None = None
    max_len: int | None = None
    seed: int = 0
    command: str = ""


def parse_map(items: list[str]) -> dict[str, str]:
    """`--map prompt_id=uid,response_len=response_length` (repeatable) -> {trace column: source column}."""
    out: dict[str, str] = {}
    for item in (p.strip() for text in items for p in text.split(",")):
        if not item:
            continue
        target, eq, source = (x.strip() for x in item.partition("="))
        if not eq or not source:
            raise InputError(f"--map {item}: write TRACE_COLUMN=SOURCE_COLUMN, e.g. --map prompt_id=uid")
        if target not in TARGETS:
            raise InputError(f"--map {item}: '{target}' is not a trace column; map one of {', '.join(TARGETS)}")
        if target in out:
            raise InputError(f"--map {item}: {target} is mapped twice; map each trace column once")
        out[target] = source
    return out


def _check_options(o: ImportOptions, fmt: str) -> None:
    out = o.out
    if out.is_dir():
        raise InputError(f"-o {out}: is a directory; give a file path such as {out / 'trace.parquet'}")
    if out.suffix.lower() != ".parquet":
        raise InputError(f"-o {out}: a trace is a parquet file; name it .parquet")
    if out.exists() and o.src.exists() and out.resolve() == o.src.resolve():
        raise InputError(f"-o {out}: is the source file; write the trace to another path")
    if o.group_size is not None and o.group_size < 1:
        raise too_small("--group-size", o.group_size, 1, "sample per group")
    if o.prompt_len is not None and o.prompt_len < 1:
        raise too_small("--prompt-len", o.prompt_len, 1, "token")
    if o.max_len is not None and o.max_len < 1:
        raise too_small("--max-len", o.max_len, 1, "token")
    if fmt == "verl":
        if o.mapping:
            raise InputError("--map: does not apply to --format verl, which reads verl's own fields "
                             "(input, output, step, score); drop --map")
        if o.tokenizer is None:
            raise InputError("--format verl: verl's dump holds text; pass --tokenizer PATH (the local tokenizer "
                             "directory or tokenizer.json of the model that generated it) to count its tokens")
    elif o.tokenizer is not None:
        raise InputError(f"--tokenizer: only --format verl holds text to count; {fmt} holds lengths already, so drop "
                         "--tokenizer")
    if "prompt_len" in o.mapping and o.prompt_len is not None:
        raise InputError("--prompt-len with --map prompt_len=...: choose one (a column or one length for all)")


def _mapped(src: Source, o: ImportOptions, label: str) -> dict[str, str]:
    """{trace column: source column} for the columns this import reads."""
    cols = src.names
    for target, source in o.mapping.items():
        if source not in cols:
            raise InputError(f"--map {target}={source}: {label} has no column '{source}'; map one of its columns: "
                             f"{', '.join(cols) or 'none'}")
    used = dict(o.mapping)
    for target in TARGETS:
        if target not in used and target in cols and target not in used.values():
            used[target] = target
    if o.prompt_len is not None and used.get("prompt_len") == "prompt_len":
        del used["prompt_len"]  # --prompt-len chosen over the file's column
    if "response_len" not in used:
        hint = (" (it looks like verl's rollout dump: pass --format verl --tokenizer PATH)"
                if {"input", "output"} <= set(cols) else "")
        raise InputError(f"import {label}: no response_len column{hint}; map the column of response lengths "
                         f"with --map response_len=COLUMN (columns: {', '.join(cols) or 'none'})")
    return used


def _verl_frame(src: Source, o: ImportOptions, label: str) -> tuple[pd.DataFrame, TokenCounter]:
    counter = TokenCounter(o.tokenizer)  # type: ignore[arg-type]
    cols = {}
    for name in ("input", "output"):
        vals = src.df[name].to_numpy(dtype=object)
        bad = np.flatnonzero([not isinstance(v, str) for v in vals])
        if len(bad):
            i = int(bad[0])
            raise InputError(f"import {label}: {src.where(i)}: field '{name}' is {vals[i]!r}, not text; "
                             "pass verl's own dump (it writes the decoded prompt and response as strings)")
        cols[name] = list(vals)
    frame = pd.DataFrame({
        "prompt_id": np.array(cols["input"], dtype=object),
        "prompt_len": counter.count(cols["input"]),
        "response_len": np.maximum(counter.count(cols["output"]), 1),
        "step": src.df["step"],
    })
    if "score" in src.df.columns:
        frame["reward"] = src.df["score"].to_numpy()
    return frame, counter


def _groups(gid: np.ndarray, order_key: np.ndarray, G: int | None, seed: int) -> tuple[np.ndarray, dict]:
    """Rows to keep, in (group, sample) order, under the unequal-group rule; and the counts."""
    n = len(gid)
    sizes = np.bincount(gid)
    if G is None:
        vals, counts = np.unique(sizes, return_counts=True)
        G = int(vals[counts == counts.max()].max())
    r = np.random.default_rng(seed).random(n)  # one draw per row in file order
    by_r = np.lexsort((r, gid))
    starts = np.cumsum(sizes) - sizes
    rank = np.empty(n, np.int64)
    rank[by_r] = np.arange(n) - starts[gid[by_r]]
    keep = (sizes[gid] >= G) & (rank < G)
    rows = np.flatnonzero(keep)
    rows = rows[np.lexsort((order_key[rows], gid[rows]))]
    small, large = sizes < G, sizes > G
    info = {"group_size": G, "groups_kept": int((~small).sum()), "groups_as_read": int((sizes == G).sum()),
            "larger_truncated": int(large.sum()), "samples_truncated": int((sizes[large] - G).sum()),
            "smaller_dropped": int(small.sum()), "samples_dropped": int(sizes[small].sum()), "seed": seed}
    return rows, info


def group_line(info: dict) -> str:
    """The one-line count the import prints."""
    G = info["group_size"]
    n = lambda k, what: f"{k:,} {what}" + ("" if k == 1 else "s")  # noqa: E731
    line = f"groups: {info['groups_kept']:,} kept of G={G} samples"
    if info["larger_truncated"] or info["smaller_dropped"]:
        line += (f" ({info['groups_as_read']:,} as read, {info['larger_truncated']:,} larger cut to {G} at random: "
                 f"{n(info['samples_truncated'], 'sample')} left out); {info['smaller_dropped']:,} smaller dropped "
                 f"({n(info['samples_dropped'], 'sample')})")
    else:
        line += ", every group that size"
    return line


def import_trace(o: ImportOptions) -> dict:
    """Read o.src, write the trace to o.out (validated before anything is written); the metadata."""
    label = str(o.src)
    fmt = detect_format(o.src, o.fmt)
    _check_options(o, fmt)
    src = read_source(o.src, fmt, {*TARGETS, *o.mapping.values()})
    if len(src.df) == 0:
        raise InputError(f"import {label}: no rows (a header only); give a file with one row per sample or prompt")
    counter = None
    if fmt == "verl":
        frame, counter = _verl_frame(src, o, label)
        used = dict(VERL_MAP) if "reward" in frame.columns else {k: v for k, v in VERL_MAP.items() if k != "reward"}
    else:
        used = _mapped(src, o, label)
        frame = pd.DataFrame({t: src.df[s].reset_index(drop=True) for t, s in used.items()})
    where = src.where
    frame, rows, element = explode(frame, where, label, used)
    if element is not None:
        src.file_idx, src.pos, src.element = src.file_idx[rows], src.pos[rows], element
    if "prompt_id" not in frame.columns:
        if element is None:
            raise InputError(f"import {label}: no prompt_id column; map the column naming each sample's prompt "
                             "with --map prompt_id=COLUMN (or give one row per prompt with a list of lengths)")
        frame["prompt_id"] = rows  # one prompt per source row
        used["prompt_id"] = "(source row)"
    err = lambda t: ColumnError(label, where, used[t], t)  # noqa: E731
    cols: dict[str, np.ndarray] = {"response_len": integers(frame["response_len"], err("response_len"), 1, LENGTH_FIX)}
    if o.max_len is not None:
        over = np.flatnonzero(cols["response_len"] > o.max_len)
        if len(over):
            raise err("response_len")(int(over[0]), f"value {cols['response_len'][over[0]]} is above --max-len "
                                      f"{o.max_len}", "pass the run's response length cap as --max-len")
    warning = None
    if "prompt_len" in frame.columns:
        cols["prompt_len"] = integers(frame["prompt_len"], err("prompt_len"), 1,
                                      f"{LENGTH_FIX}; if the export has no prompt lengths, leave prompt_len "
                                      "unmapped and pass --prompt-len N")
    else:
        plen = o.prompt_len or DEFAULT_PROMPT_LEN
        cols["prompt_len"] = np.full(len(frame), plen, np.int64)
        if o.prompt_len is None:
            warning = (f"dora.trace: warning: {label} has no prompt length column; every prompt_len is "
                       f"{plen} tokens (pass --prompt-len N, or --map prompt_len=COLUMN)")
    if "step" in frame.columns:
        cols["step"] = integers(frame["step"], err("step"), 0, "fix the row (steps count from 0 or 1)")
    if "finish_reason" in frame.columns:
        cols["finish_reason"] = labels(frame["finish_reason"], err("finish_reason"))
    if "reward" in frame.columns:
        cols["reward"] = floats(frame["reward"], err("reward"))
    _turn_columns(frame, cols, err)
    ids = prompt_ids(frame["prompt_id"], err("prompt_id"))
    order_key = np.arange(len(frame))
    if "sample_idx" in frame.columns:
        order_key = integers(frame["sample_idx"], err("sample_idx"), 0,
                               "fix the row (sample indices count from 0)")
    keys = [pd.Series(ids)] if "step" not in cols else [pd.Series(cols["step"]), pd.Series(ids)]
    gid = pd.DataFrame({i: k for i, k in enumerate(keys)}).groupby(list(range(len(keys))), sort=False).ngroup() \
        .to_numpy()
    _check_duplicate_samples(gid, order_key, err, "sample_idx" in frame.columns)
    keep, info = _groups(gid, order_key, o.group_size, o.seed)
    if len(keep) == 0:
        raise InputError(f"import {label}: no rows left: no group has --group-size {info['group_size']} samples "
                         f"(largest {int(np.bincount(gid).max())}); lower --group-size")
    kg = gid[keep]
    new_gid = np.unique(kg, return_inverse=True)[1]  # groups keep their order of first appearance
    group_first = keep[np.r_[True, kg[1:] != kg[:-1]]]
    raw = ids[group_first]
    meta: dict = {"generator": IMPORTER, "command": o.command, "mapping": used, "groups": info,
                  "source": {"file": o.src.name, "format": fmt, "sha256": sha256(src.files), "rows": len(src.df)}}
    if len(src.files) > 1:
        meta["source"]["files"] = len(src.files)
    if ids.dtype.kind == "i" and len(np.unique(raw)) == len(raw) and raw.min() >= 0 and raw.max() <= INT32_MAX:
        pid = raw[new_gid]
    else:
        pid = new_gid.astype(np.int64)
        values = [("sha256:" + hashlib.sha256(v.encode()).hexdigest()[:16]) if fmt == "verl" else
                  (v if isinstance(v, str) else int(v)) for v in raw]
        meta["prompt_ids"] = {"column": used["prompt_id"], "values": values,
                              "rule": "new id i is values[i] of the source" +
                                      (" (sha256 of the prompt text, 16 hex digits)" if fmt == "verl" else "")}
    if warning is not None or o.prompt_len is not None:
        meta["prompt_len_default"] = int(cols["prompt_len"][0])
    if o.max_len is not None:
        meta["max_len"] = o.max_len
    if counter is not None:
        meta["tokenizer"] = {"file": counter.file.name, "sha256": counter.sha256}
    starts = np.r_[0, np.flatnonzero(kg[1:] != kg[:-1]) + 1]
    sample_idx = np.arange(len(keep)) - np.repeat(starts, np.diff(np.r_[starts, len(keep)]))
    out_cols = {"prompt_id": pid, "sample_idx": sample_idx, **{k: v[keep] for k, v in cols.items()}}
    if warning is not None:
        print(warning, file=sys.stderr)
    write_trace(o.out, out_cols, meta)
    return meta


def _turn_columns(frame: pd.DataFrame, cols: dict[str, np.ndarray], err) -> None:
    """Multi-turn columns (dora/trace/schema.py): turns in [1, response_len]; per tool call,
    tool_wait_s seconds and tool_tokens tokens, both >= 0 and only with turns."""
    given = [c for c in TURN_COLUMNS if c in frame.columns]
    if given and "turns" not in given:
        raise err(given[0])(None, "given without a turns column",
                            "map turns too (tool calls per trajectory = turns - 1), or leave it unmapped")
    if "turns" in given:
        turns = integers(frame["turns"], err("turns"), 1, "fix or drop the row (a trajectory has at least one turn)")
        over = np.flatnonzero(turns > cols["response_len"])
        if len(over):
            i = int(over[0])
            raise err("turns")(i, f"value {turns[i]} is more than response_len {cols['response_len'][i]}",
                               "lower turns or drop the row (each turn generates at least one token)")
        cols["turns"] = turns
    if "tool_tokens" in given:
        cols["tool_tokens"] = integers(frame["tool_tokens"], err("tool_tokens"), 0,
                                        "fix or drop the row (a tool call appends >= 0 tokens)")
    if "tool_wait_s" in given:
        wait = floats(frame["tool_wait_s"], err("tool_wait_s"))
        neg = np.flatnonzero(wait < 0)
        if len(neg):
            raise err("tool_wait_s")(int(neg[0]), f"value {wait[neg[0]]} is negative",
                                       "fix or drop the row (a tool call waits >= 0 s)")
        cols["tool_wait_s"] = wait


def _check_duplicate_samples(gid: np.ndarray, order_key: np.ndarray, err, mapped: bool) -> None:
    if not mapped:
        return
    o = np.lexsort((order_key, gid))
    dup = np.flatnonzero((gid[o][1:] == gid[o][:-1]) & (order_key[o][1:] == order_key[o][:-1]))
    if len(dup):
        i = int(o[dup[0] + 1])
        raise err("sample_idx")(i, f"value {order_key[i]} appears twice in one prompt's group",
                                "number each prompt's samples once (or leave sample_idx unmapped: file order)")
