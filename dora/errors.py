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
