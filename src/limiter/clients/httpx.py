"""httpx transports that wait for a ``RateLimiter``'s tokens and obey the server's
429s (extra ``httpx``).  See docs/policies.md "Outbound clients".
"""

from __future__ import annotations

from typing import ClassVar, Generic, Optional, Tuple, TypeVar

import httpx

from limiter.clients._pacing import DEFAULT_MAX_WAIT, KeySpec, Pacer

__all__ = ["AsyncRateLimitTransport", "RateLimitTransport"]


def _rewindable(request: httpx.Request) -> bool:
    # A streamed body (a generator, a file upload) was consumed by the first attempt.
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


def _key_and_retries(pacer: Pacer, request: httpx.Request) -> Tuple[str, int]:
    url = request.url
    key = pacer.key_of(request, url.scheme, url.host, url.port)
    return key, pacer.max_retries if _rewindable(request) else 0


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
        advice = "use AsyncRateLimitTransport" if self._sync else None
        self._pacer = Pacer(owner, limiter, key, respect_server, max_retries, max_wait, advice)
        self.limiter = self._pacer.limiter
        if transport is None:
            transport = self._default()
        elif not isinstance(transport, self._base):
            raise TypeError(
                f"{owner}: transport must be an httpx.{self._base.__name__}, got {transport!r:.100}"
            )
        self.transport: Transport = transport


class RateLimitTransport(_Paced[httpx.BaseTransport], httpx.BaseTransport):
    """An ``httpx`` transport that paces requests with ``limiter`` before sending them.

    Each request waits on ``limiter.clock`` until its key is unpaused and a token is
    taken, then goes to ``transport`` (default: a new ``httpx.HTTPTransport()``).
    ``key``: ``None`` (the host), a ``str`` or ``key(request) -> str``.
    ``respect_server``: a 429 or 503 whose hint is at most ``max_wait`` seconds
    (default 300; ``None``: no cap, also bounding one call's pauses) pauses the key
    and is retried up to ``max_retries`` times; a streamed body is not retried.
    ``RateLimitExceeded`` only if the limiter can never admit; ``TypeError`` for
    wrong types or an async-only store, ``ValueError`` for out-of-range values.

        client = httpx.Client(transport=RateLimitTransport(RateLimiter("5/second")))
    """

    _base = httpx.BaseTransport
    _default = httpx.HTTPTransport
    _sync = True

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Wait for ``request``'s turn, send it, and retry it as the server asks."""
        key, retries = _key_and_retries(self._pacer, request)
        response: httpx.Response = self._pacer.call(
            key, retries, lambda: self.transport.handle_request(request), _discard
        )
        return response

    def close(self) -> None:
        """Close the wrapped transport."""
        self.transport.close()


class AsyncRateLimitTransport(_Paced[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """``RateLimitTransport`` for ``httpx.AsyncClient`` (``transport``: an
    ``httpx.AsyncBaseTransport``); the store may be synchronous or asyncio.
    """

    _base = httpx.AsyncBaseTransport
    _default = httpx.AsyncHTTPTransport
    _sync = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Wait for ``request``'s turn, send it, and retry it as the server asks."""
        key, retries = _key_and_retries(self._pacer, request)
        response: httpx.Response = await self._pacer.acall(
            key, retries, lambda: self.transport.handle_async_request(request), _adiscard
        )
        return response

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()
