"""The cleanup thread of ``RateLimiter.start_cleanup``: sweep a store every few seconds."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

from limiter.clock import Clock, finite_seconds, optional_seconds
from limiter.store import Sweepable

_log = logging.getLogger("limiter")


def start(
    store: Any, clock: Clock, name: str, max_age: Optional[float], interval: float
) -> Callable[[], None]:
    """``RateLimiter.start_cleanup`` of a limiter named ``name`` (see there)."""
    if not (isinstance(store, Sweepable) and callable(store.sweep)):
        raise TypeError(f"{store!r} has no sweep(); it does not need a cleanup thread")
    sweep = store.sweep
    seconds = finite_seconds(interval, "interval")
    # threading's waits take at most TIMEOUT_MAX: a longer one would kill
    # the thread at its first wait and sweeping would silently stop.
    if not 0 < seconds <= threading.TIMEOUT_MAX:
        raise ValueError(
            f"interval must be a number of seconds > 0 and <= threading.TIMEOUT_MAX "
            f"({threading.TIMEOUT_MAX:g}), got {interval!r:.100}"
        )
    optional_seconds(max_age, "max_age")
    stopping = threading.Event()

    def run() -> None:
        while True:
            try:
                sweep(clock.now(), max_age)
            except Exception:  # keep sweeping: one bad pass must not end cleanup
                _log.exception("limiter cleanup: sweep failed")
            if stopping.wait(interval):
                return

    thread = threading.Thread(target=run, name=f"limiter-cleanup[{name}]", daemon=True)
    thread.start()

    def stop() -> None:
        stopping.set()
        if thread is not threading.current_thread():
            thread.join()

    return stop
