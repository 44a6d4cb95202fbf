"""Cross-key prompt-cache isolation on a gateway shared by several API keys (docs/security.md, "The prompt cache").

llama-server keeps each slot's last prompt in its KV cache and reuses the longest common prefix with the next
prompt sent to that slot (``cache_prompt``, on by default); it picks a slot by prompt similarity. So without
isolation a key learns whether another key's recent prompt starts like its guess: ``usage.prompt_tokens_details.
cached_tokens``, ``timings.cache_n`` and the latency all say how much of the guess was already cached.

On a gateway with two or more keys (``server.share_prompt_cache`` left unset, or false) every engine call that
does not continue its own request on a slot it pinned (``id_slot``, what a task's later calls send, structured/
slots.py) is sent with ``cache_prompt: false``: its prompt is read from the first token whatever the slot held,
so nothing about another request's prompt shows in its usage, timings or latency. The cost — no prefix reuse
between requests, even of one key (a multi-turn chat re-reads its history each turn) — is measured in
``benchmarks/cache_isolation.py`` (docs/benchmarks.md). Host-RAM prompt caching across slots (``--cache-ram``)
is already off by default (engine/flags.py). ``share_prompt_cache = true`` restores reuse for a single-tenant
deployment.

Written here rather than by a per-key salt in the prompt: a salt changes what the model reads, so a keyed
gateway would answer differently from the same engine unkeyed; turning reuse off changes only speed.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

#: the engine paths that read a prompt into a slot (llama-server's OpenAI and native generation endpoints)
PROMPT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions",
                          "/completion", "/infill", "/v1/responses"})


def continues_own_slot(body: dict[str, Any]) -> bool:
    """A call pinned to a slot its own request chose (``id_slot`` ≥ 0): reusing that slot's cache is reusing
    what this request itself just read there."""
    slot = body.get("id_slot")
    return isinstance(slot, int) and not isinstance(slot, bool) and slot >= 0


def isolated(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as it may be sent to a shared engine: no reuse of a prompt another request left in a slot."""
    if path not in PROMPT_PATHS or continues_own_slot(body):
        return body
    return {**body, "cache_prompt": False}


def share_cache(configured: bool | None, keys: int) -> bool:
    """Whether requests may reuse each other's cached prompts: as configured, else only when at most one key
    can call (a single tenant)."""
    return configured if configured is not None else keys < 2


class IsolatingTransport(httpx.AsyncBaseTransport):
    """The task clients' transport on an isolating gateway: every JSON POST to a prompt path is rewritten by
    ``isolated`` before it leaves (tasks make several engine calls per request, from library code that knows
    nothing of keys)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path in PROMPT_PATHS:
            body = json.loads(await request.aread())
            if isinstance(body, dict) and (new := isolated(request.url.path, body)) is not body:
                headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
                request = httpx.Request(request.method, request.url, headers=headers,
                                        content=json.dumps(new, ensure_ascii=False).encode(),
                                        extensions=request.extensions)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()
