"""``tiankong engine rpc-worker``: run a ggml-rpc-server worker that a main engine pools with ``--rpc``."""

from __future__ import annotations

import contextlib
import signal
from types import FrameType

import click

from ..engine.rpc import RpcWorker, run_rpc_worker


@click.command("rpc-worker")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (non-loopback: --allow-remote).")
@click.option("--port", type=click.IntRange(0, 65535), default=50052, show_default=True,
              help="TCP port (0: any free port).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="CPU threads of this worker.")
@click.option("--cache", is_flag=True, help="Cache received tensors on local disk (ggml-rpc-server -c).")
@click.option("--allow-remote", is_flag=True,
              help="Allow a non-loopback bind. The RPC protocol has no authentication: private networks only.")
@click.option("--llama-server", "llama_server", default=None,
              help="llama-server (the worker binary next to it is used) or a ggml-rpc-server path.")
def rpc_worker(host: str, port: int, threads: int, cache: bool, allow_remote: bool, llama_server: str | None) -> None:
    """Lend this machine's memory and CPU to a main engine (docs/speed.md); Ctrl-C stops it."""
    worker = RpcWorker(host=host, port=port, threads=threads, cache=cache, allow_remote=allow_remote,
                       binary=llama_server)
    # Ctrl-C (or SIGTERM) is the normal way out. Installed explicitly: a shell that starts a job in the
    # background leaves SIGINT ignored, and Python keeps an inherited "ignore".
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    with contextlib.suppress(KeyboardInterrupt):  # the worker is stopped on the way out
        run_rpc_worker(worker, log=lambda line: click.echo(line, err=True))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
