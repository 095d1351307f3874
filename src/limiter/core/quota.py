"""Calendar quotas: ``count`` units per hour, day, week or month in a time zone, and their step.

A quota is a fixed window whose bounds come from the calendar: its counting
is ``limiter.core.window``'s (rules 2 to 7 there); windows (time zones,
daylight saving) in docs/concepts.md.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal, Optional, Tuple, Union

from limiter.core._values import Frozen, check_name, show, whole_count
from limiter.core.costs import counted_cost
from limiter.core.limits import TIME_EPSILON
from limiter.core.result import RateLimitResult
from limiter.core.state import State, keep_until
from limiter.core.window import count_step, counting_fields

#: Seconds in each quota period's nominal window, for ``Quota.rate`` and
#: ``Quota.interval`` only: a real window is its calendar span.  A month is a
#: Gregorian average (365.2425 days / 12).
_QUOTA_PERIODS = {"hour": 3600.0, "day": 86400.0, "week": 604800.0, "month": 2629746.0}

_new_result = tuple.__new__
_trunc = math.trunc


class _Window:
    """The last window a ``Quota`` found (its cache, not one of its fields)."""

    __slots__ = ("bounds", "window")

    def __init__(self, window: float) -> None:
        # (start, end) is one tuple, replaced whole: threads read a consistent pair.
        self.bounds = (0.0, 0.0)
        self.window = window


class Quota(Frozen):
    """A calendar quota: ``count`` units per ``per`` ("hour", "day", "week", "month").

    A window starts at the calendar boundary in the time zone ``tz`` (an IANA
    name such as ``"Europe/Paris"``; default ``"UTC"``) and lasts until the
    next one: a day is local midnight to midnight (23 or 25 hours on a
    daylight-saving change), a week starts on Monday 00:00 (ISO), a month on
    the 1st 00:00 and has its real length, an hour starts on the local hour
    and lasts until the next (3600 seconds, but 30 or 90 minutes across a
    change of half an hour, see ``_hour_bounds``).  At most ``count`` units (any real cost, as for
    ``Limit``) are admitted per window; at exhaustion ``retry_after`` is the
    exact number of seconds to the next boundary, and so is ``reset_after``.
    A cost above ``count`` is never admitted (``retry_after`` is ``inf``).
    Usable alone or beside token-bucket limits in one ``RateLimiter``, with
    which it is atomic (all admit or none is charged).

    ``count`` is an int from 1 to 2**53 (``TypeError`` for another type);
    ``per`` or ``tz`` not recognised is a ``ValueError``.  ``name`` labels the
    policy in headers (default ``"<count>/<per>"``, plus ``" <tz>"`` when not
    UTC).  ``burst`` is ``count``; ``rate`` and ``interval`` are nominal
    (``count`` per 3600, 86400, 604800 or 2629746 seconds) and only describe
    the quota; ``window`` is the length in seconds of the last window the
    quota computed (the current one), so a month's is 28 to 31 days.
    """

    kind: ClassVar[Literal["quota"]] = "quota"

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
        check_name(name)
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
        """``(start, end)`` in Unix seconds of the window holding ``now`` (``start <= now < end``).

        The last window found is cached, so a check within it does no time-zone
        arithmetic.  ``now`` outside the years 1 to 9998 is a ``ValueError``.
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
                # A clock set back across midnight reads the day before again
                # after the new day began (America/St_Johns, 1987-2010: 00:01
                # back to 23:01): those instants are the new day's.  So windows
                # run from one midnight's first reading to the next, and the one
                # holding now is found by stepping on (start <= now < end).
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

        if self.per == "day":
            return first + timedelta(days=1)
        if self.per == "week":
            return first + timedelta(days=7)
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

    def identity(self) -> Tuple[Any, ...]:
        """What makes two quotas equal: ``(count, per, tz)``."""
        return (self.count, self.per, self.tz)

    def step(
        self, state: Optional[State], now: float, cost: float = 1, detail: bool = True
    ) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
        """``step`` for this quota (``limiter.core.bucket.step`` hands it over)."""
        value, forced, taken = counted_cost(cost, self.count, now)  # step's errors, in its order
        start, end = self.bounds(now + TIME_EPSILON)
        return count_step(state, now, self, value, forced, taken, start, end, detail)

    def keep_until(self, state: State) -> float:
        """The end of the window of ``state`` (seconds), when it is forgotten."""
        return keep_until(state)

    def __repr__(self) -> str:
        return f"Quota({self.count!r}, per={self.per!r}, tz={self.tz!r}, name={self.name!r})"

    def __str__(self) -> str:
        return f"{self.count}/{self.per} ({self.name})"


def _hour_bounds(local: Any, now: int, tz: Any) -> Tuple[float, float]:
    """The local hour holding ``now`` (whole seconds; ``local`` is it in ``tz``).

    An hour starts where the local clock reads a whole hour, or jumps over
    one (a daylight-saving gap), and ends at the next such instant: not
    always 3600 s later, as some zones change by 30 minutes (Lord Howe's
    90- and 30-minute hours) or to or from a half-hour offset (Caracas 2007,
    Pyongyang 2015).  A whole hour read twice (a fold) starts a window each
    time.  The window holds ``now`` whatever the zone does.
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
    """The first whole second in ``(low, high]`` whose local wall time is past ``wall``.

    ``wall`` lies in a gap between ``low`` and ``high`` (its two readings, with
    the offsets before and after the jump): the result is the jump's instant.
    """
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
