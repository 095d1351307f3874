"""Waiting instead of refusing: ``acquire``, ``throttle`` and the adapters' ``max_wait``
(``Waits``: one plan without I/O, a sync and an async shell).  See docs/concurrency.md.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import math
import threading
import time
from typing import (
    Any,
    Awaitable,
    Callable,
    Deque,
    Dict,
    Generator,
    Iterator,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from limiter.clock import Clock, SystemClock, forward, optional_seconds
from limiter.core.concurrency import refuse_slot_shares
from limiter.core.costs import Hold
from limiter.core.keys import refuse_rate_key
from limiter.core.limits import Policy
from limiter.core.lockout import Lockout
from limiter.core.result import RateLimitResult
from limiter.events import Observer, report
from limiter.store import StoreError

F = TypeVar("F", bound=Callable[..., Any])


class RateLimitExceeded(Exception):
    """Raised when a request may not proceed and waiting is not an option: ``result`` the
    refusal, ``retry_after`` its seconds until it could pass (``inf``: never).
    """

    def __init__(self, result: RateLimitResult) -> None:
        self.result = result
        self.retry_after = result.retry_after
        super().__init__(f"rate limit exceeded; retry after {result.retry_after:.3f} s")


class Waiter(Protocol):
    """What waiting and a ``Slot`` need of a limiter (``RateLimiter`` has it all)."""

    name: str
    clock: Clock
    lockout: Optional[Lockout]
    on_decision: Optional[Observer]
    store: Any
    shadow: bool
    nonblocking: bool

    @property
    def limits(self) -> Sequence[Policy]: ...

    def check(self, key: str, cost: Any = 1) -> RateLimitResult: ...

    def acheck(self, key: str, cost: Any = 1) -> Awaitable[RateLimitResult]: ...

    def validate_cost(self, cost: Any) -> Any: ...

    def _slot_plan(
        self, key: str, cost: Any, hold: Hold
    ) -> Tuple[bool, Any, Any, Any, Optional[float]]: ...


def acquire(
    limiter: Waiter, key: str, cost: Any = 1, timeout: Optional[float] = None
) -> RateLimitResult:
    """``RateLimiter.acquire``: block until ``cost`` tokens are taken (see there)."""
    clock, slack, start = _start_wait(limiter, key, timeout)
    slept = 0.0
    while True:
        result = limiter.check(key, cost)
        if result.allowed:
            return result
        # At least the sleeps asked for have passed, whatever a stepped-back clock says.
        _give_up_if_late(result, max(clock.now() - start, slept), timeout, slack)
        clock.sleep(result.retry_after)
        slept += result.retry_after


async def aacquire(
    limiter: Waiter, key: str, cost: Any = 1, timeout: Optional[float] = None
) -> RateLimitResult:
    """``RateLimiter.aacquire``: ``acquire`` for asyncio, sleeping with ``clock.asleep``."""
    clock, slack, start = _start_wait(limiter, key, timeout)
    slept = 0.0
    while True:
        result = await limiter.acheck(key, cost)
        if result.allowed:
            return result
        _give_up_if_late(result, max(clock.now() - start, slept), timeout, slack)
        await clock.asleep(result.retry_after)
        slept += result.retry_after


def _start_wait(limiter: Waiter, key: str, timeout: Optional[float]) -> Tuple[Clock, float, float]:
    """Check a wait's arguments; ``(clock, slack, start)`` (the buckets' own ``Limit.slack``)."""
    refuse_waits_with_lockout(limiter)
    optional_seconds(timeout, "timeout")
    refuse_rate_key(key)
    return limiter.clock, min(lim.slack for lim in limiter.limits), limiter.clock.now()


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
    optional_seconds(timeout, "timeout")
    refuse_slot_shares(limiter.name, limiter.limits, limiter.validate_cost(cost))
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


def refuse_waits_with_lockout(
    limiter: Waiter,
    waiting: str = "waiting for tokens (acquire, throttle)",
    instead: str = "use check() with a lockout, and a limiter without one to pace calls",
) -> None:
    """Raise ``TypeError`` for a limiter with a lockout: each refusal on the way would
    count.  ``waiting`` names the wait, ``instead`` the way out.
    """
    if limiter.lockout is not None:
        raise TypeError(
            f"{limiter.name!r} has a lockout: {waiting} would count each refusal on the "
            f"way as a breach and lock the caller out; {instead}"
        )


def refuse_max_wait_with_lockout(limiter: Waiter, where: str) -> None:
    """``refuse_waits_with_lockout`` for an adapter's wait: ``where`` set ``max_wait``."""
    refuse_waits_with_lockout(
        limiter,
        f"waiting for a turn under {where}",
        "a limiter with a lockout must refuse at once: drop max_wait there, or wait on "
        "a limiter without a lockout",
    )


def _give_up_if_late(
    result: RateLimitResult, waited: float, timeout: Optional[float], slack: float
) -> None:
    # retry_after carries float rounding; a wait of exactly ``timeout`` passes.
    never = not math.isfinite(result.retry_after)
    if never or (timeout is not None and waited + result.retry_after > timeout + slack):
        raise RateLimitExceeded(result)


# -- the adapters' waits (max_wait, max_queue) ----------------------------

#: Seconds between tries for a slot: one given back in another process is seen this late.
SLOT_POLL = 0.05
#: Seconds of float rounding tolerated at a deadline.
_EPSILON = 1e-9

_TRY, _SLEEP, _PARK = "try", "sleep", "park"
#: (``"try"``, ``"sleep"`` or ``"park"``, seconds); the shell sends back ``(now, result)``.
_Step = Tuple[str, float]
_Sent = Tuple[float, Optional[RateLimitResult]]
#: Returns the deciding result and the seconds waited.
_WaitPlan = Generator[_Step, _Sent, Tuple[RateLimitResult, float]]
_TRY_NOW: _Step = (_TRY, 0.0)
#: (``id`` of the store, limiter name, key): the waiters hold the store, so no id is reused.
Ident = Tuple[int, str, str]


def line_of(limiter: Any, key: str) -> Ident:
    """The line of the requests waiting on ``key`` of ``limiter`` (a ``RateLimiter``)."""
    return (id(limiter.store), limiter.name, key)


class Ticket:
    """One waiting request's place in its key's line (``wake()`` ends its park early)."""

    __slots__ = ("reset", "wake", "woken")

    def __init__(self, wake: Callable[[], None], reset: Callable[[], None] = lambda: None) -> None:
        self.wake = wake
        self.reset = reset
        self.woken = False


class _Line:
    """The tickets waiting on one key, in arrival order, and the last refusal."""

    __slots__ = ("last", "last_at", "ready_at", "tickets")

    def __init__(self) -> None:
        self.tickets: Deque[Ticket] = collections.deque()
        self.last: Optional[RateLimitResult] = None
        self.last_at = 0.0
        #: Before this time the first waiter cannot pass (it sleeps on a rate's retry_after).
        self.ready_at = -math.inf

    def refusal(self, now: float) -> Optional[RateLimitResult]:
        """The last refusal with its ``retry_after`` counted from ``now``."""
        last = self.last
        if last is None:
            return None
        return last._replace(retry_after=max(0.0, last.retry_after - (now - self.last_at)))


class Lines:
    """The process's waiting requests by ``line_of(limiter, key)``, in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: Dict[Ident, _Line] = {}

    def busy(self, ident: Ident) -> bool:
        """True when requests wait on ``ident`` (a new one must queue behind them)."""
        return ident in self._lines

    def join(self, ident: Ident, ticket: Ticket) -> _Line:
        """Put ``ticket`` at the end of ``ident``'s line and return the line."""
        with self._lock:
            line = self._lines.get(ident)
            if line is None:  # not setdefault: a line is built only for a new key
                line = self._lines[ident] = _Line()
            line.tickets.append(ticket)
            return line

    def leave(self, ident: Ident, ticket: Ticket) -> None:
        """Take ``ticket`` out of its line; wake the next one when it headed it."""
        with self._lock:
            line = self._lines.get(ident)
            if line is None:
                return
            head = line.tickets[0] is ticket
            line.tickets.remove(ticket)
            if not line.tickets:
                del self._lines[ident]
            elif head:
                line.ready_at = -math.inf
                _wake(line.tickets[0])

    def given(self, ident: Ident) -> None:
        """A slot of ``ident`` was given back in this process: wake its first waiter."""
        with self._lock:
            line = self._lines.get(ident)
            if line is not None:
                _wake(line.tickets[0])


def _wake(ticket: Ticket) -> None:
    ticket.woken = True
    ticket.wake()


LINES = Lines()


def slot_given(limiter: Any, key: str) -> None:
    """Tell this process's waiters that a slot of ``key`` of ``limiter`` was given back."""
    if LINES._lines:  # nobody waits: a dict's truth, nothing more
        LINES.given(line_of(limiter, key))


class Waits:
    """The adapters' waiting: a refused request waits up to ``max_wait`` seconds for its
    turn, at most ``max_queue`` at once, one key's in arrival order (docs/concurrency.md).
    ``where``: what set ``max_wait``, for errors (``"RateLimit(max_wait=1.0)"``).
    """

    __slots__ = ("_count", "_lock", "lines", "max_queue", "max_wait", "where")

    def __init__(
        self, max_wait: float, max_queue: int, lines: Lines = LINES, where: str = ""
    ) -> None:
        self.max_wait = max_wait
        self.where = where or f"max_wait={max_wait!r}"
        self.max_queue = max_queue
        self.lines = lines
        self._count = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Waits(max_wait={self.max_wait!r}, max_queue={self.max_queue!r})"

    @property
    def waiting(self) -> int:
        """How many requests wait now."""
        return self._count

    def plan(
        self,
        ident: Ident,
        ticket: Ticket,
        first: Optional[RateLimitResult],
        now: float,
        slack: float = 0.0,
    ) -> _WaitPlan:
        """One request's wait from ``now`` (no I/O, no clock); ``first``: its first try's
        refusal, or ``None`` to queue without trying.
        """
        start = now
        deadline = now + self.max_wait
        if first is not None and _after_refusal(first, deadline - now, slack) is None:
            return first, 0.0
        with self._lock:
            full = self._count >= self.max_queue
            if not full:
                self._count += 1
        if full:  # decided at once
            if first is None:
                now, first = yield _TRY_NOW
                assert first is not None
            return first, 0.0
        lines = self.lines
        line = lines.join(ident, ticket)
        result = first
        try:
            while True:
                ticket.woken = False
                if line.tickets[0] is not ticket:  # not its turn yet
                    result = None  # its turn comes with a fresh try
                    refusal = line.refusal(now)
                    if refusal is not None and (
                        now >= deadline - _EPSILON or line.ready_at > deadline + slack
                    ):
                        return refusal, now - start
                    if refusal is not None or now < deadline - _EPSILON:
                        now, _ = yield (_PARK, deadline - now)
                        continue
                if result is None:
                    now, result = yield _TRY_NOW
                    assert result is not None
                if result[0]:
                    return result, now - start
                line.last, line.last_at = result, now
                step = _after_refusal(result, deadline - now, slack)
                if step is None:
                    return result, now - start
                if step[0] == _SLEEP:
                    line.ready_at = now + step[1]
                now, _ = yield step
                result = None
        finally:
            lines.leave(ident, ticket)
            with self._lock:
                self._count -= 1

    def run(
        self,
        limiter: Waiter,
        key: str,
        cost: Any,
        attempt: Optional[Callable[[], RateLimitResult]] = None,
    ) -> RateLimitResult:
        """The result for ``key``, after waiting if need be (blocks this thread), reported
        once with the seconds waited.
        """
        tries = _Tries(limiter, key, cost, attempt, self.where)
        first = None if self.lines.busy(tries.ident) else tries.once()
        if first is not None and (first[0] or limiter.shadow):
            return tries.done(first, 0.0)
        event = threading.Event()
        drive = self._driven(tries, Ticket(event.set, event.clear), first)
        act: Dict[str, Callable[[float], Any]] = {
            _TRY: lambda _: tries.once(),
            _SLEEP: limiter.clock.sleep,
            # A thread blocks TIMEOUT_MAX at most (OverflowError beyond); the plan parks again.
            _PARK: lambda seconds: event.wait(min(seconds, threading.TIMEOUT_MAX)),
        }
        with contextlib.closing(drive):
            try:
                step = next(drive)
                while True:
                    step = drive.send(act[step[0]](step[1]))
            except StopIteration as done:
                return tries.done(*done.value)

    async def arun(
        self,
        limiter: Waiter,
        key: str,
        cost: Any,
        attempt: Optional[Callable[[], Awaitable[RateLimitResult]]] = None,
    ) -> RateLimitResult:
        """``run`` for asyncio: waits without blocking the loop (``attempt`` is awaited)."""
        import asyncio

        tries = _Tries(limiter, key, cost, attempt, self.where)
        first = None if self.lines.busy(tries.ident) else await tries.aonce()
        if first is not None and (first[0] or limiter.shadow):
            return tries.done(first, 0.0)
        event = asyncio.Event()
        loop = asyncio.get_running_loop()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to wake
                loop.call_soon_threadsafe(event.set)

        drive = self._driven(tries, Ticket(wake, event.clear), first)

        async def park(seconds: float) -> None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), seconds)

        act: Dict[str, Callable[[float], Awaitable[Any]]] = {
            _TRY: lambda _: tries.aonce(),
            _SLEEP: limiter.clock.asleep,
            _PARK: park,
        }
        with contextlib.closing(drive):
            try:
                step = next(drive)
                while True:
                    step = drive.send(await act[step[0]](step[1]))
            except StopIteration as done:
                return tries.done(*done.value)

    def _driven(
        self, tries: _Tries, ticket: Ticket, first: Optional[RateLimitResult]
    ) -> Generator[_Step, Any, Tuple[RateLimitResult, float]]:
        """``plan`` with the clock read for it: a try, a sleep, or a park on ``ticket``."""
        clock = tries.limiter.clock
        real = type(clock) is SystemClock
        now = forward(clock)
        slack = max((getattr(lim, "slack", 0.0) for lim in tries.limiter.limits), default=0.0)
        plan = self.plan(tries.ident, ticket, first, now(), slack)
        with contextlib.closing(plan):
            try:
                step = next(plan)
                while True:
                    if step[0] == _TRY:
                        result = yield step
                        step = plan.send((now(), result))
                        continue
                    ticket.reset()
                    if not ticket.woken:
                        yield step if real or step[0] == _SLEEP else (_SLEEP, step[1])
                    step = plan.send((now(), None))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


def _after_refusal(result: RateLimitResult, left: float, slack: float) -> Optional[_Step]:
    """After a refusal ``left`` s before the deadline: a sleep, a park, or ``None`` (give up)."""
    wait = result.retry_after
    if not math.isfinite(wait):
        return None
    if result.kind == "concurrency":  # retry_after is only an upper bound
        return None if left <= _EPSILON else (_PARK, min(SLOT_POLL, left))
    return None if wait > left + slack else (_SLEEP, wait)


class _Tries:
    """One request's tries in a wait, and the one decision they report."""

    __slots__ = ("attempt", "cost", "ident", "key", "limiter", "seconds")

    def __init__(
        self,
        limiter: Waiter,
        key: str,
        cost: Any,
        attempt: Optional[Callable[[], Any]],
        where: str,
    ) -> None:
        refuse_max_wait_with_lockout(limiter, where)  # a limiter function's, per request
        self.limiter = limiter
        self.key = key
        self.ident = line_of(limiter, key)
        self.cost = cost
        self.attempt = attempt
        self.seconds = 0.0

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        """Time a try into ``seconds``; a ``StoreError`` is reported as the decision."""
        start = time.perf_counter()
        try:
            yield
        except StoreError:
            report(self.limiter, self.key, self.cost, None, time.perf_counter() - start)
            raise
        self.seconds = time.perf_counter() - start

    def once(self) -> RateLimitResult:
        # The class's check: an observer's copy would report every try.
        limiter, attempt = self.limiter, self.attempt
        if limiter.on_decision is None:  # nothing to report: nothing to time
            return attempt() if attempt else type(limiter).check(limiter, self.key, self.cost)
        with self._timed():
            return attempt() if attempt else type(limiter).check(limiter, self.key, self.cost)

    async def aonce(self) -> RateLimitResult:
        with self._timed():
            if self.attempt is None:
                return await type(self.limiter).acheck(self.limiter, self.key, self.cost)
            result: RateLimitResult = await self.attempt()
            return result

    def done(self, result: RateLimitResult, waited: float) -> RateLimitResult:
        taken = int(result[0]) if self.attempt is not None else 0  # an attempt takes a slot
        report(self.limiter, self.key, self.cost, result, self.seconds, waited, slots=taken)
        return result
