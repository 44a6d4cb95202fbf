"""API keys: stored hashed (``sha256:<hex>``), looked up in constant time, each with a requests-per-minute limit.

The limit is a sliding window: a key may start ``rpm`` requests in any 60 seconds. The request beyond that
is refused (429 ``rate_limit_exceeded`` / ``rpm_exceeded``) with ``Retry-After`` = the seconds until the
oldest request in the window leaves it. Refused requests do not count.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..paths import installation_secret

WINDOW_S = 60.0


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def as_hash(key: str) -> str:
    """A configured key as its hash (already-hashed ``sha256:`` keys stay as they are)."""
    return key if key.startswith("sha256:") else hash_key(key)


def owner_salt(path: Path) -> bytes:
    """This installation's random salt for the owners kept on disk (made once, 0600)."""
    return installation_secret(path)


def owner_id(salt: bytes, key_hash: str) -> str:
    """What files and batches record as their owner: the key's hash keyed with the installation's salt (a copy
    of the folder does not give the keys' plain sha256 to guess against); "" (no key) stays ""."""
    if not key_hash:
        return ""
    return "hmac-sha256:" + hmac.new(salt, key_hash.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class ApiKey:
    hash: str
    name: str
    rpm: int | None = None  # None: no per-key limit
    batch: bool = False  # a line of a Batch API batch, sent by the gateway itself on behalf of the key ``hash``


def bearer_token(authorization: str, x_api_key: str) -> str:
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return x_api_key.strip()


def find_key(keys: list[ApiKey], token: str) -> ApiKey | None:
    """The key whose hash matches ``token`` (every hash compared, in constant time each)."""
    if not token:
        return None
    offered = hash_key(token)
    found = None
    for key in keys:
        if hmac.compare_digest(offered, key.hash):
            found = key
    return found


class RateLimiter:
    """Sliding-window requests-per-minute per key name."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._starts: dict[str, deque[float]] = {}

    def admit(self, key: str, rpm: int | None, now: float | None = None) -> int | None:
        """None when the request may go (and is counted); else the seconds to wait (``Retry-After``)."""
        if rpm is None:
            return None
        now = self.clock() if now is None else now
        starts = self._starts.setdefault(key, deque())
        while starts and starts[0] <= now - WINDOW_S:
            starts.popleft()
        if len(starts) >= rpm:
            return max(1, math.ceil(starts[0] + WINDOW_S - now))
        starts.append(now)
        return None


class AuthThrottle:
    """Failed authentications per client address: after ``limit`` in a minute, that address gets 429 (with
    ``Retry-After``) until the window passes — keys cannot be guessed at network speed. At most ``max_addresses``
    addresses are remembered (the oldest are forgotten first), so a flood of addresses cannot grow memory."""

    def __init__(self, limit: int = 20, clock: Callable[[], float] = time.monotonic,
                 max_addresses: int = 10_000) -> None:
        self.limit, self.clock, self.max_addresses = limit, clock, max_addresses
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, address: str, now: float) -> deque[float] | None:
        failures = self._failures.get(address)
        while failures and failures[0] <= now - WINDOW_S:
            failures.popleft()
        if failures is not None and not failures:
            del self._failures[address]
            return None
        return failures

    def retry_after(self, address: str) -> int | None:
        """Seconds ``address`` must wait before it may try a key again; None when it may now."""
        now = self.clock()
        failures = self._recent(address, now)
        if failures is None or len(failures) < self.limit:
            return None
        return max(1, math.ceil(failures[0] + WINDOW_S - now))

    def failed(self, address: str) -> None:
        now = self.clock()
        failures = self._recent(address, now)
        if failures is None:
            if len(self._failures) >= self.max_addresses:
                del self._failures[next(iter(self._failures))]
            failures = self._failures[address] = deque()
        failures.append(now)
