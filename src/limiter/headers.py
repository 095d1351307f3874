"""Rate-limit response headers, built from a result; pure formatting, no I/O."""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

from typing_extensions import Literal

from .bucket import TIME_EPSILON, RateLimitResult

__all__ = ["HeaderStyle", "build_headers", "rate_limit_headers", "validate_style"]

HeaderStyle = Literal["x", "draft", "both"]
_STYLES = ("x", "draft", "both")


def validate_style(style: str) -> HeaderStyle:
    """Return ``style`` if it is ``"x"``, ``"draft"`` or ``"both"``; else ``ValueError``."""
    if style not in _STYLES:
        raise ValueError(f"header style must be one of 'x', 'draft', 'both', got {style!r}")
    return style  # type: ignore[return-value]


def _up(seconds: float) -> int:
    # Whole seconds, rounded up, never negative.  Float noise below the bucket's
    # slack (2.0000000000000004 after twenty steps of 0.1) is not a second more.
    return max(0, math.ceil(seconds - TIME_EPSILON))


def rate_limit_headers(
    result: RateLimitResult,
    *,
    now: float,
    style: str = "x",
    policy: Optional[str] = None,
) -> List[Tuple[str, str]]:
    """The headers that tell a client where it stands, as ``(name, value)`` pairs.

    ``now`` is the current Unix time in seconds (for ``X-RateLimit-Reset``).

    * ``"x"``: ``X-RateLimit-Limit`` (burst), ``X-RateLimit-Remaining`` (whole
      tokens), ``X-RateLimit-Reset`` (Unix time, seconds, rounded up, when the
      bucket is full again).  With several limits: the most restrictive one.
    * ``"draft"``: draft-ietf-httpapi-ratelimit-headers-10,
      ``RateLimit-Policy: "<name>";q=<burst>;w=<seconds to refill from empty>``
      and ``RateLimit: "<name>";r=<remaining>;t=<seconds until full>``; with
      several limits, one list item per limit.  The name is the limit's
      (``"default"``) unless ``policy`` overrides it for a single limit.
    * ``"both"``: all of the above.

    Every style adds ``Retry-After`` (whole seconds, rounded up, at least 1) to a
    denied result, except when the request can never pass (cost above burst,
    ``retry_after`` infinite): then it is left out rather than print ``inf``.
    """
    return build_headers(result, now, validate_style(style), policy)


def build_headers(
    result: RateLimitResult, now: float, style: str, policy: Optional[str] = None
) -> List[Tuple[str, str]]:
    """``rate_limit_headers`` for callers that validated ``style`` once (the adapters)."""
    if style == "x":  # the common case, kept to the bare minimum of work per request
        headers = [
            ("X-RateLimit-Limit", str(result[1])),
            ("X-RateLimit-Remaining", str(result[2])),
            ("X-RateLimit-Reset", str(_up(now + result[3]))),
        ]
        if not result[0] and result[4] != math.inf:
            headers.append(("Retry-After", str(max(1, _up(result[4])))))
        return headers
    headers = []
    if style != "draft":
        headers.append(("X-RateLimit-Limit", str(result.limit)))
        headers.append(("X-RateLimit-Remaining", str(result.remaining)))
        headers.append(("X-RateLimit-Reset", str(_up(now + result.reset_after))))
    if style != "x":
        parts = result.results or (result,)
        names = (
            [policy or r.policy for r in parts] if len(parts) == 1 else [r.policy for r in parts]
        )
        headers.append(
            (
                "RateLimit-Policy",
                ", ".join(f'"{n}";q={r.limit};w={_up(r.window)}' for n, r in zip(names, parts)),
            )
        )
        headers.append(
            (
                "RateLimit",
                ", ".join(
                    f'"{n}";r={r.remaining};t={_up(r.reset_after)}' for n, r in zip(names, parts)
                ),
            )
        )
    if not result.allowed and math.isfinite(result.retry_after):
        headers.append(("Retry-After", str(max(1, _up(result.retry_after)))))
    return headers
