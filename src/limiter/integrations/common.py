"""What the Flask, FastAPI and Django integrations share: ``RouteLimit``s turned into
the adapters' ``Guard``s, so decisions, bodies and headers are theirs (scopes and
limiter names: docs/concepts.md#keys)."""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from limiter.clock import Clock
from limiter.core.spec import ALGORITHMS
from limiter.http.guard import Deferred, Guard, Held
from limiter.http.options import GuardOptions, Options, check_options, route_cost
from limiter.http.request import Cost, KeyFunc, RequestInfo
from limiter.http.responses import HeaderList, Response
from limiter.http.rules import (
    DeductWhen,
    LimiterSpec,
    callable_name,
    check_deduct_when,
    check_key_func,
    method_set,
    takes,
    then,
)
from limiter.ratelimiter import RateLimiter
from limiter.store import StoreError, is_async_only

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

#: A rate string, a ``RateLimiter``, or a function of the request returning either.
RateSpec = Union[str, RateLimiter, Callable[[RequestInfo], Any]]

#: A view (or endpoint): what a limit decorator takes and returns as it is.
F = TypeVar("F", bound=Callable[..., Any])

#: Distinct rate strings one scope's limit function may return: a function
#: returning one per client would create limiters without bound.
MAX_RATES_PER_SCOPE = 256


_DEFAULT_ONLY = frozenset({"cost", "rules", "deduct_when"})


def check_algorithm(algorithm: object, param: str = "algorithm") -> Optional[str]:
    """``algorithm``, ``None`` or a key of ``ALGORITHMS`` (else ``TypeError``/``ValueError``)."""
    if algorithm is None:
        return None
    if not isinstance(algorithm, str):
        raise TypeError(f"{param} must be a str, got {algorithm!r:.100}")
    if algorithm not in ALGORITHMS:
        names = ", ".join(repr(name) for name in ALGORITHMS)
        raise ValueError(f"{param} must be one of {names}, got {algorithm!r:.100}")
    return algorithm


def check_rate(rate: object, algorithm: Optional[str] = None) -> RateSpec:
    """``rate`` checked as a ``RateSpec`` (a list of rate strings joined with ``;``):
    ``ValueError`` for a bad string or an ``algorithm`` beside a ``RateLimiter``, else
    ``TypeError``."""
    algorithm = check_algorithm(algorithm)
    if isinstance(rate, (list, tuple)) and rate and all(isinstance(r, str) for r in rate):
        rate = ";".join(rate)
    if isinstance(rate, str):
        RateLimiter(rate, algorithm=algorithm or "token-bucket")  # ValueError naming the text
        return rate
    if isinstance(rate, RateLimiter):
        if algorithm is not None:
            raise ValueError(
                f"algorithm={algorithm!r} applies to rate strings, and {rate!r:.100} is a "
                "RateLimiter: give it the algorithm, RateLimiter(rate, algorithm=...)"
            )
        return rate
    if callable(rate) and not isinstance(rate, type):
        if takes(rate) is False:
            # A view given as the rate: a bare @rl.limit or @ratelimit.
            raise TypeError(
                f"the rate comes first: {callable_name(rate)} is not a rate nor a function of the "
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
    """One limit on one view, its buckets under ``scope``; ``methods``: ``None`` for all;
    ``algorithm``: ``None`` for the integration's.  ``TypeError``/``ValueError`` if bad."""

    __slots__ = ("algorithm", "cost", "deduct_when", "key_func", "methods", "rate", "scope")

    def __init__(
        self,
        rate: RateSpec,
        *,
        scope: str,
        algorithm: Optional[str] = None,
        key_func: Optional[KeyFunc] = None,
        cost: Cost = 1,
        methods: Optional[Iterable[str]] = None,
        deduct_when: Optional[DeductWhen] = None,
    ) -> None:
        self.rate = check_rate(rate, algorithm)
        self.algorithm = algorithm
        if not isinstance(scope, str) or not scope:
            raise TypeError(f"name must be a non-empty str, got {scope!r}")
        check_key_func(key_func)
        check_deduct_when(deduct_when)
        if not callable(cost):  # a rate function's limiters are checked per request
            cost = route_cost(cost, self.rate, algorithm)
        self.scope = scope
        self.key_func = key_func
        self.cost = cost
        self.methods = method_set(methods)
        self.deduct_when = check_deduct_when(deduct_when)

    def __repr__(self) -> str:
        return f"RouteLimit({self.rate!r}, scope={self.scope!r})"


class ScopedLimit:
    """A declared limit (``rl.limit``, ``ratelimit``): a ``RouteLimit`` per scope, its
    arguments checked here so a typo fails at import; ``owner``: what declared it."""

    __slots__ = ("first", "name", "owner", "routes")

    def __init__(
        self,
        owner: Any,
        rate: RateSpec,
        name: Optional[str],
        key_func: Optional[KeyFunc],
        cost: Cost,
        methods: Optional[Iterable[str]],
        deduct_when: Optional[DeductWhen],
        algorithm: Optional[str],
        placeholder: str,
    ) -> None:
        self.first = RouteLimit(
            rate,
            scope=placeholder if name is None else name,
            algorithm=algorithm,
            key_func=key_func,
            cost=cost,
            methods=methods,
            deduct_when=deduct_when,
        )
        self.owner = owner
        self.name = name
        self.routes: Dict[str, RouteLimit] = {} if name is None else {name: self.first}

    def route(self, scope: str) -> RouteLimit:
        """The ``RouteLimit`` of ``scope`` (of ``name`` when given: it wins), built once
        per scope so its guard and buckets stay the same."""
        if self.name is not None:
            scope = self.name
        route = self.routes.get(scope)
        if route is None:  # a copy: the same options, checked once
            route = copy.copy(self.first)
            route.scope = scope
            route = self.routes.setdefault(scope, route)  # threads building it share one
        return route


#: Per limit, what its guard decided for an admitted request: headers or a pending charge.
Pending = Union[HeaderList, Deferred]


async def asettle(outcomes: Iterable[Pending], status: int) -> HeaderList:
    """Settle every pending charge with ``status``; return the first non-empty headers."""
    shown: HeaderList = []
    for outcome in outcomes:
        if isinstance(outcome, Deferred):
            nonblocking = outcome.guard.nonblocking
            outcome = outcome.settle(status) if nonblocking else await outcome.asettle(status)
        shown = shown or outcome
    return shown


async def arelease(outcomes: Iterable[object]) -> None:
    """Give back the slots ``outcomes`` hold (``Held``s and ``Decision``s; others hold none)."""
    for outcome in outcomes:
        if isinstance(outcome, (Held, Decision)):
            await outcome.arelease()


class Decision:
    """One request's decision: ``response`` to send instead of the view, or ``None``;
    then ``headers(status)`` to add, and ``release()`` once the response ended."""

    __slots__ = ("_outcomes", "response")

    def __init__(self, response: Optional[Response], outcomes: Sequence[Pending] = ()) -> None:
        self.response = response
        self._outcomes = outcomes

    def headers(self, status: int) -> HeaderList:
        """Settle charges with ``status``; the first non-empty headers (if it raises: the
        slots go back, no response will)."""
        shown: HeaderList = []
        try:
            for outcome in self._outcomes:
                headers = outcome.settle(status) if isinstance(outcome, Deferred) else outcome
                shown = shown or headers
        except BaseException:
            self.release()
            raise
        return shown

    async def aheaders(self, status: int) -> HeaderList:
        """``headers`` for asyncio (the store is awaited)."""
        try:
            return await asettle(self._outcomes, status)
        except BaseException:
            await self.arelease()
            raise

    @property
    def holds(self) -> bool:
        """True when a limit holds a slot until ``release()``."""
        return any(outcome.__class__ is Held for outcome in self._outcomes)

    @property
    def awaits(self) -> bool:
        """True when a slot held is in an async-only store: give it back with ``arelease``."""
        return any(o.__class__ is Held and is_async_only(o.limiter.store) for o in self._outcomes)

    def release(self) -> None:
        """Give back the slots held (once; later calls do nothing)."""
        for outcome in self._outcomes:
            if isinstance(outcome, Held):
                outcome.release()

    async def arelease(self) -> None:
        """``release`` for asyncio."""
        await arelease(self._outcomes)


#: The decision of a view that nothing limits.
NOT_LIMITED = Decision(None)


class Integration:
    """One framework integration's store, options, default guard and view guards.

    ``owner`` names it in errors; ``asyncio``: a store URL gives an async store;
    ``cost``, ``rules`` and ``deduct_when`` apply to the default only.
    ``TypeError``/``ValueError`` for a bad option (docs/adapters.md#options)."""

    def __init__(
        self,
        owner: str,
        *,
        default: Optional[RateSpec] = None,
        store: Any = None,
        clock: Optional[Clock] = None,
        asyncio: bool = False,
        algorithm: Optional[str] = None,
        **options: Unpack[GuardOptions],
    ) -> None:
        from limiter.urls import resolve_store

        self.algorithm: str = check_algorithm(algorithm) or "token-bucket"
        check_options(owner, options)
        check_key_func(options.get("key_func"))
        check_deduct_when(options.get("deduct_when"))
        self.owner = owner
        self.store = resolve_store(store, asyncio=asyncio)
        self.shown = store_shown(store, self.store)
        self.clock = clock
        self.options = options
        self.enabled: bool = options.get("enabled", True)
        self._lock = threading.Lock()
        self._limiters: Dict[Tuple[str, str, str], RateLimiter] = {}
        self._counts: Dict[str, int] = {}
        self._guards: Dict[RouteLimit, Guard] = {}  # by identity
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
        self._shared = {k: v for k, v in options.items() if k not in _DEFAULT_ONLY}

    def limiter_for(
        self, rate: Union[str, RateLimiter], scope: str, algorithm: Optional[str] = None
    ) -> RateLimiter:
        """``rate`` as is, or one limiter per ``(scope, rate string, algorithm)`` named
        ``"<scope>|<rate>"`` (plus ``"|<algorithm>"`` for a window).  ``TypeError`` for
        another type, ``ValueError`` beyond ``MAX_RATES_PER_SCOPE`` strings in a scope."""
        if isinstance(rate, RateLimiter):
            return rate
        if not isinstance(rate, str):
            raise TypeError(
                f"a limit function must return a rate string or a limiter.RateLimiter, "
                f"got {rate!r:.200}"
            )
        algorithm = algorithm or self.algorithm
        slot = (scope, rate, algorithm)
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
                name = f"{scope}|{rate}"
                if algorithm != "token-bucket":
                    name += f"|{algorithm}"
                limiter = RateLimiter(
                    rate, store=self.store, clock=self.clock, name=name, algorithm=algorithm
                )
                self._limiters[slot] = limiter
                self._counts[scope] = count + 1
        return limiter

    def spec(self, rate: RateSpec, scope: str, algorithm: Optional[str] = None) -> LimiterSpec:
        """``rate`` as a ``Guard`` takes it: a limiter, or a function returning one."""
        if isinstance(rate, (str, RateLimiter)):
            return self.limiter_for(rate, scope, algorithm)
        limiter_for = self.limiter_for
        return then(rate, lambda chosen: limiter_for(chosen, scope, algorithm))

    def guard(self, route: RouteLimit) -> Guard:
        """The ``Guard`` of ``route`` (built once per ``RouteLimit``)."""
        guard = self._guards.get(route)
        if guard is not None:
            return guard
        options = {**self._shared, "cost": route.cost, "deduct_when": route.deduct_when}
        if route.key_func is not None:
            options["key_func"] = route.key_func
        spec = self.spec(route.rate, route.scope, route.algorithm)
        guard = Guard(spec, Options(options, owner=self.owner))
        with self._lock:
            self._guards[route] = guard
        return guard

    def guards(self, routes: Sequence[RouteLimit], method: str) -> List[Guard]:
        """The guards of ``routes`` whose ``methods`` allow ``method``; no routes: the default."""
        if not routes:
            return [] if self.default is None else [self.default]
        method = method.upper()
        return [
            self.guard(route)
            for route in routes
            if route.methods is None or method in route.methods
        ]

    def decide(self, guards: Sequence[Guard], request: RequestInfo) -> Decision:
        """The ``Decision`` for ``request`` under ``guards`` in order: the first refusal wins;
        earlier limits keep their charge unless their ``deduct_when`` rejects its status."""
        if not self.enabled or not guards:
            return NOT_LIMITED
        outcomes: List[Pending] = []
        try:
            for guard in guards:
                outcome = guard.decide(request)
                if isinstance(outcome, Response):
                    refused = Decision(None, outcomes)
                    refused.headers(outcome.status)
                    refused.release()
                    return Decision(outcome)
                outcomes.append(outcome)
        except BaseException:  # a later limit failed: the earlier ones' slots go back
            Decision(None, outcomes).release()
            raise
        return Decision(None, outcomes)

    async def adecide(self, guards: Sequence[Guard], request: RequestInfo) -> Decision:
        """``decide`` for asyncio: stores and ``async def`` callables are awaited."""
        if not self.enabled or not guards:
            return NOT_LIMITED
        outcomes: List[Pending] = []
        try:
            for guard in guards:
                if guard.nonblocking:
                    outcome = guard.decide(request)
                else:
                    outcome = await guard.adecide(request)
                if isinstance(outcome, Response):
                    refused = Decision(None, outcomes)
                    await refused.aheaders(outcome.status)
                    await refused.arelease()
                    return Decision(outcome)
                outcomes.append(outcome)
        except BaseException:  # also a cancelled wait (max_wait): the earlier slots go back
            await arelease(outcomes)
            raise
        return Decision(None, outcomes)


def store_shown(given: Any, store: Any) -> str:
    """How errors name ``store``: its URL (``given``, else ``LIMITER_STORAGE_URL``)
    with the password redacted, else its type."""
    from limiter.backends._url import redact_url

    if isinstance(given, str):
        return redact_url(given)
    if given is None and os.environ.get("LIMITER_STORAGE_URL"):
        return redact_url(os.environ["LIMITER_STORAGE_URL"])
    return type(store).__name__


def _unreachable(owner: str, shown: str, store: Any, exc: StoreError) -> None:
    """Raise the error of a failed start-up ping, unless a fallback answers (logged)."""
    if getattr(store, "fallback", None) is None:
        raise StoreError(
            f"{owner}: the store {shown} does not answer at start-up: {exc} (start it or fix "
            f"the URL; check_store=False starts without checking)"
        ) from exc
    logging.getLogger("limiter.adapters").warning(
        "%s: the store %s does not answer at start-up (%s); its fallback answers until it does",
        owner,
        shown,
        exc,
    )


def check_store(owner: str, store: Any, shown: str) -> None:
    """Ping ``store`` if it can: ``StoreError`` naming ``owner`` and ``shown`` if it does not
    answer, only logged (``limiter.adapters``) for a store with a ``fallback``."""
    ping = getattr(store, "ping", None)
    try:
        if callable(ping):
            ping()
    except StoreError as exc:
        _unreachable(owner, shown, store, exc)


async def acheck_store(owner: str, store: Any, shown: str) -> None:
    """``check_store`` for asyncio: ``await store.aping()`` (or ``ping()``)."""
    aping = getattr(store, "aping", None)
    if not callable(aping):
        return check_store(owner, store, shown)
    try:
        await aping()
    except StoreError as exc:
        _unreachable(owner, shown, store, exc)


@contextlib.contextmanager
def reworded(prefix: str, suffix: str = "", error: Optional[type] = None) -> Iterator[None]:
    """A ``TypeError``/``ValueError`` of the block raised again as ``error`` (else its own
    type) saying ``prefix + message + suffix``: where a bad setting came from."""
    try:
        yield
    except (TypeError, ValueError) as exc:
        raise (error or type(exc))(f"{prefix}{exc}{suffix}") from exc
