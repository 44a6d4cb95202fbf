"""``tiankong batch run|status|report``: offline batch jobs over JSONL, CSV, folders and OpenAI batch files."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..batch import build_job, read_report, read_schema, run, status
from ..batch.job import TASKS
from ..batch.progress import RichProgress
from . import emit_json

EXIT_ITEMS_FAILED = 3


def parse_labels(joined: str | None, repeated: tuple[str, ...] = ()) -> list[str] | None:
    """Labels as ``classify`` takes them: ``--labels a,b`` and/or ``-l a -l b`` (None: none given)."""
    names = [*repeated, *(x.strip() for x in (joined or "").split(",") if x.strip())]
    return names or None


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
@click.option("--slots", type=int, default=None, help="Managed engine: parallel slots (default 4).")
@click.option("--ctx", type=int, default=None, help="Managed engine: total context (default 2048 × slots).")
@click.option("--llama-server", "llama_server", default=None, help="Managed engine: this llama-server binary.")
@click.option("--concurrency", type=int, default=None, help="Items in flight (default: the engines' slots).")
@click.option("--engine-wait", "engine_wait_s", type=float, default=None,
              help="Seconds to wait for an unreachable engine before stopping (default 300).")
@click.option("--dedupe", is_flag=True, default=None, help="Keep the first of duplicate ids instead of refusing.")
@click.option("--retry-failed", is_flag=True, default=None, help="Run the ids in OUTPUT.errors.jsonl again.")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="Live progress bar on stderr (default: when stderr is a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def run_cmd(job_file: str | None, input_path: str | None, output: str | None, fmt: str | None, labels: str | None,
            label_items: tuple[str, ...], schema_file: str | None, no_model: bool | None, urls: tuple[str, ...],
            show_progress: bool | None, as_json: bool, **keys: Any) -> None:
    """Run (or resume) a batch job; prints the report (also written to OUTPUT.report.json)."""
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
    if report.failed:
        click.echo(f"error: {report.failed} item(s) failed, see {report.errors_file} "
                   "(fix the cause and re-run with --retry-failed)", err=True)
        sys.exit(EXIT_ITEMS_FAILED)


@batch.command("status")
@click.argument("output")
@click.option("--input", "input_path", default=None, help="Count against this input (default: the job's).")
@click.option("--json", "as_json", is_flag=True)
def status_cmd(output: str, input_path: str | None, as_json: bool) -> None:
    """Done / failed / pending ids of OUTPUT against its input (safe while a run is going on)."""
    result = status(output, input_path)
    if as_json:
        emit_json(result.model_dump(mode="json"))
    else:
        click.echo(result.summary())


@batch.command("report")
@click.argument("output")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (the default: it is JSON).")
def report_cmd(output: str, as_json: bool) -> None:
    """Print the JSON report of the last finished run on OUTPUT."""
    emit_json(read_report(output))
