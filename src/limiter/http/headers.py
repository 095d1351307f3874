"""Rate-limit response headers, built from a result; pure formatting, no I/O."""

from __future__ import annotations

import math
import re
from typing import Dict, List, Literal, Optional, Tuple

from limiter.clock import finite_seconds
from limiter.core.bucket import next_token_in
from limiter.core.limits import TIME_EPSILON
from limiter.core.result import RateLimitResult

HeaderStyle = Literal["x", "draft", "both"]
_STYLES = ("x", "draft", "both")

#: The largest Structured Field Integer (RFC 9651, section 3.3.1: at most 15 digits).
SF_INT_MAX = 999_999_999_999_999
_INF = math.inf
# A policy name: printable ASCII without '"' or '\', the rule of ``Limit.name``.
# Every such text is a valid sf-string once quoted, with nothing to escape.
_NAME_RE = re.compile(r"[ !#-\[\]-~]+")
# (name, burst, window) -> (RateLimit-Policy item, quoted name).  A limiter has a
# handful of policies; the bound only stops a caller's ever-new names from growing it.
_POLICIES: Dict[Tuple[str, int, float], Tuple[str, str]] = {}
_POLICIES_MAX = 256
# A limit's value is the same on every response: int -> (str, latin-1 bytes),
# bounded like _POLICIES.  Only exact ints are looked up (True == 1, 2.0 == 2).
_LIMITS: Dict[int, Tuple[str, bytes]] = {}
# X-RateLimit-Reset changes once a second at most: the last one, as an int
# (math.ceil's), str and bytes.  One tuple, replaced whole: threads see either.
_RESET: Tuple[int, str, bytes] = (0, "0", b"0")
_ceil = math.ceil
_isfinite = math.isfinite
#: The header table: the ``"x"`` style's names (and ``Retry-After``), as ``str`` and as
#: the latin-1 ``bytes`` that ``build_raw_headers`` sends.
_X_NAMES = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")
_LIMIT, _REMAINING, _RESET_AT, _RETRY = _X_NAMES
_RAW_LIMIT, _RAW_REMAINING, _RAW_RESET_AT, _RAW_RETRY = (n.encode("latin-1") for n in _X_NAMES)


def validate_style(style: Optional[str]) -> Optional[HeaderStyle]:
    """Return ``style`` if it is ``"x"``, ``"draft"``, ``"both"`` or ``None`` (no headers).

    Any other ``str`` is a ``ValueError``, anything else a ``TypeError``.
    """
    if style is None:
        return None
    if style not in _STYLES:
        error = ValueError if isinstance(style, str) else TypeError
        raise error(f"header style must be one of 'x', 'draft', 'both' or None, got {style!r}")
    return style  # type: ignore[return-value]


def _up(seconds: float) -> int:
    # Whole seconds, rounded up, never negative.  Float noise below the bucket's
    # slack (2.0000000000000004 after twenty steps of 0.1) is not a second more.
    return max(0, math.ceil(seconds - TIME_EPSILON))


def _quoted_name(name: object, param: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{param} must be a str, got {name!r}")
    if not _NAME_RE.fullmatch(name):
        raise ValueError(
            f"{param} must be non-empty printable ASCII without quotes or backslashes, got {name!r}"
        )
    return f'"{name}"'


def _policy(name: str, limit: int, window: float, param: str) -> Tuple[str, str]:
    """``('"<name>";q=<q>;w=<w>', '"<name>"')`` for one limit (cached: a policy is constant)."""
    key = (name, limit, window)
    try:
        return _POLICIES[key]
    except (KeyError, TypeError):  # TypeError: an unhashable name, refused just below
        pass
    quoted = _quoted_name(name, param)
    if window >= 1.0:
        quota, seconds = limit, _up(window)
    elif window > 0.0:
        # "w" must be a non-zero integer: a window under a second is advertised as
        # one second and the quota as the whole tokens refilled in it (the rate
        # rounded down, >= the burst as the window is < 1), so q/w does not
        # understate the rate.  The nudge keeps 1 / (1 / 93) = 92.99999999999999
        # from losing a token.
        per_second = limit / window * (1.0 + 1e-12)
        quota = math.floor(per_second) if per_second < SF_INT_MAX else SF_INT_MAX
        seconds = 1
    else:  # no result from a Limit has such a window (or NaN); never divide by it
        quota, seconds = limit, 1
    item = f"{quoted};q={min(max(quota, 0), SF_INT_MAX)};w={min(seconds, SF_INT_MAX)}"
    if len(_POLICIES) >= _POLICIES_MAX:
        _POLICIES.clear()
    _POLICIES[key] = (item, quoted)
    return item, quoted


def _until_more(result: RateLimitResult) -> int:
    """The draft's ``t``: whole seconds until the bucket holds one more whole token.

    A token bucket makes quota available continuously; ``r`` (whole tokens) grows
    when the next token is complete, ``interval`` seconds apart, the last one at
    ``reset_after`` (full).  A full bucket gets no more: 0.  A calendar quota
    (``kind`` ``"quota"``) gets all its units back at once, at ``reset_after``, and
    so does a lockout (``"lockout"``): all at its end.
    """
    seconds = next_token_in(result)
    return _up(seconds) if seconds > 0.0 else 0


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
      and ``RateLimit: "<name>";r=<remaining>;t=<seconds until one more token>``
      (``t=0`` when full); with several limits, one list item per limit.  ``w``
      is rounded up and at least 1: a window under a second is sent as ``w=1``
      with ``q`` the whole tokens refilled per second.  Integers above the
      Structured Field maximum (15 digits) are capped at ``999999999999999``.
      The name is the limit's (``"default"``) unless ``policy`` overrides it
      for a single limit (with several, each keeps its limit's name).
    * ``"both"``: all of the above.

    A key locked out by a ``Lockout`` (a refusing result of ``kind`` ``"lockout"``) gets
    ``X-RateLimit-Limit`` of the most restrictive limit, ``Remaining`` 0,
    ``Reset`` and ``Retry-After`` at the lockout's end; the draft headers list
    each limit (as it stands: nothing was taken; without ``t``, which would
    point earlier than the lockout lets anyone back in) and the lockout, as
    ``"<name>";q=<breaches>;w=<within>`` and ``"<name>";r=0;t=<seconds left>``.

    Every style adds ``Retry-After`` (whole seconds, rounded up, at least 1) to a
    denied result, except when the request can never pass (cost above burst,
    ``retry_after`` infinite): then it is left out rather than print ``inf``.
    With ``Retry-After``, an item whose ``t`` would point later than it is sent
    without ``t`` (the draft: Retry-After SHOULD NOT point earlier than ``t``).

    ``policy`` (and every limit name) must be non-empty printable ASCII without
    ``"`` or ``\\``, as ``Limit.name`` is: a ``ValueError`` otherwise, and a
    ``TypeError`` if it is not a ``str``; ``now`` must be a finite number.
    """
    if result.__class__ is not RateLimitResult and not isinstance(result, RateLimitResult):
        raise TypeError(f"result must be a RateLimitResult, got {result!r:.100}")
    if now.__class__ is not float:  # an int, a bool, a Decimal, 10**400...: the one check
        now = finite_seconds(now, "now")
    elif not _isfinite(now):
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    if policy is not None:
        _quoted_name(policy, "policy")
    if style not in _STYLES:  # inline: see CONTRIBUTING.md
        validate_style(style)
    return build_headers(result, now, style, policy)


def build_headers(
    result: RateLimitResult, now: float, style: Optional[str], policy: Optional[str] = None
) -> List[Tuple[str, str]]:
    """``rate_limit_headers`` for callers that validated ``style`` once (the adapters).

    ``style=None`` (rate-limit headers switched off) keeps only ``Retry-After``
    on a denied result: it is HTTP's own answer to "when may I retry".
    """
    if style == "x":  # the common case, kept to the bare minimum of work per request
        limit = result.limit
        cached = _LIMITS.get(limit) if limit.__class__ is int else None
        # _up, inline (a call costs as much as the rest of the line)
        reset = _ceil(now + result.reset_after - TIME_EPSILON)
        last = _RESET
        headers = [
            (_LIMIT, _limit_text(limit)[0] if cached is None else cached[0]),
            (_REMAINING, str(result.remaining)),
            (_RESET_AT, last[1] if last[0] == reset else _reset_text(reset)[1]),
        ]
        if not result.allowed and result.retry_after < _INF:  # neither inf nor NaN
            headers.append((_RETRY, str(max(1, _up(result.retry_after)))))
        return headers
    retry = (
        max(1, _up(result.retry_after))
        if not result.allowed and result.retry_after < _INF
        else None
    )
    headers = []
    if style == "both":
        headers.append((_LIMIT, str(result.limit)))
        headers.append((_REMAINING, str(result.remaining)))
        headers.append((_RESET_AT, str(_up(now + result.reset_after))))
    if style is not None:
        headers += _draft(result, retry, policy)
    if retry is not None:
        headers.append((_RETRY, str(retry)))
    return headers


def _draft(
    result: RateLimitResult, retry: Optional[int], policy: Optional[str]
) -> List[Tuple[str, str]]:
    """The draft's ``RateLimit-Policy`` and ``RateLimit`` (``retry``: the ``Retry-After``)."""
    parts = result.results or (result,)
    # One limit, beside a lockout's own result or not: ``policy`` names it.
    one = len(parts) == 1 or (len(parts) == 2 and parts[1].kind == "lockout")
    policies = []
    limits = []
    # Locked out: no limit's own ``t`` applies until the lockout ends.
    locked = result.kind == "lockout" and not result.allowed
    for part in parts:
        if one and policy is not None and part.kind != "lockout":
            item, name = _policy(policy, part.limit, part.window, "policy")
        else:
            item, name = _policy(part.policy, part.limit, part.window, "result.policy")
        policies.append(item)
        remaining = min(max(part.remaining, 0), SF_INT_MAX)
        until = _until_more(part)
        if retry is not None and (until > retry or (locked and part is not parts[-1])):
            limits.append(f"{name};r={remaining}")
        else:
            limits.append(f"{name};r={remaining};t={min(until, SF_INT_MAX)}")
    return [("RateLimit-Policy", ", ".join(policies)), ("RateLimit", ", ".join(limits))]


def _limit_text(limit: int) -> Tuple[str, bytes]:
    """``limit`` as ``str`` and as bytes, cached for exact ints."""
    text = str(limit)
    pair = (text, text.encode("latin-1"))
    if limit.__class__ is int:
        if len(_LIMITS) >= _POLICIES_MAX:
            _LIMITS.clear()
        _LIMITS[limit] = pair
    return pair


def _reset_text(reset: int) -> Tuple[int, str, bytes]:
    """``_RESET`` for ``reset`` (math.ceil's value; below 0 it is sent as 0)."""
    global _RESET
    text = str(reset) if reset > 0 else "0"
    _RESET = last = (reset, text, text.encode("latin-1"))
    return last


def build_raw_headers(
    result: RateLimitResult, now: float, style: Optional[str]
) -> List[Tuple[bytes, bytes]]:
    """``build_headers(result, now, style)`` with names and values encoded as latin-1.

    The form ASGI sends: the same headers, in the same order, built without
    the ``str`` step for the common ``"x"`` style.
    """
    if style == "x":  # build_headers' first branch in bytes (CONTRIBUTING.md, "Hot paths")
        limit = result.limit
        cached = _LIMITS.get(limit) if limit.__class__ is int else None
        reset = _ceil(now + result.reset_after - TIME_EPSILON)
        last = _RESET
        headers = [
            (_RAW_LIMIT, _limit_text(limit)[1] if cached is None else cached[1]),
            (_RAW_REMAINING, str(result.remaining).encode("latin-1")),
            (_RAW_RESET_AT, last[2] if last[0] == reset else _reset_text(reset)[2]),
        ]
        if not result.allowed and result.retry_after < _INF:
            headers.append((_RAW_RETRY, str(max(1, _up(result.retry_after))).encode("latin-1")))
        return headers
    return [
        (name.encode("latin-1"), value.encode("latin-1"))
        for name, value in build_headers(result, now, style)
    ]
