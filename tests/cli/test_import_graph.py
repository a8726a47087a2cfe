"""The framework's import graph: down docs/ARCHITECTURE.md's table, no circles, no import of the example jobs.

Read from the source (no module is imported): every module of absreplay/, coordinator/,
spark_jobs/ and dags/ and its module-level imports, those under ``if TYPE_CHECKING:`` included
(a circle there is one a reader follows too), and ``from package import module`` counted as an
import of the package as well (its ``__init__`` runs first).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORK = ("absreplay", "coordinator", "spark_jobs", "dags")
EXAMPLES = "absreplay_examples"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for package in FRAMEWORK for p in (ROOT / package).rglob("*.py")}


def imported(module: str, nodes: list[ast.stmt | ast.expr]) -> set[str]:
    """The modules ``nodes`` import (absolute names, relative imports resolved)."""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def module_level(tree: ast.Module) -> list[ast.stmt]:
    """Import statements run when the module is imported (or read under TYPE_CHECKING), not in functions."""
    found: list[ast.stmt] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            pending += [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            pending += [*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)]
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = [stack.pop()]
            while component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    graph = {}
    for module, path in MODULES.items():
        names = imported(module, module_level(ast.parse(path.read_text(encoding="utf-8"))))
        graph[module] = {n for n in names if n in MODULES and n != module}
    assert len(graph) > 100
    assert circles(graph) == []


def test_the_framework_never_imports_the_example_jobs() -> None:
    """Not even inside a function: the demo finds its job by discovery, like any user's job."""
    importing = sorted(
        module for module, path in MODULES.items()
        if any(n == EXAMPLES or n.startswith(f"{EXAMPLES}.")
               for n in imported(module, list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))))
    )
    assert importing == []


def layers() -> list[tuple[str, tuple[str, ...]]]:
    """ARCHITECTURE.md's rooms of the framework, top first: (package, the modules the row names, or none for
    a folder row), one entry per folder of a row."""
    rows: list[tuple[str, tuple[str, ...]]] = []
    for line in (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `"):
            continue
        room = line.split(" | ")[0].removeprefix("| ")
        listed = re.search(r"\((`[^)]*`)\)", room)
        modules = tuple(re.findall(r"`([\w.]+)`", listed.group(1))) if listed else ()
        folders = re.findall(r"`([\w/]+)/`", room.split("(")[0])
        rows += [(f.replace("/", "."), modules) for f in folders if f.split("/")[0] in FRAMEWORK]
    return rows


def layer_of(module: str, rows: list[tuple[str, tuple[str, ...]]]) -> int:
    """The row holding ``module``: one naming it, else the deepest folder row around it. A package's own
    ``__init__`` (imported by every ``from package import x``) sits in its lowest row."""
    def inside(name: str, package: str) -> bool:
        return name == package or name.startswith(f"{package}.")

    named = [i for i, (package, modules) in enumerate(rows) if any(inside(module, f"{package}.{m}") for m in modules)]
    if named:
        return named[0]
    around = [(len(package), i) for i, (package, modules) in enumerate(rows)
              if not modules and inside(module, package) and module != package]
    if around:
        return max(around)[1]
    own = [i for i, (package, _) in enumerate(rows) if package == module]
    assert own, f"{module} is in no room of docs/ARCHITECTURE.md's table"
    return max(own)


def test_imports_go_down_the_architecture_table() -> None:
    """Inside functions too: an import put off is still an arrow up."""
    rows = layers()
    assert [package for package, _ in rows][:4] == ["dags", "absreplay.airflow_plugin", "absreplay.airflow",
                                                     "absreplay.commands"]
    up = []
    for module, path in MODULES.items():
        here = layer_of(module, rows)
        for name in imported(module, list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))):
            if name in MODULES and layer_of(name, rows) < here:
                up.append(f"{module} -> {name}")
    assert sorted(up) == []
