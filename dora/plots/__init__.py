"""Plots from the event log (matplotlib figures on their own Agg canvas; no pyplot, no torch):
timeline, bubble ratios, slot use, staleness, trace lengths and sweeps. Each plotting function returns a
Figure; `save(fig, path)` writes it (PNG/SVG/PDF by suffix).

From the command line:
  python -m dora.plots {timeline,bubbles,slots,staleness,lengths,sweep,perfetto} INPUT... --out OUT
"""

from pathlib import Path

from dora.analysis import BUBBLE_PARTS, bubble_breakdown, label_runs, segments, staleness
from dora.plots.bubbles import bubble_table, bubbles
from dora.plots.lengths import length_cdf
from dora.plots.slots import slot_table, slots
from dora.plots.staleness_plot import staleness_hist
from dora.plots.style import check_output, save
from dora.plots.sweep import read_sweep, sweep_plot
from dora.plots.timeline import timeline


def plot_run(df, out) -> Path:
    """What `--plot OUT.png` writes for one run's event log: its timeline. Returns the path."""
    return save(timeline(df), out)


def plot_runs(logs, out) -> list[Path]:
    """What `--plot OUT.png` writes for the runs of one CLI call (dict policy -> log, or a list of
    logs): one run -> its timeline at OUT.png; several -> the timeline of each at OUT.<policy>.png
    and the bubble-ratio bars of all at OUT.png. Returns the paths written."""
    runs = label_runs(logs)
    p = Path(out)
    if len(runs) == 1:
        return [save(timeline(runs[0][1]), p)]
    paths = []
    for name, df in runs:
        tag = name.split("\n")[0].replace(" ", "_").replace("#", "")
        paths.append(save(timeline(df), p.with_name(f"{p.stem}.{tag}{p.suffix or '.png'}")))
    paths.append(save(bubbles(dict(runs)), p))
    return paths


__all__ = ["BUBBLE_PARTS", "check_output", "bubble_breakdown", "bubble_table", "bubbles", "length_cdf", "plot_run", "plot_runs",
           "read_sweep", "save", "segments", "slot_table", "slots", "staleness", "staleness_hist", "sweep_plot", "timeline"]
