"""``tiankong batch run|status|report``: offline batch jobs over JSONL, CSV, folders and OpenAI batch files;
``batch submit|status|fetch|cancel --url URL``: the same OpenAI batch files on a gateway's Batch API."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ..batch.job import TASKS
from . import emit_json, parse_labels
from .run_cmds import API_KEY_OPTION, cli_api_key

EXIT_ITEMS_FAILED = 3


@click.group()
def batch() -> None:
    """Resumable batch jobs: every input exactly once in the output, even after a crash."""


@batch.command("run")
@click.option("--job", "job_file", default=None, help="Job file (TOML or JSON); flags override its keys.")
@click.option("--input", "input_path", default=None, help="JSONL, CSV/TSV, a folder of text files, or an OpenAI "
              "batch input file.")
@click.option("--output", default=None, help="Output JSONL (appended to; ids already there are skipped).")
@click.option("--format", "fmt", type=click.Choice(["auto", "jsonl", "csv", "folder", "openai"]), default=None)
@click.option("--task", type=click.Choice(TASKS), default=None, help="The task each record goes through.")
@click.option("--kind", type=click.Choice(["records", "dedupe", "normalize"]), default=None,
              help="dedupe: one whole-data-set step (args: the dedupe task's); normalize: records to a schema.")
@click.option("--labels", default=None, help="classify: comma-separated labels, e.g. billing,bug,other.")
@click.option("-l", "--label", "label_items", multiple=True, help="classify: a label (repeat; or --labels a,b).")
@click.option("--decider", default=None, help="classify: answer with this tuned decider (`tiankong deciders list`).")
@click.option("--multi-label", is_flag=True, default=None, help="classify: every label with P(yes) ≥ threshold.")
@click.option("--schema", "schema_file", default=None, help="extract/tag: JSON Schema file.")
@click.option("--instructions", default=None, help="classify/extract: extra instructions.")
@click.option("--template", default=None, help="chat: prompt with {field} placeholders from the record.")
@click.option("--system", default=None, help="chat: system prompt.")
@click.option("--max-tokens", type=int, default=None, help="chat: most tokens per answer (default 256).")
@click.option("--words", type=int, default=None, help="summarize: most words (default 80).")
@click.option("--no-model", is_flag=True, default=None, help="redact: rules only (no engine calls).")
@click.option("--id-field", default=None, help="Record field holding the id (default: id; else the line number).")
@click.option("--text-field", default=None, help="Record field holding the text (default: text).")
@click.option("--model", default=None, help="Start this model as a managed engine.")
@click.option("--url", "urls", multiple=True, help="Use running server(s) (repeat for a pool).")
@click.option("--ray", "ray", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
              help="Run on a Ray cluster: HEAD:6379, auto (the one `ray start` started here), or no value: a "
                   "one-machine cluster; every node starts --model (the [ray] extra).")
@click.option("--slots", type=int, default=None, help="Managed engine: parallel slots (default 4).")
@click.option("--ctx", type=int, default=None, help="Managed engine: total context (default 2048 × slots).")
@click.option("--llama-server", "llama_server", default=None, help="Managed engine: this llama-server binary.")
@click.option("--concurrency", type=int, default=None, help="Items in flight (default: the engines' slots).")
@click.option("--engine-wait", "engine_wait_s", type=float, default=None,
              help="Seconds to wait for an unreachable engine before stopping (default 300).")
@click.option("--dedupe", is_flag=True, default=None, help="Keep the first of duplicate ids instead of refusing.")
@click.option("--retry-failed", is_flag=True, default=None, help="Run the ids in OUTPUT.errors.jsonl again.")
@click.option("--keep-order", is_flag=True, default=None,
              help="OUTPUT in input order when the run finishes (default: completion order).")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="Live progress bar on stderr (default: when stderr is a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def run_cmd(job_file: str | None, input_path: str | None, output: str | None, fmt: str | None, labels: str | None,
            label_items: tuple[str, ...], schema_file: str | None, no_model: bool | None, urls: tuple[str, ...],
            show_progress: bool | None, as_json: bool, **keys: Any) -> None:
    """Run (or resume) a batch job; prints the report (also written to OUTPUT.report.json)."""
    from ..batch import build_job, read_schema, run
    from ..batch.progress import RichProgress

    keys.update(input=input_path, output=output, format=fmt, url=list(urls) or None,
                labels=parse_labels(labels, label_items),
                schema=read_schema(schema_file) if schema_file else None,
                use_model=False if no_model else None)
    job = build_job(job_file, **keys)
    draw = sys.stderr.isatty() if show_progress is None else show_progress
    report = run(job, progress=RichProgress() if draw else None)
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        click.echo(report.summary())
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    if report.failed:
        first = _first_error(report.errors_file)  # a GBK file failed every row, the iconv hint only in the file
        click.echo(f"error: {report.failed} item(s) failed, see {report.errors_file} "
                   f"(fix the cause and re-run with --retry-failed){first}", err=True)
        sys.exit(EXIT_ITEMS_FAILED)


def _first_error(path: str | None) -> str:
    """"; the first: <its message>" from the error file, or "" when it cannot be read."""
    try:
        with open(path or "", encoding="utf-8") as handle:
            error = json.loads(handle.readline()).get("error")
    except (OSError, ValueError, AttributeError):
        return ""
    message = error.get("message") if isinstance(error, dict) else error
    return f"; the first: {' '.join(str(message).split())[:200]}" if message else ""


@batch.command("status")
@click.argument("target", metavar="OUTPUT|BATCH_ID")
@click.option("--input", "input_path", default=None, help="Count against this input (default: the job's).")
@click.option("--url", default=None, help="A gateway: TARGET is the id of a batch submitted there.")
@click.option("--wait", is_flag=True, help="With --url: poll until the batch is finished.")
@click.option("--json", "as_json", is_flag=True)
@API_KEY_OPTION
def status_cmd(target: str, input_path: str | None, url: str | None, wait: bool, as_json: bool) -> None:
    """Done / failed / pending ids of OUTPUT against its input (safe while a run is going on); with --url, the
    status of a batch on a gateway."""
    from ..batch import status
    from ..batch.remote import BatchService

    if url is not None:
        with BatchService(url, cli_api_key()) as service:
            batch = service.wait(target, on_poll=None if as_json else _echo_progress) if wait else \
                service.status(target)
        if as_json:
            emit_json(batch)
        elif not wait:
            _echo_progress(batch)
        return
    if wait:
        raise click.UsageError("--wait needs --url (a local run's status is already current)")
    result = status(target, input_path)
    if as_json:
        emit_json(result.model_dump(mode="json"))
    else:
        click.echo(result.summary())


def _echo_progress(batch: dict[str, Any]) -> None:
    counts = batch.get("request_counts") or {}
    click.echo(f"{batch['id']}: {batch['status']}, {counts.get('completed', 0)} done, {counts.get('failed', 0)} "
               f"failed of {counts.get('total', 0)}")


@batch.command("submit")
@click.option("--input", "input_path", required=True, help="OpenAI batch lines {custom_id, method, url, body}.")
@click.option("--url", required=True, help="The gateway (or any OpenAI-compatible Batch API).")
@click.option("--endpoint", default=None, help="The batch's endpoint (default: the first line's url).")
@click.option("--window", default="24h", show_default=True, help="completion_window.")
@click.option("--metadata", "metadata_items", multiple=True, metavar="KEY=VALUE", help="Batch metadata (repeat).")
@click.option("--wait", is_flag=True, help="Poll until the batch is finished.")
@click.option("--json", "as_json", is_flag=True)
@API_KEY_OPTION
def submit_cmd(input_path: str, url: str, endpoint: str | None, window: str, metadata_items: tuple[str, ...],
               wait: bool, as_json: bool) -> None:
    """Upload INPUT to a gateway and start a batch on it; prints the batch id (fetch the results with
    `tiankong batch fetch ID --url URL --output OUT.jsonl`)."""
    from ..batch.remote import BatchService

    metadata = dict(_pair(item) for item in metadata_items) or None
    with BatchService(url, cli_api_key()) as service:
        batch = service.submit(input_path, endpoint=endpoint, window=window, metadata=metadata)
        if wait:
            batch = service.wait(batch["id"], on_poll=None if as_json else _echo_progress)
    if as_json:
        emit_json(batch)
    elif not wait:
        click.echo(batch["id"])


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--metadata")
    return key, value


@batch.command("fetch")
@click.argument("batch_id")
@click.option("--url", required=True, help="The gateway the batch was submitted to.")
@click.option("--output", required=True, help="Where the output lines go.")
@click.option("--errors", default=None, help="Where the error lines go (default: OUTPUT.errors.jsonl).")
@click.option("--json", "as_json", is_flag=True)
@API_KEY_OPTION
def fetch_cmd(batch_id: str, url: str, output: str, errors: str | None, as_json: bool) -> None:
    """Download a finished batch's output and error files."""
    from ..batch.remote import BatchService

    with BatchService(url, cli_api_key()) as service:
        written = service.fetch(batch_id, output, errors)
    if as_json:
        emit_json(written)
    else:
        counts = written.get("request_counts") or {}
        errors_part = f", {counts.get('failed', 0)} errors → {written['error_file']}" \
            if written.get("error_file") else ""
        removed = f" (removed {written['removed']}: an earlier fetch's errors)" if written.get("removed") else ""
        click.echo(f"{batch_id} ({written['status']}): {counts.get('completed', 0)} lines → "
                   f"{written.get('output_file')}{errors_part}{removed}")


@batch.command("cancel")
@click.argument("batch_id")
@click.option("--url", required=True, help="The gateway the batch was submitted to.")
@click.option("--json", "as_json", is_flag=True)
@API_KEY_OPTION
def cancel_cmd(batch_id: str, url: str, as_json: bool) -> None:
    """Cancel a batch on a gateway (the lines already answered stay in its output file)."""
    from ..batch.remote import BatchService

    with BatchService(url, cli_api_key()) as service:
        batch = service.cancel(batch_id)
    if as_json:
        emit_json(batch)
    else:
        _echo_progress(batch)


@batch.command("report")
@click.argument("output")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (the default: it is JSON).")
def report_cmd(output: str, as_json: bool) -> None:
    """Print the JSON report of the last finished run on OUTPUT."""
    from ..batch import read_report

    emit_json(read_report(output))
