"""``tiankong eval init|run|compare|report``: fixed eval sets, model A/B at temperature 0."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from . import emit_json

_compare_options = [
    click.argument("runs", nargs=-1, required=True),
    click.option("--baseline", default=None, help="Baseline model name (default: the first run)."),
    click.option("--tolerance", "tolerance_points", type=float, default=2.0, show_default=True,
                 help="Decision rule: accuracy points a smaller model may lose."),
]


def _compare_args(func: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_compare_options):
        func = option(func)
    return func


@click.group("eval")
def eval_group() -> None:
    """Eval sets: run models greedily on fixed items, compare them, report."""


@eval_group.command("init")
@click.argument("path")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init_cmd(path: str, force: bool) -> None:
    """Write a starter eval set (YAML for .yaml/.yml, else JSONL) covering the four kinds of work."""
    from ..evals import write_starter

    written = write_starter(path, force=force)
    click.echo(f"wrote {written}; next: tiankong eval run {written} --model smollm2-135m-instruct")


@eval_group.command("run")
@click.argument("eval_set", metavar="SET")
@click.option("--model", "models", multiple=True, required=True, help="Model to evaluate (repeat for several).")
@click.option("--out", "out_dir", default="eval-runs", show_default=True, help="Folder for OUT/<model>.json.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 2), default=42, show_default=True,
              help="Engine seed (-1, llama.cpp's random seed, would make the cache lie).")
@click.option("--ctx", type=int, default=4096, show_default=True, help="Engine context (total).")
@click.option("--slots", type=int, default=1, show_default=True,
              help="Parallel slots; more than 1 is faster but not bit-for-bit reproducible (docs/evals.md).")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Engine threads (default: all CPUs).")
@click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary.")
@click.option("--cache-dir", default=None, help="Result cache (default: <user cache>/tiankong/evals).")
@click.option("--retry-failed", is_flag=True, help="Run items that failed before again (else they stay failed).")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="Live progress on stderr (default: when stderr is a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the run summaries as JSON.")
def run_cmd(eval_set: str, models: tuple[str, ...], out_dir: str, seed: int, ctx: int, slots: int,
            threads: int | None, llama_server: str | None, cache_dir: str | None, retry_failed: bool,
            show_progress: bool | None, as_json: bool) -> None:
    """Run every item of SET on every --model (temperature 0, fixed seed, cached)."""
    draw = sys.stderr.isatty() if show_progress is None else show_progress
    from ..batch.progress import RichProgress
    from ..evals import EvalParams, run_eval
    from ..evals.compare import MB
    from ..evals.run import slug

    params = EvalParams(seed=seed, ctx=ctx, slots=slots, threads=threads, llama_server=llama_server,
                        cache_dir=Path(cache_dir) if cache_dir else None, retry_failed=retry_failed)
    runs = run_eval(eval_set, list(models), out_dir=out_dir, params=params,
                    log=(lambda msg: click.echo(msg, err=True)) if draw or not as_json else None,
                    progress=RichProgress if draw else None)
    if as_json:
        emit_json([{**run.summary(), "file": str(Path(out_dir) / f"{slug(run.model.name)}.json")} for run in runs])
        return
    for run in runs:
        correct = sum(r.correct for r in run.items)
        rss = f"{run.peak_rss_bytes / MB:.0f} MB" if run.peak_rss_bytes else "–"
        click.echo(f"{run.model.name}: accuracy {100 * run.accuracy:.1f} % ({correct}/{len(run.items)}), "
                   f"{run.failed} failed, {run.cached} from the cache, {run.speed.seconds_per_item:.2f} s/item, "
                   f"{run.speed.tokens_per_s:.1f} generated tokens/s, peak RSS {rss} → "
                   f"{Path(out_dir) / (slug(run.model.name) + '.json')}")
    if len(runs) > 1:
        click.echo(f"next: tiankong eval compare {out_dir} --baseline {runs[0].model.name}")


@eval_group.command("compare")
@_compare_args
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--items/--no-items", "with_items", default=False, help="--json: include every item's class.")
def compare_cmd(runs: tuple[str, ...], baseline: str | None, tolerance_points: float, as_json: bool,
                with_items: bool) -> None:
    """Compare RUNS (files or folders from `eval run`): per-item classes, per-tag accuracy, decision."""
    from ..evals.compare import compare_files, summary_json
    from ..evals.report import to_markdown

    if with_items and not as_json:
        raise click.UsageError("--items adds every item's class to --json: add --json")
    comparison = compare_files(list(runs), baseline=baseline, tolerance_points=tolerance_points)
    if as_json:
        emit_json(summary_json(comparison, with_items=with_items))
    else:
        click.echo(to_markdown(comparison))


@eval_group.command("report")
@_compare_args
@click.option("--html", "html_path", default=None, help="Write a self-contained HTML page here.")
@click.option("--md", "md_path", default=None, help="Write Markdown here.")
@click.option("--json", "as_json", is_flag=True, help="Print the written paths and the decision as JSON.")
def report_cmd(runs: tuple[str, ...], baseline: str | None, tolerance_points: float, html_path: str | None,
               md_path: str | None, as_json: bool) -> None:
    """Write the comparison of RUNS as Markdown (--md) and/or HTML (--html); without either, print Markdown."""
    from ..evals.report import report_files, to_markdown

    comparison, written = report_files(list(runs), baseline=baseline, tolerance_points=tolerance_points,
                                       html_path=html_path, md_path=md_path)
    if as_json:
        emit_json({"written": written, "choice": comparison.choice, "decision": comparison.decision})
    elif written:
        click.echo("\n".join(f"wrote {path}" for path in written))
        click.echo(comparison.decision)
    else:
        click.echo(to_markdown(comparison))
