"""dora.plots.sim_vs_real: bars of real against predicted, labelled with the errors."""

from __future__ import annotations

from dora.plots import save
from dora.plots.sim_vs_real import sim_vs_real


def test_sim_vs_real_bars_label_the_errors(tmp_path):
    res = {p: {"real": {"step_time_mean_s": 1.0, "e2e_samples_per_s": 10.0},
               "sim": {"step_time_mean_s": 1.0 + 0.05 * i, "e2e_samples_per_s": 10.0 / (1.0 + 0.05 * i)}}
           for i, p in enumerate(["dora", "sync"])}
    fig = sim_vs_real(res)
    ax0, ax1 = fig.axes[:2]
    assert [t.get_text() for t in ax0.get_xticklabels()] == ["sync", "dora"]  # the usual policy order
    assert ax0.get_ylabel() == "mean step time (s)" and "samples / s" in ax1.get_ylabel()
    assert {t.get_text() for t in ax0.texts} == {"+5.0%", "+0.0%"}
    assert save(fig, tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
