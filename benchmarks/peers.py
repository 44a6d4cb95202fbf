"""Peer comparison: direct llama-server vs. the tiankong gateway vs. llama-cpp-python's own server.

    .venv/bin/python benchmarks/peers.py --setup-peer          # once: venv + build (compiles llama.cpp, 10+ min)
    .venv/bin/python benchmarks/peers.py [--model smollm2-135m-instruct:q4_1] [--concurrency 1,8]
        [--requests 16] [--max-tokens 32] [--slots 8] [--threads N] [--rounds 2] [--out FILE.json] [--json]

Same model file, same prompts, same threads, in one run; one server at a time (each gets the whole machine),
the order rotated every round so drift in machine load hits all alike:

* ``llama-server``: tiankong's managed llama-server (``-np --slots``, ``-c slots × --slot-ctx``), called directly;
* ``tiankong``: ``tiankong serve`` (gateway + its own engine with the same flags), called through the gateway;
* ``llama-cpp-python``: ``python -m llama_cpp.server`` (``--n_ctx --slot-ctx``, no parallel slots: it serves
  one request at a time), from ``llama-cpp-python[server]`` pinned to the version whose vendored llama.cpp
  tiankong's engine is built from, so the kernels are the same and the difference is the server.

llama-cpp-python is installed into a separate venv (default ``<tiankong cache>/peers/llama-cpp-python-<version>``)
on first use: ``python -m venv`` + ``pip install 'llama-cpp-python[server]==<version>'``, which compiles llama.cpp
from source (``CMAKE_ARGS=-DGGML_NATIVE=ON``): 10+ minutes on 2 cores. ``--setup-peer`` only does that;
``--skip-peer`` measures the other two.

Each (server, concurrency) cell is ``tiankong.bench``'s ladder step: ``--requests`` streamed chat completions,
``--max-tokens`` tokens each (``ignore_eos`` where the server accepts it; llama-cpp-python may stop at EOS, so
tokens/s is the fair column), temperature 0, seed 42. Printed per concurrency: tokens/s, requests/s, TTFT and
latency p50/p99 per server (median over rounds) and the ratios against direct llama-server.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import httpx

from tiankong import paths
from tiankong.bench import LadderConfig, run_ladder
from tiankong.engine import EngineConfig, EngineProcess
from tiankong.engine.build import SOURCE_VERSION
from tiankong.engine.process import free_port
from tiankong.models import TEST_MODEL, resolve_installed

TIANKONG = str(Path(sys.executable).parent / "tiankong")
SERVERS = ("llama-server", "tiankong", "llama-cpp-python")
COLUMNS = ("tok_per_s", "req_per_s", "ttft_p50_s", "ttft_p99_s", "latency_p50_s", "latency_p99_s")


def default_peer_venv() -> Path:
    return Path(paths.cache_dir()) / "peers" / f"llama-cpp-python-{SOURCE_VERSION}"


def peer_ready(venv: Path) -> bool:
    python = venv / "bin" / "python"
    return python.exists() and subprocess.run([str(python), "-c", "import llama_cpp.server"],
                                              capture_output=True).returncode == 0


def setup_peer(venv: Path) -> Path:
    """Create the venv and build llama-cpp-python[server] in it (once); returns its python."""
    python = venv / "bin" / "python"
    if peer_ready(venv):
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = venv.parent / f"{venv.name}.build.log"
    print(f"building llama-cpp-python[server]=={SOURCE_VERSION} into {venv} (compiles llama.cpp; 10+ min on "
          f"2 cores); log: {log}", flush=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "CMAKE_ARGS": "-DGGML_NATIVE=ON -DLLAMA_CURL=OFF", "CMAKE_BUILD_PARALLEL_LEVEL":
           str(os.cpu_count() or 1)}
    with log.open("w") as handle:
        done = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-cache-dir",
                               f"llama-cpp-python[server]=={SOURCE_VERSION}"], stdout=handle,
                              stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0 or not peer_ready(venv):
        raise SystemExit(f"building llama-cpp-python failed (exit {done.returncode}); see {log}")
    print(f"built in {time.monotonic() - started:.0f} s", flush=True)
    return python


class Server:
    """A server process of its own session, stopped with SIGTERM to its group (then SIGKILL)."""

    def __init__(self, argv: list[str], url: str, log: Path) -> None:
        self.url, self.log = url, log
        self.handle = log.open("w")
        self.proc = subprocess.Popen(argv, stdout=self.handle, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"{argv[0]} exited: " + log.read_text(errors="replace")[-2000:])
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{url} did not come up within 300 s; log {log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.handle.close()


def start(name: str, args: argparse.Namespace, logs: Path) -> tuple[str, Callable[[], None]]:
    """Start one server; returns its URL and how to stop it."""
    record = resolve_installed(args.model)
    port = free_port()
    if name == "llama-server":
        config = EngineConfig(model=Path(record.path), ctx=args.slots * args.slot_ctx, slots=args.slots,
                              threads=args.threads, alias=record.name)
        engine = EngineProcess(config, restart_on_crash=False).start()
        return engine.url, engine.stop
    if name == "tiankong":
        toml = logs / "tiankong.toml"
        toml.write_text(f"[engine]\nthreads = {args.threads}\n[server]\nqueue_size = {4 * max(args.levels)}\n")
        server = Server([TIANKONG, "serve", "--model", args.model, "--port", str(port), "--slots", str(args.slots),
                         "--ctx", str(args.slots * args.slot_ctx), "--config", str(toml)],
                        f"http://127.0.0.1:{port}", logs / "tiankong.log")
        return server.url, server.stop
    python = setup_peer(args.peer_venv)
    server = Server([str(python), "-m", "llama_cpp.server", "--model", str(record.path), "--model_alias",
                     record.name, "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(args.slot_ctx),
                     "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads), "--seed", "42",
                     "--interrupt_requests", "false", "--verbose", "false"],
                    f"http://127.0.0.1:{port}", logs / "llama-cpp-python.log")
    return server.url, server.stop


def measure(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    config = LadderConfig(url=url, levels=args.levels, requests_per_level=args.requests, max_tokens=args.max_tokens,
                          step_time_s=args.step_time)
    report = run_ladder(config, progress=lambda line: print(f"  {name}: {line}", file=sys.stderr, flush=True))
    return {"ignore_eos": report.ignore_eos_used, "steps": {str(s.concurrency): s.model_dump() for s in report.steps}}


def summarise(rounds: dict[str, list[dict[str, Any]]], levels: list[int]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for level in map(str, levels):
        row: dict[str, Any] = {}
        for name, runs in rounds.items():
            steps = [run["steps"][level] for run in runs if level in run["steps"]]
            if steps:
                row[name] = {col: median(s[col] for s in steps) for col in COLUMNS}
                row[name]["tokens_per_request"] = median(s["completion_tokens"] / max(1, s["completed"])
                                                         for s in steps)
                row[name]["errors"] = sum(s["errors"] for s in steps)
        base = row.get("llama-server")
        for name in row:
            if base and name != "llama-server":
                row[name]["vs_llama_server"] = {col: row[name][col] / base[col] if base[col] else None
                                                for col in COLUMNS}
        table[level] = row
    return table


def report(table: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"{args.model}, threads {args.threads}, slots {args.slots} (llama-cpp-python: 1), {args.requests} "
          f"requests x {args.max_tokens} tokens per cell, {args.rounds} round(s), cores {os.cpu_count()}, "
          f"load avg {os.getloadavg()[0]:.1f}")
    print(f"{'conc':>4} {'server':<17} {'tok/s':>8} {'req/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} {'lat p50':>8} "
          f"{'lat p99':>8} {'tok/req':>7} {'err':>4} {'tok/s ratio':>11} {'lat p50 ratio':>13}")
    for level, row in table.items():
        for name, cell in row.items():
            ratio = cell.get("vs_llama_server") or {}
            tok_ratio = f"{ratio['tok_per_s']:.3f}" if ratio.get("tok_per_s") else "1 (base)"
            lat_ratio = f"{ratio['latency_p50_s']:.3f}" if ratio.get("latency_p50_s") else "1 (base)"
            print(f"{level:>4} {name:<17} {cell['tok_per_s']:>8.1f} {cell['req_per_s']:>7.2f} "
                  f"{cell['ttft_p50_s']:>9.3f} {cell['ttft_p99_s']:>9.3f} {cell['latency_p50_s']:>8.3f} "
                  f"{cell['latency_p99_s']:>8.3f} {cell['tokens_per_request']:>7.1f} {cell['errors']:>4} "
                  f"{tok_ratio:>11} {lat_ratio:>13}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=TEST_MODEL)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--requests", type=int, default=16, help="requests per (server, concurrency) cell")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--slot-ctx", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--step-time", type=float, default=300.0, help="seconds per cell before no new request")
    parser.add_argument("--peer-venv", type=Path, default=default_peer_venv())
    parser.add_argument("--setup-peer", action="store_true", help="only create the venv and build, then exit")
    parser.add_argument("--skip-peer", action="store_true", help="leave llama-cpp-python out")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.setup_peer:
        print(setup_peer(args.peer_venv))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout`: still stop the servers in finally
    args.levels = sorted({int(x) for x in args.concurrency.split(",")})
    names = [n for n in SERVERS if not (args.skip_peer and n == "llama-cpp-python")]
    if "llama-cpp-python" in names:
        setup_peer(args.peer_venv)  # first use builds (before anything is measured)
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="tiankong-peers-") as tmp:
        for number in range(args.rounds):
            order = names[number % len(names):] + names[:number % len(names)]
            for name in order:
                url, stop = start(name, args, Path(tmp))
                try:
                    rounds[name].append(measure(name, url, args))
                finally:
                    stop()
    table = summarise(rounds, args.levels)
    result = {"model": args.model, "threads": args.threads, "slots": args.slots, "requests": args.requests,
              "max_tokens": args.max_tokens, "rounds": rounds, "table": table}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(table, args)


if __name__ == "__main__":
    main()
