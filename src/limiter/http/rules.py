"""Per-route rules: which limiter, key and cost apply to a request.

A rule table is an ordered list; the first rule whose path and method match
wins, and a request no rule matches falls back to the middleware's own
limiter.  Matching sees only the method and path of a request, so one table
serves the WSGI, ASGI and ``http.server`` adapters alike.
"""

from __future__ import annotations

import inspect
import re
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from limiter.core.costs import validate_cost
from limiter.http.request import Cost, KeyFunc, RequestInfo
from limiter.ratelimiter import RateLimiter

#: ``deduct_when(status_code) -> bool``: whether a response's status is charged.
DeductWhen = Callable[[int], bool]
#: A limiter, or ``limiter_for(request) -> RateLimiter`` choosing one per
#: request (a plan, a tier); under asyncio it may be an ``async def``.
LimiterSpec = Union[
    RateLimiter, Callable[[RequestInfo], Union[RateLimiter, Awaitable[RateLimiter]]]
]


def is_async_callable(func: object) -> bool:
    """True for an ``async def`` function (or partial of one, or object whose ``__call__`` is)."""
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004 - the method itself, not callable()
    )


def check_deduct_when(deduct_when: object) -> Optional[DeductWhen]:
    """``deduct_when`` if it is ``None`` or a plain (not ``async``) callable; else ``TypeError``."""
    if deduct_when is None:
        return None
    if not callable(deduct_when) or is_async_callable(deduct_when):
        raise TypeError(
            f"deduct_when must be a plain function of the status code (int) -> bool, "
            f"got {deduct_when!r}"
        )
    return deduct_when


MODES = ("enforce", "shadow")


def check_mode(mode: object) -> str:
    """``mode`` if it is ``"enforce"`` or ``"shadow"``; else ``ValueError`` (``TypeError``)."""
    if mode not in MODES:
        error = ValueError if isinstance(mode, str) else TypeError
        raise error(f"mode must be 'enforce' or 'shadow', got {mode!r}")
    return mode


def then(func: Callable[[RequestInfo], Any], after: Callable[[Any], Any]) -> Callable[..., Any]:
    """``request -> after(func(request))``, an ``async def`` one when ``func`` is one.

    How a limiter function's answer is adjusted (made a shadow view, a rate
    string made a limiter) without changing whether the adapters await it.
    """
    if is_async_callable(func):

        async def achained(request: RequestInfo) -> Any:
            return after(await func(request))

        return achained

    def chained(request: RequestInfo) -> Any:
        return after(func(request))

    return chained


def _shadow_of(limiter: Any) -> Any:
    return limiter.shadowed() if isinstance(limiter, RateLimiter) else limiter


def shadowed(limiter: LimiterSpec) -> LimiterSpec:
    """``limiter``'s shadow view; for a function, one returning shadow views."""
    if isinstance(limiter, RateLimiter):
        return limiter.shadowed()
    return then(limiter, _shadow_of)


def check_limiter_spec(limiter: object) -> LimiterSpec:
    """``limiter`` if it is a ``RateLimiter`` or a function; else ``TypeError``."""
    if isinstance(limiter, RateLimiter) or (callable(limiter) and not isinstance(limiter, type)):
        return limiter
    raise TypeError(
        f"limiter must be a limiter.RateLimiter or a function of the request returning one, "
        f"got {limiter!r:.200}"
    )


_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def path_pattern(path: str) -> re.Pattern[str]:
    """The regular expression of a rule path (see ``Rule``), for ``fullmatch`` on a path."""
    if not isinstance(path, str):
        raise TypeError(f"path must be a str starting with '/' or '*', got {path!r}")
    if not (path == "*" or path.startswith("/")):
        raise ValueError(f"path must start with '/' or be '*', got {path!r}")
    if path == "*":
        return re.compile(r".*", re.DOTALL)
    prefix = path.endswith("/*")
    body = path[:-2] if prefix else path
    if "*" in body:
        raise ValueError(f"'*' may only end a rule path, as in '/api/*', got {path!r}")
    pattern, pos = "", 0
    for match in _PARAM.finditer(body):
        pattern += re.escape(body[pos : match.start()]) + r"[^/]+"
        pos = match.end()
    rest = body[pos:]
    if "{" in rest or "}" in rest:
        raise ValueError(f"rule path parameters look like '{{name}}', got {path!r}")
    pattern += re.escape(rest)
    # "/api/*" covers "/api" itself and everything below it, not "/apiary".
    return re.compile(pattern + (r"(?:/.*)?" if prefix else ""), re.DOTALL)


class Rule:
    """Limit requests to ``path`` (and ``methods``) with ``limiter``.

    ``path``: exact (``"/login"``), a prefix (``"/api/*"``: ``/api`` and all
    below it), with ``{param}`` segments (``"/users/{id}/export"``: one path
    segment each), or ``"*"`` for every path.  The query string never counts.
    ``methods``: e.g. ``["POST"]``; ``None`` matches every method; ``"GET"``
    also matches ``HEAD`` (answered by the same view).
    ``key_func``: how to key this route (``request -> str | None``); ``None``
    uses the middleware's ``key_func`` (by default the client IP).
    ``cost``: tokens per request, a number, a mapping of limit names to
    numbers (``{"requests": 1, "tokens": 50}``), or ``request ->`` either;
    ``None`` uses the middleware's cost (1).  A number is checked by
    ``limiter.core.costs.validate_cost`` (and kept as the ``float`` it returns),
    a mapping by the limiter's ``validate_cost`` (an unknown name is a
    ``ValueError`` here, at start-up).
    ``limiter`` may also be a function ``request -> RateLimiter`` that picks
    the limiter per request (a free and a paid plan keyed by API key): give
    each limiter it can return its own ``name`` on a shared store, so their
    buckets stay apart.
    ``deduct_when``: ``status_code -> bool``; charge this route's requests
    only when it holds for the response (docs/adapters.md, "Options"); ``None``
    uses the middleware's (by default every request is charged up front).
    ``mode``: ``"enforce"`` or ``"shadow"`` (decide and count, refuse
    nothing: docs/adapters.md, "Options"); ``None`` uses the middleware's.

    Arguments of a wrong type raise ``TypeError``, wrong values ``ValueError``.
    """

    __slots__ = (
        "_pattern",
        "cost",
        "deduct_when",
        "key_func",
        "limiter",
        "methods",
        "mode",
        "path",
    )

    def __init__(
        self,
        path: str,
        limiter: LimiterSpec,
        *,
        methods: Optional[Iterable[str]] = None,
        key_func: Optional[KeyFunc] = None,
        cost: Optional[Cost] = None,
        deduct_when: Optional[DeductWhen] = None,
        mode: Optional[str] = None,
    ) -> None:
        self._pattern = path_pattern(path)
        self.mode = None if mode is None else check_mode(mode)
        self.limiter: LimiterSpec = check_limiter_spec(limiter)
        self.deduct_when = check_deduct_when(deduct_when)
        self.methods: Optional[FrozenSet[str]] = method_set(methods)
        if key_func is not None and not callable(key_func):
            raise TypeError(f"key_func must be callable or None, got {key_func!r}")
        if isinstance(cost, Mapping):
            cost = checked_mapping(cost, [self.limiter])
        elif not (cost is None or callable(cost)):
            cost = validate_cost(cost)
        self.path = path
        self.key_func = key_func
        self.cost = cost

    def matches(self, method: str, path: str) -> bool:
        """Whether a request with this method and path (no query string) is this rule's."""
        if self.methods is not None and method.upper() not in self.methods:
            return False
        return self._pattern.fullmatch(path) is not None

    def __repr__(self) -> str:
        methods = "" if self.methods is None else f", methods={sorted(self.methods)}"
        return f"Rule({self.path!r}, {self.limiter!r}{methods})"


def checked_mapping(cost: Mapping[str, float], limiters: Iterable[object]) -> Dict[str, float]:
    """A fixed ``cost=`` mapping of limit names, checked against each limiter it goes to.

    Every ``RateLimiter`` among ``limiters`` checks it (``validate_cost``: an
    unknown name is a ``ValueError``, a bad value a ``TypeError`` or
    ``ValueError``, each prefixed with that limiter's name), now, at
    start-up; a limiter function's limiters are not known yet (the adapters
    check the mapping against the one it returns, per request).  A copy (a
    ``dict``) is returned: the mapping checked is the mapping charged,
    whatever becomes of the caller's.
    """
    for limiter in limiters:
        if isinstance(limiter, RateLimiter):
            try:
                limiter.validate_cost(cost)
            except (TypeError, ValueError) as error:
                raise type(error)(f"limiter {limiter.name!r}: {error}") from None
    return plain_mapping(cost)


def plain_mapping(cost: Mapping[str, float]) -> Dict[str, float]:
    """A copy of ``cost`` whose values are checked as a scalar ``cost=`` is.

    ``limiter.core.costs.validate_cost`` for each value, as for a number: a
    ``Refund`` (negative) is a ``ValueError`` inside a mapping too, and a
    ``Charge`` becomes the plain cost it would be alone, so no request can
    give tokens back or be admitted unconditionally through a mapping.
    """
    checked = {}
    for name, value in cost.items():
        try:
            checked[name] = validate_cost(value)
        except (TypeError, ValueError) as error:
            raise type(error)(f"cost of limit {name!r:.100}: {error}") from None
    return checked


def method_set(methods: Optional[Iterable[str]]) -> Optional[FrozenSet[str]]:
    """``methods`` upper-cased as a set, ``"HEAD"`` added to ``"GET"``; ``None`` stays ``None``.

    HEAD joins GET because the frameworks (and WSGI apps) answer a HEAD with
    the GET view: a limit on GET that left HEAD out would let a client have
    the work done unlimited.  Not a list of ``str``: ``TypeError``.
    """
    if methods is None:
        return None
    if isinstance(methods, Iterable) and not isinstance(methods, (str, bytes)):
        names = list(methods)
        if all(isinstance(name, str) for name in names):
            upper = {name.upper() for name in names}
            if "GET" in upper:
                upper.add("HEAD")
            return frozenset(upper)
    raise TypeError(f"methods must be None or a list of names like ['POST'], got {methods!r}")


def check_distinct_names(limiters: Sequence[Any]) -> None:
    """Raise ``ValueError`` if two different limiters would share keys in one store.

    Limiters with the same limits get the same default name; on one store their
    buckets would be one.  Give each a ``name=``.
    """
    seen: Dict[Tuple[int, str], RateLimiter] = {}
    for limiter in limiters:
        if not isinstance(limiter, RateLimiter):
            continue  # a function choosing per request: its limiters are not known yet
        slot = (id(limiter.store), limiter.name)
        other = seen.setdefault(slot, limiter)
        if other is not limiter:
            raise ValueError(
                f"two limiters share the store {limiter.store!r} and the name "
                f"{limiter.name!r}, so their buckets would collide; pass name=... to each"
            )
