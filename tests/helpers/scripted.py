"""A scripted engine for unit tests: ``Client(url, transport=ScriptedEngine(...).transport())`` drives the
sans-I/O flows with no process and no network. Every request is recorded (``calls``); replies come from
``reply(path, body)`` callbacks registered per path (the first that returns non-``None`` wins), else a
default llama-server-like answer for the plumbing endpoints. An unscripted call fails the test loudly."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

Reply = Callable[[dict[str, Any]], Any]


def chat_reply(content: str, finish_reason: str = "stop", tool_calls: list[dict[str, Any]] | None = None,
               logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An OpenAI chat completion answer as llama-server writes it."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason, "message": message}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return {"id": "scripted", "object": "chat.completion", "model": "scripted", "choices": [choice],
            "usage": {"prompt_tokens": 10, "completion_tokens": max(1, len(content) // 4), "total_tokens": 20}}


def top_logprobs(probs: dict[str, float]) -> list[dict[str, Any]]:
    """One generated token whose alternatives carry ``probs`` (the first key is the token chosen)."""
    entries = [{"token": tok, "logprob": math.log(p), "bytes": list(tok.encode())} for tok, p in probs.items()]
    first = entries[0]
    return [{**first, "top_logprobs": entries}]


def json_response(payload: Any, status: int = 200) -> httpx.Response:
    """A JSON answer whose body can be read as a stream too (the client streams chat completions)."""
    return httpx.Response(status, stream=httpx.ByteStream(json.dumps(payload).encode()),
                          headers={"content-type": "application/json"})


def engine_error(status: int = 500, message: str = "scripted failure") -> httpx.Response:
    return json_response({"error": {"code": status, "message": message, "type": "server_error"}}, status)


@dataclass
class ScriptedEngine:
    replies: dict[str, list[Reply]] = field(default_factory=dict)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    slots: int = 1

    def on(self, path: str, reply: Reply | Any) -> ScriptedEngine:
        """Answer ``path`` with ``reply(body)`` (a callable) or the fixed JSON ``reply``."""
        fn = reply if callable(reply) else (lambda _body, fixed=reply: fixed)
        self.replies.setdefault(path, []).append(fn)
        return self

    def bodies(self, path: str) -> list[Any]:
        return [body for _, p, body in self.calls if p == path]

    def paths(self) -> list[str]:
        return [p for _, p, _ in self.calls]

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        if path not in ("/health", "/props"):
            self.calls.append((request.method, path, body))
        for reply in self.replies.get(path, []):
            answer = reply(body)
            if answer is not None:
                if isinstance(answer, httpx.Response):
                    return answer
                if isinstance(body, dict) and body.get("stream") and isinstance(answer, dict) and "choices" in answer:
                    choice = answer["choices"][0]  # the client streams chat completions: the same answer as events
                    return chat_stream(str(choice["message"].get("content") or ""),
                                       str(choice.get("finish_reason") or "stop"))
                return json_response(answer)
        if path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if path == "/props":
            return httpx.Response(200, json={"total_slots": self.slots, "model_path": "scripted.gguf",
                                             "default_generation_settings": {"n_ctx": 4096}})
        if path == "/tokenize":
            text = (body or {}).get("content", "")
            pieces = bool((body or {}).get("with_pieces"))
            ids = [ord(ch) for ch in text]
            tokens: list[Any] = [{"id": i, "piece": chr(i)} for i in ids] if pieces else ids
            return httpx.Response(200, json={"tokens": tokens})
        if path == "/detokenize":
            return httpx.Response(200, json={"content": "".join(chr(t) for t in (body or {}).get("tokens", []))})
        if path == "/lora-adapters":
            return httpx.Response(200, json=[])
        if path == "/apply-template":
            messages = (body or {}).get("messages", [])
            return httpx.Response(200, json={"prompt": "".join(f"<{m['role']}>{m.get('content')}\n"
                                                               for m in messages) + "<assistant>"})
        raise AssertionError(f"unscripted call {request.method} {path}: {json.dumps(body)[:400]}")

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


def probabilities(probs: dict[str, float]) -> dict[str, Any]:
    """A one-token ``/completion`` answer with ``n_probs``: the probability of each token (the scripted tokenizer
    gives a character its code point, so a label is scored by its first character where the labels differ
    there)."""
    top = [{"id": ord(tok[0]), "token": tok[0], "prob": p} for tok, p in probs.items()]
    return {"content": top[0]["token"], "tokens_predicted": 1, "tokens_evaluated": 20, "stop": True,
            "completion_probabilities": [{**top[0], "top_probs": top}]}


def completion(content: str, *, stopping_word: str = "", stop_type: str = "eos", predicted: int | None = None,
               evaluated: int = 20) -> dict[str, Any]:
    """A text ``/completion`` answer as llama-server writes it."""
    return {"content": content, "stop": True, "stop_type": "word" if stopping_word else stop_type,
            "stopping_word": stopping_word, "tokens_predicted": len(content) if predicted is None else predicted,
            "tokens_evaluated": evaluated, "truncated": False}


def scored(probs: dict[str, float], *, content_free: dict[str, float] | None = None) -> Reply:
    """``/completion`` replies for scored one-token calls (``n_probs``); other calls fall through. A label is read
    a token (here: a character) at a time where labels share a start: the call's prompt carries the label
    tokens read so far, and each candidate next character gets the mass of the labels that continue with it.
    Calls whose allowed tokens match none of ``probs``' labels (another question of the same task) and the
    content-free prompt of calibration (``N/A``) get ``content_free`` (default: uniform)."""

    def reply(body: Any) -> Any:
        if not isinstance(body, dict) or not body.get("n_probs"):
            return None
        prompt = body.get("prompt")
        parts = prompt if isinstance(prompt, list) else [prompt]
        text, prefix = str(parts[0]), "".join(chr(int(t)) for t in parts[1:])
        allowed = {int(t) for t, _ in body.get("logit_bias", [])}
        table = content_free if "<user>N/A\n" in text and content_free is not None else probs
        mass: dict[str, float] = {}
        for label, p in table.items():
            if label.startswith(prefix) and len(label) > len(prefix) and (
                    not allowed or ord(label[len(prefix)]) in allowed):
                key = label[len(prefix)]
                mass[key] = mass.get(key, 0.0) + p
        if not mass or ("<user>N/A\n" in text and content_free is None):
            mass = {chr(t): 1.0 / len(allowed) for t in sorted(allowed)} if allowed else mass
        top = [{"id": ord(ch), "token": ch, "prob": p} for ch, p in sorted(mass.items(), key=lambda kv: -kv[1])]
        return {"content": top[0]["token"], "tokens_predicted": 1, "tokens_evaluated": 20, "stop": True,
                "completion_probabilities": [{**top[0], "top_probs": top}]}

    return reply


def chat_stream(content: str, finish_reason: str = "stop") -> httpx.Response:
    """A streamed chat completion (server-sent events) that writes ``content`` in one delta."""
    chunks = [{"id": "scripted", "object": "chat.completion.chunk", "choices": [
                  {"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": None}]},
              {"id": "scripted", "object": "chat.completion.chunk", "choices": [
                  {"index": 0, "delta": {}, "finish_reason": finish_reason}],
               "usage": {"prompt_tokens": 10, "completion_tokens": max(1, len(content) // 4), "total_tokens": 20}}]
    data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx.Response(200, stream=httpx.ByteStream(data.encode()), headers={"content-type": "text/event-stream"})


def chat_as_asked(body: dict[str, Any], content: str) -> Any:
    """``content`` as the request asked for it: streamed when ``stream`` is set (the client streams a generation
    with a budget over ``assemble.MIN_TOKENS``), else one JSON answer."""
    return chat_stream(content) if body.get("stream") else chat_reply(content)
