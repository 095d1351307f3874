"""ASGI (3.0) rate-limiting middleware; works as Starlette/FastAPI middleware.

>>> from limiter import RateLimiter
>>> from limiter.adapters.asgi import RateLimitMiddleware
>>> async def app(scope, receive, send):
...     pass
>>> app = RateLimitMiddleware(app, RateLimiter("10/second"))

With Starlette or FastAPI: ``app.add_middleware(RateLimitMiddleware, limiter=limiter)``.
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    List,
    MutableMapping,
    Optional,
    Tuple,
)

from limiter.http.guard import Deferred, Guard
from limiter.http.options import GuardOptions, Options
from limiter.http.request import HeaderView, RequestInfo
from limiter.http.rules import LimiterSpec

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

__all__ = ["RateLimitMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
RawHeaders = List[Tuple[bytes, bytes]]

#: Closes a limited WebSocket handshake without ``websocket.http.response``: "try again later".
WEBSOCKET_CLOSE_CODE = 1013


class _ScopeHeaders(HeaderView):
    # Decodes on demand: the default key reads no header at all.
    __slots__ = ("_raw",)

    def __init__(self, raw: Iterable[Any]) -> None:
        self._raw = raw

    def get_all(self, name: str) -> List[str]:
        lname = name.lower().encode("latin-1")
        # Servers lower-case names, but hand-built scopes may not.
        return [bytes(v).decode("latin-1") for k, v in self._raw if bytes(k).lower() == lname]


def _peer(scope: Scope) -> Optional[str]:
    client = scope.get("client")
    if not client:
        return None
    host = client[0]
    return host if isinstance(host, str) and host else None


def request_info(scope: Scope) -> RequestInfo:
    """The ``RequestInfo`` of an ``http`` or ``websocket`` scope (never mutated)."""
    return RequestInfo(
        scope.get("method", "GET"),
        scope.get("path", "/"),
        _ScopeHeaders(scope.get("headers") or ()),
        _peer(scope),
        scope,
    )


# Header names repeat on every response: encode each once.
_NAMES: Dict[str, bytes] = {}


def _encode(headers: Iterable[Any]) -> List[Tuple[bytes, bytes]]:
    names = _NAMES
    out = []
    for name, value in headers:
        raw = names.get(name)
        if raw is None:
            raw = name.encode("latin-1")
            if len(names) < 256:
                names[name] = raw
        out.append((raw, value.encode("latin-1")))
    return out


class RateLimitMiddleware:
    """Rate-limit an ASGI app: ``app = RateLimitMiddleware(app, limiter)``.

    ``limiter``: a ``RateLimiter`` (async stores are awaited) or a function,
    ``async def`` allowed, of the ``RequestInfo`` returning one. Allowed
    responses get the rate-limit headers; limited requests get the 429
    without calling the app, and a limited WebSocket handshake is refused
    (code 1013 if the server cannot send a response). Other scopes pass
    through. Raises ``TypeError``/``ValueError`` for a bad option, here; only
    a ``StoreError`` goes to ``on_error``, any other exception propagates.
    Options: docs/adapters.md#options; ASGI details: docs/adapters.md#asgi.
    """

    def __init__(
        self,
        app: ASGIApp,
        limiter: LimiterSpec,
        **options: Unpack[GuardOptions],
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be an ASGI callable, got {app!r}")
        self.app = app
        # Encoded: admitted requests' headers come as bytes, as ASGI sends them.
        self.guard = Guard(
            limiter, Options(options, owner="RateLimitMiddleware", encoded=True, limiter=limiter)
        )
        self._decide = self.guard.decider()
        self._adecide = self.guard.adecider()
        self._nonblocking = self.guard.nonblocking or not self.guard.enabled
        # Only when the store never waits: its decision is not awaited.
        self._decide_peer = self.guard.peer_decider() if self.guard.nonblocking else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await self._websocket(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        # Inline, a coroutine less (CONTRIBUTING.md, "Hot paths").
        decide_peer = self._decide_peer
        if decide_peer is not None:
            client = scope.get("client")
            peer = client[0] if client else None
            # Anything but a str is not looked up: request_info decides what it means.
            outcome = decide_peer(peer if peer.__class__ is str else None, scope, request_info)
        elif self._nonblocking:
            # Called, not awaited (CONTRIBUTING.md, "Hot paths").
            outcome = self._decide(request_info(scope))
        else:
            outcome = await self._adecide(request_info(scope))
        if isinstance(outcome, list):
            if not outcome:
                await self.app(scope, receive, send)
                return
            extra: RawHeaders = outcome  # type: ignore[assignment]  # an encoded guard's

            def send_with_headers(message: Message) -> Awaitable[None]:
                # A plain function returning send's awaitable: no coroutine of its own.
                if message["type"] == "http.response.start":
                    message = dict(message)
                    message["headers"] = [*message.get("headers", ()), *extra]
                return send(message)

            await self.app(scope, receive, send_with_headers)
            return
        if isinstance(outcome, Deferred):
            await self.app(scope, receive, _settling(send, outcome))
            return
        status, headers, body = outcome
        await send({"type": "http.response.start", "status": status, "headers": _encode(headers)})
        head = scope.get("method") == "HEAD"
        await send({"type": "http.response.body", "body": b"" if head else body})

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome = await self._adecide(request_info(scope))  # once per connection: no shortcut
        if isinstance(outcome, Deferred):
            # A handshake has no status: accept is success, a close before it (403) failure.
            send = _settling(send, outcome)
        if isinstance(outcome, (list, Deferred)):  # admitted
            await self.app(scope, receive, send)
            return
        status, headers, body = outcome
        # Answer websocket.connect, not before.
        message = await receive()
        if message["type"] != "websocket.connect":
            return  # the client went away already
        extensions: Dict[str, Any] = scope.get("extensions") or {}
        if "websocket.http.response" in extensions:
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": status,
                    "headers": _encode(headers),
                }
            )
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": WEBSOCKET_CLOSE_CODE})


def _settling(send: Send, deferred: Deferred) -> Send:
    """``send`` that settles ``deferred`` when the response starts and adds its headers."""

    async def send_settled(message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start" or kind == "websocket.http.response.start":
            extra: RawHeaders = await deferred.asettle(int(message.get("status", 0)))  # type: ignore[assignment]
            message = dict(message)
            message["headers"] = [*message.get("headers", ()), *extra]
        elif kind == "websocket.accept":
            await deferred.asettle(101)
        elif kind == "websocket.close":
            await deferred.asettle(403)
        await send(message)

    return send_settled
