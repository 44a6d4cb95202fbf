"""Grammar verbs over declared structures: ``call`` (tools) and ``sql`` (a database schema).

Each parses its arguments, calls the ``Client`` method of the same name and renders the result (``--json``: the
same JSON the gateway's ``/v1/tasks/<task>`` returns).
"""

from __future__ import annotations

import json
from typing import Any

import click

from ..errors import ConfigError
from .spec_options import spec_option
from .task_cmds import _read_bytes, client_for, read_json, read_text, render, task_options


@click.command()
@click.argument("text", required=False)
@click.option("--tools", "tools_file", required=True,
              help="JSON file: OpenAI tools [{type: function, function: {name, description, parameters}}, …].")
@click.option("--tool-choice", "tool_choice", default="auto", show_default=True,
              help="auto, none, required, or the name of the one function to call.")
@spec_option("call", "parallel_tool_calls", "--parallel-tool-calls/--one-call")
@task_options
def call(text: str | None, tools_file: str, tool_choice: str, parallel_tool_calls: bool, model: str | None,
         url: str | None, llama_server: str | None, as_json: bool) -> None:
    """Validated tool calls for TEXT (or a reply in words), with the decision's probabilities."""
    tools = read_json(tools_file)
    choice: Any = tool_choice if tool_choice in ("auto", "none", "required") else \
        {"type": "function", "function": {"name": tool_choice}}
    body = read_text(text)
    with client_for(model, url, llama_server) as client:
        result = client.call(body, tools, tool_choice=choice, parallel_tool_calls=parallel_tool_calls)
    render(result, as_json, _calls_lines)


def _calls_lines(result: Any) -> str:
    if not result.calls:
        return str(result.content)
    return "\n".join(f"{c.name}\t{json.dumps(c.arguments, ensure_ascii=False)}" for c in result.calls)


@click.command()
@click.argument("question")
@click.option("--db", default=None, help="A SQLite file (opened read-only): its schema, and where --execute runs.")
@click.option("--ddl", "ddl_file", default=None, help="A file of CREATE TABLE statements (the schema alone).")
@spec_option("sql", "dialect", "--dialect")
@click.option("--execute", is_flag=True, help="Run the query on --db (read-only) and print the rows.")
@click.option("--max-rows", default=100, show_default=True, type=click.IntRange(1, 1000),
              help="With --execute: most rows printed.")
@task_options
def sql(question: str, db: str | None, ddl_file: str | None, dialect: str, execute: bool, max_rows: int,
        model: str | None, url: str | None, llama_server: str | None, as_json: bool) -> None:
    """One read-only SELECT answering QUESTION; only the schema's tables and columns can be written."""
    if (db is None) == (ddl_file is None):
        raise ConfigError("give the database schema once: --db FILE (SQLite) or --ddl FILE (CREATE TABLE text)")
    schema = _read_bytes(ddl_file).decode("utf-8", "replace") if ddl_file else None
    with client_for(model, url, llama_server) as client:
        result = client.sql(question, schema, db=db, dialect=dialect, execute=execute, max_rows=max_rows)
    render(result, as_json, _sql_lines)


def _sql_lines(result: Any) -> str:
    lines = [result.sql]
    for row in result.rows or []:
        lines.append("\t".join("NULL" if v is None else str(v) for v in row))
    return "\n".join(lines)


COMMANDS = [call, sql]
#: task arguments these commands read under another name (``task_cmds.CLI_NAMES``' twin; a test holds both)
CLI_NAMES = {"call": {"text": "text", "tools": "tools_file", "tool_choice": "tool_choice"},
             "sql": {"question": "question", "schema_": "ddl_file"}}
