"""A non-streamed answer assembled from a stream, so that abandoning it really stops llama-server.

Why: llama-server notices a closed connection of a *non-streamed* request only when its result wait times out
(1 s without any result for any task; ``server_response::recv_with_timeout``). Every token of another request
and every ``/slots`` or ``/metrics`` probe wakes that wait, so under load an abandoned non-streamed request
runs on to ``max_tokens`` (measured: 1,458 more tokens after the client left, ``benchmarks/gateway_cancel.py``).
A streamed request fails at its next token write instead. So ``Client``, ``AsyncClient`` and the gateway ask
for a stream and build the ``chat.completion`` / ``text_completion`` object here, the same shape llama-server
returns:

* chat: ``message`` = role + concatenated ``content`` (``""`` when none, as llama-server sends) +
  ``reasoning_content`` + ``tool_calls`` merged by index (id, name, arguments concatenated);
* completions: ``text`` concatenated, ``logprobs`` null;
* ``finish_reason``, ``usage``, ``timings``, ``id``, ``created``, ``model``, ``system_fingerprint`` from the
  chunks (usage via ``stream_options.include_usage``).

Requests whose exact non-streamed semantics matter are not rewritten (:func:`assembles`): ``n`` > 1 and a list
of several completion prompts (one choice each: their streams interleave), log
probabilities (a stream keeps the probabilities of a trimmed stop word), and llama.cpp's own options that
change the answer's shape (``response_fields``, ``verbose``). Nor are short ones: a request whose token budget
is at most ``min_tokens`` (default 256) goes as it is — abandoning it wastes at most that many tokens, while
streaming costs the engine a little per token on a machine whose cores it already uses (measured with
``benchmarks/gateway_overhead.py``: 16-token requests lost 4–5 % throughput at concurrency 1 when streamed).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import TransportError

ASSEMBLED_PATHS = ("/v1/chat/completions", "/v1/completions")
_KEEP_PLAIN = ("logprobs", "top_logprobs", "n_probs", "response_fields", "verbose", "post_sampling_probs")
#: requests with a token budget at most this large are sent non-streamed (see the module docstring)
MIN_TOKENS = 256


class StreamFailed(TransportError):
    """The engine's stream carried an error event (its body is ``error``) or ended without a final chunk."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(str(error.get("message", error)))
        self.error = error


def token_budget(body: dict[str, Any]) -> int | None:
    """The request's generation limit (``max_tokens``, ``max_completion_tokens`` or ``n_predict``); None: none."""
    for key in ("max_tokens", "max_completion_tokens", "n_predict"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def assembles(path: str, body: dict[str, Any], min_tokens: int = MIN_TOKENS) -> bool:
    """Whether a non-streamed request on ``path`` is sent to the engine as a stream and assembled here."""
    if path not in ASSEMBLED_PATHS or body.get("stream"):
        return False
    if body.get("n") not in (None, 1) or several_prompts(body.get("prompt")):
        return False  # several choices: a stream interleaves them (by index), one choice is assembled
    budget = token_budget(body)
    if budget is not None and 0 < budget <= min_tokens:  # -1 / 0 / none: unlimited
        return False
    return not any(body.get(key) for key in _KEEP_PLAIN)


def several_prompts(prompt: Any) -> bool:
    """A completions ``prompt`` that is a list of prompts (strings, or token lists), not one prompt's tokens — nor
    llama.cpp's one prompt of tokens and strings mixed (``[12, 34, "text", 56]``)."""
    return isinstance(prompt, list) and len(prompt) > 1 and all(
        isinstance(item, str) or (isinstance(item, list) and all(
            isinstance(t, int) and not isinstance(t, bool) for t in item)) for item in prompt)


def streamed_body(body: dict[str, Any]) -> dict[str, Any]:
    given = body.get("stream_options")
    options: dict[str, Any] = given if isinstance(given, dict) else {}
    return {**body, "stream": True, "stream_options": {**options, "include_usage": True}}


class StreamAssembler:
    """Feed raw SSE bytes; :meth:`result` is the non-streamed answer."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.meta: dict[str, Any] = {}
        self.content: list[str] = []
        self.progress_events = 0
        self.reasoning: list[str] = []
        self.tools: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.done = False
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            line = line.rstrip(b"\r")
            if line == b"data: [DONE]":
                self.done = True
            elif line.startswith(b"data: "):
                try:
                    event = json.loads(line[6:])
                except ValueError:
                    raise StreamFailed({"message": f"the engine sent a malformed event: {line[:120]!r}"}) from None
                if isinstance(event, dict):
                    self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        if "error" in event:
            error = event["error"]
            raise StreamFailed(error if isinstance(error, dict) else {"message": str(error)})
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in event:
                self.meta.setdefault(key, event[key])
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]
        if "prompt_progress" in event:  # llama-server's ``return_progress``: a prompt read's progress, no token
            self.progress_events += 1
            return
        for choice in event.get("choices") or []:
            if isinstance(choice, dict):
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        if not self.chat:
            if isinstance(choice.get("text"), str):
                self.content.append(choice["text"])
            return
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        if isinstance(delta.get("reasoning_content"), str):
            self.reasoning.append(delta["reasoning_content"])
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                self._tool_delta(call)

    def _tool_delta(self, call: dict[str, Any]) -> None:
        index = int(call.get("index", len(self.tools)))
        tool = self.tools.setdefault(index, {"type": "function", "function": {"name": "", "arguments": ""}})
        if call.get("id"):
            tool["id"] = call["id"]
        function = call.get("function")
        if isinstance(function, dict):
            tool["function"]["name"] += function.get("name") or ""
            tool["function"]["arguments"] += function.get("arguments") or ""

    def result(self) -> dict[str, Any]:
        if self.finish_reason is None:
            raise StreamFailed({"message": "the engine's stream ended without a final chunk"})
        text = "".join(self.content)
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if self.reasoning:
                message["reasoning_content"] = "".join(self.reasoning)
            if self.tools:
                message["tool_calls"] = [self.tools[i] for i in sorted(self.tools)]
            choice: dict[str, Any] = {"finish_reason": self.finish_reason, "index": 0, "message": message}
        else:
            choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": self.finish_reason}
        answer: dict[str, Any] = {"choices": [choice], **self.meta,
                                  "object": "chat.completion" if self.chat else "text_completion"}
        if self.usage is not None:
            answer["usage"] = self.usage
        if self.timings is not None:
            answer["timings"] = self.timings
        return answer
