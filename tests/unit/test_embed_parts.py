"""``Client.embed`` / ``AsyncClient.embed`` of more texts than one HTTP request takes (2,048, a gateway's limit) sends
them in parts and returns every vector in order (a review of 2026-12-08: over a gateway, 2,049 texts were a 400)."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers.scripted import ScriptedEngine
from tiankong import AsyncClient, Client
from tiankong.client._embeddings import MAX_INPUTS


def _engine() -> ScriptedEngine:
    def answer(body: Any) -> Any:
        return {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [float(len(text)), 1.0]}
                                           for i, text in enumerate(body["input"])]}

    return ScriptedEngine().on("/v1/embeddings", answer)


TEXTS = ["x" * (1 + i % 7) for i in range(MAX_INPUTS + 53)]


def test_the_sync_client_sends_parts_and_keeps_the_order() -> None:
    engine = _engine()
    with Client("http://engine.test", transport=engine.transport()) as client:
        vectors = client.embed(TEXTS)
    assert [len(b["input"]) for b in engine.bodies("/v1/embeddings")] == [MAX_INPUTS, 53]
    assert [v[0] for v in vectors] == [float(len(t)) for t in TEXTS]


def test_the_async_client_does_the_same() -> None:
    engine = _engine()

    async def run() -> list[list[float]]:
        async with AsyncClient("http://engine.test", transport=engine.transport()) as client:
            return await client.embed(TEXTS)

    vectors = asyncio.run(run())
    assert [len(b["input"]) for b in engine.bodies("/v1/embeddings")] == [MAX_INPUTS, 53]
    assert [v[0] for v in vectors] == [float(len(t)) for t in TEXTS]
