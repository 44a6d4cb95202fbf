"""``tiankong normalize``: records of a JSONL/CSV file brought to a target schema (``tiankong.normalize``)."""

from __future__ import annotations

import click

from . import emit_json
from .run_cmds import API_KEY_OPTION


@click.command()
@click.option("--input", "input_path", required=True, help="JSONL (one object per line) or .csv with a header.")
@click.option("--output", required=True, help="One {record, changes, flags, valid, errors} line per input record.")
@click.option("--schema", "schema_path", required=True,
              help="Target JSON Schema; fields say their kind with x-normalize (date, datetime, time, phone, amount, "
              "unit, address, name) or format (date, date-time, time).")
@click.option("--region", default=None, help="Default phone region for numbers without a country code (e.g. CN).")
@click.option("--currency", default=None, help="Default ISO 4217 currency for amounts that name none (e.g. USD).")
@click.option("--dayfirst", is_flag=True, help="Read 03/05/2021 as 3 May (default: 5 March).")
@click.option("--decimal-comma", is_flag=True,
              help="Read 1,234 and 1.234 as a decimal comma would (1.234 and 1234); without it a comma before "
                   "three digits is a thousands separator (1,5 and 1.234,56 have one reading either way).")
@click.option("--rules-only", is_flag=True, help="No model: fields no rule resolves are left as they were, flagged.")
@click.option("--model", default=None, help="Model for the fields no rule resolves (embedded engine).")
@click.option("--url", default=None, help="Use a running server for them instead (or TIANKONG_URL).")
@click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary.")
@API_KEY_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def normalize(input_path: str, output: str, schema_path: str, region: str | None, currency: str | None,
              dayfirst: bool, decimal_comma: bool, rules_only: bool, model: str | None, url: str | None,
              llama_server: str | None, as_json: bool) -> None:
    """Normalise records to a target schema: rules first, then the model."""
    from ..normalize import NormalizeOptions, normalize_file, read_schema

    if rules_only and (model or url or llama_server):
        raise click.UsageError("--rules-only uses no model: leave out --model, --url and --llama-server")
    read_schema(schema_path)  # a bad schema is an error before any engine starts
    options = NormalizeOptions(region=region, currency=currency, dayfirst=dayfirst, decimal_comma=decimal_comma,
                               mode="rules" if rules_only else "both")
    if rules_only:
        report = normalize_file(input_path, output, schema_path, options=options)
    else:
        from .run_cmds import _client

        with _client(model, url, llama_server) as client:
            report = normalize_file(input_path, output, schema_path, options=options, extract=client.extract)
    if as_json:
        emit_json(report)
        return
    model_line = report["model"]
    click.echo(f"{report['records']} records: {report['changed']} fields changed, {report['flagged']} flagged, "
               f"{report['invalid']} records invalid; written to {output}")
    for by, count in report["changed_by"].items():
        click.echo(f"  {by}: {count}")
    if model_line["calls"]:
        click.echo(f"  model: {model_line['calls']} asked, {model_line['accepted']} kept, {model_line['refused']} "
                   "refused (not derivable from the input or not canonical)")
