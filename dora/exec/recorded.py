"""A real run's trained trajectories as a trace (the trace schema with the recorded-run columns)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dora.trace import write_trace


def write_recorded_trace(result, path: str | Path) -> Path:
    """One row per trained trajectory: lengths, finish reason, reward, `step` (the trainer version when its
    group was drawn), generating `version`, the `instance` it finished on, `t_start_s` (dispatch) and
    `t_end_s` (finish), run seconds."""
    rows = result.trace_rows
    if not rows:
        raise ValueError(f"run {result.policy}: no trained trajectories to write")
    rows = sorted(rows, key=lambda r: (r["prompt_id"], r["sample_idx"]))
    cols = {k: np.asarray([r[k] for r in rows]) for k in ("prompt_id", "sample_idx", "prompt_len", "response_len",
                                                          "step", "reward", "version", "instance", "t_start_s",
                                                          "t_end_s")}
    cols["finish_reason"] = np.asarray([r["finish_reason"] for r in rows], dtype=object)
    meta = {"generator": "dora.exec", "run": {"policy": result.policy, **{k: v for k, v in result.config.items()
                                                                           if isinstance(v, (int, float, str))}}}
    write_trace(path, cols, meta)
    return Path(path)
