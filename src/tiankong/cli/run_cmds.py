"""``tiankong serve | chat | run | doctor``."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from .. import paths
from ..errors import ConfigError, InputTooLong
from ..models import DEFAULT_MODEL
from . import emit_json

if TYPE_CHECKING:  # the client, the gateway and the doctor are imported by the commands that use them
    from ..api import Client


@click.command()
@click.option("--model", default=None, help=f"Model name (default: TIANKONG_MODEL, else {DEFAULT_MODEL}).")
@click.option("--host", default=None, help="Bind address (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Gateway port (default 8080).")
@click.option("--slots", type=int, default=None, help="Parallel slots in the engine.")
@click.option("--ctx", type=int, default=None, help="Total context (split evenly between slots).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="TOML config file (default: TIANKONG_CONFIG, else config.toml in the user config dir, if there).")
@click.option("--api-key", envvar="TIANKONG_API_KEY", default=None, help="Require this key (env TIANKONG_API_KEY).")
@click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary.")
@click.option("--embeddings", is_flag=True, default=None,
              help="Turn embeddings on (/v1/embeddings and deciders that read embeddings).")
def serve(model: str | None, host: str | None, port: int | None, slots: int | None, ctx: int | None,
          config_file: str | None, api_key: str | None, llama_server: str | None, embeddings: bool | None) -> None:
    """Run the gateway on 127.0.0.1:8080 in front of a managed llama-server."""
    # TIANKONG_CONFIG must name a file that is there (a typo ran on the defaults); the user config dir's
    # config.toml is read when there is one (errors name the file)
    if config_file is None and (os.environ.get("TIANKONG_CONFIG") or paths.config_file().is_file()):
        config_file = str(paths.config_file())
    from ..config import check_api_key, check_keys_read, load_config
    from ..gateway import serve as serve_gateway

    config = load_config(config_file, check_read=False)  # checked once the flags are on it (--embeddings)
    overrides = {"model": paths.default_model(model), "slots": slots, "ctx": ctx, "llama_server": llama_server,
                 "embeddings": embeddings}
    for key, value in overrides.items():
        if value is not None:
            setattr(config.engine, key, value)
    check_keys_read(config, config_file or "the configuration")
    if host is not None:
        config.server.host = host
    if port is not None:
        config.server.port = port
    if api_key is not None:
        try:
            config.server.api_keys.append(check_api_key(api_key, "--api-key (or TIANKONG_API_KEY)"))
        except ValueError as exc:
            raise ConfigError(str(exc), hint="use a long random key, e.g. from `openssl rand -hex 16`") from None
    data = config.model_dump()
    # a full dump sets every default of a pool model, and a remote one (url) refuses engine keys that were set:
    # its entries are dumped as they were written
    data["pool"] = config.pool.model_dump(exclude_unset=True)
    config = type(config).model_validate(data)
    serve_gateway(config, log=lambda msg: click.echo(msg, err=True))


def remember_api_key(ctx: click.Context, _: click.Parameter, value: str | None) -> None:
    """``--api-key`` (or ``TIANKONG_API_KEY``): the Bearer key sent to ``--url`` / ``TIANKONG_URL``."""
    if value:
        ctx.meta["tiankong.api_key"] = value


API_KEY_OPTION = click.option("--api-key", envvar="TIANKONG_API_KEY", default=None, expose_value=False,
                              callback=remember_api_key, help="Bearer key for --url (or TIANKONG_API_KEY).")


def cli_api_key() -> str | None:
    ctx = click.get_current_context(silent=True)
    found = ctx.meta.get("tiankong.api_key") if ctx is not None else None
    return str(found) if found else (os.environ.get("TIANKONG_API_KEY") or None)


def _client(model: str | None, url: str | None, llama_server: str | None, embeddings: bool = False,
            adapters: list[str] | None = None) -> Client:
    from ..api import Client

    if url or os.environ.get("TIANKONG_URL"):
        from ..client import _shared

        if llama_server:  # it starts a managed engine, and a running server answers: it was ignored
            where = "--url" if url else "TIANKONG_URL"
            raise click.UsageError(f"--llama-server starts a managed engine, and {where} names a running server: "
                                   f"give one of them")
        _shared.MANAGE_HINT = "leave out --url (and TIANKONG_URL) and pass --model NAME to run a managed engine"
        return Client(url, model=model, api_key=cli_api_key())
    return Client(model=paths.default_model(model) or DEFAULT_MODEL, llama_server=llama_server, slots=1, ctx=4096,
                  embeddings=embeddings,
                  adapters=adapters)


_common = [
    click.option("--model", default=None, help=f"Model (default: TIANKONG_MODEL, else {DEFAULT_MODEL}; embedded "
                 "engine)."),
    click.option("--url", default=None, help="Use a running server instead (or TIANKONG_URL)."),
    click.option("--system", default=None, help="System prompt."),
    click.option("--max-tokens", type=click.IntRange(1, 2**31 - 1), default=512, show_default=True),
    click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary."),
    API_KEY_OPTION,
]


def common(func: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_common):
        func = option(func)
    return func


@click.command()
@click.argument("prompt", required=False)
@common
@click.option("--json", "as_json", is_flag=True, help="Print text, finish reason, usage and timings as JSON.")
def run(prompt: str | None, model: str | None, url: str | None, system: str | None, max_tokens: int,
        llama_server: str | None, as_json: bool) -> None:
    """One-shot generation. PROMPT '-' or absent reads stdin."""
    if prompt in (None, "-"):
        if sys.stdin is None or sys.stdin.isatty():  # a closed stdin (`<&-`) is None
            raise click.UsageError("give a PROMPT or pipe text on stdin")
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise click.UsageError("the prompt is empty: give the text to answer (an empty prompt only wastes a call)")
    with _client(model, url, llama_server) as client:
        if as_json:
            result = client.chat(prompt, system=system, max_tokens=max_tokens)
            emit_json({"text": result.text, "finish_reason": result.finish_reason,
                       "usage": {"prompt_tokens": result.usage.prompt_tokens,
                                 "completion_tokens": result.usage.completion_tokens},
                       "timings": result.timings})
            return
        finish = None
        for chunk in client.stream_chat(prompt, system=system, max_tokens=max_tokens):
            click.echo(chunk.text, nl=False)
            finish = chunk.finish_reason or finish
        click.echo()
        if finish == "length":
            click.echo(f"warning: the answer stopped at --max-tokens {max_tokens}: it is cut short; give a larger "
                       "--max-tokens", err=True)


@click.command()
@common
def chat(model: str | None, url: str | None, system: str | None, max_tokens: int, llama_server: str | None) -> None:
    """Interactive chat (empty line or /exit quits, /reset clears history)."""
    with _client(model, url, llama_server) as client:
        history: list[dict[str, str]] = []
        while True:
            try:
                line = input(">>> ").strip()
            except (EOFError, KeyboardInterrupt):
                break
            if line in ("", "/exit", "/quit"):
                break
            if line == "/reset":
                history.clear()
                click.echo("(history cleared)", err=True)
                continue
            if re.fullmatch(r"/[a-z]+", line):  # a mistyped command went to the model (a path like /var/log is text)
                click.echo(f"unknown command {line}: /reset clears the history, /exit or an empty line quits",
                           err=True)
                continue
            history.append({"role": "user", "content": line})
            if not _chat_turn(client, history, system, max_tokens):
                history.pop()  # not answered: the session goes on without it


def _chat_turn(client: Client, history: list[dict[str, str]], system: str | None, max_tokens: int) -> bool:
    """One answer to the last message, streamed; the history's oldest exchanges are dropped when the whole no longer
    fits the context (the session ended with "the input is too long", its history lost). Ctrl-C stops the answer,
    not the session. False when the message alone does not fit."""
    reply: list[str] = []
    finish = None
    while True:
        try:
            for chunk in client.stream_chat(history, system=system, max_tokens=max_tokens):
                click.echo(chunk.text, nl=False)
                reply.append(chunk.text)
                finish = chunk.finish_reason or finish
            break
        except InputTooLong as exc:
            if len(history) < 3:  # the message alone: nothing older to drop
                click.echo(f"error: {exc.message} — shorten the message (or /reset)", err=True)
                return False
            del history[:2]  # the oldest question and its answer
            click.echo("(the oldest turns were dropped to fit the context)", err=True)
        except KeyboardInterrupt:
            click.echo("\n(interrupted)", err=True)
            break
    click.echo()
    if finish == "length":
        click.echo(f"warning: the answer stopped at --max-tokens {max_tokens}: it is cut short", err=True)
    history.append({"role": "assistant", "content": "".join(reply)})
    return True


@click.command()
@click.option("--json", "as_json", is_flag=True)
def doctor(as_json: bool) -> None:
    """Check the engine, models, CPU, memory and directories; say what to fix."""
    from ..doctor import diagnose

    findings = diagnose()
    if as_json:
        emit_json([finding.to_json() for finding in findings])
    else:
        for finding in findings:
            mark = "ok " if finding.ok else "FIX"
            click.echo(f"{mark} {finding.topic:<40} {finding.detail}")
            if not finding.ok and finding.fix:
                click.echo(f"    → {finding.fix}")
    if not all(finding.ok for finding in findings):
        sys.exit(1)  # something to fix: scripts and CI can tell
