"""``tiankong engine install|info``."""

from __future__ import annotations

import click

from ..engine import install_engine, locate_engine
from ..engine.cpu import cpu_features
from . import emit_json


@click.group()
def engine() -> None:
    """Build, locate and describe the llama-server engine."""


@engine.command()
@click.option("--rebuild", "--force", "force", is_flag=True, help="Rebuild even if a cached build exists.")
@click.option("--amx", is_flag=True,
              help="Also build with AMX, smoke-test and llama-bench it against the no-AMX build; keep the faster.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Parallel compile jobs (default: all CPUs).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def install(force: bool, amx: bool, jobs: int | None, as_json: bool) -> None:
    """Build llama-server from the pinned llama.cpp source, smoke-tested, AMX off (cached per CPU and flags).

    Rungs, first that passes the smoke test is kept: native without AMX, then portable x86-64-v3."""
    log = (lambda msg: click.echo(msg, err=True)) if as_json else click.echo
    built = install_engine(force=force, log=log, jobs=jobs, amx=amx)
    if as_json:
        emit_json(built.to_json())


@engine.command()
@click.option("--llama-server", "llama_server", type=click.Path(), default=None, help="Use this binary.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def info(llama_server: str | None, as_json: bool) -> None:
    """Show which llama-server is used, its version and how it was obtained."""
    found = locate_engine(llama_server)
    data = found.to_json()
    data["cpu_features"] = found.cpu_features or cpu_features()
    if as_json:
        emit_json(data)
        return
    click.echo(f"path:      {found.path}")
    click.echo(f"version:   {found.version} (commit {found.commit})")
    click.echo(f"obtained:  {found.source}" + (f" build in {found.build_dir}" if found.build_dir else ""))
    click.echo(f"cpu:       {' '.join(found.cpu_features or cpu_features())}")
    if found.cmake_flags:
        click.echo(f"flags:     {' '.join(found.cmake_flags)}")
    if found.rung:
        click.echo(f"rung:      {found.rung} (AMX {'on' if found.amx else 'off'})")
    smoke = found.smoke
    if smoke:
        signal = f", {smoke['signal']}" if smoke.get("signal") else ""
        click.echo(f"smoke:     {smoke.get('status')}{signal} ({smoke.get('detail')})")


def _add_rpc_worker() -> None:
    from .rpc_cmds import rpc_worker

    engine.add_command(rpc_worker)


_add_rpc_worker()
