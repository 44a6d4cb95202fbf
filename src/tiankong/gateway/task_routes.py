"""``POST /v1/tasks/<task>``: every pipeline task over HTTP, with validated request bodies.

Each body is the task's registered arguments model (``extra="forbid"``) plus ``model``; the bodies and their
answers live in ``tiankong.tasks.bodies``, shared with OpenAI-batch lines. A wrong type or an unknown field is a
400 naming the field. Counts that drive the engine's work (rewrites, summary words, documents, labels, token
budgets) are bounded there. The answer is the task result's JSON (``spec.to_json``), the same shape the CLI
prints with ``--json``.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from starlette.responses import JSONResponse

from ..api import AsyncClient
from ..client._embeddings import openai_embeddings, request_items
from ..deciders.registry import names_only
from ..errors import ConfigError, InputTooLong, ServerError
from ..tasks.bodies import task_answer
from ..tasks.route import configured_threshold
from .responses import error_response


async def run_task(client: AsyncClient, task: str, body: dict[str, Any],
                   route_threshold: float | None = None) -> dict[str, Any]:
    """Validate the body, run the task's flow on the client's engine, return its JSON. A ``decider`` in the body
    is a registry name only (``deciders.registry.names_only``): a remote caller never names a file to read.
    ``route_threshold``: the gateway's ``[route] threshold`` (a route body without one gets it, unless its
    decider has its own; never the user's config file)."""
    with names_only(), configured_threshold(route_threshold, "gateway config [route]"):
        return await task_answer(client, task, body)


EMBEDDING_FIELDS = {"input", "model", "encoding_format", "user", "dimensions"}


async def embeddings_answer(client: AsyncClient, body: dict[str, Any]) -> JSONResponse:
    """``/v1/embeddings``: passed through to a pooling engine; for a per-token engine (tiankong's engines with
    embeddings on, ``--pooling none``) the client's mean pooling gives the OpenAI answer. ``encoding_format``
    ``base64`` (the openai SDK's default) is little-endian float32, as OpenAI sends it."""
    unknown = sorted(set(body) - EMBEDDING_FIELDS)
    if unknown:
        raise ConfigError(f"unknown embeddings field(s) {unknown}",
                          hint=f"fields: {', '.join(sorted(EMBEDDING_FIELDS))}")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64") or body.get("dimensions") is not None:
        raise ConfigError("encoding_format float or base64 at the model's own dimensions is served",
                          hint="leave dimensions out; encoding_format: float or base64")
    items = request_items(body.get("input"))
    try:
        answer = await openai_embeddings(client._request, {"input": items, "model": body.get("model")}, items,
                                         body.get("model"))
    except ServerError as exc:
        if exc.status == 501:  # `not_supported`, as any engine's 501 (docs/gateway.md): served nowhere here
            return error_response(400, "embeddings are off on this engine — start the gateway with `tiankong serve "
                                  "--embeddings` (or engine.embeddings = true in the config)",
                                  "invalid_request_error", "not_supported")
        raise
    except InputTooLong as exc:  # as the chat route answers an input over the context (OpenAI's code)
        return error_response(400, exc.one_line(), "invalid_request_error", "context_length_exceeded", param="input")
    return JSONResponse(as_base64(answer) if encoding == "base64" else answer)


def as_base64(answer: Any) -> Any:
    """Every ``embedding`` list as base64 of little-endian float32 (OpenAI's ``encoding_format=base64``)."""
    for item in answer.get("data", []) if isinstance(answer, dict) else []:
        vector = item.get("embedding")
        if isinstance(vector, list):
            item["embedding"] = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return answer


RERANK_FIELDS = {"model", "query", "documents", "top_n", "return_documents", "decider"}
#: the ranker ``/v1/rerank`` answers as; its ``model`` is this, absent, or a model of the pool (else 404)
OWN_RANKER = "tiankong-rerank"


def cohere_rerank_body(body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/rerank`` (Cohere / Jina / llama-server shape) → the rerank task's body. Documents may be strings
    or ``{"text": …}`` objects; unknown fields are refused, not dropped."""
    unknown = sorted(set(body) - RERANK_FIELDS)
    if unknown:
        raise ConfigError(f"unknown rerank field(s) {unknown}", hint=f"fields: {', '.join(sorted(RERANK_FIELDS))}")
    documents = body.get("documents")
    if not isinstance(documents, list):
        raise ConfigError("documents must be a list of strings or {text} objects", param="documents")
    if not isinstance(body.get("return_documents", False), bool):
        raise ConfigError("return_documents must be true or false", param="return_documents")
    texts = [d.get("text") if isinstance(d, dict) else d for d in documents]
    task = {"query": body.get("query"), "documents": texts}
    for key in ("top_n", "decider"):
        if body.get(key) is not None:
            task[key] = body[key]
    return task


def cohere_rerank_answer(answer: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The task's ranking in Cohere's shape: ``results: [{index, relevance_score, document?}]``, best first."""
    results = []
    for item in answer["results"]:
        row: dict[str, Any] = {"index": item["index"], "relevance_score": item["score"]}
        if body.get("return_documents"):
            row["document"] = {"text": item["text"]}
        results.append(row)
    return {"model": body.get("model") or OWN_RANKER, "results": results,
            "meta": {"parts": answer.get("parts", []), "notes": answer.get("notes", [])}}
