"""FastAPI and Starlette integration: per-route limits as dependencies, and a default.

>>> from fastapi import Depends, FastAPI
>>> from limiter.integrations.fastapi import RateLimit
>>> app = FastAPI()
>>> rl = RateLimit(app, default="100/minute")
>>> @app.get("/search", dependencies=[Depends(rl.limit("5/minute"))])
... async def search() -> dict:
...     return {}

Design: docs/fastapi.md#how-it-works.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

from starlette.applications import Starlette
from starlette.exceptions import WebSocketException
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response as StarletteResponse
from starlette.routing import Host, Match, Mount, Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from limiter.adapters.asgi import (
    WEBSOCKET_CLOSE_CODE,
    encode_headers,
    limit_connection,
    request_info,
)
from limiter.clock import Clock
from limiter.http.guard import Guard, Held
from limiter.http.options import (
    IntegrationOptions,
    MessageLimits,
    WebSocketOptions,
    websocket_options,
)
from limiter.http.request import Cost, KeyFunc
from limiter.http.responses import Response
from limiter.http.rules import DeductWhen
from limiter.integrations import common
from limiter.integrations.common import F, Integration, Pending, RateSpec, RouteLimit, acheck_store

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

__all__ = ["RateLimit"]


class RateLimitOptions(IntegrationOptions, WebSocketOptions, total=False):
    """``RateLimit``'s ``**options``: the adapter options and those on WebSocket messages."""


#: A WebSocket's decisions holding slots, given back when the connection ends.
_HELD = "limiter.fastapi.held"
_MARK = "__limiter_rate_limit__"  # value: the RateLimit owning the dependency
_NO_MIDDLEWARE = "ran on an app without its middleware: call rl.init_app(app) (or RateLimit(app))"
_LIMIT = "__limiter_limit__"  # value: the ScopedLimit and the list of its one guard


class _Refusal(Exception):
    """Raised by a refusing limit dependency; carries the response to send."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def _starlette_response(response: Response, method: str) -> StarletteResponse:
    status, headers, body = response
    answer = StarletteResponse(b"" if method == "HEAD" else body, status_code=status)
    # Raw, so Starlette adds or merges nothing (HEAD keeps the full Content-Length,
    # as the ASGI middleware sends).
    answer.raw_headers = encode_headers(headers)
    return answer


class RateLimit:
    """Rate limits for a FastAPI (or Starlette) app: a default, and per-route dependencies.

    ``RateLimit(app, default="100/minute")``, or build it and call ``init_app``.
    ``default`` (a rate string, ``RateLimiter`` or function of the
    ``RequestInfo``, ``async def`` allowed; ``None``: none) covers every route
    without a ``limit`` that is not ``exempt``.  ``store``: a store, a URL or
    ``None`` (``LIMITER_STORAGE_URL``, else memory).  ``algorithm``: what rate
    strings become.  ``check_store``: startup fails with ``StoreError`` if a
    pingable store does not answer.  ``ws_*``: WebSocket message limits.
    ``TypeError``/``ValueError`` for a bad argument, here.
    Options: docs/adapters.md#options; guide: docs/fastapi.md.
    """

    def __init__(
        self,
        app: Optional[Starlette] = None,
        *,
        default: Optional[RateSpec] = None,
        store: Any = None,
        key_func: Optional[KeyFunc] = None,
        trusted_proxies: Union[str, Iterable[str]] = (),
        header_style: Optional[str] = "x",
        on_error: str = "allow",
        clock: Optional[Clock] = None,
        check_store: bool = True,
        algorithm: str = "token-bucket",
        **options: Unpack[RateLimitOptions],
    ) -> None:
        if not isinstance(check_store, bool):
            raise TypeError(f"check_store must be True or False, got {check_store!r}")
        self.check_store = check_store
        given, ws = websocket_options("RateLimit", options)
        given.update(key_func=key_func, trusted_proxies=trusted_proxies, on_error=on_error)
        given["header_style"] = header_style
        self.integration = Integration(
            "RateLimit",
            asyncio=True,  # a store URL gives an async store
            default=default,
            store=store,
            clock=clock,
            algorithm=algorithm,
            **given,
        )
        shadow = self.integration.options.get("mode") == "shadow"
        limits = MessageLimits(ws, store=self.integration.store, clock=clock, shadow=shadow)
        #: The limits on inbound WebSocket messages and the guard keying them (``None``: none).
        self.messages: Optional[Tuple[MessageLimits, Guard]] = None
        if limits.limiters:
            route = RouteLimit(limits.limiters[0], scope="websocket messages")
            self.messages = limits, self.integration.guard(route)
        # Per RateLimit, so two on one app keep separate records.
        self._key = f"limiter.fastapi.{id(self):x}"
        self._exempt: Set[Any] = set()
        self._apps: List[Starlette] = []
        if app is not None:
            self.init_app(app)

    def __repr__(self) -> str:
        default = self.integration.default
        return f"RateLimit(default={None if default is None else default.limiter!r})"

    def init_app(self, app: Starlette) -> None:
        """Install the refusals' exception handler and the middleware on ``app``, before
        it serves (else ``RuntimeError``, as the second time); docs/fastapi.md#how-it-works."""
        if not isinstance(app, Starlette):
            raise TypeError(f"app must be a FastAPI or Starlette application, got {app!r:.200}")
        if any(known is app for known in self._apps):
            raise RuntimeError(f"init_app was already called for {app!r:.200}")
        if app.middleware_stack is not None:  # Starlette would refuse the middleware
            raise RuntimeError(
                "init_app(app) must be called before the app serves its first request"
            )
        app.add_exception_handler(_Refusal, _refusal_handler)
        app.add_middleware(_RateLimitMiddleware, rate_limit=self, routed=app)
        self._apps.append(app)

    def limit(
        self,
        rate: RateSpec,
        *,
        key_func: Optional[KeyFunc] = None,
        cost: Cost = 1,
        name: Optional[str] = None,
        deduct_when: Optional[DeductWhen] = None,
        methods: Optional[Iterable[str]] = None,
        algorithm: Optional[str] = None,
    ) -> Callable[..., Any]:
        """A dependency limiting the routes that use it: ``Depends(rl.limit("5/minute"))``.

        Each call has its own buckets unless calls share a ``name``; ``methods``: ``None``
        limits all.  A refused WebSocket handshake is closed with 1013.
        ``TypeError``/``ValueError`` for a bad argument (docs/fastapi.md#ratelimit-and-limit).
        """
        bucket_scope = name
        if bucket_scope is None:  # until the routes name it: "<module>:<line>" of the call
            frame = sys._getframe(1)  # (unlike a counter, the same in every worker process)
            bucket_scope = f"{frame.f_globals.get('__name__', '?')}:{frame.f_lineno}"
        limit = common.ScopedLimit(
            self, rate, name, key_func, cost, methods, deduct_when, algorithm, bucket_scope
        )
        # Built now so a bad option fails at start-up; _name_limits replaces guards[0] once.
        guards = [self.integration.guard(limit.first)]
        rate_limit = _dependency(self.integration, guards, limit.first, self._key)
        rate_limit.__name__ = f"rate_limit[{bucket_scope}]"
        rate_limit.__qualname__ = (
            f"rate_limit[{bucket_scope}] is a dependency, not a decorator: write "
            "@app.get(path, dependencies=[Depends(rl.limit(...))]); rate_limit"
        )
        if sys.version_info < (3, 10):  # 3.9 names a function by its code in a TypeError
            rate_limit.__code__ = rate_limit.__code__.replace(co_name=rate_limit.__qualname__)
        setattr(rate_limit, _MARK, self)
        setattr(rate_limit, _LIMIT, (limit, guards))
        return rate_limit

    def exempt(self, endpoint: F) -> F:
        """Decorator: ``endpoint`` is not under the default (its own ``limit``s still apply)."""
        if not callable(endpoint):
            raise TypeError(f"exempt() takes a route's endpoint function, got {endpoint!r:.200}")
        self._exempt.add(endpoint)
        return endpoint

    def _covered(self, route: Any) -> bool:
        """True when ``route`` has a limit of this ``RateLimit`` or is exempt."""
        endpoint = getattr(route, "endpoint", None)
        if endpoint is None:
            endpoint = getattr(route, "app", None)  # a Mount: rl.exempt(sub_app)
        with contextlib.suppress(TypeError):  # an unhashable endpoint cannot have been marked
            if endpoint in self._exempt:
                return True
        calls = _limit_calls(getattr(route, "dependant", None))
        return any(getattr(call, _MARK, None) is self for call in calls)


def _dependency(
    integration: Integration, guards: List[Guard], route: RouteLimit, key: str
) -> Callable[..., Any]:
    """``route``'s dependency: decides with ``guards[0]``, records under ``scope[key]``."""
    enabled = integration.enabled
    allowed = route.methods

    # Keyword-only: slowapi-style @rl.limit(...) above a route then fails at
    # import, with the fix in the function's name.
    async def rate_limit(*, connection: HTTPConnection) -> None:
        scope = connection.scope
        outcomes: Optional[List[Pending]] = scope.get(key)
        if outcomes is None:
            if scope["type"] == "websocket":
                await _websocket(integration, guards, scope)
                return
            raise RuntimeError(f"a RateLimit.limit() dependency {_NO_MIDDLEWARE}")
        if not enabled or (allowed is not None and scope["method"] not in allowed):
            return
        guard = guards[0]
        outcome = (
            guard.decide(request_info(scope))
            if guard.nonblocking
            else await guard.adecide(request_info(scope))
        )
        if isinstance(outcome, Response):
            if outcomes:
                # The route will not run: settle earlier charges with the refusal's status.
                await common.asettle(outcomes, outcome.status)
                await common.arelease(outcomes)
                outcomes.clear()
            raise _Refusal(outcome)
        if outcome:  # []: exempt, allow-listed or a failed store
            outcomes.append(outcome)

    return rate_limit


async def _websocket(integration: Integration, guards: List[Guard], scope: Scope) -> None:
    # A handshake has no response for headers: refuse with 1013 before accept;
    # settle a deferred charge at once, as for an accepted connection (101).
    decision = await integration.adecide(guards, request_info(scope))
    if decision.response is not None:
        raise WebSocketException(code=WEBSOCKET_CLOSE_CODE, reason="rate limited")
    if decision.holds:  # for the life of the connection: the middleware gives it back
        held = scope.get(_HELD)
        if held is None:  # no middleware: nothing would give the slot back
            await decision.arelease()
            raise RuntimeError(f"a RateLimit.limit() dependency holding a slot {_NO_MIDDLEWARE}")
        held.append(decision)  # first: aheaders may raise
    await decision.aheaders(101)


async def _refusal_handler(request: Request, exc: Exception) -> StarletteResponse:
    assert isinstance(exc, _Refusal)
    return _starlette_response(exc.response, request.method)


def _reachable(root: Any, children: Callable[[Any], Iterable[Any]]) -> List[Any]:
    """``root`` and every node ``children`` leads to from it, each once (by identity)."""
    found: Dict[int, Any] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) not in found:
            found[id(node)] = node
            stack.extend(children(node))
    return list(found.values())


def _limit_calls(dependant: Any) -> List[Any]:
    """The ``call`` of each node of a FastAPI dependency tree, each node once."""
    if dependant is None:
        return []
    nodes = _reachable(dependant, lambda node: getattr(node, "dependencies", ()) or ())
    return [getattr(node, "call", None) for node in nodes]


def _flat_routes(routes: List[Any]) -> List[Any]:
    """``routes`` in the router's order, included routers (FastAPI 0.16x) opened."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI, or plain Starlette without FastAPI installed
        return list(routes)
    return list(iter_route_contexts(routes))


def _included(router: Any) -> List[Any]:
    """The routers included in ``router`` (FastAPI 0.16x keeps them apart)."""
    found = (getattr(route, "original_router", None) for route in getattr(router, "routes", ()))
    return [included for included in found if included is not None]


#: WebSocket route classes, and the ``matches`` that read only the type, path,
#: ``root_path`` and method (answers remembered: docs/fastapi.md#how-it-works).
_SOCKETS: Tuple[type, ...] = (WebSocketRoute,)
_BY_PATH: Tuple[Any, ...] = (Route.matches, Mount.matches, WebSocketRoute.matches)
try:
    from fastapi.routing import APIRoute, APIWebSocketRoute
except ImportError:  # plain Starlette
    pass
else:
    _SOCKETS += (APIWebSocketRoute,)
    _BY_PATH += (APIRoute.matches, APIWebSocketRoute.matches)


def _original(route: Any) -> Any:
    # FastAPI 0.16x lists an included route as a RouteContext: the route it came from.
    return getattr(route, "original_route", route)


#: How many answers are remembered (then all forgotten), and the longest path.
_CACHE_SIZE = 4096
_LONGEST_CACHED = 512
#: A route's bound ``matches`` and whether the default applies to what it matches.
_Row = Tuple[Callable[[Scope], Tuple[Match, Scope]], bool]


def _scan(table: List[_Row], scope: Scope) -> bool:
    """Whether the default applies: asked of each route as the router would."""
    for matches, applies in table:
        if matches(scope)[0] is Match.FULL:
            return applies
    return True  # no route: a 404 or 405 is under the default too


class _DefaultRoutes:
    """Which requests ``default`` applies to on one app (docs/fastapi.md#how-it-works)."""

    def __init__(self, rate_limit: RateLimit, app: Starlette) -> None:
        self.rate_limit = rate_limit
        self.app = app
        self.routers: List[Any] = []
        self.sizes: List[int] = []
        self.exempt = -1
        self.table: List[_Row] = []
        # (method, path, root_path, host) -> answer; None: a route reads more.
        self.cache: Optional[Dict[Tuple[Any, ...], bool]] = None
        self.by_host = False

    def applies(self, scope: Scope) -> bool:
        """Whether ``default`` applies to the http request ``scope``."""
        if self.exempt != len(self.rate_limit._exempt) or self.sizes != [
            len(router.routes) for router in self.routers
        ]:
            self.rebuild()
        table = self.table
        if not table:
            return True
        cache = self.cache
        path = scope["path"]
        if cache is None or len(path) > _LONGEST_CACHED:
            return _scan(table, scope)
        host = None
        if self.by_host:
            host = next((bytes(v) for n, v in scope.get("headers") or () if n == b"host"), None)
        slot = (scope["method"], path, scope.get("root_path"), host)
        answer = cache.get(slot)
        if answer is None:
            answer = _scan(table, scope)
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            cache[slot] = answer
        return answer

    def rebuild(self) -> None:
        router = self.app.router
        self.routers = _reachable(router, _included)
        self.sizes = [len(known.routes) for known in self.routers]
        self.exempt = len(self.rate_limit._exempt)
        covered = self.rate_limit._covered
        # route.matches bound once (FastAPI's RouteContext resolves it in __getattr__).
        rows = [
            (route, route.matches, isinstance(_original(route), _SOCKETS) or not covered(route))
            for route in _flat_routes(router.routes)
        ]
        last = max((i for i, (_, _, applies) in enumerate(rows) if not applies), default=-1)
        rows = rows[: last + 1]
        # What the routes' matches() read: a Host the host too, a custom one anything.
        reads = {getattr(type(_original(route)), "matches", None) for route, _, _ in rows}
        self.table = [(matches, applies) for _, matches, applies in rows]
        self.cache = None if reads.difference(_BY_PATH, (Host.matches,)) else {}
        self.by_host = Host.matches in reads


class _RateLimitMiddleware:
    """The ASGI side of ``RateLimit`` on one app (added by ``init_app``)."""

    def __init__(self, app: ASGIApp, *, rate_limit: RateLimit, routed: Starlette) -> None:
        self.app = app
        self.rate_limit = rate_limit
        self.routed = routed
        self.key = rate_limit._key
        integration = rate_limit.integration
        self.default = integration.default if integration.enabled else None
        self.routes = _DefaultRoutes(rate_limit, routed)
        self._named = False

    def _name_limits(self) -> None:
        """Name each unnamed ``limit()`` by its routes, sorted and joined by ``", "``:
        ``"GET /items/{id}"``, ``"WEBSOCKET /ws"``; stable across deploys and workers."""
        self._named = True
        owner = self.rate_limit
        found: Dict[Any, Set[str]] = {}  # limit() dependency -> its routes
        for route in _flat_routes(self.routed.router.routes):
            dependant = getattr(route, "dependant", None)
            path = getattr(route, "path", None)
            if dependant is None or not isinstance(path, str):
                continue
            methods = getattr(route, "methods", None)
            label = f"{','.join(sorted(methods)) if methods else 'WEBSOCKET'} {path}"
            for call in _limit_calls(dependant):
                if getattr(call, _MARK, None) is owner:
                    found.setdefault(call, set()).add(label)
        for call, labels in found.items():
            limit, guards = getattr(call, _LIMIT)
            if not limit.routes:  # unnamed, and not named by another app's routes yet
                guards[0] = owner.integration.guard(limit.route(", ".join(sorted(labels))))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._named:
            self._name_limits()
        if scope["type"] != "http":
            # Made here, not by the dependency: a middleware inside this one may pass
            # the app a copy of the scope, which shares this list.
            sockets = scope.setdefault(_HELD, []) if scope["type"] == "websocket" else []
            try:
                if scope["type"] == "lifespan" and self.rate_limit.check_store:
                    send = self._checked_startup(send)
                elif scope["type"] == "websocket" and self.rate_limit.messages is not None:
                    limits, guard = self.rate_limit.messages
                    await limit_connection(self.app, scope, receive, send, limits, guard)
                    return
                await self.app(scope, receive, send)
            finally:  # a WebSocket's slots are held for the life of the connection
                await common.arelease(sockets)
            return
        outcomes: List[Pending] = []
        scope[self.key] = outcomes
        default = self.default
        if default is not None and self.routes.applies(scope):
            request = request_info(scope)
            if default.nonblocking:
                outcome = default.decide(request)
            else:
                outcome = await default.adecide(request)
            if isinstance(outcome, Response):
                await _starlette_response(outcome, scope["method"])(scope, receive, send)
                return
            if outcome:
                outcomes.append(outcome)
        started = False
        held: List[Pending] = []  # slots held until the last body message

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            kind = message["type"]
            if kind == "http.response.start":
                started = True
                held.extend([o for o in outcomes if o.__class__ is Held])
                message = await _with_headers(message, outcomes)
            await send(message)
            if held and kind == "http.response.body" and not message.get("more_body", False):
                await common.arelease(held)

        try:
            await self.app(scope, receive, send_with_headers)
        except _Refusal as refusal:
            # The app's handler did not run (a sub-app mounted without init_app).
            if started:
                raise
            await _starlette_response(refusal.response, scope["method"])(scope, receive, send)
        finally:
            if held or outcomes:  # the app raised, returned early or the client left
                await common.arelease([*held, *outcomes])

    def _checked_startup(self, send: Send) -> Send:
        integration = self.rate_limit.integration

        async def checked(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                # Raised inside the lifespan: Starlette reports startup.failed.
                await acheck_store("RateLimit", integration.store, integration.shown)
            await send(message)

        return checked


async def _with_headers(message: Message, outcomes: List[Pending]) -> Message:
    """``http.response.start`` with the headers of the request's limits; settles them."""
    if not outcomes:
        return message
    first = outcomes[0]
    if len(outcomes) == 1 and isinstance(first, list):
        shown = first  # one limit, nothing to settle: no coroutine
    else:
        shown = await common.asettle(outcomes, message["status"])
    outcomes.clear()
    if not shown:
        return message
    return {**message, "headers": [*message.get("headers", ()), *encode_headers(shown)]}
