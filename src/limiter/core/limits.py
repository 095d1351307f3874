"""The token bucket's parameters (``Limit``) and what every policy shares (``Policy``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Optional, Protocol, Tuple, Union

from limiter.core._values import MAX_WINDOW, burst_value, rate_value, show
from limiter.core._values import check_name as check_name  # RateLimiter's names too
from limiter.core.parse import parse_rate, split_rates
from limiter.core.state import State, keep_until

#: Seconds of slack in every comparison (rule 8 of ``limiter.core.bucket``).
TIME_EPSILON = 1e-6

#: Seconds a ``now`` may lag a key's last update and still be taken for that
#: update's time, not a clock stepped back (rule 7 of ``limiter.core.bucket``).
CLOCK_TOLERANCE = 1.0


class Policy(Protocol):
    """What ``step_all`` and the stores need of a policy: ``kind`` names it,
    ``standalone`` is False for a ``Lockout`` (it counts the others' denials).
    """

    @property
    def kind(self) -> str: ...
    @property
    def standalone(self) -> bool: ...

    @property
    def name(self) -> str: ...
    @property
    def rate(self) -> float: ...
    @property
    def burst(self) -> int: ...
    @property
    def interval(self) -> float: ...
    @property
    def window(self) -> float: ...
    @property
    def slack(self) -> float: ...

    def keep_until(self, state: State) -> float: ...


@dataclass(frozen=True)
class Limit:
    """A token-bucket limit: ``rate`` tokens per second, ``burst`` (an int from 1 to 2**53)
    tokens of capacity: ``Limit(10, 20)`` admits 20 requests at once, then 10 per
    second.  A wrong type is a ``TypeError``, a value out of range a ``ValueError``
    (docs/concepts.md); ``name`` labels it in headers, not part of equality.
    """

    kind: ClassVar[Literal["bucket"]] = "bucket"
    standalone: ClassVar[Literal[True]] = True

    rate: float
    burst: int
    name: str = field(default="default", compare=False)
    #: Seconds one token takes to refill (``1 / rate``).
    interval: float = field(init=False, repr=False, compare=False)
    #: Seconds an empty bucket takes to fill (``burst / rate``).
    window: float = field(init=False, repr=False, compare=False)
    #: Comparison slack in seconds: ``TIME_EPSILON``, or less above 1000/s so
    #: slack never admits extra tokens.
    slack: float = field(init=False, repr=False, compare=False)
    #: Seconds of debt a bucket may reach and still admit (``window + slack``).
    ceiling: float = field(init=False, repr=False, compare=False)
    #: The most debt a bucket may owe, in seconds (``2 * window``: ``-burst``
    #: tokens), the bound of a ``Charge``.
    max_debt: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"limit name must be a str, got {show(self.name)}")
        rate = rate_value(self.rate)
        burst = burst_value(self.burst)
        check_name(self.name)  # its type first (above), its text after the numbers
        window = burst / rate  # exact division of two floats (burst <= 2**53)
        if not window <= MAX_WINDOW:
            # A deficit of a whole window plus a charge of burst must stay finite.
            raise ValueError(
                f"rate must be at least burst / 2**1022 = {burst / MAX_WINDOW!r} tokens per "
                f"second for burst {burst}, got {show(self.rate)}"
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

        ``"100/minute"`` is 100/60 tokens per second, burst 100 unless ``burst`` is given.
        """
        rate, count = parse_rate(text, burst)
        try:
            return cls(rate, count if burst is None else burst)
        except ValueError as exc:
            raise ValueError(f"{exc} (parsed from {show(text)})") from None

    @classmethod
    def coerce(cls, rate: Union[Policy, str, float], burst: Optional[int] = None) -> Any:
        """Build a ``Limit`` from a ``Limit``, a rate string or a number (``burst`` default
        ``ceil(rate)``); another policy as is (another ``burst`` for it: ``ValueError``).
        """
        kind = getattr(rate, "kind", None)
        if kind is not None:
            policy: Policy = rate  # type: ignore[assignment]
            if burst is not None and burst != policy.burst:
                if kind != "bucket":  # a quota's count is its burst: no token bucket
                    raise ValueError(
                        f"burst={show(burst)} does not apply to {policy!r}: its count is its burst"
                    )
                return cls(policy.rate, burst, policy.name)
            return policy
        if isinstance(rate, str):
            return cls.parse(rate, burst)
        value = rate_value(rate)
        return cls(value, max(1, math.ceil(value)) if burst is None else burst)

    @classmethod
    def parse_many(cls, text: str) -> Tuple[Limit, ...]:
        """Parse ``"10/second;1000/hour"`` (``;`` or ``,`` between limits), each named
        after its own text.
        """
        return tuple(
            dataclasses.replace(cls.parse(part), name=" ".join(part.split()))
            for part in split_rates(text)
        )

    #: When the bucket of ``state`` is full again (seconds): ``updated_at + debt``.
    keep_until = staticmethod(keep_until)

    @property
    def label(self) -> str:
        """This policy in a limiter's default name (``"10/s:20"``)."""
        return f"{self.rate:g}/s:{self.burst}"

    def renamed(self, name: str) -> Limit:
        """This limit named ``name``."""
        return self if name == self.name else dataclasses.replace(self, name=name)

    def numbered(self, i: int) -> Limit:
        """This limit named apart as the ``i``-th of a limiter's policies."""
        return self.renamed(f"{self.burst}per{self.window:g}s#{i}")

    def __str__(self) -> str:
        label = "" if self.name == "default" else f" ({self.name})"
        return f"{self.rate:g}/s burst {self.burst}{label}"
