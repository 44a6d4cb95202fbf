"""No import cycle among the modules of ``src/tiankong`` (issue 41): a static walk of every module's imports.

What counts as an import, and why:

* **module-level and function-level** ``import`` / ``from … import`` statements, wherever they sit (in a function,
  a method, a ``try`` or an ``if``). A lazy import inside a function is still a run-time dependency: it only moves
  the moment it runs, and "import it lazily, it imports us" is exactly how a layering cycle hides (before this
  test, every cycle in src/ was one: api ↔ deciders ↔ tasks, engine.process ↔ engine.spec_auto, …). Counting
  module-level imports only would have passed on a tree full of them.
* **not** imports under ``if TYPE_CHECKING:`` — they never run (every module has ``from __future__ import
  annotations``), so a type named in a signature does not couple the layers at run time.
* **no implicit parent-package edges**: importing ``tiankong.a.b`` runs ``tiankong/a/__init__.py`` first, but
  counting that would put every module in one cycle with the top package (``tiankong/__init__`` re-exports the
  API). ``from .pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``'s
  ``__init__``; ``importlib.import_module`` with a computed name (the lazy ``__getattr__`` re-exports of a package
  ``__init__``) is not seen, and is only used to re-export a package's own submodules.

The walk is pure ``ast``: nothing is imported, so it takes well under a second and needs no engine.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "tiankong"


def module_files(root: Path = SRC) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (file, is a package ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, package)
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_nodes(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at any depth, except the body of ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            elif isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:  # an ``else:`` of TYPE_CHECKING runs
                    visit(other)
            else:
                visit(child)

    visit(tree)
    return found


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """Module → the modules of the package it imports (see the module text for what counts)."""
    modules = module_files(root)
    graph: dict[str, set[str]] = {}
    for name, (path, package) in modules.items():
        here = name if package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in modules)
                continue
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    targets.add(f"{source}.{alias.name}")
                elif source in modules:
                    targets.add(source)
        targets.discard(name)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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
    return found


def describe(graph: dict[str, set[str]], component: list[str]) -> str:
    members = set(component)
    edges = [f"  {m} -> {', '.join(sorted(graph[m] & members))}" for m in component]
    return "\n".join([f"cycle of {len(component)} modules:", *edges])


def test_no_import_cycle_in_src() -> None:
    graph = import_graph()
    assert len(graph) > 100  # the walk found the package (a wrong root would pass vacuously)
    found = cycles(graph)
    assert not found, "import cycles in src/tiankong (break them by moving the shared name down a layer):\n" + \
        "\n".join(describe(graph, c) for c in found)


def test_the_walk_sees_lazy_imports_and_skips_type_checking(tmp_path: Path) -> None:
    """The rules above, on a hand-made package: a function-level import closes a cycle, a TYPE_CHECKING one
    does not, and ``from . import sub`` is an edge to the submodule, not to the package."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("x = 1\n\ndef f():\n    from .a import y\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import z\n")
    (pkg / "d.py").write_text("from .c import w\n")
    graph = import_graph(pkg)
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.c"] == set()
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
