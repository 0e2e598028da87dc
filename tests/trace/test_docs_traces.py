"""docs/traces.md: every `$ python -m dora.trace ...` example prints what the page shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

DOC = REPO / "docs" / "traces.md"


def examples() -> list[tuple[list[str], list[str]]]:
    """(commands, expected output lines) of each code block that starts with `$ `."""
    out = []
    for block in re.findall(r"```\n(.*?)```", DOC.read_text(), flags=re.S):
        lines = block.rstrip("\n").split("\n")
        if not lines[0].startswith("$ "):
            continue
        cmds = [ln[2:] for ln in lines if ln.startswith("$ ")]
        out.append((cmds, [ln for ln in lines if not ln.startswith("$ ")]))
    return out


EXAMPLES = examples()


def test_the_page_has_its_examples():
    assert len(EXAMPLES) == 5


@pytest.mark.parametrize("cmds,expected", EXAMPLES, ids=[c[-1][:60] for c, _ in EXAMPLES])
def test_example_output(cmds, expected, tmp_path):
    """Run in a scratch folder that sees the repo's traces/ (outputs land there, not in the repo)."""
    (tmp_path / "traces").symlink_to(REPO / "traces")
    (tmp_path / "docs" / "img").mkdir(parents=True)
    if any("--tokenizer tiny" in c for c in cmds):
        pytest.importorskip("transformers")
        from dora.exec.tokenizer import build_tokenizer

        build_tokenizer().save_pretrained(tmp_path / "tiny")  # the tokenizer dora.exec.tiny_model saves
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    err, out = [], []
    for cmd in cmds:
        cmd = re.sub(r"^python ", f"{sys.executable} ", cmd)
        r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path, env=env)
        err += r.stderr.splitlines()
        out += r.stdout.splitlines()
    assert err + out == expected
