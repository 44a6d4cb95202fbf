"""Draft, then replace (``[cascade] draft_model`` → ``quality_model``): feedback at once from a small model, the
larger model's answer when it is ready.

A chat request that opts in with ``"tiankong": {"draft": true}`` is answered by both models:

* **streamed**: the draft model's SSE events first (as the engine sent them, without their ``[DONE]``), then one
  ``event: replace`` (``{"object": "tiankong.replace", …}``), then the quality model's stream, ``[DONE]`` last.
* **not streamed**: the quality model's answer, with ``"tiankong": {"draft": {"model", "content", "usage"}}``.

**Scheduling**: the draft takes its engine first; the quality request is sent once the draft's first token has
arrived (so the draft's prompt is read on an uncontended CPU) — or, with ``[cascade] quality_starts =
"draft_end"``, once the draft has ended (two engines on the same few cores then never compute at once) — and
waits in its own engine's admission like any request. The replace happens at the quality model's first token:
the draft is then stopped (its engine slot freed) — the draft tokens decoded until then are counted as wasted. A client
that leaves cancels both requests.

**Failure**: the quality model failing before its first token leaves the draft to finish, then ``event: final``
(``{"object": "tiankong.final", "tiankong": {"final": "draft", "warning": …}}``) — never an empty answer; a
draft that fails is replaced all the same (``draft_tokens`` 0, with a warning). A client that does not opt in is
untouched by all this: its request goes to the model it names (no model: the quality model), byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..config import CascadeSettings
from .cascade_request import check_cascade, draft_option, draft_refused, shape_chat
from .metrics import LATENCY_BUCKETS, RequestRecord
from .pipeline import CLIENT_GONE, Pipeline, until_disconnect
from .responses import deadline_exceeded, error_response
from .router import ModelRouter
from .streaming import DeferredSSE, Item, _has_content

__all__ = ["CascadeMetrics", "check_cascade", "draft_option", "draft_refused", "draft_then_replace", "shape_chat"]

CHAT = "/v1/chat/completions"
DONE = b"data: [DONE]"


class CascadeMetrics:
    """Draft TTFT, quality TTFT, replacements, wasted draft tokens, quality failures (in ``/metrics``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.draft_ttft = Histogram("tiankong_cascade_draft_ttft_seconds", "Draft then replace: time to the draft's "
                                    "first token", buckets=LATENCY_BUCKETS, registry=r)
        self.quality_ttft = Histogram("tiankong_cascade_quality_ttft_seconds", "Draft then replace: time to the "
                                      "quality model's first token", buckets=LATENCY_BUCKETS, registry=r)
        self.replacements = Counter("tiankong_cascade_replacements", "Drafts replaced by the quality answer",
                                    registry=r)
        self.wasted = Counter("tiankong_cascade_wasted_draft_tokens", "Draft tokens decoded and then replaced",
                              registry=r)
        self.failures = Counter("tiankong_cascade_quality_failures", "Quality answers that failed (the draft "
                                "stood as final)", registry=r)


@dataclass
class Part:
    """One of the two requests: its pipeline, record and body; what it has streamed so far."""

    pipe: Pipeline
    call: RequestRecord
    body: dict[str, Any]
    text: list[str] = field(default_factory=list)
    tokens: int = 0
    first_s: float | None = None
    error: str = ""


def _event_content(event: bytes) -> tuple[bool, str]:
    """(whether the SSE event carries content, its text)."""
    if not event.startswith(b"data: {"):
        return False, ""
    try:
        data = json.loads(event[6:])
    except ValueError:
        return False, ""
    if not isinstance(data, dict) or not _has_content(data):
        return False, ""
    choice = (data.get("choices") or [{}])[0]
    delta = choice.get("delta") if isinstance(choice, dict) else None
    text = delta.get("content") if isinstance(delta, dict) else None
    return True, str(text or "")


def _error_text(item: Response) -> str:
    with contextlib.suppress(ValueError, AttributeError, KeyError, TypeError):
        return str(json.loads(bytes(item.body))["error"]["message"])
    return f"HTTP {item.status_code}"


def sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def _events(source: AsyncIterator[Item]) -> AsyncGenerator[bytes | Response, None]:
    """Whole SSE events (without their blank line) from relayed byte chunks; error responses as they come."""
    rest = b""
    async for item in source:
        if isinstance(item, Response):
            yield item
            return
        rest += item
        while b"\n\n" in rest:
            event, rest = rest.split(b"\n\n", 1)
            if event.strip():
                yield event.strip(b"\n")
    if rest.strip():
        yield rest.strip(b"\n")


class DraftThenReplace:
    """One opted-in chat request: the draft's part and the quality model's part (see the module docstring)."""

    def __init__(self, draft: Part, quality: Part, metrics: CascadeMetrics, call: RequestRecord,
                 after_draft: bool = False, draft_failure: Response | None = None) -> None:
        self.draft, self.quality, self.metrics, self.call = draft, quality, metrics, call
        self.after_draft = after_draft  # [cascade] quality_starts = "draft_end"
        #: the draft could not even be routed (its engine not loadable, the pool full): replaced all the same
        self.draft_failure = draft_failure
        self.started = time.perf_counter()

    # --- streamed ----------------------------------------------------------------------------------------

    async def stream(self) -> AsyncGenerator[Item, None]:
        queue: asyncio.Queue[tuple[Part, bytes | Response | None]] = asyncio.Queue()
        tasks: dict[str, asyncio.Task[None]] = {}

        async def pump(part: Part) -> None:
            try:
                async with contextlib.aclosing(_events(part.pipe.source(part.call, CHAT, part.body))) as events:
                    async for event in events:
                        await queue.put((part, event))
            finally:
                queue.put_nowait((part, None))

        def start(part: Part, name: str) -> None:
            tasks[name] = asyncio.ensure_future(pump(part))

        draft, quality = self.draft, self.quality
        held: list[bytes] = []  # quality events before its first token
        replaced = draft_done = quality_done = False
        if self.draft_failure is not None:
            queue.put_nowait((draft, self.draft_failure))
        else:
            start(draft, "draft")
        try:
            while not (quality_done and (replaced or draft_done)):
                part, event = await queue.get()
                if part is draft and not replaced:
                    if event is None or isinstance(event, Response):
                        draft_done = True
                        if isinstance(event, Response):
                            draft.error = _error_text(event)
                        if "quality" not in tasks:
                            start(quality, "quality")
                        if quality_done:  # quality failed before: the draft stands, marked final
                            yield self._final()
                            return
                        continue
                    if event == DONE:
                        continue
                    if self._saw(draft, event) and not self.after_draft and "quality" not in tasks:
                        start(quality, "quality")
                    yield event + b"\n\n"
                elif part is quality:
                    if event is None or isinstance(event, Response):
                        if isinstance(event, Response):
                            quality.error = _error_text(event)
                        quality_done = True
                        if replaced:
                            if quality.error:  # broke off after the replace: the draft's text with the warning
                                yield self._final()
                            return
                        if not quality.error and draft_done:
                            yield self._replace(held)  # an empty but complete quality answer still replaces
                            replaced = True
                            return
                        if draft_done:
                            yield self._final()
                            return
                        continue  # the draft goes on to its end, then stands as final
                    if replaced:
                        self._saw(quality, event)
                        yield event + b"\n\n"
                        continue
                    held.append(event)
                    if self._saw(quality, event):
                        if "draft" in tasks and not draft_done:
                            tasks["draft"].cancel()  # the draft's engine slot is freed now
                            draft_done = True
                        yield self._replace(held)
                        replaced = True
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            self.call.usage = quality.call.usage
            self.call.timings = quality.call.timings

    def _saw(self, part: Part, event: bytes) -> bool:
        """Count a content event; True on the part's first."""
        has, text = _event_content(event)
        if not has:
            return False
        part.tokens += 1
        part.text.append(text)
        if part.first_s is not None:
            return False
        part.first_s = time.perf_counter() - self.started
        (self.metrics.draft_ttft if part is self.draft else self.metrics.quality_ttft).observe(part.first_s)
        self.call.first_token()
        return True

    def _replace(self, held: list[bytes]) -> bytes:
        self.metrics.replacements.inc()
        self.metrics.wasted.inc(self.draft.tokens)
        extension: dict[str, Any] = {"replace": True, "draft_model": self.draft.call.model,
                                     "quality_model": self.quality.call.model, "draft_tokens": self.draft.tokens}
        if self.draft.error:
            extension["warning"] = f"the draft model failed: {self.draft.error}"
        head = sse("replace", {"object": "tiankong.replace", "model": self.quality.call.model,
                               "choices": [], "tiankong": extension})
        return head + b"".join(event + b"\n\n" for event in held)

    def _final(self) -> Item:
        if not self.draft.text:  # neither model answered: the quality model's error
            return error_response(503, f"the quality model failed ({self.quality.error}) and the draft model gave "
                                  f"nothing ({self.draft.error or 'no tokens'})", "engine_error", "cascade_failed")
        self.metrics.failures.inc()
        warning = f"the quality model failed: {self.quality.error or 'no answer'}; the draft is the final answer"
        return sse("final", {"object": "tiankong.final", "model": self.draft.call.model, "choices": [],
                             "tiankong": {"final": "draft", "warning": warning,
                                          "content": "".join(self.draft.text)}}) + DONE + b"\n\n"

    # --- not streamed --------------------------------------------------------------------------------------

    async def answer(self) -> Response:
        """Both answers: the draft's first; the quality request sent once the draft holds its engine slot."""
        draft, quality = self.draft, self.quality
        if self.draft_failure is not None:
            quality_answer = await quality.pipe.slotted(quality.call, lambda: quality.pipe.upstream.forward(
                quality.call, CHAT, quality.body))
            draft_answer: Response = self.draft_failure
        else:
            quality_answer, draft_answer = await self._both()
        draft_data = _json(draft_answer)
        quality_data = _json(quality_answer)
        if quality_data is None:
            if draft_data is None:
                return quality_answer
            self.metrics.failures.inc()
            draft_data["tiankong"] = {"final": "draft", "warning": "the quality model failed: "
                                      f"{_error_text(quality_answer)}; the draft is the final answer"}
            return JSONResponse(draft_data)
        self.metrics.replacements.inc()
        extension: dict[str, Any] = {"replace": True, "draft_model": draft.call.model}
        if draft_data is not None:
            choice = (draft_data.get("choices") or [{}])[0]
            extension["draft"] = {"model": draft.call.model, "usage": draft_data.get("usage"),
                                  "content": (choice.get("message") or {}).get("content")}
            tokens = (draft_data.get("usage") or {}).get("completion_tokens")
            self.metrics.wasted.inc(tokens if isinstance(tokens, int) else 0)
        else:
            extension["warning"] = f"the draft model failed: {_error_text(draft_answer)}"
        self.call.usage = quality.call.usage
        quality_data["tiankong"] = extension
        return JSONResponse(quality_data)

    async def _both(self) -> tuple[Response, Response]:
        """The quality answer and the draft's, the quality request sent once the draft holds its engine slot."""
        draft, quality = self.draft, self.quality
        admitted = asyncio.Event()
        draft_task = asyncio.ensure_future(draft.pipe.slotted(draft.call, lambda: draft.pipe.upstream.forward(
            draft.call, CHAT, draft.body), admitted.set))
        waiter = asyncio.ensure_future(admitted.wait())
        try:
            await asyncio.wait({draft_task} if self.after_draft else {draft_task, waiter},
                               return_when=asyncio.FIRST_COMPLETED)
            quality_answer = await quality.pipe.slotted(quality.call, lambda: quality.pipe.upstream.forward(
                quality.call, CHAT, quality.body))
            draft_answer = await draft_task
        finally:
            waiter.cancel()
            draft_task.cancel()
            await asyncio.gather(draft_task, waiter, return_exceptions=True)
        return quality_answer, draft_answer


def _json(response: Response) -> dict[str, Any] | None:
    if response.status_code != 200:
        return None
    with contextlib.suppress(ValueError, AttributeError):
        data = json.loads(bytes(response.body))
        return data if isinstance(data, dict) else None
    return None


def run_streamed(job: DraftThenReplace, pipe: Pipeline) -> Response:
    """The streamed exchange, with the deadline, keep-alives and idle timeout of every stream of the gateway."""
    job.call.stream = True

    def on_close(status: int, outcome: str) -> None:
        pipe.metrics.finish(job.call, CLIENT_GONE if outcome == "disconnect" else status)

    return DeferredSSE(job.stream(), deadline=time.monotonic() + pipe.timeout_s, timeout_s=pipe.timeout_s,
                       keepalive_s=pipe.keepalive_s, idle_timeout_s=pipe.idle_timeout_s, on_close=on_close)


async def run_answered(request: Request, job: DraftThenReplace, pipe: Pipeline) -> Response:
    try:
        async with asyncio.timeout(pipe.timeout_s):
            response = await until_disconnect(request.receive, job.answer())
    except TimeoutError:
        return pipe.done(job.call, deadline_exceeded(pipe.timeout_s, "while the engines worked"))
    if response is None:
        pipe.metrics.finish(job.call, CLIENT_GONE)
        return Response(status_code=CLIENT_GONE)
    return pipe.done(job.call, response)




# --- the gateway's side ----------------------------------------------------------------------------------------


async def draft_then_replace(request: Request, router: ModelRouter, pipe_for: Callable[[RequestRecord], Pipeline],
                             metrics: CascadeMetrics, cascade: CascadeSettings,
                             prepared: tuple[RequestRecord, Pipeline, dict[str, Any]]) -> Response:
    """An opted-in chat (already routed to the quality model): the draft routed too, then both answered."""
    call, pipe, body = prepared
    draft_call = RequestRecord(CHAT, key=call.key)
    draft_body = {**body, "model": cascade.draft_model}
    routed = await router.route(draft_body, draft_call)
    failed = routed if isinstance(routed, Response) else None  # the quality answer all the same, with a warning
    if failed is not None:
        draft_call.model = cascade.draft_model or ""  # named in the answer's extension (the router names it on success)
    quality_call = RequestRecord(CHAT, model=call.model, engine=call.engine, key=call.key, group=call.group)
    job = DraftThenReplace(Part(pipe if failed else pipe_for(draft_call), draft_call, draft_body),
                           Part(pipe, quality_call, body), metrics, call,
                           after_draft=cascade.quality_starts == "draft_end", draft_failure=failed)
    if body.get("stream"):
        return run_streamed(job, pipe)
    return await run_answered(request, job, pipe)
