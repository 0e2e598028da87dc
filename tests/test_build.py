"""The mypyc build (setup.py): compiled modules give the results of their Python source, and
a compiled module whose source changed refuses to import."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dora
import dora.sim.instance

ROOT = Path(dora.__file__).resolve().parents[1]  # where the imported (installed) package lives
COMPILED = dora.sim.instance.__file__.endswith(".so")

# runs in a subprocess, on whichever `dora` comes first on the path: metrics and event-log sums
# of every policy on a small cluster with failures, MoE redraws and a relay topology
_RUN = """
import json, sys
import dora.sim.instance
from dora.config import apply_cli, build
from dora.sim.config import SimConfig
from dora.sim.run import simulate
from dora.trace import load_trace
trace = sys.argv[1]
out = {"compiled": dora.sim.instance.__file__.endswith(".so")}
for pol in ["sync", "one_step", "partial", "laminar", "dora"]:
    data = {"trace": trace, "steps": 4, "cluster": {"instances": 16, "trainer_devices": 8, "max_seqs": 16},
            "policy": {"batch_size": 8}}
    over = ["faults.mtbf_s=400", "faults.repair_s=20", "imbalance.redraw_s=10", "weights.topology=relay"]
    r = simulate(load_trace(trace), build(SimConfig, apply_cli(data, {}, over)), pol, progress=False)
    ev = r.events
    out[pol] = {"metrics": {k: v for k, v in r.metrics.items() if k != "sim_wall_s" and isinstance(v, (int, float))},
                "rows": len(ev), "t_sum": float(ev["t_s"].sum()), "busy_sum": float(ev["busy_s"].sum()),
                "tokens_sum": int(ev["tokens"].sum())}
print(json.dumps(out))
"""


def _pure_copy(dst: Path) -> Path:
    """The package's Python sources alone (no compiled files, no build info) under dst."""
    skip = shutil.ignore_patterns("*.so", "_build_info.json", "__pycache__")
    shutil.copytree(ROOT / "dora", dst / "dora", ignore=skip)
    return dst


def _run(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(path)})


@pytest.mark.skipif(not COMPILED, reason="plain-Python install (DORA_COMPILE=0): nothing compiled to compare")
def test_compiled_modules_match_their_python_source(small_trace, tmp_path):
    pure = _run(_pure_copy(tmp_path), "-c", _RUN, str(small_trace))
    assert pure.returncode == 0, pure.stderr[-2000:]
    comp = _run(ROOT, "-c", _RUN, str(small_trace))
    assert comp.returncode == 0, comp.stderr[-2000:]
    a, b = json.loads(pure.stdout), json.loads(comp.stdout)
    assert a.pop("compiled") is False and b.pop("compiled") is True
    assert all(a[p]["metrics"]["instance_failures"] > 0 for p in a)
    assert a == b  # exactly: the same float operations in the same order


def test_an_edited_compiled_module_refuses_to_import(tmp_path):
    root = _pure_copy(tmp_path)
    (root / "dora" / "_build_info.json").write_text(json.dumps({"sources": {"dora/sim/instance.py": "0" * 64}}))
    r = _run(root, "-c", "import dora")
    assert r.returncode == 1
    assert "dora/sim/instance.py changed since it was compiled: run `pip install -e .` again" in r.stderr


def test_compiled_leftovers_without_build_info_refuse_to_import(tmp_path):
    root = _pure_copy(tmp_path)
    (root / "dora" / "_compiled__mypyc.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    r = _run(root, "-c", "import dora")
    assert r.returncode == 1 and "holds compiled modules but no dora/_build_info.json" in r.stderr
