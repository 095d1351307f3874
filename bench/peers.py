"""How each library is set up for the in-memory comparisons (its documented fastest way).

Every ``make_*`` returns a *loop*: ``loop(keys) -> seconds``, which makes one
call of the library's own API per key, written the way a user would write it
(no wrapper lambdas around the peers, none around us), and times the loop.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

Loop = Callable[[List[str]], float]

#: Tokens per second and burst used when a limit must always admit the hot key.
HIGH = 10**9


def version(dist: str) -> str:
    try:
        from importlib.metadata import version as _version

        return _version(dist)
    except Exception:
        return "not installed"


def _timed_loop(call: Callable[[str], Any]) -> Loop:
    """The loop for an API that takes the key alone: ``call(k)`` per key, timed.

    ``call`` is the library's own bound method (no wrapper), looked up once, as
    each ``make_*`` that times another call shape does inline.
    """

    def loop(keys: List[str]) -> float:
        start = time.perf_counter()
        for k in keys:
            call(k)
        return time.perf_counter() - start

    return loop


def make_ours_check(store: Any = None, on_decision: Any = None) -> Loop:
    from limiter import RateLimiter

    return _timed_loop(RateLimiter(HIGH, HIGH, store=store, on_decision=on_decision).check)


def counting_observer() -> Any:
    """The simplest useful ``on_decision``: a count per (limiter, policy, outcome)."""
    counts: Dict[Any, int] = {}

    def count(event: Any) -> None:
        slot = (event.limiter, event.policy, event.outcome)
        counts[slot] = counts.get(slot, 0) + 1

    return count


def make_ours_check_observed(store: Any = None) -> Loop:
    return make_ours_check(store, on_decision=counting_observer())


def make_ours_allow(store: Any = None) -> Loop:
    from limiter import RateLimiter

    return _timed_loop(RateLimiter(HIGH, HIGH, store=store).allow)


def window_policy(kind: str) -> Any:
    """Our window policy ``kind`` (``"fixed"``, ``"fixed-first"``, ``"sliding"``) at ``HIGH``/s.

    ``HIGH`` units per one-second window: the same limit as limits'
    ``RateLimitItemPerSecond(HIGH)``, so windows roll over during a round
    for both alike.
    """
    from limiter import FixedWindow, SlidingWindow

    if kind == "sliding":
        return SlidingWindow(HIGH, 1)
    return FixedWindow(HIGH, 1, anchor="first" if kind == "fixed-first" else "epoch")


def make_ours_window(kind: str, call: str, store: Any = None) -> Loop:
    """Our ``check`` or ``allow`` (``call``) under the window policy ``kind``."""
    from limiter import RateLimiter

    return _timed_loop(getattr(RateLimiter(window_policy(kind), store=store), call))


def _limits(strategy_name: str, amount: int) -> Loop:
    from limits import RateLimitItemPerSecond, storage, strategies

    strategy = getattr(strategies, strategy_name)(storage.MemoryStorage())
    hit = strategy.hit
    item = RateLimitItemPerSecond(amount)

    def loop(keys: List[str]) -> float:
        start = time.perf_counter()
        for k in keys:
            hit(item, k)
        return time.perf_counter() - start

    return loop


def make_limits_fixed() -> Loop:
    return _limits("FixedWindowRateLimiter", HIGH)


def make_limits_moving() -> Loop:
    # The moving window keeps one entry per admitted request in a list it
    # inserts at the front of: with an always-admit limit the hot key's list
    # grows without bound, so it runs at 1000/second (hot key: mostly denials).
    return _limits("MovingWindowRateLimiter", 1000)


def make_limits_sliding() -> Loop:
    return _limits("SlidingWindowCounterRateLimiter", HIGH)


def make_token_bucket() -> Loop:
    import token_bucket

    return _timed_loop(token_bucket.Limiter(HIGH, HIGH, token_bucket.MemoryStorage()).consume)


def make_floor() -> Loop:
    from .floor import FloorBucket

    return _timed_loop(FloorBucket(HIGH, HIGH).allow)


def make_pyrate() -> Loop:
    from pyrate_limiter import (
        BucketFactory,
        Duration,
        Limiter,
        Rate,
        RateItem,
        StateBucket,
        TokenBucket,
    )
    from pyrate_limiter.clocks import MonotonicClock

    class PerKeyFactory(BucketFactory):  # type: ignore[misc]
        """One constant-state token bucket per key: pyrate-limiter's per-key recipe.

        Buckets are not registered with the leaker thread: a StateBucket's
        leak() is a no-op, and registering a million of them would only add a
        background thread walking them.
        """

        def __init__(self) -> None:
            self.rates = [Rate(HIGH, Duration.SECOND)]
            self.buckets: Dict[str, Any] = {}
            self.clock = MonotonicClock()

        def wrap_item(self, name: str, weight: int = 1) -> Any:
            return RateItem(name, self.clock.now(), weight=weight)

        def get(self, item: Any) -> Any:
            bucket = self.buckets.get(item.name)
            if bucket is None:
                bucket = StateBucket(self.rates, algorithm=TokenBucket())
                self.buckets[item.name] = bucket
            return bucket

    acquire = Limiter(PerKeyFactory()).try_acquire

    def loop(keys: List[str]) -> float:
        start = time.perf_counter()
        for k in keys:
            acquire(k, 1, False)
        return time.perf_counter() - start

    return loop


class Lib:
    """One contender in the in-memory comparison."""

    def __init__(
        self,
        id: str,
        label: str,
        dist: str,
        make: Callable[[], Loop],
        weight: float = 1.0,
        max_keys: Optional[int] = None,
        ours: bool = False,
    ) -> None:
        self.id = id
        self.label = label
        self.dist = dist
        self.make = make
        self.weight = weight  # fraction of the op budget (slow libraries get fewer ops)
        self.max_keys = max_keys  # larger key counts are not measured (memory / time)
        self.ours = ours


LIBS: List[Lib] = [
    Lib("ours.check", "limiter check()", "tokenlimiter", make_ours_check, ours=True),
    Lib("ours.allow", "limiter allow()", "tokenlimiter", make_ours_allow, ours=True),
    Lib(
        "ours.check+observer",
        "limiter check(), counting observer",
        "tokenlimiter",
        make_ours_check_observed,
        ours=True,
    ),
    *(
        Lib(
            f"ours.{kind}.{call}",
            f"limiter {call}(), {what}",
            "tokenlimiter",
            functools.partial(make_ours_window, kind, call),
            ours=True,
        )
        for kind, what in (
            ("fixed", "FixedWindow"),
            ("fixed-first", 'FixedWindow anchor="first"'),
            ("sliding", "SlidingWindow"),
        )
        for call in ("check", "allow")
    ),
    Lib("limits.fixed", "limits fixed window hit()", "limits", make_limits_fixed, 0.5),
    Lib(
        "limits.moving",
        "limits moving window hit() (1000/s)",
        "limits",
        make_limits_moving,
        0.5,
        max_keys=100_000,
    ),
    Lib(
        "limits.sliding",
        "limits sliding window counter hit()",
        "limits",
        make_limits_sliding,
        0.5,
    ),
    Lib("token_bucket", "token-bucket consume()", "token-bucket", make_token_bucket),
    Lib(
        "floor",
        "floor: dict + threading.Lock + two floats (bench/floor.py)",
        "(floor)",
        make_floor,
    ),
    Lib(
        "pyrate",
        "pyrate-limiter try_acquire() (token bucket)",
        "pyrate-limiter",
        make_pyrate,
        0.2,
        max_keys=100_000,
    ),
]


#: Each of our algorithms beside limits' nearest strategy (issue 24), as the report pairs
#: them: (algorithm, our check() row, our allow() row, limits' row).  The token bucket
#: keeps the pairing of its standing target (limits' fixed window: the moving window
#: cannot run an always-admit limit, see ``make_limits_moving``).
ALGORITHM_PAIRS: List[Tuple[str, str, str, str]] = [
    ("token bucket", "ours.check", "ours.allow", "limits.fixed"),
    ("fixed window (epoch)", "ours.fixed.check", "ours.fixed.allow", "limits.fixed"),
    ('fixed window (anchor="first")', "ours.fixed-first.check", "ours.fixed-first.allow",
     "limits.fixed"),
    ("sliding window", "ours.sliding.check", "ours.sliding.allow", "limits.sliding"),
]  # fmt: skip


def available(lib: Lib) -> Optional[str]:
    """None when ``lib`` can be built here, else why not."""
    try:
        lib.make()
    except ImportError as exc:
        return f"not installed ({exc.name or exc})"
    except Exception as exc:
        return f"cannot be set up: {exc!r}"
    return None
