"""Clocks: where ``now`` comes from.  The bucket never reads time itself."""

from __future__ import annotations

import math
import threading
import time
from typing import Callable, Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Where time comes from: ``now()`` in seconds; ``sleep(seconds)`` and ``asleep``
    (awaited) serve ``acquire`` and ``throttle``.  It may step backwards
    (docs/concepts.md, "Clocks that jump backwards").
    """

    def now(self) -> float:
        """The current time in seconds."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds``."""
        ...

    async def asleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds``."""
        ...


class SystemClock:
    """Wall-clock seconds since the Unix epoch: ``time.time()``, ``time.sleep`` and
    ``asyncio.sleep``, looked up at every call (so freezegun and time-machine move it).
    """

    __slots__ = ()

    def now(self) -> float:
        """``time.time()``."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """``time.sleep(seconds)``."""
        time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        """``await asyncio.sleep(seconds)``."""
        import asyncio  # here, not at the top: ``import limiter`` must not pay for asyncio

        await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


def finite_seconds(value: object, what: str) -> float:
    """``value`` (an ``int`` or ``float``, not a bool: else ``TypeError``) as a finite
    float of seconds (else ``ValueError``); errors name ``what``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {value!r:.100}")
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise ValueError(f"{what} must be a finite number of seconds, got {value!r:.100}")
    return seconds


def optional_seconds(value: object, what: str) -> None:
    """Raise unless ``value`` is ``None`` or a number of seconds >= 0 (``what`` names it)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be None or a number of seconds >= 0, got {value!r}")
    if not value >= 0:  # also NaN
        raise ValueError(f"{what} must be None or a number of seconds >= 0, got {value!r}")


class ManualClock:
    """A thread-safe clock for tests: it reads ``start`` until ``advance(seconds)``
    (>= 0) or ``set(t)`` (any finite time, backwards too) moves it; ``sleep`` and
    ``asleep`` advance it instead of waiting.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = finite_seconds(start, "start")
        self._lock = threading.Lock()

    def now(self) -> float:
        """The time last set, in seconds."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (>= 0) and return the new time."""
        seconds = finite_seconds(seconds, "seconds")
        if seconds < 0:
            raise ValueError(
                f"advance() takes seconds >= 0, got {seconds!r}; use set() to go backwards"
            )
        with self._lock:
            self._now += seconds
            return self._now

    def sleep(self, seconds: float) -> None:
        """Advance by ``seconds`` at once instead of waiting: tests never really sleep."""
        self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        """Advance by ``seconds``, then yield to the event loop once."""
        self.advance(seconds)
        import asyncio

        await asyncio.sleep(0)

    def set(self, t: float) -> None:
        """Jump to time ``t`` (seconds), forwards or backwards."""
        t = finite_seconds(t, "t")
        with self._lock:
            self._now = t

    def __repr__(self) -> str:
        return f"ManualClock(start={self._now!r})"


def forward(clock: Clock) -> Callable[[], float]:
    """``clock.now`` that never goes back, for a wait's deadline: a step back counts
    as no time, so it cannot stretch a wait.
    """
    last = clock.now()
    behind = 0.0

    def now() -> float:
        nonlocal last, behind
        t = clock.now()
        if t < last:
            behind += last - t
        last = t
        return t + behind

    return now
