"""The notebooks under notebooks/ run top to bottom and draw figures; they are stored without outputs.

Each notebook is executed from a temporary copy (the kernel's working directory is the repository
root, so it finds traces/); the PNGs it produced are written to pytest's tmp dir, never the repo.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
NAMES = ("a_bubble_ratios", "b_version_timeline", "c_speedup_sweep", "d_sim_vs_real")


def test_the_notebooks_exist():
    assert sorted(p.stem for p in NOTEBOOKS) == sorted(NAMES)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has outputs; strip them before committing"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_draws(path, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    nb = nbformat.read(copy, as_version=4)
    t0 = time.perf_counter()
    # raises CellExecutionError (with the cell and its traceback) if any cell fails
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO)}}).execute()
    wall = time.perf_counter() - t0
    nbformat.write(nb, copy)

    figs = tmp_path / "figures"
    figs.mkdir()
    pngs = []
    for i, cell in enumerate(nb.cells):
        for j, out in enumerate(cell.get("outputs", [])):
            assert out.get("output_type") != "error", f"{path.name} cell {i}: {out.get('ename')}: {out.get('evalue')}"
            data = out.get("data", {}).get("image/png")
            if data:
                png = figs / f"{path.stem}.cell{i:02d}.{j}.png"
                png.write_bytes(base64.b64decode(data))
                assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
                pngs.append(png)
    print(f"{path.name}: executed in {wall:.1f} s, {len(pngs)} figures in {figs}")
    assert pngs, f"{path.name} produced no image/png output"
