"""Rate-limit response headers, built from a result; pure formatting, no I/O."""

from __future__ import annotations

import math
import re
from typing import Dict, List, Literal, Mapping, Optional, Tuple

from limiter.clock import finite_seconds
from limiter.core.bucket import next_token_in
from limiter.core.limits import TIME_EPSILON
from limiter.core.result import RateLimitResult

HeaderStyle = Literal["x", "draft", "both"]
_STYLES = ("x", "draft", "both")
#: The draft's registered quota units (its ``qu`` parameter); "requests" is the
#: default, never sent.
QUOTA_UNITS = ("requests", "content-bytes", "concurrent-requests")

#: The largest Structured Field Integer (RFC 9651, section 3.3.1: at most 15 digits).
SF_INT_MAX = 999_999_999_999_999
_INF = math.inf
# The rule of ``Limit.name``: quoted, a valid sf-string with nothing to escape.
_NAME_RE = re.compile(r"[ !#-\[\]-~]+")
# (name, burst, window, unit) -> (policy item, quoted name); bounded against ever-new names.
_POLICIES: Dict[Tuple[str, int, Optional[float], Optional[str]], Tuple[str, str]] = {}
_POLICIES_MAX = 256
# int -> (str, latin-1 bytes); exact ints only (True == 1, 2.0 == 2).
_LIMITS: Dict[int, Tuple[str, bytes]] = {}
# X-RateLimit-Reset changes once a second at most. One tuple, replaced whole,
# so threads see the old or the new one.
_RESET: Tuple[int, str, bytes] = (0, "0", b"0")
_ceil = math.ceil
_isfinite = math.isfinite
_X_NAMES = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")
_LIMIT, _REMAINING, _RESET_AT, _RETRY = _X_NAMES
_RAW_LIMIT, _RAW_REMAINING, _RAW_RESET_AT, _RAW_RETRY = (n.encode("latin-1") for n in _X_NAMES)


def validate_style(style: Optional[str]) -> Optional[HeaderStyle]:
    """Return ``style`` if ``"x"``, ``"draft"``, ``"both"`` or ``None``; else ``ValueError``
    (``TypeError`` for a non-``str``)."""
    if style is None:
        return None
    if style not in _STYLES:
        error = ValueError if isinstance(style, str) else TypeError
        raise error(f"header style must be one of 'x', 'draft', 'both' or None, got {style!r}")
    return style  # type: ignore[return-value]


def validate_units(units: object, param: str = "quota_units") -> Dict[str, str]:
    """``units`` (limit names to quota units) as a plain ``dict``; ``None`` is ``{}``.

    Each unit is one of ``QUOTA_UNITS``.  ``TypeError`` for a wrong type,
    ``ValueError`` for an unknown unit or a bad name, naming ``param``.
    """
    if units is None:
        return {}
    if not isinstance(units, Mapping):
        raise TypeError(f"{param} must be a mapping of limit names to units, got {units!r:.100}")
    checked = {}
    for name, unit in units.items():
        _quoted_name(name, f"{param} name")
        if unit not in QUOTA_UNITS:
            error = ValueError if isinstance(unit, str) else TypeError
            raise error(
                f"{param}[{name!r}] must be one of 'requests', 'content-bytes', "
                f"'concurrent-requests', got {unit!r:.100}"
            )
        checked[name] = unit
    return checked


def retry_seconds(result: RateLimitResult) -> Optional[int]:
    """``Retry-After`` of ``result``: whole seconds, at least 1; ``None`` when allowed or never."""
    if not result.allowed and result.retry_after < _INF:  # neither inf nor NaN
        return max(1, _up(result.retry_after))
    return None


def _up(seconds: float) -> int:
    # Float noise below the bucket's slack (2.0000000000000004) is not a second more.
    return max(0, math.ceil(seconds - TIME_EPSILON))


def _quoted_name(name: object, param: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{param} must be a str, got {name!r}")
    if not _NAME_RE.fullmatch(name):
        raise ValueError(
            f"{param} must be non-empty printable ASCII without quotes or backslashes, got {name!r}"
        )
    return f'"{name}"'


def _policy(
    name: str, limit: int, window: Optional[float], param: str, unit: Optional[str] = None
) -> Tuple[str, str]:
    """``('"<name>";q=<q>[;qu="<unit>"];w=<w>', '"<name>"')`` for one limit (cached:
    a policy is constant). ``unit`` ``None`` or ``"requests"``: no ``qu``, the default.
    ``window`` ``None`` (a ``Concurrency`` policy's slots): ``q`` the slots, no ``w``."""
    if limit.__class__ is not int:
        # A hand-built result's True or 2.0: as an int, so "q=True" is neither
        # sent nor cached under the key of 1 (True == 1 hashes alike).
        limit = int(limit)
    key = (name, limit, window, unit)
    try:
        return _POLICIES[key]
    except (KeyError, TypeError):  # TypeError: an unhashable name, refused just below
        pass
    quoted = _quoted_name(name, param)
    qu = "" if unit is None or unit == "requests" else f';qu="{unit}"'
    if window is None:  # a Concurrency policy's slots: the draft's w is optional
        item = f"{quoted};q={min(max(limit, 0), SF_INT_MAX)}{qu}"
    else:
        quota, seconds = limit, 1
        if window >= 1.0:
            seconds = _up(window)
        elif window > 0.0:
            # "w" must be a non-zero integer (docs/headers.md). The nudge keeps
            # 1 / (1 / 93) = 92.99999999999999 from losing a token.
            per_second = limit / window * (1.0 + 1e-12)
            quota = math.floor(per_second) if per_second < SF_INT_MAX else SF_INT_MAX
        # else: no result from a Limit has such a window (or NaN); never divide by it
        item = f"{quoted};q={min(max(quota, 0), SF_INT_MAX)}{qu};w={min(seconds, SF_INT_MAX)}"
    if len(_POLICIES) >= _POLICIES_MAX:
        _POLICIES.clear()
    _POLICIES[key] = (item, quoted)
    return item, quoted


def rate_limit_headers(
    result: RateLimitResult,
    *,
    now: float,
    style: str = "x",
    policy: Optional[str] = None,
    quota_units: Optional[Mapping[str, str]] = None,
) -> List[Tuple[str, str]]:
    """The headers that tell a client where it stands, as ``(name, value)`` pairs.

    ``now``: Unix seconds.  ``style``: ``"x"`` (``X-RateLimit-Limit``,
    ``-Remaining``, ``-Reset``; the most restrictive limit), ``"draft"``
    (``RateLimit-Policy`` and ``RateLimit``, one item per limit; ``policy``
    renames a single limit, ``quota_units`` maps limit names to the draft's
    units) or ``"both"``.

    A denied result that can pass later adds ``Retry-After`` (whole seconds,
    >= 1).  ``ValueError`` for a bad style, ``policy`` (non-empty printable
    ASCII without ``"`` or ``\\``), unit or ``now``; ``TypeError`` for a wrong
    type.  Field by field: docs/headers.md.
    """
    if result.__class__ is not RateLimitResult and not isinstance(result, RateLimitResult):
        raise TypeError(f"result must be a RateLimitResult, got {result!r:.100}")
    if now.__class__ is not float or not _isfinite(now):  # an int, a bool, inf, 10**400...
        now = finite_seconds(now, "now")
    if policy is not None:
        _quoted_name(policy, "policy")
    if style not in _STYLES:  # inline: see CONTRIBUTING.md
        validate_style(style)
    units = validate_units(quota_units) if quota_units is not None else None
    return build_headers(result, now, style, policy, units)


def build_headers(
    result: RateLimitResult,
    now: float,
    style: Optional[str],
    policy: Optional[str] = None,
    units: Optional[Mapping[str, str]] = None,
) -> List[Tuple[str, str]]:
    """``rate_limit_headers`` with ``style`` and ``units`` validated once (the adapters).

    ``style=None`` keeps only ``Retry-After`` on a denied result.
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
    retry = retry_seconds(result)
    headers = []
    if style == "both":
        headers.append((_LIMIT, str(result.limit)))
        headers.append((_REMAINING, str(result.remaining)))
        headers.append((_RESET_AT, str(_up(now + result.reset_after))))
    if style is not None:
        headers += _draft(result, retry, policy, units)
    if retry is not None:
        headers.append((_RETRY, str(retry)))
    return headers


def _draft(
    result: RateLimitResult,
    retry: Optional[int],
    policy: Optional[str],
    units: Optional[Mapping[str, str]],
) -> List[Tuple[str, str]]:
    """The draft's ``RateLimit-Policy`` and ``RateLimit`` (``retry``: the ``Retry-After``;
    ``units``: limit names to quota units)."""
    parts = result.results or (result,)
    one = len(parts) == 1 or (len(parts) == 2 and parts[1].kind == "lockout")
    policies = []
    limits = []
    # Locked out: no limit's ``t`` applies until the lockout ends.
    locked = result.kind == "lockout" and not result.allowed
    for part in parts:
        kind = part.kind
        # A lockout counts breaches: it has no unit of the draft's.
        unit = units.get(part.policy) if units and kind != "lockout" else None
        window: Optional[float] = part.window
        if kind == "concurrency":  # slots: no window, and no time when one frees
            unit, window = "concurrent-requests", None
        if one and policy is not None and kind != "lockout":
            item, name = _policy(policy, part.limit, window, "policy", unit)
        else:
            item, name = _policy(part.policy, part.limit, window, "result.policy", unit)
        policies.append(item)
        remaining = min(max(part.remaining, 0), SF_INT_MAX)
        seconds = next_token_in(part)  # the draft's t: until one more whole token (0: full)
        until = _up(seconds) if seconds > 0.0 else 0
        if window is None or (
            retry is not None and (until > retry or (locked and part is not parts[-1]))
        ):
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
    result: RateLimitResult,
    now: float,
    style: Optional[str],
    units: Optional[Mapping[str, str]] = None,
) -> List[Tuple[bytes, bytes]]:
    """``build_headers(result, now, style, None, units)`` with names and values encoded
    as latin-1 (ASGI)."""
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
        for name, value in build_headers(result, now, style, None, units)
    ]
