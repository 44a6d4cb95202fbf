"""The clients people already use, against a real gateway (issue 23 item 5, the openai SDK part): chat, stream,
``parse`` with a Pydantic model (validated, fail-closed), embeddings and ``models.retrieve``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel

from conftest import serve_app
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.gateway import GatewayState
from tiankong.models import TEST_MODEL


class City(BaseModel):
    city: str
    country: str


@pytest.fixture(scope="module")
def sdk(engine_binary: EngineBinary, smol_path: Path) -> Iterator[openai.OpenAI]:
    config = EngineConfig(model=smol_path, ctx=4096, slots=2, alias=TEST_MODEL, embeddings=True, pooling="none")
    engine = EngineProcess(config, engine_binary).start()
    try:
        with serve_app(GatewayState.for_engine(engine, TEST_MODEL)) as url:
            yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    finally:
        engine.stop()


def test_openai_sdk_chat_stream_parse_embeddings_and_models(sdk: openai.OpenAI) -> None:
    chat = sdk.chat.completions.create(model=TEST_MODEL, messages=[{"role": "user", "content": "Say hi."}],
                                       max_tokens=8, temperature=0, seed=42)
    assert chat.choices[0].message.role == "assistant" and chat.usage is not None and chat.usage.total_tokens > 0
    pieces = [c.choices[0].delta.content or "" for c in sdk.chat.completions.create(
        model=TEST_MODEL, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0, seed=42,
        stream=True) if c.choices]
    assert "".join(pieces).strip()
    parsed = sdk.beta.chat.completions.parse(
        model=TEST_MODEL, messages=[{"role": "user", "content": "The Louvre is in Paris, France. Where is it?"}],
        response_format=City, max_tokens=64, temperature=0, seed=42)
    city = parsed.choices[0].message.parsed
    assert isinstance(city, City) and city.city and city.country  # validated against the model's schema
    vectors = sdk.embeddings.create(model=TEST_MODEL, input=["a cat", "a dog"])
    assert len(vectors.data) == 2 and len(vectors.data[0].embedding) == len(vectors.data[1].embedding) > 100
    assert sdk.models.retrieve(TEST_MODEL).id == TEST_MODEL
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(model=TEST_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=0)
    assert refused.value.body["param"] == "max_tokens"  # type: ignore[index]
