"""Task verbs, one per registered task (``tasks/specs.py``), made from the spec's command-line part.

Each reads its inputs as ``spec.cli`` declares them (``tasks/cli_part.py``), runs the task on a ``Client``
(``client.task``; tasks with a CLI-only behaviour have a hook in ``cli/task_hooks.py``) and renders the answer
as ``spec.cli.line`` (``--json``: the same JSON the gateway's ``/v1/tasks/<task>`` returns).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import ConfigError
from ..models import DEFAULT_MODEL
from ..tasks.cli_part import CliInput
from ..tasks.specs import SPECS, TaskSpec
from . import emit_json, split_list
from .run_cmds import API_KEY_OPTION
from .spec_options import spec_option

COMMON = ("model", "url", "llama_server", "as_json")


def task_options(func: Callable[..., None], json_flags: tuple[str, ...] = ("--json",),
                 json_help: str = "Print the full result as JSON.") -> Callable[..., None]:
    """--model, --url, --llama-server, the JSON flag(s) (``as_json``), --api-key."""
    options = [
        click.option("--model", default=None, help=f"Model (default: TIANKONG_MODEL, else {DEFAULT_MODEL}; "
                     "embedded engine)."),
        click.option("--url", default=None, help="Use a running server instead (or TIANKONG_URL)."),
        click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary."),
        click.option(*json_flags, "as_json", is_flag=True, help=json_help),
        API_KEY_OPTION,
    ]
    for option in reversed(options):
        func = option(func)
    return func


def read_text(text: str | None, file: str | None = None, *, file_option: bool = True) -> str:
    """TEXT, or --file (where the command has one), or stdin ('-' or absent); bytes must be UTF-8."""
    if file and text not in (None, "-"):
        raise click.UsageError("give TEXT or --file, not both")
    if file:
        data = _read_bytes(file)
    elif text not in (None, "-"):
        if any("\udc80" <= ch <= "\udcff" for ch in str(text)):  # bytes that were not UTF-8 (Python's escapes)
            raise ConfigError("the text argument is not valid UTF-8",
                              hint="convert it first, e.g. `iconv -f GBK -t UTF-8`")
        return str(text)
    elif sys.stdin is None or sys.stdin.isatty():  # a closed stdin (`<&-`) is None
        raise click.UsageError("give TEXT, --file, or pipe the text on stdin" if file_option else
                               "give TEXT or pipe it on stdin")
    else:
        data = sys.stdin.buffer.read()
    return _decoded(data, "the input")


def _decoded(data: bytes, what: str) -> str:
    """Strict UTF-8 (a DDL file read with replacement characters named a table that does not exist); a
    byte-order mark (Windows editors write one) is not part of the text."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} is not valid UTF-8 (byte {exc.start})",
                          hint="convert it first, e.g. `iconv -f GBK -t UTF-8`") from None


def _read_bytes(path: str, what: str | None = None) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what + ' ' if what else ''}{path}: {exc.strerror}",
                          hint="check the path") from None


def read_json(path: str) -> Any:
    try:
        return json.loads(_read_bytes(path).decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None


def render(result: Any, as_json: bool, line: Callable[[Any], str]) -> None:
    if as_json:
        emit_json(result.to_json() if hasattr(result, "to_json") else result)
        return
    click.echo(line(result))
    if getattr(result, "finish_reason", None) == "length":  # --json carries it; plain text looked whole
        click.echo(CUT_SHORT, err=True)


CUT_SHORT = ("warning: the answer stopped at its token limit (finish_reason \"length\"): it is cut short; ask for "
             "less, or split the input")


# --- a command from a spec -----------------------------------------------------------------------------------


def _param(spec: TaskSpec[Any, Any], item: CliInput) -> Callable[[Any], Any]:
    """The click decorator of one declared input."""
    if item.kind == "argument":
        return click.argument(item.name, required=item.required)
    if item.kind == "option":
        assert item.field is not None
        extra = {"help": item.help} if item.help is not None else {}
        return spec_option(spec.name, item.field, *item.decls, **extra)
    kwargs: dict[str, Any] = {"help": item.help}
    if item.kind in ("repeat", "pairs"):
        kwargs["multiple"] = True
    elif item.flag:
        kwargs["is_flag"] = True
    else:
        kwargs["default"] = item.default
    if item.metavar:
        kwargs["metavar"] = item.metavar
    if item.required:
        kwargs["required"] = True
    if item.show_default:
        kwargs["show_default"] = True
    if item.int_range:
        kwargs["type"] = click.IntRange(*item.int_range)
    if item.path:
        kwargs["type"] = click.Path(dir_okay=False)
    return click.option(*item.decls, item.name, **kwargs)


#: the JSON files that hold a list (``--questions``, ``--tools``)
LIST_FILES = ("questions", "tools")


def _read(item: CliInput, value: Any) -> Any:
    """What one input gives its field (None: nothing given; the field keeps its default)."""
    if item.kind == "json":
        data = read_json(value) if value else None
        if item.field in LIST_FILES and data is not None and not isinstance(data, list):
            # one object was read as a list of its keys ("questions.0: … questions.1: …")
            raise ConfigError(f"{item.decls[0]} {value} must hold a JSON list, not a {type(data).__name__}",
                              hint=item.help or "wrap the object in [ … ]")
        return data
    if item.kind == "text_file":
        return _decoded(_read_bytes(value, item.path), value) if value else None
    if item.kind == "lines":
        return _lines(read_text(None, value), value) if value else None
    if item.kind == "joined":
        return split_list(value)
    if item.kind == "pairs":
        return _pairs(value, item.decls[0])
    if item.kind == "repeat":
        return list(value)
    return value


def _pairs(values: Any, decl: str) -> dict[str, str] | None:
    """``LABEL=words`` options as a dict, keys trimmed as labels are: one without ``=`` or words, or a label given
    twice, was dropped without a word (the last of two kept)."""
    out: dict[str, str] = {}
    for given in values or ():
        key, sep, words = given.partition("=")
        if not sep or not key.strip() or not words.strip():
            raise click.UsageError(f"{decl} {given!r}: give LABEL=words (e.g. {decl} 'spam=unwanted ads')")
        if key.strip() in out:
            raise click.UsageError(f"{decl} {key.strip()!r} is given twice: give each label once")
        out[key.strip()] = words.strip()
    return out or None


def _lines(text: str, path: str) -> list[str]:
    """One item per line of the file, numbered as the file numbers them: split at line ends only (``splitlines``
    also split at form feeds and U+2028, and blank lines were dropped, so an answer's ``index`` was not the line's);
    blank lines at the end are none, a blank line among them is refused."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    blank = [str(i + 1) for i, line in enumerate(lines) if not line.strip()]
    if blank:
        raise ConfigError(f"{path}: line {', '.join(blank[:5])}{' …' if len(blank) > 5 else ''} is blank",
                          hint="give one item per line, without blank lines (an item's index is its line number - 1)")
    return lines


def gather(spec: TaskSpec[Any, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The task's arguments from the command's parameter values: files read, repeated flags joined, the
    argument (or --file, or stdin) read last."""
    assert spec.cli is not None
    args: dict[str, Any] = {}
    text: CliInput | None = None
    for item in spec.cli.inputs:
        if item.kind == "argument":
            text = item
        elif item.field is not None:
            value = _read(item, values[item.name])
            if item.convert is not None:
                value = item.convert(value, args.get(item.field))
            elif isinstance(value, list) and isinstance(args.get(item.field), list):
                value = [*args[item.field], *value]
            if value is not None:
                args[item.field] = value
    for name, value in list(args.items()):  # an empty repeated flag: the field's default (None), or []
        if value in ([], {}) and spec.args.model_fields[name].default is None:
            args[name] = None
    if text is not None and text.field is not None:
        given = values[text.name]
        args[text.field] = read_text(given, values.get("file"), file_option=text.file) if text.stdin else given
    return {spec.args.model_fields[name].alias or name: value for name, value in args.items()}


def task_command(spec: TaskSpec[Any, Any]) -> click.Command:
    """``tiankong <task>``: the spec's inputs, then --model, --url, --llama-server, --json, --api-key."""
    from .task_hooks import HOOKS, TaskRun, client_for

    cli = spec.cli
    assert cli is not None, spec.name

    def callback(**values: Any) -> None:
        run = TaskRun(spec, values)
        hook = HOOKS.get(spec.name)
        if hook is not None and hook.check is not None:
            hook.check(run)
        run.args = gather(spec, values)
        result = hook.run(run) if hook is not None and hook.run is not None else None
        if result is None:
            with client_for(run.model, run.url, run.llama_server,
                            run.args.get("decider") if cli.engine_decider else None) as client:
                result = client.task(spec.name, **run.args)
        if getattr(result, "warning", None):
            click.echo(f"warning: {result.warning}", err=True)
        if values["as_json"]:
            emit_json(spec.to_json(result))
        else:
            click.echo(cli.line(result))
        if hook is not None and hook.after is not None:
            hook.after(run, result)

    decorators: list[Callable[[Any], Any]] = []
    for item in cli.inputs:
        decorators.append(_param(spec, item))
        if item.kind == "argument" and item.file:
            decorators.append(click.option("--file", default=None, help="Read the text from this file."))
    func: Callable[..., Any] = task_options(callback, cli.json_flags, cli.json_help)
    for decorator in reversed(decorators):
        func = decorator(func)
    return click.command(spec.name, help=cli.summary)(func)


#: one command per registered task, in the registry's order
COMMANDS = [task_command(spec) for spec in SPECS.values() if spec.cli is not None]
_BY_NAME = {command.name: command for command in COMMANDS}


def __getattr__(name: str) -> click.Command:
    """``task_cmds.classify`` etc.: the commands by task name (``tiankong.cli`` loads them this way)."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cli_names(spec: TaskSpec[Any, Any]) -> dict[str, str]:
    """Task field → the command parameter that reads it, where the names differ or the field is read from a
    file, a repeated flag or the argument (every other field is the option of the same name)."""
    assert spec.cli is not None
    return {item.field: item.name for item in spec.cli.inputs
            if item.field is not None and (item.kind != "option" or item.name != item.field)}


CLI_NAMES = {spec.name: cli_names(spec) for spec in SPECS.values() if spec.cli is not None}
