"""Read per-sample length logs (CSV, JSONL, parquet, verl rollout dumps) into one DataFrame.

Each reader returns a Source: the rows as read (columns named as in the file), and where each
row came from (file and line, or parquet row) for error messages. Nothing here decides what a
column means; dora/trace/importer.py maps columns to the trace schema.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dora.errors import InputError

FORMATS = ("csv", "jsonl", "parquet", "verl")
SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
# verl's rollout dump (trainer.rollout_data_dir): RayPPOTrainer._dump_generations in verl's
# verl/trainer/ppo/ray_trainer.py writes one file <global_step>.jsonl per step, one JSON object per
# sample with the decoded prompt `input`, the decoded response `output`, `gts`, `score`, `step`,
# and any per-sample reward extras (e.g. `acc`).
VERL_FIELDS = ("input", "output", "step")


@dataclass
class Source:
    """Rows as read, and where each row came from."""

    df: pd.DataFrame
    fmt: str
    files: list[Path]  # the files read (one, or a directory's *.jsonl)
    file_idx: np.ndarray  # per row: index into files
    pos: np.ndarray  # per row: 1-based line (csv, jsonl, verl) or 0-based row (parquet)
    names: list[str]  # every column of the input (df may hold only those asked for)
    element: np.ndarray | None = None  # per row: index in a list cell, once list columns are exploded

    def where(self, i: int) -> str:
        """Row i's place in the input: 'line 7', 'row 6 (0-based)' (parquet), '12.jsonl line 7' (a
        directory), with ', list element 2' (0-based) for a sample read from a list cell."""
        at = f"row {int(self.pos[i])} (0-based)" if self.fmt == "parquet" else f"line {int(self.pos[i])}"
        if len(self.files) > 1:
            at = f"{self.files[int(self.file_idx[i])].name} {at}"
        if self.element is not None:
            at += f", list element {int(self.element[i])}"
        return at


def detect_format(src: Path, fmt: str | None) -> str:
    if fmt is not None:
        if fmt not in FORMATS:
            raise InputError(f"--format {fmt}: unknown; choose from {', '.join(FORMATS)}")
        return fmt
    if src.is_dir():
        raise InputError(f"import {src}: is a directory; a directory is read as verl's rollout dump: "
                         "pass --format verl (or name one file)")
    got = SUFFIXES.get(src.suffix.lower())
    if got is None:
        raise InputError(f"import {src}: cannot tell the format from '{src.suffix}'; name the file "
                         f"{', '.join(SUFFIXES)} or pass --format ({', '.join(FORMATS)})")
    return got


def source_files(src: Path, fmt: str) -> list[Path]:
    """The files to read: src itself, or (verl) a directory's <step>.jsonl files in step order."""
    if not src.exists():
        raise InputError(f"import {src}: file not found; pass a CSV, JSONL or parquet file of per-sample lengths")
    if not src.is_dir():
        return [src]
    if fmt not in ("verl", "jsonl"):
        raise InputError(f"import {src}: is a directory; only --format verl or jsonl reads a directory (its *.jsonl), "
                         "so pass one of them or name one file")
    files = [p for p in src.iterdir() if p.suffix == ".jsonl" and p.is_file()]
    if not files:
        raise InputError(f"import {src}: the directory has no *.jsonl files; point at verl's "
                         "trainer.rollout_data_dir (files <step>.jsonl)")
    return sorted(files, key=lambda p: (0, int(p.stem), "") if p.stem.isdigit() else (1, 0, p.name))


def sha256(files: list[Path]) -> str:
    """sha256 of one file; of several, sha256 of their `sha256sum` lines ('HEX  NAME\\n', in order)."""
    digests = []
    for f in files:
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        digests.append(h.hexdigest())
    if len(files) == 1:
        return digests[0]
    return hashlib.sha256("".join(f"{d}  {f.name}\n" for d, f in zip(digests, files)).encode()).hexdigest()


def read_source(src: Path, fmt: str, wanted: set[str] | None = None) -> Source:
    """The rows of src; of a parquet file only the columns in `wanted` (None: all)."""
    files = source_files(src, fmt)
    if fmt == "csv":
        return _read_csv(files[0])
    if fmt == "parquet":
        return _read_parquet(files[0], wanted)
    return _read_jsonl(files, fmt)


def _empty(f: Path) -> InputError:
    return InputError(f"import {f}: the file is empty; give a header (CSV) or records, one per sample or prompt")


def _read_csv(f: Path) -> Source:
    if f.stat().st_size == 0:
        raise _empty(f)
    try:
        df = pd.read_csv(f, on_bad_lines="error", skipinitialspace=True, encoding="utf-8-sig")
    except pd.errors.EmptyDataError:
        raise _empty(f) from None
    except pd.errors.ParserError as e:
        msg = " ".join(str(e).split()).removeprefix("Error tokenizing data. ").removeprefix("C error: ")
        raise InputError(f"import {f}: malformed CSV: {msg}; fix that line (every line needs the header's "
                         "number of fields; quote fields that hold commas)") from None
    except UnicodeDecodeError as e:
        raise InputError(f"import {f}: not UTF-8 text at byte {e.start}; save the CSV as UTF-8") from None
    # a data row's line, assuming one line per record (line 1 is the header)
    return Source(df, "csv", [f], np.zeros(len(df), np.int64), np.arange(len(df), dtype=np.int64) + 2,
                  [str(c) for c in df.columns])


def _read_parquet(f: Path, wanted: set[str] | None) -> Source:
    if f.stat().st_size == 0:
        raise _empty(f)
    try:
        names = pq.read_schema(f).names
        table = pq.read_table(f, columns=None if wanted is None else [c for c in names if c in wanted])
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"import {f}: not a readable parquet file ({type(e).__name__}); pass --format csv or "
                         "jsonl if it is text, or rewrite it with pandas/pyarrow") from None
    df = table.to_pandas()
    return Source(df, "parquet", [f], np.zeros(len(df), np.int64), np.arange(len(df), dtype=np.int64), names)


def _read_jsonl(files: list[Path], fmt: str) -> Source:
    records: list[dict] = []
    fidx: list[int] = []
    pos: list[int] = []
    for k, f in enumerate(files):
        if f.stat().st_size == 0:
            raise _empty(f)
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"import {f}: not UTF-8 text at byte {e.start}; save the JSONL as UTF-8") from None
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise InputError(f"import {f}: line {n}: malformed JSON ({_json_reason(e)}); "
                                 "write each line as one complete JSON object") from None
            if not isinstance(rec, dict):
                raise InputError(f"import {f}: line {n}: a JSON {type(rec).__name__}, not an object; "
                                 'write each line as one JSON object such as {"prompt_id": 3, "response_len": 812}')
            if fmt == "verl":
                missing = [k2 for k2 in VERL_FIELDS if k2 not in rec]
                if missing:
                    raise InputError(f"import {f}: line {n}: no '{missing[0]}' field; --format verl reads verl's "
                                     "rollout dump (trainer.rollout_data_dir), whose lines have "
                                     f"{', '.join(VERL_FIELDS)} and score: pass that dump, or another --format")
                rec = {k2: rec[k2] for k2 in (*VERL_FIELDS, "score") if k2 in rec}
            records.append(rec)
            fidx.append(k)
            pos.append(n)
    df = pd.DataFrame.from_records(records) if records else pd.DataFrame()
    return Source(df, fmt, files, np.asarray(fidx, np.int64), np.asarray(pos, np.int64), [str(c) for c in df.columns])


def _json_reason(e: ValueError) -> str:
    """json's message without its line number (always 1 here): 'Expecting ',' delimiter at column 17'."""
    return re.sub(r": line \d+ column (\d+) \(char \d+\)", r" at column \1", str(e))
