"""A requests adapter that waits for a ``RateLimiter``'s tokens and obeys the
server's 429s (extra ``requests``).
"""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from limiter.clients._pacing import DEFAULT_MAX_WAIT, KeySpec, Pacer

__all__ = ["RateLimitAdapter"]


def _rewindable(body: object) -> bool:
    # A body prepared as bytes or str can be sent again; a generator or a file
    # object was consumed by the first attempt.
    return body is None or isinstance(body, (bytes, str))


def _discard(response: requests.Response) -> None:
    # Read, then closed: the connection goes back to the pool during the
    # pause, and the caller still gets the body if the pause would take the
    # call past its max_wait.
    response.content  # noqa: B018
    response.close()


class RateLimitAdapter(HTTPAdapter):
    """A ``requests`` transport adapter that paces requests with ``limiter``.

    Mount it on a ``requests.Session``; each request (each redirect hop) waits as
    ``limiter.clients.httpx.RateLimitTransport`` does, with the same ``key``,
    ``respect_server``, ``max_retries`` and ``max_wait``; a generator or file body
    is not retried.  ``connection_retries`` is ``HTTPAdapter``'s ``max_retries``;
    other keywords go to ``HTTPAdapter``.  ``TypeError``/``ValueError`` as there.

        session.mount("https://", RateLimitAdapter(RateLimiter("5/second")))
    """

    def __init__(
        self,
        limiter: object,
        *,
        key: KeySpec = None,
        respect_server: bool = True,
        max_retries: int = 3,
        max_wait: Optional[float] = DEFAULT_MAX_WAIT,
        connection_retries: Any = 0,
        **kwargs: Any,
    ) -> None:
        advice = "requests needs a limiter with a synchronous store"
        pacer = Pacer(
            "RateLimitAdapter", limiter, key, respect_server, max_retries, max_wait, advice
        )
        super().__init__(max_retries=connection_retries, **kwargs)
        self._pacer = pacer
        self.limiter = pacer.limiter

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        """Wait for ``request``'s turn, send it, and retry it as the server asks (the other
        arguments go to ``HTTPAdapter.send``).
        """
        pacer = self._pacer
        url: str = request.url or ""
        parts = urlsplit(url)
        key = pacer.key_of(request, parts.scheme, parts.hostname or "", parts.port)
        retries = pacer.max_retries if _rewindable(request.body) else 0
        send = super().send
        response: requests.Response = pacer.call(
            key,
            retries,
            lambda: send(
                request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies
            ),
            _discard,
        )
        return response
