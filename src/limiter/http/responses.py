"""The responses a guard sends instead of the app's: the 429 and the 503.

``on_limited(request, result, headers) -> Response`` builds the first
(``default_on_limited`` unless an adapter is given one); ``UNAVAILABLE`` is
the second (``on_error="deny"``).  See docs/adapters.md.
"""

from __future__ import annotations

import http
from typing import Callable, Dict, List, NamedTuple, Tuple

from limiter.core.result import RateLimitResult
from limiter.http.request import RequestInfo

HeaderList = List[Tuple[str, str]]

#: The body of the default 429 response, exactly.
DENIED_BODY = b'{"status":429,"code":"rate_limited","message":"too many requests"}'
#: The body of the 503 sent when the store fails and ``on_error="deny"``.
UNAVAILABLE_BODY = (
    b'{"status":503,"code":"rate_limiter_unavailable","message":"rate limiter unavailable"}'
)

_JSON = ("Content-Type", "application/json")


class Response(NamedTuple):
    """A response that replaces the app's: ``status`` (int), ``headers`` (str pairs), ``body``."""

    status: int
    headers: HeaderList
    body: bytes


#: ``on_limited(request, result, headers) -> Response``: builds the response to
#: a limited request.  ``headers`` are the rate-limit headers (with
#: ``Retry-After``) the default response carries; include them.
OnLimited = Callable[[RequestInfo, RateLimitResult, HeaderList], Response]

_DENIED_TAIL = [_JSON, ("Content-Length", str(len(DENIED_BODY)))]
#: The 503 of ``on_error="deny"`` (shared: adapters never mutate a response).
UNAVAILABLE = Response(
    503, [_JSON, ("Content-Length", str(len(UNAVAILABLE_BODY)))], UNAVAILABLE_BODY
)


def default_on_limited(
    request: RequestInfo, result: RateLimitResult, headers: HeaderList
) -> Response:
    """``429 Too Many Requests``, ``headers``, JSON content type and ``DENIED_BODY``."""
    return Response(429, headers + _DENIED_TAIL, DENIED_BODY)


_REASONS: Dict[int, str] = {s.value: f"{s.value} {s.phrase}" for s in http.HTTPStatus}


def status_line(status: int) -> str:
    """``429`` -> ``"429 Too Many Requests"`` (WSGI's status string)."""
    line = _REASONS.get(status)
    return line if line is not None else f"{status} Unknown"
