"""Client and AsyncClient against the real engine: same names, real answers, clear errors."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import free_port, pid_alive
from tiankong import AsyncClient, Client
from tiankong.engine import EngineProcess
from tiankong.errors import ConfigError, InputTooLong, ModelNotInstalled, ServerError, TransportError
from tiankong.models import TEST_MODEL


def public_methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}


def test_sync_and_async_clients_have_the_same_methods() -> None:
    assert public_methods(Client) == public_methods(AsyncClient)
    for name in public_methods(Client) - {"close"}:
        assert list(inspect.signature(getattr(Client, name)).parameters) == list(
            inspect.signature(getattr(AsyncClient, name)).parameters
        ), name


def test_chat_stream_tokenize_against_engine(smol_engine: EngineProcess) -> None:
    with Client(smol_engine.url) as client:
        result = client.chat("Name one colour.", max_tokens=16)
        assert result.text.strip() and result.finish_reason in ("stop", "length")
        assert result.usage.prompt_tokens > 0 and 0 < result.usage.completion_tokens <= 16
        assert "predicted_per_second" in result.timings
        chunks = list(client.stream_chat("Name one colour.", max_tokens=16))
        assert len(chunks) > 1 and chunks[-1].finish_reason in ("stop", "length")
        assert "".join(c.text for c in chunks) == result.text  # temperature 0, fixed seed
        tokens = client.tokenize("hello world")
        assert tokens and client.detokenize(tokens).strip() == "hello world"
        completion = client.complete("1, 2, 3, 4,", max_tokens=6)
        assert completion.text and completion.usage.completion_tokens > 0
        assert client.health()["status"] == "ok"


def test_logprobs_and_grammar_extensions(smol_engine: EngineProcess) -> None:
    with Client(smol_engine.url) as client:
        result = client.chat("Is the sky blue? Answer yes or no.", max_tokens=3, logprobs=3,
                             grammar='root ::= "yes" | "no"')
        assert result.text in ("yes", "no")
        assert result.logprobs and len(result.logprobs[0]["top_logprobs"]) == 3


def test_async_client_runs_requests_concurrently(smol_engine: EngineProcess) -> None:
    async def main() -> list[str]:
        async with AsyncClient(smol_engine.url) as client:
            results = await asyncio.gather(*[client.chat(f"Count to {n}.", max_tokens=8) for n in range(4)])
            streamed = [c.text async for c in client.stream_chat("Say hi.", max_tokens=8)]
            assert streamed and await client.tokenize("hi")
            return [r.text for r in results]

    texts = asyncio.run(main())
    assert len(texts) == 4 and all(texts)


def test_embedded_engine_starts_and_stops_with_the_client() -> None:
    client = Client(model="smollm2", slots=1, ctx=1024)
    assert client.engine is not None
    pid = client.engine.pid
    assert pid is not None
    assert client.chat("Hi", max_tokens=4).usage.completion_tokens > 0
    assert client.models()
    client.close()
    assert not pid_alive(pid)


def test_a_dropped_client_stops_its_engine_when_collected() -> None:
    """A client dropped without close() left its llama-server running until the interpreter exited."""
    import gc

    from conftest import wait_until

    client = Client(model=TEST_MODEL, slots=1, ctx=1024)
    assert client.engine is not None
    pid = client.engine.pid
    del client
    gc.collect()
    assert pid is not None and wait_until(lambda: not pid_alive(pid), timeout_s=30)

    async def started() -> int | None:
        dropped = AsyncClient(model=TEST_MODEL, slots=1, ctx=1024)
        await dropped.tokenize("hi")
        assert dropped.engine is not None
        return dropped.engine.pid

    async_pid = asyncio.run(started())
    gc.collect()
    assert async_pid is not None and wait_until(lambda: not pid_alive(async_pid), timeout_s=30)


def test_engine_arguments_a_server_client_would_ignore_are_refused() -> None:
    """`Client(url, slots=8)` (ctx, embeddings, llama_server) was taken without a word; `max_connections` was
    AsyncClient's only, and 0 blocked every call for timeout_s."""
    url = "http://127.0.0.1:9"
    for given in ({"slots": 8}, {"ctx": 8192}, {"embeddings": True}, {"llama_server": "/x"}, {"adapters": ["a"]}):
        for cls in (Client, AsyncClient):
            with pytest.raises(ConfigError, match=f"{next(iter(given))}="):
                cls(url, **given)  # type: ignore[arg-type]
    for bad in (0, -1, "x"):
        for cls in (Client, AsyncClient):
            with pytest.raises(ConfigError, match="max_connections"):
                cls(url, max_connections=bad)  # type: ignore[arg-type]
    assert list(inspect.signature(Client).parameters) == [
        name for name in inspect.signature(AsyncClient).parameters]


def test_async_embedded_engine() -> None:
    async def main() -> int | None:
        async with AsyncClient(model=TEST_MODEL, slots=1, ctx=1024) as client:
            assert client.engine is not None
            pid = client.engine.pid
            assert (await client.chat("Hi", max_tokens=4)).text is not None
        return pid

    pid = asyncio.run(main())
    assert pid is not None and not pid_alive(pid)


def test_an_embedded_engine_outlives_the_thread_that_started_it() -> None:
    """PR_SET_PDEATHSIG follows the forking *thread*: an AsyncClient used from one ``asyncio.run`` after another
    (its engine was started in the first loop's executor thread) and a Client built in a worker thread lost their
    engine when that thread ended (docs/client.md promises the first)."""
    client = AsyncClient(model=TEST_MODEL, slots=1, ctx=1024)

    async def one() -> str | None:
        return (await client.chat("Hi", max_tokens=4)).text

    try:
        assert asyncio.run(one()) is not None
        assert client.engine is not None and client.engine.pid is not None
        pid = client.engine.pid
        assert asyncio.run(one()) is not None  # a second event loop: the first loop's threads are gone
        assert client.engine.pid == pid  # the same process: not killed and restarted
    finally:
        asyncio.run(client.close())
    built: list[Client] = []
    thread = threading.Thread(target=lambda: built.append(Client(model=TEST_MODEL, slots=1, ctx=1024)))
    thread.start()
    thread.join()
    with built[0] as sync_client:
        assert sync_client.engine is not None
        pid = sync_client.engine.pid
        assert sync_client.chat("Hi", max_tokens=4).text is not None and sync_client.engine.pid == pid


def test_a_client_follows_its_embedded_engine_through_a_crash_and_restart() -> None:
    """The watchdog restarts a killed engine on a new port; both clients sent every later request to the old
    one ("cannot reach … pass model=") for good. A request sent after the crash waits for the restart; one in
    flight when the engine dies is not sent again (it may be what crashed it)."""
    with Client(model=TEST_MODEL, slots=1, ctx=1024) as client:
        assert client.engine is not None and client.engine.pid is not None
        assert client.chat("Hi", max_tokens=2).text is not None
        os.kill(client.engine.pid, signal.SIGKILL)
        time.sleep(0.5)  # dead, and likely not restarted yet: the request meets the crash (refused or reset)
        assert client.chat("Hi", max_tokens=2).text is not None  # waits for the restart, sent once more
        assert client.url == client.engine.url
        # killed while answering: this request may be what crashed it, so it is not sent again
        pid, killer = client.engine.pid, threading.Timer(1.0, lambda: os.kill(pid, signal.SIGKILL))
        assert pid is not None
        killer.start()
        with pytest.raises(TransportError):
            client.chat("Write a long story about a cat.", max_tokens=400, extra={"ignore_eos": True})
        killer.join()
        time.sleep(0.5)  # the killed process is seen dead (its sockets reset a moment before it is reaped)
        assert client.chat("Hi", max_tokens=2).text is not None and client.engine.pid != pid

    async def main() -> None:
        async with AsyncClient(model=TEST_MODEL, slots=1, ctx=1024) as aclient:
            assert (await aclient.chat("Hi", max_tokens=2)).text is not None
            assert aclient.engine is not None and aclient.engine.pid is not None
            os.kill(aclient.engine.pid, signal.SIGKILL)
            await asyncio.sleep(0.5)  # as above: the request meets the crash and waits for the restart
            assert (await aclient.chat("Hi", max_tokens=2)).text is not None
            assert aclient.url == aclient.engine.url

    asyncio.run(main())


def _my_engines() -> set[int]:
    """The pids of the llama-server processes this test process started."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if proc.name.isdigit() and "(llama-server)" in stat and int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
            found.add(int(proc.name))
    return found


def test_an_async_call_given_up_while_its_engine_starts_leaves_no_engine_behind() -> None:
    """``wait_for(chat, 0.5)`` while the embedded engine was starting: the engine came up with no owner —
    close() stopped nothing, a second call would have started a second engine."""
    before = _my_engines()

    async def main(close_at_once: bool) -> None:
        client = AsyncClient(model=TEST_MODEL, slots=1, ctx=1024)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.chat("Hi", max_tokens=2), 0.2)
        if not close_at_once:  # the next call uses the engine the first one started: one engine
            assert (await client.chat("Hi", max_tokens=2)).text is not None
            assert len(_my_engines() - before) == 1
        await client.close()

    for close_at_once in (False, True):
        asyncio.run(main(close_at_once))
        deadline = time.monotonic() + 30  # closed while starting: its start stops it once it is up
        while _my_engines() - before and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _my_engines() - before, close_at_once


def test_errors_are_typed_and_name_the_fix(smol_engine: EngineProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIANKONG_URL", raising=False)
    with pytest.raises(ConfigError, match="TIANKONG_URL"):
        Client()
    with pytest.raises(TransportError, match="tiankong serve"):
        Client(f"http://127.0.0.1:{free_port()}", timeout_s=5).chat("hi")
    with Client(smol_engine.url) as client, pytest.raises(ServerError) as err:
        client.chat("hi", max_tokens=4, grammar='root ::= "yes')  # a grammar that does not parse
    assert err.value.status == 400 and "grammar" in str(err.value)


def test_model_not_installed_names_the_pull_command(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TIANKONG_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("TIANKONG_URL", raising=False)
    with pytest.raises(ModelNotInstalled, match=f"tiankong models pull {TEST_MODEL}"):
        Client(model="smollm2")


def test_env_url_is_used(smol_engine: EngineProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIANKONG_URL", smol_engine.url + "/v1")
    with Client() as client:
        assert client.url == smol_engine.url
        assert client.chat("Hi", max_tokens=2).usage.completion_tokens > 0


def test_embeddings_from_an_engine_started_with_them(engine_binary, smol_path) -> None:  # type: ignore[no-untyped-def]
    from tiankong.engine import EngineConfig

    config = EngineConfig(model=smol_path, ctx=1024, slots=1, embeddings=True)
    with EngineProcess(config, engine_binary) as engine, Client(engine.url) as client:
        vectors = client.embed(["hello world", "bonjour le monde"])
        assert len(vectors) == 2 and len(vectors[0]) == 576 and len(vectors[0]) == len(vectors[1])
        assert any(abs(x) > 0 for x in vectors[0])
        # longer than the engine embeds at once: the caller's to shorten (it was a ServerError, HTTP 500)
        with pytest.raises(InputTooLong, match="tokens"):
            client.embed("word " * 3000)
