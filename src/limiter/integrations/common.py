"""What the framework integrations (Flask, FastAPI, Django) share.

An integration is one object (``RateLimit`` in each framework module) that
holds a store, a clock and the adapter options, a ``default`` limit for
every view without one of its own, and the limits its decorators or
dependencies put on single views.  Each of those is a ``RouteLimit``; this
module turns them into ``Guard``s (``limiter.http.guard``), so a
decision on a view is the very decision the WSGI and ASGI middleware make,
with the same request view, key functions, bodies and headers.

Scope of buckets, as in flask-limiter and slowapi: each ``RouteLimit`` has
buckets of its own (two views both limited to ``"2/minute"`` do not share
them); limits given the same ``name`` share one set; the ``default`` limit is
one set shared by every view it covers.  A limiter built here from a rate
string is named ``"<scope>|<rate>"`` on the integration's store, where the
scope is the ``name``, or one the integration derives from the view, stable
across processes (Flask: the endpoint or the view class; Django: the view's
``module.qualname`` or class; FastAPI: the methods and path templates of the
routes using the dependency, ``"GET /items/{id}"``).
"""

from __future__ import annotations

import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from limiter.clock import Clock
from limiter.http.guard import Deferred, Guard
from limiter.http.options import GuardOptions, Options, check_options
from limiter.http.request import Cost, KeyFunc, RequestInfo
from limiter.http.responses import HeaderList, Response
from limiter.http.rules import (
    DeductWhen,
    LimiterSpec,
    check_deduct_when,
    checked_mapping,
    method_set,
    then,
)
from limiter.ratelimiter import RateLimiter

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

#: A limit as the integrations take it: a rate string (``"5/minute"``,
#: ``"10/second;100/hour"``), a ``RateLimiter``, or a function of the request
#: returning either (``async def`` allowed under asyncio).
RateSpec = Union[str, RateLimiter, Callable[[RequestInfo], Any]]

#: How many distinct rate strings one scope's limit function may return
#: (plans, tiers) before it is an error: a function returning ever-new
#: strings (one per client) would create limiters without bound.
MAX_RATES_PER_SCOPE = 256


#: Options of the default limit only; a view's own limit sets its own.
_DEFAULT_ONLY = frozenset({"cost", "rules", "deduct_when"})


def _takes_one(func: object) -> Optional[bool]:
    """Whether ``func`` can be called with one positional argument; ``None`` when
    its signature cannot be read (a builtin, some C callables): then accepted."""
    import inspect

    try:
        signature = inspect.signature(func)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(None)
    except TypeError:
        return False
    return True


def _named(func: object) -> str:
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return f"{name}()" if isinstance(name, str) else f"{func!r:.100}"


def check_key_func(key_func: object) -> None:
    """``TypeError`` for a ``key_func`` that cannot take the request (flask-limiter's
    and slowapi's key functions take none, or the framework's request)."""
    if key_func is not None and callable(key_func) and _takes_one(key_func) is False:
        raise TypeError(
            f"key_func must take the request (a limiter.RequestInfo) as its one argument, "
            f"as in key_func=lambda request: request.headers.get('X-API-Key'); "
            f"{_named(key_func)} cannot (flask-limiter's key functions take none)"
        )


#: Parameter names that say a ``deduct_when`` expects the response object
#: (flask-limiter's ``deduct_when=lambda response: ...``), not the status.
_RESPONSE_NAMES = frozenset({"response", "resp", "rv"})


def check_deduct_when_signature(deduct_when: object) -> None:
    """``TypeError`` for a ``deduct_when`` that cannot take one status code, or
    whose one parameter is named as a response (flask-limiter's signature)."""
    if deduct_when is None or not callable(deduct_when):
        return
    fix = "deduct_when gets the status code (an int): deduct_when=lambda status: status >= 400"
    takes = _takes_one(deduct_when)
    if takes is False:
        raise TypeError(f"{fix}; {_named(deduct_when)} cannot take one argument")
    if takes:
        import inspect

        first = next(iter(inspect.signature(deduct_when).parameters.values()))
        if first.name in _RESPONSE_NAMES:
            raise TypeError(
                f"{fix}, not the response; {_named(deduct_when)} takes {first.name!r} "
                "(flask-limiter passes the response)"
            )


def check_rate(rate: object) -> RateSpec:
    """``rate`` if it is a rate string (parsed now: a typo fails at start-up), a
    list of rate strings (flask-limiter's ``["2 per minute", "1 per second"]``,
    joined with ``;``: all apply), a ``RateLimiter`` or a function of the
    request; else ``TypeError`` or ``ValueError``."""
    if isinstance(rate, (list, tuple)) and rate and all(isinstance(r, str) for r in rate):
        rate = ";".join(rate)
    if isinstance(rate, str):
        RateLimiter(rate)  # parses it: ValueError naming the text
        return rate
    if isinstance(rate, RateLimiter):
        return rate
    if callable(rate) and not isinstance(rate, type):
        if _takes_one(rate) is False:
            # A view given as the rate: a bare @rl.limit or @ratelimit.
            raise TypeError(
                f"the rate comes first: {_named(rate)} is not a rate nor a function of the "
                "request (it takes no argument); a bare @rl.limit or @ratelimit needs one, "
                'as in @rl.limit("5/minute")'
            )
        return rate
    if isinstance(rate, (list, tuple)):
        raise TypeError(
            f"a list of rates must hold rate strings, like ['2/minute', '1/second'] (or write "
            f"them as one string: '2/minute;1/second'), got {rate!r:.200}"
        )
    raise TypeError(
        f"rate must be a string like '5/minute', a limiter.RateLimiter or a function of "
        f"the request returning one of those, got {rate!r:.200}"
    )


class RouteLimit:
    """One limit on one view, as a decorator or dependency records it.

    ``rate``: a ``RateSpec``.  ``key_func`` (``None``: the integration's),
    ``cost`` (tokens, or a function of the request), ``methods`` (``None``:
    every method; otherwise the other methods are not limited by this limit),
    ``deduct_when`` (``status -> bool``, see docs/adapters.md) and ``scope``:
    the name its buckets live under (``name=`` or the view's
    ``module.qualname``).  Arguments are checked when it is built.
    """

    __slots__ = ("cost", "deduct_when", "key_func", "methods", "rate", "scope")

    def __init__(
        self,
        rate: RateSpec,
        *,
        scope: str,
        key_func: Optional[KeyFunc] = None,
        cost: Cost = 1,
        methods: Optional[Iterable[str]] = None,
        deduct_when: Optional[DeductWhen] = None,
    ) -> None:
        self.rate = check_rate(rate)
        if not isinstance(scope, str) or not scope:
            raise TypeError(f"name must be a non-empty str, got {scope!r}")
        if key_func is not None and not callable(key_func):
            raise TypeError(f"key_func must be callable or None, got {key_func!r}")
        check_key_func(key_func)
        check_deduct_when_signature(deduct_when)
        if isinstance(cost, Mapping):
            # Checked now against the limits the route's rate names (a typo
            # fails at start-up); a function's limiters, per request.
            shape = RateLimiter(self.rate) if isinstance(self.rate, str) else self.rate
            cost = checked_mapping(cost, [shape])
        elif not callable(cost):
            from limiter.core.costs import validate_cost

            validate_cost(cost)
        self.scope = scope
        self.key_func = key_func
        self.cost = cost
        self.methods = method_set(methods)
        self.deduct_when = check_deduct_when(deduct_when)

    def __repr__(self) -> str:
        return f"RouteLimit({self.rate!r}, scope={self.scope!r})"


class Decision:
    """What an integration decided for one request on one view.

    ``response``: the ``Response`` (429, or 503 with ``on_error="deny"``) to
    send instead of running the view, or ``None`` to run it.  When it runs,
    ``headers(status)`` (or ``await aheaders(status)``) settles any charge
    waiting for the status (``deduct_when``) and returns the rate-limit
    headers to add to the view's response.
    """

    __slots__ = ("_outcomes", "response")

    def __init__(
        self, response: Optional[Response], outcomes: Sequence[Union[HeaderList, Deferred]] = ()
    ) -> None:
        self.response = response
        self._outcomes = outcomes

    def headers(self, status: int) -> HeaderList:
        """The headers for a response with ``status``; settles ``deduct_when`` charges.

        With several limits on a view, the first one's headers (the first
        that has any: an exempt request or a failed store has none).
        """
        shown: HeaderList = []
        for outcome in self._outcomes:
            headers = outcome.settle(status) if isinstance(outcome, Deferred) else outcome
            if not shown:
                shown = headers
        return shown

    async def aheaders(self, status: int) -> HeaderList:
        """``headers`` for asyncio (the store is awaited)."""
        shown: HeaderList = []
        for outcome in self._outcomes:
            headers = await outcome.asettle(status) if isinstance(outcome, Deferred) else outcome
            if not shown:
                shown = headers
        return shown


#: The decision of a view that nothing limits.
NOT_LIMITED = Decision(None)


class Integration:
    """The state of one framework integration: store, options, default and view guards.

    ``owner``: the integration's class name, for error messages.
    ``default``: a ``RateSpec`` or ``None`` (views without a limit of their
    own are not limited).  ``store``: a store object, a URL, or ``None``
    (``LIMITER_STORAGE_URL``, else a new ``MemoryStore``), resolved with
    ``limiter.urls.resolve_store``; ``asyncio=True`` makes a URL an async
    store.  ``clock``: for the limiters built here (``None``: the system
    clock, or the store's own time).  ``options``: docs/adapters.md, "Options";
    ``cost``, ``rules`` and ``deduct_when`` apply to the default limit only.
    Everything is checked when built: a misconfiguration fails at start-up.
    """

    def __init__(
        self,
        owner: str,
        *,
        default: Optional[RateSpec] = None,
        store: Any = None,
        clock: Optional[Clock] = None,
        asyncio: bool = False,
        **options: Unpack[GuardOptions],
    ) -> None:
        from limiter.urls import resolve_store  # only the integrations need URLs resolved

        check_options(owner, options)
        check_key_func(options.get("key_func"))
        check_deduct_when_signature(options.get("deduct_when"))
        self.owner = owner
        self.store = resolve_store(store, asyncio=asyncio)
        #: How start-up errors name the store (a URL's password redacted).
        self.shown = store_shown(store, self.store)
        self.clock = clock
        self.options = options
        self.enabled: bool = options.get("enabled", True)
        self._lock = threading.Lock()
        self._limiters: Dict[Tuple[str, str], RateLimiter] = {}
        self._counts: Dict[str, int] = {}
        self._guards: Dict[int, Tuple[RouteLimit, Guard]] = {}
        self.default: Optional[Guard] = None
        if default is not None:
            spec = self.spec(check_rate(default), "default")
            self.default = Guard(spec, Options(options, owner=owner, limiter=spec))
        else:
            # Checked once here, so a view's guard can only fail on its own options.
            Options(options, owner=owner)
            unused = sorted(_DEFAULT_ONLY.intersection(options))
            if unused:
                raise ValueError(
                    f"{', '.join(unused)} apply to the default limit only, and {owner} has "
                    "no default: pass default=..., or set them on each limit"
                )
        shared = {k: v for k, v in options.items() if k not in _DEFAULT_ONLY}
        self._shared: GuardOptions = shared  # type: ignore[assignment]

    # -- limiters ----------------------------------------------------------

    def limiter_for(self, rate: Union[str, RateLimiter], scope: str) -> RateLimiter:
        """The limiter of ``rate`` in ``scope``: a ``RateLimiter`` as is; a rate
        string gives one limiter per ``(scope, rate)``, named ``"<scope>|<rate>"``.

        ``TypeError`` for anything else; ``ValueError`` beyond
        ``MAX_RATES_PER_SCOPE`` distinct strings in one scope.
        """
        if isinstance(rate, RateLimiter):
            return rate
        if not isinstance(rate, str):
            raise TypeError(
                f"a limit function must return a rate string or a limiter.RateLimiter, "
                f"got {rate!r:.200}"
            )
        slot = (scope, rate)
        limiter = self._limiters.get(slot)
        if limiter is not None:
            return limiter
        with self._lock:
            limiter = self._limiters.get(slot)
            if limiter is None:
                count = self._counts.get(scope, 0)
                if count >= MAX_RATES_PER_SCOPE:
                    raise ValueError(
                        f"the limit function of {scope!r} returned more than "
                        f"{MAX_RATES_PER_SCOPE} distinct rates (now {rate!r:.100}); "
                        "return one of a few plans, not a rate per client"
                    )
                limiter = RateLimiter(
                    rate, store=self.store, clock=self.clock, name=f"{scope}|{rate}"
                )
                self._limiters[slot] = limiter
                self._counts[scope] = count + 1
        return limiter

    def spec(self, rate: RateSpec, scope: str) -> LimiterSpec:
        """``rate`` as a ``Guard`` takes it: a limiter, or a function returning one."""
        if isinstance(rate, (str, RateLimiter)):
            return self.limiter_for(rate, scope)
        limiter_for = self.limiter_for
        return then(rate, lambda chosen: limiter_for(chosen, scope))

    # -- guards ------------------------------------------------------------

    def guard(self, route: RouteLimit) -> Guard:
        """The ``Guard`` of ``route`` (built once per ``RouteLimit``)."""
        entry = self._guards.get(id(route))
        if entry is not None and entry[0] is route:
            return entry[1]
        options: GuardOptions = dict(self._shared)  # type: ignore[assignment]
        if route.key_func is not None:
            options["key_func"] = route.key_func
        options["cost"] = route.cost
        options["deduct_when"] = route.deduct_when
        guard = Guard(self.spec(route.rate, route.scope), Options(options, owner=self.owner))
        with self._lock:
            self._guards[id(route)] = (route, guard)
        return guard

    def guards(self, routes: Sequence[RouteLimit], method: str) -> List[Guard]:
        """The guards that apply to a request with ``method`` on a view limited
        by ``routes``: each route limit whose ``methods`` allow it; with no
        ``routes`` at all, the default (if any)."""
        if not routes:
            return [] if self.default is None else [self.default]
        method = method.upper()
        return [
            self.guard(route)
            for route in routes
            if route.methods is None or method in route.methods
        ]

    def decide(self, guards: Sequence[Guard], request: RequestInfo) -> Decision:
        """The ``Decision`` for ``request`` under ``guards`` (synchronous stores).

        Several guards are checked in order and the first refusal wins; a
        limit checked before it keeps its charge (as stacked decorators do in
        the peers), unless it has a ``deduct_when`` that the refusal's status
        does not match.  For all-or-nothing, put the limits in one rate
        string: ``"10/minute;100/hour"``.
        """
        if not self.enabled or not guards:
            return NOT_LIMITED
        outcomes: List[Union[HeaderList, Deferred]] = []
        for guard in guards:
            outcome = guard.decide(request)
            if isinstance(outcome, Response):
                # The view will not run: earlier deduct_when charges are settled
                # with the refusal's status (refunded unless it matches).
                Decision(None, outcomes).headers(outcome.status)
                return Decision(outcome)
            outcomes.append(outcome)
        return Decision(None, outcomes)

    async def adecide(self, guards: Sequence[Guard], request: RequestInfo) -> Decision:
        """``decide`` for asyncio: stores and ``async def`` callables are awaited."""
        if not self.enabled or not guards:
            return NOT_LIMITED
        outcomes: List[Union[HeaderList, Deferred]] = []
        for guard in guards:
            if guard.nonblocking:
                outcome = guard.decide(request)
            else:
                outcome = await guard.adecide(request)
            if isinstance(outcome, Response):
                await Decision(None, outcomes).aheaders(outcome.status)
                return Decision(outcome)
            outcomes.append(outcome)
        return Decision(None, outcomes)


def store_shown(given: Any, store: Any) -> str:
    """How start-up errors name ``store``: the URL it was built from, password
    redacted (``given``, else ``LIMITER_STORAGE_URL``), else its type."""
    import os

    from limiter.backends._url import redact_url

    if isinstance(given, str):
        return redact_url(given)
    if given is None and os.environ.get("LIMITER_STORAGE_URL"):
        return redact_url(os.environ["LIMITER_STORAGE_URL"])
    return type(store).__name__


def _unreachable(owner: str, shown: str, store: Any, exc: Exception) -> Optional[Exception]:
    """The error to raise for a store that failed its start-up ping, or ``None``
    (logged instead) when it has a fallback to answer meanwhile."""
    import logging

    if getattr(store, "fallback", None) is not None:
        logging.getLogger("limiter.adapters").warning(
            "%s: the store %s does not answer at start-up (%s); its fallback answers until it does",
            owner,
            shown,
            exc,
        )
        return None
    from limiter.store import StoreError

    return StoreError(
        f"{owner}: the store {shown} does not answer at start-up: {exc} (start it or fix "
        f"the URL; check_store=False starts without checking)"
    )


def check_store(owner: str, store: Any, shown: str) -> None:
    """Ping ``store`` if it can be pinged (``ping()``: Redis): a ``StoreError`` naming
    ``owner`` and the store (``shown``: password redacted) when it does not answer.

    A store with a ``fallback`` is only logged (WARNING, ``limiter.adapters``).
    Stores without ``ping`` (memory, SQLite) are not checked.
    """
    from limiter.store import StoreError

    ping = getattr(store, "ping", None)
    if not callable(ping):
        return
    try:
        ping()
    except StoreError as exc:
        error = _unreachable(owner, shown, store, exc)
        if error is not None:
            raise error from exc


async def acheck_store(owner: str, store: Any, shown: str) -> None:
    """``check_store`` for asyncio: ``await store.aping()`` (or ``ping()``)."""
    from limiter.store import StoreError

    aping = getattr(store, "aping", None)
    if not callable(aping):
        check_store(owner, store, shown)
        return
    try:
        await aping()
    except StoreError as exc:
        error = _unreachable(owner, shown, store, exc)
        if error is not None:
            raise error from exc


def view_scope(func: Callable[..., Any], name: Optional[str]) -> str:
    """The scope of a limit on ``func``: ``name``, else ``"<module>.<qualname>"``."""
    if name is not None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str or None, got {name!r}")
        return name
    module = getattr(func, "__module__", None) or "?"
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return f"{module}.{qualname or repr(func)}"
