"""The token bucket: one pure function, ``step``.

Rules
-----
A bucket holds at most ``limit.burst`` tokens and refills continuously at
``limit.rate`` tokens per second.  A key never seen before owns a full bucket.

* A request of cost ``c`` is admitted when ``c`` tokens are in the bucket; it
  takes them.  Otherwise it is denied and takes nothing (all or nothing).
* ``c == 0`` is a peek: always "allowed", takes nothing, stores nothing.
* ``c > burst`` can never be admitted: it is denied with ``retry_after = inf``
  (header builders leave ``Retry-After`` out rather than print ``inf``).
* Negative or NaN ``c`` is a ``ValueError``.
* State written under another limit is read under this one, never below zero
  tokens (a limit that shrinks does not lock keys out for longer than its
  own window).
* A ``now`` earlier than the key's last update (a clock stepped backwards)
  grants nothing and locks no one out: the bucket holds what it held at its
  last update, and refilling resumes from the new, earlier reading (the state
  is re-anchored, and stored, even when the request is denied).

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
The bucket is full again at ``updated_at + debt``: stores can tell a full
bucket without knowing its limit, which is what lets them expire or sweep
keys (an absent key *is* a full bucket).

Comparisons carry a slack of ``TIME_EPSILON`` seconds (less at rates above
1000 tokens/s, see ``Limit.slack``): elapsed times between two readings near
today's Unix time are only precise to about 0.24 microseconds, and a client
that waits exactly ``retry_after`` must get in.

This module does no I/O and reads no clock; stores call ``step`` under their
own atomicity (a lock, a transaction) and ``backends/redis.py`` mirrors it in
Lua, checked against this file by a property test.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
import sys
from dataclasses import dataclass, field
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union, overload

from typing_extensions import Literal

__all__ = [
    "TIME_EPSILON",
    "Limit",
    "RateLimitResult",
    "State",
    "step",
    "step_all",
    "validate_cost",
]

#: Seconds of slack in every comparison (see the module docstring).
TIME_EPSILON = 1e-6

#: ``complex(debt, updated_at)``, both in seconds (see the module docstring).
State = complex

_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
}
_RATE_RE = re.compile(
    r"^\s*(?P<count>\d+)\s*(?:/|\s+per\s+)\s*(?P<span>\d+)?\s*(?P<unit>[a-z]+?)s?\s*$",
    re.IGNORECASE,
)


def validate_cost(cost: object) -> float:
    """``cost`` as a float number of tokens >= 0, or an error that names it.

    Every real number is accepted whatever its type or size: ``int`` of any
    length, ``float``, ``fractions.Fraction``, ``decimal.Decimal``.  A value
    too large for a float becomes ``inf`` (``step`` denies any cost above the
    burst with ``retry_after = inf``, so a client-chosen huge cost is simply
    refused, never an ``OverflowError``); a positive value too small for a
    float becomes the smallest positive float, never a free peek.  ``bool``
    and anything that is not a number is a ``TypeError``; NaN and negative
    values are a ``ValueError``.
    """
    cls = cost.__class__
    if cls is float or cls is int:
        value = cost
    elif isinstance(cost, bool):
        raise TypeError(f"cost must be a number of tokens, got {cost!r}")
    else:
        value = _real_cost(cost)
    if not value >= 0:  # also NaN
        raise ValueError(f"cost must be a number of tokens >= 0, got {cost!r:.100}")
    try:
        result = float(value)  # type: ignore[arg-type]
    except OverflowError:  # an int or Fraction beyond 1.8e308: more than any burst
        return math.inf
    if result == 0.0 and value != 0:
        return 5e-324
    return result


def _real_cost(cost: object) -> object:
    # Decimal is no numbers.Real, and comparing a Decimal NaN raises: test it
    # first.  A Decimal can exist only if its module is imported already.
    decimal = sys.modules.get("decimal")
    if decimal is not None and isinstance(cost, decimal.Decimal):
        if cost.is_nan():
            raise ValueError(f"cost must be a number of tokens >= 0, got {cost!r}")
        return cost
    import numbers

    if not isinstance(cost, numbers.Real):
        raise TypeError(f"cost must be a number of tokens, got {cost!r:.100}")
    return cost


def _positive_rate(rate: object) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise ValueError(f"rate must be a positive number of tokens per second, got {rate!r}")
    value = float(rate)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"rate must be a positive, finite number of tokens/second, got {rate!r}")
    return value


def _positive_burst(burst: object) -> int:
    if isinstance(burst, bool):
        raise ValueError(f"burst must be an integer >= 1, got {burst!r}")
    try:
        value = operator.index(burst)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"burst must be an integer >= 1, got {burst!r}") from None
    if value < 1:
        raise ValueError(f"burst must be an integer >= 1, got {burst!r}")
    return int(value)


@dataclass(frozen=True)
class Limit:
    """A token-bucket limit: ``rate`` tokens per second, ``burst`` tokens of capacity.

    ``burst`` is the most a client can spend at once after being idle; ``rate``
    is the sustained pace.  ``Limit(10, 20)`` admits 20 requests at once, then
    10 per second.  Both are validated: ``rate`` must be finite and > 0,
    ``burst`` an integer >= 1; anything else is a ``ValueError`` naming it.
    ``name`` labels the policy in the IETF draft headers (``"default"``); it
    does not take part in equality.
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

    def __post_init__(self) -> None:
        rate = _positive_rate(self.rate)
        burst = _positive_burst(self.burst)
        if (
            not isinstance(self.name, str)
            or not self.name
            or not all(" " <= c <= "~" and c not in '"\\' for c in self.name)
        ):
            raise ValueError(
                f"limit name must be printable ASCII without quotes or backslashes, "
                f"got {self.name!r}"
            )
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "burst", burst)
        object.__setattr__(self, "interval", 1.0 / rate)
        object.__setattr__(self, "window", burst / rate)
        object.__setattr__(self, "slack", min(TIME_EPSILON, 1e-3 / rate))

    @classmethod
    def parse(cls, text: str, burst: Optional[int] = None) -> Limit:
        """Parse ``"N/unit"``, ``"N per unit"`` or ``"N per M units"``.

        Units: second, minute, hour, day and the short forms s, sec, m, min, h,
        hr, d (plural ``s`` accepted).  ``"100/minute"`` is a rate of 100/60
        tokens per second with a burst of 100 unless ``burst`` is given.
        """
        if not isinstance(text, str):
            raise ValueError(f"rate string must be a str like '10/second', got {text!r}")
        match = _RATE_RE.match(text)
        unit = match and _UNITS.get(match.group("unit").lower())
        if not match or unit is None:
            raise ValueError(
                f"cannot parse rate {text!r}: expected 'N/unit' or 'N per unit' "
                "with unit second, minute, hour or day"
            )
        count = int(match.group("count"))
        span = int(match.group("span") or 1)
        if count < 1 or span < 1:
            raise ValueError(f"rate {text!r} must allow at least 1 request per span >= 1")
        return cls(count / (span * unit), count if burst is None else burst)

    @classmethod
    def coerce(cls, rate: Union[Limit, str, float], burst: Optional[int] = None) -> Limit:
        """Build a ``Limit`` from a ``Limit``, a rate string or a number.

        For a number, ``burst`` defaults to ``ceil(rate)`` (at least 1).
        """
        if isinstance(rate, Limit):
            if burst is not None and burst != rate.burst:
                return cls(rate.rate, burst, rate.name)
            return rate
        if isinstance(rate, str):
            return cls.parse(rate, burst)
        value = _positive_rate(rate)
        return cls(value, max(1, math.ceil(value)) if burst is None else burst)

    @classmethod
    def parse_many(cls, text: str) -> Tuple[Limit, ...]:
        """Parse ``"10/second;1000/hour"`` (``;`` or ``,`` between limits).

        Each limit is named after its own text (``"10/second"``) when there are
        several, so the draft headers can tell them apart.
        """
        if not isinstance(text, str):
            raise ValueError(f"rate string must be a str like '10/second', got {text!r}")
        parts = [part.strip() for part in re.split(r"[;,]", text)]
        if len(parts) == 1:
            return (cls.parse(text),)
        if not all(parts):
            raise ValueError(f"cannot parse rate {text!r}: empty limit between separators")
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


# Results are built with ``tuple.__new__``: it skips NamedTuple's Python-level
# ``__new__``, about 150 ns of a 450 ns step.


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
    exceptions are a backwards clock and a deficit beyond this limit's window,
    whose re-anchored state must be stored.  With ``detail=False`` the result
    is just the decision, a ``bool``: the same algorithm, without building a
    ``RateLimitResult`` (``RateLimiter.allow``'s fast path).
    """
    try:
        if not cost >= 0:  # also catches NaN
            raise ValueError(f"cost must be a number >= 0, got {cost!r}")
    except TypeError:
        raise ValueError(f"cost must be a number >= 0, got {cost!r:.100}") from None
    if now - now != 0.0:  # NaN or infinite, without a global lookup
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    if state is None:
        debt = 0.0
    else:
        debt = state.real
        updated_at = state.imag
        if now < updated_at:
            # Backwards clock: keep the deficit as it was, re-anchored at ``now``.
            # The re-anchored state is returned even on denial (same tokens, new
            # frame); were it not stored, the key would wait for the old reading.
            state = complex(debt, now)
        else:
            debt -= now - updated_at
            if debt < 0.0:
                debt = 0.0
    window = limit.window
    if debt > window + limit.slack:
        # State written under a larger limit: a bucket never holds fewer than 0
        # tokens.  Stored (like a re-anchoring) so refilling starts from here.
        debt = window
        state = complex(window, now)
    after = debt + cost * limit.interval
    if after <= window + limit.slack:
        new_state = state if cost == 0 else complex(after, now)
        if not detail:
            return new_state, True
        # int() truncates; the clamp keeps the slack from showing a token too many.
        remaining = int((window - after + limit.slack) * limit.rate)
        if remaining > limit.burst:
            remaining = limit.burst
        return new_state, tuple.__new__(
            RateLimitResult,
            (True, limit.burst, remaining, after, 0.0, window, (), limit.name),
        )
    if not detail:
        return state, False
    remaining = int((window - debt + limit.slack) * limit.rate)
    retry = after - window if cost <= limit.burst else math.inf
    return state, tuple.__new__(
        RateLimitResult, (False, limit.burst, remaining, debt, retry, window, (), limit.name)
    )


def step_all(
    states: Sequence[Optional[State]], now: float, limits: Sequence[Limit], cost: float = 1
) -> Tuple[List[Optional[State]], RateLimitResult]:
    """Apply one request to several buckets at once: all admit it, or none is charged.

    ``states[i]`` is the state of the bucket under ``limits[i]``.  Returns the
    new states (same objects where nothing changed) and a result that reports
    the most restrictive limit: on denial, the one with the longest
    ``retry_after``; when allowed, the one with the fewest tokens left.  Its
    ``results`` holds one result per limit, in order; on denial those of the
    limits that would have admitted the request are peeks (nothing was taken).
    """
    if len(states) != len(limits) or not limits:
        raise ValueError(f"need one state per limit and at least one limit, got {len(limits)}")
    stepped = [step(state, now, limit, cost) for state, limit in zip(states, limits)]
    results = [result for _, result in stepped]
    if all(result.allowed for result in results):
        new_states = [new for new, _ in stepped]
        worst = min(results, key=lambda r: (r.remaining, -r.reset_after))
    else:
        new_states = []
        for i, (state, limit) in enumerate(zip(states, limits)):
            if results[i].allowed:
                # Recompute as a peek: it takes nothing but keeps any re-anchoring.
                peeked, results[i] = step(state, now, limit, 0)
                new_states.append(peeked)
            else:
                new_states.append(stepped[i][0])
        worst = max(
            (r for r in results if not r.allowed), key=lambda r: (r.retry_after, -r.remaining)
        )
    return new_states, worst._replace(results=tuple(results))
