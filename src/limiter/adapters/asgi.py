"""ASGI (3.0) rate-limiting middleware; works as Starlette/FastAPI middleware.

>>> from limiter import RateLimiter
>>> from limiter.adapters.asgi import RateLimitMiddleware
>>> async def app(scope, receive, send):
...     pass
>>> app = RateLimitMiddleware(app, RateLimiter("10/second"))

With Starlette or FastAPI: ``app.add_middleware(RateLimitMiddleware, limiter=limiter)``.
Inbound WebSocket messages: ``ws_messages_per_connection=`` and the other
``WebSocketOptions`` (docs/adapters.md#websocket-messages).
"""

from __future__ import annotations

import contextlib
import json
import math
import uuid
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

from limiter.core.result import RateLimitResult
from limiter.http.guard import Deferred, Guard, Held, Verdict
from limiter.http.options import (
    GuardOptions,
    MessageLimits,
    Options,
    WebSocketOptions,
    websocket_options,
)
from limiter.http.request import HeaderView, RequestInfo
from limiter.http.rules import LimiterSpec
from limiter.ratelimiter import RateLimiter
from limiter.store import StoreError

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


class ASGIOptions(GuardOptions, WebSocketOptions, total=False):
    """The ASGI adapter's keyword options: every adapter's, and those on WebSocket messages."""


class _ScopeHeaders(HeaderView):
    # Decodes on demand: the default key reads no header at all.
    __slots__ = ("_raw",)

    def __init__(self, raw: Iterable[Any]) -> None:
        self._raw = raw

    def get_all(self, name: str) -> List[str]:
        lname = name.lower().encode("latin-1")
        # Servers lower-case names, but hand-built scopes may not.
        return [bytes(v).decode("latin-1") for k, v in self._raw if bytes(k).lower() == lname]


def request_info(scope: Scope) -> RequestInfo:
    """The ``RequestInfo`` of an ``http`` or ``websocket`` scope (never mutated)."""
    client = scope.get("client")
    peer = client[0] if client else None
    return RequestInfo(
        scope.get("method", "GET"),
        scope.get("path", "/"),
        _ScopeHeaders(scope.get("headers") or ()),
        peer if isinstance(peer, str) and peer else None,
        scope,
    )


# Header names repeat on every refusal: each is encoded once (CONTRIBUTING, hot paths).
_NAMES: Dict[str, bytes] = {}


def encode_headers(headers: Iterable[Tuple[str, str]]) -> RawHeaders:
    """``headers`` as ASGI sends them: latin-1 ``bytes`` pairs."""
    names = _NAMES
    out = []
    for name, value in headers:
        raw = names.get(name)
        if raw is None:
            raw = name.encode("latin-1")
            if len(names) < 256:  # names come from the app's code, but bound them anyway
                names[name] = raw
        out.append((raw, value.encode("latin-1")))
    return out


class RateLimitMiddleware:
    """Rate-limit an ASGI app: ``app = RateLimitMiddleware(app, limiter)``.

    ``limiter``: a ``RateLimiter`` or a function (``async def`` allowed) of the
    ``RequestInfo`` returning one.  Allowed responses get the rate-limit
    headers; limited requests the 429 without calling the app, a limited
    WebSocket handshake a refusal (code 1013 without a response); ``ws_*``
    options limit inbound messages.  ``TypeError``/``ValueError`` for a bad
    option, here; only a ``StoreError`` goes to ``on_error``.  Options:
    docs/adapters.md#options, #websocket-messages, #asgi.
    """

    def __init__(self, app: ASGIApp, limiter: LimiterSpec, **options: Unpack[ASGIOptions]) -> None:
        if not callable(app):
            raise TypeError(f"app must be an ASGI callable, got {app!r}")
        self.app = app
        given, ws = websocket_options("RateLimitMiddleware", options)
        # Encoded: admitted requests' headers come as bytes, as ASGI sends them.
        self.guard = Guard(
            limiter, Options(given, owner="RateLimitMiddleware", encoded=True, limiter=limiter)
        )
        handshake = limiter if isinstance(limiter, RateLimiter) else None
        messages = MessageLimits(
            ws,
            store=None if handshake is None else handshake.store,
            clock=None if handshake is None else handshake.clock,
            shadow=self.guard.mode == "shadow",
        )
        #: The limits on inbound WebSocket messages (``None``: none).
        self.messages = messages if messages.limiters else None
        self._decide = self.guard.decider()
        # Disabled: _decide limits nothing, and adecide is never called.
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
            outcome = await self.guard.adecide(request_info(scope))
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
            if outcome.__class__ is Held:
                await holding(self.app, scope, receive, _settling(send, outcome), outcome)
            else:
                await self.app(scope, receive, _settling(send, outcome))
            return
        status, headers, body = outcome
        await send(
            {"type": "http.response.start", "status": status, "headers": encode_headers(headers)}
        )
        head = scope.get("method") == "HEAD"
        await send({"type": "http.response.body", "body": b"" if head else body})

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = request_info(scope)
        guard = self.guard
        # Once per connection: no shortcut.  None: exempt, allow-listed or limiting off.
        chosen = await guard.aselect(request) if guard.enabled else None
        outcome: Verdict = [] if chosen is None else await guard.acharge(request, chosen)
        if isinstance(outcome, Deferred):
            # A handshake has no status: accept is success, a close before it (403) failure.
            send = _settling(send, outcome)
        if isinstance(outcome, (list, Deferred)):  # admitted
            messages = self.messages
            try:
                if messages is None or chosen is None:  # its messages are not limited
                    await self.app(scope, receive, send)
                else:
                    await limit_messages(self.app, scope, receive, send, messages, guard, chosen[1])
            finally:
                if outcome.__class__ is Held:  # held for the life of the connection
                    await outcome.arelease()
            return
        status, headers, body = outcome
        # Answer websocket.connect, not before.
        message = await receive()
        if message["type"] != "websocket.connect":
            return  # the client went away already
        extensions: Dict[str, Any] = scope.get("extensions") or {}
        if "websocket.http.response" in extensions:
            raw = encode_headers(headers)
            await send({"type": "websocket.http.response.start", "status": status, "headers": raw})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": WEBSOCKET_CLOSE_CODE})


async def holding(app: ASGIApp, scope: Scope, receive: Receive, send: Send, held: Held) -> None:
    """Run ``app`` on an HTTP request holding ``held``'s slot: given back once the last
    body message is sent, the client disconnects or the app returns or raises."""

    async def send_then_release(message: Message) -> None:
        await send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            await held.arelease()

    async def receive_watching() -> Message:
        message = await receive()
        if message["type"] == "http.disconnect":
            await held.arelease()
        return message

    try:
        await app(scope, receive_watching, send_then_release)
    finally:
        await held.arelease()


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


# -- WebSocket messages (docs/adapters.md#websocket-messages) ---------------------

#: A refused message: the close code and reason, and the notice (a JSON text frame).
_Refusal = Tuple[int, str, str]
_UNAVAILABLE: _Refusal = (
    1013,
    "rate limiter unavailable",
    '{"status":503,"code":"rate_limiter_unavailable","message":"rate limiter unavailable",'
    '"retry_after":null}',
)


def _size(message: Message) -> int:
    """A ``websocket.receive`` payload's length in bytes (text as UTF-8)."""
    text = message.get("text")
    if text is not None:
        return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    data = message.get("bytes")
    return 0 if data is None else len(data)


def _retry_after(result: RateLimitResult) -> Optional[float]:
    """Seconds until the message could pass, up to the millisecond; ``None``: never."""
    if math.isinf(result.retry_after):
        return None
    # round() first: float noise (0.40000000000000036; a clock at 1.7e9 s is
    # exact to 2.4e-7 s) must not make 0.4 a 0.401.
    return math.ceil(round(result.retry_after * 1000, 3)) / 1000


class _Socket:
    """One admitted WebSocket connection whose inbound messages are charged.

    ``receive``/``send`` wrap the server's.  No lock: no ``await`` between
    testing the flags and the server's ``send``, so nothing slips in after a close.
    """

    __slots__ = ("_gone", "_receive", "_send", "closed", "connection_key", "guard", "key", "limits")

    def __init__(
        self, limits: MessageLimits, guard: Guard, key: str, receive: Receive, send: Send
    ) -> None:
        self.limits = limits
        self.guard = guard
        # Prefixed: never the handshake's own bucket, even in the same limiter.
        self.key = "ws:" + key
        # Random: unique across workers sharing a store, and never an HTTP key.
        self.connection_key = "ws-connection:" + uuid.uuid4().hex
        self._receive = receive
        self._send = send
        #: A ``websocket.close`` went out (the app's or the limit's): nothing more is sent.
        self.closed = False
        #: What ``receive`` answers once the limit closed the connection.
        self._gone: Optional[Message] = None

    async def receive(self) -> Message:
        """The server's next event; a refused message is dropped or closes the connection."""
        while self._gone is None:
            message = await self._receive()
            if message["type"] != "websocket.receive":
                return message
            refusal = await self._charge(message)
            if refusal is None:
                return message
            await self._refuse(refusal)
        return self._gone

    async def send(self, message: Message) -> None:
        """The app's ``send``; after the limit closed the connection, ``OSError``."""
        if self._gone is not None:
            if message["type"] == "websocket.close":
                return  # the app's answer to the disconnect: closed already
            raise OSError(f"the rate limiter closed this WebSocket ({self._gone['code']})")
        if message["type"] == "websocket.close":
            self.closed = True
        await self._send(message)

    async def _charge(self, message: Message) -> Optional[_Refusal]:
        limits = self.limits
        cost = _size(message) if limits.by_bytes else 1
        connection = limits.per_connection
        at = 0.0
        if connection is not None:
            at = connection.clock.now()
            refusal = await self._check(connection, self.connection_key, cost)
            if refusal is not None:
                return refusal
        per_key = limits.per_key
        if per_key is None:
            return None
        refusal = await self._check(per_key, self.key, cost)
        if refusal is not None and connection is not None:
            # The message is not delivered: the connection's share goes back.
            try:
                await connection.arefund(self.connection_key, cost, taken_at=at)
            except StoreError:
                self.guard.failed(connection)
        return refusal

    async def _check(self, limiter: RateLimiter, key: str, cost: int) -> Optional[_Refusal]:
        try:
            # Called, not awaited, when the store never waits (CONTRIBUTING.md, "Hot paths").
            result = (
                limiter.check(key, cost) if limiter.nonblocking else await limiter.acheck(key, cost)
            )
        except StoreError:
            self.guard.failed(limiter)  # logged, at most once a minute
            return _UNAVAILABLE if self.guard.on_error == "deny" else None
        if result.allowed:
            return None
        if limiter.shadow:
            self.guard.shadow_denied(result, limiter)
            return None
        notice = {
            "status": 429,
            "code": "rate_limited",
            "message": "too many messages",
            "retry_after": _retry_after(result),
        }
        return (
            self.limits.close_code,
            "too many messages",
            json.dumps(notice, separators=(",", ":")),
        )

    async def _refuse(self, refusal: _Refusal) -> None:
        code, reason, notice = refusal
        if not self.limits.drop:
            self._gone = {"type": "websocket.disconnect", "code": code, "reason": reason}
        if self.closed:
            return
        if self._gone is not None:
            self.closed = True
            message: Message = {"type": "websocket.close", "code": code, "reason": reason}
        else:
            message = {"type": "websocket.send", "text": notice}
        with contextlib.suppress(OSError):  # the client is gone: the server's next event says so
            await self._send(message)

    async def forget(self) -> None:
        """Drop the connection's bucket: its key never comes back."""
        connection = self.limits.per_connection
        if connection is None:
            return
        try:
            await connection.areset(self.connection_key)
        except StoreError:
            self.guard.failed(connection)


async def limit_messages(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    limits: MessageLimits,
    guard: Guard,
    key: str,
) -> None:
    """Run ``app`` on an admitted WebSocket connection, charging its inbound messages.

    ``key``: the handshake's (``limits.per_key`` charges ``"ws:" + key``);
    ``guard``: its ``on_error`` and shadow logging apply. The connection's own
    bucket is forgotten when the app returns. docs/adapters.md#websocket-messages.
    """
    socket = _Socket(limits, guard, key, receive, send)
    try:
        await app(scope, socket.receive, socket.send)
    finally:
        await socket.forget()


async def limit_connection(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, limits: MessageLimits, guard: Guard
) -> None:
    """``limit_messages`` keyed as ``guard`` keys the handshake; exempt or
    allow-listed connections (and a disabled ``guard``) are not limited."""
    chosen = await guard.aselect(request_info(scope)) if guard.enabled else None
    if chosen is None:
        await app(scope, receive, send)
        return
    await limit_messages(app, scope, receive, send, limits, guard, chosen[1])
