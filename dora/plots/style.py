"""Shared look: figures on the Agg canvas, version colours, policy colours, saving.

Figures are made with matplotlib.figure.Figure on an Agg canvas, not through pyplot: no global
backend is switched and no GUI window opens, and a returned Figure still shows inline in Jupyter.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from dora import io
from dora.sched.registry import names


def subplots(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (8, 5)):
    """(figure, axes) like pyplot.subplots, on its own Agg canvas."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols)

# Saturated, distinct hues: tab10 without its grey (grey means loading weights), then six more
# (navy, maroon, teal, magenta, lime, gold). Versions that coexist (at most eta + 1 of them) never
# share a colour; beyond 15 versions the cycle repeats (the timeline's legend says so).
_TAB10 = matplotlib.colormaps["tab10"].colors
VERSION_CYCLE = tuple(c for i, c in enumerate(_TAB10) if i != 7) + (
    "#000075", "#800000", "#469990", "#f032e6", "#7cb518", "#e6ab02")
LOAD_COLOR = (0.55, 0.55, 0.55)


def version_color(v: int) -> tuple[float, float, float]:
    return tuple(to_rgb(VERSION_CYCLE[int(v) % len(VERSION_CYCLE)]))


def version_colors(versions) -> np.ndarray:
    """(n, 3) RGB for an array of versions."""
    table = np.array([to_rgb(c) for c in VERSION_CYCLE])
    return table[np.asarray(versions, dtype=np.int64) % len(table)]


def policy_order() -> tuple[str, ...]:
    """Registered policies, in registration order (tables and plots list them so)."""
    return names()


def policy_color(name: str, i: int = 0) -> tuple[float, float, float]:
    """tab10 by registration order; an unregistered name (a variant) takes the i-th colour after."""
    cmap = matplotlib.colormaps["tab10"].colors
    order = names()
    k = order.index(name) if name in order else len(order) + i
    return tuple(cmap[k % len(cmap)])


IMAGE_TYPES = ("png", "svg", "pdf")


def check_output(out: str | Path, types: tuple[str, ...] = IMAGE_TYPES) -> Path:
    """Refuse an output path before any work (dora.io.check_output with a suffix in `types`)."""
    return io.check_output(out, types)


def save(fig, out: str | Path, dpi: int = 120) -> Path:
    """Write a figure (PNG/SVG/PDF by suffix) atomically: a temp file renamed into place."""
    p = check_output(out)
    with io.atomic_path(p) as tmp:
        fig.savefig(tmp, dpi=dpi, format=p.suffix.lstrip(".").lower(), bbox_inches="tight")
    return p
