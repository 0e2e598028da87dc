"""Fuzzing every CLI entry point (dora.sim and its subcommands, dora.sim.presets, dora.trace
generate/stats, dora.plots, dora.exec up to starting engines) with hypothesis-drawn argv, config,
trace and profile files and output paths (tests/fuzz_inputs.py). Every example must:

- exit 0 or 2 (compare may exit 1 for --max-rel-err; dora.exec may reach its engines: accepted);
- on 2, print exactly one line on stderr, `<prog>: error: ...`, that says how to fix the input
  (tests/cli_runner.says_how_to_fix), and no traceback;
- on 2, write nothing (its output folder stays empty); never touch the shared inputs;
- finish within a time limit (in process: an alarm; subprocesses: their timeout).

The default run draws 104 examples in this process and 4 as subprocesses; `-m slow` draws 2,080
and 40. The seed is printed in the run's summary and with a failure (`DORA_FUZZ_SEED=N` replays it). Examples run with a
3 GiB memory and 5 s time limit for the run they plan (DORA_MEMORY_LIMIT_GIB, DORA_TIME_LIMIT_S),
so that a drawn command is either refused up front or quick.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings

from tests.cli_runner import Result, run_in_process, run_subprocess, says_how_to_fix
from tests.fuzz_inputs import ENTRIES, command
from tests.test_bad_input import make_inputs

SEED = int(os.environ.get("DORA_FUZZ_SEED") or random.SystemRandom().randrange(2 ** 32))
# examples per entry point: default run (sum 104) and -m slow (x20)
COUNTS = {"sim": 14, "sweep": 8, "tune": 5, "calibrate": 8, "compare": 6, "presets": 6, "generate": 8, "stats": 6,
          "timeline": 8, "window": 5, "plots": 6, "perfetto": 6, "exec": 18}
SLOW_FACTOR = 20
SUBPROCESS = ("sim", "stats", "timeline", "calibrate")  # one default example each (not exec: it would start engines)
IN_PROCESS_LIMIT_S = 180  # a hang, not a speed check: a run that is refused or planned to fit takes seconds


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    return make_inputs(tmp_path_factory.mktemp("fuzz") / "IN")


@pytest.fixture
def limits(monkeypatch):
    monkeypatch.setenv("DORA_MEMORY_LIMIT_GIB", "3")
    monkeypatch.setenv("DORA_TIME_LIMIT_S", "5")


class Hung(Exception):
    pass


@contextlib.contextmanager
def alarm(seconds: int):
    def ring(*_):
        raise Hung(f"no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _real(arg: str, dirs: dict[str, Path]) -> str:
    for name, d in dirs.items():
        if arg == name or arg.startswith(name + "/"):
            return str(d) + arg[len(name):]
    return arg


def _snapshot(d: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(d)), p.lstat().st_size) for p in d.rglob("*"))


def check(name: str, args: list[str], res: Result) -> None:
    shown = " ".join(args)[:400]
    if res.reached_engines:
        return
    assert "Traceback" not in res.stderr, f"{shown}\n{res.stderr}"
    allowed = (0, 1, 2) if name == "compare" and "off by more than" in res.stderr else (0, 2)
    assert res.code in allowed, f"{shown}: exit {res.code}\n{res.stderr}"
    if res.code == 2:
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, f"{shown}: {len(lines)} lines on stderr\n{res.stderr}"
        prog, _, what = lines[0].partition(": error: ")
        assert prog and what.strip(), f"{shown}: not '<prog>: error: <what>': {lines[0]!r}"
        assert says_how_to_fix(lines[0]), f"{shown}: no fix hint (tests/cli_runner.py FIX_PATTERNS): {lines[0]!r}"
        assert res.written == [], f"{shown}: refused but wrote {res.written}"


def run_example(name: str, args: list[str], files, inputs: Path, subprocess: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ex, out = Path(tmp) / "EX", Path(tmp) / "OUT"
        ex.mkdir()
        out.mkdir()
        for w in files:
            (ex / w.name).write_bytes(w.data)
        real = [_real(a, {"IN": inputs, "OUT": out, "EX": ex}) for a in args]
        before = _snapshot(inputs)
        if subprocess:
            res = run_subprocess(ENTRIES[name].module, real, out, timeout=300)
        else:
            with alarm(IN_PROCESS_LIMIT_S):
                res = run_in_process(ENTRIES[name].module, real, out)
        assert _snapshot(inputs) == before, f"{' '.join(args)}: changed the shared inputs"
        check(name, args, res)


def fuzz(name: str, n: int, inputs: Path, subprocess: bool = False) -> None:
    @seed(SEED)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(cmd=command(ENTRIES[name]))
    def one(cmd):
        run_example(name, *cmd, inputs, subprocess)

    try:
        one()
    except BaseException as e:
        e.add_note(f"replay: DORA_FUZZ_SEED={SEED} python -m pytest tests/test_fuzz.py")
        raise


@pytest.mark.parametrize("name", COUNTS)
def test_fuzz(name, inputs, limits):
    fuzz(name, COUNTS[name], inputs)


@pytest.mark.parametrize("name", SUBPROCESS)
def test_fuzz_subprocess(name, inputs, limits):
    fuzz(name, 1, inputs, subprocess=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", COUNTS)
def test_fuzz_many(name, inputs, limits):
    fuzz(name, COUNTS[name] * SLOW_FACTOR, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("name", SUBPROCESS)
def test_fuzz_many_subprocess(name, inputs, limits):
    fuzz(name, 10, inputs, subprocess=True)

