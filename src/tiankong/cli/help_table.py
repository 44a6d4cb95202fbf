"""The task commands' rows of ``tiankong --help`` (``cli/__init__.py``, between ``# <task-commands>`` markers),
written from the task registry: ``python -m tiankong.cli.help_table src/tiankong/cli/__init__.py`` (``make
docs``) rewrites them in place; a test fails when they are stale."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click

from ..tasks.specs import SPECS

BLOCK = re.compile(r"(?P<head>( *)# <task-commands>[^\n]*\n).*?(?P<tail>\2# </task-commands>)", re.S)


def rows() -> list[str]:
    """One ``"name": "short help",`` line per registered task with a command, in the registry's order."""
    found = []
    for name, spec in SPECS.items():
        if spec.cli is not None:
            short = click.Command(name, help=spec.cli.summary).get_short_help_str(limit=150)
            found.append(f"{json.dumps(name)}: {json.dumps(short, ensure_ascii=False)},")
    return found


def update(text: str) -> str:
    """``text`` with the task rows rewritten from the registry."""
    def block(m: re.Match[str]) -> str:
        indent = m[2]
        return m["head"] + "".join(f"{indent}{row}\n" for row in rows()) + m["tail"]

    return BLOCK.sub(block, text)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        path = Path(arg)
        path.write_text(update(path.read_text(encoding="utf-8")), encoding="utf-8")
