"""Click options derived from the task registry: one field of a ``TaskSpec``'s arguments → one option with
the spec's default, choices, bounds and help text, so the CLI cannot drift from the library and HTTP."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any

import click
from pydantic.fields import FieldInfo

from ..tasks.specs import SPECS

F = Callable[..., Any]


def _field(task: str, name: str) -> FieldInfo:
    fields: dict[str, FieldInfo] = SPECS[task].args.model_fields
    if name not in fields:
        raise KeyError(f"task {task} has no argument {name!r}")
    return fields[name]


def _plain(annotation: Any) -> Any:
    """``X | None`` → ``X``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kept = [a for a in typing.get_args(annotation) if a is not type(None)]
        return kept[0] if len(kept) == 1 else annotation
    return annotation


def _bounds(info: FieldInfo) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for meta in info.metadata:
        for key, click_key in (("ge", "min"), ("le", "max"), ("gt", "min"), ("lt", "max")):
            if getattr(meta, key, None) is not None:
                found[click_key] = getattr(meta, key)
                if key in ("gt", "lt"):
                    found["min_open" if key == "gt" else "max_open"] = True
    return found


def click_type(info: FieldInfo) -> Any:
    kind = _plain(info.annotation)
    if typing.get_origin(kind) is typing.Literal:
        return click.Choice([str(v) for v in typing.get_args(kind)])
    bounds = _bounds(info)
    if kind is int:
        return click.IntRange(**bounds) if bounds else int
    if kind is float:
        return click.FloatRange(**bounds) if bounds else float
    return str


def spec_option(task: str, name: str, *decls: str, **overrides: Any) -> Callable[[F], F]:
    """``--flag`` for the argument ``name`` of ``task``: its type, bounds, choices, default and help.

    A boolean argument whose default is true, given a ``--no-…`` flag, is switched off by that flag; one whose
    default is false is switched on by its flag; an optional boolean (``None``: decide) gets ``--x/--no-x``."""
    info = _field(task, name)
    default = info.default
    kwargs: dict[str, Any] = {"help": info.description or "", "show_default": default not in (None, False, "")}
    if _plain(info.annotation) is bool:
        kwargs["show_default"] = False
        if default is None:
            kwargs.update(default=None)
        else:
            kwargs.update(is_flag=True, flag_value=not default, default=default)
    else:
        kwargs.update(type=click_type(info), default=default)
    kwargs.update(overrides)
    return click.option(*decls, name, **kwargs)
