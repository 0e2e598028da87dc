"""The robustness grid's parts; benchmarks/robustness_grid.py is the command.

spec: the grid as data. jobs: configurations resolved to runs. sources: the dora source a
policy's run depends on (the cache key's code part). runner: the per-run cache and the runs.
report: the tables. heatmap: the figure.

Importing the package puts the repository on sys.path (first, where it is not there yet), so
the parts import `dora` from this checkout unless it was imported already.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
