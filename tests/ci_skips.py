"""Under CI (CI=true, as `.ci/run` runs), a test skipped because an executor dependency does not
import fails instead: a broken install of torch, transformers, vLLM or Ray must not turn the
executor's tests into a green run of skips. Locally the skip stays (the core installs alone).

Hooked into the suite by tests/conftest.py; the skips it turns are `pytest.importorskip` ones
("could not import 'MODULE'") of the modules below (and their submodules).
"""

from __future__ import annotations

import os
import re

import pytest

# the executor extra (pyproject.toml: exec / exec-cpu) and the dev extra CI installs with it
REQUIRED_IN_CI = ("torch", "transformers", "vllm", "ray", "safetensors", "tokenizers", "nbformat", "nbclient",
                  "ipykernel")
_SKIP = re.compile(r"could not import '([\w.]+)'")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing_module(report) -> str | None:
    """The required module whose failed import skipped this report, else None."""
    if not (report.skipped and in_ci()):
        return None
    m = _SKIP.search(str(report.longrepr))
    if m and m.group(1).split(".")[0] in REQUIRED_IN_CI:
        return m.group(1)
    return None


def _fail(report) -> None:
    name = missing_module(report)
    if name is not None:
        why = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (f"CI=true: {name} does not import ({why}); a broken executor install fails under CI "
                           "instead of skipping: reinstall with pip install -e '.[dev,exec-cpu]'")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module-level importorskip (at collection) of a required module: a collection error."""
    outcome = yield
    _fail(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """An importorskip in a fixture or a test body: a failure of that test."""
    outcome = yield
    _fail(outcome.get_result())
