"""Per-route rules (the first rule whose method and path match wins) and the
checks of the options the adapters share. Guide: docs/policies.md#per-route-rules.
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
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from limiter.core.concurrency import refuse_slot_cost
from limiter.core.costs import validate_cost
from limiter.http.request import Cost, KeyFunc, RequestInfo
from limiter.ratelimiter import RateLimiter

#: ``deduct_when(status_code) -> bool``: whether a response's status is charged.
DeductWhen = Callable[[int], bool]
#: A limiter, or ``limiter_for(request) -> RateLimiter`` (``async def`` under asyncio).
LimiterSpec = Union[
    RateLimiter, Callable[[RequestInfo], Union[RateLimiter, Awaitable[RateLimiter]]]
]
#: The values of ``mode``.
MODES = ("enforce", "shadow")


def is_async_callable(func: object) -> bool:
    """True for an ``async def`` function (or partial of one, or object whose ``__call__`` is)."""
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004 - the method itself, not callable()
    )


def optional_callable(name: str, func: object) -> Any:
    """``func`` if ``None`` or callable; else ``TypeError`` naming the option ``name``."""
    if func is not None and not callable(func):
        raise TypeError(f"{name} must be callable or None, got {func!r}")
    return func


def takes(func: object, count: int = 1) -> Optional[bool]:
    """Whether ``func`` takes ``count`` positional arguments; ``None`` if unreadable
    (builtins)."""
    try:
        signature = inspect.signature(func)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*[None] * count)
    except TypeError:
        return False
    return True


#: What a function of the request takes: ``key_func``, ``exempt``, ``cost``, ``limiter``.
REQUEST = "the request (a limiter.RequestInfo)"


def check_takes(name: str, func: object, usage: str = REQUEST, count: int = 1) -> None:
    """``TypeError`` when the callable ``func``, given for option ``name``, cannot take
    ``count`` positional arguments (``usage`` says which): found when configured, not
    at the request that would call it."""
    if callable(func) and not isinstance(func, type) and takes(func, count) is False:
        raise TypeError(f"{name} must take {usage}; {callable_name(func)} cannot")


def callable_name(func: object) -> str:
    """``func``'s qualified name with ``()``, for messages (its repr if it has none)."""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return f"{name}()" if isinstance(name, str) else f"{func!r:.100}"


def check_key_func(key_func: object) -> Optional[KeyFunc]:
    """``key_func`` if ``None`` or a callable that can take the request; else ``TypeError``
    (flask-limiter's key functions take no argument: found when configured, not per request).
    """
    optional_callable("key_func", key_func)
    if key_func is not None and takes(key_func) is False:
        raise TypeError(
            f"key_func must take {REQUEST} as its one argument, "
            f"as in key_func=lambda request: request.headers.get('X-API-Key'); "
            f"{callable_name(key_func)} cannot (flask-limiter's key functions take none)"
        )
    return key_func  # type: ignore[return-value]


def check_limiter(limiter: object) -> LimiterSpec:
    """``limiter`` if a ``RateLimiter`` or a function of the request (not a class, which
    would be built per request); else ``TypeError``."""
    if isinstance(limiter, type) or not (isinstance(limiter, RateLimiter) or callable(limiter)):
        raise TypeError(
            f"limiter must be a limiter.RateLimiter or a function of the request returning "
            f"one, got {limiter!r:.200}"
        )
    check_takes("limiter", limiter)
    return limiter


#: Parameter names betraying flask-limiter's ``deduct_when(response)``.
_RESPONSE_NAMES = frozenset({"response", "resp", "rv"})


def check_deduct_when(deduct_when: object) -> Optional[DeductWhen]:
    """``deduct_when`` if ``None`` or a plain (not ``async``) callable of one status code;
    else ``TypeError`` (also for a parameter named like flask-limiter's response)."""
    if deduct_when is None:
        return None
    plain = (
        "deduct_when must be a plain function of the status code (int) -> bool, "
        f"got {deduct_when!r}"
    )
    if not callable(deduct_when):
        raise TypeError(plain)
    fix = "deduct_when gets the status code (an int): deduct_when=lambda status: status >= 400"
    one = takes(deduct_when)
    if one is False:
        raise TypeError(f"{fix}; {callable_name(deduct_when)} cannot take one argument")
    if one:
        first = next(iter(inspect.signature(deduct_when).parameters.values()))
        if first.name in _RESPONSE_NAMES:
            raise TypeError(
                f"{fix}, not the response; {callable_name(deduct_when)} takes {first.name!r} "
                "(flask-limiter passes the response)"
            )
    if is_async_callable(deduct_when):
        raise TypeError(plain)
    return deduct_when


def one_of(name: str, value: object, choices: Tuple[str, ...], width: Optional[int] = None) -> str:
    """``value`` if one of ``choices``; else ``ValueError`` (``TypeError`` for a non-``str``)
    naming the option ``name`` and showing ``value``'s repr (cut to ``width`` characters).
    """
    if isinstance(value, str) and value in choices:
        return value
    error = ValueError if isinstance(value, str) else TypeError
    raise error(f"{name} must be {' or '.join(map(repr, choices))}, got {repr(value)[:width]}")


def then(func: Callable[[RequestInfo], Any], after: Callable[[Any], Any]) -> Callable[..., Any]:
    """``request -> after(func(request))``, an ``async def`` one when ``func`` is one."""
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


_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def normal_path(path: str) -> str:
    """``path`` as a server that serves files reads it: ``.`` and ``..`` segments resolved
    (RFC 3986 5.2.4; never above the root) and repeated slashes merged, so that
    ``/x/../private`` or ``//private`` meets the rules of ``/private``."""
    if "//" not in path and "/." not in path:
        return path
    kept: List[str] = []
    segments = path.split("/")
    for segment in segments[1:]:
        if segment == "..":
            if kept:
                kept.pop()
        elif segment not in ("", "."):
            kept.append(segment)
    last = segments[-1]
    slash = "/" if kept and last in ("", ".", "..") else ""
    return "/" + "/".join(kept) + slash


def path_pattern(path: str) -> re.Pattern[str]:
    """A rule path's regular expression, for ``fullmatch``; ``TypeError``/``ValueError`` if bad."""
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

    ``path``: exact (``"/login"``), a prefix (``"/api/*"``: ``/api`` and below),
    with ``{param}`` segments, or ``"*"``; the query string never counts.
    ``methods``: ``None`` matches all; ``"GET"`` also matches ``HEAD``.
    ``limiter``: a ``RateLimiter`` or a function of the request returning one.
    Options left ``None`` use the middleware's.  ``TypeError``/``ValueError`` for a
    wrong type or value.  docs/policies.md#per-route-rules.
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
        self.mode = None if mode is None else one_of("mode", mode, MODES)
        self.limiter = check_limiter(limiter)
        self.deduct_when = check_deduct_when(deduct_when)
        self.methods: Optional[FrozenSet[str]] = method_set(methods)
        self.key_func = check_key_func(key_func)
        check_takes("cost", cost)
        if not (cost is None or callable(cost)):
            cost = checked_cost(cost, [self.limiter])
        self.path = path
        self.cost = cost

    def matches(self, method: str, path: str) -> bool:
        """Whether a request with this method and path (no query string, as ``normal_path``
        leaves it: the adapters pass it so) is this rule's."""
        if self.methods is not None and method.upper() not in self.methods:
            return False
        return self._pattern.fullmatch(path) is not None

    def __repr__(self) -> str:
        methods = "" if self.methods is None else f", methods={sorted(self.methods)}"
        return f"Rule({self.path!r}, {self.limiter!r}{methods})"


def checked_cost(cost: object, limiters: Iterable[object]) -> Union[float, Dict[str, float]]:
    """A fixed ``cost=`` (a number or a mapping) checked against each ``RateLimiter``
    among ``limiters`` (functions skipped) as ``fits``, told at start-up: the value charged.
    """
    if isinstance(cost, Mapping):
        for limiter in limiters:
            if isinstance(limiter, RateLimiter):
                fits(limiter, cost)
        return plain_mapping(cost)
    checked = validate_cost(cost)
    for limiter in limiters:
        if isinstance(limiter, RateLimiter) and limiter.holds_slots:
            fits(limiter, cost)  # the value as written, in its error
    return checked


def fits(limiter: RateLimiter, cost: object, lead: str = "") -> None:
    """Raise what ``limiter.slot(key, cost)`` (``check`` without slots) would for
    ``cost``, prefixed with ``lead`` and the limiter's name.
    """
    try:
        shares = limiter.validate_cost(cost)  # type: ignore[arg-type]
        if limiter.holds_slots:
            refuse_slot_cost(limiter.limits, cost, shares)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{lead}limiter {limiter.name!r}: {error}") from None


def plain_mapping(cost: Mapping[str, float]) -> Dict[str, float]:
    """A copy of ``cost`` whose values pass ``validate_cost`` as a scalar ``cost=``
    does: no mapping gives tokens back or admits unconditionally.
    """
    checked = {}
    for name, value in cost.items():
        try:
            checked[name] = validate_cost(value)
        except (TypeError, ValueError) as error:
            raise type(error)(f"cost of limit {name!r:.100}: {error}") from None
    return checked


def method_set(methods: Optional[Iterable[str]]) -> Optional[FrozenSet[str]]:
    """``methods`` upper-cased as a set, ``"HEAD"`` added to ``"GET"`` (it runs the GET
    view); ``None`` stays ``None``; ``TypeError`` for anything but strings.
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
    """Raise ``ValueError`` if two different limiters share a store and a name."""
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
