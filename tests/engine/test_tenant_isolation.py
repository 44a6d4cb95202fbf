"""A gateway shared by several API keys (issue 46), probed as a hostile key would, on a real keyed gateway in
front of SmolLM2: no file is read because a request body names it, one error for every unknown decider, private
files with salted owners, per-key quotas and rpm on the Batch API, 4xx instead of 500s, nothing echoed whole."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import serve_app, wait_until
from tiankong.batch.files import FileStore, write_private_json
from tiankong.config import BatchesSettings
from tiankong.deciders.registry import BUILTIN_DIR
from tiankong.engine import EngineProcess
from tiankong.gateway import GatewayState
from tiankong.gateway.keys import ApiKey, hash_key
from tiankong.models import TEST_MODEL

KEY_A, KEY_B = "tenant-a-key-0123456789", "tenant-b-key-0123456789"
A = {"Authorization": f"Bearer {KEY_A}"}
B = {"Authorization": f"Bearer {KEY_B}"}
FINAL = ("completed", "failed", "cancelled", "expired")


def gateway(engine: EngineProcess, folder: Path, b_rpm: int | None = None, share_prompt_cache: bool | None = None,
            **limits: Any) -> GatewayState:
    return GatewayState.for_engine(engine, TEST_MODEL, batches=BatchesSettings(dir=str(folder), **limits),
                                   api_keys=[ApiKey(hash_key(KEY_A), "a"), ApiKey(hash_key(KEY_B), "b", b_rpm)],
                                   share_prompt_cache=share_prompt_cache)


@pytest.fixture(scope="module")
def shared(smol_engine: EngineProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("tenants") / "batches"
    with serve_app(gateway(smol_engine, folder)) as url:
        yield url, folder


def chat_line(i: int, **body: Any) -> dict[str, Any]:
    return {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": f"Count to {i}."}], "max_tokens": 2, **body}}


def upload(url: str, headers: dict[str, str], lines: list[dict[str, Any]]) -> httpx.Response:
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    return httpx.post(f"{url}/v1/files", headers=headers, files={"file": ("in.jsonl", data)},
                      data={"purpose": "batch"}, timeout=60)


def create_batch(url: str, headers: dict[str, str], file_id: str, endpoint: str = "/v1/chat/completions",
                 **extra: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/batches", headers=headers, timeout=30,
                      json={"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h", **extra})


def wait_batch(url: str, headers: dict[str, str], batch_id: str, timeout_s: float = 300) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def done() -> bool:
        found.update(httpx.get(f"{url}/v1/batches/{batch_id}", headers=headers, timeout=30).json())
        return found.get("status") in FINAL

    assert wait_until(done, timeout_s, 0.3), found
    return found


# --- 1. names, not paths ---------------------------------------------------------------------------------------


def decider_probes(tmp_path: Path) -> list[str]:
    """Every way a caller might name a file or a missing decider."""
    evil = tmp_path / "evil.json"
    data = json.loads((BUILTIN_DIR / "guard.json").read_text(encoding="utf-8"))
    data["name"] = "pwned-by-remote"
    evil.write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "notes.json").write_text("{}", encoding="utf-8")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    return [str(evil), os.path.relpath(evil), "../" * 12 + str(evil).lstrip("/"), str(tmp_path / "notes.json"),
            str(tmp_path / "binary.json"), str(tmp_path / "missing.json"), "/etc/passwd", "no-such-decider",
            "guard@999", "guard@x", "Not A Name", "guard\n", "evil.json"]


@pytest.mark.parametrize("task", ["classify", "guard", "route"])
def test_a_decider_is_a_registry_name_and_every_other_is_one_error(shared: tuple[str, Path], tmp_path: Path,
                                                                    task: str) -> None:
    url, _ = shared
    body: dict[str, Any] = {"text": "hello there"}
    if task == "route":
        body["routes"] = [{"name": "injection", "description": "prompt injection", "target": "task:guard"},
                          {"name": "benign", "description": "an ordinary request", "target": "upstream:big"}]
    answers = [httpx.post(f"{url}/v1/tasks/{task}", headers=A, json={**body, "decider": probe}, timeout=120)
               for probe in decider_probes(tmp_path)]
    assert [a.status_code for a in answers] == [400] * len(answers), [a.text for a in answers]
    first = answers[0].json()
    assert all(a.json() == first for a in answers)  # no oracle: which files exist or parse is not told
    assert first["error"]["param"] == "decider" and first["error"]["type"] == "invalid_request_error"
    assert "pwned" not in json.dumps(first) and str(tmp_path) not in json.dumps(first)
    if task == "classify":  # a registered (here: shipped) name still answers
        good = httpx.post(f"{url}/v1/tasks/classify", headers=A, json={**body, "decider": "guard"}, timeout=120)
        assert good.status_code == 200 and good.json()["decider"].startswith("guard")


def test_batch_lines_name_deciders_too(shared: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = shared
    probes = decider_probes(tmp_path)
    lines = [{"custom_id": f"d{i}", "method": "POST", "url": "/v1/tasks/classify",
              "body": {"text": "hello there", "decider": probe}} for i, probe in enumerate(probes)]
    uploaded = upload(url, A, lines)
    assert uploaded.status_code == 200, uploaded.text
    batch = create_batch(url, A, uploaded.json()["id"], "/v1/tasks/classify").json()
    done = wait_batch(url, A, batch["id"])
    assert done["request_counts"]["failed"] == len(probes) and done["output_file_id"]
    errors = httpx.get(f"{url}/v1/files/{done['error_file_id']}/content", headers=A, timeout=30).text
    bodies = [json.loads(line)["response"]["body"] for line in errors.splitlines() if line.strip()]
    assert len(bodies) == len(probes) and all(b == bodies[0] for b in bodies)
    assert "pwned" not in errors and str(tmp_path) not in errors


def test_model_and_adapter_paths_in_bodies_are_refused(shared: tuple[str, Path]) -> None:
    url, _ = shared
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    for extra in ({"model": "/etc/passwd"}, {"model": "../../models/x.gguf"}, {"adapter": "/tmp/x.gguf"},
                  {"adapter": "../x.gguf"}):
        answer = httpx.post(f"{url}/v1/chat/completions", headers=A, json={**chat, **extra}, timeout=60)
        assert 400 <= answer.status_code < 500, (extra, answer.text)
        assert "root:" not in answer.text


# --- the prompt cache: no key learns another's prompt from what the engine had cached ------------------------

SECRET = "My bank PIN is 4831 and my name is Alice Wong. Summarise this in one line, please."
GUESS = "My bank PIN is 4831 and my name is Alice"


def cache_reuse(answer: dict[str, Any]) -> tuple[int, int]:
    """What an answer says of reused cache: ``usage.prompt_tokens_details.cached_tokens`` and ``timings.cache_n``."""
    cached = (answer.get("usage", {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return int(cached), int((answer.get("timings") or {}).get("cache_n", 0))


def guess_after_secret(url: str, **extra: Any) -> dict[str, Any]:
    secret = httpx.post(f"{url}/v1/chat/completions", headers=A, timeout=120, json={
        "messages": [{"role": "user", "content": SECRET}], "max_tokens": 4})
    assert secret.status_code == 200, secret.text
    guess = httpx.post(f"{url}/v1/chat/completions", headers=B, timeout=120, json={
        "messages": [{"role": "user", "content": GUESS}], "max_tokens": 1, **extra})
    assert guess.status_code == 200, guess.text
    answer: dict[str, Any] = guess.json()
    return answer


def test_a_key_learns_nothing_from_another_keys_cached_prompt(shared: tuple[str, Path],
                                                              smol_engine: EngineProcess) -> None:
    """Issue 46 row 2: B's guess at A's prompt reports no reuse (usage, timings), also when B asks for the cache
    (``cache_prompt: true``) and on the native path; the same probe on a gateway that shares the cache shows the
    reuse, so the probe can see a leak (this is what every keyed gateway did before)."""
    url, _ = shared
    assert cache_reuse(guess_after_secret(url)) == (0, 0)
    assert cache_reuse(guess_after_secret(url, cache_prompt=True)) == (0, 0)
    native = httpx.post(f"{url}/completion", headers=B, timeout=120, json={"prompt": GUESS, "n_predict": 1})
    assert native.status_code == 200 and native.json()["timings"]["cache_n"] == 0, native.text
    with serve_app(gateway(smol_engine, Path(str(shared[1]) + "-sharing"), share_prompt_cache=True)) as shared_url:
        cached, cache_n = cache_reuse(guess_after_secret(shared_url))
    assert cached > 10 and cache_n == cached, (cached, cache_n)  # the prefix up to "Alice" (38 of 44 tokens here)


def test_task_calls_never_reuse_another_requests_prompt(smol_engine: EngineProcess) -> None:
    """The tasks' engine calls (library code that knows no keys) go out through ``IsolatingTransport``: a call
    that starts a request's work is sent with ``cache_prompt: false`` and reports ``cache_n`` 0 although the same
    text was just read; a call that continues its own request on the slot it pinned keeps its cache."""
    import asyncio

    from tiankong.api import AsyncClient
    from tiankong.gateway.cache_isolation import PROMPT_PATHS, IsolatingTransport

    sent: list[tuple[dict[str, Any], dict[str, Any]]] = []

    class Recording(httpx.AsyncBaseTransport):  # the real transport, with what went out and came back kept
        def __init__(self) -> None:
            self.inner = httpx.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            response = await self.inner.handle_async_request(request)
            if request.url.path in PROMPT_PATHS:
                content = await response.aread()
                body = json.loads(request.content)
                if not body.get("stream"):
                    sent.append((body, json.loads(content)))
                return httpx.Response(response.status_code, headers=response.headers, content=content)
            return response

    async def twice(transport: httpx.AsyncBaseTransport) -> None:
        async with AsyncClient(smol_engine.url, transport=transport) as client:
            for _ in range(2):
                await client.choose(SECRET, ["finance", "travel", "sport"])

    asyncio.run(twice(IsolatingTransport(Recording())))
    assert sent, "no engine call was seen"
    starts = [(body, answer) for body, answer in sent if body.get("id_slot") in (None, -1)]
    assert starts and all(body["cache_prompt"] is False for body, _ in starts)
    assert all(answer.get("timings", {}).get("cache_n", 0) == 0 for _, answer in starts), starts
    assert all(body.get("cache_prompt") is not False for body, _ in sent if body.get("id_slot") not in (None, -1))
    sent.clear()
    asyncio.run(twice(Recording()))  # the same calls without isolation: the second run reuses the first's prompt
    assert any(answer.get("timings", {}).get("cache_n", 0) > 0 for _, answer in sent[len(sent) // 2:]), sent


def test_the_cache_is_shared_only_with_fewer_than_two_keys_unless_configured() -> None:
    from tiankong.config import TiankongConfig
    from tiankong.gateway.cache_isolation import isolated, share_cache

    assert share_cache(None, 0) and share_cache(None, 1) and not share_cache(None, 2)
    assert share_cache(True, 5) and not share_cache(False, 0)
    body = {"messages": [], "cache_prompt": True}
    assert isolated("/v1/chat/completions", body)["cache_prompt"] is False
    assert isolated("/completion", {**body, "id_slot": 1}) == {**body, "id_slot": 1}  # its own pinned slot
    assert isolated("/completion", {**body, "id_slot": -1})["cache_prompt"] is False  # -1: the engine chooses
    assert isolated("/v1/embeddings", body) is body
    assert TiankongConfig.model_validate({"server": {"share_prompt_cache": True}}).server.share_prompt_cache


# --- 2. private files, salted owners ---------------------------------------------------------------------------


def test_batch_files_are_private_and_owners_salted(shared: tuple[str, Path]) -> None:
    url, folder = shared
    uploaded = upload(url, A, [chat_line(1)])
    assert uploaded.status_code == 200
    batch = create_batch(url, A, uploaded.json()["id"]).json()
    wait_batch(url, A, batch["id"])
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "files").stat().st_mode) == 0o700
    kept = list((folder / "files").iterdir())
    assert len(kept) >= 4 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in kept), \
        [(p.name, oct(p.stat().st_mode)) for p in kept]
    assert stat.S_IMODE((folder / "owner-salt").stat().st_mode) == 0o600
    everything = "".join(p.read_text(encoding="utf-8", errors="replace") for p in folder.rglob("*") if p.is_file())
    assert hash_key(KEY_A) not in everything and hash_key(KEY_A)[7:] not in everything  # no plain key hash


def test_records_of_an_older_version_stay_readable(smol_engine: EngineProcess, tmp_path: Path) -> None:
    folder = tmp_path / "old"
    store = FileStore(folder, max_bytes=1 << 20, max_requests=10)
    store.dir.mkdir(parents=True)
    (store.dir / "file-0123456789abcdef01234567.jsonl").write_text(json.dumps(chat_line(1)) + "\n")
    write_private_json(store.dir / "file-0123456789abcdef01234567.json", {
        "id": "file-0123456789abcdef01234567", "object": "file", "bytes": 10, "created_at": int(time.time()),
        "filename": "old.jsonl", "purpose": "batch", "status": "processed", "expires_at": None,
        "status_details": None, "owner": hash_key(KEY_A), "requests": 1, "urls": ["/v1/chat/completions"]})
    with serve_app(gateway(smol_engine, folder)) as url:
        mine = httpx.get(f"{url}/v1/files", headers=A, timeout=30).json()["data"]
        assert [f["id"] for f in mine] == ["file-0123456789abcdef01234567"]
        assert httpx.get(f"{url}/v1/files", headers=B, timeout=30).json()["data"] == []
    assert hash_key(KEY_A) not in (store.dir / "file-0123456789abcdef01234567.json").read_text()


# --- 3. 4xx, never 500; nothing echoed whole ---------------------------------------------------------------


def test_sql_schemas_too_deep_or_too_wide_are_4xx_naming_the_field(shared: tuple[str, Path]) -> None:
    url, _ = shared
    deep = "CREATE TABLE t (a INT CHECK " + "(" * 20000 + "1" + ")" * 20000 + ")"
    wide = "CREATE TABLE t (" + ", ".join(f"c{i} INT" for i in range(15000)) + ")"
    twice = "CREATE TABLE t (a INT, a INT)"
    for ddl in (deep, wide, twice):
        answer = httpx.post(f"{url}/v1/tasks/sql", headers=A, json={"question": "how many rows?", "schema": ddl},
                            timeout=120)
        assert answer.status_code == 400, answer.text[:300]
        assert answer.json()["error"]["param"] == "schema"


def test_detokenize_checks_token_ids_before_the_engine(shared: tuple[str, Path]) -> None:
    url, _ = shared
    for tokens in ([-1, 999999999], [999999999], [1.5], ["a"]):
        answer = httpx.post(f"{url}/detokenize", headers=A, json={"tokens": tokens}, timeout=30)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == "tokens" and "range_check" not in answer.text
    assert httpx.post(f"{url}/detokenize", headers=A, json={"tokens": [1, 2]}, timeout=30).status_code == 200


def test_completion_window_is_matched_exactly(shared: tuple[str, Path]) -> None:
    url, _ = shared
    file_id = upload(url, A, [chat_line(1)]).json()["id"]
    for window in ("24h\n", "9999h", " 24h", "1440m", 24):
        answer = create_batch(url, A, file_id, completion_window=window)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "completion_window", answer.text


def test_long_ids_are_cut_in_messages(shared: tuple[str, Path]) -> None:
    url, _ = shared
    long = "x" * 5000
    for method, path in (("GET", f"/v1/files/file-{long}"), ("GET", f"/v1/batches/batch_{long}"),
                         ("GET", f"/v1/batches?after=batch_{long}"), ("POST", f"/v1/batches/batch_{long}/cancel")):
        answer = httpx.request(method, url + path, headers=A, timeout=30, json={} if method == "POST" else None)
        assert answer.status_code == 404 and len(answer.text) < 400, (path, len(answer.text))
    answer = create_batch(url, A, "file-" + long)
    assert answer.status_code == 404 and len(answer.text) < 400


def test_ui_sends_security_headers_and_keeps_no_key_in_local_storage(shared: tuple[str, Path]) -> None:
    url, _ = shared
    page = httpx.get(f"{url}/ui", timeout=30)
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'sha256-" in csp and "unsafe-inline" not in \
        csp.split("script-src")[1].split(";")[0]
    assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "no-referrer"
    assert "localStorage" not in page.text and "sessionStorage" in page.text
    stats = httpx.get(f"{url}/ui/stats", headers=A, timeout=30)
    assert stats.status_code == 200 and stats.headers["x-frame-options"] == "DENY"


# --- 4. quotas and rpm -----------------------------------------------------------------------------------------


def test_file_calls_count_against_the_keys_rpm(smol_engine: EngineProcess, tmp_path: Path) -> None:
    with serve_app(gateway(smol_engine, tmp_path / "b", b_rpm=3)) as url:
        codes = [upload(url, B, [chat_line(1)]).status_code for _ in range(2)]
        codes.append(httpx.get(f"{url}/v1/files", headers=B, timeout=30).status_code)
        refused = upload(url, B, [chat_line(1)])
        assert codes == [200, 200, 200] and refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "rpm_exceeded" and "retry-after" in refused.headers
        assert upload(url, A, [chat_line(1)]).status_code == 200  # A has its own minute


def test_per_key_quotas_answer_429_naming_the_limit(smol_engine: EngineProcess, tmp_path: Path) -> None:
    limits = {"key_max_files": 2, "key_max_stored_bytes": 1 << 20, "key_max_open_batches": 1,
              "key_max_pending_requests": 30}
    with serve_app(gateway(smol_engine, tmp_path / "b", **limits)) as url:
        long = upload(url, B, [chat_line(i, max_tokens=32) for i in range(20)]).json()["id"]
        short = upload(url, B, [chat_line(1)]).json()["id"]
        third = upload(url, B, [chat_line(1)])
        assert third.status_code == 429 and third.json()["error"]["code"] == "quota_exceeded"
        assert third.json()["error"]["param"] == "key_max_files" and "key_max_files" in third.json()["error"]["message"]
        big = upload(url, A, [chat_line(1, padding="x" * 600_000), chat_line(2, padding="y" * 600_000)])
        assert big.status_code == 429 and big.json()["error"]["param"] == "key_max_stored_bytes"
        first = create_batch(url, B, long)
        assert first.status_code == 200
        second = create_batch(url, B, short)
        assert second.status_code == 429 and second.json()["error"]["param"] == "key_max_open_batches"
        a_file = upload(url, A, [chat_line(i) for i in range(31)]).json()["id"]
        pending = create_batch(url, A, a_file)
        assert pending.status_code == 429 and pending.json()["error"]["param"] == "key_max_pending_requests"
        httpx.post(f"{url}/v1/batches/{first.json()['id']}/cancel", headers=B, timeout=30, json={})


def test_files_expire_and_are_removed(smol_engine: EngineProcess, tmp_path: Path) -> None:
    with serve_app(gateway(smol_engine, tmp_path / "b", file_ttl_s=1.0)) as url:
        made = upload(url, A, [chat_line(1)]).json()
        assert made["expires_at"] == made["created_at"] + 1
        time.sleep(2.2)
        assert httpx.get(f"{url}/v1/files/{made['id']}", headers=A, timeout=30).status_code == 404
        assert httpx.get(f"{url}/v1/files", headers=A, timeout=30).json()["data"] == []
        upload(url, A, [chat_line(2)])  # an upload sweeps the expired files away
        assert not (tmp_path / "b" / "files" / f"{made['id']}.jsonl").exists()


def test_a_small_batch_is_not_stuck_behind_another_keys_large_one(smol_engine: EngineProcess,
                                                                   tmp_path: Path) -> None:
    with serve_app(gateway(smol_engine, tmp_path / "b", turn_s=2.0)) as url:
        large = upload(url, B, [chat_line(i, max_tokens=24) for i in range(400)]).json()["id"]
        b_batch = create_batch(url, B, large).json()
        assert wait_until(lambda: httpx.get(f"{url}/v1/batches/{b_batch['id']}", headers=B, timeout=30)
                          .json()["request_counts"]["completed"] >= 2, 120)
        began = time.monotonic()
        a_batch = create_batch(url, A, upload(url, A, [chat_line(1)]).json()["id"]).json()
        a_done = wait_batch(url, A, a_batch["id"], timeout_s=60)
        waited = time.monotonic() - began
        b_now = httpx.get(f"{url}/v1/batches/{b_batch['id']}", headers=B, timeout=30).json()
        assert a_done["status"] == "completed" and a_done["request_counts"]["completed"] == 1
        assert waited < 20, waited  # its turn came within seconds, not after B's 400 lines
        assert b_now["status"] == "in_progress", b_now["status"]
        assert wait_until(lambda: httpx.get(f"{url}/v1/batches/{b_batch['id']}", headers=B, timeout=30)
                          .json()["request_counts"]["completed"] > b_now["request_counts"]["completed"], 60)
        httpx.post(f"{url}/v1/batches/{b_batch['id']}/cancel", headers=B, timeout=30, json={})
        done = wait_batch(url, B, b_batch["id"])
        output = httpx.get(f"{url}/v1/files/{done['output_file_id']}/content", headers=B, timeout=30).text
        ids = [json.loads(line)["custom_id"] for line in output.splitlines() if line.strip()]
        assert len(ids) == len(set(ids)) == done["request_counts"]["completed"]  # turns repeat no line


def test_turns_go_round_robin_between_keys_then_between_a_keys_batches() -> None:
    """``KeyTurns`` (sans-I/O): B's four batches and A's one; each turn that ends puts its batch back. A's batch
    gets the second turn, not the fifth; B's batches take their turns in order, and no id is lost or doubled."""
    import asyncio

    from tiankong.gateway.fair_queue import KeyTurns

    async def order() -> list[str]:
        turns, served = KeyTurns(), []
        for name in ("b1", "b2", "b3", "b4"):
            turns.put("B", name)
        first = await turns.get()
        turns.put("A", "a1")  # A arrives while B's first batch runs
        served.append(first)
        turns.put("B", first)  # its turn ended: queued again behind B's others
        while not turns.empty():
            served.append(await turns.get())
        return served

    assert asyncio.run(order()) == ["b1", "a1", "b2", "b3", "b4", "b1"]


def test_a_keys_batch_runs_before_another_keys_other_open_batches(smol_engine: EngineProcess,
                                                                  tmp_path: Path) -> None:
    """Issue 46 row 3, by key: B has three open batches; A's 1-line batch, created during B's first turn, is
    answered before any of B's batches still waiting for their first turn starts (round-robin between batches
    would run each of them first)."""
    with serve_app(gateway(smol_engine, tmp_path / "b", turn_s=5.0)) as url:
        b_ids = [create_batch(url, B, upload(url, B, [chat_line(i, max_tokens=24) for i in range(150)])
                              .json()["id"]).json()["id"] for _ in range(3)]

        def b_batch(batch_id: str) -> dict[str, Any]:
            found: dict[str, Any] = httpx.get(f"{url}/v1/batches/{batch_id}", headers=B, timeout=30).json()
            return found

        assert wait_until(lambda: b_batch(b_ids[0])["request_counts"]["completed"] >= 2, 120)
        a_file = upload(url, A, [chat_line(1)]).json()["id"]
        waiting = [b for b in b_ids if b_batch(b)["status"] == "validating"]  # no turn yet
        a_batch = create_batch(url, A, a_file).json()
        a_done = wait_batch(url, A, a_batch["id"], timeout_s=300)
        assert a_done["status"] == "completed" and a_done["request_counts"]["completed"] == 1
        assert waiting, "every B batch had a turn before A arrived: the test saw nothing"
        for batch_id in waiting:
            started = b_batch(batch_id)["in_progress_at"]
            assert started is None or started >= a_done["completed_at"], (batch_id, started, a_done)
        for batch_id in b_ids:
            httpx.post(f"{url}/v1/batches/{batch_id}/cancel", headers=B, timeout=30, json={})
        for batch_id in b_ids:
            assert wait_batch(url, B, batch_id)["status"] in FINAL
