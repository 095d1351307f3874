"""FastAPI and Starlette integration: per-route limits as dependencies, and a default.

>>> from fastapi import Depends, FastAPI
>>> from limiter.adapters.fastapi import RateLimit
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
* A small ASGI middleware, added by ``init_app``, puts a per-request record
  in the scope, adds the headers of the dependencies' decisions to the
  route's response on ``http.response.start`` (whatever the route returned:
  a model, a ``Response`` object, an ``HTTPException``) and settles
  ``deduct_when`` charges with the status.  The route itself never needs a
  ``request`` parameter.
* The same middleware applies ``default`` to requests whose route has no
  ``limit`` dependency of its own (anywhere in its dependency tree, router
  and app dependencies included) and is not ``exempt``; it finds the route
  by matching the app's routes, once per request, before the app runs, and
  remembers per route whether the default applies.  Requests that match no
  route (404, 405) are under the default too: scanning costs tokens.
  WebSocket handshakes are limited by their route's ``limit`` only.

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
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..clock import Clock
from ..request import Cost, KeyFunc
from ..rules import DeductWhen
from .asgi import WEBSOCKET_CLOSE_CODE, _encode, request_info
from .common import Guard, HeaderList, Response
from .integration import (
    NOT_LIMITED,
    Decision,
    Integration,
    IntegrationOptions,
    RateSpec,
    RouteLimit,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

__all__ = ["RateLimit"]

F = TypeVar("F", bound=Callable[..., Any])


#: Marks the dependency functions ``limit`` returns (the value: the ``RateLimit``).
_MARK = "__limiter_rate_limit__"


class _Refusal(Exception):
    """Raised by a limit dependency: carries the response to send instead of the route's."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


class _Record:
    """What one request's limit dependencies decided, kept in its scope."""

    __slots__ = ("decisions",)

    def __init__(self) -> None:
        self.decisions: List[Decision] = []


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
    (``limiter.adapters.common``); ``cost``, ``rules`` and ``deduct_when``
    apply to the default only.  Everything is checked here.
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
        **options: Unpack[IntegrationOptions],
    ) -> None:
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
        ``name`` share them (without ``name``, the call site names them).
        On a WebSocket route a refused handshake is closed with code 1013.
        """
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
        guards = [integration.guard(route)]  # built now: a bad option fails at start-up
        allowed = route.methods
        key = self._key

        async def rate_limit(connection: HTTPConnection) -> None:
            scope = connection.scope
            if scope["type"] == "websocket":
                await _websocket(integration, guards, scope)
                return
            record = scope.get(key)
            if record is None:
                raise RuntimeError(
                    "a RateLimit.limit() dependency ran on an app without its middleware: "
                    "call rl.init_app(app) (or RateLimit(app)) when you build the app"
                )
            if allowed is not None and scope["method"] not in allowed:
                return
            decision = await integration.adecide(guards, request_info(scope))
            if decision.response is not None:
                # An earlier limit's deferred charge is dropped with the request
                # (as Integration.adecide does for several guards).
                record.decisions.clear()
                raise _Refusal(decision.response)
            if decision is not NOT_LIMITED:
                record.decisions.append(decision)

        rate_limit.__qualname__ = rate_limit.__name__ = f"rate_limit[{bucket_scope}]"
        setattr(rate_limit, _MARK, self)
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


class _RateLimitMiddleware:
    """The ASGI side of ``RateLimit`` on one app (added by ``init_app``)."""

    def __init__(self, app: ASGIApp, *, rate_limit: RateLimit, routed: Starlette) -> None:
        self.app = app
        self.rate_limit = rate_limit
        self.routed = routed
        self.key = rate_limit._key
        integration = rate_limit.integration
        self.integration = integration
        default = integration.default
        self.default = [default] if default is not None and integration.enabled else []
        # (the app's route list length, [(route.matches, default applies)]),
        # rebuilt when routes are added.
        self._table: Tuple[int, List[Tuple[Any, bool]]] = (-1, [])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = _Record()
        scope[self.key] = record
        if self.default and self._default_applies(scope):
            decision = await self.integration.adecide(self.default, request_info(scope))
            if decision.response is not None:
                await _send_response(decision.response, scope, send)
                return
            if decision is not NOT_LIMITED:
                record.decisions.append(decision)
        decisions = record.decisions
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            if decisions and message["type"] == "http.response.start":
                status = int(message.get("status", 0))
                shown: Optional[HeaderList] = None
                for decision in decisions:  # settles every deferred charge
                    headers = await decision.aheaders(status)
                    if shown is None:
                        shown = headers  # several limits: the first one's headers
                decisions.clear()
                if shown:
                    message = dict(message)
                    message["headers"] = [*message.get("headers", ()), *_encode(shown)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except _Refusal as refusal:
            # Only if the app's exception handlers did not run (a sub-application
            # mounted without its own init_app): send the refusal here.
            if started:
                raise
            await _send_response(refusal.response, scope, send)

    def _default_applies(self, scope: Scope) -> bool:
        routes = self.routed.router.routes
        size, table = self._table
        if size != len(routes):
            # The bound matches() of each route (FastAPI's RouteContext resolves
            # it through __getattr__: once here, not per request).
            table = [
                (route.matches, not self.rate_limit._covered(route))
                for route in _flat_routes(routes)
            ]
            self._table = (len(routes), table)
        for matches, applies in table:
            if matches(scope)[0] is Match.FULL:
                return applies
        return True  # no route: a 404 or 405 is under the default too
