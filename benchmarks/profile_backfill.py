"""Add `t0_wall_s` and `train_windows` to a profile recorded before dora.exec wrote them.

  python benchmarks/profile_backfill.py PROFILE.json EVENTS.parquet OUT.json

`train_windows` comes from the run's event log (train_start -> train_end). `t0_wall_s` (the engines'
clock at the run's start) is estimated: every finished request's engine finish stamp (relative to
the start, in the `requests` table) coincides with the end of one engine step (absolute, in
`decode_steps`), so the most common difference, in 0.5 ms bins, is the offset. Needs the `requests`
table. Lets `python -m dora.sim calibrate --host-cores N` use such a profile.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd


def backfill(prof: dict, events: pd.DataFrame) -> dict:
    r = {k: np.asarray(v) for k, v in prof["requests"].items()}
    d = {k: np.asarray(v) for k, v in prof["decode_steps"].items()}
    if not len(r["t_finish_s"]) or not len(d["t_s"]):
        raise SystemExit("profile_backfill: the profile has no request stamps or no engine steps; nothing to align")
    diffs = np.concatenate([d["t_s"][d["instance"] == i] - t for i, t in zip(r["instance"], r["t_finish_s"])])
    hist, edges = np.histogram(diffs, bins=np.arange(diffs.min(), diffs.max() + 0.001, 0.0005))
    out = dict(prof)
    out["t0_wall_s"] = float(edges[hist.argmax()])
    starts, ends, began = [], [], None
    for name, t in zip(events["event"].astype(str), events["t_s"]):
        if name == "train_start":
            began = float(t)
        elif name == "train_end" and began is not None:
            starts.append(began)
            ends.append(float(t))
            began = None
    out["train_windows"] = {"t_start_s": starts, "t_end_s": ends}
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, ev, dst = args
    prof = backfill(json.load(open(src)), pd.read_parquet(ev))
    with open(dst, "w") as f:
        json.dump(prof, f)
    print(f"{dst}: t0_wall_s {prof['t0_wall_s']:.4f}, {len(prof['train_windows']['t_start_s'])} train windows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
