"""Rate limiting for the standard library's ``http.server``.

>>> from http.server import BaseHTTPRequestHandler
>>> from limiter import RateLimiter
>>> from limiter.adapters.httpserver import rate_limited
>>> @rate_limited(RateLimiter("10/second"))
... class Handler(BaseHTTPRequestHandler):
...     def do_GET(self):
...         self.send_response(200)
...         self.end_headers()
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Type, TypeVar, Union
from urllib.parse import unquote

from limiter.http.guard import Deferred, Guard, Held
from limiter.http.options import GuardOptions, Options
from limiter.http.request import HeaderView, RequestInfo
from limiter.http.responses import HeaderList, Response
from limiter.http.rules import LimiterSpec

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

__all__ = ["rate_limited"]

_NONE: HeaderList = []  # shared and never mutated
H = TypeVar("H", bound=Type[BaseHTTPRequestHandler])


class _MessageHeaders(HeaderView):
    __slots__ = ("_message",)

    def __init__(self, message: Any) -> None:
        self._message = message

    def get_all(self, name: str) -> List[str]:
        values = self._message.get_all(name) if self._message is not None else None
        return [] if values is None else [str(v) for v in values]


def request_info(handler: BaseHTTPRequestHandler) -> RequestInfo:
    """The ``RequestInfo`` of a handler whose request line and headers are parsed."""
    target = handler.path
    if target[:1] != "/" and "://" in target:  # absolute-form request target
        target = "/" + target.split("://", 1)[1].partition("/")[2]
    path = target.partition("?")[0].partition("#")[0]
    if "%" in path:
        path = unquote(path, errors="replace")
    address = handler.client_address
    peer = address[0] if isinstance(address, tuple) and address and address[0] else None
    return RequestInfo(
        handler.command or "GET",
        path,
        _MessageHeaders(getattr(handler, "headers", None)),
        peer if isinstance(peer, str) else None,
        handler,
    )


def rate_limited(
    limiter: LimiterSpec,
    **options: Unpack[GuardOptions],
) -> Callable[[H], H]:
    """Class decorator limiting every request a ``BaseHTTPRequestHandler`` subclass serves.

    Returns a subclass (same name) deciding before any ``do_<METHOD>``: allowed
    responses get the rate-limit headers at ``end_headers()``, limited requests
    the 429.  Stores must be synchronous.  ``TypeError``/``ValueError`` for a
    bad option, here; only a ``StoreError`` goes to ``on_error``.
    Options: docs/adapters.md#options, #httpserver.
    """
    guard = Guard(
        limiter, Options(options, owner="rate_limited", sync="http.server", limiter=limiter)
    )

    def decorate(cls: H) -> H:
        if not (isinstance(cls, type) and issubclass(cls, BaseHTTPRequestHandler)):
            raise TypeError(
                f"rate_limited decorates BaseHTTPRequestHandler subclasses, got {cls!r}"
            )
        return _limited_subclass(cls, guard)

    return decorate


def _limited_subclass(cls: H, guard: Guard) -> H:
    """``cls`` with the decision after ``parse_request`` and its headers at ``end_headers``."""
    decide = guard.decider()
    decide_peer = guard.peer_decider()

    class Limited(cls):  # type: ignore[valid-type,misc]
        _limiter_pending: Union[HeaderList, Deferred] = _NONE
        _limiter_held: Optional[Held] = None

        def handle_one_request(self) -> None:
            # A slot is held until the handler returns, exception or not.
            try:
                super().handle_one_request()
            finally:
                held = self._limiter_held
                if held is not None:
                    self._limiter_held = None
                    held.release()

        def parse_request(self) -> bool:
            self._limiter_pending = _NONE
            if not super().parse_request():
                return False
            if decide_peer is not None:
                # Hot path (CONTRIBUTING.md): the request view is built only if
                # needed; anything but a str is not looked up.
                address = self.client_address
                peer = address[0] if address.__class__ is tuple and address else None
                outcome = decide_peer(peer if peer.__class__ is str else None, self, request_info)
            else:
                outcome = decide(request_info(self))
            if isinstance(outcome, (list, Deferred)):
                self._limiter_pending = outcome
                if outcome.__class__ is Held:
                    self._limiter_held = outcome
                return True
            _send_instead(self, outcome, super().end_headers)
            return False  # handle_one_request() then calls no do_<METHOD>

        def send_response(self, code: int, message: Optional[str] = None) -> None:
            pending = self._limiter_pending
            if isinstance(pending, Deferred):
                self._limiter_pending = pending.settle(code)
            super().send_response(code, message)

        def end_headers(self) -> None:
            pending = self._limiter_pending
            if pending and pending.__class__ is list:  # a Deferred waits for send_response
                self._limiter_pending = _NONE
                _add_headers(self, pending)
            super().end_headers()

    for name in ("__name__", "__qualname__", "__module__", "__doc__"):
        setattr(Limited, name, getattr(cls, name))
    Limited.limiter_guard = guard
    return Limited  # type: ignore[return-value]


def _send_instead(
    handler: BaseHTTPRequestHandler, response: Response, end_headers: Callable[[], None]
) -> None:
    """Send ``response`` (the 429 or 503) in place of the handler's own, and flush it."""
    status, headers, body = response
    has_body = handler.headers.get("Content-Length", "0").strip() not in ("", "0")
    if has_body or "Transfer-Encoding" in handler.headers:
        handler.close_connection = True  # its unread body cannot stay on the connection
    handler.send_response(status)
    for name, value in headers:
        handler.send_header(name, value)
    if handler.close_connection and handler.request_version != "HTTP/0.9":
        handler.send_header("Connection", "close")
    end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)
    # handle_one_request() flushes only after do_<METHOD>: a buffered wfile
    # would hold the response back.
    handler.wfile.flush()


def _add_headers(handler: BaseHTTPRequestHandler, headers: HeaderList) -> None:
    """Add ``headers`` to the response whose headers are being ended."""
    buffer = getattr(handler, "_headers_buffer", None)
    if buffer is not None and handler.request_version != "HTTP/0.9":
        # send_header()'s lines in one piece: a call per header costs more than
        # the whole decision (CONTRIBUTING.md, "Hot paths").
        lines = "".join([f"{name}: {value}\r\n" for name, value in headers])
        buffer.append(lines.encode("latin-1", "strict"))
    else:
        for name, value in headers:
            handler.send_header(name, value)
