"""The command-line part of a ``TaskSpec``, as plain data: how each input is read (the argument with stdin, a
file, a repeated flag, an option made from the argument's field) and how an answer is rendered as a line.

``tiankong.cli.task_cmds`` turns it into a click command; the library itself never imports click. Every input
names the task field it feeds (``field``) or none (a CLI-only value, e.g. route's ``--upstream-url``, handed to
the command's hook in ``cli/task_hooks.py``). Inputs are listed in the order ``--help`` shows them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["argument", "option", "json", "text_file", "lines", "repeat", "joined", "pairs", "cli"]
#: (the value read, the field's value so far) → the field's new value
Convert = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class CliInput:
    """One parameter of a task command.

    * ``argument`` — the positional NAME (``decls[0]``); absent or ``-``: stdin (``stdin``); ``file``: a ``--file``
      option reads it from a file instead;
    * ``option`` — an option made from the field (type, bounds, choices, default and help from the spec);
    * ``json`` / ``text_file`` / ``lines`` — an option naming a file: its JSON, its text, its non-empty lines
      (``path``: what the file is, e.g. "schema file" — the option takes a file, not a directory, and an unreadable
      one is named so in the error);
    * ``repeat`` — a repeatable option, a list; ``joined`` — comma-separated values; ``pairs`` — ``KEY=TEXT``;
    * ``cli`` — a CLI-only option (no field), handed to the command's hook.
    """

    kind: Kind
    field: str | None
    decls: tuple[str, ...] = ()
    dest: str | None = None  # the click parameter's name (default: the field)
    help: str | None = None  # default: the field's description
    required: bool = False
    stdin: bool = True
    file: bool = False
    metavar: str | None = None
    flag: bool = False
    default: Any = None
    show_default: bool = False
    int_range: tuple[int, int] | None = None
    convert: Convert | None = None
    path: str | None = None

    @property
    def name(self) -> str:
        """The click parameter's name."""
        return self.dest or self.field or self.decls[0]


def argument(name: str, field: str | None = None, *, required: bool = False, stdin: bool = True,
             file: bool = False) -> CliInput:
    return CliInput("argument", field or name, (name,), required=required, stdin=stdin, file=file)


def option(field: str, *decls: str, help: str | None = None, convert: Convert | None = None,
           dest: str | None = None, show_default: bool = False) -> CliInput:
    """The spec's own option for ``field`` (``cli/spec_options.py``)."""
    return CliInput("option", field, decls, help=help, convert=convert, dest=dest, show_default=show_default)


def from_file(kind: Kind, field: str, decl: str, dest: str, help: str, *, required: bool = False) -> CliInput:
    return CliInput(kind, field, (decl,), dest=dest, help=help, required=required)


def repeat(field: str, *decls: str, dest: str | None = None, help: str, metavar: str | None = None,
           convert: Convert | None = None) -> CliInput:
    return CliInput("repeat", field, decls, dest=dest, help=help, metavar=metavar, convert=convert)


def cli_only(*decls: str, dest: str, help: str, flag: bool = False, default: Any = None,
             show_default: bool = False, int_range: tuple[int, int] | None = None) -> CliInput:
    return CliInput("cli", None, decls, dest=dest, help=help, flag=flag, default=default,
                    show_default=show_default, int_range=int_range)


@dataclass(frozen=True)
class CliPart:
    """A task's command: its help (the first sentence is its row in ``tiankong --help``; a string literal, read
    from this source by ``tiankong --help`` without importing the registry), its inputs, and its answer as text
    (``--json`` prints ``spec.to_json`` instead)."""

    summary: str
    inputs: tuple[CliInput, ...]
    line: Callable[[Any], str]
    #: the engine is started with what the ``decider`` argument reads (its model, embeddings, adapter)
    engine_decider: bool = False
    #: the flag(s) that print ``spec.to_json`` and their help
    json_flags: tuple[str, ...] = ("--json",)
    json_help: str = "Print the full result as JSON."
    extra: dict[str, Any] = field(default_factory=dict)


def text_cli(summary: str, line: Callable[[Any], str], *options: CliInput, name: str = "text",
             file: bool = True) -> CliPart:
    """The common shape: TEXT (or --file, or stdin), then the given options."""
    return CliPart(summary, (argument(name, file=file), *options), line)


# --- how the answers of the shipped tasks read as text -------------------------------------------------------


def scores(found: dict[str, float]) -> str:
    return "  ".join(f"{label}={p:.3f}" for label, p in found.items())


def classify_line(r: Any) -> str:
    return f"{','.join(r.labels) or '(abstain)'}\t{scores(r.scores)}"


def route_line(r: Any) -> str:
    line = f"{r.route}\t{r.target}\t{'escalate' if r.escalated else 'local'}\t{r.confidence:.3f}\t{r.reason}"
    answer = getattr(r, "answer", None)  # the upstream's answer (--upstream-url): it was only in --json
    return f"{line}\n{answer}" if answer else line


def rewrite_line(r: Any) -> str:
    return "\n".join([*r.queries, *([r.hypothetical] if r.hypothetical else [])])


def rerank_line(r: Any) -> str:
    return "\n".join(f"{x.score:.3f}\t{x.index}\t{x.text[:80]}" for x in r.results)


def guard_line(r: Any) -> str:
    return f"{r.verdict}\t{r.score:.3f}\t{'; '.join(r.reasons)}"


def points_line(r: Any) -> str:
    return "\n".join(f"- {p}" for p in r.points)


def json_line(data: Any) -> str:
    """JSON as the CLI prints it (indented, UTF-8 as is)."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


def answer_line(answer: Any) -> str:
    if answer.type == "extract":
        return f"{answer.id}\t{json.dumps(answer.data, ensure_ascii=False)}"
    extra = f"\tP(yes)={answer.probability:.3f}" if answer.probability is not None else \
        f"\tscore={answer.score:.2f}" if answer.score is not None else ""
    return f"{answer.id}\t{answer.label}{extra}\t{scores(answer.scores or {})}"


def calls_line(result: Any) -> str:
    if not result.calls:
        return str(result.content)
    return "\n".join(f"{c.name}\t{json.dumps(c.arguments, ensure_ascii=False)}" for c in result.calls)


def sql_line(result: Any) -> str:
    lines = [result.sql]
    for row in result.rows or []:
        lines.append("\t".join("NULL" if v is None else str(v) for v in row))
    return "\n".join(lines)


def prepend(value: Any, prior: Any) -> list[Any]:
    """A repeated flag's values before those of the field's earlier input (``-l a`` before ``--labels b,c``)."""
    return [*value, *(prior or [])]


def yes_no_questions(value: Any, prior: Any) -> list[dict[str, Any]]:
    """``--yes-no Q`` (repeated) after the questions file's questions, with the first ids ``q1``, ``q2``, … that
    the file does not use (numbered on from the file's count, one of them could be an id the file gave: "the id
    'q2' is used twice", an id the user never wrote)."""
    so_far = list(prior or [])
    taken = {str(q.get("id")) for q in so_far if isinstance(q, dict)}
    ids = (f"q{n}" for n in range(1, len(so_far) + len(value) + 2) if f"q{n}" not in taken)
    return [*so_far, *({"id": next(ids), "type": "yes_no", "question": q} for q in value)]


def tool_choice(value: Any, prior: Any) -> Any:
    """``--tool-choice NAME``: auto, none, required, or the one function to call."""
    return value if value in ("auto", "none", "required") else {"type": "function", "function": {"name": value}}
