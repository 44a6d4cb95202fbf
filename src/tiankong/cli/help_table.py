"""The task commands' rows of ``tiankong --help``, derived from the task registry at run time without importing it.

Importing ``tasks/specs.py`` loads every task module, pydantic and the deciders: too slow for ``tiankong --help``.
The rows are read from its source instead (one ``ast.parse``, a few milliseconds; ``ast`` is already loaded by
then): the variables in ``SPECS``'s tuple, in order, and for each its ``TaskSpec("name", …, cli=CliPart("summary",
…))`` — the name and the summary are string literals. Where the source cannot be read that way (no source shipped,
a summary that is not a literal) the registry is imported instead: slower, never wrong. A test holds the rows read
from the source to the registry's (``tests/engine/test_task_registry.py``), so a spec written another way fails there.
"""

from __future__ import annotations

import ast
from pathlib import Path

SPECS_SOURCE = Path(__file__).parent.parent / "tasks" / "specs.py"


def task_summaries() -> dict[str, str]:
    """Task name → its command's summary, in the registry's order (the tasks that have a command)."""
    try:
        return from_source(SPECS_SOURCE.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return from_registry()


def from_registry() -> dict[str, str]:
    from ..tasks.specs import SPECS

    return {name: spec.cli.summary for name, spec in SPECS.items() if spec.cli is not None}


def from_source(text: str) -> dict[str, str]:
    """The summaries as ``tasks/specs.py``'s text declares them; ``ValueError`` where it does not say them as
    literals."""
    specs: dict[str, ast.Call] = {}
    order: list[ast.expr] | None = None
    for node in ast.parse(text).body:
        if isinstance(node, ast.AnnAssign | ast.Assign) and node.value is not None:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if not names:
                continue
            value = node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "TaskSpec":
                specs[names[0]] = value
            elif names[0] == "SPECS":
                if not isinstance(value, ast.DictComp) or not isinstance(value.generators[0].iter, ast.Tuple):
                    raise ValueError("SPECS is not {spec.name: spec for spec in (A, B, …)}")
                order = value.generators[0].iter.elts
    if order is None:
        raise ValueError("no SPECS in the registry's source")
    found: dict[str, str] = {}
    for item in order:
        if not isinstance(item, ast.Name) or item.id not in specs:
            raise ValueError(f"SPECS names {ast.unparse(item)}, not a TaskSpec(…) assigned above it")
        call = specs[item.id]
        name = _literal(call.args[0] if call.args else None, f"{item.id}'s name")
        cli = next((k.value for k in call.keywords if k.arg == "cli"), None)
        if cli is None or isinstance(cli, ast.Constant) and cli.value is None:
            continue  # no command (its CLI is its own, or none)
        if not isinstance(cli, ast.Call):
            raise ValueError(f"{item.id}'s cli is not CliPart(…)")
        found[name] = _literal(cli.args[0] if cli.args else None, f"{item.id}'s command summary")
    return found


def _literal(node: ast.expr | None, what: str) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise ValueError(f"{what} is not a string literal")
