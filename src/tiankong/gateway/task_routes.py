"""``POST /v1/tasks/<task>``: every pipeline task over HTTP, with validated request bodies.

Each body is a Pydantic model (``extra="forbid"``): a wrong type or an unknown field is a 400 naming the field.
Counts that drive the engine's work (rewrites, summary words, documents, labels, token budgets) are bounded.
The answer is the task result's JSON (``to_json()``), the same shape the CLI prints with ``--json``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.responses import JSONResponse

from ..api import AsyncClient
from ..client._shared import embeddings_items, embeddings_response, mean_pooled, per_token_refused
from ..errors import ConfigError, ServerError
from ..tasks import Route


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None


class ClassifyBody(_Body):
    text: str
    labels: list[str] | None = Field(None, max_length=256)
    decider: str | None = Field(None, max_length=200)
    descriptions: dict[str, str] | None = None
    examples: list[dict[str, Any]] | None = Field(None, max_length=64)
    instructions: str | None = None
    multi_label: bool = False
    threshold: float | None = Field(None, ge=0.0, le=1.0)
    calibrate: bool | None = None

    @model_validator(mode="after")
    def _labels_or_decider(self) -> ClassifyBody:
        if self.labels is None and self.decider is None:
            raise ValueError("give labels (at least two) or a decider (see `tiankong deciders list`)")
        if self.decider is not None and (self.examples or self.descriptions or self.multi_label
                                         or self.calibrate is not None or self.instructions):
            raise ValueError("a decider answers on its own: examples, descriptions, instructions, multi_label and "
                             "calibrate apply to prompting only (leave them out, or leave out decider)")
        return self


class RouteBody(_Body):
    text: str
    routes: list[Route] = Field(min_length=1, max_length=64)
    threshold: float = 0.6
    redline: bool = True
    escalate_target: str = "upstream"
    decider: str | None = Field(None, max_length=200)


class RewriteBody(_Body):
    query: str
    mode: str = "rewrite"
    n: int = Field(3, ge=1, le=10)


class RerankBody(_Body):
    query: str
    documents: list[str] = Field(max_length=1000)
    top_n: int | None = Field(None, ge=1)  # DESIGN.md's name (Cohere/Jina rerank APIs); top_k is kept as an alias
    top_k: int | None = Field(None, ge=1)
    mode: str = "pointwise"

    @model_validator(mode="after")
    def _one_top(self) -> RerankBody:
        if self.top_n is not None and self.top_k is not None and self.top_n != self.top_k:
            raise ValueError("top_n and top_k are the same setting: give one")
        return self


class RedactBody(_Body):
    text: str
    style: str = "placeholder"
    use_model: bool = True
    types: list[str] | None = Field(None, max_length=16)


class GuardBody(_Body):
    text: str
    decider: str | None = Field("guard", max_length=200)
    flag_at: float | None = Field(None, gt=0.0, le=1.0)
    block_at: float | None = Field(None, gt=0.0, le=1.0)
    policies: list[str] | None = Field(None, max_length=16)
    use_model: bool = False


class CompressBody(_Body):
    text: str
    budget_tokens: int = Field(512, ge=16, le=65536)
    chunk_tokens: int = Field(1024, ge=64, le=65536)
    question: str | None = None


class SummarizeBody(_Body):
    text: str
    words: int = Field(80, ge=5, le=1000)
    chunk_tokens: int = Field(1024, ge=64, le=65536)


class TagBody(_Body):
    text: str
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    max_keywords: int = Field(8, ge=1, le=32)


BODIES: dict[str, type[_Body]] = {
    "classify": ClassifyBody, "route": RouteBody, "rewrite": RewriteBody, "rerank": RerankBody,
    "redact": RedactBody, "guard": GuardBody, "compress": CompressBody, "summarize": SummarizeBody, "tag": TagBody,
}


def parse_body(task: str, body: dict[str, Any]) -> _Body:
    try:
        return BODIES[task].model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid {task} request: {problems}", hint=f"see docs/tasks.md#{task}") from None


async def run_task(client: AsyncClient, task: str, body: dict[str, Any]) -> dict[str, Any]:
    """Validate the body, run the task, return its JSON."""
    args = parse_body(task, body).model_dump(exclude={"model"}, by_alias=False)
    if task == "tag":
        args["schema"] = args.pop("schema_")
    method = getattr(client, task)
    text_key = "query" if task in ("rewrite", "rerank") else "text"
    first = args.pop(text_key)
    if task == "classify":
        return (await method(first, args.pop("labels"), **args)).to_json()  # type: ignore[no-any-return]
    if task == "route":
        return (await method(first, args.pop("routes"), **args)).to_json()  # type: ignore[no-any-return]
    if task == "rerank":
        top_n = args.pop("top_n")
        args["top_k"] = top_n if top_n is not None else args["top_k"]
        return (await method(first, args.pop("documents"), **args)).to_json()  # type: ignore[no-any-return]
    result = await method(first, **args)
    if task == "tag":
        return {"data": result.data, "attempts": result.attempts}
    return result.to_json()  # type: ignore[no-any-return]


EMBEDDING_FIELDS = {"input", "model", "encoding_format", "user", "dimensions"}


async def embeddings_answer(client: AsyncClient, body: dict[str, Any]) -> JSONResponse:
    """``/v1/embeddings``: passed through to a pooling engine; for a per-token engine (tiankong's engines with
    embeddings on, ``--pooling none``) the client's mean pooling gives the OpenAI answer."""
    unknown = sorted(set(body) - EMBEDDING_FIELDS)
    if unknown:
        raise ConfigError(f"unknown embeddings field(s) {unknown}",
                          hint=f"fields: {', '.join(sorted(EMBEDDING_FIELDS))}")
    if body.get("encoding_format", "float") != "float" or body.get("dimensions") is not None:
        raise ConfigError("only encoding_format float at the model's own dimensions is served",
                          hint="leave encoding_format and dimensions out")
    items = embeddings_items(body.get("input"))
    try:
        return JSONResponse(await client._request("POST", "/v1/embeddings", {"input": items,
                                                                             "model": body.get("model")}))
    except ServerError as exc:
        if exc.status == 501:
            raise ConfigError("embeddings are off on this engine",
                              hint="start the gateway with `tiankong serve --embeddings` "
                                   "(or engine.embeddings = true in the config)") from None
        if not per_token_refused(exc):
            raise
    vectors, tokens = mean_pooled(await client._request("POST", "/embeddings", {"content": items}))
    return JSONResponse(embeddings_response(vectors, tokens, body.get("model")))
