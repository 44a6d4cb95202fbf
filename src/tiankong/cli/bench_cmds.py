"""``tiankong bench speed|ladder|spec``: speed sweep, concurrency ladder (CSV, JSON, PNG, HTML into --out) and the
speculative-decoding A/B (JSON, CSV)."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .. import bench as B
from ..bench.common import parse_ints
from ..bench.output import dump
from ..bench.spec import DEFAULT_NGRAM as SPEC_NGRAM
from ..bench.spec import SpecBenchConfig, spec_bench
from . import emit_json

DEFAULT_OUT = "tiankong-bench"


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=200)


def _progress(line: str) -> None:
    click.echo(line, err=True)


def _num(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None or value != value else f"{value * scale:.{digits}f}"


@click.group()
def bench() -> None:
    """Speed and capacity benchmarks (managed engine or any OpenAI-compatible URL)."""


@bench.command("speed")
@click.option("--model", default=None, help="Start this installed model as a managed engine (1 slot).")
@click.option("--url", default=None, help="Measure a running llama-server instead (threads/ctx as it runs).")
@click.option("--prompt-lengths", default="128,512", show_default=True, help="Prompt lengths in tokens.")
@click.option("--threads", default=None, help="Thread counts to sweep, e.g. 1,2 [default: all CPUs].")
@click.option("--ctx", default=None, help="Context sizes to sweep, e.g. 2048,8192 [default: 2048].")
@click.option("--repeats", type=int, default=3, show_default=True, help="Runs per cell (the median is reported).")
@click.option("--gen-tokens", type=int, default=32, show_default=True, help="Tokens generated per run.")
@click.option("--llama-bench", "llama_bench", is_flag=True, help="Also run llama-bench (engine without HTTP).")
@click.option("--llama-server", default=None, help="Managed engine: this llama-server binary.")
@click.option("--api-key", envvar="TIANKONG_API_KEY", default=None, help="Bearer key for --url.")
@click.option("--out", default=DEFAULT_OUT, show_default=True, help="Folder for speed.{json,csv,png,html}.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def speed_cmd(model: str | None, url: str | None, prompt_lengths: str, threads: str | None, ctx: str | None,
              repeats: int, gen_tokens: int, llama_bench: bool, llama_server: str | None, api_key: str | None,
              out: str, as_json: bool) -> None:
    """Prompt-processing and generation tokens/s and time to first token vs prompt length, threads, ctx."""
    config = B.SpeedConfig(
        model=model, url=url, prompt_lengths=parse_ints(prompt_lengths, "--prompt-lengths"),
        threads=parse_ints(threads, "--threads") if threads else None,
        ctx=parse_ints(ctx, "--ctx") if ctx else None, repeats=repeats, gen_tokens=gen_tokens,
        llama_bench=llama_bench, llama_server=llama_server, api_key=api_key)
    report = B.speed_bench(config, out, progress=_progress)
    if as_json:
        emit_json(dump(report))
        return
    table = Table("source", "threads", "ctx", "prompt", "gen", "runs", "prompt tok/s", "gen tok/s", "TTFT ms",
                  title=f"bench speed: {report.model} ({report.duration_s:.0f} s)")
    for row in report.rows:
        table.add_row(row.source, str(row.threads or "-"), str(row.ctx or "-"), str(row.prompt_tokens),
                      str(row.gen_tokens), str(row.runs), _num(row.pp_tok_s), _num(row.tg_tok_s),
                      _num(row.ttft_s, 1000, 0))
    console = _console()
    console.print(table)
    console.print(f"files: {', '.join(report.files)}")


@bench.command("ladder")
@click.option("--model", default=None, help="Start this installed model as a managed engine.")
@click.option("--url", default=None, help="Measure a running OpenAI-compatible server instead.")
@click.option("--slots", type=int, default=8, show_default=True, help="Managed engine: parallel slots (-np).")
@click.option("--slot-ctx", type=int, default=1024, show_default=True, help="Managed engine: context per slot.")
@click.option("--threads", type=int, default=None, help="Managed engine: threads [default: all CPUs].")
@click.option("--levels", default="1,2,4,8,16,32", show_default=True, help="Concurrency levels to climb.")
@click.option("--requests-per-level", type=int, default=None,
              help="Requests per level (at least the level) [default: max(8, 2 × level)].")
@click.option("--max-tokens", type=int, default=64, show_default=True, help="Tokens generated per request.")
@click.option("--step-time", "step_time_s", type=float, default=120.0, show_default=True,
              help="Seconds per level after which no new request starts.")
@click.option("--llama-server", default=None, help="Managed engine: this llama-server binary.")
@click.option("--api-key", envvar="TIANKONG_API_KEY", default=None, help="Bearer key for --url.")
@click.option("--out", default=DEFAULT_OUT, show_default=True, help="Folder for ladder.{json,csv,png,html}.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def ladder_cmd(model: str | None, url: str | None, slots: int, slot_ctx: int, threads: int | None, levels: str,
               requests_per_level: int | None, max_tokens: int, step_time_s: float, llama_server: str | None,
               api_key: str | None, out: str, as_json: bool) -> None:
    """Throughput and latency per concurrency level; the knee and a recommended concurrency cap (~70 %)."""
    config = B.LadderConfig(
        model=model, url=url, slots=slots, slot_ctx=slot_ctx, threads=threads, levels=parse_ints(levels, "--levels"),
        requests_per_level=requests_per_level, max_tokens=max_tokens, step_time_s=step_time_s,
        llama_server=llama_server, api_key=api_key)
    report = B.ladder_bench(config, out, progress=_progress)
    if as_json:
        emit_json(dump(report))
        return
    table = Table("conc", "sent", "ok", "err", "req/s", "tok/s", "TTFT p50", "TTFT p99", "lat p50", "lat p99",
                  title=f"bench ladder: {report.model} (slots {report.slots or '?'}, {report.duration_s:.0f} s)")
    for s in report.steps:
        table.add_row(str(s.concurrency), str(s.requests), str(s.completed), str(s.errors), _num(s.req_per_s, 1, 2),
                      _num(s.tok_per_s), _num(s.ttft_p50_s, 1, 2), _num(s.ttft_p99_s, 1, 2),
                      _num(s.latency_p50_s, 1, 2), _num(s.latency_p99_s, 1, 2))
    console = _console()
    console.print(table)
    knee = report.knee
    if knee is not None:
        head = f"knee at concurrency {knee.concurrency}" if knee.found else "no knee found"
        console.print(f"{head}; recommended concurrency cap: {knee.recommended} ({knee.reason})", highlight=False)
    console.print(f"files: {', '.join(report.files)}")


@bench.command("spec")
@click.option("--target", required=True, help="Installed model (or .gguf path) to speed up.")
@click.option("--draft", default=None, help="Draft model with the same tokenizer (installed name or .gguf path).")
@click.option("--n-max", "n_max", default=None, help="Draft lengths (--spec-draft-n-max) [default: 4,8,16].")
@click.option("--ngram", is_flag=True, help="Also try the n-gram modes (no draft model needed).")
@click.option("--ngram-types", default=None, help=f"N-gram modes for --ngram [default: {','.join(SPEC_NGRAM)}].")
@click.option("--prompts", "prompts_file", default=None,
              help="File with one prompt per line (or JSONL with 'prompt') [default: 3 built-in prompts].")
@click.option("--gen-tokens", type=int, default=128, show_default=True, help="Tokens generated per prompt.")
@click.option("--repeats", type=int, default=1, show_default=True, help="Run the whole sequence this often.")
@click.option("--threads", type=int, default=None, help="Threads [default: all CPUs].")
@click.option("--ctx", type=int, default=4096, show_default=True, help="Context size (1 slot).")
@click.option("--llama-server", default=None, help="This llama-server binary.")
@click.option("--out", default=DEFAULT_OUT, show_default=True, help="Folder for spec.{json,csv}.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def spec_cmd(target: str, draft: str | None, n_max: str, ngram: bool, ngram_types: str, prompts_file: str | None,
             gen_tokens: int, repeats: int, threads: int | None, ctx: int, llama_server: str | None, out: str,
             as_json: bool) -> None:
    """Speculative decoding A/B: speedup and acceptance with and without a draft (and n-gram modes)."""
    given: dict[str, Any] = {}  # only what was typed: a list option given without the mode it shapes is refused
    if n_max is not None:
        given["n_max"] = parse_ints(n_max, "--n-max")
    if ngram_types is not None:
        given["ngram_types"] = [t.strip() for t in ngram_types.split(",") if t.strip()]
    config = SpecBenchConfig(target=target, draft=draft, ngram=ngram, prompts_file=prompts_file,
                             gen_tokens=gen_tokens, repeats=repeats, threads=threads, ctx=ctx,
                             llama_server=llama_server, **given)
    report = spec_bench(config, out, progress=_progress)
    if as_json:
        emit_json(report.model_dump(mode="json"))
        return
    table = Table("configuration", "tok/s", "speedup", "decode tok/s", "drafted", "accepted", "acceptance",
                  title=f"bench spec: {report.target} (draft {report.draft or '-'}, {report.threads} threads, "
                        f"{report.duration_s:.0f} s)")
    for row in report.rows:
        table.add_row(row.name, _num(row.tok_s), _num(row.speedup, 1, 2), _num(row.decode_tok_s), str(row.drafted),
                      str(row.accepted), _num(row.acceptance, 100, 0) + ("%" if row.acceptance is not None else ""))
    console = _console()
    console.print(table)
    console.print(f"auto mode would decide: {report.decision}", highlight=False)
    console.print(f"files: {', '.join(report.files)}")
