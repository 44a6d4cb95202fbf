"""The parameter tables of ``docs/tasks.md``, written from the task registry (``python -m
tiankong.tasks.doc_tables docs/tasks.md`` rewrites them in place; a test fails when they are stale)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from .specs import SPECS, TaskSpec

BLOCK = re.compile(r"<!-- params:(\w+) -->\n.*?<!-- /params -->", re.S)


def _type(info: FieldInfo) -> str:
    text = str(info.annotation).replace("typing.", "").replace("NoneType", "None")
    text = re.sub(r"tiankong\.tasks\.\w+\.", "", re.sub(r"<class .(\w+).>", r"\1", text))
    return text.replace(" | None", "").replace(" | ", " or ")


def _limits(info: FieldInfo) -> str:
    found = []
    for meta in info.metadata:
        for key, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "≥"),
                          ("max_length", "≤")):
            value: Any = getattr(meta, key, None)
            if value is not None:
                unit = ("chars " if _type(info) == "str" else "items ") if "length" in key else ""
                found.append(f"{unit}{sign} {value}")
    return ", ".join(found)


def parameter_table(spec: TaskSpec[Any, Any]) -> str:
    # an optional field (X or None) is shown as X with default null
    rows = ["| field | type | default | limits | meaning |", "| --- | --- | --- | --- | --- |"]
    for name, info in spec.args.model_fields.items():
        default = "required" if info.is_required() else f"`{json.dumps(info.default, ensure_ascii=False)}`"
        rows.append(f"| `{info.alias or name}` | `{_type(info)}` | {default} | {_limits(info)} | "
                    f"{info.description or ''} |")
    return "\n".join(rows)


def update(text: str) -> str:
    """``text`` with every ``<!-- params:TASK -->`` block rewritten from the registry."""
    return BLOCK.sub(lambda m: f"<!-- params:{m[1]} -->\n{parameter_table(SPECS[m[1]])}\n<!-- /params -->", text)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        path = Path(arg)
        path.write_text(update(path.read_text(encoding="utf-8")), encoding="utf-8")
