"""tests/ci_skips.py: under CI=true a skip for a missing executor dependency fails the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytest_plugins = ["pytester"]

# a module of a required package that does not exist: importorskip skips on it as on a broken install
MODULE_LEVEL = """
import pytest
pytest.importorskip("torch.no_such_module_for_ci_skips")

def test_never_runs():
    pass
"""
IN_TEST = """
import pytest

def test_needs_ray():
    pytest.importorskip("ray.no_such_module_for_ci_skips")

def test_needs_an_optional_tool():
    pytest.importorskip("no_such_package_for_ci_skips")  # not required: stays a skip

def test_passes():
    pass
"""


def _run(pytester, monkeypatch):
    """A subprocess (importing torch inside an in-process pytester run and unloading it after crashes)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return pytester.runpytest_subprocess("-p", "tests.ci_skips", "-p", "no:cacheprovider", timeout=120)


CASES = {  # source, outcomes under CI=true, outcomes without CI, the failure's line under CI
    "module level": (MODULE_LEVEL, {"errors": 1}, {"skipped": 1}, "torch.no_such_module_for_ci_skips"),
    "in a test": (IN_TEST, {"failed": 1, "skipped": 1, "passed": 1}, {"skipped": 2, "passed": 1},
                  "ray.no_such_module_for_ci_skips"),
}


@pytest.mark.parametrize("ci", ["true", ""])
@pytest.mark.parametrize("case", CASES)
def test_missing_executor_module_fails_only_under_ci(pytester, monkeypatch, case, ci):
    source, in_ci, local, name = CASES[case]
    monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_mod=source)
    res = _run(pytester, monkeypatch)
    res.assert_outcomes(**(in_ci if ci else local))
    if ci:
        res.stdout.fnmatch_lines([f"*CI=true: {name} does not import*"])
