"""``Guard``: who may call the gateway and what they may send — the checks every route runs before any engine
work, in one place.

* **Auth**: the caller's API key (``Authorization: Bearer`` or ``x-api-key``); a missing or wrong one is 401,
  and an address that failed too often is throttled (429 ``auth_throttled``, ``keys.AuthThrottle``).
* **Rate**: the key's requests per minute (429 ``Retry-After``); the Batch API's own lines are not counted.
* **Origin**: a browser request from a foreign page is refused before any route runs (``origin.OriginCheck``,
  installed as middleware by :meth:`Guard.middleware`).
* **Body**: bounded size and arrival time, a JSON object, a sane token budget; logged when ``log_prompts``.
"""

from __future__ import annotations

from typing import Any

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .body import bad_generation_fields, log_prompt, read_json
from .keys import ApiKey, AuthThrottle, RateLimiter
from .metrics import GatewayMetrics, RequestRecord
from .origin import OriginCheck
from .responses import error_response, rpm_exceeded
from .state import GatewayState


def unauthorized() -> JSONResponse:
    return error_response(401, "missing or invalid API key", "authentication_error", "invalid_api_key")


class Guard:
    """Auth, rate, origin and body checks for one gateway (see the module docstring)."""

    def __init__(self, state: GatewayState, metrics: GatewayMetrics) -> None:
        self.state = state
        self.metrics = metrics
        self.limiter = RateLimiter()
        self.auth_throttle = AuthThrottle()

    def middleware(self) -> Middleware:
        """The origin check (keyless gateways refuse every cross-site browser request)."""
        return Middleware(OriginCheck, keyless=lambda: not self.state.keys)

    def authenticate(self, request: Request) -> tuple[ApiKey | None, Response | None]:
        """The caller's key, or the answer for a caller without one: 401, or 429 once its address failed too often."""
        address = request.client.host if request.client else "?"
        if self.state.keys and (wait := self.auth_throttle.retry_after(address)) is not None:
            self.metrics.auth_failures.labels("throttled").inc()
            return None, error_response(429, f"too many failed API keys from {address}; retry after {wait} s",
                                        "rate_limit_exceeded", "auth_throttled", headers={"Retry-After": str(wait)})
        key = self.state.key_of(request)
        if key is None:
            self.auth_throttle.failed(address)
            self.metrics.auth_failures.labels("unauthorized").inc()
            return None, unauthorized()
        return key, None

    def refusal(self, request: Request) -> Response | None:
        """None when the caller's key is good (GET routes: nothing else to check)."""
        return self.authenticate(request)[1]

    def admit_key(self, key: ApiKey) -> Response | None:
        """The key's requests-per-minute (the Batch API's calls count too); None when it may go."""
        rpm = self.state.rpm_for(key)
        if key.batch or (wait := self.limiter.admit(key.hash, rpm)) is None:
            return None
        return rpm_exceeded(wait, rpm or 0)

    async def admit(self, request: Request, call: RequestRecord) -> dict[str, Any] | Response:
        """Auth, the key's rate, then the body: the request's JSON object, or the answer that refuses it."""
        key, refusal = self.authenticate(request)
        if refusal is not None or key is None:
            assert refusal is not None
            return refusal
        call.key, call.batch = key.name, key.batch
        if (refused := self.admit_key(key)) is not None:
            call.rejected = "key_rpm"
            return refused
        server = self.state.server
        body = await read_json(request, server.max_body_bytes, server.body_timeout_s)
        if isinstance(body, JSONResponse):
            return body
        if (bad := bad_generation_fields(body, request.url.path)) is not None:
            return bad
        if server.log_prompts:
            log_prompt(call.route, key.name, body)
        return body
