"""The observed versions of ``RateLimiter``'s decisions: each reports a ``DecisionEvent``.

``RateLimiter`` sets them on an instance that has an observer, so a limiter
without one keeps the plain methods (CONTRIBUTING.md, "Hot paths").
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Union

from limiter.clock import Clock, SystemClock
from limiter.core.result import RateLimitResult
from limiter.events import DecisionEvent, Observer, Outcome
from limiter.store import AsyncStore, Store, StoreError

_perf_counter = time.perf_counter
_ALLOWED = Outcome.ALLOWED


class Observed:
    """What ``RateLimiter`` adds when it has an observer (``on_decision``)."""

    name: str
    store: Union[Store, AsyncStore]
    clock: Clock
    on_decision: Optional[Observer]
    _denied: Outcome

    def _observe(self) -> None:
        self._observer = self.on_decision
        self._store_name = type(self.store).__name__
        self._fallback_flag = hasattr(type(self.store), "using_fallback")
        # SystemClock.now is time.time; calling it directly saves a call per event.
        self._clock_now_or_time: Callable[[], float] = (
            time.time if type(self.clock) is SystemClock else self.clock.now
        )
        plain: Any = type(self)
        self._plain_check = plain.check.__get__(self)
        self._plain_acheck = plain.acheck.__get__(self)
        # Observed versions shadow the methods on this instance only, so a
        # limiter without an observer keeps the plain hot path.
        self.check = self._observed_check
        self.allow = self._observed_allow
        self.acheck = self._observed_acheck

    def _report(
        self, key: str, cost: Any, result: Optional[RateLimitResult], seconds: float
    ) -> None:
        if result is None:
            outcome, policy = Outcome.ERROR, ""
        else:
            outcome = _ALLOWED if result[0] else self._denied
            policy = result[7]
            if self._fallback_flag and getattr(self.store, "using_fallback", False) is True:
                outcome = Outcome.FALLBACK
        # tuple.__new__: the NamedTuple's Python-level __new__ would cost as much
        # as the rest of the report (CONTRIBUTING.md, "Hot paths").
        self._observer(  # type: ignore[misc]
            tuple.__new__(
                DecisionEvent,
                (
                    self.name,
                    policy,
                    outcome,
                    result,
                    cost,
                    key,
                    seconds,
                    self._clock_now_or_time(),
                    self._store_name,
                    0.0,  # waited
                    0,  # slots
                ),
            )
        )

    def _observed_check(self, key: str, cost: Any = 1) -> RateLimitResult:
        start = _perf_counter()
        try:
            result: RateLimitResult = self._plain_check(key, cost)
        except StoreError:
            self._report(key, cost, None, _perf_counter() - start)
            raise
        seconds = _perf_counter() - start
        if self._fallback_flag:
            self._report(key, cost, result, seconds)
            return result
        # _report, inlined for the usual store (no fallback to ask about): a
        # call costs 6% of an observed check (CONTRIBUTING.md, "Hot paths").
        self._observer(  # type: ignore[misc]
            tuple.__new__(
                DecisionEvent,
                (
                    self.name,
                    result[7],
                    _ALLOWED if result[0] else self._denied,
                    result,
                    cost,
                    key,
                    seconds,
                    self._clock_now_or_time(),
                    self._store_name,
                    0.0,  # waited
                    0,  # slots
                ),
            )
        )
        return result

    def _observed_allow(self, key: str, cost: Any = 1) -> bool:
        return self._observed_check(key, cost).allowed

    async def _observed_acheck(self, key: str, cost: Any = 1) -> RateLimitResult:
        start = _perf_counter()
        try:
            result: RateLimitResult = await self._plain_acheck(key, cost)
        except StoreError:
            self._report(key, cost, None, _perf_counter() - start)
            raise
        self._report(key, cost, result, _perf_counter() - start)
        return result
