"""httpx transports that wait for a ``RateLimiter``'s tokens and obey the server's 429s.

Extra ``httpx`` (``pip install "tokenlimiter[httpx]"``)::

    from limiter.clients.httpx import RateLimitTransport

    client = httpx.Client(transport=RateLimitTransport(RateLimiter("5/second")))

``AsyncRateLimitTransport`` is the same for ``httpx.AsyncClient``.  What a
retry needs and when it happens is described on ``RateLimitTransport``.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Generic, Optional, TypeVar

import httpx

from limiter.clients._pacing import DEFAULT_MAX_WAIT, KeySpec, Pacer

__all__ = ["AsyncRateLimitTransport", "RateLimitTransport"]


def _rewindable(request: httpx.Request) -> bool:
    # httpx keeps a body it was given whole (content=bytes, data=, json=) in
    # memory and can send it again; a streamed one (a generator, a file upload)
    # has been consumed by the first attempt.
    try:
        request.content  # noqa: B018
    except httpx.RequestNotRead:
        return False
    return True


def _discard(response: httpx.Response) -> None:
    # Read, then closed: its connection goes back to the pool during the
    # pause, and the caller still gets it whole if the pause would take the
    # call past its max_wait.
    response.read()
    response.close()


async def _adiscard(response: httpx.Response) -> None:
    await response.aread()
    await response.aclose()


def _wrapped(owner: str, transport: object, base: type, default: Callable[[], Any]) -> Any:
    """``transport``, checked to be a ``base``; a new ``default()`` for ``None``."""
    if transport is None:
        return default()
    if not isinstance(transport, base):
        raise TypeError(
            f"{owner}: transport must be an httpx.{base.__name__}, got {transport!r:.100}"
        )
    return transport


def _key(pacer: Pacer, request: httpx.Request) -> str:
    url = request.url
    return pacer.key_of(request, url.scheme, url.host, url.port)


#: The transport a ``RateLimitTransport`` (sync) or ``AsyncRateLimitTransport`` wraps.
Transport = TypeVar("Transport", httpx.BaseTransport, httpx.AsyncBaseTransport)


class _Paced(Generic[Transport]):
    """The constructor of both transports (their docstrings describe the arguments)."""

    _base: ClassVar[type]  # the transport class it wraps, and its default
    _default: ClassVar[type]
    _sync: ClassVar[bool]  # whether the limiter's store must be synchronous

    def __init__(
        self,
        limiter: object,
        *,
        key: KeySpec = None,
        transport: Optional[Transport] = None,
        respect_server: bool = True,
        max_retries: int = 3,
        max_wait: Optional[float] = DEFAULT_MAX_WAIT,
    ) -> None:
        owner = ("" if self._sync else "Async") + "RateLimitTransport"
        self._pacer = pacer = Pacer(owner, limiter, key, respect_server, max_retries, max_wait)
        if self._sync and not callable(getattr(pacer.limiter.store, "apply", None)):
            raise TypeError(
                f"{owner}: {pacer.limiter.store!r} is async only: use AsyncRateLimitTransport"
            )
        #: The limiter whose tokens each request takes.
        self.limiter = pacer.limiter
        #: The transport that sends the requests.
        self.transport: Transport = _wrapped(owner, transport, self._base, self._default)


class RateLimitTransport(_Paced[httpx.BaseTransport], httpx.BaseTransport):
    """An ``httpx`` transport that paces requests with ``limiter`` before sending them.

    Each request first waits (on ``limiter.clock``: a ``ManualClock`` moves
    instead of sleeping) until its key is not paused and one token of its key
    is taken (``RateLimiter.acquire``, no timeout), then goes to
    ``transport`` (default: a new ``httpx.HTTPTransport()``).

    ``key``: ``None`` (default) keys each request by its host
    (``"api.example.com"``, ``"127.0.0.1:8080"``: the port unless it is the
    scheme's default); a ``str`` puts every request in one bucket; a function
    ``key(request) -> str`` chooses per ``httpx.Request``.

    ``respect_server``: when True (default), a 429 or 503 response carrying a
    hint (``Retry-After`` in seconds or as an HTTP-date, the draft
    ``RateLimit`` field's ``t``, ``RateLimit-Reset``, ``X-RateLimit-Reset``:
    ``limiter.clients._pacing.server_delay``) pauses its key for that many
    seconds, for every request of this transport, and the request is sent
    again after the pause, up to ``max_retries`` times (an int >= 0, default
    3); the caller then gets the last response as it came.  Each retry waits
    for a token again.  The response is returned as is, without retrying,
    when it has no hint, when the hint asks for more than ``max_wait``
    seconds (default 300; ``None``: no cap; such a hint does not pause the
    key either), or when the body was streamed (a generator, a file upload:
    it cannot be sent twice).  A discarded response is closed.  ``max_wait``
    also bounds the pauses one call waits in total, its own and those other
    requests set, across its retries: when the next one would go past it, a
    retry returns the last response (read, so whole) without sleeping, and a
    first attempt is sent despite the pause.

    The wait for a token raises ``limiter.RateLimitExceeded`` only if the
    limiter can never admit a request (a burst below 1).  Wrong argument
    types are ``TypeError``, out-of-range values ``ValueError``.  The limiter
    must have a synchronous store; for ``httpx.AsyncClient`` use
    ``AsyncRateLimitTransport``.
    """

    _base = httpx.BaseTransport
    _default = httpx.HTTPTransport
    _sync = True

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Wait for ``request``'s turn, send it, and retry it as the server asks."""
        pacer = self._pacer
        key = _key(pacer, request)
        retries = pacer.max_retries if _rewindable(request) else 0
        response: httpx.Response = pacer.call(
            key, retries, lambda: self.transport.handle_request(request), _discard
        )
        return response

    def close(self) -> None:
        """Close the wrapped transport."""
        self.transport.close()


class AsyncRateLimitTransport(_Paced[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """``RateLimitTransport`` for ``httpx.AsyncClient``; waits with ``await clock.asleep``.

    Same arguments and behaviour; ``transport`` is an
    ``httpx.AsyncBaseTransport`` (default: a new ``httpx.AsyncHTTPTransport()``).
    The limiter's store may be synchronous or asyncio (``aacquire``).
    """

    _base = httpx.AsyncBaseTransport
    _default = httpx.AsyncHTTPTransport
    _sync = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Wait for ``request``'s turn, send it, and retry it as the server asks."""
        pacer = self._pacer
        key = _key(pacer, request)
        retries = pacer.max_retries if _rewindable(request) else 0
        response: httpx.Response = await pacer.acall(
            key, retries, lambda: self.transport.handle_async_request(request), _adiscard
        )
        return response

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()
