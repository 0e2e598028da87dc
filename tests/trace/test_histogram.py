"""`python -m dora.trace stats T --png out.png`: the numbers printed and the histogram written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib.image import imread

from dora.trace import load_trace
from dora.trace.__main__ import main
from tests.conftest import write_lengths


def test_stats_text_and_png(small_trace, tmp_path, capsys):
    png = tmp_path / "hist.png"
    assert main(["stats", str(small_trace), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    tr = load_trace(small_trace)
    p50, p90, p99 = np.percentile(tr.response_len, [50, 90, 99])
    head, lens = out.splitlines()[:2]
    assert f"{tr.num_groups:,} groups x {tr.group_size}, 8 steps" in head
    assert f"p50 {p50:,.0f}  p90 {p90:,.0f}  p99 {p99:,.0f}  max {tr.response_len.max():,}" in lens
    assert f"p99/p50 {p99 / p50:.1f}" in lens
    img = imread(png)
    assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 600
    assert img[..., :3].std() > 0.05  # not a blank canvas


def test_stats_png_of_several_and_json(small_trace, agentic_trace, tmp_path, capsys):
    png = tmp_path / "two.png"
    assert main(["stats", "--json", str(small_trace), str(agentic_trace), "--png", str(png)]) == 0
    st = json.loads(capsys.readouterr().out)
    assert set(st) == {str(small_trace), str(agentic_trace)} and png.stat().st_size > 10_000
    assert st[str(small_trace)]["steps"] == 8


def test_truncation_unknown_without_finish_reason_or_cap(tmp_path, capsys):
    p = write_lengths(tmp_path / "t.parquet", [[3, 9], [4, 2]])
    assert main(["stats", "--json", str(p)]) == 0
    assert json.loads(capsys.readouterr().out)[str(p)]["truncated_share"] is None
    assert main(["stats", str(p)]) == 0
    assert "truncated (finish=length) unknown" in capsys.readouterr().out


def test_png_path_refused_before_work(small_trace, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["stats", str(small_trace), "--png", str(tmp_path / "h.txt")])
    assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "h.txt").exists()
