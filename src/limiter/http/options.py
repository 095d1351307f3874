"""Every adapter option, checked once: ``Options``, built by each adapter and integration.

Options: docs/adapters.md#options.
"""

from __future__ import annotations

import difflib
import functools
import math
from typing import (
    AbstractSet,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypedDict,
    Union,
)

from limiter.core.result import RateLimitResult
from limiter.core.spec import CostSpec
from limiter.http.headers import build_headers, build_raw_headers, validate_style, validate_units
from limiter.http.keys import AllowList, ClientIP
from limiter.http.request import Cost, KeyFunc, RequestInfo
from limiter.http.responses import HeaderList, OnLimited, default_on_limited, problem_on_limited
from limiter.http.rules import (
    MODES,
    DeductWhen,
    LimiterSpec,
    Rule,
    check_deduct_when,
    check_distinct_names,
    check_key_func,
    check_limiter,
    check_takes,
    checked_cost,
    is_async_callable,
    one_of,
    optional_callable,
    shadowed,
)
from limiter.ratelimiter import RateLimiter
from limiter.store import is_async_only
from limiter.waiting import Waits, refuse_max_wait_with_lockout

#: The ``cost`` option: a ``Cost``, a mapping of limit names to numbers, or a
#: function of the request returning either (``async def`` under asyncio).
CostOption = Union[Cost, CostSpec, Callable[[RequestInfo], Any]]


class IntegrationOptions(TypedDict, total=False):
    """The ``GuardOptions`` the integrations take as ``**options`` (the rest are named)."""

    proxy_header: Optional[str]
    ipv6_prefix: int
    exempt: Optional[Callable[[RequestInfo], bool]]
    cost: CostOption
    on_limited: Union[OnLimited, Literal["problem"], None]
    quota_units: Optional[Mapping[str, str]]
    rules: Sequence[Rule]
    deduct_when: Optional[DeductWhen]
    allow_list: Union[str, Iterable[str]]
    enabled: bool
    mode: str
    max_wait: Optional[float]
    max_queue: int


class GuardOptions(IntegrationOptions, total=False):
    """The keyword options of every adapter, all optional: see docs/adapters.md, "Options"."""

    key_func: Optional[KeyFunc]
    trusted_proxies: Union[str, Iterable[str]]
    header_style: Optional[str]
    on_error: str


_OPTION_NAMES = frozenset(GuardOptions.__annotations__)


def did_you_mean(name: object, known: AbstractSet[str]) -> str:
    """``" (did you mean 'x'?)"`` for the name in ``known`` closest to ``name``, or ``""``."""
    close = difflib.get_close_matches(str(name), sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_options(
    owner: str, options: Mapping[str, object], known: AbstractSet[str] = _OPTION_NAMES
) -> None:
    """Raise ``TypeError`` naming ``owner`` and a close match for an option not in ``known``."""
    for name in options:
        if name not in known:
            hint = did_you_mean(name, known)
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}{hint}")


class WebSocketOptions(TypedDict, total=False):
    """The options on inbound WebSocket messages (docs/adapters.md#websocket-messages)."""

    ws_messages_per_connection: Union[str, RateLimiter, None]
    ws_messages_per_key: Union[str, RateLimiter, None]
    ws_cost: str
    ws_on_limit: str
    ws_close_code: int


#: The names of ``WebSocketOptions``.
WEBSOCKET_OPTION_NAMES = frozenset(WebSocketOptions.__annotations__)
#: ``ws_close_code``'s values besides the application's own, 4000-4999:
#: 1008 "policy violation" (the default) and 1013 "try again later".
CLOSE_CODES = (1008, 1013)


def websocket_options(
    owner: str, options: Mapping[str, Any]
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``options`` split into ``GuardOptions`` and ``WebSocketOptions``; ``TypeError``
    naming ``owner`` and a close match for an unknown name.
    """
    check_options(owner, options, _OPTION_NAMES | WEBSOCKET_OPTION_NAMES)
    guard = {k: v for k, v in options.items() if k not in WEBSOCKET_OPTION_NAMES}
    return guard, {k: v for k, v in options.items() if k in WEBSOCKET_OPTION_NAMES}


def _close_code(code: object) -> int:
    if type(code) is not int:  # a bool is no code
        raise TypeError(f"ws_close_code must be an int, got {code!r:.100}")
    if code not in CLOSE_CODES and not 4000 <= code <= 4999:
        raise ValueError(f"ws_close_code must be 1008, 1013 or 4000-4999, got {code!r}")
    return code


def _message_limiter(
    name: str, rate: object, store: Any, clock: Any, shadow: bool
) -> Optional[RateLimiter]:
    if rate is None:
        return None
    if isinstance(rate, str):
        rate = RateLimiter(rate, store=store, clock=clock, name=f"{name}|{rate}")
    elif not isinstance(rate, RateLimiter):
        raise TypeError(
            f"{name} must be a rate string like '10/second', a limiter.RateLimiter or None, "
            f"got {rate!r:.100}"
        )
    if rate.holds_slots:  # each message is a check(), which cannot hold a slot
        raise TypeError(
            f"{name} must be a limiter without a Concurrency policy: a message cannot hold "
            f"a slot (the middleware's limiter holds one per connection), got {rate.name!r}"
        )
    return rate.shadowed() if shadow else rate


class MessageLimits:
    """``WebSocketOptions`` checked and built once; read-only.

    ``per_connection``/``per_key``: the limiters or ``None``.  A per-key rate string
    shares the handshake's store and clock; a per-connection one gets a
    ``MemoryStore`` of its own.  ``shadow``: their shadow views.  Raises
    ``TypeError``/``ValueError``.
    """

    __slots__ = ("by_bytes", "close_code", "drop", "limiters", "per_connection", "per_key")

    def __init__(
        self,
        options: Mapping[str, Any],
        *,
        store: Any = None,
        clock: Any = None,
        shadow: bool = False,
    ) -> None:
        get = options.get
        check_options("MessageLimits", options, WEBSOCKET_OPTION_NAMES)
        self.per_connection = _message_limiter(
            "ws_messages_per_connection", get("ws_messages_per_connection"), None, clock, shadow
        )
        self.per_key = _message_limiter(
            "ws_messages_per_key", get("ws_messages_per_key"), store, clock, shadow
        )
        self.limiters = tuple(lim for lim in (self.per_connection, self.per_key) if lim is not None)
        unused = sorted(set(options) - {"ws_messages_per_connection", "ws_messages_per_key"})
        if unused and not self.limiters:
            raise ValueError(
                f"{', '.join(unused)} given without a limit: add ws_messages_per_connection "
                "or ws_messages_per_key"
            )
        #: True: a message costs its payload's length in bytes (UTF-8 for text), else 1.
        self.by_bytes = (
            one_of("ws_cost", get("ws_cost", "message"), ("message", "bytes"), 100) == "bytes"
        )
        #: True: a refused message is dropped with a notice; False: the connection is closed.
        self.drop = (
            one_of("ws_on_limit", get("ws_on_limit", "close"), ("close", "drop"), 100) == "drop"
        )
        self.close_code = _close_code(get("ws_close_code", CLOSE_CODES[0]))
        if self.drop and "ws_close_code" in options:
            raise ValueError("ws_close_code applies to ws_on_limit='close', not 'drop'")

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, name):
            raise AttributeError(f"MessageLimits are read-only: {name} is set when they are built")
        object.__setattr__(self, name, value)


def _rules(rules: object) -> Tuple[Rule, ...]:
    if isinstance(rules, Iterable) and not isinstance(rules, (str, bytes, Rule)):
        table = tuple(rules)
        if all(isinstance(rule, Rule) for rule in table):
            return table
    raise TypeError(f"rules must be a list of limiter.Rule, got {rules!r:.200}")


def _header_style(style: object) -> Optional[str]:
    if style is not None and not isinstance(style, str):
        raise TypeError(f"header_style must be one of 'x', 'draft', 'both' or None, got {style!r}")
    return validate_style(style)


def _on_limited(on_limited: object) -> OnLimited:
    if on_limited == "problem":  # RFC 9457 problem details (docs/headers.md)
        return problem_on_limited
    if isinstance(on_limited, str):
        raise ValueError(
            f"on_limited must be a function, None or 'problem' (an RFC 9457 body), "
            f"got {on_limited!r:.100}"
        )
    if is_async_callable(optional_callable("on_limited", on_limited)):
        raise TypeError(f"on_limited must be a plain function, got {on_limited!r}")
    check_takes("on_limited", on_limited, "(request, result, headers)", 3)
    return default_on_limited if on_limited is None else on_limited  # type: ignore[return-value]


def _check_unit_names(units: Mapping[str, str], limiters: Sequence[object]) -> None:
    """Refuse a ``quota_units`` name that is no limit of ``limiters`` (functions skipped)."""
    known_limiters = [lim for lim in limiters if isinstance(lim, RateLimiter)]
    if not units or len(known_limiters) < len(limiters):
        return
    known = {limit.name for lim in known_limiters for limit in lim.limits}
    for name in units:
        if name not in known:
            raise ValueError(
                f"quota_units names no limit of this limiter: {name!r} "
                f"(its limits: {', '.join(map(repr, sorted(known)))})"
            )


#: ``max_queue``'s default: requests that may wait at once per adapter and process.
MAX_QUEUE = 100


def _waits(
    max_wait: object, max_queue: object, limiters: Sequence[object], owner: str
) -> Optional[Waits]:
    """The ``Waits`` of ``max_wait`` (``None``: refuse at once, else finite seconds > 0)
    and ``max_queue`` (an ``int`` >= 1); a limiter with a lockout is a ``TypeError``
    naming ``owner``'s ``max_wait``.
    """
    if max_wait is None:
        if max_queue is not None:
            raise ValueError("max_queue given without max_wait: add max_wait=<seconds>")
        return None
    if isinstance(max_wait, bool) or not isinstance(max_wait, (int, float)):
        raise TypeError(f"max_wait must be None or a number of seconds > 0, got {max_wait!r:.100}")
    if not (0 < max_wait < math.inf):  # also NaN
        raise ValueError(
            f"max_wait must be None (refuse at once) or a finite number of seconds > 0, "
            f"got {max_wait!r}"
        )
    queue = MAX_QUEUE if max_queue is None else max_queue
    if type(queue) is not int:  # a bool is no count
        raise TypeError(f"max_queue must be an int >= 1, got {queue!r:.100}")
    if queue < 1:
        raise ValueError(f"max_queue must be an int >= 1, got {queue!r}")
    waits = Waits(float(max_wait), queue, where=f"{owner}(max_wait={max_wait!r})")
    for limiter in limiters:
        if isinstance(limiter, RateLimiter):
            refuse_max_wait_with_lockout(limiter, waits.where)
    return waits


class Settings:
    """The options a ``Guard`` reads per request: ``Options`` sets them, a ``Guard``
    copies them (``COPIED``), one attribute lookup per use instead of two.
    """

    __slots__ = ()

    allow_list: Optional[AllowList]  # None when empty: it costs nothing per request
    #: The headers of an admitted request (``bytes`` pairs when ``encoded``).
    build: Callable[[RateLimitResult, float, Optional[str]], HeaderList]
    #: The headers handed to ``on_limited`` (``str`` pairs).
    build_text: Callable[[RateLimitResult, float, Optional[str]], HeaderList]
    client_ip: ClientIP
    cost: CostSpec
    cost_func: Optional[Callable[[RequestInfo], Any]]
    deduct_when: Optional[DeductWhen]
    enabled: bool
    exempt: Optional[Callable[[RequestInfo], Any]]
    header_style: Optional[str]
    key_func: Optional[KeyFunc]
    mode: str
    on_error: str
    on_limited: OnLimited
    rule_limiters: Tuple[LimiterSpec, ...]  # the rules' limiters, shadowed in shadow mode
    rules: Tuple[Rule, ...]
    waits: Optional[Waits]


#: The names of ``Settings``.
COPIED = tuple(Settings.__annotations__)


class Options(Settings):
    """The adapter options (docs/adapters.md#options), checked and precomputed once; read-only.

    ``owner`` names the caller in errors; ``encoded``: headers as latin-1 ``bytes``
    pairs (ASGI); ``limiter``: the adapter's, to check a ``cost`` mapping against;
    ``sync``: a synchronous adapter's name (refuses ``async def`` callables and
    async-only stores).  Raises ``TypeError``/``ValueError``.
    """

    __slots__ = (*COPIED, "is_async", "sync")

    def __init__(
        self,
        options: Optional[Mapping[str, Any]] = None,
        *,
        owner: str = "Options",
        encoded: bool = False,
        sync: Optional[str] = None,
        limiter: Optional[LimiterSpec] = None,
    ) -> None:
        get = (options or {}).get
        check_options(owner, options or {})
        self.rules = _rules(get("rules", ()))
        own = [rule.limiter for rule in self.rules]
        limiters = own if limiter is None else [limiter, *own]
        check_distinct_names(limiters)
        self.key_func = check_key_func(get("key_func"))
        self.exempt = optional_callable("exempt", get("exempt"))
        check_takes("exempt", self.exempt)
        self.on_limited = _on_limited(get("on_limited"))
        self.on_error = one_of("on_error", get("on_error", "allow"), ("allow", "deny"))
        self.header_style = _header_style(get("header_style", "x"))
        self.enabled = get("enabled", True)
        if not isinstance(self.enabled, bool):
            raise TypeError(f"enabled must be True or False, got {self.enabled!r}")
        self.mode = one_of("mode", get("mode", "enforce"), MODES)
        self.rule_limiters = tuple(
            shadowed(rule.limiter) if (rule.mode or self.mode) == "shadow" else rule.limiter
            for rule in self.rules
        )
        self.client_ip = ClientIP(
            get("trusted_proxies", ()), get("ipv6_prefix", 64), header=get("proxy_header")
        )
        allow_list = AllowList(get("allow_list", ()), self.client_ip)
        self.allow_list = allow_list if allow_list else None
        self.deduct_when = check_deduct_when(get("deduct_when"))
        units = validate_units(get("quota_units"))
        if limiter is not None:
            _check_unit_names(units, limiters)
        raw: Any = build_raw_headers
        text: Any = build_headers
        if units:  # bound once; without units the builders are called bare (hot path)
            raw = functools.partial(build_raw_headers, units=units)
            text = functools.partial(build_headers, units=units)
        self.build = raw if encoded else text
        self.build_text = text
        cost = get("cost", 1)
        check_takes("cost", cost)
        self.cost_func = cost if callable(cost) else None
        # The limiters charged this cost: the adapter's and the rules' without their own.
        takers = [] if limiter is None else [limiter]
        takers += [rule.limiter for rule in self.rules if rule.cost is None]
        self.cost = 1 if callable(cost) else checked_cost(cost, takers)
        self.waits = _waits(get("max_wait"), get("max_queue"), limiters, owner)
        funcs: List[object] = [self.key_func, self.exempt, self.cost_func]
        for rule in self.rules:
            funcs += [rule.key_func, rule.cost, rule.limiter]
        #: True when a request callable (the rules' too) is ``async def``.
        self.is_async: bool = any(is_async_callable(func) for func in funcs)
        self.sync = sync
        if sync is not None:
            refuse_async(sync, [lim for lim in own if isinstance(lim, RateLimiter)], self.is_async)

    def checked_limiter(self, limiter: object) -> LimiterSpec:
        """``limiter`` checked against these options (built with it or not); its shadow
        view in shadow mode.  ``TypeError``/``ValueError``.
        """
        limiter = check_limiter(limiter)
        check_distinct_names([limiter, *(rule.limiter for rule in self.rules)])
        checked_cost(self.cost, [limiter])
        if self.waits is not None and isinstance(limiter, RateLimiter):
            refuse_max_wait_with_lockout(limiter, self.waits.where)
        return shadowed(limiter) if self.mode == "shadow" else limiter

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, name):
            raise AttributeError(f"Options are read-only: {name} is set when they are built")
        object.__setattr__(self, name, value)


def route_cost(cost: Any, rate: object, algorithm: Optional[str]) -> Any:
    """An integration's fixed view ``cost`` (a number or mapping), checked at start-up
    against ``rate`` (a rate string's shape, a ``RateLimiter``; a function: skipped):
    the mapping copy charged, else ``cost`` itself (``TypeError``/``ValueError``).
    """
    mapping = isinstance(cost, Mapping)
    if mapping and isinstance(rate, str):  # a typo in a name fails at start-up
        rate = RateLimiter(rate, algorithm=algorithm or "token-bucket")
    # A number is checked too: a limiter of slots refuses any cost but 1.
    checked = checked_cost(cost, [rate])
    return checked if mapping else cost


def refuse_async(adapter: str, limiters: Iterable[RateLimiter], is_async: bool) -> None:
    """Refuse what a synchronous ``adapter`` cannot run: ``ValueError`` for an async-only
    store, ``TypeError`` when ``is_async``.
    """
    for limiter in limiters:
        if is_async_only(limiter.store):
            raise ValueError(
                f"{adapter} needs a synchronous store; {limiter.store!r} is async only"
            )
    if is_async:
        raise TypeError(
            f"{adapter} cannot await: key_func, exempt, cost and limiter functions "
            f"must be plain functions here (async def ones work with the ASGI adapter)"
        )
