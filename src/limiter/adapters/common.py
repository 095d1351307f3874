"""What the three adapters share: their options, the decision and the responses.

An adapter translates its protocol into a ``RequestInfo`` (``limiter.request``,
re-exported here), asks a ``Guard`` for a decision and translates the decision
back.  Everything else (the options, exemption, the key, the cost, the check,
the headers, the 429 and 503 bodies, store failures) happens here, once.
"""

from __future__ import annotations

import difflib
import http
import logging
import math
import time
from typing import (
    TYPE_CHECKING,
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
    Union,
)

from ..bucket import RateLimitResult, validate_cost
from ..headers import build_headers, validate_style
from ..keys import ClientIP
from ..ratelimiter import RateLimiter
from ..request import Cost, Headers, HeaderView, KeyFunc, RequestInfo
from ..rules import Rule, check_distinct_names
from ..store import StoreError

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

__all__ = [
    "DENIED_BODY",
    "UNAVAILABLE_BODY",
    "Guard",
    "GuardOptions",
    "HeaderList",
    "HeaderView",
    "Headers",
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


#: What ``Guard.select`` picks for a request: the limiter, the key and the cost.
Selection = Tuple[RateLimiter, str, float]
#: A decision: a list of headers to add to the app's response (the request
#: proceeds; the list may be empty) or a ``Response`` to send instead.
Outcome = Union[HeaderList, Response]

_NO_HEADERS: HeaderList = []  # shared: adapters never mutate an outcome list


class GuardOptions(TypedDict, total=False):
    """The keyword options of every adapter and of ``Guard``, all optional; documented here only.

    ``key_func`` (default ``None``): ``key_func(request) -> str | None``, the
    bucket a request is charged to; ``None``, given or returned, means the
    client IP (``limiter.keys.ClientIP``).
    ``trusted_proxies`` (``()``), ``proxy_header`` (``None``) and
    ``ipv6_prefix`` (``64``): how the client IP is found; they are
    ``ClientIP``'s ``trusted_proxies``, ``header`` and ``ipv6_prefix``.
    ``header_style`` (``"x"``): ``"x"``, ``"draft"`` or ``"both"``, the
    rate-limit headers added to responses (``limiter.headers``).
    ``exempt`` (``None``): ``exempt(request) -> bool``; ``True`` skips
    limiting (no tokens taken, no headers added).
    ``on_error`` (``"allow"``): what a ``StoreError`` does.  ``"allow"`` lets
    the request through without rate-limit headers and logs the failing
    limiter's name to the ``limiter.adapters`` logger at most once per
    ``ERROR_LOG_INTERVAL``; ``"deny"`` answers ``503`` with
    ``UNAVAILABLE_BODY``.
    ``cost`` (``1``): tokens per request, a number or ``cost(request) ->
    number`` (checked by ``limiter.bucket.validate_cost``: one above the
    burst is denied, never admitted).
    ``on_limited`` (``None``: ``default_on_limited``, the 429 with
    ``DENIED_BODY``): ``on_limited(request, result, headers) -> Response``.
    ``rules`` (``()``): a list of ``limiter.Rule``; the first whose path and
    method match picks the limiter (and its ``key_func`` and ``cost`` where
    it sets them); unmatched requests use the adapter's own limiter.

    Options are checked when the adapter is built: a wrong type raises
    ``TypeError``, a wrong value ``ValueError``, both naming the option and
    the value; an unknown option is a ``TypeError`` naming the adapter.
    """

    key_func: Optional[KeyFunc]
    trusted_proxies: Union[str, Iterable[str]]
    proxy_header: Optional[str]
    ipv6_prefix: int
    header_style: str
    exempt: Optional[Callable[[RequestInfo], bool]]
    on_error: str
    cost: Cost
    on_limited: Optional[OnLimited]
    rules: Sequence[Rule]


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
    owner: str, limiter: RateLimiter, options: GuardOptions, *, sync: Optional[str] = None
) -> Guard:
    """The ``Guard`` of an adapter called ``owner`` (named by an unknown-option ``TypeError``).

    ``sync``: the adapter's name (``"WSGI"``) when it needs synchronous stores.
    """
    check_options(owner, options)
    guard = Guard(limiter, **options)
    if sync is not None:
        guard.require_sync(sync)
    return guard


class Guard:
    """The decision every adapter delegates to; built once per adapter.

    ``Guard(limiter, **options)`` takes the ``GuardOptions``.
    ``decide(request)`` (or ``await adecide(request)``) returns either the
    headers to append to the app's response or a ``Response`` to send
    instead.  ``select(request)`` chooses ``(limiter, key, cost)`` or ``None``
    (exempt): ``exempt`` first, then the first matching rule, then the
    defaults.

    Errors: only ``StoreError`` (a store that cannot answer) is handled, by
    ``on_error``.  Every other exception propagates, as any application error
    does: those of ``key_func``, ``exempt``, ``cost`` and ``on_limited`` (the
    application's code: a bug must be seen, never turned into an open door),
    a ``key_func`` returning neither ``str`` nor ``None`` or a ``cost``
    returning a non-number (``TypeError``), a NaN or negative cost
    (``ValueError``), and any non-``StoreError`` exception of the limiter call.
    """

    __slots__ = (
        "_cost",
        "_cost_func",
        "_next_log",
        "client_ip",
        "exempt",
        "header_style",
        "key_func",
        "limiter",
        "nonblocking",
        "on_error",
        "on_limited",
        "rules",
    )

    def __init__(self, limiter: RateLimiter, **options: Unpack[GuardOptions]) -> None:
        check_options("Guard", options)
        if not isinstance(limiter, RateLimiter):
            raise TypeError(f"limiter must be a limiter.RateLimiter, got {limiter!r}")
        self.rules: Tuple[Rule, ...] = _rules(options.get("rules", ()))
        check_distinct_names([limiter, *(rule.limiter for rule in self.rules)])
        key_func = options.get("key_func")
        exempt = options.get("exempt")
        on_limited = options.get("on_limited")
        for name, func in (("key_func", key_func), ("exempt", exempt), ("on_limited", on_limited)):
            if func is not None and not callable(func):
                raise TypeError(f"{name} must be callable or None, got {func!r}")
        on_error = options.get("on_error", "allow")
        if on_error not in ("allow", "deny"):
            error = ValueError if isinstance(on_error, str) else TypeError
            raise error(f"on_error must be 'allow' or 'deny', got {on_error!r}")
        header_style = options.get("header_style", "x")
        if not isinstance(header_style, str):
            raise TypeError(
                f"header_style must be one of 'x', 'draft', 'both', got {header_style!r}"
            )
        self.limiter = limiter
        self.key_func = key_func
        self.exempt = exempt
        self.client_ip = ClientIP(
            options.get("trusted_proxies", ()),
            options.get("ipv6_prefix", 64),
            header=options.get("proxy_header"),
        )
        self.header_style = validate_style(header_style)
        self.on_error = on_error
        self.on_limited: OnLimited = default_on_limited if on_limited is None else on_limited
        cost = options.get("cost", 1)
        if callable(cost):
            self._cost_func: Optional[Callable[[RequestInfo], float]] = cost
            self._cost: float = 1
        else:
            self._cost_func = None
            self._cost = validate_cost(cost)
        self._next_log = -math.inf
        #: True when no limiter's store waits on I/O (``RateLimiter.nonblocking``):
        #: async code may then call ``decide`` instead of awaiting ``adecide``.
        self.nonblocking: bool = all(lim.nonblocking for lim in self.limiters())

    def limiters(self) -> List[RateLimiter]:
        """Every limiter this guard may use: the default one, then the rules'."""
        return [self.limiter, *(rule.limiter for rule in self.rules)]

    def require_sync(self, adapter: str) -> None:
        """``ValueError`` unless every limiter's store is synchronous (WSGI, http.server)."""
        for limiter in self.limiters():
            if not callable(getattr(limiter.store, "apply", None)):
                raise ValueError(
                    f"{adapter} needs a synchronous store; {limiter.store!r} is async only"
                )

    def select(self, request: RequestInfo) -> Optional[Selection]:
        """``(limiter, key, cost)`` for ``request``, or ``None`` when it is exempt."""
        exempt = self.exempt
        if exempt is not None and exempt(request):
            return None
        limiter = self.limiter
        key_func = self.key_func
        cost_func = self._cost_func
        cost = self._cost
        for rule in self.rules:
            if rule.matches(request.method, request.path):
                limiter = rule.limiter
                if rule.key_func is not None:
                    key_func = rule.key_func
                if rule.cost is not None:
                    if callable(rule.cost):
                        cost_func = rule.cost
                    else:
                        cost_func, cost = None, rule.cost
                break
        key = None
        if key_func is not None:
            key = key_func(request)
            if key is not None and type(key) is not str:
                raise TypeError(f"key_func must return a str or None, got {key!r:.100}")
        if key is None:
            key = self.client_ip(request)
        if cost_func is not None:
            cost = validate_cost(cost_func(request))
        return limiter, key, cost

    def decide(self, request: RequestInfo) -> Outcome:
        """The outcome for ``request`` with a synchronous store."""
        chosen = self.select(request)
        if chosen is None:
            return _NO_HEADERS
        limiter, key, cost = chosen
        try:
            result = limiter.check(key, cost)
        except StoreError:  # only a store failure goes to on_error; the rest propagates
            return self.failed(limiter)
        return self.outcome(request, result, limiter)

    async def adecide(self, request: RequestInfo) -> Outcome:
        """``decide`` for asyncio: the store is awaited (``RateLimiter.acheck``).

        When ``nonblocking`` is True, ``decide`` gives the same outcome without
        a coroutine.
        """
        chosen = self.select(request)
        if chosen is None:
            return _NO_HEADERS
        limiter, key, cost = chosen
        try:
            result = await limiter.acheck(key, cost)
        except StoreError:  # only a store failure goes to on_error; the rest propagates
            return self.failed(limiter)
        return self.outcome(request, result, limiter)

    def outcome(
        self, request: RequestInfo, result: RateLimitResult, limiter: RateLimiter
    ) -> Outcome:
        """The headers for an allowed ``result``, or ``on_limited``'s response."""
        # The limiter's own clock: Unix time in production, and exact,
        # reproducible header values under a ManualClock in tests.
        headers = build_headers(result, limiter.clock.now(), self.header_style)
        if result[0]:
            return headers
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
            _log.warning(
                "rate limiter %r failed; %s requests (logged once per %gs)",
                (self.limiter if limiter is None else limiter).name,
                action,
                ERROR_LOG_INTERVAL,
                exc_info=True,
            )
        return _NO_HEADERS if self.on_error == "allow" else _UNAVAILABLE
