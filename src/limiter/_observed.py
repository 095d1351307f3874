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


def _class(limiter: object) -> Any:
    # The class's plain methods: the instance's are these observed ones.
    return type(limiter)


class Observed:
    """What ``RateLimiter`` adds when it has an observer (``on_decision``)."""

    name: str
    store: Union[Store, AsyncStore]
    clock: Clock
    on_decision: Optional[Observer]
    _denied: Outcome

    def _observe(self) -> None:
        # Read once, not per event.
        self._observer = self.on_decision
        self._store_name = type(self.store).__name__
        self._fallback_flag = hasattr(type(self.store), "using_fallback")
        # SystemClock.now is time.time; calling it directly saves a call per event.
        self._clock_now_or_time: Callable[[], float] = (
            time.time if type(self.clock) is SystemClock else self.clock.now
        )
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
            outcome = _ALLOWED if result.allowed else self._denied
            policy = result.policy
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
                ),
            )
        )

    def _observed_check(self, key: str, cost: Any = 1) -> RateLimitResult:
        start = _perf_counter()
        try:
            result: RateLimitResult = _class(self).check(self, key, cost)
        except StoreError:
            self._report(key, cost, None, _perf_counter() - start)
            raise
        self._report(key, cost, result, _perf_counter() - start)
        return result

    def _observed_allow(self, key: str, cost: Any = 1) -> bool:
        return self._observed_check(key, cost).allowed

    async def _observed_acheck(self, key: str, cost: Any = 1) -> RateLimitResult:
        start = _perf_counter()
        try:
            result: RateLimitResult = await _class(self).acheck(self, key, cost)
        except StoreError:
            self._report(key, cost, None, _perf_counter() - start)
            raise
        self._report(key, cost, result, _perf_counter() - start)
        return result
