"""The decision every adapter shares: exemption, the key, the cost, the check, the outcome.

Adapters translate their protocol to a ``RequestInfo`` and the ``Verdict`` back.
"""

from __future__ import annotations

import inspect
import logging
import math
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, NoReturn, Optional, Tuple, TypeVar, Union

from limiter.clock import SystemClock
from limiter.core.costs import validate_cost
from limiter.core.result import RateLimitResult
from limiter.core.spec import CostSpec
from limiter.http.options import COPIED, Options, Settings, refuse_async
from limiter.http.request import KeyFunc, RequestInfo
from limiter.http.responses import UNAVAILABLE, HeaderList, Response
from limiter.http.rules import (
    DeductWhen,
    LimiterSpec,
    fits,
    is_async_callable,
    normal_path,
    plain_mapping,
)
from limiter.ratelimiter import RateLimiter
from limiter.slots import Slot
from limiter.store import StoreError

# RequestInfo stays importable from here (tests/project/test_layers.py).
#: Seconds between two log records of store failures, so an outage cannot flood the log.
ERROR_LOG_INTERVAL = 60.0
#: Seconds between two log records of one limiter's would-be denials in shadow mode.
SHADOW_LOG_INTERVAL = 60.0

_log = logging.getLogger("limiter.adapters")

#: ``(limiter, key, cost, deduct_when)``; ``deduct_when`` ``None``: charged up front.
Selection = Tuple[RateLimiter, str, CostSpec, Optional[DeductWhen]]
#: A route: (limiter, key_func, cost_func, cost, deduct_when), before the callables run.
Route = Tuple[LimiterSpec, Optional[KeyFunc], Optional[Callable[..., Any]], CostSpec, Any]

_NO_HEADERS: HeaderList = []  # shared: adapters never mutate an outcome list
_N = TypeVar("_N")  # an adapter's native request (environ, scope, handler)


def _no_decision(request: RequestInfo) -> Verdict:
    return _NO_HEADERS


def flag_of(value: object, name: str) -> bool:
    """``value`` as a bool; an awaitable is a ``TypeError`` (a coroutine would exempt all)."""
    if value.__class__ is bool:
        return value
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if close is not None:
            close()  # no "never awaited" warning on top of the error
        raise TypeError(
            f"{name} returned an awaitable ({value!r:.100}): a synchronous adapter "
            "cannot await it; use a plain function, or the ASGI adapter"
        )
    return bool(value)


def bad_key(key: object) -> NoReturn:
    """Raise ``TypeError`` for a ``key_func`` answer that is neither ``str`` nor ``None``."""
    raise TypeError(f"key_func must return a str or None, got {key!r:.100}")


def cost_of(cost: object, limiter: RateLimiter) -> CostSpec:
    """A cost function's answer checked as ``cost`` before the store is asked
    (``TypeError``/``ValueError``; for one a slot cannot take, ``ValueError`` naming
    the answer and the limiter: a slot is one unit, ``RateLimiter.slot``).
    """
    if cost.__class__ is float or cost.__class__ is int:  # the usual answer, no Mapping test
        checked: CostSpec = validate_cost(cost)
    elif isinstance(cost, Mapping):
        limiter.validate_cost(cost)
        checked = plain_mapping(cost)
    else:
        checked = validate_cost(cost)
    if limiter.holds_slots:
        fits(limiter, cost, f"a cost function returned {cost!r:.100} for ")
    return checked


async def awaited(value: Any) -> Any:
    """``value``, awaited first if it is awaitable (an ``async def`` callable's result)."""
    if inspect.isawaitable(value):
        return await value
    return value


def limiter_of(limiter: object, cost: CostSpec) -> RateLimiter:
    """A limiter function's answer checked as a ``RateLimiter`` taking ``cost``
    (``TypeError``; ``ValueError`` for a mapping it does not take, or a cost its
    slots cannot: a slot is one unit, ``RateLimiter.slot``).
    """
    if not isinstance(limiter, RateLimiter):
        raise TypeError(
            f"a limiter function must return a limiter.RateLimiter, got {limiter!r:.200}"
        )
    if limiter.holds_slots:
        fits(limiter, cost, "a limiter function returned ")
    elif cost.__class__ is dict:
        limiter.validate_cost(cost)
    return limiter


class Deferred:
    """An admitted, charged request whose charge may be given back (``deduct_when``):
    ``settle(status)`` refunds it unless ``deduct_when(status)``, once, and returns
    the headers to add.
    """

    __slots__ = ("at", "cost", "deduct_when", "guard", "key", "limiter", "result", "settled")

    def __init__(
        self, guard: Guard, chosen: Selection, result: RateLimitResult, at: Optional[float]
    ) -> None:
        self.guard = guard
        self.limiter, self.key, self.cost, deduct_when = chosen
        # None (a Held's): every status is charged.
        self.deduct_when = _kept_always if deduct_when is None else deduct_when
        self.result = result
        # Read before the check: the refund goes only to the window that took it.
        self.at = self.limiter.clock.now() if at is None else at
        self.settled: Optional[HeaderList] = None

    def _kept(self, status: int) -> Optional[HeaderList]:
        # The headers when nothing is to be refunded (or it was settled), else None.
        if self.settled is None and flag_of(self.deduct_when(status), "deduct_when"):
            self.settled = self.guard.build(self.result, self.at, self.guard.header_style)
        return self.settled

    def _done(self, headers: HeaderList) -> HeaderList:
        self.settled = headers
        return headers

    def _failed(self) -> HeaderList:
        # The response is under way: log and send no headers.
        self.guard.failed(self.limiter)
        return self._done(_NO_HEADERS)

    def settle(self, status: int) -> HeaderList:
        """Refund the cost unless ``deduct_when(status)``; the headers for the response."""
        kept = self._kept(status)
        if kept is not None:
            return kept
        try:
            refunded = self.limiter.refund(self.key, self.cost, taken_at=self.at)
        except StoreError:
            return self._failed()
        return self._done(self.guard.headers(refunded, self.limiter))

    async def asettle(self, status: int) -> HeaderList:
        """``settle`` for asyncio (the store is awaited)."""
        kept = self._kept(status)
        if kept is not None:
            return kept
        try:
            refunded = await self.limiter.arefund(self.key, self.cost, taken_at=self.at)
        except StoreError:
            return self._failed()
        return self._done(self.guard.headers(refunded, self.limiter))


def _kept_always(status: int) -> bool:
    return True


class Held(Deferred):
    """An admitted request holding a ``Concurrency`` slot: a ``Deferred`` whose
    ``release``/``arelease`` give the slot back once (a store failure is logged and
    the lease frees it).
    """

    __slots__ = ("slot",)

    def __init__(
        self,
        guard: Guard,
        chosen: Selection,
        result: RateLimitResult,
        at: Optional[float],
        slot: Slot,
    ) -> None:
        super().__init__(guard, chosen, result, at)
        self.slot: Optional[Slot] = slot

    def _taken(self) -> Optional[Slot]:
        # The slot to give back, once: cleared before any I/O.
        slot, self.slot = self.slot, None
        return slot if slot is not None and slot.held else None

    def release(self) -> None:
        """Give the slot back (the response ended)."""
        slot = self._taken()
        if slot is not None:
            try:
                slot.give()
            except StoreError:
                self.guard.failed(self.limiter)

    async def arelease(self) -> None:
        """``release`` for asyncio."""
        slot = self._taken()
        if slot is not None:
            try:
                await slot.agive()
            except StoreError:
                self.guard.failed(self.limiter)


#: Headers to add (possibly none), a ``Response`` to send instead, or a ``Deferred``
#: (a ``Held`` when the request holds a slot until its response ends).
Verdict = Union[HeaderList, Response, Deferred]
PeerDecider = Callable[[Optional[str], Any, Callable[[Any], RequestInfo]], Verdict]


class Guard(Settings):
    """The decision every adapter delegates to, built once: ``Guard(limiter, options)``.

    ``decide(request)`` returns a ``Verdict``.  Only ``StoreError`` goes to
    ``on_error``; other exceptions propagate (docs/adapters.md#errors).
    """

    __slots__ = (
        *COPIED,
        "_defaults",
        "_routed",
        "_next_log",
        "_now",
        "_peer_keys",
        "_plain",
        "_shadow_counts",
        "_shadow_lock",
        "is_async",
        "limiter",
        "nonblocking",
    )

    def __init__(
        self, limiter: LimiterSpec, options: Optional[Options] = None, **keywords: Any
    ) -> None:
        if options is None:
            options = Options(keywords, owner="Guard", limiter=limiter)
        elif keywords or not isinstance(options, Options):
            raise TypeError(f"Guard takes an Options or keyword options, got {options!r:.100}")
        for name in COPIED:
            setattr(self, name, getattr(options, name))
        self.limiter = options.checked_limiter(limiter)
        #: True when a callable is ``async``: only ``adecide`` may then be used.
        self.is_async: bool = options.is_async or is_async_callable(limiter)
        if options.sync is not None:
            self.require_sync(options.sync)
        self._shadow_counts: Dict[str, Tuple[int, float]] = {}
        self._shadow_lock = threading.Lock()
        self._next_log = -math.inf
        # What the decision reads per request besides the options:
        limiters = self.limiters()
        #: True when async code may call ``decide`` (never with limiter functions, nor
        #: max_wait: waiting must not block the event loop).
        self.nonblocking: bool = (
            not self.is_async
            and self.waits is None
            and len(limiters) == 1 + len(self.rules)
            and all(lim.nonblocking for lim in limiters)
        )
        self._routed = self.allow_list is not None or bool(self.rules)
        self._defaults: Route = (
            self.limiter,
            self.key_func,
            self.cost_func,
            self.cost,
            self.deduct_when,
        )
        # ClientIP clears this dict, never replaces it.
        self._peer_keys: Dict[str, str] = self.client_ip.peer_keys
        # The limiter when the decision needs the client address alone (decide_peer).
        self._plain: Optional[RateLimiter] = None
        # time.time for the system clock: one call less than its now().
        self._now: Callable[[], float] = time.time
        plain = self.limiter
        extras = (self.key_func, self.exempt, self.allow_list, self.cost_func, self.deduct_when)
        if (
            isinstance(plain, RateLimiter)
            and not plain.holds_slots
            and self.enabled
            and not self.rules
            and self.waits is None
            and all(extra is None for extra in extras)
        ):
            self._plain = plain
            if type(plain.clock) is not SystemClock:
                self._now = plain.clock.now

    def limiters(self) -> List[RateLimiter]:
        """The limiters known up front: the default one, then the rules' (not functions')."""
        return [
            lim
            for lim in (self.limiter, *(rule.limiter for rule in self.rules))
            if isinstance(lim, RateLimiter)
        ]

    def require_sync(self, adapter: str) -> None:
        """Refuse what a synchronous ``adapter`` cannot run: ``ValueError`` for an
        async-only store, ``TypeError`` for an ``async def`` callable."""
        refuse_async(adapter, self.limiters(), self.is_async)

    def decider(self) -> Callable[[RequestInfo], Verdict]:
        """``decide``, or a function that limits nothing when the guard is disabled."""
        return self.decide if self.enabled else _no_decision

    def peer_decider(self) -> Optional[PeerDecider]:
        """``decide_peer`` when the decision needs only the client address, else ``None``."""
        return self.decide_peer if self._plain is not None else None

    def decide_peer(
        self, peer: Optional[str], native: _N, to_request: Callable[[_N], RequestInfo]
    ) -> Verdict:
        """``decide(to_request(native))``, building the request only when needed."""
        # Hot path (CONTRIBUTING.md): RequestInfo is built only for on_limited.
        limiter = self._plain
        key = self._peer_keys.get(peer)  # type: ignore[arg-type]
        if key is None or limiter is None:
            return self.decide(to_request(native))
        try:
            result = limiter.check(key, self.cost)
        except StoreError:
            return self.failed(limiter)
        if result.allowed:
            return self.build(result, self._now(), self.header_style)
        if limiter.shadow:
            return self.shadow_denied(result, limiter)
        headers = self.build_text(result, self._now(), self.header_style)
        return self.on_limited(to_request(native), result, headers)

    def _route(self, request: RequestInfo) -> Optional[Route]:
        """The first matching rule's route, else the defaults; ``None`` if allow-listed."""
        allow_list = self.allow_list
        if allow_list is not None and allow_list(request):
            return None
        if not self.rules:
            return self._defaults
        limiter, key_func, cost_func, cost, deduct_when = self._defaults
        path = normal_path(request.path)
        for i, rule in enumerate(self.rules):
            if rule.matches(request.method, path):
                limiter = self.rule_limiters[i]
                if rule.key_func is not None:
                    key_func = rule.key_func
                if rule.cost is not None:
                    if callable(rule.cost):
                        cost_func = rule.cost
                    else:
                        cost_func, cost = None, rule.cost
                if rule.deduct_when is not None:
                    deduct_when = rule.deduct_when
                break
        return limiter, key_func, cost_func, cost, deduct_when

    def select(self, request: RequestInfo) -> Optional[Selection]:
        """The ``Selection`` for ``request``, or ``None`` when not limited; ``TypeError``
        when a callable is ``async`` (use ``aselect``).
        """
        if self.is_async:
            raise TypeError(
                "this guard has async def callables: await adecide() (the ASGI adapter)"
            )
        exempt = self.exempt
        if exempt is not None:
            flag = exempt(request)
            if flag.__class__ is not bool:
                flag = flag_of(flag, "exempt")
            if flag:
                return None
        # Without an allow list or rules, the defaults, without a call (CONTRIBUTING.md).
        route = self._route(request) if self._routed else self._defaults
        if route is None:
            return None
        limiter, key_func, cost_func, cost, deduct_when = route
        if limiter.__class__ is not RateLimiter and not isinstance(limiter, RateLimiter):
            limiter = limiter_of(limiter(request), cost)
        key = None if key_func is None else key_func(request)
        if key is None:
            key = self.client_ip(request)
        elif key.__class__ is not str:
            bad_key(key)
        if cost_func is not None:
            cost = cost_of(cost_func(request), limiter)
        return limiter, key, cost, deduct_when

    async def aselect(self, request: RequestInfo) -> Optional[Selection]:
        """``select`` awaiting the ``async def`` callables (any callable may be one)."""
        if not self.is_async:
            return self.select(request)
        exempt = self.exempt
        if exempt is not None and flag_of(await awaited(exempt(request)), "exempt"):
            return None
        route = self._route(request)
        if route is None:
            return None
        limiter, key_func, cost_func, cost, deduct_when = route
        if not isinstance(limiter, RateLimiter):
            limiter = limiter_of(await awaited(limiter(request)), cost)
        key = None if key_func is None else await awaited(key_func(request))
        if key is None:
            key = self.client_ip(request)
        elif key.__class__ is not str:
            bad_key(key)
        if cost_func is not None:
            cost = cost_of(await awaited(cost_func(request)), limiter)
        return limiter, key, cost, deduct_when

    def decide(self, request: RequestInfo) -> Verdict:
        """The outcome for ``request`` with a synchronous store."""
        chosen = self.select(request)
        if chosen is None:
            return _NO_HEADERS
        return self.charge(request, chosen)

    async def adecide(self, request: RequestInfo) -> Verdict:
        """``decide`` for asyncio; with ``nonblocking``, ``decide`` gives the same outcome."""
        chosen = await self.aselect(request) if self.is_async else self.select(request)
        if chosen is None:
            return _NO_HEADERS
        return await self.acharge(request, chosen)

    def _plan(self, chosen: Selection) -> Tuple[Optional[float], Optional[Slot]]:
        """The time before the check (``deduct_when`` only) and the slot to take, if any."""
        limiter, key, cost, deduct_when = chosen
        at = None if deduct_when is None else limiter.clock.now()
        if not limiter.holds_slots:
            return at, None
        slot = limiter.slot(key, cost)
        slot.quiet = self.waits is not None  # a wait reports one decision, not each try
        return at, slot

    def charge(self, request: RequestInfo, chosen: Selection) -> Verdict:
        """The check of ``chosen`` (a slot taken when its limiter holds slots) and its outcome."""
        at, slot = self._plan(chosen)
        limiter = chosen[0]
        waits = self.waits
        try:
            if waits is not None:  # max_wait: a refusal waits its turn (limiter.waiting)
                result = waits.run(
                    limiter, chosen[1], chosen[2], None if slot is None else slot.take
                )
            elif slot is None:
                result = limiter.check(chosen[1], chosen[2])
            else:
                result = slot.take()
        except StoreError:  # only a store failure goes to on_error; the rest propagates
            return self.failed(limiter)
        return self.judge(request, chosen, result, at, slot)

    async def acharge(self, request: RequestInfo, chosen: Selection) -> Verdict:
        """``charge`` for asyncio (the store is awaited)."""
        at, slot = self._plan(chosen)
        limiter = chosen[0]
        waits = self.waits
        try:
            if waits is not None:  # max_wait: a refusal waits without blocking the loop
                attempt = None if slot is None else slot.atake
                result = await waits.arun(limiter, chosen[1], chosen[2], attempt)
            elif slot is None:
                result = await limiter.acheck(chosen[1], chosen[2])
            else:
                result = await slot.atake()
        except StoreError:  # only a store failure goes to on_error; the rest propagates
            return self.failed(limiter)
        return self.judge(request, chosen, result, at, slot)

    def judge(
        self,
        request: RequestInfo,
        chosen: Selection,
        result: RateLimitResult,
        at: Optional[float] = None,
        slot: Optional[Slot] = None,
    ) -> Verdict:
        """The ``Verdict`` for ``result``; ``at``: the time before the check, ``slot``: its slot."""
        limiter = chosen[0]
        if result.allowed:
            if slot is not None and slot.held:
                return Held(self, chosen, result, at, slot)
            if chosen[3] is not None:  # deduct_when
                return Deferred(self, chosen, result, at)
            return self.build(result, limiter.clock.now(), self.header_style)
        if limiter.shadow:
            return self.shadow_denied(result, limiter)
        headers = self.build_text(result, limiter.clock.now(), self.header_style)
        return self.on_limited(request, result, headers)

    def shadow_denied(self, result: RateLimitResult, limiter: RateLimiter) -> HeaderList:
        """A would-be denial in shadow mode: logged (rate-limited), then let through."""
        now = time.monotonic()
        name = limiter.name
        with self._shadow_lock:
            count, next_log = self._shadow_counts.get(name, (0, -math.inf))
            count += 1
            if now >= next_log:
                self._shadow_counts[name] = (0, now + SHADOW_LOG_INTERVAL)
            else:
                self._shadow_counts[name] = (count, next_log)
                count = 0
        if count:
            _log.warning(
                "rate limiter %r (shadow mode) would have refused %d request(s) "
                "(logged at most once per %gs)",
                name,
                count,
                SHADOW_LOG_INTERVAL,
            )
        # Admitted after all: no Retry-After.
        return self.headers(result._replace(allowed=True, retry_after=0.0), limiter)

    def headers(self, result: RateLimitResult, limiter: RateLimiter) -> HeaderList:
        """The rate-limit headers of ``result`` in this guard's ``header_style``."""
        # The limiter's clock, so a ManualClock gives exact header values in tests.
        return self.build(result, limiter.clock.now(), self.header_style)

    def failed(self, limiter: RateLimiter) -> Verdict:
        """Apply ``on_error`` to the ``StoreError`` being handled; call it in ``except``."""
        now = time.monotonic()
        if now >= self._next_log:
            self._next_log = now + ERROR_LOG_INTERVAL
            action = "allowing" if self.on_error == "allow" else "denying (503)"
            _log.warning(
                "rate limiter %r failed; %s requests (logged once per %gs)",
                limiter.name,
                action,
                ERROR_LOG_INTERVAL,
                exc_info=True,
            )
        return _NO_HEADERS if self.on_error == "allow" else UNAVAILABLE
