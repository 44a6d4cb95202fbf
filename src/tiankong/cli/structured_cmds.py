"""``tiankong extract``."""

from __future__ import annotations

import json
import sys

import click

from ..errors import ConfigError
from . import emit_json
from .run_cmds import API_KEY_OPTION, _client


@click.command()
@click.argument("text", required=False)
@click.option("--schema", "schema_file", required=True, type=click.Path(dir_okay=False),
              help="JSON Schema file.")
@click.option("--instructions", default=None, help="Extra instructions for the model.")
@click.option("--strict", is_flag=True, help="Refuse schemas with keywords the grammar cannot enforce.")
@click.option("--model", default=None, help="Model (embedded engine).")
@click.option("--url", default=None, help="Use a running server (or TIANKONG_URL).")
@click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary.")
@API_KEY_OPTION
@click.option("--json", "--evidence", "evidence", is_flag=True,
              help="Print the full result: {data, attempts, usage, enforced_by_validation, minimal}.")
def extract(text: str | None, schema_file: str, instructions: str | None, strict: bool, model: str | None,
            url: str | None, llama_server: str | None, evidence: bool) -> None:
    """Extract fields from TEXT ('-' or absent: stdin) as JSON valid against --schema."""
    try:
        with open(schema_file, encoding="utf-8") as handle:
            schema = handle.read()
    except OSError as exc:
        raise ConfigError(f"cannot read schema file {schema_file}: {exc.strerror}") from None
    if text in (None, "-"):
        if sys.stdin.isatty():
            raise click.UsageError("give TEXT or pipe it on stdin")
        text = sys.stdin.read()
    with _client(model, url, llama_server) as client:
        result = client.extract_result(text, schema, instructions=instructions, strict=strict)
    if evidence:
        emit_json({"data": result.data, "attempts": result.attempts,
                   "usage": {"prompt_tokens": result.usage.prompt_tokens,
                             "completion_tokens": result.usage.completion_tokens},
                   "enforced_by_validation": result.unenforced, "minimal": result.minimal,
                   "tiankong": result.evidence()})
    else:
        click.echo(json.dumps(result.data, ensure_ascii=False))
