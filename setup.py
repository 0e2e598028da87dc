"""Build: the simulator's event path and the scheduler core are compiled with mypyc.

The compiled modules are the same Python source (type-checked by mypy), turned into C
extensions: same results, fewer instructions per event (see README, "Simulator speed").
`DORA_COMPILE=0 pip install -e .` installs everything as plain Python instead.
A compiled module whose source changed since the build refuses to import (`dora/__init__.py`
checks it against `dora/_build_info.json`).
"""

import hashlib
import json
import os
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
# the per-event path: the event log, the scheduler core with every policy file in
# dora/sched/policies/ (a new policy file is compiled too; not the *_config.py beside them: mypyc
# drops a compiled dataclass's Literal annotations, which the config loader reads), the
# simulator's instance and cluster
COMPILED = [
    "dora/eventlog.py",
    "dora/body.py",
    "dora/sched/actions.py",
    "dora/sched/events.py",
    "dora/sched/state.py",
    "dora/sched/loadindex.py",
    "dora/sched/predictor.py",
    "dora/sched/pace.py",
    "dora/sched/calibration.py",
    "dora/sched/cohort.py",
    "dora/sched/lending.py",
    "dora/sched/costs.py",
    "dora/sched/progress.py",
    "dora/sched/policy.py",
    "dora/sched/streaming.py",
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "dora" / "sched" / "policies").glob("*.py")
            if p.name != "__init__.py" and not p.name.endswith("_config.py")),
    "dora/sim/order.py",
    "dora/sim/instance.py",
    "dora/sim/cluster.py",
]
GROUP = "dora._compiled"  # the shared library: dora/_compiled__mypyc.*.so
BUILD_INFO = ROOT / "dora" / "_build_info.json"


def _stale_outputs() -> list[Path]:
    """Compiled files a previous build left in the source tree (editable installs put them there)."""
    out = [p for src in COMPILED for p in (ROOT / src).parent.glob(Path(src).stem + ".cpython-*")]
    return out + list((ROOT / "dora").glob("_compiled__mypyc.*")) + [BUILD_INFO]


def ext_modules() -> list:
    flag = os.environ.get("DORA_COMPILE", "1")
    if flag not in ("0", "1"):
        raise SystemExit(f"DORA_COMPILE={flag!r}: set it to 1 (compile with mypyc, the default) or 0 (plain Python)")
    for p in _stale_outputs():
        p.unlink(missing_ok=True)
    if flag == "0":
        return []
    from mypyc.build import mypycify

    digests = {src: hashlib.sha256((ROOT / src).read_bytes()).hexdigest() for src in COMPILED}
    BUILD_INFO.write_text(json.dumps({"about": "written by setup.py: sha256 of each compiled module's source",
                                      "sources": digests}, indent=1) + "\n")
    return mypycify(["--ignore-missing-imports", "--follow-imports=silent", *COMPILED],
                    opt_level="3", group_name=GROUP)


setup(ext_modules=ext_modules())
