"""What the three adapters share: their options, the decision and the responses.

An adapter translates its protocol into a ``RequestInfo`` (``limiter.http.request``,
re-exported here), asks a ``Guard`` for a decision and translates the decision
back.  Everything else (the options, exemption, the key, the cost, the check,
the headers, the 429 and 503 bodies, store failures) happens here, once.
"""

from __future__ import annotations

import difflib
import http
import inspect
import logging
import math
import threading
import time
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    TypedDict,
    TypeVar,
    Union,
)

from limiter.clock import SystemClock
from limiter.core.costs import validate_cost
from limiter.core.result import RateLimitResult
from limiter.http.headers import build_headers, build_raw_headers, validate_style
from limiter.http.keys import AllowList, ClientIP
from limiter.http.request import Cost, Headers, HeaderView, KeyFunc, RequestInfo
from limiter.http.rules import (
    DeductWhen,
    LimiterSpec,
    Rule,
    check_deduct_when,
    check_distinct_names,
    check_mode,
    checked_mapping,
    is_async_callable,
    plain_mapping,
    shadowed,
)
from limiter.ratelimiter import CostSpec, RateLimiter
from limiter.store import StoreError

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

__all__ = [
    "DENIED_BODY",
    "UNAVAILABLE_BODY",
    "Deferred",
    "Guard",
    "GuardOptions",
    "HeaderList",
    "HeaderView",
    "Headers",
    "IntegrationOptions",
    "OnLimited",
    "RequestInfo",
    "Response",
    "default_on_limited",
]

HeaderList = List[Tuple[str, str]]

#: The body of the default 429 response, exactly.
DENIED_BODY = b'{"status":429,"code":"rate_limited","message":"too many requests"}'
#: The body of the 503 sent when the store fails and ``on_error="deny"``.
UNAVAILABLE_BODY = (
    b'{"status":503,"code":"rate_limiter_unavailable","message":"rate limiter unavailable"}'
)
#: Seconds between two log records about store failures (fail-open is logged
#: once per interval, not once per request, so an outage cannot flood the log).
ERROR_LOG_INTERVAL = 60.0
#: Seconds between two log records of one limiter's would-be denials in shadow mode.
SHADOW_LOG_INTERVAL = 60.0

_log = logging.getLogger("limiter.adapters")
_JSON = ("Content-Type", "application/json")


class Response(NamedTuple):
    """A response that replaces the app's: ``status`` (int), ``headers`` (str pairs), ``body``."""

    status: int
    headers: HeaderList
    body: bytes


#: ``on_limited(request, result, headers) -> Response``: builds the response to
#: a limited request.  ``headers`` are the rate-limit headers (with
#: ``Retry-After``) the default response carries; include them.
OnLimited = Callable[[RequestInfo, RateLimitResult, HeaderList], Response]

_DENIED_TAIL = [_JSON, ("Content-Length", str(len(DENIED_BODY)))]
_UNAVAILABLE = Response(
    503, [_JSON, ("Content-Length", str(len(UNAVAILABLE_BODY)))], UNAVAILABLE_BODY
)


def default_on_limited(
    request: RequestInfo, result: RateLimitResult, headers: HeaderList
) -> Response:
    """``429 Too Many Requests``, ``headers``, JSON content type and ``DENIED_BODY``."""
    return Response(429, headers + _DENIED_TAIL, DENIED_BODY)


_REASONS: Dict[int, str] = {s.value: f"{s.value} {s.phrase}" for s in http.HTTPStatus}


def status_line(status: int) -> str:
    """``429`` -> ``"429 Too Many Requests"`` (WSGI's status string)."""
    line = _REASONS.get(status)
    return line if line is not None else f"{status} Unknown"


#: The ``cost`` option: a ``Cost`` (a number, or ``cost(request)`` returning
#: one), a mapping of limit names to numbers, or ``cost(request)`` returning
#: one of those (``async def`` under asyncio).
CostOption = Union[Cost, CostSpec, Callable[[RequestInfo], Any]]

#: What ``Guard.select`` picks for a request: the limiter, the key, the cost
#: and the ``deduct_when`` predicate (``None``: charge before the app runs).
Selection = Tuple[RateLimiter, str, CostSpec, Optional[DeductWhen]]

_NO_HEADERS: HeaderList = []  # shared: adapters never mutate an outcome list
_N = TypeVar("_N")  # an adapter's native request (environ, scope, handler)


class IntegrationOptions(TypedDict, total=False):
    """The ``GuardOptions`` that the framework integrations take as ``**options``.

    The other four (``key_func``, ``trusted_proxies``, ``header_style``,
    ``on_error``) are named parameters of each integration's ``RateLimit``.
    See ``GuardOptions`` for them all.
    """

    proxy_header: Optional[str]
    ipv6_prefix: int
    exempt: Optional[Callable[[RequestInfo], bool]]
    cost: CostOption
    on_limited: Optional[OnLimited]
    rules: Sequence[Rule]
    deduct_when: Optional[DeductWhen]
    allow_list: Union[str, Iterable[str]]
    enabled: bool
    mode: str


class GuardOptions(IntegrationOptions, total=False):
    """The keyword options of every adapter and of ``Guard``, all optional; documented here only.

    ``key_func`` (default ``None``): ``key_func(request) -> str | None``, the
    bucket a request is charged to; ``None``, given or returned, means the
    client IP (``limiter.http.keys.ClientIP``).
    ``trusted_proxies`` (``()``), ``proxy_header`` (``None``) and
    ``ipv6_prefix`` (``64``): how the client IP is found; they are
    ``ClientIP``'s ``trusted_proxies``, ``header`` and ``ipv6_prefix``.
    ``header_style`` (``"x"``): ``"x"``, ``"draft"`` or ``"both"``, the
    rate-limit headers added to responses (``limiter.http.headers``).
    ``exempt`` (``None``): ``exempt(request) -> bool``; ``True`` skips
    limiting (no tokens taken, no headers added).
    ``on_error`` (``"allow"``): what a ``StoreError`` does.  ``"allow"`` lets
    the request through without rate-limit headers and logs the failing
    limiter's name to the ``limiter.adapters`` logger at most once per
    ``ERROR_LOG_INTERVAL``; ``"deny"`` answers ``503`` with
    ``UNAVAILABLE_BODY``.
    ``cost`` (``1``): tokens per request, a number or ``cost(request) ->
    number`` (checked by ``limiter.core.costs.validate_cost``: one above the
    burst is denied, never admitted).  With named limits it may also be a
    mapping of limit names to numbers, or a function returning one
    (``{"requests": 1, "tokens": 350}``; a limit left out costs 0): a
    mapping given here is checked when the adapter is built against the
    limiter and every rule's limiter it applies to
    (``RateLimiter.validate_cost``: an unknown name is a ``ValueError``
    then; a limiter function's choice is checked per request), one
    returned per request when it is returned, as a number is.  With
    ``deduct_when`` the same mapping is refunded.
    ``on_limited`` (``None``: ``default_on_limited``, the 429 with
    ``DENIED_BODY``): ``on_limited(request, result, headers) -> Response``.
    ``rules`` (``()``): a list of ``limiter.Rule``; the first whose path and
    method match picks the limiter (and its ``key_func``, ``cost`` and
    ``deduct_when`` where it sets them); unmatched requests use the adapter's
    own limiter.
    ``deduct_when`` (``None``): ``deduct_when(status_code) -> bool``; when
    set, only the responses whose status it accepts are charged (e.g.
    ``lambda s: s in (401, 403)`` on a login route).  A request is refused
    when its bucket cannot pay its cost now; otherwise the cost is taken
    and the app runs, and when the response starts the cost is given back
    (``RateLimiter.refund``) unless the predicate holds for its status.
    Requests in flight hold their tokens, so concurrent requests can never
    overshoot the limit; at worst, requests that will not be charged are
    refused while others hold the last tokens.  If the app raises before it
    answers, the cost stays taken.
    ``allow_list`` (``()``): IPs and CIDRs whose requests are never limited
    nor charged and get no headers; the client address is found as for the
    default key (``trusted_proxies``, ``proxy_header``), so a client cannot
    list itself by sending a header.
    ``enabled`` (``True``): ``False`` turns limiting off (every request
    passes untouched) without removing the adapter: for tests and emergencies.
    ``mode`` (``"enforce"``): ``"shadow"`` makes every decision, charges and
    reports it (a limiter's ``on_decision`` sees ``"shadow_denied"``) but
    refuses nothing: a would-be 429 goes to the app, with the rate-limit
    headers of ``header_style`` and no ``Retry-After``, and is logged at
    WARNING to ``limiter.adapters``, at most once per limiter per
    ``SHADOW_LOG_INTERVAL`` with the count since the last record.  A
    ``Rule``'s own ``mode`` wins for its route.
    ``header_style`` may also be ``None``: no rate-limit headers at all, only
    ``Retry-After`` on a 429.

    With asyncio (the ASGI adapter and the integrations on it), ``key_func``,
    ``exempt``, a ``cost`` function and a limiter function (see
    ``limiter.Rule``) may be ``async def`` functions: they are awaited.  The
    synchronous adapters refuse them when built (``TypeError``).

    Options are checked when the adapter is built: a wrong type raises
    ``TypeError``, a wrong value ``ValueError``, both naming the option and
    the value; an unknown option is a ``TypeError`` naming the adapter.
    """

    key_func: Optional[KeyFunc]
    trusted_proxies: Union[str, Iterable[str]]
    header_style: Optional[str]
    on_error: str


_OPTION_NAMES = frozenset(GuardOptions.__annotations__)


def _rules(rules: object) -> Tuple[Rule, ...]:
    if isinstance(rules, Iterable) and not isinstance(rules, (str, bytes, Rule)):
        table = tuple(rules)
        if all(isinstance(rule, Rule) for rule in table):
            return table
    raise TypeError(f"rules must be a list of limiter.Rule, got {rules!r:.200}")


def check_options(owner: str, options: Mapping[str, object]) -> None:
    """``TypeError`` naming ``owner`` (``"RateLimitMiddleware"``) for an unknown option.

    Adapters call it before building their ``Guard``, so a misspelled keyword
    names what the user called, not the internal ``Guard``.
    """
    for name in options:
        if name not in _OPTION_NAMES:
            close = difflib.get_close_matches(name, sorted(_OPTION_NAMES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}{hint}")


def adapter_guard(
    owner: str,
    limiter: LimiterSpec,
    options: GuardOptions,
    *,
    sync: Optional[str] = None,
    encoded: bool = False,
) -> Guard:
    """The ``Guard`` of an adapter called ``owner`` (named by an unknown-option ``TypeError``).

    ``sync``: the adapter's name (``"WSGI"``) when it needs synchronous stores
    and callables.  ``encoded``: ``Guard``'s (headers as bytes pairs).
    """
    check_options(owner, options)
    guard = Guard(limiter, encoded=encoded, **options)
    if sync is not None:
        guard.require_sync(sync)
    return guard


def _no_decision(request: RequestInfo) -> Outcome:
    return _NO_HEADERS


class Deferred:
    """An admitted, charged request whose charge may be given back (``deduct_when``).

    The adapter lets the request through, then calls ``settle(status)`` (or
    ``await asettle(status)``) when the app starts its response: unless
    ``deduct_when(status)`` holds, the cost is refunded (a mapping of named
    costs, the same mapping).  It returns the
    headers to add.  Only the first call settles; later ones (a WSGI
    ``start_response`` called again with ``exc_info``) return the same
    headers and refund nothing.
    """

    __slots__ = ("at", "cost", "deduct_when", "guard", "key", "limiter", "result", "settled")

    def __init__(
        self,
        guard: Guard,
        limiter: RateLimiter,
        key: str,
        cost: CostSpec,
        deduct_when: DeductWhen,
        result: RateLimitResult,
        at: Optional[float] = None,
    ) -> None:
        self.guard = guard
        self.limiter = limiter
        self.key = key
        self.cost = cost
        self.deduct_when = deduct_when
        self.result = result
        # The charge's own time: its headers say where the bucket stood then,
        # and its refund goes only to the window that took it (a quota's
        # boundary passed since forgives the units: nothing is given back).
        # ``at`` is read before the check (a check just before a boundary).
        self.at = limiter.clock.now() if at is None else at
        self.settled: Optional[HeaderList] = None

    def _done(self, headers: HeaderList) -> HeaderList:
        self.settled = headers
        return headers

    def settle(self, status: int) -> HeaderList:
        """Refund the cost unless ``deduct_when(status)``; the headers for the response."""
        if self.settled is not None:
            return self.settled
        if _charged(self.deduct_when, status):
            return self._done(self.guard.build(self.result, self.at, self.guard.header_style))
        try:
            refunded = self.limiter.refund(self.key, self.cost, taken_at=self.at)
        except StoreError:  # the response is under way: log it, send no headers
            self.guard.failed(self.limiter)
            return self._done(_NO_HEADERS)
        return self._done(self.guard.headers(refunded, self.limiter))

    async def asettle(self, status: int) -> HeaderList:
        """``settle`` for asyncio (the store is awaited)."""
        if self.settled is not None:
            return self.settled
        if _charged(self.deduct_when, status):
            return self._done(self.guard.build(self.result, self.at, self.guard.header_style))
        try:
            refunded = await self.limiter.arefund(self.key, self.cost, taken_at=self.at)
        except StoreError:
            self.guard.failed(self.limiter)
            return self._done(_NO_HEADERS)
        return self._done(self.guard.headers(refunded, self.limiter))


def _charged(deduct_when: DeductWhen, status: int) -> bool:
    return _flag(deduct_when(status), "deduct_when")


def _flag(value: object, name: str) -> bool:
    """``value`` (a predicate's answer) as a bool; an awaitable is a ``TypeError``.

    An ``async def`` function hidden behind a plain one returns a coroutine,
    which is true: taken as an answer it would exempt every request.
    """
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


#: A decision: a list of headers to add to the app's response (the request
#: proceeds; the list may be empty), a ``Response`` to send instead, or a
#: ``Deferred`` charge to settle when the response starts.
Outcome = Union[HeaderList, Response, Deferred]
#: ``Guard.decide_peer``'s signature: ``(peer, native, to_request) -> Outcome``.
PeerDecider = Callable[[Optional[str], Any, Callable[[Any], RequestInfo]], Outcome]


class Guard:
    """The decision every adapter delegates to; built once per adapter.

    ``Guard(limiter, **options)`` takes a ``RateLimiter`` (or a function of
    the request returning one, see ``limiter.Rule``) and the ``GuardOptions``.
    ``decide(request)`` (or ``await adecide(request)``) returns the headers
    to append to the app's response, a ``Response`` to send instead, or a
    ``Deferred`` whose ``settle(status)`` charges the request once its
    response status is known (``deduct_when``).  ``select(request)`` chooses
    ``(limiter, key, cost, deduct_when)`` or ``None`` (not limited): ``exempt``
    and ``allow_list`` first, then the first matching rule, then the defaults.
    ``encoded=True`` (the ASGI adapter's): every list of headers it returns,
    from ``decide``, ``adecide``, ``decide_peer``, ``headers`` and
    ``Deferred.settle``, holds latin-1 ``bytes`` pairs instead of ``str``
    ones; ``on_limited`` still gets ``str`` pairs.

    Errors: only ``StoreError`` (a store that cannot answer) is handled, by
    ``on_error``.  Every other exception propagates, as any application error
    does: those of ``key_func``, ``exempt``, ``cost``, a limiter function,
    ``deduct_when`` and ``on_limited`` (the application's code: a bug must be
    seen, never turned into an open door), a ``key_func`` returning neither
    ``str`` nor ``None``, a ``cost`` returning a non-number (nor mapping)
    or a limiter function returning no ``RateLimiter`` (``TypeError``), a
    NaN or negative cost or a mapping naming a limit the chosen limiter
    does not have (``ValueError``), and any non-``StoreError`` exception of
    the limiter call.
    """

    __slots__ = (
        "_cost",
        "_cost_func",
        "_next_log",
        "_now",
        "_peer_keys",
        "_plain",
        "_rule_limiters",
        "_shadow_counts",
        "_shadow_lock",
        "allow_list",
        "build",
        "client_ip",
        "deduct_when",
        "enabled",
        "exempt",
        "header_style",
        "is_async",
        "key_func",
        "limiter",
        "mode",
        "nonblocking",
        "on_error",
        "on_limited",
        "rules",
    )

    def __init__(
        self, limiter: LimiterSpec, *, encoded: bool = False, **options: Unpack[GuardOptions]
    ) -> None:
        check_options("Guard", options)
        if not isinstance(limiter, RateLimiter) and not callable(limiter):
            raise TypeError(
                f"limiter must be a limiter.RateLimiter or a function of the request "
                f"returning one, got {limiter!r}"
            )
        self.rules: Tuple[Rule, ...] = _rules(options.get("rules", ()))
        check_distinct_names([limiter, *(rule.limiter for rule in self.rules)])
        key_func = options.get("key_func")
        exempt = options.get("exempt")
        on_limited = options.get("on_limited")
        for name, func in (("key_func", key_func), ("exempt", exempt), ("on_limited", on_limited)):
            if func is not None and not callable(func):
                raise TypeError(f"{name} must be callable or None, got {func!r}")
        if is_async_callable(on_limited):
            raise TypeError(f"on_limited must be a plain function, got {on_limited!r}")
        on_error = options.get("on_error", "allow")
        if on_error not in ("allow", "deny"):
            error = ValueError if isinstance(on_error, str) else TypeError
            raise error(f"on_error must be 'allow' or 'deny', got {on_error!r}")
        header_style = options.get("header_style", "x")
        if header_style is not None and not isinstance(header_style, str):
            raise TypeError(
                f"header_style must be one of 'x', 'draft', 'both' or None, got {header_style!r}"
            )
        enabled = options.get("enabled", True)
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be True or False, got {enabled!r}")
        self.mode = check_mode(options.get("mode", "enforce"))
        shadow = self.mode == "shadow"
        self.limiter: LimiterSpec = shadowed(limiter) if shadow else limiter
        # Each rule's limiter as this guard uses it (a shadow view in shadow mode).
        self._rule_limiters: Tuple[LimiterSpec, ...] = tuple(
            shadowed(rule.limiter) if (rule.mode or self.mode) == "shadow" else rule.limiter
            for rule in self.rules
        )
        self._shadow_counts: Dict[str, Tuple[int, float]] = {}
        self._shadow_lock = threading.Lock()
        self.key_func = key_func
        self.exempt = exempt
        self.client_ip = ClientIP(
            options.get("trusted_proxies", ()),
            options.get("ipv6_prefix", 64),
            header=options.get("proxy_header"),
        )
        allow_list = AllowList(options.get("allow_list", ()), self.client_ip)
        #: The ``allow_list`` (``None`` when empty: no per-request cost).
        self.allow_list: Optional[AllowList] = allow_list if allow_list else None
        self.header_style = validate_style(header_style)
        #: ``build_headers``, or ``build_raw_headers`` with ``encoded=True``: what
        #: makes the rate-limit headers of the lists this guard returns.
        self.build: Callable[[RateLimitResult, float, Optional[str]], HeaderList] = (
            build_raw_headers if encoded else build_headers  # type: ignore[assignment]
        )
        self.on_error = on_error
        self.on_limited: OnLimited = default_on_limited if on_limited is None else on_limited
        self.deduct_when = check_deduct_when(options.get("deduct_when"))
        #: False when built with ``enabled=False``: adapters then skip the guard.
        self.enabled: bool = enabled
        cost = options.get("cost", 1)
        if callable(cost):
            self._cost_func: Optional[Callable[[RequestInfo], Any]] = cost
            self._cost: CostSpec = 1
        else:
            self._cost_func = None
            self._cost = (
                # The guard's limiter, and each rule's that takes the guard's cost.
                checked_mapping(cost, [limiter, *(r.limiter for r in self.rules if r.cost is None)])
                if isinstance(cost, Mapping)
                else validate_cost(cost)
            )
        self._next_log = -math.inf
        #: True when a callable (key, cost, exempt, limiter function) is ``async``:
        #: only ``adecide`` may then be used.
        self.is_async: bool = any(
            is_async_callable(func)
            for func in (
                key_func,
                exempt,
                cost,
                None if isinstance(limiter, RateLimiter) else limiter,
                *(f for r in self.rules for f in (r.key_func, r.cost, r.limiter)),
            )
            if func is not None and not isinstance(func, RateLimiter)
        )
        limiters = self.limiters()
        #: True when no limiter's store waits on I/O (``RateLimiter.nonblocking``)
        #: and no callable is ``async``: async code may then call ``decide``
        #: instead of awaiting ``adecide``.  Never True with limiter functions.
        self.nonblocking: bool = (
            not self.is_async
            and len(limiters) == 1 + len(self.rules)
            and all(lim.nonblocking for lim in limiters)
        )
        # The limiter of a guard whose decision needs the client address alone
        # (see decide_peer), else None.
        plain = self.limiter
        self._plain: Optional[RateLimiter] = (
            plain
            if isinstance(plain, RateLimiter)
            and enabled
            and not self.is_async
            and not self.rules
            and key_func is None
            and exempt is None
            and self.allow_list is None
            and self._cost_func is None
            and self.deduct_when is None
            else None
        )
        # A RateLimiter's clock is fixed when it is built (it keeps clock.now too).
        # time.time when the clock is the system's, one call less than its now().
        clock = None if self._plain is None else self._plain.clock
        self._now: Callable[[], float] = (
            time.time if clock is None or type(clock) is SystemClock else clock.now
        )
        # The same dict object for the guard's life: ClientIP clears it, never replaces it.
        self._peer_keys: Dict[str, str] = self.client_ip.peer_keys

    def limiters(self) -> List[RateLimiter]:
        """The limiters known up front: the default one, then the rules' (not functions')."""
        return [
            lim
            for lim in (self.limiter, *(rule.limiter for rule in self.rules))
            if isinstance(lim, RateLimiter)
        ]

    def decider(self) -> Callable[[RequestInfo], Outcome]:
        """``decide``, or a function that limits nothing when the guard is disabled."""
        return self.decide if self.enabled else _no_decision

    def peer_decider(self) -> Optional[PeerDecider]:
        """``decide_peer`` when this guard can use it, else ``None`` (use ``decider``).

        It can when the guard is enabled and its decision needs only the client
        address: one ``RateLimiter`` with a synchronous store, no ``key_func``,
        ``exempt``, ``allow_list``, ``rules``, ``deduct_when`` nor cost function.
        """
        return self.decide_peer if self._plain is not None else None

    def decide_peer(
        self, peer: Optional[str], native: _N, to_request: Callable[[_N], RequestInfo]
    ) -> Outcome:
        """``decide(to_request(native))``, building the request only when it is needed.

        For the guards of ``peer_decider`` only.  ``peer`` is the request's
        peer address as ``to_request`` would find it, or anything that is not
        a known peer (such as ``None``): a peer whose key is not cached yet,
        or a trusted proxy's, takes the full path through ``decide``.
        """
        # The hot path of the adapters (CONTRIBUTING.md, "Hot paths"): the key is
        # one dict lookup, and the RequestInfo is built only for on_limited.
        limiter = self._plain
        key = self._peer_keys.get(peer)  # type: ignore[arg-type]
        if key is None or limiter is None:
            return self.decide(to_request(native))
        try:
            result = limiter.check(key, self._cost)
        except StoreError:  # only a store failure goes to on_error; the rest propagates
            return self.failed(limiter)
        if result[0]:
            return self.build(result, self._now(), self.header_style)
        if limiter.shadow:
            return self.shadow_denied(result, limiter)
        headers = build_headers(result, self._now(), self.header_style)
        return self.on_limited(to_request(native), result, headers)

    def adecider(self) -> Callable[[RequestInfo], Awaitable[Outcome]]:
        """``adecide``, or a coroutine function that limits nothing when disabled."""
        if self.enabled:
            return self.adecide

        async def no_decision(request: RequestInfo) -> Outcome:
            return _NO_HEADERS

        return no_decision

    def require_sync(self, adapter: str) -> None:
        """Refuse what a synchronous ``adapter`` (WSGI, http.server) cannot run.

        ``ValueError`` for a known limiter whose store is async only;
        ``TypeError`` for an ``async def`` callable.  A limiter function's
        limiters are checked when it returns them (a ``TypeError`` then).
        """
        for limiter in self.limiters():
            if not callable(getattr(limiter.store, "apply", None)):
                raise ValueError(
                    f"{adapter} needs a synchronous store; {limiter.store!r} is async only"
                )
        if self.is_async:
            raise TypeError(
                f"{adapter} cannot await: key_func, exempt, cost and limiter functions "
                f"must be plain functions here (async def ones work with the ASGI adapter)"
            )

    def _route(
        self, request: RequestInfo
    ) -> Tuple[LimiterSpec, Optional[KeyFunc], Optional[Callable[..., Any]], CostSpec, Any]:
        # (limiter, key_func, cost_func, cost, deduct_when) of the first matching rule.
        limiter = self.limiter
        key_func = self.key_func
        cost_func = self._cost_func
        cost: CostSpec = self._cost
        deduct_when = self.deduct_when
        for i, rule in enumerate(self.rules):
            if rule.matches(request.method, request.path):
                limiter = self._rule_limiters[i]
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
        """``(limiter, key, cost, deduct_when)`` for ``request``, or ``None`` when not limited.

        ``TypeError`` when a callable is ``async``: use ``aselect``.
        """
        if self.is_async:
            raise TypeError(
                "this guard has async def callables: await adecide() (the ASGI adapter)"
            )
        exempt = self.exempt
        if exempt is not None:
            flag = exempt(request)
            if flag.__class__ is not bool:
                flag = _flag(flag, "exempt")
            if flag:
                return None
        allow_list = self.allow_list
        if allow_list is not None and allow_list(request):
            return None
        if self.rules:
            limiter, key_func, cost_func, cost, deduct_when = self._route(request)
        else:
            limiter, key_func = self.limiter, self.key_func
            cost_func, cost, deduct_when = self._cost_func, self._cost, self.deduct_when
        if limiter.__class__ is not RateLimiter and not isinstance(limiter, RateLimiter):
            limiter = _chosen(limiter(request))
            if cost.__class__ is dict:  # a cost= mapping, checked now that the limiter is known
                limiter.validate_cost(cost)
        key = None
        if key_func is not None:
            key = key_func(request)
            if key is not None and type(key) is not str:
                raise TypeError(f"key_func must return a str or None, got {key!r:.100}")
        if key is None:
            key = self.client_ip(request)
        if cost_func is not None:
            cost = _request_cost(cost_func(request), limiter)
        return limiter, key, cost, deduct_when

    async def aselect(self, request: RequestInfo) -> Optional[Selection]:
        """``select`` awaiting the ``async def`` callables (any callable may be one)."""
        if not self.is_async:
            return self.select(request)
        exempt = self.exempt
        if exempt is not None and _flag(await _value(exempt(request)), "exempt"):
            return None
        allow_list = self.allow_list
        if allow_list is not None and allow_list(request):
            return None
        limiter, key_func, cost_func, cost, deduct_when = self._route(request)
        if not isinstance(limiter, RateLimiter):
            limiter = _chosen(await _value(limiter(request)))
            if cost.__class__ is dict:  # a cost= mapping, checked now that the limiter is known
                limiter.validate_cost(cost)
        key = None
        if key_func is not None:
            key = await _value(key_func(request))
            if key is not None and type(key) is not str:
                raise TypeError(f"key_func must return a str or None, got {key!r:.100}")
        if key is None:
            key = self.client_ip(request)
        if cost_func is not None:
            cost = _request_cost(await _value(cost_func(request)), limiter)
        return limiter, key, cost, deduct_when

    def decide(self, request: RequestInfo) -> Outcome:
        """The outcome for ``request`` with a synchronous store."""
        chosen = self.select(request)
        if chosen is None:
            return _NO_HEADERS
        limiter, key, cost, deduct_when = chosen
        at = None if deduct_when is None else limiter.clock.now()
        try:
            result = limiter.check(key, cost)
        except StoreError:  # only a store failure goes to on_error; the rest propagates
            return self.failed(limiter)
        if deduct_when is not None and result[0]:
            return Deferred(self, limiter, key, cost, deduct_when, result, at)
        if not result[0] and limiter.shadow:
            return self.shadow_denied(result, limiter)
        return self.outcome(request, result, limiter)

    async def adecide(self, request: RequestInfo) -> Outcome:
        """``decide`` for asyncio: the store is awaited (``RateLimiter.acheck``).

        When ``nonblocking`` is True, ``decide`` gives the same outcome without
        a coroutine.
        """
        chosen = await self.aselect(request) if self.is_async else self.select(request)
        if chosen is None:
            return _NO_HEADERS
        limiter, key, cost, deduct_when = chosen
        at = None if deduct_when is None else limiter.clock.now()
        try:
            result = await limiter.acheck(key, cost)
        except StoreError:  # only a store failure goes to on_error; the rest propagates
            return self.failed(limiter)
        if deduct_when is not None and result[0]:
            return Deferred(self, limiter, key, cost, deduct_when, result, at)
        if not result[0] and limiter.shadow:
            return self.shadow_denied(result, limiter)
        return self.outcome(request, result, limiter)

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
        # Admitted after all: its headers, without Retry-After.
        return self.headers(result._replace(allowed=True, retry_after=0.0), limiter)

    def headers(self, result: RateLimitResult, limiter: RateLimiter) -> HeaderList:
        """The rate-limit headers of ``result`` in this guard's ``header_style``."""
        # The limiter's own clock: Unix time in production, and exact,
        # reproducible header values under a ManualClock in tests.
        return self.build(result, limiter.clock.now(), self.header_style)

    def outcome(
        self, request: RequestInfo, result: RateLimitResult, limiter: RateLimiter
    ) -> Outcome:
        """The headers for an allowed ``result``, or ``on_limited``'s response."""
        if result[0]:
            return self.build(result, limiter.clock.now(), self.header_style)
        headers = build_headers(result, limiter.clock.now(), self.header_style)
        return self.on_limited(request, result, headers)

    def failed(self, limiter: Optional[RateLimiter] = None) -> Outcome:
        """Apply ``on_error`` to the ``StoreError`` being handled (call in ``except``).

        ``limiter`` is the one whose store failed (default: the guard's own),
        named in the log record.
        """
        now = time.monotonic()
        if now >= self._next_log:
            self._next_log = now + ERROR_LOG_INTERVAL
            action = "allowing" if self.on_error == "allow" else "denying (503)"
            if limiter is None:
                limiter = self.limiter if isinstance(self.limiter, RateLimiter) else None
            _log.warning(
                "rate limiter %r failed; %s requests (logged once per %gs)",
                getattr(limiter, "name", "?"),
                action,
                ERROR_LOG_INTERVAL,
                exc_info=True,
            )
        return _NO_HEADERS if self.on_error == "allow" else _UNAVAILABLE


def _request_cost(cost: object, limiter: RateLimiter) -> CostSpec:
    """A cost function's answer checked as ``cost``: a number, or a mapping for ``limiter``.

    A mapping is checked against the limiter chosen for this request, here,
    before its store is asked: a bad one is the app's error (it propagates)
    even when the store is down, as a bad number is.
    """
    if cost.__class__ is float or cost.__class__ is int:  # the usual answer, no Mapping test
        return validate_cost(cost)
    if isinstance(cost, Mapping):
        limiter.validate_cost(cost)
        return plain_mapping(cost)  # a Refund or Charge inside: the scalar rule
    return validate_cost(cost)


async def _value(value: Any) -> Any:
    """``value``, awaited first if it is awaitable (an ``async def`` callable's result)."""
    if inspect.isawaitable(value):
        return await value
    return value


def _chosen(limiter: object) -> RateLimiter:
    if not isinstance(limiter, RateLimiter):
        raise TypeError(
            f"a limiter function must return a limiter.RateLimiter, got {limiter!r:.200}"
        )
    return limiter
