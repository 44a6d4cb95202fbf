"""What a docs-against-behaviour sweep found (2026-12-07): names the tool prints that it then refused, and an
OpenAPI document said to cover every route that left some out. No engine: the gateway below has a dead upstream
and is only asked for its routes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.routing import Route

from tiankong.deciders.registry import load_decider, names_only
from tiankong.errors import ConfigError
from tiankong.gateway import GatewayState
from tiankong.gateway.app import Gateway


@pytest.mark.parametrize("name", ["guard", "rerank"])
def test_a_shipped_decider_answers_to_the_name_it_prints(name: str) -> None:
    shipped = load_decider(name)
    assert shipped.source == "builtin" and "@" in shipped.ref  # `deciders list` and its answers print guard@1
    assert load_decider(shipped.ref) is shipped
    with names_only():  # how an HTTP body's decider is looked up
        assert load_decider(shipped.ref) is shipped
    with pytest.raises(ConfigError):
        load_decider(f"{name}@{shipped.version + 1}")


@pytest.mark.parametrize("batches", [True, False])
def test_the_openapi_document_has_every_route_the_gateway_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  batches: bool) -> None:
    monkeypatch.setenv("TIANKONG_DATA_DIR", str(tmp_path))
    from tiankong.config import BatchesSettings

    state = GatewayState(upstream_url="http://127.0.0.1:9", batches=BatchesSettings(enabled=batches))
    gateway = Gateway(state)
    served = {(re.sub(r"\{(\w+):path\}", r"{\1}", route.path), method.lower())
              for route in gateway.routes() if isinstance(route, Route)
              for method in (route.methods or ()) if method != "HEAD"}
    served -= {("/", "get"), ("/v1/tasks/{task}", "post")}  # a redirect; the tasks are listed one by one
    documented = {(path, method) for path, item in gateway.openapi["paths"].items() for method in item}
    assert served - documented == set()
    assert {"/v1/rerank", "/v1/tasks/classify"} <= {path for path, _ in documented}
    assert ("/v1/batches", "post") in documented if batches else not any("/v1/batches" in p for p, _ in documented)
