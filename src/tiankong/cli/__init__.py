"""The ``tiankong`` command line. Each command parses arguments, calls one library function, renders."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ..errors import TiankongError


class TiankongGroup(click.Group):
    """Turns every ``TiankongError`` into one line on stderr and exit code 1 (no traceback)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TiankongError as exc:
            click.echo(f"error: {exc.one_line()}", err=True)
            tail = getattr(exc, "log_tail", "")
            if tail and ctx.meta.get("verbose"):
                click.echo(tail, err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:  # a bug: still one line, with the way to get details
            if ctx.meta.get("verbose"):
                raise
            click.echo(f"error: internal error {type(exc).__name__}: {exc} (rerun with -v for the traceback "
                       "and please report it)", err=True)
            sys.exit(2)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


@click.group(cls=TiankongGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tiankong")
@click.option("-v", "--verbose", is_flag=True, help="Show log tails and details on errors.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """tiankong (填空): a small local model as a constrained, measured part of your pipeline."""
    ctx.meta["verbose"] = verbose


def _register() -> None:
    from . import (
        batch_cmds,
        bench_cmds,
        decider_cmds,
        engine_cmds,
        models_cmds,
        plan_cmds,
        run_cmds,
        structured_cmds,
        task_cmds,
    )
    from .eval_cmds import eval_group
    from .lora_cmds import lora
    from .rpc_cmds import rpc_worker

    main.add_command(engine_cmds.engine)
    engine_cmds.engine.add_command(rpc_worker)
    main.add_command(models_cmds.models)
    main.add_command(plan_cmds.plan)
    main.add_command(batch_cmds.batch)
    main.add_command(eval_group)
    main.add_command(bench_cmds.bench)
    main.add_command(lora)
    main.add_command(decider_cmds.tune)
    main.add_command(decider_cmds.deciders)
    for command in (run_cmds.serve, run_cmds.chat, run_cmds.run, run_cmds.doctor, structured_cmds.extract):
        main.add_command(command)
    for command in task_cmds.COMMANDS:
        main.add_command(command)


_register()
