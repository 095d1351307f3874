"""The storage contract: how bucket state is kept per key, atomically.

Everything a store may implement is declared here as a structural
``Protocol`` (``Store`` or ``AsyncStore``, optionally ``SupportsAllow``,
``Nonblocking``, ``Sweepable``); ``RateLimiter`` and the adapters look for
nothing else.  See docs/stores.md "Writing your own store".
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence, runtime_checkable

from limiter.core.costs import Cost
from limiter.core.limits import Policy
from limiter.core.result import RateLimitResult


class StoreError(Exception):
    """A store could not answer (connection lost, timeout, corrupt state).

    Stores wrap their backend's exception (``__cause__``) in this one type,
    which the adapters map to their ``on_error`` policy.
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
        """``limiter.core.many.step_all`` over ``keys[i]`` under ``limits[i]``, atomically.

        Either every bucket is charged ``cost`` or none is.  ``cost`` is one
        number for every limit or a sequence of one per limit.
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
    """Optional: a ``Store`` that can answer yes or no more cheaply than ``apply``.

    ``RateLimiter.allow`` calls it (for a single limit); it must take the same
    decision and leave the same state as ``apply``.
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
    """Optional: a store that keeps keys until told to drop them (``MemoryStore``).

    ``RateLimiter.start_cleanup`` calls ``sweep`` from a thread.
    """

    def sweep(self, now: Optional[float] = None, max_age: Optional[float] = None) -> int:
        """Delete keys whose bucket is full at ``now`` and, with ``max_age``, keys idle longer.

        Deleting a full bucket changes no decision.  Returns the number deleted.
        """


def is_async_only(store: object) -> bool:
    """True when ``store`` has no synchronous ``apply``: only async code can use it."""
    return not callable(getattr(store, "apply", None))


def is_nonblocking(store: object) -> bool:
    """Whether ``store`` is a synchronous store that declares ``nonblocking = True``."""
    return isinstance(store, Nonblocking) and store.nonblocking is True and not is_async_only(store)
