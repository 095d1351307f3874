"""The token bucket: one pure function, ``step``.

Rules
-----
A bucket holds at most ``limit.burst`` tokens and refills continuously at
``limit.rate`` tokens per second.  A key never seen before owns a full bucket.

* A request of cost ``c`` is admitted when ``c`` tokens are in the bucket; it
  takes them.  Otherwise it is denied and takes nothing (all or nothing).
* ``c == 0`` is a peek: always "allowed", takes nothing, stores nothing.
* ``c > burst`` is never admitted, however close to ``burst``: it is denied
  with ``retry_after = inf`` (header builders leave ``Retry-After`` out rather
  than print ``inf``), and its result does not depend on how large it is.
* ``c`` is any real number, of any type and size (``validate_cost``): ``int``
  of any length, ``float``, ``Fraction``, ``Decimal``.  One too large for a
  float counts as ``inf`` (denied as above, never an ``OverflowError``); a
  positive one too small for a float counts as the smallest float (a charge,
  never a peek).  Negative or NaN ``c`` is a ``ValueError``; ``bool`` or
  anything that is not a number is a ``TypeError``.
* ``Refund(t)`` is the one negative cost: it gives ``t`` tokens back, is
  always admitted, and never fills a bucket beyond ``burst``.
* ``Charge(t)`` takes ``t`` tokens unconditionally (settling a cost known
  only after the response): always admitted, even from an empty bucket,
  which then owes tokens, and later requests are denied until the debt is
  repaid by refilling.  The debt is bounded: a bucket never holds fewer than
  ``-burst`` tokens (it owes at most one burst, ``Limit.max_debt`` = two
  windows of deficit), so one huge settled cost keeps a key waiting at most
  two windows.  A charge above the bound is taken up to it.
* A limit is accepted only where every float derived from it is exact or
  finite and normal: ``burst`` is an integer from 1 to 2**53 (so token counts
  are exact floats), ``rate`` lies between the smallest normal float
  (2.2e-308) and 4.49e304 tokens/s (``1 / rate`` and the slack are normal),
  and ``burst / rate`` is at most 2**1022 seconds (a bucket's largest deficit
  plus a charge stays finite).  Anything else is a ``ValueError`` at
  construction; a ``bool``, a non-number or a non-integer ``burst`` is a
  ``TypeError``.  In that range memory, SQLite and Redis compute the very same
  doubles, so they agree on every result.
* State written under another limit is read under this one, never below
  ``-burst`` tokens, the most a ``Charge`` can owe (a limit that shrinks
  does not lock keys out for longer than two of its own windows).
* A ``now`` earlier than the key's last update grants nothing and locks no
  one out.  Up to ``CLOCK_TOLERANCE`` (1 second) earlier, it is a reading
  taken before the store's lock while a request that read the clock later
  went first (threads, processes on one SQLite file, Redis with client
  clocks): the request is applied at the last update's time, as a store that
  read the clock under its lock would have: no refill, no re-anchoring (a
  state it stores keeps that time), and ``reset_after`` and ``retry_after``
  count from that time.  More than ``CLOCK_TOLERANCE`` earlier, it is a
  clock stepped backwards: the bucket holds what it held at its last update,
  and refilling resumes from the new, earlier reading (the state is
  re-anchored at ``now``, and stored, even when the request is denied).  A
  clock stepped back by less than the tolerance is taken for the former: the
  key gets no refill until the clock is back at its last update, at most
  ``CLOCK_TOLERANCE`` seconds.  Exactly ``CLOCK_TOLERANCE`` behind is still
  within it.

State
-----
The state of a key is two floats, held as one ``complex(debt, updated_at)``:
``updated_at`` is when the bucket last changed (seconds on the caller's clock)
and ``debt`` how many seconds it then lacked to be full (``tokens = burst -
debt * rate``).  One ``complex`` is a single 32-byte number where a tuple of
two floats takes 104 bytes and more time to pack and unpack (memory per
tracked key is a headline figure).  The deficit is kept as a small duration,
not as an absolute "full at" time, because floats near today's Unix time
resolve only 0.24 microseconds and rounding would pile up with every request.
The bucket is full again at ``updated_at + debt`` (``full_at``): stores can tell a full
bucket without knowing its limit, which is what lets them expire or sweep
keys (an absent key *is* a full bucket).

Being a float, ``debt`` resolves about 2**-52 of a window, so a request's
arithmetic may round by about ``burst * 2**-53`` tokens.  That is nothing for
any realistic burst, but from about 2**50 tokens (10**15) to the 2**53 bound
a request can be admitted or refused as if the bucket held a token or two
more or less than exact arithmetic says (about 10**-16 of the burst).

Comparisons carry a slack of ``TIME_EPSILON`` seconds (less at rates above
1000 tokens/s, see ``Limit.slack``): elapsed times between two readings near
today's Unix time are only precise to about 0.24 microseconds, and a client
that waits exactly ``retry_after`` must get in.

A ``Quota`` (a ``Limit`` subclass) counts units per calendar window
instead; ``step`` hands it to ``step_quota``, whose comment gives its rules
and state encoding.  A ``Lockout`` (also a ``Limit`` subclass, only ever
the last of ``step_all``'s limits) refuses a key for a while after repeated
denials; ``step_all``'s comment gives its rules.

Several limits are charged together by ``step_all``, each its own amount
when ``cost`` is a sequence (one cost per limit: requests and tokens).

This module does no I/O and reads no clock; stores call ``step`` under their
own atomicity (a lock, a transaction); ``backends/redis/bucket.lua`` mirrors
``step`` and ``step_all`` for Redis, checked against this file by a property
test.  ``validate_cost``, ``full_at`` and ``combine`` are the pieces stores
reuse rather than rewrite.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, NamedTuple, Optional, Sequence, Tuple, Union, overload

__all__ = [
    "CLOCK_TOLERANCE",
    "TIME_EPSILON",
    "Charge",
    "Cost",
    "Limit",
    "Lockout",
    "LockoutResult",
    "Quota",
    "QuotaResult",
    "RateLimitResult",
    "Refund",
    "State",
    "admit",
    "combine",
    "full_at",
    "step",
    "step_all",
    "step_quota",
    "validate_cost",
    "validate_costs",
]

#: Seconds of slack in every comparison (see the module docstring).
TIME_EPSILON = 1e-6

#: Seconds a ``now`` may lag a key's last update and still be taken for that
#: update's time rather than for a clock stepped backwards (see the module
#: docstring).  A store reads the clock before it takes its lock, so a request
#: can be applied after one that read the clock later; the lag is a scheduling
#: delay, a GIL switch (5 ms), a lock or SQLite busy wait or a Redis round
#: trip: milliseconds, far below a second.  Re-anchoring such a reading would
#: refill the lag twice.  Real backward steps are larger (ntpd steps only
#: beyond 128 ms, and slews below; VM restores and manual resets are seconds
#: to hours); one under the tolerance costs a key at most that long without
#: refill.  ``backends/redis/_store.py`` uses the same value.
CLOCK_TOLERANCE = 1.0

#: ``complex(debt, updated_at)``, both in seconds (see the module docstring).
State = complex

_ONE = 1  # ``cost is _ONE``: CPython's cached small int, the default cost

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
    """True when ``text`` reads as a rate to ``Limit.parse_many``, in range or not.

    ``"5/minute"``, ``"10 per second"``, ``"10/second;100/hour"`` and
    ``"0/second"`` do; ``"user/42"``, ``"GET /items"`` and ``"5/minute;"`` do
    not.  ``RateLimiter`` refuses such a string where a key is expected.
    """
    for part in _RATE_SEPARATORS.split(text):
        match = _RATE_RE.match(part)
        if not match or match.group("unit").lower() not in _UNITS:
            return False
    return True


#: The accepted range of a limit (see the module docstring): every rate from
#: the smallest normal float to the largest whose slack (``1e-3 / rate``) is
#: still normal, every burst up to 2**53, and windows up to 2**1022 seconds.
_MIN_RATE = sys.float_info.min
_MAX_RATE = 1e-3 / sys.float_info.min
_MAX_BURST = 2**53
_MAX_WINDOW = 2.0**1022


def _show(value: object) -> str:
    """``repr(value)`` cut to 100 characters, even for an int too long for ``repr``."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond sys.get_int_max_str_digits()
        return f"<int of {value.bit_length()} bits>"  # type: ignore[attr-defined]
    return text if len(text) <= 100 else text[:97] + "..."


def validate_cost(cost: object) -> float:
    """``cost`` as a float number of tokens >= 0, or an error that names it.

    Every real number is accepted whatever its type or size: ``int`` of any
    length, ``float``, ``fractions.Fraction``, ``decimal.Decimal``.  A value
    too large for a float becomes ``inf`` (``step`` denies any cost above the
    burst with ``retry_after = inf``, so a client-chosen huge cost is simply
    refused, never an ``OverflowError``); a positive value too small for a
    float becomes the smallest positive float, never a free peek; a value
    that a float would round down onto a whole number (``2**53 + 1``, or
    ``Fraction(10**20 + 1, 10**19)``) becomes the next float up, so that it
    still exceeds a burst of that whole number (``cost > burst`` exactly when
    the float is).  ``bool`` and anything that is not a number is a
    ``TypeError``; NaN and negative values are a ``ValueError``.
    """
    value: Any
    cls = cost.__class__
    if cls is float or cls is int:
        value = cost
    elif isinstance(cost, bool):
        raise TypeError(f"cost must be a number of tokens, got {cost!r}")
    else:
        value = _real(cost, "cost", "a number of tokens", ">= 0")
    if not value >= 0:  # also NaN
        raise ValueError(f"cost must be a number of tokens >= 0, got {_show(cost)}")
    try:
        result = float(value)
    except OverflowError:  # an int or Fraction beyond 1.8e308: more than any burst
        return math.inf
    if result == 0.0 and value != 0:
        return 5e-324
    if cls is not float and value != result and result.is_integer() and value > result:
        return math.nextafter(result, math.inf)  # rounded down onto a whole number
    return result


def _real(value: object, name: str, kind: str, bounds: str) -> Any:
    """``value`` if it is a real number other than a bool, else ``TypeError``.

    NaN is a ``ValueError`` for a ``Decimal`` (comparing a Decimal NaN raises).
    """
    # Decimal is no numbers.Real: test it first.  A Decimal can exist only if
    # its module is imported already.
    decimal = sys.modules.get("decimal")
    if decimal is not None and isinstance(value, decimal.Decimal):
        if value.is_nan():
            raise ValueError(f"{name} must be {kind} {bounds}, got {value!r}")
        return value
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {kind}, got {_show(value)}")
    return value


def _rate_value(rate: object) -> float:
    """``rate`` as a float in the accepted range (see the module docstring)."""
    kind = "a number of tokens per second"
    bounds = f"from {_MIN_RATE!r} to {_MAX_RATE!r}"
    if rate.__class__ is not float and rate.__class__ is not int:
        rate = _real(rate, "rate", kind, bounds)
    try:
        value = float(rate)  # type: ignore[arg-type]
    except OverflowError:  # an int or Fraction beyond 1.8e308
        value = math.inf
    # 1 / rate (the interval) and 1e-3 / rate (the slack) must be normal floats.
    if not _MIN_RATE <= value <= _MAX_RATE:  # also NaN
        raise ValueError(f"rate must be {kind} {bounds}, got {_show(rate)}")
    return value


def _burst_value(burst: object) -> int:
    """``burst`` as an int from 1 to 2**53."""
    if isinstance(burst, bool) or not hasattr(burst.__class__, "__index__"):
        raise TypeError(f"burst must be an integer, got {_show(burst)}")
    value = operator.index(burst)  # type: ignore[arg-type]
    if not 1 <= value <= _MAX_BURST:
        raise ValueError(
            f"burst must be an integer from 1 to 2**53 ({_MAX_BURST}), got {_show(burst)}"
        )
    return int(value)


@dataclass(frozen=True)
class Limit:
    """A token-bucket limit: ``rate`` tokens per second, ``burst`` tokens of capacity.

    ``burst`` is the most a client can spend at once after being idle; ``rate``
    is the sustained pace.  ``Limit(10, 20)`` admits 20 requests at once, then
    10 per second.  Both are validated (see the module docstring): ``rate``
    is a number from about 2.2e-308 to 4.49e304 tokens per second, ``burst``
    an integer from 1 to 2**53, and ``burst / rate`` at most 2**1022 seconds;
    a wrong type is a ``TypeError`` and a wrong value a ``ValueError``, each
    naming the value.  ``name`` labels the policy in the IETF draft headers
    (``"default"``); it does not take part in equality.
    """

    rate: float
    burst: int
    name: str = field(default="default", compare=False)
    #: Seconds one token takes to refill (``1 / rate``).
    interval: float = field(init=False, repr=False, compare=False)
    #: Seconds an empty bucket takes to fill (``burst / rate``).
    window: float = field(init=False, repr=False, compare=False)
    #: Comparison slack in seconds: ``TIME_EPSILON``, or a thousandth of a
    #: token's time at rates above 1000/s, so slack never admits extra tokens.
    slack: float = field(init=False, repr=False, compare=False)
    #: Seconds of debt a bucket may reach and still admit (``window + slack``),
    #: computed once here rather than on every ``step``.
    ceiling: float = field(init=False, repr=False, compare=False)
    #: The most debt a bucket may owe, in seconds (``2 * window``: ``-burst``
    #: tokens), the bound of a ``Charge``.
    max_debt: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"limit name must be a str, got {_show(self.name)}")
        rate = _rate_value(self.rate)
        burst = _burst_value(self.burst)
        _check_name(self.name)  # its type first (above), its text after the numbers
        window = burst / rate  # exact division of two floats (burst <= 2**53)
        if not window <= _MAX_WINDOW:
            # A deficit of a whole window plus a charge of burst must stay finite.
            raise ValueError(
                f"rate must be at least burst / 2**1022 = {burst / _MAX_WINDOW!r} tokens per "
                f"second for burst {burst}, got {_show(self.rate)}"
            )
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "burst", burst)
        object.__setattr__(self, "interval", 1.0 / rate)
        object.__setattr__(self, "window", window)
        slack = min(TIME_EPSILON, 1e-3 / rate)
        object.__setattr__(self, "slack", slack)
        object.__setattr__(self, "ceiling", window + slack)
        object.__setattr__(self, "max_debt", window * 2.0)

    @classmethod
    def parse(cls, text: str, burst: Optional[int] = None) -> Limit:
        """Parse ``"N/unit"``, ``"N per unit"``, ``"N/M units"`` or ``"N per M units"``.

        ``N`` and ``M`` are whole numbers >= 1.  Units, in any case, and no
        other spelling: ``ms``, ``msec``, ``msecs``, ``millisecond``,
        ``milliseconds``; ``s``, ``sec``, ``secs``, ``second``, ``seconds``;
        ``m``, ``min``, ``mins``, ``minute``, ``minutes``; ``h``, ``hr``,
        ``hrs``, ``hour``, ``hours``; ``d``, ``day``, ``days``.
        ``"100/minute"`` is a rate of 100/60 tokens per second with a burst of
        100 unless ``burst`` is given; ``"10 per 5 minutes"`` is 10/300 per
        second.  A text that does not parse is a ``ValueError``, a ``text``
        that is not a ``str`` a ``TypeError``.
        """
        if not isinstance(text, str):
            raise TypeError(f"rate must be a str like '10/second', got {_show(text)}")
        if burst is not None:
            _burst_value(burst)  # its own error first, not one about the text
        match = _RATE_RE.match(text)
        unit = match and _UNITS.get(match.group("unit").lower())
        if not match or unit is None:
            raise ValueError(
                f"rate must be a str like '10/second' or '10 per 5 minutes' (units: ms, s, "
                f"m, h, d, or msec, sec, min, hr, day, or millisecond, second, minute, hour "
                f"and their plurals), got {_show(text)}"
            )
        try:
            count = int(match.group("count"))
            span = int(match.group("span") or 1)
        except ValueError:  # beyond sys.get_int_max_str_digits(), so beyond a float
            raise ValueError(
                f"rate must be a number of tokens per second from {_MIN_RATE!r} to "
                f"{_MAX_RATE!r}, got {_show(text)}"
            ) from None
        if count < 1 or span < 1:
            raise ValueError(f"rate must allow at least 1 request per span >= 1, got {_show(text)}")
        try:
            # int / int: the correctly rounded rate, even for 1/ms or huge spans.
            rate = count * 1000 / (span * unit)
        except OverflowError:  # beyond a float: out of range like inf
            rate = math.inf
        try:
            return cls(rate, count if burst is None else burst)
        except ValueError as exc:
            raise ValueError(f"{exc} (parsed from {_show(text)})") from None

    @classmethod
    def coerce(cls, rate: Union[Limit, str, float], burst: Optional[int] = None) -> Limit:
        """Build a ``Limit`` from a ``Limit``, a rate string or a number.

        For a number, ``burst`` defaults to ``ceil(rate)`` (at least 1).
        """
        if isinstance(rate, Limit):
            if burst is not None and burst != rate.burst:
                if isinstance(rate, Quota):  # its count is its burst: no token bucket
                    raise ValueError(
                        f"burst={_show(burst)} does not apply to {rate!r}: its count is its burst"
                    )
                return cls(rate.rate, burst, rate.name)
            return rate
        if isinstance(rate, str):
            return cls.parse(rate, burst)
        value = _rate_value(rate)
        return cls(value, max(1, math.ceil(value)) if burst is None else burst)

    @classmethod
    def parse_many(cls, text: str) -> Tuple[Limit, ...]:
        """Parse ``"10/second;1000/hour"`` (``;`` or ``,`` between limits).

        Each limit is named after its own text, whitespace runs made one
        space (``"10 per second"``), so the draft headers show the same
        policy name for a limit alone and beside others (``Limit.parse``
        alone keeps ``"default"``).
        """
        if not isinstance(text, str):
            raise TypeError(f"rate must be a str like '10/second', got {_show(text)}")
        parts = [part.strip() for part in re.split(r"[;,]", text)]
        if not all(parts):
            raise ValueError(
                f"rate must not have an empty limit between separators, got {_show(text)}"
            )
        return tuple(
            dataclasses.replace(cls.parse(part), name=" ".join(part.split())) for part in parts
        )

    def __str__(self) -> str:
        label = "" if self.name == "default" else f" ({self.name})"
        return f"{self.rate:g}/s burst {self.burst}{label}"


class RateLimitResult(NamedTuple):
    """The outcome of one check (immutable).

    ``allowed``: whether the request was admitted.
    ``limit``: the bucket capacity (``burst``), in tokens.
    ``remaining``: whole tokens left after this request, >= 0.
    ``reset_after``: seconds until the bucket is full again, >= 0.
    ``retry_after``: seconds until a request of the same cost can pass;
    ``0.0`` when allowed, ``inf`` when the cost exceeds the burst.
    ``window``: seconds an empty bucket takes to fill (``burst / rate``).
    ``results``: with several limits, one result per limit (see ``step_all``);
    empty for a single limit.
    ``policy``: the name of the limit this result describes (``Limit.name``).
    """

    allowed: bool
    limit: int
    remaining: int
    reset_after: float
    retry_after: float
    window: float
    results: Tuple[RateLimitResult, ...] = ()
    policy: str = "default"

    @property
    def locked_out(self) -> bool:
        """True when a ``Lockout`` refused the request (see ``LockoutResult``)."""
        return False


class Refund(float):
    """A cost that gives tokens back: ``Refund(2)`` returns 2 tokens to a bucket.

    ``step`` applies it as a negative cost, always admitted, and a bucket
    never holds more than ``burst`` after it (the debt stops at 0).  Its
    value is ``-tokens``; ``tokens`` is checked by ``validate_cost`` (a
    negative or NaN amount is a ``ValueError``).  It is the only negative
    cost: ``validate_cost`` refuses a negative number, so no cost a client
    sends can become one.  ``RateLimiter.refund`` makes it.

    ``taken_at`` (seconds, the time of the check that took the units) ties
    the refund to the window that took them: on a ``Quota`` a refund taken
    before the current window's start gives nothing back (the units were
    forgiven at the boundary; the new window owes nothing).  Without it
    (``None``) a quota refund goes to the current window, whatever took the
    units: pass ``taken_at`` whenever a refund may cross a boundary
    (``RateLimiter.refund(..., taken_at=)``; ``deduct_when`` does).  A token
    bucket ignores it: a refund never fills one beyond its burst, so after a
    reset or a refill to full it gives nothing back.  Not part of equality.
    ``step`` honours it, so do the stores that apply it (memory, SQLite,
    ``DenyCache``); the Redis script is sent no ``taken_at``, so through a
    ``RedisStore`` it holds for ``RateLimiter.refund``, which makes the window
    test itself for each quota.
    """

    __slots__ = ("taken_at",)

    taken_at: Optional[float]

    def __new__(cls, tokens: object, taken_at: Optional[float] = None) -> Refund:
        self = super().__new__(cls, -validate_cost(tokens))
        if taken_at is not None:
            if taken_at.__class__ is not float:
                value = _real(taken_at, "refund taken_at", "a number of seconds", "(finite)")
                try:
                    taken_at = float(value)
                except OverflowError:
                    taken_at = math.inf
            if taken_at - taken_at != 0.0:  # NaN or infinite
                raise ValueError(
                    f"refund taken_at must be a finite number of seconds, got {taken_at!r}"
                )
        self.taken_at = taken_at
        return self

    def __reduce__(self) -> Tuple[Any, ...]:
        return (Refund, (-float(self), self.taken_at))

    def __repr__(self) -> str:
        if self.taken_at is None:
            return f"Refund({-float(self)!r})"
        return f"Refund({-float(self)!r}, taken_at={self.taken_at!r})"


class Charge(float):
    """A cost taken unconditionally: ``Charge(350)`` takes 350 tokens, even from an empty bucket.

    ``step`` always admits it; a bucket it empties goes into debt (it owes
    tokens), and later requests are denied until refilling has repaid the
    debt.  The debt is bounded: a bucket never owes more than one burst
    (``Limit.max_debt``); a charge beyond that is taken up to the bound.  On
    a ``Quota`` the units used may go up to twice the count (the window's
    end forgives them).  ``tokens`` is checked by ``validate_cost``: any real
    number >= 0, too large a one becoming ``inf`` (so the bound).
    ``RateLimiter.charge`` makes it: the way to settle a cost known only
    after the response.
    """

    __slots__ = ()

    def __new__(cls, tokens: object) -> Charge:
        return super().__new__(cls, validate_cost(tokens))

    def __repr__(self) -> str:
        return f"Charge({float(self)!r})"


#: What ``step_all`` and ``Store.apply_many`` accept as a cost: one number
#: for every limit, or a sequence of one number per limit (a list or tuple).
Cost = Union[float, Sequence[float]]


def validate_costs(cost: object, count: int) -> Union[float, Tuple[float, ...]]:
    """``cost`` checked for ``count`` limits, before a store takes a lock or a round trip.

    A number is ``validate_cost``'s float (a ``Refund`` or ``Charge`` is
    returned as it is); a list or tuple must hold exactly ``count`` such
    numbers (``ValueError`` otherwise) and comes back as a tuple.  Errors
    name the bad value as ``validate_cost``'s do.
    """
    if cost.__class__ is tuple or cost.__class__ is list:
        items: Sequence[object] = cost  # type: ignore[assignment,unused-ignore]
        _check_count(items, count)
        return tuple(_checked_cost(c) for c in items)
    return _checked_cost(cost)


def _check_count(costs: Sequence[object], count: int) -> None:
    """Raise ``ValueError`` unless there is one cost per limit in ``costs``."""
    if len(costs) != count:
        raise ValueError(
            f"cost must be a number or a sequence of {count} costs, one per limit, "
            f"got {len(costs)}: {_show(costs)}"
        )


def _cost_or_inf(cost: object, burst: int) -> float:
    """``validate_cost(cost)``, or ``inf`` when it is above ``burst``.

    A cost above the burst is denied whatever its value, even within the
    slack of ``burst`` (as ``inf``, ``after`` is ``inf`` and is never admitted).
    ``validate_cost``'s float exceeds ``burst`` exactly when ``cost`` does.
    A ``Refund`` is its negative float.
    """
    if cost.__class__ is Refund or cost.__class__ is Charge:
        return float(cost)  # type: ignore[arg-type,unused-ignore]
    value = validate_cost(cost)
    return value if value <= burst else math.inf


#: Seconds in each quota period's nominal window, for ``Quota.rate`` and
#: ``Quota.interval`` only: a real window is its calendar span.  A month is a
#: Gregorian average (365.2425 days / 12).
_QUOTA_PERIODS = {"hour": 3600.0, "day": 86400.0, "week": 604800.0, "month": 2629746.0}

#: A quota stores ``used * _QUOTA_SCALE`` as the state's real part (see ``step_quota``).
_QUOTA_SCALE = 2.0**-600
_QUOTA_UNSCALE = 2.0**600


def _check_name(name: object) -> str:
    """``name`` if it is a valid limit name (``Limit.name``'s rule), else an error naming it.

    Every limit's name, and ``RateLimiter``'s names of a mapping's limits.
    """
    if not isinstance(name, str):
        raise TypeError(f"limit name must be a str, got {_show(name)}")
    if not name or not all(" " <= c <= "~" and c not in '"\\' for c in name):
        raise ValueError(
            f"limit name must be printable ASCII without quotes or backslashes, got {_show(name)}"
        )
    return name


def _checked_cost(cost: object) -> float:
    """``validate_cost(cost)``, but a ``Refund`` or ``Charge`` is returned as it is.

    The rule for one cost wherever costs are checked before a store is asked
    (``validate_costs``, ``RateLimiter``'s mappings, SQLite): a Refund is
    negative and a Charge unconditional on purpose, and ``step`` settles both.
    """
    if cost.__class__ is Refund or cost.__class__ is Charge:
        return cost  # type: ignore[return-value,unused-ignore]
    return validate_cost(cost)


class _OwnFields(Limit):
    """A ``Limit`` whose ``__init__`` sets fields of its own (``Quota``, ``Lockout``).

    Frozen like ``Limit``, and equal by ``_identity()`` (its own fields, not
    rate and burst: a quota's rate is nominal).
    """

    def _identity(self) -> Tuple[Any, ...]:
        raise NotImplementedError

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash((self.__class__, self._identity()))


class Quota(_OwnFields):
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

    count: int
    per: str
    tz: str
    _tzinfo: Any
    _bounds: Tuple[float, float]

    def __init__(
        self, count: int, per: str = "day", tz: str = "UTC", name: Optional[str] = None
    ) -> None:
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"quota count must be an int, got {_show(count)}")
        if not 1 <= count <= _MAX_BURST:
            raise ValueError(f"quota count must be from 1 to 2**53, got {_show(count)}")
        if per not in _QUOTA_PERIODS:
            raise ValueError(f"quota per must be 'hour', 'day', 'week' or 'month', got {per!r}")
        if not isinstance(tz, str):
            raise TypeError(f"quota tz must be a time zone name (str), got {_show(tz)}")
        tzinfo = _time_zone(tz)
        if name is None:
            name = f"{count}/{per}" if tz == "UTC" else f"{count}/{per} {tz}"
        _check_name(name)
        nominal = _QUOTA_PERIODS[per]
        for attr, value in (
            ("count", count),
            ("per", per),
            ("tz", tz),
            ("name", name),
            ("burst", count),
            ("rate", count / nominal),
            ("interval", nominal / count),
            ("slack", TIME_EPSILON),
            # -inf: step sends every state of a quota down its rare "debt above
            # the ceiling" branch, where it hands over to step_quota, so a plain
            # Limit pays no test for quotas on its path.
            ("ceiling", -math.inf),
            ("max_debt", nominal * 2.0),
            ("_tzinfo", tzinfo),
            ("_bounds", (0.0, 0.0)),
            ("window", nominal),
        ):
            object.__setattr__(self, attr, value)

    def bounds(self, now: float) -> Tuple[float, float]:
        """``(start, end)`` in Unix seconds of the window holding ``now`` (``start <= now < end``).

        The last window found is cached, so a check within it does no time-zone
        arithmetic.  ``now`` outside the years 1 to 9998 is a ``ValueError``.
        """
        cached = self._bounds
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
        object.__setattr__(self, "_bounds", found)
        object.__setattr__(self, "window", end - start)
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

    def _identity(self) -> Tuple[Any, ...]:
        return (self.count, self.per, self.tz)

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


class QuotaResult(RateLimitResult):
    """A ``RateLimitResult`` given by a ``Quota``: the same fields, another kind of limit.

    A quota's units do not come back one by one as a bucket's tokens do: all
    of them come back at once, ``reset_after`` seconds from now (the window's
    end).  Headers read that from the type (the draft's ``t``).
    """

    __slots__ = ()


def step_quota(
    state: Optional[State], now: float, quota: Quota, cost: float = 1
) -> Tuple[Optional[State], RateLimitResult]:
    """Apply one request of ``cost`` units at ``now`` (seconds) to a calendar quota.

    ``step`` and ``step_all`` call it for a ``Quota``; the same conventions
    hold (``state`` ``None`` for a key never seen, the very same ``state``
    returned when nothing is to be stored, the same cost rules).
    """
    # Theory.  A quota counts the units used in the current calendar window
    # and forgets them at its end.  Its state is complex(used * 2**-600, end):
    # full_at (real + imag) is then exactly ``end`` (the scaled count is far
    # below half a unit in the last place of any end), so every store expires
    # or sweeps a quota at its window end with no change and no schema of its
    # own, and ``used`` comes back exactly (scaling by a power of two).
    #
    # * A state whose end is at or before now (+ TIME_EPSILON, so a client
    #   waiting exactly retry_after gets in) is spent: the window is fresh.
    # * A live state is counted in its own window, so a reading taken just
    #   before a boundary and applied after a later one counts in the later
    #   window.  But when its end lies beyond the current window and now is
    #   more than CLOCK_TOLERANCE before the current end, the clock stepped
    #   back: the units used are kept and moved to the current window (stored
    #   even on denial), as step keeps a bucket's deficit.
    # * Admitted when used + cost <= count; a Refund lowers used, never below 0,
    #   and gives nothing when its taken_at lies before the current window's
    #   start (its units were forgiven at the boundary).
    # Windows come from Quota.bounds (time zones: the Redis script is given the
    # current end by the client, and does the rest of this arithmetic itself).
    # * A Charge is always admitted: used + cost, at most 2 * count (the
    #   window's end forgives it all the same).
    if now - now != 0.0:
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    forced = cost.__class__ is Charge
    taken = cost.taken_at if cost.__class__ is Refund else None  # type: ignore[attr-defined,unused-ignore]
    return _apply_quota(state, now, quota, _cost_or_inf(cost, quota.burst), forced, taken)


def _apply_quota(
    state: Optional[State],
    now: float,
    quota: Quota,
    cost: float,
    forced: bool = False,
    taken_at: Optional[float] = None,
) -> Tuple[Optional[State], RateLimitResult]:
    # step_quota once ``cost`` is checked: a float, inf above the count,
    # negative for a Refund (step checks it the same way before handing over);
    # ``forced`` for a Charge; ``taken_at`` a Refund's (before the current
    # window's start, it gives nothing back).
    moment = now + TIME_EPSILON
    start, end = quota.bounds(moment)
    window = end - start
    used = 0.0
    if state is not None and moment < state.imag:
        used = state.real * _QUOTA_UNSCALE
        if state.imag > end and now < end - CLOCK_TOLERANCE:
            state = complex(state.real, end)  # a clock stepped back: keep what was used
        else:
            end = state.imag
    count = quota.burst
    reset = end - now
    if cost <= 0.0:
        new_state = state
        if taken_at is not None and taken_at + TIME_EPSILON < start:
            pass  # units taken in an earlier window, forgiven at its end: nothing to give
        elif cost < 0.0 and used > 0.0:  # a Refund: gives back up to what was used
            used += cost
            if used < 0.0:
                used = 0.0
            new_state = complex(used * _QUOTA_SCALE, end)
        remaining = _trunc(count - used)
        return new_state, _new_result(
            QuotaResult,
            (True, count, remaining if remaining > 0 else 0, reset, 0.0, window, (), quota.name),
        )
    after = used + cost
    if forced:
        most = 2.0 * count
        if not after <= most:  # also inf
            after = most
        remaining = _trunc(count - after)
        return complex(after * _QUOTA_SCALE, end), _new_result(
            QuotaResult,
            (True, count, remaining if remaining > 0 else 0, reset, 0.0, window, (), quota.name),
        )
    if after <= count:
        return complex(after * _QUOTA_SCALE, end), _new_result(
            QuotaResult,
            (True, count, _trunc(count - after), reset, 0.0, window, (), quota.name),
        )
    remaining = _trunc(count - used)
    retry = reset if cost <= count else math.inf
    return state, _new_result(
        QuotaResult,
        (False, count, remaining if remaining > 0 else 0, reset, retry, window, (), quota.name),
    )


#: The most seconds a ``Lockout``'s ``within`` or ``duration`` may be (about 31.7 years).
_MAX_LOCKOUT_SECONDS = 1e9


def _seconds(value: object, name: str) -> float:
    """``value`` as a float number of seconds > 0 and <= 1e9, or an error naming it."""
    kind = "a number of seconds"
    bounds = f"> 0 and <= {_MAX_LOCKOUT_SECONDS:g}"
    if value.__class__ is not float and value.__class__ is not int:
        value = _real(value, name, kind, bounds)
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except OverflowError:
        seconds = math.inf
    if not 0.0 < seconds <= _MAX_LOCKOUT_SECONDS:  # also NaN
        raise ValueError(f"{name} must be {kind} {bounds}, got {_show(value)}")
    return seconds


class Lockout(_OwnFields):
    """Refuse a key for ``duration`` seconds after ``breaches`` denials within ``within`` seconds.

    ``RateLimiter(..., lockout=Lockout(breaches=10, within=60, duration=900))``:
    the fail2ban pattern.  A denial by any of the limiter's limits is a
    breach.  A run of breaches starts with a breach and lasts ``within``
    seconds; the ``breaches``-th breach of a run locks the key out, and every
    check of it is then refused for ``duration`` seconds from that breach,
    however full its buckets (``retry_after`` and ``reset_after`` are the
    time left; the result is a ``LockoutResult``, ``locked_out`` True).
    Checks refused during a lockout are no breaches and do not extend it,
    and nothing is charged during it.  When it ends the key starts afresh
    (no breaches).  ``RateLimiter.reset`` lifts it.  Runs are counted from
    their first breach, so breaches spread over the end of one run and the
    start of the next (at most ``2 * breaches - 2`` of them, closer together
    than ``within``) may lock no one: a run is not a sliding window.

    ``breaches`` is an int from 1 to 2**53 (``TypeError`` for another type);
    ``within`` and ``duration`` are seconds, > 0 and at most 1e9.  ``name``
    (``"lockout"``) labels it in headers and decision events.  As a
    ``Limit`` it is only ever the last of ``step_all``'s limits; ``step``
    alone reports whether the key is locked out, taking nothing.
    """

    breaches: int
    within: float
    duration: float

    def __init__(
        self,
        breaches: int = 10,
        within: float = 60.0,
        duration: float = 900.0,
        name: str = "lockout",
    ) -> None:
        if isinstance(breaches, bool) or not isinstance(breaches, int):
            raise TypeError(f"lockout breaches must be an int, got {_show(breaches)}")
        if not 1 <= breaches <= _MAX_BURST:
            raise ValueError(f"lockout breaches must be from 1 to 2**53, got {_show(breaches)}")
        within_s = _seconds(within, "lockout within")
        duration_s = _seconds(duration, "lockout duration")
        _check_name(name)
        for attr, value in (
            ("breaches", breaches),
            ("within", within_s),
            ("duration", duration_s),
            ("name", name),
            ("burst", breaches),
            ("rate", breaches / within_s),
            ("interval", within_s / breaches),
            ("window", within_s),
            ("slack", TIME_EPSILON),
            ("ceiling", -math.inf),  # as a Quota's: step hands it over (see Quota)
            ("max_debt", 0.0),
        ):
            object.__setattr__(self, attr, value)

    def _identity(self) -> Tuple[Any, ...]:
        return (self.breaches, self.within, self.duration)

    def __repr__(self) -> str:
        return (
            f"Lockout(breaches={self.breaches!r}, within={self.within!r}, "
            f"duration={self.duration!r}, name={self.name!r})"
        )

    def __str__(self) -> str:
        return (
            f"lockout after {self.breaches} denials in {self.within:g} s "
            f"for {self.duration:g} s ({self.name})"
        )


class LockoutResult(RateLimitResult):
    """A ``RateLimitResult`` given by a ``Lockout``: ``locked_out`` is True when it refuses.

    The lockout's own result: ``limit`` is its ``breaches``, ``window`` its
    ``within`` (so a policy reads "breaches per within seconds"), and when
    it refuses ``remaining`` is 0 and ``reset_after`` and ``retry_after`` are
    the seconds left of the lockout; when it does not, ``remaining`` is the
    breaches left before one.  As the combined result of ``step_all`` it
    takes the ``limit`` and ``window`` of the most restrictive limit and
    the longest ``retry_after`` of the lockout's and the limits' denials,
    and its ``results`` hold each limit's result (nothing was charged: a
    limit that would have admitted the request shows a peek) and the
    lockout's own last (``combine``).  A lockout that does not
    refuse is left out of the combined result.
    """

    __slots__ = ()

    @property
    def locked_out(self) -> bool:
        """True when the key is locked out (the result refuses)."""
        return not self[0]


#: A locked-out key's state is ``complex(_LOCKED, until)``: a negative real
#: part marks it, and ``full_at`` is ``until`` (the mark is far below half a
#: unit in the last place of any time), when every store may forget it.
_LOCKED = -(2.0**-600)


def _lock_status(
    state: Optional[State], now: float, lockout: Lockout
) -> Tuple[Optional[State], LockoutResult, float, float]:
    """``(state, result, breaches, run_end)`` of a lockout's state at ``now`` (see ``step_all``).

    ``result`` refuses when the key is locked out; ``breaches`` (a float) and
    ``run_end`` describe the open run (``0.0`` and ``-inf`` when none).
    """
    count, end = 0.0, -math.inf
    if state is not None:
        mark, until = state.real, state.imag
        if mark < 0.0:
            if now + TIME_EPSILON < until:
                if until - now > lockout.duration + CLOCK_TOLERANCE:
                    until = now + lockout.duration  # a clock stepped back: at most duration
                    state = complex(_LOCKED, until)
                return state, _lockout_result(lockout, 0.0, until - now), 0.0, end
        elif now < until:
            count, end = mark * _QUOTA_UNSCALE, until
    return state, _lockout_result(lockout, count, None), count, end


def _breach(count: float, end: float, now: float, lockout: Lockout) -> Tuple[State, LockoutResult]:
    """The lockout's new state and result after a denial at ``now`` (see ``step_all``)."""
    if count == 0.0:
        end = now + lockout.within  # the first breach opens a run
    elif end - now > lockout.within + CLOCK_TOLERANCE:
        end = now + lockout.within  # a clock stepped back: at most within
    count += 1.0
    if count >= lockout.burst:
        until = now + lockout.duration
        return complex(_LOCKED, until), _lockout_result(lockout, count, until - now)
    return complex(count * _QUOTA_SCALE, end), _lockout_result(lockout, count, None)


def _lockout_result(lockout: Lockout, count: float, left: Optional[float]) -> LockoutResult:
    """A lockout's own result: refusing for ``left`` seconds, or ``None``: not locked.

    Not locked, ``remaining`` is the breaches left before a lockout, never
    below 0 (a run counted under a larger ``breaches`` may hold more).
    """
    window, name = lockout.window, lockout.name
    if left is not None:
        return _new_result(LockoutResult, (False, lockout.burst, 0, left, left, window, (), name))
    remaining = _trunc(lockout.burst - count)
    remaining = remaining if remaining > 0 else 0
    return _new_result(LockoutResult, (True, lockout.burst, remaining, 0.0, 0.0, window, (), name))


def full_at(state: State) -> float:
    """When the bucket of ``state`` is full again: ``updated_at + debt`` (seconds).

    From then on the state changes no decision: a store may forget it (an
    absent key *is* a full bucket), expire it then (Redis's ``PX``) or index
    it for a purge (SQLite's ``full_at`` column).
    """
    return state.real + state.imag


def combine(results: Sequence[RateLimitResult]) -> RateLimitResult:
    """The result that reports several limits' ``results`` (one per limit, in order).

    It is the most restrictive one: when any denies, the denial with the
    longest ``retry_after`` (then the fewest tokens left); when all admit, the
    one with the fewest tokens left (then the longest ``reset_after``).  Its
    ``results`` field holds all of them.  ``step_all`` reports with it, and so
    does the Redis store, whose script returns one result per limit.

    A ``LockoutResult`` last in ``results`` (``step_all`` with a ``Lockout``)
    is the result when it refuses, with the ``limit`` and ``window`` of the
    most restrictive other result and the longest ``retry_after`` of its own
    and the other denials' (its ``results`` then hold all of them, the
    lockout's own last), and is left out when it does not refuse.
    """
    last = results[-1]
    if last.__class__ is LockoutResult:
        if not last[0]:
            # The limit and window of the most restrictive limit, so that
            # X-RateLimit-Limit shows the request limit, not a breach count;
            # and the longest wait of the lockout's and the limits' denials
            # (a quota's boundary, or inf for a cost above a burst).
            others = results[:-1]
            worst = min(others, key=lambda r: (r.remaining, -r.reset_after))
            retry = max([last[4]] + [r[4] for r in others if not r[0]])
            return last._replace(
                limit=worst[1], window=worst[5], retry_after=retry, results=tuple(results)
            )
        results = results[:-1]
    if all(r.allowed for r in results):
        worst = min(results, key=lambda r: (r.remaining, -r.reset_after))
    else:
        worst = max(
            (r for r in results if not r.allowed), key=lambda r: (r.retry_after, -r.remaining)
        )
    return worst._replace(results=tuple(results))


# Results are built with ``tuple.__new__`` (hot path: see CONTRIBUTING.md "Hot paths"),
# read once into a global like ``math.trunc``: a global call costs less than a
# module or class attribute's.
_new_result = tuple.__new__
_trunc = math.trunc


@overload
def step(
    state: Optional[State], now: float, limit: Limit, cost: float = ..., detail: Literal[True] = ...
) -> Tuple[Optional[State], RateLimitResult]: ...


@overload
def step(
    state: Optional[State], now: float, limit: Limit, cost: float, detail: Literal[False]
) -> Tuple[Optional[State], bool]: ...


def step(
    state: Optional[State], now: float, limit: Limit, cost: float = 1, detail: bool = True
) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
    """Apply one request of ``cost`` tokens at time ``now`` (seconds) to a bucket.

    Returns ``(new_state, result)``.  ``state`` is ``None`` for a key never seen.
    When the request takes nothing (denied, or ``cost == 0``) the very same
    ``state`` object is returned, so a store can skip the write; the
    exceptions are a clock stepped back by more than ``CLOCK_TOLERANCE`` and a
    deficit beyond this limit's ``max_debt`` (one burst owed), whose
    re-anchored state must be stored.  A ``Refund`` or ``Charge`` is always
    admitted (see ``Refund`` and ``Charge``); in debt, a request is denied
    until refilling has repaid it.  A ``now`` at most ``CLOCK_TOLERANCE`` behind the state's
    ``updated_at`` is taken as ``updated_at``.  With ``detail=False`` the result
    is just the decision, a ``bool``: the same algorithm, without building a
    ``RateLimitResult`` (``RateLimiter.allow``'s fast path).
    """
    # One function on purpose, longer than most: every check runs it, and each
    # helper call would cost more than a rule (CONTRIBUTING.md "Hot paths").
    if cost is _ONE:
        # The default and usual cost (a cached int): valid under any limit, and
        # 1 * interval is interval, without the slower int-by-float product.
        charge = limit.interval
    else:
        if (cls := cost.__class__) is float:
            if not 0.0 <= cost <= limit.burst:  # also NaN
                cost = _cost_or_inf(cost, limit.burst)
        elif cls is not int or not 0 <= cost <= limit.burst:
            if cls is Refund or cls is Charge:
                return _settle(state, now, limit, cost, detail)
            cost = _cost_or_inf(cost, limit.burst)
        charge = cost * limit.interval
    if now - now != 0.0:  # NaN or infinite, without a global lookup
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    if state is None:
        debt = 0.0
    else:
        debt = state.real
        updated_at = state.imag
        if now < updated_at:
            if limit.ceiling < 0.0:  # a quota's or lockout's end lies ahead: see Quota
                return _special_step(state, now, limit, cost, detail)
            if now < updated_at - CLOCK_TOLERANCE:
                # Backwards clock: keep the deficit as it was, re-anchored at
                # ``now``.  The re-anchored state is returned even on denial (same
                # tokens, new frame); were it not stored, the key would wait for
                # the old reading.
                state = complex(debt, now)
            else:
                # Read before a later reading was applied: apply at that time (no
                # refill; re-anchoring here would refill the lag twice).
                now = updated_at
        else:
            debt -= now - updated_at
            if debt < 0.0:
                debt = 0.0
    ceiling = limit.ceiling  # window + slack
    if debt > ceiling:
        if ceiling < 0.0:  # every quota and lockout comes here: their ceiling is -inf
            return _special_step(state, now, limit, cost, detail)
        # In debt (a Charge), or written under a larger limit: denied until
        # repaid.  A bucket never owes more than one burst; a deeper state is
        # stored at that bound (like a re-anchoring) so refilling starts there.
        if debt > limit.max_debt:
            debt = limit.max_debt
            state = complex(debt, now)
        if cost == 0:  # a peek is admitted, in debt too
            return _settle(state, now, limit, 0.0, detail)
    after = debt + charge
    if after <= ceiling:
        # ``after + now * 1j`` is ``complex(after, now)``, exactly (after >= 0 and
        # now finite; at most a zero's sign differs), in a quarter less time.
        new_state = state if cost == 0 else after + now * 1j
        if not detail:
            return new_state, True
        window = limit.window
        # trunc() truncates like int(), faster; the clamp keeps the slack from
        # showing a token too many.
        remaining = _trunc((window - after + limit.slack) * limit.rate)
        if remaining > limit.burst:
            remaining = limit.burst
        return new_state, _new_result(
            RateLimitResult, (True, limit.burst, remaining, after, 0.0, window, (), limit.name)
        )
    if not detail:
        return state, False
    window = limit.window
    remaining = _trunc((window - debt + limit.slack) * limit.rate)
    if remaining > limit.burst:  # near 2**53 tokens, window * rate may round up
        remaining = limit.burst
    elif remaining < 0:  # in debt
        remaining = 0
    retry = after - window  # inf for a cost above burst (made inf above)
    return state, _new_result(
        RateLimitResult, (False, limit.burst, remaining, debt, retry, window, (), limit.name)
    )


def admit(
    table: Dict[str, State], key: str, now: float, limit: Limit, cost: float = 1
) -> Optional[bool]:
    """``step(table[key], now, limit, cost, detail=False)``, applied to ``table`` in place.

    Returns whether the request of ``cost`` tokens at ``now`` (seconds) is
    admitted, having stored the new state in ``table[key]`` when ``step``
    returns a new one; ``None``, changing nothing, when ``key`` is not in
    ``table`` (the caller decides what a new key costs, e.g. an eviction).
    The same decisions and states as ``step``, and the same errors.
    """
    # The usual request (cost 1, a clock that has not gone back, a state
    # under this limit) without step's call, its result tuple and the store's
    # write-back test: MemoryStore.allow's hot path (CONTRIBUTING.md, "Hot
    # paths").  Each operation is step's, in step's order, so the floats
    # are the same; everything else is left to step.
    state = table.get(key)
    if state is None:
        return None
    if cost is _ONE and now - now == 0.0:  # now neither NaN nor infinite
        updated_at = state.imag
        if now >= updated_at:
            debt = state.real - (now - updated_at)
            ceiling = limit.ceiling
            if debt < 0.0 and ceiling > 0.0:
                # Full again: step clamps the debt to 0.0, and 0.0 + interval
                # (1 / rate) is interval, never above window (burst / rate).
                # (A quota's or lockout's ceiling is -inf: they go to step below.)
                table[key] = limit.interval + now * 1j
                return True
            if debt <= ceiling:
                after = debt + limit.interval
                if after <= ceiling:
                    table[key] = after + now * 1j  # complex(after, now): see step
                    return True
                return False
    new_state, allowed = step(state, now, limit, cost, False)
    if new_state is not state:
        table[key] = new_state  # type: ignore[assignment]  # never None from a state
    return allowed


def _special_step(
    state: Optional[State], now: float, limit: Limit, cost: float, detail: bool
) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
    # step's hand-over to step_quota, or to a lockout's status (taking
    # nothing), with step's detail=False shape.
    if isinstance(limit, Lockout):
        _cost_or_inf(cost, limit.burst)  # the same errors as any limit's
        lock_state, lock_result, _, _ = _lock_status(state, now, limit)
        return lock_state, (lock_result if detail else lock_result[0])
    quota: Quota = limit  # type: ignore[assignment]  # the only other limit with ceiling -inf
    forced = cost.__class__ is Charge
    taken = cost.taken_at if cost.__class__ is Refund else None  # type: ignore[attr-defined,unused-ignore]
    new_state, result = _apply_quota(
        state, now, quota, _cost_or_inf(cost, quota.burst), forced, taken
    )
    return new_state, (result if detail else result[0])


def _settle(
    state: Optional[State], now: float, limit: Limit, cost: float, detail: bool
) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
    """``step`` for a ``Refund`` or a ``Charge``: always admitted, never denied.

    A refund lowers the debt, never below 0 (a full bucket); a charge raises
    it, never above ``limit.max_debt``.  The clock rules are ``step``'s.
    """
    if limit.ceiling < 0.0:
        return _special_step(state, now, limit, cost, detail)
    if now - now != 0.0:
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    # step's reading of the state, rule for rule (step keeps its own inline
    # copy: it is the hot path).
    debt = 0.0
    if state is not None:
        debt = state.real
        updated_at = state.imag
        if now < updated_at:
            if now < updated_at - CLOCK_TOLERANCE:
                state = complex(debt, now)
            else:
                now = updated_at
        else:
            debt -= now - updated_at
            if debt < 0.0:
                debt = 0.0
    most = limit.max_debt
    if debt > most:
        debt = most
        state = complex(debt, now)
    value = float(cost)
    if value == 0.0:
        after = debt
        new_state = state
    else:
        if value >= 2.0 * limit.burst:  # inf, or at least the bound (the Redis script's 2**54)
            after = most
        else:
            after = debt + value * limit.interval
            if after < 0.0:  # a refund: a bucket holds at most its burst
                after = 0.0
            elif after > most:
                after = most
        new_state = after + now * 1j
    if not detail:
        return new_state, True
    window = limit.window
    remaining = _trunc((window - after + limit.slack) * limit.rate)
    if remaining > limit.burst:
        remaining = limit.burst
    elif remaining < 0:
        remaining = 0
    return new_state, _new_result(
        RateLimitResult, (True, limit.burst, remaining, after, 0.0, window, (), limit.name)
    )


def step_all(
    states: Sequence[Optional[State]], now: float, limits: Sequence[Limit], cost: Cost = 1
) -> Tuple[List[Optional[State]], RateLimitResult]:
    """Apply one request to several buckets at once: all admit it, or none is charged.

    ``states[i]`` is the state of the bucket under ``limits[i]``.  ``cost`` is
    one cost charged to every limit, or a list or tuple of one cost per limit
    (``ValueError`` when its length differs): each limit must be able to pay
    its own amount (0 takes nothing from that one).  Returns the new states
    (same objects where nothing changed) and a result that reports the most
    restrictive limit (``combine``): on denial, the one with the longest
    ``retry_after``; when allowed, the one with the fewest tokens left.  Its
    ``results`` holds one result per limit, in order; on denial those of the
    limits that would have admitted the request are peeks (nothing was taken).
    A ``Lockout`` may come last (its cost is ignored); see the comment below.
    """
    # Lockout rules.  Its state is absent (no breach), complex(breaches *
    # 2**-600, run_end) for an open run, or complex(_LOCKED, until) when locked:
    # full_at is the run's or lockout's end either way, when it is forgotten.
    # * Locked (now + TIME_EPSILON < until): the request is refused as when a
    #   limit denies (each limit stepped with its cost, those that would admit
    #   peeked), nothing is taken or counted, and the LockoutResult refuses
    #   with retry_after = until - now, or a limit's denial's if longer.  An
    #   until more than duration + CLOCK_TOLERANCE ahead (a clock stepped
    #   back) is brought back to now + duration, and stored.
    # * Otherwise the limits decide as without it.  A denial is a breach: it
    #   opens a run of ``within`` seconds (now + within) when none is open
    #   (now < run_end), else counts in the open one (whose end is brought back
    #   to now + within if a clock stepped back beyond the tolerance).  The
    #   breaches-th breach of a run locks the key until now + duration, and
    #   that very denial is already the LockoutResult.
    n = len(limits)
    if len(states) != n or not limits:
        raise ValueError(f"need one state per limit and at least one limit, got {n}")
    cls = cost.__class__
    if cls is not tuple and cls is not list and limits[-1].__class__ is not Lockout:
        # The usual call (one cost, no lockout) without the general path's work.
        stepped = [step(state, now, limit, cost) for state, limit in zip(states, limits)]  # type: ignore[arg-type]
        results = [result for _, result in stepped]
        if all(result[0] for result in results):
            return [new for new, _ in stepped], combine(results)
        return _refused(states, now, limits, stepped, results), combine(results)
    if cls is tuple or cls is list:
        costs: Sequence[float] = cost  # type: ignore[assignment]
        _check_count(costs, n)
    else:
        costs = [cost] * n  # type: ignore[list-item]
    lockout: Optional[Lockout] = None
    locked = False
    if limits[-1].__class__ is Lockout:
        if n == 1:
            raise ValueError("a Lockout needs at least one limit before it")
        lockout = limits[-1]
        n -= 1
        lock_state, lock_result, count, run_end = _lock_status(states[n], now, lockout)
        locked = not lock_result[0]
    stepped = [step(states[i], now, limits[i], costs[i]) for i in range(n)]
    results = [result for _, result in stepped]
    admitted = not locked and all(result[0] for result in results)
    if admitted:
        new_states: List[Optional[State]] = [new for new, _ in stepped]
    else:
        new_states = _refused(states, now, limits, stepped, results)
    if lockout is not None:
        if not admitted and not locked:
            lock_state, lock_result = _breach(count, run_end, now, lockout)
        new_states.append(lock_state)
        results.append(lock_result)
    return new_states, combine(results)


def _refused(
    states: Sequence[Optional[State]],
    now: float,
    limits: Sequence[Limit],
    stepped: List[Tuple[Optional[State], RateLimitResult]],
    results: List[RateLimitResult],
) -> List[Optional[State]]:
    # step_all's refusal: nothing is taken.  The limits that would have
    # admitted are recomputed as peeks (taking nothing but keeping any
    # re-anchoring), in ``results`` too; a denial's state is already its own.
    new_states: List[Optional[State]] = []
    for i, (new, result) in enumerate(stepped):
        if result[0]:
            new, results[i] = step(states[i], now, limits[i], 0)
        new_states.append(new)
    return new_states
