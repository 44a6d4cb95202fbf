"""Cancellation: how fast an abandoned request frees its slot, direct to llama-server vs. through the gateway.

    .venv/bin/python benchmarks/gateway_cancel.py [--trials 5] [--after-tokens 40] [--deadline-s 2]

One SmolLM2 engine (2 slots) and the gateway in front of it (in-process uvicorn on loopback), one run. Each
trial sends one long generation (``max_tokens`` 1500, ``ignore_eos``) over a raw socket, waits until the
engine's ``/slots`` shows ``--after-tokens`` decoded, then abandons it, and polls ``/slots`` every 10 ms until
the slot is idle. Reported per case: seconds from abandoning to idle and tokens decoded meanwhile (median,
max), and how many requests ran to ``max_tokens`` (must be 0). Cases:

* ``direct stream`` / ``direct plain``: the client closes its socket to llama-server (the baseline: llama-server
  notices a streamed request at its next write, a plain one at its next 1 s poll);
* ``gateway stream`` / ``gateway plain``: the client closes its socket to the gateway, which must close its
  engine connection;
* ``gateway deadline``: ``request_timeout_s`` runs out (504) with the client still connected.

The gateway's extra cost is the difference between its rows and the direct rows.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from inproc_gateway import serve, stop

from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.gateway import GatewayState
from tiankong.models import TEST_MODEL, model_path

MAX_TOKENS = 1500
PROMPT = [{"role": "user", "content": "Count from 1 to 2000, one number per line."}]


@dataclass
class Case:
    name: str
    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    ran_to_max: int = 0

    def row(self) -> str:
        if not self.seconds:
            return f"{self.name:<18} no trials"
        return (f"{self.name:<18} idle after {statistics.median(self.seconds):6.3f} s median "
                f"(max {max(self.seconds):6.3f}); tokens meanwhile {statistics.median(self.tokens):5.0f} median "
                f"(max {max(self.tokens):4d}); ran to max_tokens {self.ran_to_max}/{len(self.seconds)}")


def slots(engine_url: str) -> list[dict[str, object]]:
    answer: list[dict[str, object]] = httpx.get(f"{engine_url}/slots", timeout=30).json()
    return answer


def busy_decoded(engine_url: str) -> int | None:
    """Tokens decoded by the busy slot, or None when every slot is idle."""
    for slot in slots(engine_url):
        if slot.get("is_processing"):
            token = slot.get("next_token")
            first = token[0] if isinstance(token, list) and token else {}
            return int(first.get("n_decoded", 0)) if isinstance(first, dict) else 0
    return None


def send_raw(url: str, stream: bool) -> socket.socket:
    parts = urlsplit(url)
    body = json.dumps({"messages": PROMPT, "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0,
                       "stream": stream}).encode()
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=600)
    sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def wait_for(check: Callable[[], bool], timeout_s: float = 600, every_s: float = 0.01) -> None:
    end = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > end:
            raise TimeoutError("gave up waiting")
        time.sleep(every_s)


def until_idle(engine_url: str, last: int) -> tuple[float, int]:
    """Poll until idle; return (when, the last n_decoded seen while busy)."""
    while (decoded := busy_decoded(engine_url)) is not None:
        last = decoded
        time.sleep(0.01)
    return time.monotonic(), last


def abandon_trial(case: Case, engine_url: str, target: str, stream: bool, after: int) -> None:
    wait_for(lambda: busy_decoded(engine_url) is None)
    sock = send_raw(target, stream)
    seen = [0]

    def far_enough() -> bool:
        seen[0] = busy_decoded(engine_url) or 0
        return seen[0] >= after

    wait_for(far_enough)
    sock.close()
    start = time.monotonic()
    idle_at, last = until_idle(engine_url, seen[0])
    case.seconds.append(idle_at - start)
    case.tokens.append(last - seen[0])
    case.ran_to_max += last >= MAX_TOKENS - 1


def deadline_trial(case: Case, engine_url: str, target: str) -> None:
    wait_for(lambda: busy_decoded(engine_url) is None)
    body = {"messages": PROMPT, "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0}
    seen = [0]
    watcher_stop = threading.Event()

    def watch() -> None:  # remember the last n_decoded before the 504 arrives
        while not watcher_stop.is_set():
            seen[0] = busy_decoded(engine_url) or seen[0]
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    answer = httpx.post(f"{target}/v1/chat/completions", json=body, timeout=600)
    start = time.monotonic()
    watcher_stop.set()
    thread.join()
    if answer.status_code != 504:
        raise SystemExit(f"expected 504 from the deadline case, got {answer.status_code}: {answer.text[:200]}")
    idle_at, last = until_idle(engine_url, seen[0])
    case.seconds.append(idle_at - start)
    case.tokens.append(max(0, last - seen[0]))
    case.ran_to_max += last >= MAX_TOKENS - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--after-tokens", type=int, default=40, help="Abandon once this many tokens are decoded.")
    parser.add_argument("--deadline-s", type=float, default=2.0, help="request_timeout_s of the deadline case.")
    args = parser.parse_args()
    engine = EngineProcess(EngineConfig(model=model_path(TEST_MODEL), ctx=4096, slots=2, alias=TEST_MODEL),
                           locate_engine())
    engine.start()
    servers = []
    try:
        plain = serve(GatewayState.for_engine(engine, TEST_MODEL, queue_size=8))
        timed = serve(GatewayState.for_engine(engine, TEST_MODEL, queue_size=8, request_timeout_s=args.deadline_s))
        servers = [plain, timed]
        cases = {name: Case(name) for name in ("direct stream", "gateway stream", "direct plain", "gateway plain",
                                               "gateway deadline")}
        for _ in range(args.trials):  # interleaved, so machine-load drift hits every case alike
            abandon_trial(cases["direct stream"], engine.url, engine.url, True, args.after_tokens)
            abandon_trial(cases["gateway stream"], engine.url, plain[2], True, args.after_tokens)
            abandon_trial(cases["direct plain"], engine.url, engine.url, False, args.after_tokens)
            abandon_trial(cases["gateway plain"], engine.url, plain[2], False, args.after_tokens)
            deadline_trial(cases["gateway deadline"], engine.url, timed[2])
        for case in cases.values():
            print(case.row())
        for kind in ("stream", "plain"):
            direct, via = cases[f"direct {kind}"], cases[f"gateway {kind}"]
            if direct.ran_to_max:  # llama-server itself missed the disconnect: no baseline to subtract
                print(f"{kind}: direct requests ran to max_tokens {direct.ran_to_max}/{len(direct.seconds)} "
                      f"(llama-server missed the closed connection); through the gateway {via.ran_to_max}")
                continue
            extra = statistics.median(via.seconds) - statistics.median(direct.seconds)
            print(f"gateway extra ({kind}): {extra * 1000:+.0f} ms median")
        print(f"trials {args.trials}, abandoned after {args.after_tokens} tokens, load avg {os.getloadavg()[0]:.1f}")
    finally:
        for served in servers:
            stop(served)
        engine.stop()


if __name__ == "__main__":
    main()
