"""The policy table and the --json output of `python -m dora.sim` and `python -m dora.exec`."""

from __future__ import annotations

import json
from typing import Any

from dora.io import write_text
from dora.metrics import METRIC_NAMES

_FORMATS = {
    "e2e_samples_per_s": "{:.3f}", "e2e_tokens_per_s": "{:,.0f}", "rollout_tokens_per_s": "{:,.0f}",
    "step_time_mean_s": "{:.1f}", "step_time_p99_s": "{:.1f}", "rollout_share": "{:.1%}", "bubble_ratio": "{:.3f}",
    "rollout_bubble_ratio": "{:.3f}", "trainer_bubble_ratio": "{:.3f}", "waste_ratio": "{:.3f}",
    "staleness_mean": "{:.2f}", "staleness_max": "{}", "c1_violations": "{}", "c2_lost": "{}",
    "c2_duplicated": "{}", "c3_violations": "{}", "migrations": "{:,}", "reprefill_tokens": "{:,}",
    "weight_loads": "{:,}", "trained_samples": "{:,}", "steps": "{}", "bound_samples_per_s": "{:.3f}",
    "bound_fraction": "{:.1%}", "eta_bound_samples_per_s": "{:.3f}", "eta_bound_fraction": "{:.1%}",
    "eta_bound_placement_samples_per_s": "{:.3f}", "eta_bound_placement_fraction": "{:.1%}",
    "speedup_vs_sync": "{:.2f}x", "sim_time_s": "{:,.0f}", "sim_wall_s": "{:.1f}", "events": "{:,}",
    "reward_final": "{:.3f}", "wall_s": "{:.1f}", "instance_failures": "{:,}", "instances_failed": "{:,}",
    "weight_syncs": "{:,}", "weight_sync_s_mean": "{:.3f}", "weight_sync_bytes": "{:,}",
}
_CONTRACT = tuple(m for m in METRIC_NAMES if m != "e2e_samples_per_s")
_CONTRACT = _CONTRACT[:_CONTRACT.index("step_time_p99_s") + 1] + ("rollout_share",) + _CONTRACT[
    _CONTRACT.index("step_time_p99_s") + 1:]  # rollout_share (dora.metrics): beside the step times
ROWS = ("e2e_samples_per_s", "speedup_vs_sync", "bound_fraction", "eta_bound_fraction") + _CONTRACT + (
    "bound_samples_per_s", "eta_bound_samples_per_s", "sim_time_s", "sim_wall_s", "events")
EXEC_ROWS = ("e2e_samples_per_s", "speedup_vs_sync") + _CONTRACT + ("reward_final", "wall_s")


def add_ratios(runs: list[dict]) -> None:
    """speedup_vs_sync: each policy's e2e_samples_per_s over sync's (when sync ran)."""
    base = next((r["metrics"]["e2e_samples_per_s"] for r in runs if r["policy"] == "sync"), None)
    for r in runs:
        m = r["metrics"]
        m["speedup_vs_sync"] = m["e2e_samples_per_s"] / base if base else float("nan")


def table(runs: list[dict], title: str = "", rows: tuple[str, ...] = ROWS) -> str:
    names = [r["policy"] for r in runs]
    w0 = max(len(k) for k in rows) + 2
    w = max(12, max(len(n) for n in names) + 2)
    lines = []
    if title:
        lines.append(title)
    lines.append("metric".ljust(w0) + "".join(n.rjust(w) for n in names))
    lines.append("-" * (w0 + w * len(names)))
    for k in rows:
        cells = []
        for r in runs:
            v = r["metrics"].get(k)
            if v is None or (isinstance(v, float) and v != v):
                cells.append("-".rjust(w))
            else:
                cells.append(_FORMATS.get(k, "{}").format(v).rjust(w))
        lines.append(k.ljust(w0) + "".join(cells))
    return "\n".join(lines)


def write_json(runs: list[dict], path: str, **sections: Any) -> None:
    """{"runs": runs, **sections} (e.g. verdict=..., search=...) as JSON, atomically (NaN written as NaN,
    as json does)."""
    write_text(path, json.dumps({"runs": runs, **sections}, indent=2, default=_jsonable))


def _jsonable(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, set):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
