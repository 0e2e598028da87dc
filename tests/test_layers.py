"""The package's layering, read from its import statements (module-level and inside functions):
the scheduler core imports no body, neither body imports the other, and no module imports
itself back through others."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO


def dora_modules() -> dict[str, set[str]]:
    """Module name -> the dora modules it imports (a package's name stands for its __init__)."""
    files = {}
    for p in sorted((REPO / "dora").rglob("*.py")):
        parts = p.relative_to(REPO).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p

    def owner(name: str) -> str:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {owner(a.name) for a in node.names if a.name.split(".")[0] == "dora"}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "dora":
                deps |= {owner(f"{node.module}.{a.name}") for a in node.names}
        graph[mod] = deps - {mod, ""}
    return graph


GRAPH = dora_modules()


def test_the_graph_sees_the_package():
    assert {"dora.sched.policy", "dora.sim.cluster", "dora.exec.orchestrator", "dora.metrics"} <= set(GRAPH)
    assert "dora.sched.state" in GRAPH["dora.sched.policy"]  # imports are read (module level ...)
    assert "dora.sim.tools.sweep" in GRAPH["dora.sim.__main__"]  # (... and inside functions)


def test_the_scheduler_core_imports_no_body():
    for mod, deps in GRAPH.items():
        if mod.startswith("dora.sched"):
            assert all(d.startswith("dora.sched") or d == "dora.errors" for d in deps), (mod, sorted(deps))


@pytest.mark.parametrize("body, other", [("dora.sim", "dora.exec"), ("dora.exec", "dora.sim")])
def test_neither_body_imports_the_other(body, other):
    for mod, deps in GRAPH.items():
        if mod.startswith(body):
            assert not any(d.startswith(other) for d in deps), (mod, sorted(d for d in deps if d.startswith(other)))


def test_no_import_cycles():
    """Depth-first search for a back edge; a cycle is reported as the path around it."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(GRAPH.get(mod, ())):
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, path + [dep])
        state[mod] = 2

    for mod in sorted(GRAPH):
        if mod not in state:
            visit(mod, [mod])


def test_the_analysis_layer_sits_below_its_readers():
    """Metrics and the analysis read the event log alone; plots and the Perfetto export read them."""
    for mod in ("dora.metrics", "dora.analysis", "dora.perfetto", "dora.eventlog"):
        assert not any(d.startswith(("dora.plots", "dora.sim", "dora.exec")) for d in GRAPH[mod]), (mod, GRAPH[mod])
    assert "dora.analysis" in GRAPH["dora.perfetto"] and "dora.analysis" in GRAPH["dora.plots.timeline"]


BODY_ONLY_ROWS = {"preempt", "tool_start", "tool_end", "sched"}  # docs/architecture.md says why


def test_the_bodies_write_shared_rows_through_the_contract():
    """A body writes by itself only the rows the other body cannot write; every other row comes
    from dora.body (start_row, end_row, load_row, ...). Read from the source: any call
    `<x>.add(t, "<event>", ...)` in dora/sim or dora/exec names a body-only event, and no body packs rows."""
    written: dict[str, set[str]] = {}
    for p in sorted((REPO / "dora").rglob("*.py")):
        mod = ".".join(p.relative_to(REPO).with_suffix("").parts)
        if not mod.startswith(("dora.sim", "dora.exec")):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add" \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str):
                written.setdefault(node.args[1].value, set()).add(mod)
            if isinstance(node, ast.Name) and node.id in ("pack_row", "appender"):
                written.setdefault(node.id, set()).add(mod)
            if isinstance(node, ast.Attribute) and node.attr == "appender":
                written.setdefault(node.attr, set()).add(mod)
    assert {"preempt", "sched"} <= set(written)  # the scan sees the rows the bodies do write
    assert set(written) <= BODY_ONLY_ROWS, {e: sorted(m) for e, m in written.items() if e not in BODY_ONLY_ROWS}
