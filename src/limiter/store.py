"""The storage contract: how bucket state is kept per key, atomically.

A store owns the state of many keys and applies ``limiter.bucket.step`` to one
key (or ``step_all`` to the keys of several limits) atomically: under a lock
(``MemoryStore``), in a transaction (SQLite) or in a server-side script
(Redis).  See docs/stores.md.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence, runtime_checkable

from .bucket import Limit, RateLimitResult

__all__ = ["AsyncStore", "Store", "StoreError"]


class StoreError(Exception):
    """A store could not answer (connection lost, timeout, corrupt state).

    Stores wrap their backend's exceptions in this one type so that callers and
    adapters need to know a single failure to map to their ``on_error`` policy.
    """


@runtime_checkable
class Store(Protocol):
    """A synchronous store.

    ``apply`` runs one ``step`` of ``cost`` tokens for ``key`` under ``limit``
    atomically and returns its result.  ``now`` is in seconds; ``None`` asks the
    store for its own time (``time.time()`` in-process, ``TIME`` on Redis).
    A denied request or ``cost == 0`` must leave the stored state unchanged.
    Raise ``StoreError`` when the backend fails.  A store whose ``apply``
    never waits on I/O may set a class attribute ``nonblocking = True``;
    ``RateLimiter.acheck`` then calls ``apply`` directly instead of awaiting
    ``aapply``.
    """

    def apply(self, key: str, limit: Limit, cost: float, now: Optional[float]) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``'s bucket if all are there."""
        ...

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """``limiter.bucket.step_all`` over ``keys[i]`` under ``limits[i]``, atomically.

        Either every bucket is charged ``cost`` or none is.
        """
        ...

    def reset(self, key: str) -> None:
        """Forget ``key``: its next request finds a full bucket."""
        ...


@runtime_checkable
class AsyncStore(Protocol):
    """The asyncio twin of ``Store`` (same semantics, awaitable)."""

    async def aapply(
        self, key: str, limit: Limit, cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``'s bucket if all are there."""
        ...

    async def aapply_many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """Charge every bucket or none (see ``Store.apply_many``)."""
        ...

    async def areset(self, key: str) -> None:
        """Forget ``key``."""
        ...
