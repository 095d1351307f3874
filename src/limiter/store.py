"""The storage contract: how bucket state is kept per key, atomically.

A store owns the state of many keys and applies ``limiter.core.bucket.step`` to one
key (or ``step_all`` to the keys of several limits) atomically: under a lock
(``MemoryStore``), in a transaction (SQLite) or in a server-side script
(Redis).  See docs/stores.md.

Everything a store may implement is declared here; ``RateLimiter`` and the
adapters look for nothing else:

=================  ==========================================================
``Store``          ``apply``, ``apply_many``, ``reset``: a synchronous store.
``AsyncStore``     ``aapply``, ``aapply_many``, ``areset``: an asyncio store.
                   A store needs one of the two and may be both.
``SupportsAllow``  ``allow``: ``apply(...).allowed`` without building the
                   result (``RateLimiter.allow``'s fast path).
``Nonblocking``    ``nonblocking = True``: ``apply`` never waits on I/O, so
                   asyncio code calls it directly instead of awaiting
                   ``aapply`` (one coroutine less per check).
``Sweepable``      ``sweep(now, max_age)``: delete keys that no longer matter
                   (``RateLimiter.start_cleanup``).
=================  ==========================================================

The capabilities are structural (``typing.Protocol``): a store declares one by
having the method or attribute, and need not inherit from anything.  Stores
that talk to a server also tend to offer ``ping()`` (raise ``StoreError`` when
it does not answer), ``close()`` and a ``fallback`` store; only the command
line (``python -m limiter``) uses those, when present.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence, runtime_checkable

from limiter.core.costs import Cost
from limiter.core.limits import Policy
from limiter.core.result import RateLimitResult


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
    ``cost`` may be a ``limiter.core.costs.Refund``, the one negative cost (tokens
    given back), or a ``limiter.core.costs.Charge`` (taken unconditionally): pass
    either to ``step`` as it is, without ``validate_cost``.
    Raise ``StoreError`` when the backend fails.  See ``Nonblocking`` for a
    store whose ``apply`` never waits on I/O.
    """

    def apply(self, key: str, limit: Policy, cost: float, now: Optional[float]) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``'s bucket if all are there."""
        ...

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Policy], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """``limiter.core.many.step_all`` over ``keys[i]`` under ``limits[i]``, atomically.

        Either every bucket is charged ``cost`` or none is.  ``cost`` is one
        number for every limit or a sequence of one per limit (each may be a
        ``Refund`` or ``Charge``); a ``Lockout`` may come last in ``limits``.
        """
        ...

    def reset(self, key: str) -> None:
        """Forget ``key``: its next request finds a full bucket."""
        ...


@runtime_checkable
class AsyncStore(Protocol):
    """The asyncio twin of ``Store`` (same semantics, awaitable)."""

    async def aapply(
        self, key: str, limit: Policy, cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``'s bucket if all are there."""
        ...

    async def aapply_many(
        self, keys: Sequence[str], limits: Sequence[Policy], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """Charge every bucket or none (see ``Store.apply_many``)."""
        ...

    async def areset(self, key: str) -> None:
        """Forget ``key``."""
        ...


@runtime_checkable
class SupportsAllow(Protocol):
    """Optional: a ``Store`` that can answer yes or no more cheaply than ``apply``.

    ``RateLimiter.allow`` calls it (for a single limit) instead of
    ``apply(...).allowed``; it must take the same decision and leave the same
    state.  ``MemoryStore`` skips building the ``RateLimitResult``.
    """

    def allow(self, key: str, limit: Policy, cost: float, now: Optional[float]) -> bool:
        """``apply(key, limit, cost, now).allowed``, with the same effect on the bucket."""
        ...


@runtime_checkable
class Nonblocking(Protocol):
    """Optional: a ``Store`` whose ``apply`` never waits on I/O (an in-process store).

    Declare it with a class attribute ``nonblocking = True``; any other value,
    or none, means "may block".  ``RateLimiter.acheck`` then calls ``apply``
    directly instead of awaiting ``aapply``, saving a coroutine per check.
    A store that may wait (on a socket, on a file lock held by another
    process) must not set it: it would stall the event loop.
    """

    nonblocking: bool


@runtime_checkable
class Sweepable(Protocol):
    """Optional: a store that keeps keys until told to drop them (``MemoryStore``).

    ``RateLimiter.start_cleanup`` calls ``sweep`` from a thread.  Stores whose
    keys expire by themselves (Redis TTLs) need not implement it.
    """

    def sweep(self, now: Optional[float] = None, max_age: Optional[float] = None) -> int:
        """Delete keys whose bucket is full at ``now`` and, with ``max_age``, keys idle longer.

        Deleting a full bucket changes no decision.  Returns the number deleted.
        """
        ...


def is_nonblocking(store: object) -> bool:
    """Whether ``store`` is a synchronous store that declares ``nonblocking = True``."""
    return (
        isinstance(store, Nonblocking)
        and store.nonblocking is True
        and callable(getattr(store, "apply", None))
    )
