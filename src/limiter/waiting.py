"""Waiting for tokens on the client side: ``acquire``, ``aacquire`` and ``throttle``.

``RateLimiter``'s methods of those names call these.  One plan (``_waits``)
decides when to check, sleep or give up; the sync and async shells only run
its checks and sleeps.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Awaitable, Callable, Generator, Optional, Protocol, Sequence, TypeVar, Union

from limiter.clock import Clock
from limiter.core.keys import refuse_rate_key
from limiter.core.limits import Policy
from limiter.core.lockout import Lockout
from limiter.core.result import RateLimitResult

F = TypeVar("F", bound=Callable[..., Any])

#: One wait's plan: yields ``None`` to have a check made (its result is sent
#: back) or the seconds to sleep; returns the admitting result.
_Plan = Generator[Optional[float], Optional[RateLimitResult], RateLimitResult]


class RateLimitExceeded(Exception):
    """Raised when a request may not proceed and waiting is not an option.

    ``retry_after``: seconds until it could pass (``inf`` if it never can);
    ``result``: the ``RateLimitResult`` that refused it.
    """

    def __init__(self, result: RateLimitResult) -> None:
        self.result = result
        self.retry_after = result.retry_after
        super().__init__(f"rate limit exceeded; retry after {result.retry_after:.3f} s")


class Waiter(Protocol):
    """What waiting needs of a limiter (``RateLimiter`` has it all)."""

    name: str
    clock: Clock
    lockout: Optional[Lockout]

    @property
    def limits(self) -> Sequence[Policy]: ...

    def check(self, key: str, cost: Any = 1) -> RateLimitResult: ...

    def acheck(self, key: str, cost: Any = 1) -> Awaitable[RateLimitResult]: ...

    def validate_cost(self, cost: Any) -> Any: ...


def acquire(limiter: Waiter, key: str, cost: Any = 1, timeout: Optional[float] = None) -> Any:
    """``RateLimiter.acquire``: block until ``cost`` tokens are taken (see there)."""
    plan = _waits(limiter, key, timeout)
    wait = next(plan)
    try:
        while True:
            if wait is None:
                wait = plan.send(limiter.check(key, cost))
            else:
                limiter.clock.sleep(wait)
                wait = next(plan)
    except StopIteration as done:
        return done.value


async def aacquire(
    limiter: Waiter, key: str, cost: Any = 1, timeout: Optional[float] = None
) -> Any:
    """``RateLimiter.aacquire``: ``acquire`` for asyncio, sleeping with ``clock.asleep``."""
    plan = _waits(limiter, key, timeout)
    wait = next(plan)
    try:
        while True:
            if wait is None:
                wait = plan.send(await limiter.acheck(key, cost))
            else:
                await limiter.clock.asleep(wait)
                wait = next(plan)
    except StopIteration as done:
        return done.value


def _waits(limiter: Waiter, key: str, timeout: Optional[float]) -> _Plan:
    refuse_waits_with_lockout(limiter)
    check_timeout(timeout)
    refuse_rate_key(key)
    clock = limiter.clock
    # The give-up test allows the buckets' own slack (``Limit.slack``).
    slack = min(lim.slack for lim in limiter.limits)
    start = clock.now()
    while True:
        result = yield None
        assert result is not None  # the shells send every check's result
        if result.allowed:
            return result
        _give_up_if_late(result, clock.now() - start, timeout, slack)
        yield result.retry_after


def throttle(
    limiter: Waiter,
    key: Union[str, Callable[..., str]],
    cost: Any,
    wait: bool,
    timeout: Optional[float],
) -> Callable[[F], F]:
    """``RateLimiter.throttle``: a decorator taking ``cost`` tokens per call (see there)."""
    if wait:
        refuse_waits_with_lockout(limiter)
    check_timeout(timeout)
    limiter.validate_cost(cost)
    if not (isinstance(key, str) or callable(key)):
        raise TypeError(f"key must be a str or a callable returning one, got {key!r:.100}")
    refuse_rate_key(key)
    key_of: Callable[..., str] = key if callable(key) else (lambda *a, **k: key)

    def refused(result: RateLimitResult) -> None:
        if not result.allowed:
            raise RateLimitExceeded(result)

    def decorate(func: F) -> F:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                k = key_of(*args, **kwargs)
                if wait:
                    await aacquire(limiter, k, cost, timeout)
                else:
                    refuse_rate_key(k)
                    refused(await limiter.acheck(k, cost))
                return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            k = key_of(*args, **kwargs)
            if wait:
                acquire(limiter, k, cost, timeout)
            else:
                refuse_rate_key(k)
                refused(limiter.check(k, cost))
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def refuse_waits_with_lockout(limiter: Waiter) -> None:
    """Raise ``TypeError`` for a limiter with a lockout: each refusal on the way would count."""
    if limiter.lockout is not None:
        raise TypeError(
            f"{limiter.name!r} has a lockout: waiting for tokens (acquire, throttle) would "
            "count each refusal on the way as a breach and lock the caller out; use "
            "check() with a lockout, and a limiter without one to pace calls"
        )


def check_timeout(timeout: Optional[float]) -> None:
    """Raise unless ``timeout`` is ``None`` or a number of seconds >= 0."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    if not timeout >= 0:  # also NaN
        raise ValueError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")


def _give_up_if_late(
    result: RateLimitResult, waited: float, timeout: Optional[float], slack: float
) -> None:
    # ``slack``: retry_after carries float rounding (0.1 s is 0.10000000000000003
    # after a burst at 10/s); the bucket admits a client that waits it exactly,
    # so a wait of exactly ``timeout`` must not be refused either.
    never = not math.isfinite(result.retry_after)
    if never or (timeout is not None and waited + result.retry_after > timeout + slack):
        raise RateLimitExceeded(result)
