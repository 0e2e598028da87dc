"""Running jobs: the per-run result cache (one JSON file per key) and the runs not in it, longest
first, in parallel processes."""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from dora.sim.tools.sweep import run_one

from .jobs import Job

DEFAULT_CACHE = Path.home() / ".cache" / "dora" / "robustness_grid"  # per-run results


def _scalar(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    return v if isinstance(v, (int, float, str, bool)) or v is None else None


def cache_file(cache: Path, key: str) -> Path:
    return cache / key[:2] / f"{key}.json"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_cached(cache: Path, key: str) -> dict | None:
    try:
        rec = json.loads(cache_file(cache, key).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("key") == key and isinstance(rec.get("metrics"), dict) else None


def run_jobs(jobs: list[Job], cache: Path, fresh: bool, procs: int, quiet: bool) -> tuple[dict, list[str], int]:
    """Results by job key (cached or run now, longest first), failures, and how many were run now."""
    from tqdm import tqdm

    results: dict[str, dict] = {}
    todo: dict[str, Job] = {}
    for j in jobs:
        rec = None if fresh else read_cached(cache, j.key)
        if rec is not None:
            results[j.key] = rec
        else:
            todo.setdefault(j.key, j)
    order = sorted(todo.values(), key=lambda j: -j.cost)
    failures: list[str] = []
    bar = tqdm(total=len(order), unit="run", disable=quiet or not order, file=sys.stderr, dynamic_ncols=True,
               desc="robustness grid", smoothing=0.05)

    def done(j: Job, out: dict | None, err: BaseException | None) -> None:
        bar.update(1)
        bar.set_postfix_str(f"{j.res.config.name} {j.variant}", refresh=False)
        if err is not None:
            failures.append(f"{j.res.config.name} {j.variant}: {type(err).__name__}: {err}")
            bar.write(f"FAILED {failures[-1]}", file=sys.stderr)
            return
        rec = {"key": j.key, "config": j.res.config.name, "variant": j.variant, "policy": j.policy,
               "command": j.command, "dispatches": out["dispatches"],
               "metrics": {k: _scalar(v) for k, v in out["metrics"].items() if _scalar(v) is not None}}
        write_atomic(cache_file(cache, j.key), json.dumps(rec))
        results[j.key] = rec

    try:
        if procs <= 1 or len(order) <= 1:
            for j in order:
                try:
                    out, err = run_one(j.cfg, j.policy), None
                except Exception as e:  # noqa: BLE001 (reported, the grid goes on)
                    out, err = None, e
                done(j, out, err)
        else:
            with ProcessPoolExecutor(max_workers=min(procs, len(order))) as pool:
                futs = {pool.submit(run_one, j.cfg, j.policy): j for j in order}
                try:
                    for f in as_completed(futs):
                        done(futs[f], None if f.exception() else f.result(), f.exception())
                except KeyboardInterrupt:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
    finally:
        bar.close()
    return results, failures, len(order)
