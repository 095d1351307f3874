"""FastAPI and Starlette integration: per-route limits as dependencies, and a default.

>>> from fastapi import Depends, FastAPI
>>> from limiter.integrations.fastapi import RateLimit
>>> app = FastAPI()
>>> rl = RateLimit(app, default="100/minute")
>>> @app.get("/search", dependencies=[Depends(rl.limit("5/minute"))])
... async def search() -> dict:
...     return {}

How it fits together (``init_app``):

* ``limit(...)`` returns a dependency.  It decides with the shared
  ``Integration`` (the very decision of the ASGI middleware) and, when the
  request is limited, raises an internal exception carrying the ``Response``;
  the exception handler ``init_app`` registers sends it as is, so the client
  gets ``DENIED_BODY`` and the limit headers, not FastAPI's ``{"detail": ...}``.
  The handler runs inside the app: user middleware (CORS) sees a normal 429.
* A small ASGI middleware, added by ``init_app``, puts a per-request list in
  the scope, where the dependencies put what they decided; it adds the
  headers of those decisions to the route's response on
  ``http.response.start`` (whatever the route returned: a model, a
  ``Response`` object, an ``HTTPException``) and settles ``deduct_when``
  charges with the status.  A dependency that refuses settles the earlier
  ones' charges with the refusal's status first.  The route itself never
  needs a ``request`` parameter.
* The same middleware applies ``default`` to requests whose route has no
  ``limit`` dependency of its own (anywhere in its dependency tree, router
  and app dependencies included) and is not ``exempt``; it finds the route
  by matching the app's routes before the app runs, up to the last route
  the default does not apply to, and caches the answer per method, path and
  ``root_path`` (bounded: ``_CACHE_SIZE``).  Requests that match no route
  (404, 405) are under the default too: scanning costs tokens.  WebSocket
  handshakes are limited by their route's ``limit`` only.

FastAPI and Starlette are imported by this module only: ``import limiter``
never loads them.
"""

from __future__ import annotations

import sys
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Set,
    Tuple,
    TypeVar,
    Union,
)

from starlette.applications import Starlette
from starlette.exceptions import WebSocketException
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response as StarletteResponse
from starlette.routing import Host, Match, Mount, Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from limiter.adapters.asgi import WEBSOCKET_CLOSE_CODE, _encode, request_info
from limiter.clock import Clock
from limiter.http.guard import Deferred, Guard, HeaderList, Response
from limiter.http.request import Cost, KeyFunc
from limiter.http.rules import DeductWhen
from limiter.integrations.common import (
    Integration,
    IntegrationOptions,
    RateSpec,
    RouteLimit,
    acheck_store,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

__all__ = ["RateLimit"]

F = TypeVar("F", bound=Callable[..., Any])


#: Marks the dependency functions ``limit`` returns (the value: the ``RateLimit``).
_MARK = "__limiter_rate_limit__"
#: On those functions: ``bind(routes)`` names an unnamed limit's buckets by its routes.
_BIND = "__limiter_bind__"
#: Set by ``bind``: the routes that named the buckets (``"GET /search"``).
_BOUND = "__limiter_routes__"


class _Refusal(Exception):
    """Raised by a limit dependency: carries the response to send instead of the route's."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


#: What one request's limits decided, kept in its scope until the response
#: starts: the headers of each allowed limit, or its pending ``deduct_when`` charge.
_Pending = Union[HeaderList, Deferred]


async def _settle(outcomes: List[_Pending], status: int) -> HeaderList:
    """Settle every pending charge with ``status``; the first limit's headers that has any."""
    shown: HeaderList = []
    for outcome in outcomes:
        if isinstance(outcome, Deferred):
            if outcome.guard.nonblocking:
                headers = outcome.settle(status)
            else:
                headers = await outcome.asettle(status)
        else:
            headers = outcome
        if not shown:
            shown = headers
    return shown


def _starlette_response(response: Response, method: str) -> StarletteResponse:
    status, headers, body = response
    answer = StarletteResponse(b"" if method == "HEAD" else body, status_code=status)
    # The headers exactly as the Guard built them (Content-Length of the full
    # body on HEAD too, as the ASGI middleware sends): no header added or merged.
    answer.raw_headers = _encode(headers)
    return answer


async def _send_response(response: Response, scope: Scope, send: Send) -> None:
    status, headers, body = response
    await send({"type": "http.response.start", "status": status, "headers": _encode(headers)})
    head = scope.get("method") == "HEAD"
    await send({"type": "http.response.body", "body": b"" if head else body})


def _caller_scope(depth: int) -> str:
    # "<module>:<line>" of the limit() call: the same in every worker process
    # (a counter would depend on import order), so a shared store sees one
    # set of buckets per call site.
    frame = sys._getframe(depth + 1)
    return f"{frame.f_globals.get('__name__', '?')}:{frame.f_lineno}"


class RateLimit:
    """Rate limits for a FastAPI (or Starlette) app: a default, and per-route dependencies.

    ``RateLimit(app, default="100/minute")`` or ``rl = RateLimit(...)`` then
    ``rl.init_app(app)``.  ``default``: a rate string, a ``RateLimiter`` or a
    function of the ``RequestInfo`` returning one (``async def`` allowed),
    applied to every route without a ``limit`` of its own that is not
    ``exempt`` (one set of buckets shared by those routes); ``None``: such
    routes are not limited.  ``store``: a store object, a URL (an asyncio
    store is built from it) or ``None`` (``LIMITER_STORAGE_URL``, else
    memory).  ``clock``: for the limiters built here (tests: a
    ``ManualClock``).  The other options are ``GuardOptions``
    (``limiter.http.guard``); ``cost``, ``rules`` and ``deduct_when``
    apply to the default only.  Everything is checked here.

    ``check_store`` (``True``): when the app starts (the ASGI lifespan
    startup: uvicorn, ``with TestClient(app)``), a store that can be pinged
    (Redis) is pinged once, after the app's own startup; if it does not
    answer, startup fails with a ``StoreError`` naming the store (password
    redacted) and the server does not start.  A store with a ``fallback`` is
    only logged.
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
        **options: Unpack[IntegrationOptions],
    ) -> None:
        if not isinstance(check_store, bool):
            raise TypeError(f"check_store must be True or False, got {check_store!r}")
        #: Ping the store when the app starts (its lifespan startup).
        self.check_store = check_store
        given: Dict[str, Any] = dict(options)
        given.update(
            key_func=key_func,
            trusted_proxies=trusted_proxies,
            header_style=header_style,
            on_error=on_error,
        )
        self.integration = Integration(
            "RateLimit", default=default, store=store, clock=clock, asyncio=True, **given
        )
        # One scope key per RateLimit: two of them on one app keep separate records.
        self._key = f"limiter.fastapi.{id(self):x}"
        self._exempt: Set[Any] = set()
        self._apps: List[Starlette] = []
        if app is not None:
            self.init_app(app)

    def __repr__(self) -> str:
        default = self.integration.default
        return f"RateLimit(default={None if default is None else default.limiter!r})"

    # -- set-up ------------------------------------------------------------

    def init_app(self, app: Starlette) -> None:
        """Install on ``app``: the exception handler that sends refusals, and the middleware.

        Call it before the app serves (Starlette refuses middleware later).
        Middleware added after this call wraps this one (``add_middleware``
        puts the newest outside): add ``CORSMiddleware`` after it so that
        429s get CORS headers too.
        """
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

    # -- per-route limits --------------------------------------------------

    def limit(
        self,
        rate: RateSpec,
        *,
        key_func: Optional[KeyFunc] = None,
        cost: Cost = 1,
        name: Optional[str] = None,
        deduct_when: Optional[DeductWhen] = None,
        methods: Optional[Iterable[str]] = None,
    ) -> Callable[..., Any]:
        """A dependency limiting the routes that use it: ``Depends(rl.limit("5/minute"))``.

        ``rate``: a rate string, a ``RateLimiter`` or a function (``async def``
        allowed) of the ``RequestInfo`` returning one of those (plans).
        ``key_func`` (``None``: the ``RateLimit``'s), ``cost`` (a number or a
        function of the request), ``deduct_when`` (``status -> bool``: charge
        only such responses) and ``methods`` (``None``: all) apply to this
        limit only.  Each call has buckets of its own; calls with the same
        ``name`` share them (without ``name``, the routes using the dependency
        name them when the app starts: ``"GET /items/{id}"``, stable when
        lines are added above the route).
        On a WebSocket route a refused handshake is closed with code 1013.
        """
        # Without a name, the buckets are named by the routes that use this
        # dependency ("GET /search"), once the app first starts or serves
        # (_RateLimitMiddleware._name_limits); until then, and for a dependency
        # no route of the app uses, by the call site.
        bucket_scope = _caller_scope(1) if name is None else name
        route = RouteLimit(
            rate,
            scope=bucket_scope,
            key_func=key_func,
            cost=cost,
            methods=methods,
            deduct_when=deduct_when,
        )
        integration = self.integration
        guard = integration.guard(route)  # built now: a bad option fails at start-up
        guards = [guard]  # guards[0]: replaced once, when the routes name the buckets
        enabled = integration.enabled
        allowed = route.methods
        key = self._key

        def bind(routes: str) -> None:
            # The buckets of an unnamed limit: those of the routes using it.
            if name is not None or getattr(rate_limit, _BOUND, None) is not None:
                return
            named = RouteLimit(
                route.rate,
                scope=routes,
                key_func=key_func,
                cost=route.cost,
                methods=allowed,
                deduct_when=route.deduct_when,
            )
            guards[0] = integration.guard(named)
            setattr(rate_limit, _BOUND, routes)

        # Keyword-only (FastAPI passes dependencies by name): slowapi's style,
        # @rl.limit(...) above the route, calls it with the endpoint and fails
        # here, at import, with the fix in the function's name.
        async def rate_limit(*, connection: HTTPConnection) -> None:
            scope = connection.scope
            outcomes: Optional[List[_Pending]] = scope.get(key)
            if outcomes is None:
                if scope["type"] == "websocket":
                    await _websocket(integration, guards, scope)
                    return
                raise RuntimeError(
                    "a RateLimit.limit() dependency ran on an app without its middleware: "
                    "call rl.init_app(app) (or RateLimit(app)) when you build the app"
                )
            if not enabled or (allowed is not None and scope["method"] not in allowed):
                return
            # A memory store answers at once: no coroutine to build and await.
            guard = guards[0]
            outcome = (
                guard.decide(request_info(scope))
                if guard.nonblocking
                else await guard.adecide(request_info(scope))
            )
            if isinstance(outcome, Response):
                if outcomes:
                    # The route will not run: the earlier limits' deduct_when
                    # charges are settled with the refusal's status (given back
                    # unless it matches), and their headers are not sent.
                    await _settle(outcomes, outcome.status)
                    outcomes.clear()
                raise _Refusal(outcome)
            if outcome:  # [] : exempt, allow-listed or a failed store: nothing to add
                outcomes.append(outcome)

        rate_limit.__name__ = f"rate_limit[{bucket_scope}]"
        rate_limit.__qualname__ = (
            f"rate_limit[{bucket_scope}] is a dependency, not a decorator: write "
            "@app.get(path, dependencies=[Depends(rl.limit(...))]); rate_limit"
        )
        if sys.version_info < (3, 10):  # 3.9 names a function by its code in a TypeError
            rate_limit.__code__ = rate_limit.__code__.replace(co_name=rate_limit.__qualname__)
        setattr(rate_limit, _MARK, self)
        setattr(rate_limit, _BIND, bind)
        return rate_limit

    def exempt(self, endpoint: F) -> F:
        """Decorator: ``endpoint`` is not under the default (its own ``limit``s still apply)."""
        if not callable(endpoint):
            raise TypeError(f"exempt() takes a route's endpoint function, got {endpoint!r:.200}")
        self._exempt.add(endpoint)
        return endpoint

    # -- used by the middleware ------------------------------------------------

    def _covered(self, route: Any) -> bool:
        """True when ``route`` has a limit of this ``RateLimit`` or is exempt."""
        endpoint = getattr(route, "endpoint", None)
        if endpoint is None:
            endpoint = getattr(route, "app", None)  # a Mount: rl.exempt(sub_app)
        try:
            if endpoint is not None and endpoint in self._exempt:
                return True
        except TypeError:  # an unhashable endpoint cannot have been marked
            pass
        dependant = getattr(route, "dependant", None)
        seen: Set[int] = set()
        stack = [dependant] if dependant is not None else []
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if getattr(getattr(node, "call", None), _MARK, None) is self:
                return True
            stack.extend(getattr(node, "dependencies", ()) or ())
        return False


async def _websocket(integration: Integration, guards: List[Guard], scope: Scope) -> None:
    # A handshake has no response to carry headers: a refusal closes it before
    # accept with 1013 ("try again later", as the ASGI middleware does), and a
    # deferred charge is settled at once as for an accepted connection (101).
    decision = await integration.adecide(guards, request_info(scope))
    if decision.response is not None:
        raise WebSocketException(code=WEBSOCKET_CLOSE_CODE, reason="rate limited")
    await decision.aheaders(101)


async def _refusal_handler(request: Request, exc: Exception) -> StarletteResponse:
    assert isinstance(exc, _Refusal)
    return _starlette_response(exc.response, request.method)


def _flat_routes(routes: List[Any]) -> List[Any]:
    """``routes`` as the router tries them, included routers opened.

    FastAPI before 0.16x copies included routes into ``app.router.routes``;
    later versions keep an included router as one route and list its routes,
    with the dependencies the inclusion adds, through
    ``fastapi.routing.iter_route_contexts``.
    """
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI, or plain Starlette without FastAPI installed
        return list(routes)
    return list(iter_route_contexts(routes))


def _routers(router: Any) -> List[Any]:
    """``router`` and the routers included in it (FastAPI 0.16x keeps them apart)."""
    found: List[Any] = []
    stack = [router]
    while stack:
        node = stack.pop()
        if any(known is node for known in found):
            continue
        found.append(node)
        for route in getattr(node, "routes", ()):
            included = getattr(route, "original_router", None)
            if included is not None:
                stack.append(included)
    return found


def _state(routers: List[Any]) -> List[Tuple[int, int]]:
    # Changes when a route is added to any of them (FastAPI counts versions;
    # a plain Starlette router only grows).
    return [(len(r.routes), getattr(r, "_routes_version", 0)) for r in routers]


try:
    from starlette._utils import get_route_path
except ImportError:  # Starlette before 0.33: every route is asked through matches()
    get_route_path = None  # type: ignore[assignment]
try:
    from fastapi import routing as _fastapi_routing
except ImportError:  # plain Starlette
    _fastapi_routing = None  # type: ignore[assignment]

#: The Starlette and FastAPI classes whose matches() of an ``http`` scope is
#: ``path_regex`` on the route path, then ``methods`` (FULL if allowed).
_ROUTES: Tuple[Any, ...] = (Route,)
#: Those whose matches() of an ``http`` scope is ``path_regex`` alone.
_MOUNTS: Tuple[Any, ...] = (Mount,)
#: Those that never match an ``http`` scope.
_SOCKETS: Tuple[Any, ...] = (WebSocketRoute,)
if _fastapi_routing is not None:
    _ROUTES += (_fastapi_routing.APIRoute,)
    _SOCKETS += (_fastapi_routing.APIWebSocketRoute,)

#: A row of the default's table: (path_regex.match, methods, default applies,
#: matches), with ``path_regex.match`` None when the route's own matches() is
#: asked (a Host, a custom route).
_Row = Tuple[Optional[Callable[[str], Any]], Optional[Set[str]], bool, Any]
_PATH, _HOST, _OTHER = 0, 1, 2


def _classify(matches: Any) -> Tuple[int, Any]:
    """What the bound ``matches`` reads of an ``http`` scope: ``(_PATH, owner)``
    for a known route (``owner`` has ``path_regex``; ``None``: never matches),
    ``(_HOST, None)`` for a ``Host``, ``(_OTHER, None)`` for a custom route."""
    owner = getattr(matches, "__self__", None)
    func = getattr(type(owner), "matches", None)
    for kinds in (_ROUTES, _MOUNTS, _SOCKETS):
        if any(func is kind.matches for kind in kinds):
            return _PATH, None if kinds is _SOCKETS else owner
    if func is Host.matches:
        return _HOST, None
    context = getattr(_fastapi_routing, "_EffectiveRouteContext", None)
    if context is not None and type(owner) is context:
        # An included route: FastAPI matches an APIRoute on the prefixed path,
        # anything else through the prefixed Starlette route it built.
        starlette_route = getattr(owner, "starlette_route", None)
        if starlette_route is not None:
            return _classify(starlette_route.matches)
        original = getattr(owner, "original_route", None)
        api_route = _fastapi_routing.APIRoute
        if isinstance(original, api_route) and type(original).matches is api_route.matches:
            return _PATH, owner  # its own path_regex and methods
    return _OTHER, None  # asked on every request, never cached


def _row(matches: Any, applies: bool) -> Tuple[int, Optional[_Row]]:
    kind, owner = _classify(matches)
    if kind != _PATH or get_route_path is None:
        return kind, (None, None, applies, matches)
    if owner is None:
        return kind, None  # a WebSocket route: no http request reaches it
    regex = getattr(owner, "path_regex", None)
    if regex is None:
        return kind, (None, None, applies, matches)
    methods = None if isinstance(owner, _MOUNTS) else (getattr(owner, "methods", None) or None)
    return kind, (regex.match, methods, applies, None)


def _host(scope: Scope) -> Optional[bytes]:
    for name, value in scope.get("headers") or ():
        if name == b"host":
            return bytes(value)
    return None


#: How many answers ``_default_applies`` remembers; full, it starts afresh, so a
#: flood of made-up paths cannot grow memory.  Paths longer than
#: ``_LONGEST_CACHED`` are matched without the cache.
_CACHE_SIZE = 4096
_LONGEST_CACHED = 512


class _RateLimitMiddleware:
    """The ASGI side of ``RateLimit`` on one app (added by ``init_app``)."""

    def __init__(self, app: ASGIApp, *, rate_limit: RateLimit, routed: Starlette) -> None:
        self.app = app
        self.rate_limit = rate_limit
        self.routed = routed
        self.key = rate_limit._key
        integration = rate_limit.integration
        default = integration.default
        self.default: Optional[Guard] = (
            default if default is not None and integration.enabled else None
        )
        # The routers whose routes decide, their state when the table was built
        # (rebuilt when a route is added), and the table itself: (route.matches,
        # default applies) up to the last route the default does not apply to
        # (past it, the answer is "applies" whether a route matches or not).
        self._routers: List[Any] = []
        self._state: List[Tuple[int, int]] = []
        self._exempt = -1
        self._table: List[_Row] = []
        # (method, path, root_path[, host]) -> answer; None: a custom route
        # reads more of the request, so nothing is cached.
        self._cache: Optional[Dict[Tuple[Any, ...], bool]] = None
        self._by_host = False
        self._named = False

    def _name_limits(self) -> None:
        """Name each unnamed ``limit()`` of this ``RateLimit`` by the routes using it:
        ``"GET /items/{id}"`` (methods and path template; ``WEBSOCKET /ws``), several
        joined by ``", "`` in sorted order: stable across deploys and workers,
        whatever the lines above the route."""
        self._named = True
        owner = self.rate_limit
        found: Dict[int, Tuple[Any, Set[str]]] = {}
        for route in _flat_routes(self.routed.router.routes):
            dependant = getattr(route, "dependant", None)
            path = getattr(route, "path", None)
            if dependant is None or not isinstance(path, str):
                continue
            methods = getattr(route, "methods", None)
            label = f"{','.join(sorted(methods)) if methods else 'WEBSOCKET'} {path}"
            seen: Set[int] = set()
            stack = [dependant]
            while stack:
                node = stack.pop()
                if id(node) in seen:
                    continue
                seen.add(id(node))
                call = getattr(node, "call", None)
                if getattr(call, _MARK, None) is owner:
                    found.setdefault(id(call), (call, set()))[1].add(label)
                stack.extend(getattr(node, "dependencies", ()) or ())
        for call, labels in found.values():
            getattr(call, _BIND)(", ".join(sorted(labels)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._named:
            self._name_limits()
        if scope["type"] != "http":
            if scope["type"] == "lifespan" and self.rate_limit.check_store:
                await self.app(scope, receive, self._checked_startup(send))
                return
            await self.app(scope, receive, send)
            return
        outcomes: List[_Pending] = []
        scope[self.key] = outcomes
        default = self.default
        if default is not None and self._default_applies(scope):
            request = request_info(scope)
            if default.nonblocking:
                outcome = default.decide(request)
            else:
                outcome = await default.adecide(request)
            if isinstance(outcome, Response):
                await _send_response(outcome, scope, send)
                return
            if outcome:
                outcomes.append(outcome)
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if outcomes:
                    first = outcomes[0]
                    if len(outcomes) == 1 and isinstance(first, list):
                        shown = first  # one limit, nothing to settle: no coroutine
                    else:
                        shown = await _settle(outcomes, message["status"])
                    outcomes.clear()
                    if shown:
                        message = {
                            **message,
                            "headers": [*message.get("headers", ()), *_encode(shown)],
                        }
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except _Refusal as refusal:
            # Only if the app's exception handlers did not run (a sub-application
            # mounted without its own init_app): send the refusal here.
            if started:
                raise
            await _send_response(refusal.response, scope, send)

    def _checked_startup(self, send: Send) -> Send:
        integration = self.rate_limit.integration

        async def checked(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                # Raised inside the app's lifespan: Starlette reports
                # lifespan.startup.failed with it, and the server stops.
                await acheck_store("RateLimit", integration.store, integration.shown)
            await send(message)

        return checked

    def _default_applies(self, scope: Scope) -> bool:
        routers = self._routers
        if not routers or self._exempt != len(self.rate_limit._exempt):
            self._rebuild()
        else:
            state = self._state
            for i, router in enumerate(routers):
                routes = router.routes
                if state[i] != (len(routes), getattr(router, "_routes_version", 0)):
                    self._rebuild()
                    break
        table = self._table
        if not table:
            return True
        cache = self._cache
        if cache is None:
            return self._scan(table, scope)
        path = scope["path"]
        if len(path) > _LONGEST_CACHED:
            return self._scan(table, scope)
        if self._by_host:
            slot: Tuple[Any, ...] = (scope["method"], path, scope.get("root_path"), _host(scope))
        else:
            slot = (scope["method"], path, scope.get("root_path"))
        answer = cache.get(slot)
        if answer is None:
            answer = self._scan(table, scope)
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            cache[slot] = answer
        return answer

    @staticmethod
    def _scan(table: List[_Row], scope: Scope) -> bool:
        # As Starlette's router tries them, without building child scopes.
        path = get_route_path(scope) if get_route_path is not None else ""
        method = scope["method"]
        for match, methods, applies, matches in table:
            if match is not None:
                if match(path) is not None and (methods is None or method in methods):
                    return applies
            elif matches(scope)[0] is Match.FULL:
                return applies
        return True  # no route: a 404 or 405 is under the default too

    def _rebuild(self) -> None:
        router = self.routed.router
        routers = _routers(router)
        covered = self.rate_limit._covered
        # The bound matches() of each route (FastAPI's RouteContext resolves
        # it through __getattr__: once here, not per request).
        pairs = [(route.matches, not covered(route)) for route in _flat_routes(router.routes)]
        last = max((i for i, (_, applies) in enumerate(pairs) if not applies), default=-1)
        table: List[_Row] = []
        kinds: Set[int] = set()
        for matches, applies in pairs[: last + 1]:
            kind, row = _row(matches, applies)
            kinds.add(kind)
            if row is not None:
                table.append(row)
        self._table = table
        self._cache = None if _OTHER in kinds else {}
        self._by_host = _HOST in kinds
        self._state = _state(routers)
        self._exempt = len(self.rate_limit._exempt)
        self._routers = routers
