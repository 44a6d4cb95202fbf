"""What a sweep of ``tag`` found (2026-12-08): a Chinese text under the 6,000-character threshold overflowed the
context (the threshold counted characters; a Chinese character is up to 1.7 tokens), and the default schema's
keywords came back repeated ("type", "type", …)."""

from __future__ import annotations

from helpers.scripted import ScriptedEngine, chat_reply, engine_error
from tiankong import Client
from tiankong.tasks.tag import MAX_TAG_CHARS, MAX_TAG_TOKENS, estimated_tokens


def test_the_threshold_counts_tokens_so_chinese_is_compressed_sooner() -> None:
    assert estimated_tokens("订单" * 2160) > MAX_TAG_TOKENS  # 4,320 characters: 7,317 tokens on the test model
    assert estimated_tokens("word " * 1000) <= MAX_TAG_TOKENS  # 5,000 characters of English: as before, whole
    assert estimated_tokens("x" * (MAX_TAG_CHARS + 4)) > MAX_TAG_TOKENS  # English past 6,000 characters: as before


def test_default_keywords_come_back_once_each() -> None:
    engine = ScriptedEngine()
    engine.on("/completion", lambda body: engine_error())
    engine.on("/v1/chat/completions", lambda body: chat_reply(
        '{"keywords":["db","outage","DB","db"],"topic":"ops","language":"en"}'))
    with Client("http://engine.test", transport=engine.transport()) as client:
        assert client.tag("The db is down").data["keywords"] == ["db", "outage"]
        own = {"type": "object", "properties": {"keywords": {"type": "array", "items": {"type": "string"}}}}
        engine.replies["/v1/chat/completions"] = [lambda body: chat_reply('{"keywords":["a","a"]}')]
        assert client.tag("The db is down", schema=own).data["keywords"] == ["a", "a"]  # a caller's schema: as is
