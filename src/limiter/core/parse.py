"""Rate strings to numbers: ``"10/second"``, ``"10 per 5 minutes"``, ``"10/second;1000/hour"``."""

from __future__ import annotations

import math
import re
from typing import List, Optional, Tuple

from limiter.core._values import MAX_RATE, MIN_RATE, burst_value, show

#: Milliseconds per unit, for every accepted spelling (any case).  Each is
#: listed: a generic "strip a trailing s" once read "ms" as minutes and let
#: "ss" and "hs" through.  Integers, so ``Limit.parse`` divides exactly.
_UNITS = {
    **dict.fromkeys(("ms", "msec", "msecs", "millisecond", "milliseconds"), 1),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1000),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60_000),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3_600_000),
    **dict.fromkeys(("d", "day", "days"), 86_400_000),
}
_RATE_RE = re.compile(
    r"^\s*(?P<count>[0-9]+)\s*(?:/|\s+per\s+)\s*(?P<span>[0-9]+)?\s*(?P<unit>[a-z]+)\s*$",
    re.IGNORECASE,
)

_RATE_SEPARATORS = re.compile(r"[;,]")


def looks_like_rate(text: str) -> bool:
    """True when ``text`` reads as a rate to ``Limit.parse_many``, in range or not
    (``"0/second"`` does; ``"user/42"``, ``"GET /items"`` and ``"5/minute;"`` do not).
    """
    for part in _RATE_SEPARATORS.split(text):
        match = _RATE_RE.match(part)
        if not match or match.group("unit").lower() not in _UNITS:
            return False
    return True


def parse_period(text: str) -> Tuple[int, float]:
    """``(count, seconds)`` of a rate string (``parse_rate``'s grammar and errors):
    ``"10 per 5 minutes"`` is ``(10, 300.0)``.
    """
    count = parse_rate(text)[1]
    match = _RATE_RE.match(text)
    assert match is not None  # parse_rate accepted it
    span = int(match.group("span") or 1)
    try:
        return count, span * _UNITS[match.group("unit").lower()] / 1000
    except OverflowError:  # beyond a float: out of range like inf, which the policy refuses
        return count, math.inf


def parse_rate(text: str, burst: Optional[int] = None) -> Tuple[float, int]:
    """``(rate, N)`` of ``"N/unit"``, ``"N per unit"``, ``"N/M units"`` or ``"N per M units"``
    (``N``, ``M`` >= 1; ``_UNITS``, any case).  Not parsing: ``ValueError``; not a
    ``str``: ``TypeError``; ``burst`` is checked first.
    """
    if not isinstance(text, str):
        raise TypeError(f"rate must be a str like '10/second', got {show(text)}")
    if burst is not None:
        burst_value(burst)  # its own error first, not one about the text
    match = _RATE_RE.match(text)
    unit = match and _UNITS.get(match.group("unit").lower())
    if not match or unit is None:
        raise ValueError(
            f"rate must be a str like '10/second' or '10 per 5 minutes' (units: ms, s, "
            f"m, h, d, or msec, sec, min, hr, day, or millisecond, second, minute, hour "
            f"and their plurals), got {show(text)}"
        )
    try:
        count = int(match.group("count"))
        span = int(match.group("span") or 1)
    except ValueError:  # beyond sys.get_int_max_str_digits(), so beyond a float
        raise ValueError(
            f"rate must be a number of tokens per second from {MIN_RATE!r} to "
            f"{MAX_RATE!r}, got {show(text)}"
        ) from None
    if count < 1 or span < 1:
        raise ValueError(f"rate must allow at least 1 request per span >= 1, got {show(text)}")
    try:
        # int / int: the correctly rounded rate, even for 1/ms or huge spans.
        rate = count * 1000 / (span * unit)
    except OverflowError:  # beyond a float: out of range like inf
        rate = math.inf
    return rate, count


def split_rates(text: str) -> List[str]:
    """The rates of ``"10/second;1000/hour"`` (``;`` or ``,`` between them), each stripped;
    an empty one is a ``ValueError``, a non-``str`` a ``TypeError``.
    """
    if not isinstance(text, str):
        raise TypeError(f"rate must be a str like '10/second', got {show(text)}")
    parts = [part.strip() for part in _RATE_SEPARATORS.split(text)]
    if not all(parts):
        raise ValueError(f"rate must not have an empty limit between separators, got {show(text)}")
    return parts
