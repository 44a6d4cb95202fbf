"""``GET /openapi.json``: an OpenAPI 3.1 document for every gateway route (a test compares it with the app's routes).

Task request bodies come from the Pydantic models the routes validate with, so the document cannot drift
from what is accepted (a task whose route reads its body itself, extract, declares its schemas in its spec).
Every error is the OpenAI shape ``{"error": {"message", "type", "code"}}``.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from ..tasks.bodies import BODIES
from ..tasks.specs import SPECS

REF = "#/components/schemas/{model}"
JSON = "application/json"

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type", "code"], "properties": {
        "message": {"type": "string"},
        "type": {"type": "string", "examples": ["invalid_request_error", "rate_limit_exceeded", "engine_error"]},
        "code": {"type": "string", "examples": ["invalid_json", "queue_full", "deadline_exceeded"]},
        "param": {"type": ["string", "null"], "description": "the request field at fault, if one is"},
    }}},
}
MESSAGES = {"type": "array", "items": {"type": "object", "required": ["role"], "properties": {
    "role": {"type": "string"}, "content": {}}}}
SAMPLING = {"model": {"type": "string"}, "max_tokens": {"type": "integer", "minimum": 1},
            "temperature": {"type": "number"}, "seed": {"type": "integer"}, "stream": {"type": "boolean"},
            "stop": {}}
CHAT_BODY = {"type": "object", "required": ["messages"], "additionalProperties": True, "properties": {
    "messages": MESSAGES, **SAMPLING, "response_format": {"type": "object", "description": "json_schema / "
                                                          "json_object answers are validated (fail closed)"}}}
COMPLETION_BODY = {"type": "object", "required": ["prompt"], "additionalProperties": True,
                   "properties": {"prompt": {}, **SAMPLING}}
EMBEDDING_BODY = {"type": "object", "required": ["input"], "properties": {"input": {}, "model": {"type": "string"}}}

ERRORS = {
    "400": "malformed JSON, invalid UTF-8, wrong types, invalid schema", "401": "missing or invalid API key",
    "404": "unknown model or route", "413": "request body too large or input too long",
    "422": "the model's answer could not be made valid", "429": "queue full (see Retry-After)",
    "503": "engine unavailable or failed (see Retry-After)", "504": "request deadline passed",
}


def _errors(*codes: str) -> dict[str, Any]:
    chosen = codes or tuple(ERRORS)
    return {code: {"description": ERRORS[code], "content": {JSON: {"schema": {"$ref": REF.format(model="Error")}}}}
            for code in chosen}


def _post(summary: str, body: dict[str, Any], answer: dict[str, Any], *, stream: bool = False) -> dict[str, Any]:
    ok: dict[str, Any] = {JSON: {"schema": answer}}
    if stream:
        ok["text/event-stream"] = {"schema": {"type": "string", "description": "SSE chunks, then data: [DONE]"}}
    return {"post": {"summary": summary, "requestBody": {"required": True, "content": {JSON: {"schema": body}}},
                     "responses": {"200": {"description": "OK", "content": ok}, **_errors()}}}


def _get(summary: str, answer: dict[str, Any], *errors: str, media: str = JSON) -> dict[str, Any]:
    return {"get": {"summary": summary, "responses": {
        "200": {"description": "OK", "content": {media: {"schema": answer}}}, **_errors(*errors)}}}


RERANK_BODY = {"type": "object", "required": ["query", "documents"], "additionalProperties": False, "properties": {
    "model": {"type": "string", "description": "left out, tiankong-rerank, or a served model"},
    "query": {"type": "string"},
    "documents": {"type": "array", "items": {"anyOf": [
        {"type": "string"}, {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}]}},
    "top_n": {"type": "integer", "minimum": 1}, "return_documents": {"type": "boolean"},
    "decider": {"type": "string"}}}
ID = {"type": "string"}


def _id_param(name: str) -> list[dict[str, Any]]:
    return [{"name": name, "in": "path", "required": True, "schema": ID}]


def batch_paths() -> dict[str, Any]:
    """OpenAI's Batch API (docs/batch-api.md): uploads, batches and their results, each a caller's own."""
    obj = {"type": "object"}
    upload = {"type": "object", "required": ["file", "purpose"], "properties": {
        "file": {"type": "string", "format": "binary", "description": "JSONL, one request per line"},
        "purpose": {"type": "string", "enum": ["batch"]}}}
    create = {"type": "object", "required": ["input_file_id", "endpoint", "completion_window"],
              "additionalProperties": False, "properties": {
                  "input_file_id": ID, "endpoint": {"type": "string"}, "completion_window": {"type": "string"},
                  "metadata": {"type": "object", "additionalProperties": {"type": "string"}}}}
    post_upload = _post("Upload a batch input file (multipart/form-data)", upload, obj)
    post_upload["post"]["requestBody"]["content"] = {"multipart/form-data": {"schema": upload}}
    return {
        "/v1/files": {**post_upload, **_get("The caller's files", obj, "401")},
        "/v1/files/{file_id}": {"get": {**_get("One file", obj, "401", "404")["get"], "parameters": _id_param(
            "file_id")}, "delete": {"summary": "Delete a file", "parameters": _id_param("file_id"), "responses": {
                "200": {"description": "OK", "content": {JSON: {"schema": obj}}}, **_errors("401", "404")}}},
        "/v1/files/{file_id}/content": {"get": {**_get("A file's content (JSONL)", {"type": "string"}, "401", "404",
                                                       media="application/jsonl")["get"],
                                                "parameters": _id_param("file_id")}},
        "/v1/batches": {**_post("Create a batch", create, obj), **_get("The caller's batches", obj, "401")},
        "/v1/batches/{batch_id}": {"get": {**_get("One batch", obj, "401", "404")["get"],
                                           "parameters": _id_param("batch_id")}},
        "/v1/batches/{batch_id}/cancel": {"post": {**_post("Cancel a batch", obj, obj)["post"],
                                                   "parameters": _id_param("batch_id")}},
    }


def build_openapi(title: str = "tiankong gateway", version: str = "0.1.0", *, batches: bool = True) -> dict[str, Any]:
    """The document of every route this gateway serves (``batches``: the Batch API is on)."""
    refs, schemas = models_json_schema([(model, "validation") for model in BODIES.values()], ref_template=REF)
    components = dict(schemas.get("$defs", {}))
    obj = {"type": "object"}
    paths: dict[str, Any] = {
        "/health": _get("Engine readiness (503 while the engine is not ready)", obj, "503"),
        "/metrics": _get("Prometheus metrics", {"type": "string"}, "401", media="text/plain"),
        "/openapi.json": _get("This document", obj),
        "/ui": _get("Dashboard page (self-contained HTML)", {"type": "string"}, media="text/html"),
        "/ui/stats": _get("Dashboard data: windowed throughput, TTFT/latency percentiles, series, engines", obj,
                          "401"),
        "/v1/models": _get("Served models", obj, "401"),
        "/v1/models/{model}": {"get": {**_get("One served model", obj, "401", "404")["get"], "parameters": [
            {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}]}},
        "/v1/chat/completions": _post("OpenAI chat completions (streaming, validated structured output)",
                                      CHAT_BODY, obj, stream=True),
        "/v1/completions": _post("OpenAI text completions", COMPLETION_BODY, obj, stream=True),
        "/v1/embeddings": _post("OpenAI embeddings", EMBEDDING_BODY, obj),
        "/v1/rerank": _post("Cohere / Jina rerank (the rerank task's ranking, best first)", RERANK_BODY, obj),
        # a task whose route reads its body itself (extract) declares its schemas in its spec
        **{f"/v1/tasks/{task}": _post(spec.http.summary, spec.http.body, spec.http.result)
           for task, spec in SPECS.items() if spec.http is not None},
    }
    native = {"type": "object", "description": "llama.cpp's own request body (passed to the engine)",
              "properties": {"model": {"type": "string"}}}
    for path in ("/completion", "/tokenize", "/detokenize", "/apply-template", "/embeddings"):
        paths[path] = _post(f"llama.cpp's {path} (passthrough for tiankong's client flows)", native, obj,
                            stream=path == "/completion")
    for path in ("/props", "/lora-adapters"):
        paths[path] = {"get": {**_get(f"llama.cpp's {path} of the engine serving ?model=", obj, "401", "404")["get"],
                               "parameters": [{"name": "model", "in": "query", "required": False,
                                               "schema": {"type": "string"}}]}}
    for task, model in BODIES.items():
        paths[f"/v1/tasks/{task}"] = _post(f"The {task} task", dict(refs[(model, "validation")]), obj)
    if batches:
        paths.update(batch_paths())
    components["Error"] = ERROR_SCHEMA
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version,
                 "description": "OpenAI-compatible gateway in front of llama-server, plus pipeline tasks."},
        "paths": paths,
        "components": {"schemas": components,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}, {}],
    }
