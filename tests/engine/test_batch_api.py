"""The OpenAI Batch API on the gateway (/v1/files, /v1/batches): the official openai SDK against a real gateway
on SmolLM2, key isolation, cancel, kill -9 and resume, idle-first admission, and bad input as OpenAI-shaped 4xx."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.testclient import TestClient

from conftest import TIANKONG, assert_one_line_error, free_port, pid_alive, run_cli, serve_app, wait_until
from tiankong.config import BatchesSettings
from tiankong.engine import EngineProcess
from tiankong.gateway import GatewayState, create_app
from tiankong.gateway.admission import Admission
from tiankong.gateway.keys import ApiKey, hash_key
from tiankong.gateway.preempt import Piece, continuation, finishes, joined, piece_body, preemptible, read_piece
from tiankong.models import TEST_MODEL

KEY_ONE, KEY_TWO = "batch-key-one-0123456789", "batch-key-two-0123456789"
FINAL = ("completed", "failed", "cancelled", "expired")


def chat_line(i: int, max_tokens: int = 4, **extra: Any) -> dict[str, Any]:
    body = {"model": TEST_MODEL, "messages": [{"role": "user", "content": f"Count to {i}."}], "max_tokens": max_tokens,
            "temperature": 0, **extra}
    return {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def poll(client: openai.OpenAI, batch_id: str, done: Any = lambda b: b.status in FINAL,
         timeout_s: float = 300) -> Any:
    batch = client.batches.retrieve(batch_id)
    deadline = time.monotonic() + timeout_s
    while not done(batch) and time.monotonic() < deadline:
        time.sleep(0.3)
        batch = client.batches.retrieve(batch_id)
    return batch


def lines_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture()
def keyed_gateway(smol_engine: EngineProcess, tmp_path: Path) -> Any:
    state = GatewayState.for_engine(
        smol_engine, TEST_MODEL, batches=BatchesSettings(dir=str(tmp_path / "batches")),
        api_keys=[ApiKey(hash_key(KEY_ONE), "one"), ApiKey(hash_key(KEY_TWO), "two")])
    with serve_app(state) as url:
        yield url


def test_openai_sdk_drives_the_whole_cycle(keyed_gateway: str) -> None:
    one = openai.OpenAI(base_url=keyed_gateway + "/v1", api_key=KEY_ONE, max_retries=0)
    two = openai.OpenAI(base_url=keyed_gateway + "/v1", api_key=KEY_TWO, max_retries=0)
    lines = [chat_line(i) for i in range(50)]
    lines[7]["body"]["messages"] = ["not a message"]  # runs, fails: a line of the error file
    lines[31]["body"]["temperature"] = "hot"
    uploaded = one.files.create(file=("requests.jsonl", jsonl(lines)), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(jsonl(lines))
    assert one.files.retrieve(uploaded.id).id == uploaded.id
    batch = one.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                               completion_window="24h", metadata={"run": "nightly"})
    assert batch.status == "validating" and batch.metadata == {"run": "nightly"}

    # a second key sees none of it
    with pytest.raises(openai.NotFoundError):
        two.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        two.files.content(uploaded.id)
    with pytest.raises(openai.NotFoundError):
        two.batches.cancel(batch.id)
    with pytest.raises(openai.NotFoundError):
        two.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert two.batches.list().data == [] and two.files.list().data == []

    finished = poll(one, batch.id)
    assert finished.status == "completed", finished
    assert finished.request_counts.total == 50
    assert (finished.request_counts.completed, finished.request_counts.failed) == (48, 2)
    assert finished.in_progress_at and finished.finalizing_at and finished.completed_at
    output = lines_of(one.files.content(finished.output_file_id).text)
    errors = lines_of(one.files.content(finished.error_file_id).text)
    assert sorted(o["custom_id"] for o in output) == sorted(f"req-{i}" for i in range(50) if i not in (7, 31))
    for line in output:
        assert line["response"]["status_code"] == 200 and line["error"] is None
        assert line["response"]["body"]["object"] == "chat.completion"
        assert line["response"]["body"]["choices"][0]["message"]["role"] == "assistant"
    assert {e["custom_id"]: e["line"] for e in errors} == {"req-7": 8, "req-31": 32}
    assert all(e["response"]["status_code"] == 400 and e["response"]["body"]["error"]["message"] for e in errors)
    with pytest.raises(openai.NotFoundError):
        two.files.content(finished.output_file_id)
    assert [b.id for b in one.batches.list().data] == [batch.id]
    auth = {"Authorization": f"Bearer {KEY_ONE}"}
    scraped = httpx.get(keyed_gateway + "/metrics", headers=auth).text
    assert 'tiankong_batches{status="completed"} 1.0' in scraped and "tiankong_batch_pending_requests 0.0" in scraped
    assert 'tiankong_batch_requests_total{route="/v1/chat/completions",status="200"} 48.0' in scraped
    shown = httpx.get(keyed_gateway + "/ui/stats", headers=auth).json()["batches"]
    assert shown["by_status"] == {"completed": 1} and shown["pending"] == 0 and shown["running"] is None
    assert one.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        one.files.retrieve(uploaded.id)


def test_cancel_mid_way_keeps_what_was_answered(keyed_gateway: str) -> None:
    one = openai.OpenAI(base_url=keyed_gateway + "/v1", api_key=KEY_ONE, max_retries=0)
    uploaded = one.files.create(file=("long.jsonl", jsonl([chat_line(i, max_tokens=48) for i in range(60)])),
                                purpose="batch")
    batch = one.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    running = poll(one, batch.id, lambda b: b.status in FINAL or b.request_counts.completed >= 2)
    assert running.status == "in_progress", running
    reply = one.batches.cancel(batch.id)
    assert reply.status in ("cancelling", "cancelled")
    # the counts never go back: the cancel's answer read the counts saved every 2 s (3 done → 2 done)
    assert reply.request_counts is not None and running.request_counts is not None
    assert reply.request_counts.completed >= running.request_counts.completed, (running, reply)
    cancelled = poll(one, batch.id)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at
    output = lines_of(one.files.content(cancelled.output_file_id).text)
    ids = [line["custom_id"] for line in output]
    assert 2 <= len(ids) < 60 and len(ids) == len(set(ids)) == cancelled.request_counts.completed
    assert one.batches.cancel(batch.id).status == "cancelled"  # cancelling again changes nothing
    small = one.files.create(file=("one.jsonl", jsonl([chat_line(1)])), purpose="batch")
    completed = poll(one, one.batches.create(input_file_id=small.id, endpoint="/v1/chat/completions",
                                             completion_window="24h").id)
    assert completed.status == "completed"
    with pytest.raises(openai.ConflictError):  # a finished batch cannot be cancelled
        one.batches.cancel(completed.id)
    # a cancel takes no body: a bare POST (curl -X POST …/cancel) was a 415 "POST bodies must be JSON"
    bare = httpx.post(f"{keyed_gateway}/v1/batches/{completed.id}/cancel",
                      headers={"Authorization": f"Bearer {KEY_ONE}"})
    assert bare.status_code == 409, bare.text
    framed = httpx.post(f"{keyed_gateway}/v1/batches/{completed.id}/cancel",  # from a page (a sandboxed frame):
                        headers={"Authorization": f"Bearer {KEY_ONE}", "Origin": "null"})  # held to the JSON rule
    assert framed.status_code == 415, framed.text


def test_task_lines_and_the_cli_against_a_gateway(smol_engine: EngineProcess, tmp_path: Path) -> None:
    state = GatewayState.for_engine(smol_engine, TEST_MODEL, batches=BatchesSettings(dir=str(tmp_path / "b")))
    lines = [{"custom_id": f"t{i}", "method": "POST", "url": "/v1/tasks/classify",
              "body": {"text": text, "labels": ["billing", "bug"]}}
             for i, text in enumerate(["refund my invoice", "the app crashes on start", "charged twice"])]
    lines.append({"custom_id": "bad", "method": "POST", "url": "/v1/tasks/classify",
                  "body": {"text": "x", "labels": ["only"], "colour": "red"}})
    source = tmp_path / "tasks.jsonl"
    source.write_bytes(jsonl(lines))
    with serve_app(state) as url:
        submitted = run_cli("batch", "submit", "--input", str(source), "--url", url, "--wait", "--json")
        assert submitted.returncode == 0, submitted.stderr
        batch = json.loads(submitted.stdout)
        assert batch["status"] == "completed" and batch["endpoint"] == "/v1/tasks/classify"
        out = tmp_path / "out.jsonl"
        fetched = run_cli("batch", "fetch", batch["id"], "--url", url, "--output", str(out), "--json")
        assert fetched.returncode == 0, fetched.stderr
        status = run_cli("batch", "status", batch["id"], "--url", url, "--json")
        assert json.loads(status.stdout)["request_counts"] == {"total": 4, "completed": 3, "failed": 1}
        missing = run_cli("batch", "status", "batch_0000", "--url", url)
        assert_one_line_error(missing, "404", "no batch")
        answers = {line["custom_id"]: line["response"]["body"] for line in lines_of(out.read_text())}
        assert set(answers) == {"t0", "t1", "t2"} and all(a["label"] in ("billing", "bug") for a in answers.values())
        errors = lines_of((tmp_path / "out.jsonl.errors.jsonl").read_text())
        assert [(e["custom_id"], e["line"], e["response"]["status_code"]) for e in errors] == [("bad", 4, 400)]
        # a batch without errors fetched to the same output: the first batch's error file beside it was left, and
        # read as this batch's (`batch status OUT` counted its failures)
        clean = tmp_path / "clean.jsonl"
        clean.write_bytes(jsonl(lines[:1]))
        second = json.loads(run_cli("batch", "submit", "--input", str(clean), "--url", url, "--wait",
                                    "--json").stdout)
        assert second["error_file_id"] is None
        again = run_cli("batch", "fetch", second["id"], "--url", url, "--output", str(out))
        assert again.returncode == 0 and "removed" in again.stdout, again.stderr
        assert not (tmp_path / "out.jsonl.errors.jsonl").exists() and len(lines_of(out.read_text())) == 1

    # the same file runs locally on the engine (tiankong batch run reads the same lines)
    local = run_cli("batch", "run", "--input", str(source), "--output", str(tmp_path / "local.jsonl"),
                    "--url", smol_engine.url, "--json")
    assert local.returncode == 3, local.stderr  # one line failed
    local_answers = {line["custom_id"]: line["response"]["body"]
                     for line in lines_of((tmp_path / "local.jsonl").read_text())}
    assert {k: v["label"] for k, v in local_answers.items()} == {k: v["label"] for k, v in answers.items()}


# --- kill -9 and resume ---------------------------------------------------------------------------------------


def _serve(config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([TIANKONG, "serve", "--model", TEST_MODEL, "--config", str(config), "--port", str(port),
                             "--slots", "2", "--ctx", "2048"], stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _chat_until(url: Callable[[], str], stop: threading.Event, answers: list[int], gap_s: float = 0.2) -> None:
    """Interactive traffic for the kill test: short and longer chats until ``stop``; a failure (the gateway
    killed under it) is counted as 0 and the thread goes on with whatever gateway answers next."""
    i = 0
    while not stop.is_set():
        i += 1
        try:
            answer = httpx.post(url(), timeout=60, json={
                "messages": [{"role": "user", "content": f"Tell me about the number {i}."}],
                "max_tokens": 8 if i % 2 else 40})
            answers.append(answer.status_code)
        except httpx.HTTPError:
            answers.append(0)
        stop.wait(gap_s)


def _kill_9_then_resume(tmp_path: Path, interactive: bool, sig: int = signal.SIGKILL) -> None:
    """A 60-line batch on ``tiankong serve``; the gateway killed with SIGKILL mid-batch (with ``interactive``:
    while chats make lines step aside), started again on the same folder: every line answered exactly once.
    ``sig`` SIGTERM: a clean stop, after which every line the batch counted as answered is on disk."""
    config = tmp_path / "config.toml"
    config.write_text(f'[batches]\ndir = "{tmp_path / "batches"}"\n')
    log = tmp_path / "gateway.log"
    procs: list[subprocess.Popen[bytes]] = []
    stop, answers, current = threading.Event(), list[int](), {"url": ""}
    chatters = [threading.Thread(target=_chat_until, args=(lambda: current["url"] + "/v1/chat/completions", stop,
                                                           answers), daemon=True) for _ in range(2)]
    try:
        port = free_port()
        procs.append(_serve(config, port, log))
        current["url"] = url = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: _up(url), 120), log.read_text()[-2000:]
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        lines = [chat_line(i, max_tokens=24) for i in range(60)]
        uploaded = client.files.create(file=("r.jsonl", jsonl(lines)), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
        running = poll(client, batch.id, lambda b: b.status in FINAL or b.request_counts.completed >= 6)
        assert running.status == "in_progress", running
        if interactive:
            for thread in chatters:
                thread.start()
            assert wait_until(lambda: _preemptions(url) >= 1, 120), "no batch line stepped aside for the chats"
        engines = _children(procs[0].pid)
        os.kill(procs[0].pid, sig)
        procs[0].wait(60)
        assert wait_until(lambda: not any(pid_alive(p) for p in engines), 30), "the engine outlived its gateway"
        if sig == signal.SIGTERM:  # a clean stop flushes what it counted (it had counted 5 and written 4)
            folder = tmp_path / "batches" / "batches" / batch.id
            counted = json.loads((folder / "batch.json").read_text())["request_counts"]["completed"]
            written = len(lines_of((folder / "output.jsonl").read_text()))
            assert counted <= written, (counted, written)

        port = free_port()
        current["url"] = url = f"http://127.0.0.1:{port}"  # the chats go on against the restarted gateway
        procs.append(_serve(config, port, log))
        assert wait_until(lambda: _up(url), 120), log.read_text()[-2000:]
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        if interactive:
            # batch lines run only on idle capacity: two chat threads without end starve them on a slow CPU (a CI
            # run took 608 s for the last 54 lines), so the chats stop once the restarted gateway has answered
            # two of them and resumed a line beside them; the rest of the batch runs on the idle engine
            before, done_before = len(answers), client.batches.retrieve(batch.id).request_counts.completed
            assert wait_until(lambda: answers[before:].count(200) >= 2 and
                              client.batches.retrieve(batch.id).request_counts.completed > done_before, 300), answers
            stop.set()
        finished = poll(client, batch.id, timeout_s=600)
        assert finished.status == "completed", finished
        output = lines_of(client.files.content(finished.output_file_id).text)
        ids = [line["custom_id"] for line in output]
        assert sorted(ids) == sorted(f"req-{i}" for i in range(60))  # every line, none twice
        assert finished.error_file_id is None and finished.request_counts.completed == 60
        assert all(line["response"]["status_code"] == 200 for line in output)
        assert "defect" not in log.read_text()  # the store never had to refuse a second result
        if interactive:
            assert answers.count(200) >= 2, answers  # interactive traffic really ran beside the batch
    finally:
        stop.set()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


def _preemptions(url: str) -> float:
    try:
        text = httpx.get(url + "/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith("tiankong_batch_preemptions"))


def test_kill_9_mid_batch_resumes_every_line_exactly_once(tmp_path: Path) -> None:
    _kill_9_then_resume(tmp_path, interactive=False)


def test_a_clean_stop_mid_batch_keeps_every_line_it_counted_and_resumes(tmp_path: Path) -> None:
    """SIGTERM mid-batch: the stopping gateway did not wait for the run's way out, so lines it had counted as
    answered were not written (counted 7-8, written 6 in 4 of 5 runs without the wait; 0 of 5 with it)."""
    _kill_9_then_resume(tmp_path, interactive=False, sig=signal.SIGTERM)


def test_kill_9_while_lines_step_aside_for_chats_resumes_every_line_exactly_once(tmp_path: Path) -> None:
    """Issue 44: the gateway killed while two threads of chats make batch lines step aside (a line half-answered,
    its continuation pending), restarted with the chats going on: 60 ids, each once, all 200."""
    _kill_9_then_resume(tmp_path, interactive=True)


# --- idle capacity first ------------------------------------------------------------------------------------


def test_batch_lines_take_only_slots_nobody_interactive_waits_for() -> None:
    async def go() -> list[str]:
        admission = Admission(2, 4, batch_limit=2)
        order: list[str] = []
        await admission.acquire(batch=True)
        await admission.acquire(batch=True)  # batch holds both slots of an idle engine
        assert admission.batch_in_flight == 2

        async def take(name: str, batch: bool) -> None:
            await admission.acquire(batch=batch)
            order.append(name)

        waiting = [asyncio.ensure_future(take("batch-3", True)), asyncio.ensure_future(take("chat-1", False)),
                   asyncio.ensure_future(take("batch-4", True)), asyncio.ensure_future(take("chat-2", False))]
        await asyncio.sleep(0)
        assert admission.waiting == 2 and admission.batch_waiting == 2
        admission.release(batch=True)  # one batch line ends: the first interactive request gets its slot
        await asyncio.sleep(0)
        admission.release(batch=True)
        await asyncio.sleep(0)
        assert order == ["chat-1", "chat-2"]
        admission.release()
        admission.release()
        await asyncio.gather(*waiting)
        return order

    assert asyncio.run(go()) == ["chat-1", "chat-2", "batch-3", "batch-4"]

    async def share() -> int:
        admission = Admission(4, 8, batch_limit=1)  # batches.slots = 1: three slots stay free for interactive work
        await admission.acquire(batch=True)
        blocked = asyncio.ensure_future(admission.acquire(batch=True))
        await asyncio.sleep(0)
        await admission.acquire()  # interactive still gets in at once
        assert not blocked.done()
        blocked.cancel()
        return admission.in_flight

    assert asyncio.run(share()) == 2

    async def yields() -> bool:
        admission = Admission(4, 8, batch_yields=True)  # batches.yield_to_interactive
        await admission.acquire()
        blocked = asyncio.ensure_future(admission.acquire(batch=True))
        await asyncio.sleep(0)
        held_back = not blocked.done()  # three slots free, but an interactive request is being served
        admission.release()
        await asyncio.sleep(0)
        return held_back and blocked.done() and admission.batch_in_flight == 1

    assert asyncio.run(yields())


def test_a_running_batch_line_steps_aside_for_interactive_work_and_comes_back() -> None:
    assert Admission(4, 8, preempt=True).batch_share() == 1  # lines that step aside run one at a time
    assert Admission(4, 8, preempt=True, batch_limit=4).batch_share() == 4

    async def go() -> tuple[bool, bool, int, int]:
        admission = Admission(3, 4, preempt=True, batch_limit=2)
        await admission.acquire(batch=True)  # a batch line runs on an idle engine
        arrived = asyncio.ensure_future(admission.interactive_arrived())
        await asyncio.sleep(0)
        quiet = not arrived.done()
        await admission.acquire()  # an interactive request is admitted: the line hears of it at once
        await asyncio.sleep(0)
        heard = arrived.done()
        back = asyncio.ensure_future(admission.step_aside())
        await asyncio.sleep(0)
        during = admission.batch_in_flight  # the line gave its slot back and waits
        starts = asyncio.ensure_future(admission.acquire(batch=True))  # no new line starts either
        await asyncio.sleep(0)
        assert not back.done() and not starts.done()
        admission.release()  # the interactive request ends: the line goes on
        await asyncio.gather(back, starts)
        return quiet, heard, during, admission.batch_in_flight

    assert asyncio.run(go()) == (True, True, 0, 2)

    async def cancelled() -> int:
        admission = Admission(1, 4, preempt=True)
        await admission.acquire(batch=True)
        waiting = asyncio.ensure_future(admission.acquire())  # an interactive request waits for the one slot
        await asyncio.sleep(0)
        back = asyncio.ensure_future(admission.step_aside())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert waiting.done()  # the slot the line gave back went to it
        back.cancel()  # the line's request is cancelled (deadline, shutdown) while it waits to go on
        await asyncio.gather(back, return_exceptions=True)
        admission.release(batch=True)  # the pipeline's own release for the line
        admission.release()
        return admission.in_flight

    assert asyncio.run(cancelled()) == 0


def test_preemptible_lines_and_their_continuations() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "Count."}], "max_tokens": 40}
    assert preemptible("/v1/chat/completions", chat)
    assert preemptible("/v1/completions", {"prompt": "1, 2,", "max_tokens": 9})
    for extra in ({"tools": [{"type": "function"}]}, {"response_format": {"type": "json_object"}}, {"n": 2},
                  {"logprobs": True}, {"grammar": "root ::= x"}):
        assert not preemptible("/v1/chat/completions", {**chat, **extra}), extra
    assert not preemptible("/v1/chat/completions", {**chat, "messages": [*chat["messages"],
                                                                        {"role": "assistant", "content": "1"}]})
    assert not preemptible("/v1/embeddings", {"input": "x"})
    assert continuation("/v1/chat/completions", chat, "", 0) == chat
    more = continuation("/v1/chat/completions", chat, "1, 2, 3", 5)
    assert more["messages"][-1] == {"role": "assistant", "content": "1, 2, 3"} and more["max_tokens"] == 35
    assert continuation("/v1/completions", {"prompt": "1, 2,", "n_predict": 9}, " 3,", 2) == \
        {"prompt": "1, 2, 3,", "max_tokens": 7}
    last = {"id": "b", "created": 2, "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": " 4."}}],
            "usage": {"prompt_tokens": 17, "completion_tokens": 3, "total_tokens": 20}}
    whole = joined({"id": "a", "created": 1}, last, "1, 2, 3,", 5, chat=True)
    assert whole["id"] == "a" and whole["choices"][0]["message"]["content"] == "1, 2, 3, 4."
    assert whole["usage"] == {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}


def test_a_line_at_its_budget_finishes_rather_than_stepping_aside() -> None:
    """A line closed after its last token but before its last event went on with ``max_tokens`` 1 and answered a
    token more than it allowed (CI, 2026-12-05): at or within FINISH_WITHIN tokens of its budget it reads on."""
    assert finishes(60, 60) and finishes(60, 57) and finishes(60, 61)
    assert not finishes(60, 50) and not finishes(None, 10_000)


def test_a_piece_counts_the_engines_tokens_not_its_events(smol_engine: EngineProcess) -> None:
    """llama-server sends a token that ends inside a UTF-8 character with the next one, so a Chinese answer has
    fewer events than tokens; a piece counts what the engine generated, so a line that stepped aside keeps to its
    ``max_tokens``."""
    body = {"model": TEST_MODEL, "max_tokens": 40, "temperature": 0,
            "messages": [{"role": "user", "content": "用中文介绍一下北京的历史和文化。"}]}

    async def read() -> Piece:
        piece = Piece(chat=True)
        async with httpx.AsyncClient(timeout=120) as http, http.stream(
                "POST", f"{smol_engine.url}/v1/chat/completions",
                json=piece_body("/v1/chat/completions", body, "", 0)) as engine:
            await read_piece(engine, piece)
        return piece

    piece = asyncio.run(read())
    answer = piece.assembler.result()
    assert answer["usage"]["completion_tokens"] == 40
    assert piece.tokens == 40 and piece.events < 40, (piece.tokens, piece.events)


def test_batch_lines_step_aside_and_their_answers_are_whole(smol_engine: EngineProcess, tmp_path: Path) -> None:
    """A real gateway: long batch lines run while interactive chats arrive; lines step aside (counted in /metrics
    and on the line), every custom_id is answered once, and a line that stepped aside says what an uninterrupted
    run says."""
    state = GatewayState.for_engine(smol_engine, TEST_MODEL, batches=BatchesSettings(dir=str(tmp_path / "b")))
    lines = [{"custom_id": f"long-{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": TEST_MODEL, "max_tokens": 60, "temperature": 0, "ignore_eos": True,
                       "messages": [{"role": "user",
                                     "content": f"Write every number from {i} to {i + 300}, one per line."}]}}
             for i in range(4)]
    with serve_app(state) as url:
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        upload = sdk.files.create(file=("long.jsonl", jsonl(lines)), purpose="batch")
        batch = sdk.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
        chats = 0
        while sdk.batches.retrieve(batch.id).status not in FINAL and chats < 200:
            answer = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
                "model": TEST_MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4})
            assert answer.status_code == 200, answer.text
            chats += 1
            time.sleep(0.3)
        done = poll(sdk, batch.id)
        assert done.status == "completed", done
        out = lines_of(sdk.files.content(done.output_file_id).text)
        assert sorted(line["custom_id"] for line in out) == sorted(line["custom_id"] for line in lines)
        stepped = [line for line in out if line["response"]["body"].get("tiankong", {}).get("stepped_aside")]
        metrics = httpx.get(f"{url}/metrics").text
        count = sum(float(row.split()[-1]) for row in metrics.splitlines()
                    if row.startswith("tiankong_batch_preemptions_total"))
        assert stepped and count >= len(stepped), (len(stepped), count)
        for line in stepped:
            body = line["response"]["body"]
            request = next(x["body"] for x in lines if x["custom_id"] == line["custom_id"])
            alone = httpx.post(f"{url}/v1/chat/completions", json=request, timeout=120).json()
            # whole: the same budget read to the same end as an uninterrupted run. The words themselves may differ:
            # the line was decoded beside the interactive chats, and llama.cpp's numbers depend on what shares a
            # batch — fresh-clone run 15 (benchmarks/results/fresh-clone-2026-12-05-run15.txt) saw the greedy path
            # part at the 4th token, before any step aside. A line that lost or repeated pieces at its seam, or went
            # on with a budget of 1, has another token count or end.
            # With ignore_eos both run to the budget: a path that parts from the uninterrupted one cannot stop at
            # another point (the Q4_0 test model stopped at 57 vs 36 tokens on "List the numbers from 1 to 41", and
            # before 60 even when asked for 300 numbers: fresh-clone run 27,
            # benchmarks/results/fresh-clone-2026-12-06-run27.txt).
            assert body["choices"][0]["finish_reason"] == alone["choices"][0]["finish_reason"] == "length"
            assert body["usage"]["completion_tokens"] == alone["usage"]["completion_tokens"] == 60
            assert body["choices"][0]["message"]["content"].strip()


# --- bad input ------------------------------------------------------------------------------------------------


@pytest.fixture()
def offline(tmp_path: Path) -> Any:
    """A gateway whose engine is a closed port: uploads and batch creation never reach it."""
    state = GatewayState(upstream_url="http://127.0.0.1:9", model_name="m", engine_retry_wait_s=0,
                         batches=BatchesSettings(dir=str(tmp_path), max_file_bytes=4096, max_requests=5,
                                                 engine_wait_s=0),
                         api_keys=[ApiKey(hash_key(KEY_ONE), "one"), ApiKey(hash_key(KEY_TWO), "two")])
    with TestClient(create_app(state), base_url="http://127.0.0.1") as http:
        yield http


def _upload(http: TestClient, data: bytes, key: str = KEY_ONE) -> httpx.Response:
    return http.post("/v1/files", files={"file": ("r.jsonl", data)}, data={"purpose": "batch"},
                     headers={"Authorization": f"Bearer {key}"})


def _error(answer: httpx.Response, status: int, *needles: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["message"] and error["type"]
    for needle in needles:
        assert needle in error["message"], error
    return dict(error)


def test_bad_uploads_name_their_lines(offline: TestClient) -> None:
    good = chat_line(1)
    bad = jsonl([good])[:-1] + b"\n{not json\n" + jsonl([{**chat_line(2), "url": "/v1/images"}])
    error = _error(_upload(offline, bad), 400, "line 2", "line 3", "/v1/images")
    assert error["param"] == "file"
    _error(_upload(offline, jsonl([chat_line(1), chat_line(2), chat_line(1)])), 400, "line 3", "line 1", "req-1")
    _error(_upload(offline, jsonl([{**chat_line(1), "method": "GET"}])), 400, "line 1", "POST")
    _error(_upload(offline, jsonl([chat_line(1, stream=True)])), 400, "stream")
    _error(_upload(offline, jsonl([chat_line(i) for i in range(6)])), 400, "at most 5")
    _error(_upload(offline, b"x" * 5000), 413, "4096")
    _error(_upload(offline, b"\n\n"), 400, "no request lines")
    refused = offline.post("/v1/files", files={"file": ("r.jsonl", jsonl([good]))}, data={"purpose": "fine-tune"},
                           headers={"Authorization": f"Bearer {KEY_ONE}"})
    _error(refused, 400, "purpose")
    _error(offline.post("/v1/files", files={"file": ("r.jsonl", jsonl([good]))}), 401)


def test_bad_batches_are_openai_shaped_4xx(offline: TestClient) -> None:
    auth = {"Authorization": f"Bearer {KEY_ONE}"}
    file_id = _upload(offline, jsonl([chat_line(1), chat_line(2)])).json()["id"]
    create = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    assert _error(offline.post("/v1/batches", json={**create, "endpoint": "/v1/images"}, headers=auth), 400,
                  "/v1/images")["param"] == "endpoint"
    _error(offline.post("/v1/batches", json={**create, "endpoint": "/v1/embeddings"}, headers=auth), 400,
           "/v1/chat/completions")
    _error(offline.post("/v1/batches", json={**create, "completion_window": "2d"}, headers=auth), 400, "2d")
    _error(offline.post("/v1/batches", json={**create, "priority": "high"}, headers=auth), 400, "priority")
    _error(offline.post("/v1/batches", json={**create, "metadata": {"k": 1}}, headers=auth), 400, "metadata")
    _error(offline.post("/v1/batches", json={**create, "input_file_id": "file-nope"}, headers=auth), 404)
    _error(offline.post("/v1/batches", json=create, headers={"Authorization": f"Bearer {KEY_TWO}"}), 404, file_id)
    _error(offline.get("/v1/batches/batch_nope", headers=auth), 404)
    _error(offline.get("/v1/batches?limit=500", headers=auth), 400, "limit")
    _error(offline.get("/v1/files/../../etc/passwd", headers=auth), 404)

    pages = [offline.post("/v1/batches", json=create, headers=auth).json()["id"] for _ in range(3)]
    first = offline.get("/v1/batches?limit=2", headers=auth).json()
    assert first["has_more"] and [b["id"] for b in first["data"]] == pages[::-1][:2]
    rest = offline.get(f"/v1/batches?limit=2&after={first['last_id']}", headers=auth).json()
    assert not rest["has_more"] and [b["id"] for b in rest["data"]] == pages[:1]


def test_cli_submit_errors_are_one_line(tmp_path: Path) -> None:
    missing = run_cli("batch", "submit", "--input", str(tmp_path / "none.jsonl"), "--url", "http://127.0.0.1:9")
    assert_one_line_error(missing, "no input file")
    source = tmp_path / "r.jsonl"
    source.write_bytes(jsonl([chat_line(1)]))
    unreachable = run_cli("batch", "submit", "--input", str(source), "--url", "http://127.0.0.1:9")
    assert_one_line_error(unreachable, "cannot reach")


def test_a_batch_past_its_window_expires_with_an_error_line_per_request(tmp_path: Path) -> None:
    """A gateway that comes back after a batch's completion window ended: the batch becomes expired, and every
    request that never ran gets an error line ``batch_expired`` (as OpenAI writes them)."""
    def gateway() -> TestClient:
        state = GatewayState(upstream_url="http://127.0.0.1:9", model_name="m",
                             batches=BatchesSettings(dir=str(tmp_path), engine_wait_s=3600,
                                                     completion_windows=["24h", "1h"]))
        return TestClient(create_app(state), base_url="http://127.0.0.1")

    with gateway() as http:  # the engine is down: the batch waits in progress
        lines = [chat_line(i) for i in range(3)]
        for line in lines:
            line["body"]["model"] = "m"  # the served model, whose engine is down
        # a byte-order mark and a blank line, as editors leave them: the upload refused the first, and the expiry
        # failed on the second (an internal error, no error lines)
        content = jsonl(lines).split(b"\n", 1)
        uploaded = _upload(http, b"\xef\xbb\xbf" + content[0] + b"\n\n" + content[1])
        assert uploaded.status_code == 200, uploaded.text
        file_id = uploaded.json()["id"]
        batch = http.post("/v1/batches", json={"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                               "completion_window": "1h"}).json()
        assert wait_until(lambda: http.get(f"/v1/batches/{batch['id']}").json()["status"] == "in_progress", 30)
        refused = http.delete(f"/v1/files/{file_id}")  # its batch still reads it
        assert refused.status_code == 409 and batch["id"] in refused.json()["error"]["message"]
    record_file = tmp_path / "batches" / batch["id"] / "batch.json"
    record = json.loads(record_file.read_text())
    record["expires_at"] = int(time.time()) - 1  # the gateway stayed down past the window
    record_file.write_text(json.dumps(record))
    with gateway() as http:
        assert wait_until(lambda: http.get(f"/v1/batches/{batch['id']}").json()["status"] == "expired", 30)
        expired = http.get(f"/v1/batches/{batch['id']}").json()
        assert expired["expired_at"] and expired["request_counts"] == {"total": 3, "completed": 0, "failed": 3}
        errors = lines_of(http.get(f"/v1/files/{expired['error_file_id']}/content").text)
        assert sorted(e["custom_id"] for e in errors) == ["req-0", "req-1", "req-2"]
        assert sorted(e["line"] for e in errors) == [1, 3, 4]  # the file's own line numbers
        assert {e["error"]["code"] for e in errors} == {"batch_expired"}
        assert http.get(f"/v1/files/{expired['output_file_id']}/content").text == ""


def test_a_keyless_gateway_refuses_uploads_from_web_pages(tmp_path: Path) -> None:
    state = GatewayState(upstream_url="http://127.0.0.1:9", model_name="m", batches=BatchesSettings(dir=str(tmp_path)))
    with TestClient(create_app(state), base_url="http://127.0.0.1") as http:
        for origin in ("null", "http://127.0.0.1:3000", "https://evil.example"):  # a form POST needs no preflight
            answer = http.post("/v1/files", files={"file": ("r.jsonl", jsonl([chat_line(1)]))},
                               data={"purpose": "batch"}, headers={"Origin": origin})
            assert answer.status_code == 403 and answer.json()["error"]["code"] == "origin_not_allowed", origin
        assert _upload(http, jsonl([chat_line(1)])).status_code == 200  # a client (no Origin) may upload


def test_a_gateway_deadline_is_a_line_error_not_an_outage() -> None:
    from tiankong.batch.engines import unreachable
    from tiankong.errors import ServerError

    deadline = ServerError(504, "request deadline of 600 s passed", body=json.dumps(
        {"error": {"message": "request deadline of 600 s passed", "code": "deadline_exceeded"}}))
    assert not unreachable(deadline)  # the line fails with its answer instead of being retried for ever
    assert unreachable(ServerError(504, "gateway timeout", body="<html>proxy</html>"))
    assert unreachable(ServerError(503, "loading", body=json.dumps({"error": {"code": "engine_unavailable"}})))
