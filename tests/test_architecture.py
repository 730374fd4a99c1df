"""The package's layering, read from the source with `ast` (every import, top-level or local).

tasks/ holds task definitions and never imports eval/ (scoring lives only in eval/); models/
never import tasks/; the UI reaches data through service functions, never the store; the
query language imports nothing above medheb_app.evidence.
"""

from __future__ import annotations

import ast
from pathlib import Path

import medheb_app

PACKAGE = Path(medheb_app.__file__).parent
FORBIDDEN = (("tasks", "eval"), ("models", "tasks"), ("ui", "store"))
QUERY_MAY_IMPORT = ("query", "evidence")


def _layer(module: str) -> str:
    """'medheb_app.eval.runner' -> 'eval'; top-level modules are their own layer."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, package: str | None = None) -> set[str]:
    """Every medheb_app module `path` imports, resolving relative imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if package is None:
        package = _module_name(path) if path.name == "__init__.py" else _module_name(path.parent)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("medheb_app.")}


def import_graph() -> dict[str, set[str]]:
    return {_module_name(path): _imports(path) for path in sorted(PACKAGE.rglob("*.py"))}


def test_the_graph_is_read_from_every_module() -> None:
    graph = import_graph()
    assert "medheb_app.eval.runner" in graph and "medheb_app.ui.explorer_tab" in graph
    assert "medheb_app.eval.rankers" in graph["medheb_app.eval.runner"]


def test_no_forbidden_layer_edges() -> None:
    edges = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        for source_layer, target_layer in FORBIDDEN
        if _layer(module) == source_layer and _layer(target) == target_layer
    )
    assert edges == []


def test_query_imports_nothing_above_evidence() -> None:
    edges = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if _layer(module) == "query"
        for target in targets
        if _layer(target) not in QUERY_MAY_IMPORT
    )
    assert edges == []


def test_the_checker_sees_a_forbidden_edge(tmp_path: Path) -> None:
    """The check can fail: a local import inside a function is found too."""
    source = tmp_path / "probe.py"
    source.write_text(
        "import json\n"
        "def f():\n    from medheb_app.store.runs import list_runs\n"
        "def g():\n    from ..store import db\n"
    )
    found = _imports(source, package="medheb_app.ui")
    assert {"medheb_app.store.runs", "medheb_app.store.db"} <= found
    assert {_layer(name) for name in found} == {"store"}
