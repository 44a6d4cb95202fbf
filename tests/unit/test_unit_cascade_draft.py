"""Draft then replace (issue 43): the request shaping and refusals of ``gateway/cascade.py`` on hand-made bodies —
no engine (the streams themselves, with SmolLM2 and Qwen2.5-Coder, are in tests/engine/test_draft_replace.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.responses import JSONResponse

from tiankong.config import CascadeSettings
from tiankong.engine.pool import EnginePool, PoolEntry, Replica
from tiankong.errors import ConfigError
from tiankong.gateway.cascade import check_cascade, draft_option, draft_refused, shape_chat
from tiankong.gateway.metrics import RequestRecord

CASCADE = CascadeSettings(draft_model="draft", quality_model="quality")
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def pool() -> EnginePool:
    """Two remote models that are never reached (only their names are resolved)."""
    return EnginePool([PoolEntry(name, [Replica(f"{name}#0", remote_url=f"http://127.0.0.1:9/{name}")],
                                 on_demand=False) for name in ("draft", "quality", "other")])


def error(response: JSONResponse | bool | None) -> dict[str, Any]:
    assert isinstance(response, JSONResponse) and response.status_code == 400
    found: dict[str, Any] = json.loads(bytes(response.body))["error"]
    return found


def shaped(body: dict[str, Any], cascade: CascadeSettings | None = CASCADE) -> tuple[Any, RequestRecord]:
    call = RequestRecord("/v1/chat/completions")
    return shape_chat(body, call, cascade, pool()), call


def test_the_draft_option_is_popped_and_checked() -> None:
    body: dict[str, Any] = {**CHAT, "tiankong": {"draft": True}}
    assert draft_option(body) is True and "tiankong" not in body  # never sent on to an engine
    assert draft_option(dict(CHAT)) is False and draft_option({**CHAT, "tiankong": {}}) is False
    for bad in ("yes", {"draft": "yes"}, {"draft": True, "other": 1}, ["draft"]):
        assert error(draft_option({**CHAT, "tiankong": bad}))["param"] == "tiankong"


def test_a_draft_with_no_cascade_configured_is_a_clear_400() -> None:
    refused = error(draft_refused(dict(CHAT), configured=False))
    assert refused["param"] == "tiankong" and "[cascade] draft_model and quality_model" in refused["message"]
    answer, call = shaped({**CHAT, "tiankong": {"draft": True}}, cascade=None)
    assert error(answer)["param"] == "tiankong" and not call.draft


def test_n_above_one_and_structured_requests_are_refused_with_a_draft() -> None:
    refused = error(draft_refused({**CHAT, "n": 2}, configured=True))
    assert refused["param"] == "n" and "one draft and one answer" in refused["message"]
    assert draft_refused({**CHAT, "n": 1}, configured=True) is None
    for name, value in (("tools", [{"type": "function", "function": {"name": "f"}}]),
                        ("response_format", {"type": "json_object"}), ("grammar", "root ::= \"a\""),
                        ("json_schema", {"type": "object"}), ("lora", [{"id": 0, "scale": 1.0}])):
        assert error(draft_refused({**CHAT, name: value}, configured=True))["param"] == name
    assert draft_refused({**CHAT, "response_format": {"type": "text"}}, configured=True) is None


def test_opting_in_marks_the_call_and_answers_with_the_quality_model() -> None:
    body: dict[str, Any] = {**CHAT, "tiankong": {"draft": True}}
    answer, call = shaped(body)
    assert answer is None and call.draft and body["model"] == "quality"
    named, call = shaped({**CHAT, "model": "quality", "tiankong": {"draft": True}})
    assert named is None and call.draft
    other = error(shaped({**CHAT, "model": "other", "tiankong": {"draft": True}})[0])
    assert other["param"] == "model" and "'quality'" in other["message"]


def test_opting_out_changes_nothing_but_the_default_model() -> None:
    body: dict[str, Any] = dict(CHAT)
    answer, call = shaped(body)
    assert answer is None and not call.draft and body == {**CHAT, "model": "quality"}
    named: dict[str, Any] = {**CHAT, "model": "other", "tiankong": {"draft": False}}
    answer, call = shaped(named)
    assert answer is None and not call.draft and named == {**CHAT, "model": "other"}
    untouched: dict[str, Any] = dict(CHAT)
    answer, call = shaped(untouched, cascade=None)
    assert answer is None and not call.draft and untouched == CHAT  # no cascade: the body is left as it came


def test_both_cascade_models_must_be_pool_models() -> None:
    check_cascade(CASCADE, pool())
    with pytest.raises(ConfigError, match=r"\[cascade\] draft_model = 'missing'"):
        check_cascade(CascadeSettings(draft_model="missing", quality_model="quality"), pool())
