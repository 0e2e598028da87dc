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


@pytest.mark.parametrize("ci", ["true", ""])
def test_module_level_skip_fails_under_ci(pytester, monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_mod=MODULE_LEVEL)
    res = _run(pytester, monkeypatch)
    if ci:
        res.assert_outcomes(errors=1)
        res.stdout.fnmatch_lines(["*CI=true: torch.no_such_module_for_ci_skips does not import*"])
    else:
        res.assert_outcomes(skipped=1)


@pytest.mark.parametrize("ci", ["true", ""])
def test_skip_in_a_test_fails_under_ci(pytester, monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_mod=IN_TEST)
    res = _run(pytester, monkeypatch)
    if ci:
        res.assert_outcomes(failed=1, skipped=1, passed=1)
        res.stdout.fnmatch_lines(["*CI=true: ray.no_such_module_for_ci_skips does not import*"])
    else:
        res.assert_outcomes(skipped=2, passed=1)
