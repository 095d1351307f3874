"""Calendar quotas: ``count`` units per hour, day, week or month in a time zone.

A fixed window with calendar bounds: its counting is ``limiter.core.window``'s
(rules 2 to 7 there); its windows are described in docs/policies.md.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal, Optional, Tuple, Union

from limiter.core._values import Frozen, show, whole_count
from limiter.core.costs import counted_cost
from limiter.core.limits import TIME_EPSILON
from limiter.core.result import RateLimitResult
from limiter.core.state import State
from limiter.core.window import count_step, counting_fields

#: Seconds in each period's nominal window (``Quota.rate``, ``interval``); a month is
#: a Gregorian average.
_QUOTA_PERIODS = {"hour": 3600.0, "day": 86400.0, "week": 604800.0, "month": 2629746.0}


class _Window:
    """The last window a ``Quota`` found (its cache, not one of its fields)."""

    __slots__ = ("bounds", "window")

    def __init__(self, window: float) -> None:
        # (start, end) is one tuple, replaced whole: threads read a consistent pair.
        self.bounds = (0.0, 0.0)
        self.window = window


class Quota(Frozen):
    """A calendar quota: ``count`` units (an int from 1 to 2**53, else ``TypeError``) per
    ``per`` ("hour", "day", "week", "month") from one local boundary in ``tz`` (an IANA
    name, default ``"UTC"``) to the next: a day may last 23 or 25 hours, a week starts
    on Monday.  At exhaustion ``retry_after`` is the seconds to the next boundary
    (``inf`` for a cost above ``count``).  An unknown ``per`` or ``tz`` is a
    ``ValueError``.  ``name`` defaults to ``"<count>/<per>"`` (plus ``" <tz>"`` off UTC);
    ``rate`` and ``interval`` are nominal, ``window`` the current window's seconds.
    Guide: docs/policies.md#calendar-quotas.
    """

    kind: ClassVar[Literal["quota"]] = "quota"
    _params = ("count", "per", "tz")
    _positional = 1

    count: int
    per: str
    tz: str
    _tzinfo: Any
    _last: _Window

    def __init__(
        self, count: int, per: str = "day", tz: str = "UTC", name: Optional[str] = None
    ) -> None:
        whole_count(count, "quota count")
        if per not in _QUOTA_PERIODS:
            raise ValueError(f"quota per must be 'hour', 'day', 'week' or 'month', got {per!r}")
        if not isinstance(tz, str):
            raise TypeError(f"quota tz must be a time zone name (str), got {show(tz)}")
        tzinfo = _time_zone(tz)
        if name is None:
            name = f"{count}/{per}" if tz == "UTC" else f"{count}/{per} {tz}"
        nominal = _QUOTA_PERIODS[per]
        fields = counting_fields(count, nominal)
        self._freeze(
            name, count, nominal, per=per, tz=tz, _tzinfo=tzinfo, **fields, _last=_Window(nominal)
        )

    @property
    def window(self) -> float:
        """Seconds in the last window this quota computed (the current one), nominal before."""
        return self._last.window

    def bounds(self, now: float) -> Tuple[float, float]:
        """``(start, end)`` in Unix seconds of the window holding ``now`` (cached); ``now``
        outside the years 1 to 9998 is a ``ValueError``.
        """
        last = self._last
        cached = last.bounds
        if cached[0] <= now < cached[1]:
            return cached
        from datetime import datetime, timedelta

        tz = self._tzinfo
        try:
            # Whole seconds: every boundary is one, and fromtimestamp would round
            # a reading a fraction of a microsecond before one up onto it.
            local = datetime.fromtimestamp(math.floor(now), tz)
            if self.per == "hour":
                start, end = _hour_bounds(local, math.floor(now), tz)
            else:
                first = local.date()
                if self.per == "week":
                    first -= timedelta(days=first.weekday())
                elif self.per == "month":
                    first = first.replace(day=1)
                after = self._next_start(first)
                # Midnight as a wall time: in a daylight-saving gap it maps to the
                # first instant of the day (PEP 495, fold=0); read twice (a
                # fall-back across midnight), its first reading.
                start = datetime(first.year, first.month, first.day, tzinfo=tz).timestamp()
                end = datetime(after.year, after.month, after.day, tzinfo=tz).timestamp()
                # A clock set back across midnight (America/St_Johns) reads the
                # day before again: those instants are the new day's, so step on.
                while end <= now:
                    first, after = after, self._next_start(after)
                    start = end
                    end = datetime(after.year, after.month, after.day, tzinfo=tz).timestamp()
        except (OverflowError, OSError, ValueError):
            raise ValueError(
                f"now must be a number of seconds within the years 1 to 9998, got {now!r}"
            ) from None
        found = (start, end)
        last.bounds = found
        last.window = end - start
        return found

    def _next_start(self, first: Any) -> Any:
        """The date that starts the window after the one starting on the date ``first``."""
        from datetime import timedelta

        if self.per != "month":
            return first + timedelta(days=1 if self.per == "day" else 7)
        if first.month == 12:
            return first.replace(year=first.year + 1, month=1)
        return first.replace(month=first.month + 1)

    @property
    def label(self) -> str:
        """This policy in a limiter's default name (``"100/day@UTC"``)."""
        return f"{self.count}/{self.per}@{self.tz}"

    def numbered(self, i: int) -> Quota:
        """This quota named apart as the ``i``-th of a limiter's policies."""
        return self.renamed(f"{self.count}/{self.per}#{i}")

    def step(
        self, state: Optional[State], now: float, cost: float = 1, detail: bool = True
    ) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
        """``step`` for this quota (``limiter.core.bucket.step`` hands it over)."""
        value, forced, taken = counted_cost(cost, self.count, now)  # step's errors, in its order
        start, end = self.bounds(now + TIME_EPSILON)
        return count_step(state, now, self, value, forced, taken, start, end, detail)

    def __str__(self) -> str:
        return f"{self.count}/{self.per} ({self.name})"


def _hour_bounds(local: Any, now: int, tz: Any) -> Tuple[float, float]:
    """The local hour holding ``now`` (whole seconds; ``local`` is it in ``tz``): from where
    the clock reads or jumps over a whole hour to the next (docs/policies.md).
    """
    from datetime import timedelta

    base = local.replace(minute=0, second=0, microsecond=0, tzinfo=None, fold=0)
    found = []
    for hours in (-2, -1, 0, 1, 2, 3):
        wall = base + timedelta(hours=hours)
        # fold=0 is the first reading; fold=1 counts only when it is a second
        # reading.  A wall time in a gap is never read: its hour starts at the
        # instant the clock jumped over it, which fold=0 (the offset before the
        # jump) gives only for a jump that starts on it: Pacific/Chatham jumps
        # from 02:45 to 03:45, so 03:00's hour starts at 02:45 (bisected).
        first = wall.replace(tzinfo=tz).timestamp()
        second = wall.replace(tzinfo=tz, fold=1).timestamp()
        if _wall(first, tz) != wall and second != first:  # in a gap
            found.append(_jump_over(wall, min(first, second), max(first, second), tz))
            continue
        found.append(first)
        if second != first and _wall(second, tz) == wall:
            found.append(second)
    before = [t for t in found if t <= now]
    after = [t for t in found if t > now]
    start = max(before) if before else float(now)
    return start, (min(after) if after else start + 3600.0)


def _jump_over(wall: Any, low: float, high: float, tz: Any) -> float:
    """The jump's instant: the first whole second in ``(low, high]`` past the gap's ``wall``."""
    lo, hi = math.floor(low), math.ceil(high)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _wall(mid, tz) > wall:
            hi = mid
        else:
            lo = mid
    return float(hi)


def _wall(t: float, tz: Any) -> Any:
    """The naive local wall time of the Unix time ``t`` in ``tz``."""
    from datetime import datetime

    return datetime.fromtimestamp(t, tz).replace(tzinfo=None)


def _time_zone(tz: str) -> Any:
    """The ``tzinfo`` of ``tz``: UTC without the tz database, else ``zoneinfo``."""
    import datetime

    if tz == "UTC":
        return datetime.timezone.utc
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f"quota tz must be an IANA time zone name such as 'Europe/Paris', got {tz!r} "
            "(on a system without a time zone database, pip install tzdata)"
        ) from None
