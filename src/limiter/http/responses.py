"""The responses a guard sends instead of the app's: the 429 and the 503.

``on_limited(request, result, headers) -> Response`` builds the first
(``default_on_limited`` unless an adapter is given one; ``problem_on_limited``
for ``on_limited="problem"``); ``UNAVAILABLE`` is the second
(``on_error="deny"``).  See docs/adapters.md and docs/headers.md.
"""

from __future__ import annotations

import http
import json
from typing import Callable, Dict, List, NamedTuple, Tuple

from limiter.core.result import RateLimitResult
from limiter.http.headers import retry_seconds
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


#: The problem types of draft-ietf-httpapi-ratelimit-headers (section 5), registered
#: with IANA: the ``type`` of an ``on_limited="problem"`` body, and its ``title``
#: (the registry's, the same for every occurrence, as RFC 9457 section 3.1.3 asks).
PROBLEM_TYPES: Dict[str, Tuple[str, str]] = {
    "quota-exceeded": (
        "https://iana.org/assignments/http-problem-types#quota-exceeded",
        "Quota Exceeded",
    ),
    "abnormal-usage-detected": (
        "https://iana.org/assignments/http-problem-types#abnormal-usage-detected",
        "Abnormal Usage Detected",
    ),
}
PROBLEM_JSON = "application/problem+json"


def problem_body(result: RateLimitResult) -> bytes:
    """The RFC 9457 problem details of a refused ``result``, as compact JSON.

    ``type`` and ``title``: ``abnormal-usage-detected`` for a lockout,
    ``quota-exceeded`` otherwise (``PROBLEM_TYPES``); ``status`` 429;
    ``detail`` names the refusing policies and the wait (``Retry-After``'s
    value); ``violated-policies`` lists them. docs/headers.md shows one.
    """
    # The policies that refused it, in the headers' order.
    names = [part.policy for part in result.results or (result,) if not part.allowed]
    names = names or [result.policy]
    retry = retry_seconds(result)
    locked = result.kind == "lockout"
    if locked:  # a lockout is always the last policy (and the one that refused)
        detail = f'Locked out by "{names[-1]}" after repeated refusals'
    else:
        detail = "Quota exceeded: " + ", ".join(f'"{name}"' for name in names)
    if retry is not None:
        detail += f"; retry in {retry} s."
    else:  # a cost above the burst: no wait lets it through
        detail += "; this request costs more than the quota holds and can never pass."
    kind, title = PROBLEM_TYPES["abnormal-usage-detected" if locked else "quota-exceeded"]
    problem = {
        "type": kind,
        "title": title,
        "status": 429,
        "detail": detail,
        "violated-policies": names,
    }
    return json.dumps(problem, separators=(",", ":")).encode("ascii")


def problem_on_limited(
    request: RequestInfo, result: RateLimitResult, headers: HeaderList
) -> Response:
    """``429 Too Many Requests``, ``headers``, and ``problem_body(result)`` as
    ``application/problem+json``: the ``on_limited="problem"`` of the adapters."""
    body = problem_body(result)
    tail = [("Content-Type", PROBLEM_JSON), ("Content-Length", str(len(body)))]
    return Response(429, headers + tail, body)


_REASONS: Dict[int, str] = {s.value: f"{s.value} {s.phrase}" for s in http.HTTPStatus}


def status_line(status: int) -> str:
    """``429`` -> ``"429 Too Many Requests"`` (WSGI's status string)."""
    line = _REASONS.get(status)
    return line if line is not None else f"{status} Unknown"
