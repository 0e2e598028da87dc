"""Running a CLI's main(argv) for the bad-input rows and the fuzzer: in this process (the code
`python -m` runs, without the start-up) or as a `python -m` subprocess, with what it printed on
stderr and the files that appeared in its output folder; and the refusal contract they check."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENGINES = "not refused: python -m dora.exec reached run_policies"


@dataclass
class Result:
    code: int | None  # None: an exception escaped main (its traceback is in stderr)
    stderr: str
    written: list[str]  # files that appeared under the output folder
    reached_engines: bool = False  # dora.exec got past every check (in-process runs only)


def main_of(module: str):
    return importlib.import_module(module + ("" if module == "dora.sim.presets" else ".__main__")).main


def run_in_process(module: str, args: list[str], out: Path) -> Result:
    """main(args) in this process; dora.exec stops where it would start engines."""
    err = io.StringIO()
    code: int | None = 0
    reached = False
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), _no_engines():
        try:
            code = main_of(module)(args)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except _ReachedEngines:
            code, reached = None, True
        except Exception:  # noqa: BLE001 - reported as a failure of the row
            import traceback

            traceback.print_exc(file=err)
            code = None
    return Result(code, err.getvalue(), written(out), reached)


class _ReachedEngines(Exception):
    pass


@contextlib.contextmanager
def _no_engines():
    """dora.exec, past validation, stops here instead of starting Ray and engines."""
    import types

    def run_policies(*a, **k):
        raise _ReachedEngines(ENGINES)

    fake = types.ModuleType("dora.exec.run")  # what dora.exec's main imports run_policies from
    fake.run_policies = run_policies
    real = sys.modules.get("dora.exec.run")
    sys.modules["dora.exec.run"] = fake  # this key alone: torch, once imported, must stay imported
    try:
        yield
    finally:
        if real is None:
            del sys.modules["dora.exec.run"]
        else:
            sys.modules["dora.exec.run"] = real


def run_subprocess(module: str, args: list[str], out: Path, timeout: float = 120) -> Result:
    p = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=REPO,
                       timeout=timeout)
    return Result(p.returncode, p.stderr, written(out))


def written(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*")) if out.exists() else []


# How a refusal says how to fix the input (docs/bad_input.md, "The contract"). A line passes when its
# message (the part after `<prog>: error: `) matches one of these:
FIX_VERBS = ("give", "set", "pass", "use", "choose", "raise", "lower", "remove", "drop", "add", "write", "save",
             "fix", "name", "put", "record", "cast", "fill", "re-save", "make", "join", "rename", "repeat", "list",
             "leave", "calibrate", "shorten", "build", "unset", "check", "keep", "map", "start", "split", "run",
             "install", "download", "point", "number", "sweep", "quote")
FIX_PATTERNS = (
    # argparse's own errors as dora.errors.ArgumentParser prints them (`...; see <prog> --help`): the
    # usage names the fix. A message of the project's own passed through argparse is checked as any other.
    (r"^(?:argument \S+: )?(?:unrecognized arguments|the following arguments are required|one of the arguments "
     r".* is required|invalid \S+ value|invalid choice|expected (?:one|at most one|at least one|\d+) argument|not "
     r"allowed with argument|ambiguous option|ignored explicit argument|unexpected option string|can't open)"
     r".*; see \S.* --help$"),
    # an instruction: one of FIX_VERBS opening a clause after the what and where ("kv_tokens: ...; raise
    # cluster.kv_tokens to at least 128"); not at the very start, where it would be a name ("calibrate --x: ...")
    r"(?:[;:(,]|\bor|\band|\bso|\bthen|\be\.g\.)\s*(?:" + "|".join(FIX_VERBS) + r")\b",
    # the allowed values or range, spelled out
    r"\bchoose from\b", r"\bknown(?: keys)?: ", r"\bis not one of\b", r"\bmust be one of\b",
    r"\bmust be in [\[(]", r"\bmust be in \S+\.\.\S+",
    # what was expected in place of what was given ("expected an integer, got 'lots'")
    r"\bexpected\b",
)
_FIX = [re.compile(p) for p in FIX_PATTERNS]


def says_how_to_fix(line: str) -> bool:
    """Whether a refusal line (or its message) says how to fix the input: an instruction, the allowed
    values or range, or what was expected (FIX_PATTERNS). A bare "x: must be >= 1, got 0" does not."""
    message = line.partition(": error: ")[2] if ": error: " in line else line
    return any(p.search(message.strip()) for p in _FIX)


def check_refusal(res: Result, needle: str = "") -> None:
    """Exit status 2, one line on stderr (with `needle`) that says how to fix the input, no traceback,
    nothing written."""
    lines = res.stderr.strip().splitlines()
    assert not res.reached_engines, "not refused: dora.exec got as far as starting engines"
    assert res.code == 2, f"exit status {res.code}, stderr:\n{res.stderr}"
    assert len(lines) == 1, f"expected one line, got:\n{res.stderr}"
    assert "Traceback" not in res.stderr
    assert needle.lower() in lines[0].lower(), f"{needle!r} not in {lines[0]!r}"
    assert says_how_to_fix(lines[0]), f"no fix hint (tests/cli_runner.py FIX_PATTERNS): {lines[0]!r}"
    assert res.written == [], f"wrote {res.written}"
