"""DORA: multi-version streaming rollout for asynchronous RL post-training.

Packages: `dora.sched` (scheduler core and policies), `dora.sim` (SimPy cluster),
`dora.exec` (real executor). Shared modules: `trace`, `eventlog`, `metrics`, `config`.
"""

__version__ = "0.1.0"


def _check_build() -> None:
    """Compiled modules (setup.py compiles the hot path with mypyc) must match their sources:
    refuse to run compiled code that an edit has made stale."""
    import hashlib
    import json
    from pathlib import Path

    here = Path(__file__).resolve().parent
    info = here / "_build_info.json"  # {source path: sha256 at build time}, written by setup.py
    if not info.exists():
        if any(here.glob("_compiled__mypyc.*")):
            raise ImportError(f"{here} holds compiled modules but no dora/_build_info.json: reinstall with "
                              "`pip install -e .` (or `DORA_COMPILE=0 pip install -e .` for plain Python)")
        return
    for src, digest in json.loads(info.read_text())["sources"].items():
        if hashlib.sha256((here.parent / src).read_bytes()).hexdigest() != digest:
            raise ImportError(f"{src} changed since it was compiled: run `pip install -e .` again to recompile it "
                              "(or `DORA_COMPILE=0 pip install -e .` for plain Python)")


_check_build()
