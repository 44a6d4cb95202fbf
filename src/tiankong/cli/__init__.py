"""The ``tiankong`` command line. Each command parses arguments, calls one library function, renders."""

from __future__ import annotations

import importlib
import json
import re
import sys
from typing import Any

import click
from pydantic import ValidationError

from ..errors import TiankongError


class TiankongGroup(click.Group):
    """Turns every ``TiankongError`` into one line on stderr and exit code 1 (no traceback)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TiankongError as exc:
            tail = getattr(exc, "log_tail", "") or ""
            if tail and ctx.meta.get("verbose"):
                click.echo(f"error: {exc.one_line()}", err=True)
                click.echo(tail, err=True)
            elif tail.strip():  # still one line: the log's last line (the cause, most often) and how to see more
                last = tail.strip().splitlines()[-1].strip()[:200]
                click.echo(f"error: {exc.one_line()} (its log ends: {last!r}; rerun as `tiankong -v "
                           f"{ctx.invoked_subcommand or '…'} …` for the whole tail)", err=True)
            else:
                click.echo(f"error: {exc.one_line()}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:  # the reader went away (`tiankong run … | head -c 3`): stop quietly, as Unix tools do
            quiet_stdout()
            sys.exit(EXIT_BROKEN_PIPE)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except ValidationError as exc:  # an option a library settings model refuses (bench's --max-tokens 0, …)
            click.echo(f"error: {option_errors(exc)}", err=True)
            sys.exit(2)
        except Exception as exc:  # a bug: still one line, with the way to get details
            if ctx.meta.get("verbose"):
                raise
            verb = ctx.invoked_subcommand or "…"
            click.echo(f"error: internal error {type(exc).__name__}: {exc} (rerun as `tiankong -v {verb} …` for "
                       "the traceback and please report it)", err=True)
            sys.exit(2)


def option_errors(exc: ValidationError) -> str:
    """A settings model's refusal in the options' words: ``--max-tokens: Input should be greater than or equal
    to 1`` (a field ``step_time_s`` is the option ``--step-time``)."""
    said = []
    for error in exc.errors():
        # the last name: `serve` re-validates the whole config, where the first is the section (engine.ctx)
        field = next((str(part) for part in reversed(error["loc"]) if isinstance(part, str)), "value")
        option = "--" + field.removesuffix("_s").replace("_", "-")
        said.append(f"{option}: {error['msg']}")
    return "invalid option value: " + "; ".join(said) + " (see --help)"


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a Unix tool whose reader closed the pipe exits with


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush into the closed pipe says nothing."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def parse_labels(joined: str | None, repeated: tuple[str, ...] = ()) -> list[str] | None:
    """Labels as ``classify`` takes them: ``--labels a,b`` and/or ``-l a -l b`` (None: none given)."""
    names = [*repeated, *split_list(joined)]
    return names or None


#: what separates a --labels list: the comma, and the full-width comma and 顿号 Chinese input methods type
_SEPARATORS = re.compile(r"[,，、]")


def split_list(joined: str | None) -> list[str]:
    """``a,b`` (``退款，物流、故障`` too) as its stripped, non-empty items."""
    return [x.strip() for x in _SEPARATORS.split(joined or "") if x.strip()]


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def emit_table(columns: list[str], rows: list[list[str]], wrap: str | None = None) -> None:
    """The one table style of every listing verb (``models list``, ``deciders list``): a header row, names never
    cut; only the ``wrap`` column folds when the terminal is narrow (rich, imported here on first use)."""
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for index, column in enumerate(columns):
        if column == wrap:
            table.add_column(column, overflow="fold")
        else:
            widest = max([len(column), *(len(row[index]) for row in rows)])
            table.add_column(column, no_wrap=True, overflow="fold", min_width=widest)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


#: command name → (module in tiankong.cli, attribute, the short help ``tiankong --help`` lists); a command's
#: module is imported only when the command runs or shows its own help (a test holds the helps to the commands).
#: The task commands follow these: one per registered task, read from the registry's source (``help_table.py``)
FIXED: dict[str, tuple[str, str, str]] = {
    "engine": ("engine_cmds", "engine", 'Build, locate and describe the llama-server engine.'),
    "models": ("models_cmds", "models", 'The model catalog and local registry.'),
    "plan": ("plan_cmds", "plan",
        'Memory plan: weights, KV cache, compute buffers and total for a llama-server configuration.'),
    "batch": ("batch_cmds", "batch",
        'Resumable batch jobs: every input exactly once in the output, even after a crash.'),
    "dedupe": ("dedupe_cmds", "dedupe",
        "Find exact, near and semantic duplicates in --input; write clusters (or the kept ids) to --output."),
    "normalize": ("normalize_cmds", "normalize", "Normalise records to a target schema: rules first, then the model."),
    "eval": ("eval_cmds", "eval_group", 'Eval sets: run models greedily on fixed items, compare them, report.'),
    "cascade": ("cascade_cmds", "cascade",
        "Confidence cascade: measure when a small model's answer is enough and when to escalate."),
    "bench": ("bench_cmds", "bench", 'Speed and capacity benchmarks (managed engine or any OpenAI-compatible URL).'),
    "lora": ("lora_cmds", "lora", 'LoRA adapters: registry, training, per-request selection (docs/lora.md).'),
    "tune": ("decider_cmds", "tune",
        'Learn a decision from labelled examples (cross-validated; the best method is registered).'),
    "deciders": ("decider_cmds", "deciders", 'Registered deciders (made by `tiankong tune`) and the built-in ones.'),
    "serve": ("run_cmds", "serve", 'Run the gateway on 127.0.0.1:8080 in front of a managed llama-server.'),
    "chat": ("run_cmds", "chat", 'Interactive chat (empty line or /exit quits, /reset clears history).'),
    "run": ("run_cmds", "run", 'One-shot generation.'),
    "doctor": ("run_cmds", "doctor", 'Check the engine, models, CPU, memory and directories; say what to fix.'),
}
_table: dict[str, tuple[str, str, str]] = {}


def commands() -> dict[str, tuple[str, str, str]]:
    """Every command: the fixed ones, then one per registered task (``task_cmds``), in the registry's order."""
    if not _table:
        from .help_table import task_summaries

        _table.update(FIXED)
        _table.update({name: ("task_cmds", name, click.Command(name, help=summary).get_short_help_str(limit=150))
                       for name, summary in task_summaries().items() if name not in FIXED})
    return _table


def __getattr__(name: str) -> Any:
    """``COMMANDS``: the whole table (made on first use: ``tiankong serve`` never reads the registry's source)."""
    if name == "COMMANDS":
        return commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LazyGroup(TiankongGroup):
    """The top-level group: commands are loaded on use, so ``tiankong --help`` imports none of them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(commands())

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and name not in FIXED and name not in commands() and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, list(commands()), n=1, cutoff=0.6)
            ctx.fail(f"no such command {name!r}" + (f"; did you mean {close[0]}?" if close else
                                                       "; see `tiankong --help`"))
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = FIXED.get(cmd_name) or commands().get(cmd_name)
        if found is None:
            return None
        module, attr, _ = found
        command: click.Command = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, short) for name, (_, _, short) in commands().items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tiankong")
@click.option("-v", "--verbose", is_flag=True, help="Show log tails and details on errors.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """tiankong (填空): a small local model as a constrained, measured part of your pipeline."""
    ctx.meta["verbose"] = verbose
