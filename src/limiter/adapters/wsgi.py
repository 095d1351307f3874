"""WSGI (PEP 3333) rate-limiting middleware.

>>> from limiter import RateLimiter
>>> from limiter.adapters.wsgi import RateLimitMiddleware
>>> def app(environ, start_response):
...     start_response("200 OK", [("Content-Type", "text/plain")])
...     return [b"hello"]
>>> app = RateLimitMiddleware(app, RateLimiter("10/second"))
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Tuple

from limiter.http.guard import Deferred, Guard, Held
from limiter.http.options import GuardOptions, Options
from limiter.http.request import HeaderView, RequestInfo
from limiter.http.responses import HeaderList, status_line
from limiter.http.rules import LimiterSpec

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; annotations only

__all__ = ["RateLimitMiddleware"]

Environ = Dict[str, Any]
StartResponse = Callable[..., Callable[[bytes], object]]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

_SPECIAL = {"CONTENT-TYPE": "CONTENT_TYPE", "CONTENT-LENGTH": "CONTENT_LENGTH"}


class EnvironHeaders(HeaderView):
    """The headers of a WSGI environ, or of any dict laid out like one (Django's ``request.META``).

    Read on demand, so a request whose key needs no header decodes none.
    """

    __slots__ = ("_environ",)

    def __init__(self, environ: Environ) -> None:
        self._environ = environ

    def get_all(self, name: str) -> List[str]:
        upper = name.upper()
        var = _SPECIAL.get(upper) or "HTTP_" + upper.replace("-", "_")
        value = self._environ.get(var)
        return [] if value is None else [value]


def request_info(environ: Environ) -> RequestInfo:
    """The ``RequestInfo`` of a WSGI environ (``peer`` is ``REMOTE_ADDR`` or ``None``)."""
    path: str = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
    if not path.isascii():
        # PEP 3333 hands over the raw bytes decoded as latin-1; re-decode as UTF-8.
        with contextlib.suppress(UnicodeEncodeError):
            path = path.encode("latin-1").decode("utf-8", "replace")
    return RequestInfo(
        environ.get("REQUEST_METHOD", "GET"),
        path,
        EnvironHeaders(environ),
        environ.get("REMOTE_ADDR") or None,
        environ,
    )


class RateLimitMiddleware:
    """Rate-limit a WSGI app: ``app = RateLimitMiddleware(app, limiter)``.

    ``limiter``: a ``RateLimiter`` with a synchronous store, or a function of the
    ``RequestInfo`` returning one.  Allowed responses get the rate-limit headers;
    limited requests the 429 without calling ``app``.  ``TypeError``/``ValueError``
    for a bad option, here; only a ``StoreError`` goes to ``on_error``.
    Options: docs/adapters.md#options, #wsgi.
    """

    def __init__(self, app: WSGIApp, limiter: LimiterSpec, **options: Unpack[GuardOptions]) -> None:
        if not callable(app):
            raise TypeError(f"app must be a WSGI callable, got {app!r}")
        self.app = app
        self.guard = Guard(
            limiter, Options(options, owner="RateLimitMiddleware", sync="WSGI", limiter=limiter)
        )
        self._decide = self.guard.decider()
        self._decide_peer = self.guard.peer_decider()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        decide_peer = self._decide_peer
        if decide_peer is not None:
            # Hot path (CONTRIBUTING.md): the request view is built only if needed;
            # anything but a str is not looked up.
            peer = environ.get("REMOTE_ADDR")
            outcome = decide_peer(peer if peer.__class__ is str else None, environ, request_info)
        else:
            outcome = self._decide(request_info(environ))
        if isinstance(outcome, list):
            if not outcome:
                return self.app(environ, start_response)
            extra: List[Tuple[str, str]] = outcome

            def start_with_headers(
                status: str, headers: List[Tuple[str, str]], exc_info: Any = None
            ) -> Callable[[bytes], object]:
                # A new list: the app's own list and headers stay as they were.
                if exc_info is None:
                    return start_response(status, [*headers, *extra])
                return start_response(status, [*headers, *extra], exc_info)

            return self.app(environ, start_with_headers)
        if isinstance(outcome, Deferred):
            if outcome.__class__ is Held:
                return _holding(self.app, environ, _settling(start_response, outcome), outcome)
            return self.app(environ, _settling(start_response, outcome))
        status, headers, body = outcome
        start_response(status_line(status), list(headers))
        return [b"" if environ.get("REQUEST_METHOD", "GET") == "HEAD" else body]


def _holding(app: WSGIApp, environ: Environ, start: StartResponse, held: Held) -> Iterable[bytes]:
    """``app``'s response, its slot given back when the server closes it (or the app raises)."""
    try:
        body = app(environ, start)
    except BaseException:
        held.release()
        raise
    # A len() shows through: a server sets Content-Length from a one-chunk body (PEP 3333).
    return (_SizedReleasing if hasattr(type(body), "__len__") else _Releasing)(body, held)


class _Releasing:
    """A response iterable that gives its request's slot back on ``close()`` (PEP 3333),
    which the server calls once the last chunk is sent, or the client is gone."""

    __slots__ = ("_body", "_held")

    def __init__(self, body: Iterable[bytes], held: Held) -> None:
        self._body = body
        self._held = held

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._held.release()


class _SizedReleasing(_Releasing):
    """``_Releasing`` for a body with a ``len()`` (a list), which it gives too."""

    __slots__ = ()

    def __len__(self) -> int:
        return len(self._body)  # type: ignore[arg-type]


def _settling(start_response: StartResponse, deferred: Deferred) -> StartResponse:
    """``start_response`` that settles ``deferred`` with the status and adds its headers."""

    def start(status: str, headers: HeaderList, exc_info: Any = None) -> Callable[[bytes], object]:
        try:
            code = int(status[:3])
        except ValueError:
            code = 0  # not a status line: no deduct_when can mean it
        extra = deferred.settle(code)
        if exc_info is None:
            return start_response(status, [*headers, *extra])
        return start_response(status, [*headers, *extra], exc_info)

    return start
