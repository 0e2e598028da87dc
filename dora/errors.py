"""User-facing input errors: one line, exit status 2."""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from typing import Iterator


class InputError(Exception):
    """Bad user input. The message is one line: what, where, how to fix."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()))


def too_small(where: str, value: object, low: float, what: str = "", *, above: bool = False,
              fix: str = "") -> InputError:
    """The InputError for a value under its lower bound, with the fix: a setting reads
    '<where>: must be >= <low>[ <what>], got <value>; set it to <low> or more', a flag (`where`
    ending in --name) '<where> <value>: must be >= <low>[ <what>]; pass --name <low> or more'.
    `above`: the bound itself is refused ('> <low>', 'a value above <low>'). `fix` replaces the hint
    where the bound is not the whole story (a 0 that means 'derive it')."""
    rule = f"must be {'>' if above else '>='} {low:g}{' ' + what if what else ''}"
    hint = f"a value above {low:g}" if above else f"{low:g} or more"
    flag = where.split()[-1] if where.split() else ""
    if flag.startswith("--"):
        return InputError(f"{where} {value}: {rule}; {fix or f'pass {flag} {hint}'}")
    return InputError(f"{where}: {rule}, got {value}; {fix or f'set it to {hint}'}")


@contextmanager
def cli_errors(prog: str) -> Iterator[None]:
    """Turn InputError into one line on stderr and exit status 2."""
    try:
        yield
    except InputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        raise SystemExit(InputError.exit_code) from None


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: `prog: error: message; see --help`, exit status 2
    (argparse's own error prints the whole usage block first)."""

    def error(self, message: str):  # type: ignore[override]
        msg = " ".join(message.split())
        self.exit(InputError.exit_code, f"{self.prog}: error: {msg}; see {self.prog} --help\n")
