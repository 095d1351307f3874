"""The storage contract: every ``Protocol`` a store may implement, and ``StoreError``.

See docs/stores.md, "Writing your own store".
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence, runtime_checkable

from limiter.core.costs import Cost
from limiter.core.limits import Policy
from limiter.core.result import RateLimitResult


class StoreError(Exception):
    """A store could not answer (connection lost, timeout, corrupt state); the
    backend's exception is its ``__cause__``.  The adapters' ``on_error`` decides.
    """


class PoolFullError(Exception):
    """No connection of the store client's pool came free in time (its ``max_connections``).

    A local limit, never a ``StoreError``: neither ``on_error="allow"`` nor the
    fallback answers it.  docs/stores.md, "A full connection pool".
    """


@runtime_checkable
class Store(Protocol):
    """A synchronous store: ``apply`` runs one ``step`` atomically and returns its result.

    ``now`` in seconds (``None``: the store's own time).  A denial or ``cost == 0``
    leaves the state unchanged; a ``Refund``, ``Charge`` or ``Hold`` goes to
    ``step`` as is.  Backend failures raise ``StoreError``.
    """

    def apply(self, key: str, limit: Policy, cost: float, now: Optional[float]) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``'s bucket if all are there."""

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Policy], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """``limiter.core.many.step_all`` over ``keys[i]`` under ``limits[i]``, atomically
        (all or nothing); ``cost`` is one number, or a sequence of one per limit.
        """

    def reset(self, key: str) -> None:
        """Forget ``key``: its next request finds a full bucket."""


@runtime_checkable
class AsyncStore(Protocol):
    """The asyncio twin of ``Store`` (same semantics, awaitable)."""

    async def aapply(
        self, key: str, limit: Policy, cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``'s bucket if all are there."""

    async def aapply_many(
        self, keys: Sequence[str], limits: Sequence[Policy], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """Charge every bucket or none (see ``Store.apply_many``)."""

    async def areset(self, key: str) -> None:
        """Forget ``key``."""


@runtime_checkable
class SupportsAllow(Protocol):
    """Optional: ``RateLimiter.allow``'s cheaper yes or no for one limit; the same
    decision and state as ``apply``.
    """

    def allow(self, key: str, limit: Policy, cost: float, now: Optional[float]) -> bool:
        """``apply(key, limit, cost, now).allowed``, with the same effect on the bucket."""


@runtime_checkable
class Nonblocking(Protocol):
    """Optional: a ``Store`` whose ``apply`` never waits on I/O (class attribute
    ``nonblocking = True``); ``acheck`` then calls it directly.  A store that may
    wait must not set it: it would stall the event loop.
    """

    nonblocking: bool


@runtime_checkable
class Sweepable(Protocol):
    """Optional: a store that keeps keys until told to drop them (``MemoryStore``);
    ``RateLimiter.start_cleanup`` calls ``sweep`` from a thread.
    """

    def sweep(self, now: Optional[float] = None, max_age: Optional[float] = None) -> int:
        """Delete keys whose bucket is full at ``now`` and, with ``max_age``, keys idle
        longer; returns the number deleted.
        """


def is_async_only(store: object) -> bool:
    """True when ``store`` has no synchronous ``apply``: only async code can use it."""
    return not callable(getattr(store, "apply", None))


def is_nonblocking(store: object) -> bool:
    """Whether ``store`` is a synchronous store that declares ``nonblocking = True``."""
    return isinstance(store, Nonblocking) and store.nonblocking is True and not is_async_only(store)
