"""A remote upstream that goes down (``engine/replica.py``): marked unreachable by the request that found it so,
routed around while the model has another replica, answered 503 at once (not after ``engine_retry_wait_s`` of
polling) when it has none, counted as down by ``/health`` — and brought back by the gateway's own probe, with no
user request spent on it. No engine is needed: the upstreams are stand-in HTTP servers on loopback."""

from __future__ import annotations

import socket
import threading
from http.server import ThreadingHTTPServer

import httpx

from conftest import free_port, serve_app, wait_until
from helpers.cloud_like import CloudLike, cloud_like
from tiankong.engine.pool import REPROBE_S, EnginePool, PoolEntry, Replica
from tiankong.gateway import GatewayState

CHAT = {"messages": [{"role": "user", "content": "Where is the Louvre?"}], "max_tokens": 8}


def chat(url: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={**CHAT, "model": "m"}, timeout=30)


def health(url: str) -> httpx.Response:
    return httpx.get(f"{url}/health", timeout=30)


def test_a_down_replica_is_marked_and_routed_around() -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with cloud_like() as live:
        pool = EnginePool([PoolEntry("m", [Replica("m@dead", remote_url=dead, max_in_flight=2),
                                           Replica("m@live", remote_url=live, max_in_flight=2)])])
        # a long engine_retry_wait_s: the refused request must not spend it polling the remote's /health
        state = GatewayState(upstream_url="", model_name="m", pool=pool, engine_retry_wait_s=60)
        with serve_app(state) as url:
            before = health(url).json()["pool"][0]["replicas"]
            assert [r["reachable"] for r in before] == [True, True]
            first = chat(url)  # a tie goes to the first replica: the dead one
            assert first.status_code == 503, first.text
            assert first.json()["error"]["code"] == "engine_unavailable"
            assert first.headers["Retry-After"] == "5" and "m@dead" in first.json()["error"]["message"]
            after = health(url)
            assert after.status_code == 200  # the model still has a replica that answers
            dead_view, live_view = after.json()["pool"][0]["replicas"]
            assert dead_view["reachable"] is False and dead_view["last_error"]
            assert live_view["reachable"] is True and "last_error" not in live_view
            assert [chat(url).status_code for _ in range(3)] == [200, 200, 200]  # all to the live replica
            assert len(CloudLike.seen) == 3


def test_a_model_whose_only_upstream_is_down_is_unavailable_until_the_probe_finds_it_back() -> None:
    port = free_port()
    pool = EnginePool([PoolEntry("m", [Replica("m@far", remote_url=f"http://127.0.0.1:{port}", max_in_flight=2)])])
    state = GatewayState(upstream_url="", model_name="m", pool=pool, engine_retry_wait_s=60)
    with serve_app(state) as url:
        assert health(url).status_code == 200  # nothing is known yet
        refused = [chat(url) for _ in range(2)]  # the second within REPROBE_S: the open circuit's answer
        assert [r.status_code for r in refused] == [503, 503]
        assert all(r.json()["error"]["code"] == "engine_unavailable" for r in refused)
        down = health(url)
        assert down.status_code == 503 and down.json()["status"] == "unavailable"
        assert down.json()["engine"] == "unreachable"
        assert down.json()["pool"][0]["replicas"][0]["reachable"] is False
        CloudLike.seen.clear()
        CloudLike.answers = ['{"city":"Paris"}']
        server = ThreadingHTTPServer(("127.0.0.1", port), CloudLike)  # the upstream comes back on its port
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            # the gateway's probe (every REPROBE_S) marks it reachable: no request is sent to find out
            # (read in the pool itself: a /health call would probe it too)
            far = pool.entries[0].replicas[0]
            assert wait_until(lambda: not far.unreachable, 6 * REPROBE_S)
            assert CloudLike.seen == []  # the probe is a GET: no chat was spent on it
            assert health(url).status_code == 200
            assert chat(url).status_code == 200
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)



def test_an_upstream_that_connects_but_answers_slowly_is_reachable_again() -> None:
    """The probe re-marked an upstream on any failure, also a read timeout after connecting (a hosted API's slow
    /v1/models): one that had refused a connection once stayed out of rotation for good."""
    port = free_port()
    pool = EnginePool([PoolEntry("m", [Replica("m@far", remote_url=f"http://127.0.0.1:{port}", max_in_flight=2)])])
    state = GatewayState(upstream_url="", model_name="m", pool=pool, engine_retry_wait_s=60)
    with serve_app(state) as url:
        assert chat(url).status_code == 503
        far = pool.entries[0].replicas[0]
        assert far.unreachable
        with socket.socket() as silent:  # the kernel accepts connections to it; nothing ever answers
            silent.bind(("127.0.0.1", port))
            silent.listen(8)
            assert wait_until(lambda: not far.unreachable, 6 * REPROBE_S)
