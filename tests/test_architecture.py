"""The package's layering, read from the source with `ast` (every import, top-level or local).

tasks/ holds task definitions and never imports eval/ (scoring lives only in eval/); models/
never import tasks/; the UI reaches data through service functions, never the store; the
query language imports nothing above medheb_app.evidence.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import medheb_app

PACKAGE = Path(medheb_app.__file__).parent
FORBIDDEN = (("tasks", "eval"), ("models", "tasks"), ("ui", "store"))
QUERY_MAY_IMPORT = ("query", "evidence")


def _version(path: Path) -> tuple[int, int]:
    """What tells one version of a file from the next: its modification time and size."""
    status = path.stat()
    return status.st_mtime_ns, status.st_size


@cache
def _parse(path: Path, _version: tuple[int, int]) -> ast.Module:
    """The module's syntax tree, parsed once per file version for all the checks below (each
    walks every module; parsing them again per test was most of this file's time)."""
    return ast.parse(path.read_text(), filename=str(path))


def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module's tree in ast.walk order, listed once per file version: ten
    tests build the import graph and others walk every module again (walking each tree anew
    took 2.4 s of this file's 4.1 s)."""
    return _walk(path, _version(path))


@cache
def _walk(path: Path, version: tuple[int, int]) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_parse(path, version)))


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
    if package is None:
        package = _module_name(path) if path.name == "__init__.py" else _module_name(path.parent)
    found: set[str] = set()
    for node in _nodes(path):
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


# ---------------------------------------------------------------- cycles, bootstrap, tabs

# The app's bootstrap and application context: only the top layer may import them.
BOOTSTRAP = ("medheb_app.demo", "medheb_app.demo_showcase", "medheb_app.services")
TOP_LAYER = (
    "medheb_app.ui",
    "medheb_app.commands",
    "medheb_app.api",
    "medheb_app.cli",
    "medheb_app.services",
)
TOP_MODULES = (*BOOTSTRAP, "medheb_app.__main__")
# Cycles named instead of failed on (a frozenset of modules each); empty since the upload
# decoders' shared pieces moved into the leaf evidence/pixels.py. Keep it empty.
KNOWN_CYCLES: tuple[frozenset[str], ...] = ()


def _module_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph restricted to modules: `from pkg.mod import name` counts as an edge to pkg.mod,
    and a package's own __init__ importing its submodules is an edge like any other."""
    return {
        module: {target for target in targets if target in graph and target != module}
        for module, targets in graph.items()
    }


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = _module_edges(graph)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def test_no_import_cycle_counting_function_level_imports() -> None:
    cycles = [
        c
        for c in import_cycles(import_graph())
        if not any(frozenset(c) <= known for known in KNOWN_CYCLES)
    ]
    assert cycles == []


def test_known_cycles_is_empty() -> None:
    assert KNOWN_CYCLES == ()


def test_the_cycle_finder_finds_a_cycle_closed_inside_a_function() -> None:
    graph = {
        "medheb_app.a": {"medheb_app.b"},
        "medheb_app.b": {"medheb_app.c", "medheb_app.c.helper"},
        "medheb_app.c": {"medheb_app.a"},  # e.g. `def f(): from medheb_app.a import x`
        "medheb_app.d": {"medheb_app.a"},
    }
    assert import_cycles(graph) == [["medheb_app.a", "medheb_app.b", "medheb_app.c"]]
    assert import_cycles({**graph, "medheb_app.c": set()}) == []


def _is_top(module: str) -> bool:
    return module in TOP_MODULES or any(
        module == top or module.startswith(top + ".") for top in TOP_LAYER
    )


def test_nothing_below_the_top_layer_imports_the_bootstrap() -> None:
    edges = sorted(
        f"{module} -> {target}"
        for module, targets in _module_edges(import_graph()).items()
        if not _is_top(module)
        for target in targets
        if any(target == b or target.startswith(b + ".") for b in BOOTSTRAP)
    )
    assert edges == []


# What each ui module is (medheb_app/ui/__init__.py says what each kind may import): every ui
# module is named here once, so a new one must be placed before it can land.
UI_TABS = {
    "medheb_app.ui.search_tab",
    "medheb_app.ui.explorer_tab",
    "medheb_app.ui.analysis_tab",
    "medheb_app.ui.admin_tab",
    "medheb_app.ui.rater_app",
}
UI_PARTS = {  # part -> the one tab that builds it
    "medheb_app.ui.admin_study": "medheb_app.ui.admin_tab",
    "medheb_app.ui.admin_tokens": "medheb_app.ui.admin_tab",
    "medheb_app.ui.search_upload": "medheb_app.ui.search_tab",
}
UI_BLOCKS = {
    "medheb_app.ui.components",
    "medheb_app.ui.evidence_view",
    "medheb_app.ui.drilldown_view",
    "medheb_app.ui.query_reading",
}
UI_SHELLS = {"medheb_app.ui", "medheb_app.ui.shell", "medheb_app.ui.server"}
# Packages any ui module may import: the application context and its facades, the public
# wording of errors, and the web access layer (cookies, rate limits, origin, uploads).
UI_MAY_IMPORT_ALL = ("medheb_app.services", "medheb_app.public_text", "medheb_app.access")
# Each other import of a domain module by a ui module, and why it is not a call to the services.
UI_MAY_IMPORT = {
    "medheb_app.ui.explorer_tab": {
        "medheb_app.eval.results": "the Summary value services.runs returns",
        "medheb_app.eval.leaderboard": "tables drawn from that Summary (pure functions)",
        "medheb_app.eval.reports": "the paper tables drawn from that Summary",
        "medheb_app.eval.figures": "the plotly figures drawn from that Summary",
        "medheb_app.eval.drilldown": "a query's ranked lists read from that Summary's folder",
    },
    "medheb_app.ui.drilldown_view": {
        "medheb_app.eval.drilldown": "the HitView / QueryView / RankedView values it draws",
    },
    "medheb_app.ui.evidence_view": {
        "medheb_app.evidence.readers": "reads the image file a payload names, to draw it",
        "medheb_app.evidence.render": "the one pixel conversion and montage it draws with",
    },
    "medheb_app.ui.query_reading": {
        "medheb_app.query.parser": "parses the query text to show how it was read",
        "medheb_app.query.provenance": "the sentences a reading came from",
    },
    "medheb_app.ui.search_upload": {
        "medheb_app.evidence.file_study": "reads an uploaded file into the query Study",
        "medheb_app.evidence.study": "the Study value and the reader's EvidenceError",
    },
    "medheb_app.ui.shell": {"medheb_app.api.gradio_api": "the page's named Gradio API"},
    "medheb_app.ui.server": {"medheb_app.api.app": "mounts the JSON API on the same app"},
}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _ui_modules(graph: dict[str, set[str]]) -> set[str]:
    return {m for m in graph if _within(m, "medheb_app.ui")}


def _targets(edges: dict[str, set[str]], module: str) -> set[str]:
    """What `module` imports, a package left out where the import names its submodules
    (`from medheb_app.ui import components` is an edge to ui.components, not to the ui)."""
    found = edges.get(module, set())
    return {t for t in found if not any(other.startswith(t + ".") for other in found)}


def test_every_ui_module_is_a_tab_a_part_a_block_or_a_shell() -> None:
    kinds = [UI_TABS, set(UI_PARTS), UI_BLOCKS, UI_SHELLS]
    named = [m for kind in kinds for m in kind]
    assert len(named) == len(set(named))  # each in one kind only
    assert _ui_modules(import_graph()) == set(named)


def tab_edges(graph: dict[str, set[str]]) -> list[str]:
    """Edges from a tab or part to another tab, or to a part that is not its own; and from a
    building block to any tab, part or shell."""
    edges = _module_edges(graph)
    owner = {**{tab: tab for tab in UI_TABS}, **UI_PARTS}
    found = []
    for module in sorted(set(owner) | UI_BLOCKS):
        for target in sorted(_targets(edges, module)):
            if target not in owner and target not in UI_SHELLS:
                continue
            if module in UI_BLOCKS or target in UI_SHELLS:
                found.append(f"{module} -> {target}")
            elif owner[target] != owner[module] or target == owner[module] != module:
                found.append(f"{module} -> {target}")  # another tab, or a part up to its tab
    return found


def test_tabs_import_no_other_tab() -> None:
    assert tab_edges(import_graph()) == []


def ui_domain_edges(graph: dict[str, set[str]]) -> list[str]:
    """Imports of medheb_app modules by ui modules outside the ui, the allowed packages and
    the module's documented exceptions."""
    edges = _module_edges(graph)
    return sorted(
        f"{module} -> {target}"
        for module in _ui_modules(graph)
        for target in _targets(edges, module)
        if not _within(target, "medheb_app.ui")
        and not any(_within(target, allowed) for allowed in UI_MAY_IMPORT_ALL)
        and target not in UI_MAY_IMPORT.get(module, {})
    )


def test_ui_modules_reach_the_domain_only_through_the_services() -> None:
    assert ui_domain_edges(import_graph()) == []


def test_the_exceptions_are_all_used() -> None:
    """A documented exception that no import needs any more is deleted, not kept."""
    edges = _module_edges(import_graph())
    unused = sorted(
        f"{module} -> {target}"
        for module, allowed in UI_MAY_IMPORT.items()
        for target in allowed
        if target not in edges.get(module, set())
    )
    assert unused == []


def test_the_ui_checks_see_a_tab_reaching_past_the_services() -> None:
    graph = {
        **{m: set() for m in UI_TABS | set(UI_PARTS) | UI_BLOCKS | UI_SHELLS},
        "medheb_app.search": set(),
        "medheb_app.services": set(),
        "medheb_app.ui.search_tab": {"medheb_app.search", "medheb_app.services"},
        "medheb_app.ui.admin_tab": {"medheb_app.ui.admin_study", "medheb_app.ui.explorer_tab"},
        "medheb_app.ui.admin_study": {"medheb_app.ui.admin_tab"},
        "medheb_app.ui.components": {"medheb_app.ui.search_upload"},
    }
    assert ui_domain_edges(graph) == ["medheb_app.ui.search_tab -> medheb_app.search"]
    assert tab_edges(graph) == [
        "medheb_app.ui.admin_study -> medheb_app.ui.admin_tab",
        "medheb_app.ui.admin_tab -> medheb_app.ui.explorer_tab",
        "medheb_app.ui.components -> medheb_app.ui.search_upload",
    ]


# The domain modules a services facade wraps, and the facade a command calls instead (issue 24
# item 4: one code path serves the tab, the API and the CLI). A command imports none of them,
# so it cannot drift from what the tab does. The index commands call index/ directly: no
# facade builds or lists indices the way `index build|list|info` do (SearchService.builds is
# the search tab's one-line filter, and its module imports the model registry that `index
# list` must not).
FACADE_WRAPS = {
    "medheb_app.api.tokens": "medheb_app.services.tokens",
    "medheb_app.api.audit": "medheb_app.services.audit",
    "medheb_app.study": "medheb_app.services.studies",
    "medheb_app.search": "medheb_app.services.search",
    "medheb_app.eval.estimate": "medheb_app.services.runs",
    "medheb_app.store": "medheb_app.services.store (and the facades bound to the store)",
}


def command_domain_edges(graph: dict[str, set[str]]) -> list[str]:
    """Imports, by a module of medheb_app/commands, of a module a facade wraps."""
    edges = _module_edges(graph)
    return sorted(
        f"{module} -> {target}"
        for module in graph
        if _within(module, "medheb_app.commands")
        for target in _targets(edges, module)
        if any(_within(target, wrapped) for wrapped in FACADE_WRAPS)
    )


def test_commands_call_the_facades_not_the_modules_they_wrap() -> None:
    assert command_domain_edges(import_graph()) == []


def test_the_command_check_sees_a_command_reaching_past_a_facade() -> None:
    graph = {
        "medheb_app.commands.token": {"medheb_app.api.tokens", "medheb_app.services.tokens"},
        "medheb_app.commands.study": {"medheb_app.study.export", "medheb_app.services.studies"},
        "medheb_app.api.tokens": set(),
        "medheb_app.study.export": set(),
        "medheb_app.services.tokens": set(),
        "medheb_app.services.studies": set(),
    }
    assert command_domain_edges(graph) == [
        "medheb_app.commands.study -> medheb_app.study.export",
        "medheb_app.commands.token -> medheb_app.api.tokens",
    ]


# Modules that read the environment besides settings.py, and why. medheb_app/__init__.py only
# sets the offline flags (the one place they are set); access/auth.py is issue 19's this round
# (the Space's OAuth variables) and moves to Settings with it.
ENV_READERS = {
    "medheb_app": "sets the offline flags before any import reads them",
    "medheb_app.access.auth": "SPACE_ID / OAUTH_CLIENT_SECRET, being rewritten under issue 19",
}


def _reads_environment(path: Path) -> bool:
    names = ("environ", "getenv")
    for node in _nodes(path):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in names
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            return True
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in names for alias in node.names)
        ):
            return True
    return False


def test_only_settings_reads_the_environment() -> None:
    readers = sorted(
        _module_name(path)
        for path in PACKAGE.rglob("*.py")
        if _reads_environment(path) and _module_name(path) != "medheb_app.settings"
    )
    assert [name for name in readers if name not in ENV_READERS] == []


def test_the_environment_check_sees_a_read(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import os\ndef f():\n    return os.environ.get('X')\n")
    assert _reads_environment(probe)
    probe.write_text("from os import getenv\n")
    assert _reads_environment(probe)
    probe.write_text("import os\nos.path.join('a', 'b')\n")
    assert not _reads_environment(probe)


# ---------------------------------------------------------------- function-level imports

# An internal import inside a function hides an edge of the graph from a reader of the module's
# top; one is kept only to defer a heavy optional dependency (torch, faiss, pandas, ...: CLI
# commands such as `index list` and `bench list` must stay light) or to break a real cycle,
# and says which in a comment: `# deferred: torch` or `# cycle: X imports this module`, on the
# import's first line or on the line above it (one comment may head a run of such imports).
MAX_FUNCTION_LEVEL_IMPORTS = 60
REASONS = ("# deferred:", "# cycle:")


def _is_internal(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").startswith("medheb_app")
    return any(alias.name.startswith("medheb_app") for alias in node.names)


def function_level_imports(path: Path) -> list[tuple[int, bool]]:
    """(line, has a reason comment) for every internal import inside a function of `path`."""
    source = path.read_text()
    lines = source.splitlines()
    found: list[tuple[int, bool]] = []
    for function in _nodes(path):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        imports = [
            node
            for node in ast.walk(function)
            if isinstance(node, ast.Import | ast.ImportFrom) and _is_internal(node)
        ]
        starts = {node.end_lineno: node.lineno for node in imports if node.end_lineno}
        for node in imports:
            line = node.lineno
            if any(reason in lines[line - 1] for reason in REASONS):
                found.append((line, True))
                continue
            above = line - 1
            while above in starts:  # up through a run of adjacent internal imports
                above = starts[above] - 1
            found.append((line, above >= 1 and lines[above - 1].strip().startswith(REASONS)))
    # a nested function's imports are seen from each enclosing function: count each once
    return sorted(set(found))


def test_function_level_imports_are_few_and_each_says_why() -> None:
    imports = {
        f"{path.relative_to(PACKAGE.parent)}:{line}": reasoned
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, reasoned in function_level_imports(path)
    }
    assert len(imports) < MAX_FUNCTION_LEVEL_IMPORTS, sorted(imports)
    assert sorted(place for place, reasoned in imports.items() if not reasoned) == []


def test_the_import_counter_sees_local_imports_and_their_reasons(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from medheb_app import settings\n"
        "def f():\n"
        "    import json\n"
        "    from medheb_app.search import search\n"
        "def g():\n"
        "    # deferred: torch\n"
        "    from medheb_app.models import dual_lite\n"
        "    from ..train import (\n        recipes,\n    )\n"
        "    from medheb_app.index import catalog  # cycle: catalog imports this module\n"
    )
    assert function_level_imports(probe) == [(4, False), (7, True), (8, True), (11, True)]


# ---------------------------------------------------------------- one cancellation, no env fallback


def test_work_that_stops_raises_the_one_cancellation_type() -> None:
    """Library code raises medheb_app.cancellation.Cancelled, never a bare InterruptedError,
    and defines no other exception for a stop."""
    raises, types = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in _nodes(path):
            if isinstance(node, ast.Raise) and node.exc is not None:
                called = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(called, ast.Name) and called.id == "InterruptedError":
                    raises.append(f"{_module_name(path)}:{node.lineno}")
            if isinstance(node, ast.ClassDef) and any(
                word in node.name.lower() for word in ("cancel", "stop", "interrupt")
            ):
                types.append(f"{_module_name(path)}.{node.name}")
    assert raises == []
    assert types == ["medheb_app.cancellation.Cancelled"]


def test_only_the_cli_reads_settings_from_the_environment() -> None:
    """Library functions take Settings; only the CLI entry point (and app.py, outside the
    package) calls Settings.from_env()."""
    callers = sorted(
        f"{_module_name(path)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        for node in _nodes(path)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "from_env"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "Settings"
    )
    assert [place for place in callers if not place.startswith("medheb_app.cli:")] == []
