"""What the figure tests share: a PNG's signature and a legend's texts."""

from __future__ import annotations

PNG = b"\x89PNG\r\n\x1a\n"


def legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]
