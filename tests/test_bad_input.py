"""Bad input, every CLI: each row is a command line that must exit 2 with one line on stderr (no
traceback) naming the problem, and write nothing (the output folder stays empty).

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
from tests.bad_input_families import ROWS as FAMILY_ROWS, make_family_inputs
from tests.cli_runner import check_refusal, run_in_process, run_subprocess

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


# ---------------------------------------------------------------- the docs table


SHORT = {"$SMALL": T, "$OUTS": OUTS, "$MODEL": M}  # abbreviations in the docs table


def table(rows: list[Row]) -> str:
    """docs/bad_input.md: each row's command and the error line it gets (run in this process, as the
    default test does; `-m slow` checks the same lines come from real subprocesses)."""
    import tempfile

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    out_lines = [
        "# Bad input: what each CLI refuses, and how",
        "",
        "Every row exits with status 2, prints the one line shown on stderr, and writes nothing (its",
        "output folder `OUT/` stays empty). `IN/` holds small input files (a valid 6-group trace, a text",
        "file named `.parquet`, traces with bad columns, YAML files with unknown keys, a shallow model",
        "directory, a valid event log; see `make_inputs` in tests/test_bad_input.py). Each row is a test:",
        "`python -m pytest tests/test_bad_input.py` (in-process) and `-m slow` (as subprocesses).",
        f"Regenerate this file with `python -m tests.test_bad_input --table docs/bad_input.md` ({len(rows)} rows).",
        "",
        "Shorthands in the commands: " + "; ".join(f"`{k}` = `{' '.join(v)}`" for k, v in SHORT.items()) + ".",
        "",
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
