"""dora.plots.sweep: a sweep read from --json files and from a tidy CSV."""

from __future__ import annotations

from dora.plots import read_sweep, sweep_plot
from dora.report import write_json
from dora.sim.run import simulate
from dora.trace import load_trace
from tests.conftest import small_plot_config
from tests.plots.common import legend_texts


def test_sweep_from_json_and_table(tmp_path, small_trace_path):
    trace = load_trace(small_trace_path)
    files = []
    for n in (2, 4, 8):
        cfg = small_plot_config(small_trace_path, instances=n)
        rr = [simulate(trace, cfg, p, progress=False) for p in ("sync", "dora")]
        f = tmp_path / f"runs{n}.json"
        write_json([{"policy": r.policy, "config": r.config, "metrics": r.metrics} for r in rr], str(f))
        files.append(str(f))
    tab = read_sweep(files)
    assert len(tab) == 6 and {"policy", "cluster.instances", "e2e_samples_per_s"} <= set(tab.columns)
    # sync is colocated: its run fact `instances` counts the trainer's devices too; the knob is cluster.instances
    fig = sweep_plot(tab)
    assert fig.axes[0].get_xlabel().startswith("rollout instances")
    fig = sweep_plot(tab, x="cluster.instances")
    ax = fig.axes[0]
    labels = legend_texts(ax)
    assert labels[:2] == ["sync", "dora"] and "bubble-free bound" in labels
    assert ax.get_xscale() == "log" and "throughput" in ax.get_ylabel()
    xs, ys = ax.lines[0].get_data()
    assert list(xs) == [2, 4, 8]
    # a tidy CSV works the same, and the swept column is found alone
    csv = tmp_path / "sweep.csv"
    tab[["policy", "cluster.instances", "e2e_samples_per_s"]].rename(
        columns={"cluster.instances": "instances"}).to_csv(csv, index=False)
    fig2 = sweep_plot(read_sweep([str(csv)]))
    assert fig2.axes[0].get_xlabel().startswith("rollout instances")
