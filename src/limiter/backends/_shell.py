"""What the shared stores (Redis, PostgreSQL) share around their I/O.

A store encodes (``_one``, ``_many``, ``_key``: errors before any I/O), sends
(``_send``: a ``_wire`` reply or ``StoreError``) and deletes (``_delete``); the
shells decode and route every operation through the store's ``Failover``.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Optional, Sequence, Tuple

from limiter.backends._failover import Failover
from limiter.backends._wire import Argv, decode_result, decode_results
from limiter.core.costs import Cost
from limiter.core.limits import Limit
from limiter.core.result import RateLimitResult, combine


class _Hooks:
    """What a store gives its shell, and every shared store's properties."""

    _kind: str
    _failover: Failover
    _argv: Argv
    fallback: Any

    @property
    def server_time(self) -> bool:
        """With ``now=None``, read the server's clock (True) or ``time.time()`` (False)."""
        return self._argv.server_time

    @server_time.setter
    def server_time(self, value: bool) -> None:
        self._argv.server_time = bool(value)

    @property
    def using_fallback(self) -> bool:
        """True while the server is considered down and the fallback answers."""
        return self._failover.using_fallback

    # The store's own, each raising its error before any I/O: the keys and argument of
    # an apply call and of an apply_many call, and a key as the server stores it.
    _one: Callable[[str, Limit, Cost, Optional[float]], Tuple[Any, Any]]
    _many: Callable[[Sequence[str], Sequence[Limit], Cost, Optional[float]], Tuple[Any, Any]]
    _key: Callable[[str], Any]


class StoreShell(_Hooks):
    """``apply``, ``apply_many`` and ``reset`` over ``_send`` and ``_delete`` (sync)."""

    _send: Callable[[Any, Any], Any]
    _delete: Callable[[Any], None]

    def apply(self, key: str, limit: Limit, cost: float, now: Optional[float]) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``; ``now`` in seconds or ``None`` (store time)."""
        keys, args = self._one(key, limit, cost, now)
        result: RateLimitResult = self._failover.run(
            lambda: decode_result(self._send(keys, args), limit, self._kind),
            lambda: self.fallback.apply(key, limit, cost, now),
        )
        return result

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """Charge ``cost`` to every ``keys[i]`` under ``limits[i]``, or to none (one call).

        ``cost``: one for every limit, or one per limit.
        """
        sent, args = self._many(keys, limits, cost, now)
        result: RateLimitResult = self._failover.run(
            lambda: combine(decode_results(self._send(sent, args), limits, self._kind)),
            lambda: self.fallback.apply_many(keys, limits, cost, now),
        )
        return result

    def reset(self, key: str) -> None:
        """Forget ``key``, in the fallback too; the server's delete is tried even while the
        fallback answers (``StoreError`` if it fails)."""
        target = self._key(key)
        if self.fallback is not None:
            self.fallback.reset(key)
        self._failover.run(lambda: self._delete(target))


class AsyncStoreShell(_Hooks):
    """``StoreShell`` for asyncio: ``aapply``, ``aapply_many``, ``areset``; a sync or
    async fallback (``Failover.afallback``)."""

    _send: Callable[[Any, Any], Awaitable[Any]]
    _delete: Callable[[Any], Awaitable[None]]

    async def aapply(
        self, key: str, limit: Limit, cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``; ``now`` in seconds or ``None`` (store time)."""
        keys, args = self._one(key, limit, cost, now)
        fallback = self._failover.afallback
        return await self._failover.arun(
            lambda: self._aresult(keys, args, limit),
            lambda: fallback.aapply(key, limit, cost, now),
        )

    async def aapply_many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """Charge every bucket or none (see ``apply_many``)."""
        sent, args = self._many(keys, limits, cost, now)
        return await self._failover.arun(
            lambda: self._aresults(sent, args, limits),
            lambda: self._failover.afallback.aapply_many(keys, limits, cost, now),
        )

    async def areset(self, key: str) -> None:
        """``reset`` for asyncio (the server's delete is always tried; see there)."""
        target = self._key(key)
        fallback = self._failover.afallback
        if fallback is not None:
            await fallback.areset(key)
        await self._failover.arun(lambda: self._delete(target))

    async def _aresult(self, keys: Any, args: Any, limit: Limit) -> RateLimitResult:
        return decode_result(await self._send(keys, args), limit, self._kind)

    async def _aresults(self, keys: Any, args: Any, limits: Sequence[Limit]) -> RateLimitResult:
        return combine(decode_results(await self._send(keys, args), limits, self._kind))
