"""Bad input, every CLI: each row is a command line that must exit 2 with one line on stderr (no
traceback) naming the problem and how to fix it (tests/cli_runner.says_how_to_fix), and write
nothing (the output folder stays empty).

The rows: per CLI in tests/bad_input_cases.py, by family (config files, numeric flags, output
paths, metadata, grids, ...) in tests/bad_input_families.py. `IN/` holds the inputs they refer to,
`OUT/` is where a row's outputs would go. The default run calls each CLI's main() in this
process; `-m slow` runs every row as a real `python -m` subprocess. docs/bad_input.md is this
table with the error each row gets:
    python -m tests.test_bad_input --table docs/bad_input.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import bad_input_cases as cases
from tests.bad_input_cases import M, OUTS, T, Row, argv
from tests.bad_input_families import LONG, ROWS as FAMILY_ROWS, make_family_inputs
from tests.cli_runner import Result, check_refusal, run_in_process, run_subprocess, says_how_to_fix

ROWS: list[Row] = cases.ROWS + FAMILY_ROWS


def make_inputs(d: Path) -> Path:
    cases.make_inputs(d)
    make_family_inputs(d)
    return d

@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    return make_inputs(tmp_path_factory.mktemp("bad_input") / "IN")


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input(row, inputs, tmp_path):
    out = tmp_path / "OUT"
    out.mkdir()
    check_refusal(run_in_process(row.module, argv(row, inputs, out), out), row.needle)


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_subprocess(row, inputs, tmp_path):
    """The same rows as real `python -m` runs (start-up and imports included)."""
    out = tmp_path / "OUT"
    out.mkdir()
    check_refusal(run_subprocess(row.module, argv(row, inputs, out), out), row.needle)


def test_rows_are_distinct():
    assert len({r.id for r in ROWS}) == len(ROWS)
    assert len({(r.module, r.args) for r in ROWS}) == len(ROWS)


NO_FIX = [  # what and where, but not how to fix it
    "dora.sim: error: policy.eta: must be >= 0 (staleness bound in versions), got -1",
    "dora.sim: error: --eta: must be >= 0",
    "dora.plots: error: sweep table IN/missing.csv: file not found",
    "dora.sim calibrate: error: calibrate --host-cores: must be >= 0, got -1.0",  # a verb as a name is no fix
    ("dora.sim: error: bad trace t.parquet: column 'turns', row 5 (0-based): value 0 is not >= 1; a trajectory has "
     "at least one turn"),
    "python -m dora.exec.tiny_model: error: --eval-prompts must be >= 0; see python -m dora.exec.tiny_model --help",
]
FIX = [
    "dora.sim: error: policy.eta: must be >= 0 (staleness bound in versions), got -1; set it to 0 or more",
    "dora.sim: error: --eta -1: must be >= 0 (the staleness bound in steps); pass 0 or more",
    ("dora.sim: error: kv_tokens: 2 per instance cannot hold the longest trajectory (128 tokens); raise "
     "cluster.kv_tokens to at least 128"),
    "dora.sim: error: --hardware 'B300': unknown; choose from H100, H800, H20, A100, H200",
    "dora.sim: error: cost.decode_base_s: must be in [0, 1e+09], got -1.0",
    "dora.sim: error: cluster.instances: expected an integer, got 'many'",
    "python -m dora.sim: error: argument --seed: invalid int value: '1.5'; see python -m dora.sim --help",
    "python -m dora.sim sweep: error: the following arguments are required: --out; see python -m dora.sim sweep --help",
]


@pytest.mark.parametrize("line", NO_FIX)
def test_says_how_to_fix_rejects(line):
    assert not says_how_to_fix(line)
    with pytest.raises(AssertionError, match="no fix hint"):
        check_refusal(Result(2, line + "\n", []))


@pytest.mark.parametrize("line", FIX)
def test_says_how_to_fix_accepts(line):
    assert says_how_to_fix(line)
    check_refusal(Result(2, line + "\n", []))


# ---------------------------------------------------------------- the docs table


SHORT = {"$SMALL": T, "$OUTS": OUTS, "$MODEL": M, "$LONG": (LONG,)}  # abbreviations in the docs table
INTRO = """# Bad input: what each CLI refuses, and how

## The contract

Every command line (`python -m dora.sim` and its `sweep`, `tune`, `calibrate` and `compare`,
`python -m dora.sim.presets`, `python -m dora.trace`, `python -m dora.plots`, `python -m dora.exec`,
`python -m dora.perfetto`) answers bad input the same way:

- exit status 2 and exactly one line on stderr, `<program>: error: <what and where>: <the problem>;
  <how to fix it>`, never a traceback. The fix is an instruction (`set it to 1 or more`,
  `pass --jobs 1 or more`, `raise cluster.kv_tokens to at least 128`, `fix or drop the row`),
  the allowed values or range (`choose from ...`, `known keys: ...`, `must be in [0, 1]`) or
  what was expected (`expected an integer, got 'lots'`); argparse's own errors end
  `...; see <program> --help`, its usage naming the fix;
- nothing written: every output path is checked before any work (a folder, a path under a file,
  a dangling link, a name over 255 bytes, a place where no file can be created, a wrong suffix:
  `dora.io.check_output`), and every file is written to a temporary name beside it and renamed
  into place (`dora.io.atomic_path`), so a failure leaves neither a partial file nor a temporary;
- files read as UTF-8; YAML with a key given twice, `.nan`/`.inf` numbers, a list, a scalar or
  `null` where a mapping belongs, or text where a number belongs is refused, naming the key;
- no silent default on what a user gave: an event log whose run metadata lacks `eta`,
  `group_size` or its device counts is refused (not 0 C3 violations or a bubble of 0), and so is a
  trace or event log whose metadata is not a JSON mapping (not read as empty);
- a run too large for the machine is refused before it allocates, with the estimate and the
  limit: the simulator (log rows and instances), the trace generator (rows), the timeline plot
  (bins) and the executor (engines x checkpoint) against 80% of physical memory
  (`DORA_MEMORY_LIMIT_GIB` sets another), and the simulator's estimated wall time against two
  hours (`DORA_TIME_LIMIT_S`).

## How it is tested

- The {rows} rows below ({cli} per CLI in tests/bad_input_cases.py, {families} by family in
  tests/bad_input_families.py: config and profile files, numeric flags, output paths of every
  writer, trace and event-log metadata, sweep grids, tune, calibrate, compare, presets, plots,
  executor configs): `python -m pytest tests/test_bad_input.py` runs them in-process, `-m slow`
  as `python -m` subprocesses. Each must exit 2 with one line containing its key word and a fix
  (`says_how_to_fix` in tests/cli_runner.py, whose FIX_PATTERNS list the accepted phrasings), and
  leave its output folder `OUT/` empty. `IN/` holds the small inputs they name (`make_inputs`).
- A fuzzer, `python -m pytest tests/test_fuzz.py` (104 hypothesis examples in-process and 4 as
  subprocesses; `-m slow`: 2,080 and 40), draws argv, YAML, trace and profile files and output
  paths for every entry point (the executor up to starting engines) and checks exit 0 or 2, one
  line with a fix and nothing written on 2, no traceback, the shared inputs untouched, and an
  alarm or a subprocess timeout against hangs. The seed is printed in the run's summary;
  `DORA_FUZZ_SEED=N` replays it.
- Under `CI=true` (`.ci/run`) a test skipped because torch, transformers, vLLM, Ray or another
  extra does not import fails instead (tests/ci_skips.py).

Regenerate this file with `python -m tests.test_bad_input --table docs/bad_input.md`.

Shorthands in the commands: {short}.

## The rows
"""


def table(rows: list[Row]) -> str:
    """docs/bad_input.md: each row's command and the error line it gets (run in this process, as the
    default test does; `-m slow` checks the same lines come from real subprocesses)."""
    import tempfile

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    out_lines = INTRO.format(rows=len(rows), short="; ".join(f"`{k}` = `{' '.join(v)}`" for k, v in SHORT.items()),
                             cli=len(cases.ROWS), families=len(FAMILY_ROWS)).splitlines() + [
        "| command | input tried | exit | error line |",
        "|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        inp = make_inputs(Path(tmp) / "IN")
        for k, row in enumerate(rows):
            out = Path(tmp) / f"OUT{k}"
            out.mkdir()
            res = run_in_process(row.module, argv(row, inp, out), out)
            line = res.stderr.strip().replace(tmp + "/", "").replace(f"OUT{k}", "OUT")
            if res.written:
                line += f" (WROTE {res.written})"
            cmd = " ".join(["python -m", row.module, *row.args])
            for name, part in SHORT.items():
                cmd = cmd.replace(" ".join(part), name)
            out_lines.append(f"| `{cell(cmd)}` | {cell(row.what)} | {res.code} | {cell(line)} |")
            print(f"[{k + 1}/{len(rows)}] {row.id}: {res.code}", file=sys.stderr, flush=True)
    return "\n".join(out_lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--table":
        sys.exit("usage: python -m tests.test_bad_input --table docs/bad_input.md")
    text = table(ROWS)
    Path(sys.argv[2]).write_text(text)
    print(f"wrote {sys.argv[2]}", file=sys.stderr)
