"""The dora source files a policy's run can depend on, hashed with GRID_VERSION: the code part of
a cached run's key."""

from __future__ import annotations

import hashlib
from pathlib import Path

GRID_VERSION = "1"  # bump when what a cached run means changes outside the dora package


def _imports(path: Path, root: Path) -> set[Path]:
    """The dora source files `path` imports (absolute `dora.` imports, any depth in the file)."""
    import ast

    out: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
        for name in names:
            if name == "dora" or not name.startswith("dora."):
                continue
            parts = name.split(".")[1:]
            base = root.joinpath(*parts)
            packages = [root.joinpath(*parts[:k], "__init__.py") for k in range(len(parts))]
            for f in (base.with_suffix(".py"), base / "__init__.py", *packages):
                if f.is_file():
                    out.add(f)
    return out


def policy_sources(policy: str) -> list[Path]:
    """The dora source files a run of `policy` can depend on: every file outside dora/sched/ and
    dora/exec/ (the executor, which the simulator never imports: neither body imports the other;
    a file that did would bring it back in), the files of dora/sched they import without entering
    a policy file (the shared scheduler core; registry.py imports every policy), and the policy's
    own file with what it imports."""
    import dora
    from dora.sched.registry import POLICIES

    root = Path(dora.__file__).resolve().parent
    policies = root / "sched" / "policies"
    own = root.joinpath(*POLICIES[policy].__module__.split(".")[1:]).with_suffix(".py")
    seen: set[Path] = set()
    skip = (root / "sched", root / "exec")
    todo = [p for p in root.rglob("*.py") if not any(d in p.parents for d in skip)] + [own]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(q for q in _imports(p, root)
                        if policies not in q.parents or q.name == "__init__.py" or policies in p.parents)
    return sorted(seen)


def code_version(policy: str) -> str:
    """Hash of GRID_VERSION and `policy_sources`: a cached run is reused only with all of them
    unchanged, so a change to one policy (or a module only it imports) reruns that policy alone."""
    import dora

    root = Path(dora.__file__).resolve().parent
    h = hashlib.sha256(GRID_VERSION.encode())
    for p in policy_sources(policy):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]
