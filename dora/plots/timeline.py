"""Timeline (Gantt) of a run: one row per rollout instance (or band of instances) and the trainer.

How it is drawn (and why it stays fast at 1024 instances):
- time is cut into `bins` equal bins (default 800) over the window; for every row, version
  and bin the mean number of trajectories the instance holds (queued or decoding; not those out
  of the batch in a tool call) is computed exactly from the paired segments and tool calls
  (dora.analysis.bin_time: O(segments + rows x bins));
- a row's height is split between the versions in proportion to those trajectories (stacked
  share, colour = policy version), and the colour's strength is the slot occupancy (held
  trajectories / max_seqs, capped at 1): a pale row is mostly empty decode slots, white is idle;
- time spent loading weights takes the bottom of the row in grey (with hatched bars on top when
  every instance has its own row);
- with more than `max_rows` instances, consecutive instances are grouped into bands of
  ceil(instances / max_rows) and a band shows their mean;
- the whole grid is one image (imshow); markers for migrations, interruptions, aborts and
  failures are one scatter each; the trainer row shows steps (train_start -> train_end, coloured
  by the version the step publishes) and publications; dotted lines mark each publication.
The subtitle states the bin width and the banding.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from dora.errors import InputError
from dora.analysis import (event_names, check_log, step_window, loads, run_end, segments, tool_calls, trainer_steps,
                             bin_time)
from dora.plots.style import LOAD_COLOR, VERSION_CYCLE, subplots, version_color, version_colors

MARKERS = {  # event -> (label, marker, colour)
    "migrate_out": ("migration (source)", ">", "black"),
    "interrupt": ("interruption", "v", "#7a0177"),
    "abort": ("abort", "x", "red"),
    "fail": ("instance failure", "*", "red"),
}


def timeline(df: pd.DataFrame, *, window: tuple[float, float] | None = None, step: int | None = None,
             bins: int = 800, max_rows: int = 128, title: str | None = None, markers: bool = True):
    """Figure of the run's timeline (see the module docstring). `window` = (t0, t1) in seconds
    zooms in, `step` = k zooms to trainer step k (publication of version k-1 to that of k);
    `bins` time bins across the window; `max_rows` rows before instances are banded."""
    check_log(df)
    if step is not None:
        if window is not None:
            raise InputError("timeline: give --window or --step, not both")
        window = step_window(df, step)
    run = df.attrs.get("run", {})
    t_end = run_end(df)
    t_first = min(float(df["t_s"].min()), t_end) if len(df) else 0.0
    t0w, t1w = (t_first, t_end) if window is None else (float(window[0]), float(window[1]))
    if not t1w > t0w:
        if window is not None:
            raise InputError(f"timeline: window [{t0w:g}, {t1w:g}] s is empty; give T0 < T1")
        t1w = t0w + 1.0  # a log with nothing after its first row
    elif window is not None and (t1w <= min(t_first, 0.0) or t0w >= t_end):
        raise InputError(f"timeline: window [{t0w:g}, {t1w:g}] s is outside the run ({min(t_first, 0.0):g} to "
                         f"{t_end:g} s); give a window that overlaps it")
    seg, _ = segments(df)
    n_inst = max(int(run.get("instances", 0)), int(max(df["instance"].max(), 0)) + 1)
    max_seqs = int(run.get("max_seqs", 0)) or 1
    band = max(1, math.ceil(n_inst / max_rows))
    rows = math.ceil(n_inst / band)
    per_row = np.full(rows, band, float)
    per_row[-1] = n_inst - band * (rows - 1)
    edges = np.linspace(t0w, t1w, bins + 1)
    width = edges[1] - edges[0]

    seg = seg[(seg["t1"] > t0w) & (seg["t0"] < t1w) & (seg["instance"] >= 0)]
    versions = np.unique(seg["version"].to_numpy()) if len(seg) else np.zeros(0, np.int64)
    steps = trainer_steps(df)
    nv = max(len(versions), 1)
    vk = np.searchsorted(versions, seg["version"].to_numpy())
    row_of = seg["instance"].to_numpy() // band
    held = bin_time(seg["t0"].to_numpy(), seg["t1"].to_numpy(), row_of * nv + vk, rows * nv, edges)
    tools = tool_calls(df)
    tools = tools[(tools["t1"] > t0w) & (tools["t0"] < t1w) & np.isin(tools["version"].to_numpy(), versions)]
    if len(tools):  # a trajectory in a tool call leaves its slot empty
        tk = np.searchsorted(versions, tools["version"].to_numpy())
        held -= bin_time(tools["t0"].to_numpy(), tools["t1"].to_numpy(),
                         tools["instance"].to_numpy() // band * nv + tk, rows * nv, edges)
        held = np.maximum(held, 0.0)
    held = held.reshape(rows, nv, bins) / (width * per_row[:, None, None])  # mean trajectories per instance
    ld = loads(df)
    ld = ld[(ld["t1"] > t0w) & (ld["t0"] < t1w)]
    load_frac = bin_time(ld["t0"].to_numpy(), ld["t1"].to_numpy(), ld["instance"].to_numpy() // band, rows, edges)
    load_frac = np.clip(load_frac / (width * per_row[:, None]), 0.0, 1.0)

    img = _image(held, load_frac, versions, max_seqs, sub=max(3, min(16, 640 // rows)))

    fig_h = min(14.0, 3.2 + 0.11 * rows)
    fig, ax = subplots(figsize=(15, fig_h))
    ax.imshow(img, aspect="auto", interpolation="nearest", extent=(t0w, t1w, rows, 0), zorder=1)
    if band == 1 and len(ld) and len(ld) <= 20000:
        for inst, g in ld.groupby("instance"):
            ax.broken_barh(list(zip(g["t0"], g["t1"] - g["t0"])), (inst + 0.05, 0.9), facecolors="none",
                           edgecolors=LOAD_COLOR, hatch="////", linewidth=0.0, zorder=2)
    # trainer row above the instances
    ty = -1.6
    for r in steps.itertuples():
        if r.t1 < t0w or r.t0 > t1w:
            continue
        ax.broken_barh([(r.t0, r.t1 - r.t0)], (ty, 1.0), facecolors=[version_color(r.version + 1)],
                       edgecolors="black", linewidth=0.5, zorder=2)
        if r.t_pub > r.t1:
            ax.broken_barh([(r.t1, r.t_pub - r.t1)], (ty, 1.0), facecolors="0.2", zorder=2)
        if (r.t1 - r.t0) > 0.03 * (t1w - t0w):
            rgb = version_color(r.version + 1)
            dark = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] < 0.5
            ax.text((max(r.t0, t0w) + min(r.t1, t1w)) / 2, ty + 0.5, f"\u2192v{r.version + 1}", ha="center",
                    va="center", fontsize=8, zorder=3, color="white" if dark else "black")
    pubs = steps["t_pub"].to_numpy()
    for tp in pubs:
        if t0w <= tp <= t1w:
            ax.axvline(tp, color="0.3", linestyle=":", linewidth=0.8, zorder=4)
    handles = []
    if markers:
        handles += _markers(ax, df, band, t0w, t1w, rows)

    elastic = sorted(int(i) for i in run.get("elastic_instances", []) or [])
    if elastic:  # instances on the trainer's devices (they generate while the trainer waits)
        r0 = elastic[0] // band
        ax.axhline(r0, color="black", linewidth=0.8, linestyle="--", zorder=4)
        ax.text(t0w + 0.005 * (t1w - t0w), r0, f"instances {elastic[0]}\u2013{elastic[-1]}: on the trainer's devices "
                "(elastic)", va="top", ha="left", fontsize=8, zorder=6,
                bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1))
    ax.set_xlim(t0w, t1w)
    ax.set_ylim(rows, ty - 0.2)
    ax.axhline(-0.3, color="black", linewidth=0.8)
    ticks = _row_ticks(rows, band, n_inst)
    ax.set_yticks([ty + 0.5] + [r + 0.5 for r, _ in ticks])
    ax.set_yticklabels(["trainer"] + [lab for _, lab in ticks], fontsize=8)
    body = run.get("body", "")
    ax.set_xlabel("simulated time (s)" if body == "sim" else "time since start (s)")
    ax.set_ylabel("rollout instance" if band == 1 else f"rollout instances (bands of {band})")
    policy = run.get("policy", "run")
    head = title or f"Timeline: {policy}" + (f" on {run['trace']}" if run.get("trace") else "") + (
        f", step {step} ({f'version {step - 1} published' if step > 1 else 'start'} \u2192 version {step} published)"
        if step is not None else "")
    how = (f"{n_inst} instances, one row each" if band == 1 else
           f"{n_inst} instances in {rows} bands of {band} (band = mean of its instances)")
    sub = (f"{how}; {bins} time bins of {width:.3g} s; row height split by version share of the trajectories "
           f"held (not counting tool calls), colour strength = slot occupancy (held / {max_seqs} slots; pale = empty slots, white = idle); "
           f"grey = loading weights; dotted lines = publications")
    ax.set_title(head + "\n" + _wrap(sub, 150), fontsize=10)

    vh = [Patch(facecolor=version_color(v), label=f"version {v}") for v in sorted(set(versions.tolist()) | {
        int(r.version) + 1 for r in steps.itertuples() if t0w <= r.t0 <= t1w})]
    if len(vh) > 24:
        keep = np.unique(np.linspace(0, len(vh) - 1, 24).astype(int))
        vh = [vh[i] for i in keep]
    if len(versions) and versions.max() - versions.min() >= len(VERSION_CYCLE):
        vh.append(Patch(facecolor="white", edgecolor="white", label=f"(colours repeat every {len(VERSION_CYCLE)})"))
    other = [Patch(facecolor=(0.85, 0.85, 0.85), edgecolor=LOAD_COLOR, hatch="////", label="weight load"),
             Patch(facecolor="white", edgecolor="black", label="trainer step (colour: version it makes)"),
             Patch(facecolor="0.2", label="publication"),
             Line2D([], [], color="0.3", linestyle=":", label="version published")]
    ax.legend(handles=vh + other + handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8,
              frameon=False, title="policy version / events", title_fontsize=8)
    fig.tight_layout()
    return fig


def _image(held: np.ndarray, load_frac: np.ndarray, versions: np.ndarray, max_seqs: int, sub: int) -> np.ndarray:
    """RGB image (rows*sub, bins, 3): per row and bin, loading at the bottom in grey, above it the
    versions stacked by share, blended towards white by slot occupancy."""
    rows, nv, nb = held.shape
    total = held.sum(axis=1)  # (rows, nb)
    occ = np.clip(total / max_seqs, 0.0, 1.0)
    alpha = np.where(total > 1e-9, 0.3 + 0.7 * occ, 0.0)
    cum = np.cumsum(held, axis=1) / np.where(total > 0, total, 1.0)[:, None, :]  # (rows, nv, nb)
    colors = version_colors(versions) if len(versions) else np.zeros((1, 3))
    img = np.ones((rows, sub, nb, 3))
    for k in range(sub):
        y = (sub - 1 - k + 0.5) / sub  # height of this sub-row above the row's bottom, in (0, 1)
        in_load = y < load_frac
        yy = np.clip((y - load_frac) / np.maximum(1.0 - load_frac, 1e-9), 0.0, 1.0)
        vi = np.minimum((cum < yy[:, None, :]).sum(axis=1), nv - 1)  # (rows, nb)
        c = colors[vi]
        a = alpha[..., None]
        px = 1.0 - a + a * c
        px = np.where(in_load[..., None], np.array(LOAD_COLOR), px)
        img[:, k] = px
    return img.reshape(rows * sub, nb, 3)


def _markers(ax, df: pd.DataFrame, band: int, t0w: float, t1w: float, rows: int) -> list:
    ev = event_names(df)
    t = df["t_s"].to_numpy()
    inst = df["instance"].to_numpy()
    handles = []
    for name, (label, m, color) in MARKERS.items():
        sel = (ev == name) & (t >= t0w) & (t <= t1w) & (inst >= 0)
        n = int(sel.sum())
        if not n:
            continue
        y = inst[sel] // band + 0.5
        if n > 5000:  # keep the scatter cheap: a uniform sample, said in the legend
            rng = np.random.default_rng(0)
            pick = rng.choice(n, 5000, replace=False)
            xs, ys, lab = t[sel][pick], y[pick], f"{label} ({n:,}; 5,000 shown)"
        else:
            xs, ys, lab = t[sel], y, f"{label} ({n:,})"
        size = 14 if rows <= 64 else 6
        ax.scatter(xs, ys, marker=m, s=size, c=color, linewidths=0.7, zorder=5, alpha=0.8)
        handles.append(Line2D([], [], marker=m, color=color, linestyle="none", label=lab))
    return handles


def _row_ticks(rows: int, band: int, n_inst: int) -> list[tuple[int, str]]:
    step = max(1, math.ceil(rows / 24))
    out = []
    for r in range(0, rows, step):
        lo = r * band
        hi = min(n_inst, lo + band) - 1
        out.append((r, str(lo) if band == 1 else f"{lo}\u2013{hi}"))
    return out


def _wrap(text: str, width: int) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(text, width))
