"""``tiankong plan MODEL... [--ctx N] [--slots N] [--kv-type T] [--kv-unified] [--draft M] [--budget SIZE]``."""

from __future__ import annotations

import platform

import click
from rich.console import Console
from rich.table import Table

from .. import plan as P
from ..errors import ConfigError
from . import emit_json


def _repack_family() -> str:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i686"):
        return "x86"
    return "arm" if machine in ("aarch64", "arm64") else "none"


@click.command("plan")
@click.argument("models", nargs=-1, required=True)
@click.option("--ctx", type=int, default=4096, show_default=True, help="Total context (llama-server -c).")
@click.option("--slots", type=int, default=2, show_default=True, help="Parallel slots (llama-server -np).")
@click.option("--kv-type", type=click.Choice(P.PLAN_KV_TYPES), default="f16", show_default=True,
              help="KV-cache type (K and V).")
@click.option("--kv-unified", is_flag=True, help="One KV pool shared by all slots (llama-server --kv-unified).")
@click.option("--draft", default=None, help="Draft model for speculative decoding (name or GGUF path).")
@click.option("--ubatch", type=int, default=512, show_default=True, help="Physical batch size (llama-server -ub).")
@click.option("--batch", type=int, default=2048, show_default=True, help="Logical batch size (llama-server -b).")
@click.option("--repack", type=click.Choice(sorted(P.REPACK_TYPES)), default=None,
              help="CPU weight repacking to count [default: this machine's family; 'none' for GPU].")
@click.option("--budget", default=None, help="Memory budget (2GiB, 512MB): find the largest ctx that fits.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (an object for one model, else a list).")
def plan(models: tuple[str, ...], ctx: int, slots: int, kv_type: str, kv_unified: bool, draft: str | None,
         ubatch: int, batch: int, repack: str | None, budget: str | None, as_json: bool) -> None:
    """Memory plan: weights, KV cache, compute buffers and total for a llama-server configuration.

    Several MODELs (names or GGUF paths) give a comparison table. With --budget: for each KV type, the
    largest context (at the given --slots) that fits; if nothing fits, the smallest configuration's size.
    """
    config = P.PlanConfig(ctx=ctx, slots=slots, kv_type=kv_type, kv_unified=kv_unified, ubatch=ubatch, batch=batch,
                          repack=repack or _repack_family())
    report = P.plan_models(models, config, draft=draft, budget=budget)
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        rows = report.to_json()
        emit_json(rows[0] if len(rows) == 1 else rows)
    else:
        _render(report)
    _fail_if_nothing_fits(report)


def _render(report: P.PlanReport) -> None:
    if report.fits is not None and not any(fit.fits for fit in report.fits):
        return  # only the one-line error
    console = Console()
    console = console if console.is_terminal else Console(width=200)  # a pipe gets whole rows, not 80 columns
    console.print(_budget_table(report) if report.fits is not None else _plan_table(report))


def _plan_table(report: P.PlanReport) -> Table:
    first = report.plans[0].config
    layout = "unified" if first.kv_unified else "per slot"
    title = f"ctx {first.ctx} × {first.slots} slots ({layout}), {first.kv_type} KV, ubatch {first.n_ubatch}"
    table = Table("model", "quant", "ctx/slot", "KV/token", "weights", "KV", "compute", "overhead", "total",
                  title=title)
    for item in report.plans:
        table.add_row(item.model.name, item.model.file_type, str(item.ctx_per_slot),
                      P.format_bytes(item.target.kv_bytes_per_token), *_sizes(item))
    return table


def _budget_table(report: P.PlanReport) -> Table:
    fits = report.fits or []
    budget = P.format_bytes(fits[0].budget_bytes) if fits else "?"
    table = Table("model", "quant", "KV type", "ctx", "ctx/slot", "weights", "KV", "compute", "overhead", "total",
                  title=f"largest context within {budget}")
    for fit in fits:
        best = fit.best
        for option in fit.options:
            name = f"{option.model.name}{' (best)' if option is best else ''}"
            table.add_row(name, option.model.file_type, option.config.kv_type, str(option.config.ctx),
                          str(option.ctx_per_slot), *_sizes(option))
    return table


def _sizes(item: P.MemoryPlan) -> list[str]:
    values = (item.weights_bytes, item.kv_bytes, item.compute_bytes, item.overhead_bytes, item.total_bytes)
    return [P.format_bytes(value) for value in values]


def _fail_if_nothing_fits(report: P.PlanReport) -> None:
    failed = report.nothing_fits
    if failed:
        raise ConfigError("; ".join(fit.message for fit in failed),
                          hint="raise the budget, use a smaller quantization or a smaller --ubatch")
