"""Batch lines that step aside: a plain chat or completion line of the Batch API stops the moment an interactive
request arrives, and goes on from where it stopped once none is left.

Why: on a CPU the engine decodes every running sequence in the same steps, and a step's cost grows with the
sequences in it — admission alone (``admission.py``: batch lines take only slots nobody waits for) left an
interactive chat 5–7× slower while a batch ran (``benchmarks/batch_idle.py``, 2 cores). So with
``[batches] preempt = true`` (the default) a batch line is read from the engine as a stream; when an interactive
request is admitted or waits, the line's stream is closed (llama-server stops it at its next token), the line
gives its slot back and waits, in the batch line, until no interactive request is in flight or waiting. Then it
is sent again with what it had written so far as the start of its answer — the assistant message's prefill for
a chat (llama-server continues a final assistant message), the prompt's tail for a completion — and a token
budget less what was spent; the pieces are joined into one answer of the usual shape, with the usage of the
whole and ``"tiankong": {"stepped_aside": n}``. An interactive request waits for no batch decode step beyond
the one in progress: the line's stream asks for llama-server's ``return_progress``, so that while the engine reads
its prompt it writes after every step of at most ``-b`` tokens, and a closed stream is noticed there rather than
after the whole prompt has been read (without an event to write, llama-server looks at the connection once a
second). With the default ``-b 2048`` a prompt is read in one step anyway; ``[engine] extra_args = ["-b", "8",
"-ub", "8"]`` bounds the wait to 8 prompt tokens (``benchmarks/batch_idle.py`` mode ``+bN``: busy p99 216 ms against
~350 ms by default, at a lower batch speed; docs/batch-api.md).

Only lines whose answer is plain text step aside (no tools, schemas, grammars, log probabilities, ``n`` > 1, or
a chat that already ends with an assistant message); the others run as before. Greedy continuation of a prefix
is the same text as an uninterrupted run up to how the prefix is tokenized again at the seam.

The budget spent is the engine's own count (``timings_per_token``: each event carries ``predicted_n``), not the
events read: llama-server holds a token that ends inside a UTF-8 character and sends it with the next, so a
Chinese answer has fewer events than tokens, and counting events let a line that stepped aside run past its
``max_tokens``. A line with its budget spent (or within ``FINISH_WITHIN`` tokens of it) finishes rather than
stepping aside: its last event is on its way, and sending it again would ask the engine for a token more than
the line allowed (CI, 2026-12-05: a line closed after its 60th token went on with ``max_tokens`` 1).
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.responses import JSONResponse, Response

from ..client.assemble import StreamAssembler, StreamFailed, streamed_body, token_budget
from .admission import Admission
from .engine_http import EngineHTTPError
from .metrics import RequestRecord
from .pipeline import LINE_DEADLINE
from .responses import engine_unavailable, upstream_error
from .upstream import Upstream, stream_failed

FINISH_WITHIN = 4  # a line this many tokens from its budget finishes instead of stepping aside
PREEMPTIBLE_PATHS = ("/v1/chat/completions", "/v1/completions")
_NOT_PLAIN = ("tools", "tool_choice", "functions", "function_call", "response_format", "json_schema", "grammar",
              "logprobs", "top_logprobs", "n_probs", "post_sampling_probs", "response_fields", "verbose", "stream")


def preemptible(path: str, body: dict[str, Any]) -> bool:
    """Whether a batch line on ``path`` may step aside and go on later (its answer is plain text)."""
    if path not in PREEMPTIBLE_PATHS or any(body.get(key) for key in _NOT_PLAIN) or body.get("n") not in (None, 1):
        return False
    if path == "/v1/completions":
        return isinstance(body.get("prompt"), str)
    messages = body.get("messages")
    return isinstance(messages, list) and bool(messages) and isinstance(messages[-1], dict) and \
        messages[-1].get("role") != "assistant"


def continuation(path: str, body: dict[str, Any], written: str, spent: int) -> dict[str, Any]:
    """The request that goes on after ``written`` (``spent`` tokens of the budget used)."""
    if not written:
        return body
    budget = token_budget(body)
    rest = {key: value for key, value in body.items() if key not in ("max_tokens", "max_completion_tokens",
                                                                     "n_predict")}
    if budget is not None and budget > 0:
        rest["max_tokens"] = max(1, budget - spent)
    if path == "/v1/completions":
        return {**rest, "prompt": str(body["prompt"]) + written}
    return {**rest, "messages": [*body["messages"], {"role": "assistant", "content": written}]}


def piece_body(path: str, body: dict[str, Any], written: str, spent: int) -> dict[str, Any]:
    """What is sent for one stretch of a line: streamed, writing while it reads a prompt, counting its tokens."""
    return {**streamed_body(continuation(path, body, written, spent)), "return_progress": True,
            "timings_per_token": True}


def finishes(budget: int | None, spent: int) -> bool:
    """Whether a line that has spent ``spent`` tokens of ``budget`` reads on to its end instead of stepping aside."""
    return budget is not None and budget - spent <= FINISH_WITHIN


def joined(first: dict[str, Any], answer: dict[str, Any], written: str, spent: int, chat: bool) -> dict[str, Any]:
    """The last piece's answer with the earlier pieces' text in front and the whole usage."""
    choice = answer["choices"][0]
    if chat:  # llama-server's answer to a prefilled assistant message holds only what follows the prefill
        choice["message"]["content"] = written + (choice["message"].get("content") or "")
    else:
        choice["text"] = written + (choice.get("text") or "")
    for key in ("id", "created"):
        if key in first:
            answer[key] = first[key]
    usage = answer.get("usage")
    if isinstance(usage, dict):  # the last piece's prompt held the earlier pieces' tokens: they were generated
        completion = int(usage.get("completion_tokens") or 0) + spent
        prompt = max(0, int(usage.get("prompt_tokens") or 0) - spent)
        answer["usage"] = {**usage, "prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion}
    return answer


class Piece:
    """One stretch of a line's answer read from the engine, until it ends or an interactive request arrives."""

    def __init__(self, chat: bool) -> None:
        self.assembler = StreamAssembler(chat=chat)
        self.events = 0  # content events seen

    @property
    def tokens(self) -> int:
        """Tokens generated for the text read so far: the engine's count of the last event read (one event may
        carry several tokens), or the events seen where an engine sends no count."""
        counted = (self.assembler.timings or {}).get("predicted_n")
        return max(counted, self.events) if isinstance(counted, int) else self.events


async def forward_preemptible(upstream: Upstream, admission: Admission, call: RequestRecord, path: str,
                              body: dict[str, Any]) -> Response:
    chat = path == "/v1/chat/completions"
    written, spent, steps = "", 0, 0
    first: dict[str, Any] = {}
    budget = token_budget(body)
    while True:
        piece = Piece(chat)
        engine = await upstream.send(call, path, piece_body(path, body, written, spent), stream=True)
        if isinstance(engine, Response):
            return engine
        try:
            if engine.status_code >= 400:
                return upstream_error(engine.status_code, await engine.aread())
            reading = asyncio.ensure_future(read_piece(engine, piece))
            arrival = asyncio.ensure_future(admission.interactive_arrived())
            try:
                await asyncio.wait({reading, arrival}, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done() and finishes(budget, spent + piece.tokens):
                    await reading  # at or a few tokens from its end: finishing costs less than stopping and resuming
            finally:
                arrival.cancel()
                if not reading.done():
                    reading.cancel()
                await asyncio.gather(reading, arrival, return_exceptions=True)  # (our own cancellation still raises)
            answer = None if reading.cancelled() else _answer(reading, piece)  # a broken stream raises here
        except StreamFailed as exc:
            return stream_failed(exc)
        except EngineHTTPError as exc:
            return engine_unavailable(f"the stream broke off: {exc}")
        finally:
            await engine.aclose()  # the engine stops this piece at its next token
        first = first or dict(piece.assembler.meta)
        if answer is not None:
            if written:
                answer = joined(first, answer, written, spent, chat)
            if steps:
                answer["tiankong"] = {"stepped_aside": steps}
            call.note_answer(answer)
            return JSONResponse(answer)
        written += "".join(piece.assembler.content)
        spent += piece.tokens
        steps += 1
        admission.preemptions += 1
        await admission.step_aside(call.group)
        if (deadline := LINE_DEADLINE.get()) is not None:  # the wait aside does not count against the line
            deadline[0].reschedule(asyncio.get_running_loop().time() + deadline[1])


def _answer(reading: asyncio.Future[None], piece: Piece) -> dict[str, Any]:
    reading.result()
    return piece.assembler.result()


async def read_piece(engine: Any, piece: Piece) -> None:
    """Feed an engine's stream to ``piece`` until it ends (or the reading is cancelled)."""
    async for chunk in engine.aiter_raw():
        before = len(piece.assembler.content)
        piece.assembler.feed(chunk)
        piece.events += len(piece.assembler.content) - before
