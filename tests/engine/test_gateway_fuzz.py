"""Fuzzing the gateway: schemathesis cases from ``/openapi.json`` against the real gateway + SmolLM2, and
hand-made malformed bodies on every POST route. No 5xx; every 4xx carries an OpenAI-style error body.

Bounded: a fixed number of examples per operation (``TIANKONG_FUZZ_EXAMPLES``, default 3, positive and
negative cases), derandomized (the same cases on every run), no shrinking, and the integers that size the
engine's work (token budgets, summary words, number of rewrites) are clamped before sending when they are
above a small value, only to bound the run time: values too small or of the wrong type are sent as
generated and must be refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from test_gateway_admission import serve_app, state_for

from tiankong.engine import EngineProcess
from tiankong.gateway.openapi import build_openapi

EXAMPLES = int(os.environ.get("TIANKONG_FUZZ_EXAMPLES", "3"))
CLAMP = {"max_tokens": 8, "max_completion_tokens": 8, "n_predict": 8, "words": 12, "n": 2, "budget_tokens": 24,
         "chunk_tokens": 64}
DOCUMENT = build_openapi()
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)
OPERATIONS = [(result.ok().method.upper(), result.ok().path) for result in SCHEMA.get_all_operations()]
POST_ROUTES = [path for method, path in OPERATIONS if method == "POST"]
#: the POST routes that read a JSON body at a fixed path: the malformed bodies below are JSON's faults (an upload
#: is multipart — told so before its size is read; a batch's cancel names a batch that must exist first)
JSON_POST_ROUTES = [path for path in POST_ROUTES if "{" not in path
                    and "application/json" in DOCUMENT["paths"][path]["post"]["requestBody"]["content"]]


@pytest.fixture(scope="module")
def gateway(smol_engine: EngineProcess) -> Iterator[str]:
    with serve_app(state_for(smol_engine, max_body_bytes=64 * 1024)) as url:
        yield url


def assert_openai_error(answer: httpx.Response | Any, where: str) -> None:
    assert answer.status_code < 500, f"{where}: {answer.status_code} {answer.text[:500]}"
    if answer.status_code >= 400:
        error = json.loads(answer.text)["error"]
        assert all(isinstance(error[k], str) and error[k] for k in ("message", "type", "code")), (where, error)


def bounded(body: Any) -> Any:
    if isinstance(body, dict):
        for key, most in CLAMP.items():
            value = body.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > most:
                body[key] = most
    return body


def test_every_route_is_fuzzed() -> None:
    assert len(OPERATIONS) >= 15 and "/v1/chat/completions" in POST_ROUTES and "/v1/tasks/extract" in POST_ROUTES


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_schemathesis_finds_no_5xx(gateway: str, method: str, path: str) -> None:
    operation = SCHEMA[path][method]
    strategy = operation.as_strategy(GenerationMode.POSITIVE) | operation.as_strategy(GenerationMode.NEGATIVE)
    seen: list[int] = []

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def one(case: Any) -> None:
        if method == "POST" and not isinstance(case.body, schemathesis.core.NotSet):
            case.body = bounded(case.body)
        answer = case.call(base_url=gateway, timeout=600)
        seen.append(answer.status_code)
        assert_openai_error(answer, f"{method} {path} {str(case.body)[:200]!r}")

    one()
    assert seen


MALFORMED: list[tuple[str, bytes, int]] = [
    ("malformed JSON", b'{"messages": [', 400),
    ("invalid UTF-8", b'{"text": "\xff\xfe"}', 400),
    ("not an object", b'["text"]', 400),
    ("wrong types", json.dumps({"messages": 1, "prompt": {}, "text": [], "labels": 5, "query": None,
                                "documents": "x", "input": {}, "schema": 3}).encode(), 400),
    ("negative budget", json.dumps({"prompt": "hi", "messages": [{"role": "user", "content": "hi"}],
                                    "max_tokens": -1}).encode(), 400),
    ("oversized", json.dumps({"text": "x" * 70_000}).encode(), 413),
]


@pytest.mark.parametrize("path", JSON_POST_ROUTES)
def test_malformed_bodies_on_every_post_route(gateway: str, path: str) -> None:
    for name, raw, status in MALFORMED:
        answer = httpx.post(f"{gateway}{path}", content=raw, headers={"content-type": "application/json"},
                            timeout=120)
        assert_openai_error(answer, f"{path} {name}")
        if name == "wrong types":
            assert 400 <= answer.status_code < 500, (path, name, answer.text[:300])
        else:
            assert answer.status_code == status, (path, name, answer.text[:300])
