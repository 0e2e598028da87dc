"""python -m dora.plots and plot_runs (what --plot writes): each kind of figure, bad input."""

from __future__ import annotations

import json

import pytest

from dora.eventlog import write_events
from dora.plots import plot_runs
from dora.plots.__main__ import main as plots_main
from dora.report import write_json
from tests.event_logs import POLICIES
from tests.plots.common import PNG


def test_plot_runs_writes_pngs(policy_logs, tmp_path):
    paths = plot_runs(policy_logs, tmp_path / "run.png")
    names = sorted(p.name for p in paths)
    assert names == sorted(["run.png"] + [f"run.{p}.png" for p in POLICIES])
    for p in paths:
        assert p.read_bytes()[:8] == PNG


def test_cli_writes_each_kind(policy_logs, tmp_path, small_trace_path):
    evs = []
    for name, df in policy_logs.items():
        p = tmp_path / f"ev.{name}.parquet"
        write_events(df, p)
        evs.append(str(p))
    for kind, inputs in (("timeline", evs[:1]), ("bubbles", evs), ("staleness", evs), ("lengths", [small_trace_path])):
        out = tmp_path / f"{kind}.png"
        assert plots_main([kind, *inputs, "--out", str(out)]) == 0
        assert out.read_bytes()[:8] == PNG
    assert plots_main(["timeline", *evs, "--out", str(tmp_path / "tl.png")]) == 0
    for name in POLICIES:
        assert (tmp_path / f"tl.{name}.png").is_file()
    out = tmp_path / "trace.json"
    assert plots_main(["perfetto", evs[0], "--out", str(out)]) == 0
    assert json.loads(out.read_text())["traceEvents"]


@pytest.mark.parametrize("args, msg", [
    (["timeline", "/nonexistent/ev.parquet"], "file not found"),
    (["bubbles", "TRACE"], "column 't_s' missing"),
    (["lengths", "EVENTS"], "bad trace"),
    (["staleness", "JUNK"], "not a readable parquet"),
    (["sweep", "JUNK"], "not readable as parquet"),
    (["sweep", "EVENTS"], "column 'policy' missing"),
])
def test_cli_bad_input(args, msg, tmp_path, small_trace_path, policy_logs, capsys):
    ev = tmp_path / "ev.parquet"
    write_events(policy_logs["sync"], ev)
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    args = [{"TRACE": small_trace_path, "EVENTS": str(ev), "JUNK": str(junk)}.get(a, a) for a in args]
    out = tmp_path / "out.png"
    with pytest.raises(SystemExit) as e:
        plots_main([*args, "--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and msg in err
    assert not out.exists()


def test_cli_refuses_directory_output(tmp_path, policy_logs, capsys):
    ev = tmp_path / "ev.parquet"
    write_events(policy_logs["sync"], ev)
    with pytest.raises(SystemExit) as e:
        plots_main(["bubbles", str(ev), "--out", str(tmp_path)])
    assert e.value.code == 2 and "is a directory" in capsys.readouterr().err


def test_cli_refuses_empty_window_and_unswept_table(tmp_path, policy_runs, capsys):
    ev = tmp_path / "ev.parquet"
    write_events(policy_runs["sync"].events, ev)
    one = tmp_path / "one.json"
    write_json([{"policy": r.policy, "config": r.config, "metrics": r.metrics} for r in policy_runs.values()], str(one))
    for args, msg in ((["timeline", str(ev), "--window", "5", "1"], "is empty"),
                      (["sweep", str(one)], "several values")):
        with pytest.raises(SystemExit) as e:
            plots_main([*args, "--out", str(tmp_path / "x.png")])
        assert e.value.code == 2 and msg in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
