"""Issue 43: draft then replace on the gateway (``[cascade]``), with real engines: SmolLM2-135M drafts,
Qwen2.5-Coder-0.5B is the quality model.

Opt-out clients get the quality model's answer exactly as a gateway serving it alone gives it (temperature 0);
opted-in streams are draft chunks, one replace, quality chunks; the non-streamed answer carries both texts; a
quality model that fails leaves the draft as the final answer with a warning; a client that leaves frees both
engines' slots; bad input is a clear 400; the /ui playground shows the draft and then the answer in Chromium."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_gateway_dashboard import CHROMIUM, DevTools

from conftest import serve_app, wait_until
from tiankong import AsyncClient, Client
from tiankong.config import CascadeSettings, TiankongConfig
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.engine.pool import EnginePool, PoolEntry, Replica
from tiankong.gateway import GatewayState

PROMPT = "Write two sentences about why the sky is blue."
CHAT = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 24, "temperature": 0}
CASCADE = CascadeSettings(draft_model="draft", quality_model="quality")


def engine(binary: EngineBinary, path: Path, alias: str) -> EngineProcess:
    return EngineProcess(EngineConfig(model=path, ctx=2048, slots=2, threads=1, alias=alias), binary)


@pytest.fixture(scope="module")
def engines(engine_binary: EngineBinary, smol_path: Path,
            default_model_path: Path) -> Iterator[tuple[EngineProcess, EngineProcess]]:
    draft, quality = engine(engine_binary, smol_path, "draft"), engine(engine_binary, default_model_path, "quality")
    try:
        draft.start()
        quality.start()
        yield draft, quality
    finally:
        draft.stop()
        quality.stop()


def cascade_state(draft: EngineProcess, quality: Replica, **settings: Any) -> GatewayState:
    pool = EnginePool([PoolEntry("draft", [Replica("draft#0", draft)], on_demand=False),
                       PoolEntry("quality", [quality], on_demand=False)])
    return GatewayState(model_name="draft", pool=pool, cascade=CASCADE, **settings)


@pytest.fixture(scope="module")
def gateways(engines: tuple[EngineProcess, EngineProcess]) -> Iterator[tuple[str, str, GatewayState]]:
    """(the cascade gateway, a gateway serving the quality model alone, the cascade gateway's state)."""
    draft, quality = engines
    state = cascade_state(draft, Replica("quality#0", quality))
    alone = GatewayState(model_name="quality", pool=EnginePool.of_engine(quality, "quality"))
    with serve_app(state) as url, serve_app(alone) as alone_url:
        yield url, alone_url, state


def chat(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)


def content(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    return str(answer.json()["choices"][0]["message"]["content"])


def sse_events(url: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(event name or "", data) of every SSE event of a streamed chat."""
    events: list[tuple[str, str]] = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=300) as answer:
        assert answer.status_code == 200, answer.read()
        name = ""
        for line in answer.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, line[6:]))
                name = ""
    return events


def streamed_text(events: list[tuple[str, str]]) -> str:
    pieces = []
    for _, data in events:
        if data != "[DONE]":
            for choice in json.loads(data).get("choices") or []:
                pieces.append((choice.get("delta") or {}).get("content") or "")
    return "".join(pieces)


def test_the_config_takes_a_cascade_section() -> None:
    config = TiankongConfig.model_validate({"cascade": {"draft_model": "small", "quality_model": "large"}})
    assert config.cascade.enabled and config.cascade.quality_model == "large"
    for bad in ({"draft_model": "small"}, {"draft_model": "same", "quality_model": "same"}, {"draft": "x"}):
        with pytest.raises(ValueError):
            TiankongConfig.model_validate({"cascade": bad})


def test_opt_out_gets_exactly_the_quality_answer(gateways: tuple[str, str, GatewayState]) -> None:
    url, alone, _ = gateways
    expected = content(chat(alone, CHAT))
    answer = chat(url, CHAT)  # no model named: the quality model (the cascade's default), no draft
    assert content(answer) == expected and answer.json()["model"] == "quality"
    assert "tiankong" not in answer.json()
    events = sse_events(url, CHAT)
    assert [name for name, _ in events if name] == [] and events[-1][1] == "[DONE]"
    assert streamed_text(events) == streamed_text(sse_events(alone, CHAT)) == expected


def test_opt_in_streams_the_draft_then_one_replace_then_the_quality_answer(
        gateways: tuple[str, str, GatewayState]) -> None:
    url, alone, _ = gateways
    expected = content(chat(alone, CHAT))
    events = sse_events(url, {**CHAT, "tiankong": {"draft": True}})
    names = [name for name, _ in events]
    assert names.count("replace") == 1 and [d for _, d in events].count("[DONE]") == 1, names
    cut = names.index("replace")
    draft, replace, quality = events[:cut], json.loads(events[cut][1]), events[cut + 1:]
    assert streamed_text(draft), "no draft text before the replace"
    assert replace["object"] == "tiankong.replace" and replace["tiankong"]["draft_tokens"] >= 1
    assert replace["tiankong"]["draft_model"] == "draft" and replace["tiankong"]["quality_model"] == "quality"
    assert streamed_text(quality) == expected and quality[-1][1] == "[DONE]"

    with Client(url=url) as client:  # the client's side: phases in order, the same final text
        chunks = list(client.stream_chat(PROMPT, draft=True, max_tokens=24))
    phases = [c.phase for c in chunks]
    cut = phases.index("replace")
    assert set(phases[:cut]) == {"draft"} and set(phases[cut + 1:]) == {""} and phases.count("replace") == 1
    assert "".join(c.text for c in chunks[:cut]) and "".join(c.text for c in chunks[cut + 1:]) == expected

    async def streamed() -> list[tuple[str, str]]:
        async with AsyncClient(url=url) as client:
            return [(c.phase, c.text) async for c in client.stream_chat(PROMPT, draft=True, max_tokens=24)]

    pairs = asyncio.run(streamed())  # the async client: the same order, the same answer
    cut = [phase for phase, _ in pairs].index("replace")
    assert {phase for phase, _ in pairs[:cut]} == {"draft"} and "".join(t for _, t in pairs[cut + 1:]) == expected


LONG = {"messages": [{"role": "user", "content": "Count from 1 to 300, separated by commas."}], "max_tokens": 160,
        "temperature": 0, "tiankong": {"draft": True}}


def draft_part(events: list[tuple[str, str]]) -> list[dict[str, Any]]:
    cut = [name for name, _ in events].index("replace")
    return [json.loads(data) for _, data in events[:cut]]


def finished(chunks: list[dict[str, Any]]) -> bool:
    return any(choice.get("finish_reason") for chunk in chunks for choice in chunk.get("choices") or [])


def test_quality_starts_at_the_draft_end_when_configured(engines: tuple[EngineProcess, EngineProcess],
                                                         gateways: tuple[str, str, GatewayState]) -> None:
    # a long draft (SmolLM2 counting, 160 tokens, several seconds on one thread) against a short quality prompt
    # (Qwen-0.5B's first token in well under a second on one thread): at the draft's first token (the default)
    # the quality answer's first token cuts the draft short; at the draft's end it runs to its finish_reason
    draft, quality = engines
    url, _, _ = gateways
    cut_short = draft_part(sse_events(url, LONG))
    assert not finished(cut_short), "the default schedule let the draft run to its end"
    settings = CascadeSettings(draft_model="draft", quality_model="quality", quality_starts="draft_end")
    pool = EnginePool([PoolEntry("draft", [Replica("draft#0", draft)], on_demand=False),
                       PoolEntry("quality", [Replica("quality#0", quality)], on_demand=False)])
    with serve_app(GatewayState(model_name="draft", pool=pool, cascade=settings)) as after:
        events = sse_events(after, LONG)
        whole = draft_part(events)
        assert finished(whole), "the draft was cut although the quality request waits for its end"
        names = [name for name, _ in events]
        assert names.count("replace") == 1 and events[-1][1] == "[DONE]"
        assert streamed_text(events[names.index("replace") + 1:]), "no quality answer after the replace"
        answer = chat(after, LONG)  # not streamed: both texts all the same
        assert answer.status_code == 200 and answer.json()["tiankong"]["draft"]["content"]


def test_opt_in_not_streamed_gives_both_texts(gateways: tuple[str, str, GatewayState]) -> None:
    url, alone, _ = gateways
    expected = content(chat(alone, CHAT))
    answer = chat(url, {**CHAT, "tiankong": {"draft": True}})
    assert content(answer) == expected
    extension = answer.json()["tiankong"]
    assert extension["replace"] is True and extension["draft"]["model"] == "draft"
    assert isinstance(extension["draft"]["content"], str) and extension["draft"]["content"]


def test_metrics_count_drafts_replacements_and_wasted_tokens(gateways: tuple[str, str, GatewayState]) -> None:
    url, _, _ = gateways
    sse_events(url, {**CHAT, "tiankong": {"draft": True}})
    text = httpx.get(f"{url}/metrics", timeout=30).text
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line.startswith("tiankong_cascade_")}
    assert values["tiankong_cascade_replacements_total"] >= 1
    assert values["tiankong_cascade_wasted_draft_tokens_total"] >= 1
    assert values["tiankong_cascade_draft_ttft_seconds_count"] >= 1
    assert values["tiankong_cascade_quality_ttft_seconds_count"] >= 1
    assert values["tiankong_cascade_quality_ttft_seconds_sum"] > 0


def test_bad_input_is_a_clear_400(gateways: tuple[str, str, GatewayState],
                                  engines: tuple[EngineProcess, EngineProcess]) -> None:
    url, alone, _ = gateways
    refused = chat(alone, {**CHAT, "tiankong": {"draft": True}})  # no [cascade] on this gateway
    assert refused.status_code == 400 and "[cascade]" in refused.json()["error"]["message"]
    for body, param in (({**CHAT, "n": 2}, "n"), ({**CHAT, "model": "draft"}, "model"),
                        ({**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools")):
        answer = chat(url, {**body, "tiankong": {"draft": True}})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
    for option in ("yes", {"draft": "yes"}, {"draft": True, "other": 1}):
        answer = chat(url, {**CHAT, "tiankong": option})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "tiankong", answer.text


def test_a_failing_quality_model_leaves_the_draft_final_with_a_warning(
        engines: tuple[EngineProcess, EngineProcess]) -> None:
    draft, _ = engines
    dead = Replica("quality@upstream", remote_url="http://127.0.0.1:9")  # nothing listens there
    with serve_app(cascade_state(draft, dead, engine_retry_wait_s=0)) as url:
        events = sse_events(url, {**CHAT, "tiankong": {"draft": True}})
        names = [name for name, _ in events]
        assert "replace" not in names and names.count("final") == 1 and events[-1][1] == "[DONE]", names
        final = json.loads(events[names.index("final")][1])
        assert final["tiankong"]["final"] == "draft" and "quality model failed" in final["tiankong"]["warning"]
        assert streamed_text(events[:names.index("final")]) == final["tiankong"]["content"] != ""

        answer = chat(url, {**CHAT, "tiankong": {"draft": True}})
        assert answer.json()["tiankong"]["final"] == "draft" and content(answer)  # never an empty answer


def test_a_draft_that_cannot_be_routed_is_replaced_all_the_same(engines: tuple[EngineProcess, EngineProcess],
                                                                engine_binary: EngineBinary,
                                                                smol_path: Path) -> None:
    """A draft model whose engine could not take the request (stopped, the pool full) failed the whole opt-in with
    its 503, where cascade.md says a failed draft is replaced all the same (draft_tokens 0, a warning)."""
    _, quality = engines
    stopped = engine(engine_binary, smol_path, "draft")  # never started
    with serve_app(cascade_state(stopped, Replica("quality#0", quality))) as url:
        answer = chat(url, {**CHAT, "tiankong": {"draft": True}})
        assert content(answer) and "draft model failed" in answer.json()["tiankong"]["warning"]
        assert answer.json()["tiankong"]["draft_model"] == "draft"
        events = sse_events(url, {**CHAT, "tiankong": {"draft": True}})
        assert events[-1][1] == "[DONE]" and streamed_text(events)
        assert any("draft model failed" in data for _, data in events), events


def slots_busy(engine: EngineProcess) -> int:
    slots = httpx.get(f"{engine.url}/slots", timeout=30).json()
    return sum(1 for slot in slots if slot.get("is_processing"))


def predicted(engine: EngineProcess) -> float:
    """The engine's ``llamacpp:tokens_predicted_total`` (every task's tokens, a cancelled one's included)."""
    lines = httpx.get(f"{engine.url}/metrics", timeout=30).text.splitlines()
    return float(next(line.split()[1] for line in lines if line.startswith("llamacpp:tokens_predicted_total")))


def test_a_client_that_leaves_cancels_both_requests(gateways: tuple[str, str, GatewayState],
                                                    engines: tuple[EngineProcess, EngineProcess]) -> None:
    url, alone, state = gateways
    long = {**CHAT, "max_tokens": 400, "stream": True, "tiankong": {"draft": True},
            "messages": [{"role": "user", "content": "Count from 1 to 300, one number per line."}]}
    # the quality model's whole answer to it, alone: what a request nobody stopped decodes
    whole = chat(alone, {**{k: v for k, v in long.items() if k != "tiankong"}, "stream": False})
    assert whole.status_code == 200, whole.text
    whole_tokens = whole.json()["usage"]["completion_tokens"]
    assert whole_tokens >= 100  # long enough to tell a request stopped at the client's leaving from a finished one
    before = predicted(engines[1])
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=long, timeout=300) as answer:
        lines = answer.iter_lines()
        assert any(line.startswith("data: {") and '"content":"' in line for line in lines)  # a draft token came
        assert wait_until(lambda: state.router.handles["quality#0"].admission.in_flight == 1, 120)  # both running
    lanes = [state.router.handles["draft#0"], state.router.handles["quality#0"]]
    assert wait_until(lambda: all(lane.admission.in_flight == 0 for lane in lanes), 60)
    assert wait_until(lambda: all(slots_busy(e) == 0 for e in engines), 60)  # the engines stopped too
    # stopped, not run to its end: the quality engine decoded a fraction of the whole answer (a gateway that only
    # let go of the request once it finished passes the waits above, and fails here)
    assert predicted(engines[1]) - before < whole_tokens / 2


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                    reason="no chromium binary (Debian: apt-get install -y chromium)")
def test_playground_shows_the_draft_then_replaces_it_in_headless_chromium(
        gateways: tuple[str, str, GatewayState], tmp_path: Path) -> None:
    url, alone, _ = gateways
    expected = content(chat(alone, {**CHAT, "max_tokens": 256}))
    browser = DevTools(tmp_path / "profile")
    try:
        browser.send("Page.enable")
        browser.send("Page.navigate", url=f"{url}/ui")
        assert browser.wait_for("document.querySelectorAll('#pg-model option').length >= 2")
        # every text the output box is given, one record per change (a text set and replaced within one task is
        # still seen: a mutation record's added nodes), with the state it had when the change was observed
        browser.evaluate("window.seen = []; const out = document.getElementById('pg-output');"
                         "new MutationObserver((records) => records.forEach((r) => { if (r.type === 'childList')"
                         " seen.push([out.dataset.state, Array.from(r.addedNodes).map((n) => n.textContent)"
                         ".join('')]); })).observe(out, {childList: true});"
                         f"document.getElementById('pg-input').value = {json.dumps(PROMPT)};"
                         "document.getElementById('pg-draft').checked = true;"
                         "document.getElementById('pg-run').click(); true")
        assert browser.wait_for("document.getElementById('pg-output').dataset.state === 'done'")
        seen: list[list[str]] = browser.evaluate("window.seen")
        assert browser.evaluate("document.getElementById('pg-output').textContent") == expected
        assert browser.evaluate("document.getElementById('pg-output').dataset.replaced") == "1"
        texts = [text for _, text in seen]
        first = next(i for i, text in enumerate(texts) if text)  # the draft's text appeared ...
        assert any(state == "draft" and text for state, text in seen[first:]), seen[:5]
        assert texts[-1] == expected  # ... then the answer replaced it (dataset.replaced above)
        assert all(texts[first:]), "the output went empty after the draft appeared"  # no flicker to empty
        assert "replaced at" in browser.evaluate("document.getElementById('pg-meta').textContent")
    finally:
        browser.close()
