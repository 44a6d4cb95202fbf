"""Embeddings from an engine that returns every token's vector (``--pooling none``, tiankong's default), for
``Client.embed`` / ``AsyncClient.embed``, the gateway's ``/v1/embeddings`` and a batch file's embeddings lines: pure
helpers — the one that asks (:func:`openai_embeddings`) is given the caller's request function."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ConfigError, InputTooLong, ServerError

#: inputs in one HTTP embeddings request (OpenAI's own limit): 3,000 one-word inputs held a 2-core engine for
#: minutes, unanswered, and the gateway's other requests with it; a batch file or several requests embed more
MAX_INPUTS = 2048


def embeddings_items(texts: Any) -> list[str]:
    items = [texts] if isinstance(texts, str) else list(texts) if isinstance(texts, (list, tuple)) else None
    if not items or not all(isinstance(t, str) and t for t in items):
        raise ConfigError("embeddings input must be a non-empty string or a list of non-empty strings", param="input")
    return items


def request_items(texts: Any) -> list[str]:
    """``embeddings_items`` of one HTTP request, at most ``MAX_INPUTS`` of them (a library call takes any number)."""
    items = embeddings_items(texts)
    if len(items) > MAX_INPUTS:
        raise ConfigError(f"embeddings input holds {len(items)} texts, more than {MAX_INPUTS} in one request",
                          hint="send them in requests of up to 2048 texts (or as a batch file)", param="input")
    return items


def embeddings_body(items: list[str], model: str | None) -> dict[str, Any]:
    """An OpenAI embeddings body; without a model name the server's own (a gateway's first) model answers."""
    return {"input": items, **({"model": model} if model else {})}


def per_token_refused(exc: ServerError) -> bool:
    """llama-server's OpenAI embeddings endpoint refuses an engine that pools nothing (tiankong's default)."""
    return exc.status in (400, 500) and "pooling type 'none'" in exc.message.lower()


def embeddings_off(exc: ServerError, embedded: bool) -> ServerError | ConfigError:
    """The engine gives no embeddings (llama-server's 501 says "start it with --embeddings", a flag of its own):
    for a client's embedded engine, what to pass to the client instead. An input longer than the engine embeds
    at once (llama-server's 500 "input (N tokens) is too large to process") is the caller's to shorten:
    ``InputTooLong`` — it was a 502 server error, which SDKs retry."""
    if "too large to process" in exc.message:
        found = re.search(r"input \((\d+) tokens\)", exc.message)
        size = f" ({found.group(1)} tokens)" if found else ""
        return InputTooLong(f"an embeddings input is longer than the engine embeds at once{size}",
                            hint="split the text into shorter pieces (a few hundred words each)")
    if exc.status == 501 and embedded:
        return ConfigError("this client's engine was started without embeddings",
                           hint="create it with Client(model=…, embeddings=True)")
    return exc


def mean_pooled(rows: Any) -> tuple[list[list[float]], int]:
    """OpenAI-style vectors (mean over tokens, L2-normalised — what ``--pooling mean`` gives) and the token count."""
    import math

    vectors, tokens = [], 0
    for row in rows if isinstance(rows, list) else [rows]:
        tokens_of = row.get("embedding") if isinstance(row, dict) else None
        if not isinstance(tokens_of, list) or not tokens_of:
            raise ServerError(502, "the engine's /embeddings answer has no vectors")
        matrix = tokens_of if isinstance(tokens_of[0], list) else [tokens_of]
        tokens += len(matrix)
        mean = [sum(column) / len(matrix) for column in zip(*matrix, strict=True)]
        norm = math.sqrt(sum(v * v for v in mean)) or 1.0
        vectors.append([v / norm for v in mean])
    return vectors, tokens


def embeddings_response(vectors: list[list[float]], tokens: int, model: str | None) -> dict[str, Any]:
    return {"object": "list", "model": model or "default",
            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


async def openai_embeddings(request: Callable[[str, str, dict[str, Any]], Awaitable[Any]], body: dict[str, Any],
                            items: list[str], model: str | None) -> Any:
    """The OpenAI embeddings answer: ``body`` passed through to a pooling engine; from a per-token engine (whose
    OpenAI endpoint refuses pooling none) every token's vector read and mean-pooled here."""
    try:
        return await request("POST", "/v1/embeddings", body)
    except ServerError as exc:
        if not per_token_refused(exc):
            raise embeddings_off(exc, False) from None
    try:
        rows = await request("POST", "/embeddings", {"content": items})
    except ServerError as exc:
        raise embeddings_off(exc, False) from None
    vectors, tokens = mean_pooled(rows)
    return embeddings_response(vectors, tokens, model)
