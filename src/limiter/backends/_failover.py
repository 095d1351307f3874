"""The failure policy of the shared stores: ``Failover``, a breaker with a fallback,
logging outages on ``limiter.stores``.  docs/stores.md "Fallback"."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Awaitable, Callable, Optional, TypeVar

from limiter.store import StoreError

T = TypeVar("T")

_log = logging.getLogger("limiter.stores")


#: Seconds between two ERROR records of one store: one that flaps (a full Redis
#: under ``noeviction`` fails admissions only) would otherwise log every switch.
ERROR_LOG_INTERVAL = 60.0


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {value!r:.100}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{what} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _cause(error: BaseException) -> str:
    """What went wrong, for the log: the backend's exception that ``error`` wraps."""
    cause = error.__cause__ or error
    return f"{type(cause).__name__}: {cause}"


class Failover:
    """The one failure path of a shared store: ``run(primary, fallback)`` (``arun`` for
    coroutines) calls ``primary()``; a ``StoreError`` marks it down and ``fallback()``
    answers (``None``: raised); other exceptions propagate.

    Outages are logged on ``limiter.stores``: the first failure at ERROR (at most once
    per ``ERROR_LOG_INTERVAL`` s), the recovery at WARNING.  With a ``fallback`` store,
    calls skip the primary until a probe is due, ``probe_after`` seconds after a failure,
    doubling per failed probe up to ``max_probe_after``, on ``clock`` (``now()`` in
    seconds; default ``time.monotonic``); ``TypeError``/``ValueError`` for bad
    arguments.  ``asyncio``: ``afallback`` holds the fallback's asyncio methods.
    Thread-safe.
    """

    def __init__(
        self,
        name: str,
        fallback: Optional[Any],
        probe_after: float = 0.5,
        max_probe_after: float = 30.0,
        clock: Optional[Any] = None,
        *,
        asyncio: bool = False,
    ) -> None:
        self._name = name
        self.fallback = fallback
        self.serves_fallback = fallback is not None
        self._first = self._max = 0.0  # without a fallback, nothing is skipped
        self._now: Callable[[], float] = time.monotonic
        if self.serves_fallback:
            self._first = _seconds(probe_after, "probe_after")
            self._max = max(self._first, _seconds(max_probe_after, "max_probe_after"))
            if clock is not None and not callable(getattr(clock, "now", None)):
                raise TypeError(f"clock must have a now() method returning seconds, got {clock!r}")
            if clock is not None:
                self._now = clock.now
        self.afallback: Any = AsyncView(fallback) if asyncio and fallback is not None else None
        self._lock = threading.Lock()
        self.failing = False
        self._wait = self._first
        self._probe_at = 0.0  # while failing: when the primary may be probed next
        self._probing = False
        self._logged_at: Optional[float] = None  # time.monotonic() of the last ERROR
        self._announced = False  # whether the current outage was logged

    @property
    def using_fallback(self) -> bool:
        """True while the primary is considered down and the fallback answers."""
        return self.failing and self.serves_fallback

    def run(self, primary: Callable[[], T], fallback: Optional[Callable[[], T]] = None) -> T:
        """``primary()``, or ``fallback()`` while the primary is down or when it fails."""
        if self.failing and fallback is not None and self.skip_primary():
            return fallback()
        try:
            result = primary()
        except BaseException as exc:
            if not self.failed_over(exc) or fallback is None:
                raise
            return fallback()
        if self.failing:
            self.succeeded()
        return result

    async def arun(
        self,
        primary: Callable[[], Awaitable[T]],
        fallback: Optional[Callable[[], Awaitable[T]]] = None,
    ) -> T:
        """``run`` for coroutine functions."""
        if self.failing and fallback is not None and self.skip_primary():
            return await fallback()
        try:
            result = await primary()
        except BaseException as exc:
            if not self.failed_over(exc) or fallback is None:
                raise
            return await fallback()
        if self.failing:
            self.succeeded()
        return result

    def failed_over(self, error: BaseException) -> bool:
        """Record that the primary raised ``error``; whether the fallback answers (anything
        but a ``StoreError`` counts as neither failure nor success)."""
        if not isinstance(error, StoreError):
            with self._lock:  # cancelled: if it was the probe, let another caller probe
                self._probing = False
            return False
        self.failed(error)
        return self.serves_fallback

    def skip_primary(self) -> bool:
        """True when this call should go to the fallback; when a probe is due, the caller
        becomes the probe (False) and others keep skipping until it reports."""
        if not (self.failing and self.serves_fallback):  # the healthy path: no lock, no clock
            return False
        now = self._now()
        with self._lock:
            if not self.failing:
                return False
            if self._probing or now < self._probe_at:
                return True
            self._probing = True
            return False

    def failed(self, error: BaseException) -> None:
        """Record a failure of the primary (a request, or the probe); log it when it is the
        first since start or since a recovery."""
        if self.failing and not self._probing:
            return  # a request that was already in flight when the primary went down
        now = self._now()
        with self._lock:
            if not self.failing:
                self.failing = True
                self._wait = self._first
                last, clock = self._logged_at, time.monotonic()  # not the probe clock
                self._announced = last is None or clock - last >= ERROR_LOG_INTERVAL
                if self._announced:
                    self._logged_at = clock
                log = self._announced
            elif self._probing:
                self._wait = min(self._wait * 2, self._max)
                log = False
            else:
                return
            self._probing = False
            self._probe_at = now + self._wait
            wait = self._wait
        if log and self.serves_fallback:
            _log.error(
                "%s is failing; the fallback store answers, probing again in %gs: %s",
                self._name,
                wait,
                _cause(error),
                exc_info=error,
            )
        elif log:
            _log.error("%s is failing: %s", self._name, _cause(error), exc_info=error)

    def succeeded(self) -> None:
        """Record that the primary answered; log it when it ends a logged outage."""
        if not self.failing:
            return
        with self._lock:
            if not self.failing:
                return
            self.failing = False
            self._probing = False
            log, self._announced = self._announced, False
        if log and self.serves_fallback:
            _log.warning("%s answers again; leaving the fallback store", self._name)
        elif log:
            _log.warning("%s answers again", self._name)


class AsyncView:
    """A store's asyncio methods, bound once: its own where it has them, else its sync ones."""

    def __init__(self, store: Any) -> None:
        self.aapply = _async_method(store, "apply")
        self.aapply_many = _async_method(store, "apply_many")
        self.areset = _async_method(store, "reset")


def _async_method(store: Any, name: str) -> Callable[..., Awaitable[Any]]:
    method: Optional[Callable[..., Awaitable[Any]]] = getattr(store, "a" + name, None)
    if method is not None:
        return method
    sync: Callable[..., Any] = getattr(store, name)

    async def call(*args: Any) -> Any:
        return sync(*args)

    return call
