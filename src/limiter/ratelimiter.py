"""``RateLimiter``: the object users hold.  It binds a limit, a store and a clock."""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from typing import Callable, Optional, Union

from .backends.memory import MemoryStore
from .bucket import Limit, RateLimitResult
from .clock import Clock, SystemClock
from .store import AsyncStore, Store

__all__ = ["MAX_KEY_LENGTH", "RateLimiter"]

_Apply = Callable[[str, Limit, float, Optional[float]], RateLimitResult]
_log = logging.getLogger("limiter")

#: Keys longer than this many characters are stored as a SHA-256 digest, so a
#: 1 MB API key costs 71 bytes of key, not 1 MB.
MAX_KEY_LENGTH = 256


class RateLimiter:
    """A token-bucket limit applied per key.

    ``rate``: tokens per second (a positive number), a string such as
    ``"100/minute"`` or ``"5 per second"``, or a ``Limit``.
    ``burst``: bucket capacity in tokens; defaults to N for ``"N/unit"`` and to
    ``ceil(rate)`` (at least 1) for a number.
    ``store``: where state lives (default: a new ``MemoryStore()``).
    ``clock``: where time comes from.  Default ``SystemClock``; when no clock is
    given, the store may use its own time (Redis reads ``TIME``).
    ``name``: namespace for this limiter's keys, so limiters sharing a store do
    not collide.  Defaults to a name derived from the limit (``"10/s:20"``):
    two limiters with the same limit on one store need distinct names.
    """

    def __init__(
        self,
        rate: Union[Limit, str, float],
        burst: Optional[int] = None,
        *,
        store: Optional[Union[Store, AsyncStore]] = None,
        clock: Optional[Clock] = None,
        name: Optional[str] = None,
    ) -> None:
        self.limit = Limit.coerce(rate, burst)
        self.store: Union[Store, AsyncStore] = MemoryStore() if store is None else store
        apply = getattr(self.store, "apply", None)
        aapply = getattr(self.store, "aapply", None)
        if not callable(apply) and not callable(aapply):
            raise TypeError(f"store must implement Store or AsyncStore, got {self.store!r}")
        if clock is not None and not callable(getattr(clock, "now", None)):
            raise TypeError(f"clock must have a now() method returning seconds, got {clock!r}")
        if name is None:
            name = f"{self.limit.rate:g}/s:{self.limit.burst}"
        elif not isinstance(name, str):
            raise ValueError(f"name must be a str, got {name!r}")
        self.name = name
        self._prefix = name + ":"
        self.clock: Clock = SystemClock() if clock is None else clock
        self._clock_now: Optional[Callable[[], float]] = None if clock is None else clock.now
        self._apply: Optional[_Apply] = apply if callable(apply) else None
        self._sync: Optional[Store] = self.store if callable(apply) else None  # type: ignore[assignment]
        self._async: Optional[AsyncStore] = self.store if callable(aapply) else None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RateLimiter({self.limit}, name={self.name!r}, store={self.store!r})"

    def storage_key(self, key: str) -> str:
        """The key as stored: namespaced, and hashed when longer than ``MAX_KEY_LENGTH``."""
        if not isinstance(key, str):
            raise ValueError(f"key must be a str, got {key!r:.100}")
        if len(key) > MAX_KEY_LENGTH:
            digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
            key = "sha256:" + digest
        return self._prefix + key

    def _now(self) -> Optional[float]:
        return None if self._clock_now is None else self._clock_now()

    def check(self, key: str, cost: float = 1) -> RateLimitResult:
        """Take ``cost`` tokens (default 1) from ``key``'s bucket if all are there.

        All or nothing: a denied request takes no tokens.  ``cost`` may be
        fractional; ``0`` is a peek; negative or NaN is a ``ValueError``; above
        ``burst`` it is always denied with ``retry_after == inf``.
        """
        # The hot path: everything inline that can be (each call costs ~50 ns).
        apply = self._apply
        if apply is None:
            raise TypeError(f"{self.store!r} is async only: use acheck/apeek/areset")
        if type(key) is not str or len(key) > MAX_KEY_LENGTH:
            skey = self.storage_key(key)
        else:
            skey = self._prefix + key
        clock_now = self._clock_now
        return apply(skey, self.limit, cost, None if clock_now is None else clock_now())

    def allow(self, key: str, cost: float = 1) -> bool:
        """``check(key, cost).allowed``: True when the request may proceed."""
        result: RateLimitResult = self.check(key, cost)
        return result[0]

    def peek(self, key: str) -> RateLimitResult:
        """``key``'s state now, taking nothing (``allowed`` is always True)."""
        return self.check(key, 0)

    def reset(self, key: str) -> None:
        """Give ``key`` a full bucket again."""
        if self._apply is None:
            raise TypeError(f"{self.store!r} is async only: use areset")
        assert self._sync is not None
        self._sync.reset(self.storage_key(key))

    async def acheck(self, key: str, cost: float = 1) -> RateLimitResult:
        """``check`` for asyncio; uses the store's ``aapply`` when it has one."""
        if self._async is not None:
            return await self._async.aapply(self.storage_key(key), self.limit, cost, self._now())
        return self.check(key, cost)

    async def apeek(self, key: str) -> RateLimitResult:
        """``peek`` for asyncio."""
        return await self.acheck(key, 0)

    async def areset(self, key: str) -> None:
        """``reset`` for asyncio."""
        if self._async is not None:
            await self._async.areset(self.storage_key(key))
        else:
            self.reset(key)

    def start_cleanup(self, max_age: Optional[float], interval: float) -> Callable[[], None]:
        """Sweep the store every ``interval`` seconds in a daemon thread.

        Each sweep deletes keys whose bucket is full (no decision changes) and,
        when ``max_age`` (seconds) is not ``None``, keys idle for longer than
        that.  One sweep runs at once.  Returns ``stop()``, which ends the
        thread and joins it; calling it again does nothing.  Needs a store with
        ``sweep(now, max_age)`` (``MemoryStore``; Redis expires keys itself).
        """
        sweep = getattr(self.store, "sweep", None)
        if not callable(sweep):
            raise TypeError(f"{self.store!r} has no sweep(); it does not need a cleanup thread")
        if isinstance(interval, bool) or not isinstance(interval, (int, float)):
            raise ValueError(f"interval must be a number of seconds > 0, got {interval!r}")
        if not (interval > 0 and math.isfinite(interval)):
            raise ValueError(f"interval must be a finite number of seconds > 0, got {interval!r}")
        if max_age is not None and not (
            isinstance(max_age, (int, float)) and not isinstance(max_age, bool) and max_age >= 0
        ):
            raise ValueError(f"max_age must be None or a number of seconds >= 0, got {max_age!r}")
        stopping = threading.Event()
        clock = self.clock

        def run() -> None:
            while True:
                try:
                    sweep(clock.now(), max_age)
                except Exception:  # keep sweeping: one bad pass must not end cleanup
                    _log.exception("limiter cleanup: sweep failed")
                if stopping.wait(interval):
                    return

        thread = threading.Thread(target=run, name=f"limiter-cleanup[{self.name}]", daemon=True)
        thread.start()

        def stop() -> None:
            stopping.set()
            if thread is not threading.current_thread():
                thread.join()

        return stop
