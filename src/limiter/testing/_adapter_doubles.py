"""The test doubles of ``AdapterConformance``: replies, failing callables, failing stores."""

from __future__ import annotations

from typing import Any, List, NamedTuple, NoReturn, Tuple

from limiter.store import StoreError


class AdapterReply(NamedTuple):
    """What ``AdapterConformance.request`` returns (a plain 3-tuple does too)."""

    status: int
    headers: List[Tuple[str, str]]  # as received, in order, repeats kept
    body: bytes


class AdapterBug(Exception):
    """Raised by the suite's own callables: it must leave the adapter, never be swallowed."""


def fail(*args: object) -> NoReturn:
    raise AdapterBug("bug in a callable the app gave the adapter")


class DownStore:
    """A store whose backend is down: every call, sync or async, raises ``StoreError``."""

    def _down(self) -> NoReturn:
        raise StoreError("connection refused (AdapterConformance's store is down)")

    def apply(self, *args: Any) -> NoReturn:
        self._down()

    async def aapply(self, *args: Any) -> NoReturn:
        self._down()

    apply_many = reset = apply
    aapply_many = areset = aapply


class BuggyStore(DownStore):
    """A store with a bug (not an outage): its error is not a ``StoreError``."""

    def _down(self) -> NoReturn:
        raise AdapterBug("bug in the store")


#: The headers the adapters add, in the order they add them.
RATE_LIMIT_HEADERS = (
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "Retry-After",
    "RateLimit-Policy",
    "RateLimit",
)
JSON_TYPE = ("Content-Type", "application/json")
