"""What ``RateLimiter`` is given, made into policies (``policies``) and one cost per
policy (``NamedCosts``, for ``{"tokens": 350}``).  Pure: no store, no clock.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from limiter.core._values import show
from limiter.core.concurrency import Concurrency
from limiter.core.costs import checked_cost
from limiter.core.limits import Limit, check_name
from limiter.core.lockout import Lockout
from limiter.core.quota import Quota
from limiter.core.window import FixedWindow, SlidingWindow

#: A limit a ``RateLimiter`` applies: any policy but a ``Lockout``.
AnyLimit = Union[Limit, Quota, FixedWindow, SlidingWindow, Concurrency]

#: What ``algorithm=`` names: the policy a rate string or a number becomes.
ALGORITHMS: Dict[str, Any] = {
    "token-bucket": Limit,
    "fixed-window": FixedWindow,
    "sliding-window": SlidingWindow,
}

#: What ``RateLimiter(rate)`` accepts: a rate, a policy, a list of them, or a
#: mapping of limit names to one rate each.
RateSpec = Union[
    AnyLimit,
    str,
    float,
    Sequence[Union[AnyLimit, str]],
    Mapping[str, Union[AnyLimit, str, float]],
]

#: A cost: tokens taken from every limit, or a mapping of limit names to the
#: tokens taken from each (a limit not named takes 0).
CostSpec = Union[float, Mapping[str, float]]


def policies(
    rate: RateSpec,
    burst: Optional[int],
    lockout: Optional[Lockout],
    algorithm: str = "token-bucket",
) -> Tuple[AnyLimit, ...]:
    """The limits ``RateLimiter(rate, burst, lockout=..., algorithm=...)`` applies, or its
    error; limits sharing a name are renamed apart (headers tell policies apart by name).
    """
    limits = _distinct_names(_limits_from(rate, burst, _reader(algorithm)))
    if lockout is not None:
        # Exactly a Lockout (step_all and the stores take it by its ``standalone``).
        if type(lockout) is not Lockout:
            raise TypeError(f"lockout must be a limiter.Lockout or None, got {lockout!r:.100}")
        if any(lim.name == lockout.name for lim in limits):
            # Headers and events tell policies apart by name.
            raise ValueError(
                f"the lockout's name {lockout.name!r} is also a limit's name: give the "
                "Lockout another name"
            )
    return limits


def default_name(limits: Sequence[AnyLimit], lockout: Optional[Lockout]) -> str:
    """A limiter's name made from its policies (``"10/s:20"``), the lockout's included."""
    name = "+".join(lim.label for lim in limits)
    if lockout is not None:
        name += f"+lockout:{lockout.breaches}/{lockout.within:g}s:{lockout.duration:g}s"
    return name


def _reader(algorithm: object) -> Any:
    """The policy class ``algorithm`` names, or the error naming it."""
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a str, got {show(algorithm)}")
    reader = ALGORITHMS.get(algorithm)
    if reader is None:
        names = ", ".join(repr(name) for name in ALGORITHMS)
        raise ValueError(f"algorithm must be one of {names}, got {show(algorithm)}")
    return reader


def _is_policy(value: object) -> bool:
    return isinstance(getattr(type(value), "kind", None), str)


def _standalone(policy: Any, where: str = "") -> AnyLimit:
    """``policy``, unless it is a ``Lockout`` given as a limit (``where`` says which)."""
    if not policy.standalone:
        raise TypeError(
            f"{where}a Lockout is no limit: pass it as RateLimiter(..., lockout={policy!r})"
        )
    limit: AnyLimit = policy
    return limit


def _from_number(rate: Any, burst: Optional[int], reader: Any) -> AnyLimit:
    """A policy from a number of units per second (``Limit.coerce`` for a token bucket)."""
    if reader is Limit:
        return Limit.coerce(rate, burst)  # type: ignore[no-any-return]
    if burst is not None:
        raise ValueError(f"burst={burst!r} does not apply to a window: its count is its burst")
    if isinstance(rate, float) and rate.is_integer():
        rate = int(rate)
    if not isinstance(rate, int) or isinstance(rate, bool):
        raise TypeError(
            f"a window's rate must be a whole number per second or a string like "
            f"'5 per 2 seconds', got {show(rate)}"
        )
    return reader(rate, 1.0)  # type: ignore[no-any-return]


def _limits_from(rate: RateSpec, burst: Optional[int], reader: Any) -> Tuple[AnyLimit, ...]:
    if burst is not None and (isinstance(burst, bool) or not hasattr(type(burst), "__index__")):
        # The type first: burst="x" is no integer, whatever the rate says.
        raise TypeError(f"burst must be an integer, got {burst!r:.100}")
    if isinstance(rate, Mapping):
        if burst is not None:
            raise ValueError(
                f"burst={burst!r} is ambiguous with a mapping of limits: give a limit its own "
                "burst as Limit(rate, burst)"
            )
        if not rate:
            raise ValueError("need at least one limit, got an empty mapping")
        return tuple(_named_limit(name, spec, reader) for name, spec in rate.items())
    if isinstance(rate, str):
        parsed: Tuple[AnyLimit, ...] = reader.parse_many(rate)
        if burst is None:
            return parsed
        if reader is not Limit:
            raise ValueError(f"burst={burst!r} does not apply to a window: its count is its burst")
        if len(parsed) > 1:
            raise ValueError(f"burst={burst!r} is ambiguous with several limits in {rate!r}")
        # Named after its text, as without a burst: one policy name either way.
        return (Limit.parse(rate, burst).renamed(parsed[0].name),)
    if isinstance(rate, (list, tuple)):
        if burst is not None:
            raise ValueError(f"burst={burst!r} is ambiguous with a list of limits")
        if not rate:
            raise ValueError("need at least one limit, got an empty list")
        limits: List[AnyLimit] = []
        for item in rate:
            if _is_policy(item):
                limits.append(_standalone(item))
            elif isinstance(item, str):
                limits.extend(reader.parse_many(item))
            else:
                raise TypeError(
                    f"each limit must be a Limit or a string like '10/second', got {item!r}"
                )
        return tuple(limits)
    if _is_policy(rate):
        return (Limit.coerce(_standalone(rate), burst),)
    return (_from_number(rate, burst, reader),)


def _named_limit(key: object, spec: object, reader: Any) -> AnyLimit:
    """The limit ``key: spec`` of a mapping given to ``RateLimiter``, named ``key``."""
    name = check_name(key)  # Limit's own rule (names go into headers and storage keys)
    try:
        if _is_policy(spec):
            return _standalone(spec, f"limit {name!r}: ").renamed(name)
        if isinstance(spec, str):
            parsed: Tuple[AnyLimit, ...] = reader.parse_many(spec)
            if len(parsed) > 1:
                raise ValueError(
                    f"must be one rate, got {spec!r:.100}: give each rate its own name"
                )
            return parsed[0].renamed(name)
        try:
            return _from_number(spec, None, reader).renamed(name)
        except TypeError:
            raise TypeError(
                f"limit {name!r} must be a rate like '10/second', a number of tokens per "
                f"second, a Limit or a Quota, got {spec!r:.100}"
            ) from None
    except ValueError as exc:
        raise ValueError(f"limit {name!r}: {exc}") from None


def _distinct_names(limits: Tuple[AnyLimit, ...]) -> Tuple[AnyLimit, ...]:
    # The draft headers tell policies apart by name: two "default"s would not do.
    if len({lim.name for lim in limits}) == len(limits):
        return limits
    return tuple(lim.numbered(i) for i, lim in enumerate(limits))


class NamedCosts:
    """Costs that name a limiter's limits (``{"tokens": 350}``), made one cost per limit."""

    def __init__(self, limits: Sequence[AnyLimit], lockout: Optional[Lockout]) -> None:
        self._index: Dict[str, int] = {lim.name: i for i, lim in enumerate(limits)}
        self._count = len(limits)
        self._lockout = lockout
        # A lockout is applied with the limits in one apply_many, even beside one limit.
        self._many = self._count > 1 or lockout is not None

    def validate(self, cost: CostSpec) -> Union[float, Tuple[float, ...]]:
        """``RateLimiter.validate_cost``."""
        if isinstance(cost, Mapping):
            costs = self.per_limit(cost)
            return costs[0] if len(costs) == 1 else tuple(costs)
        return checked_cost(cost)

    def per_limit(self, cost: Mapping[str, float]) -> List[float]:
        """One validated cost per limit, in order (0.0 for a limit not named)."""
        costs = [0.0] * self._count
        index = self._index
        for name, value in cost.items():
            if not isinstance(name, str):
                raise TypeError(f"cost names must be limit names (str), got {name!r:.100}")
            i = index.get(name)
            if i is None:
                known = ", ".join(repr(known) for known in index)
                raise ValueError(
                    f"cost names no limit of this limiter: {name!r:.100} (limits: {known})"
                )
            try:
                costs[i] = checked_cost(value)
            except (TypeError, ValueError) as exc:
                raise exc.__class__(f"cost of limit {name!r}: {exc}") from None
        return costs

    def for_store(self, cost: Any) -> Any:
        """The cost ``apply_many`` gets for ``cost``: a mapping made one per applied limit
        (0 for the lockout), a number as it is, a list or tuple a ``TypeError``.
        """
        if isinstance(cost, Mapping):
            costs = self.per_limit(cost)
            if self._lockout is not None:
                costs.append(0.0)
            return tuple(costs)
        if cost.__class__ is tuple or cost.__class__ is list:
            # The stores' per-limit form: a lockout's hidden slot makes it a trap.
            raise TypeError(
                f"cost must be a number or a mapping of limit names to costs, got {cost!r:.100}"
            )
        return cost

    def settled(self, cost: CostSpec, kind: Callable[[object], float]) -> Any:
        """``cost`` as a ``Refund`` or ``Charge`` (``kind``): one per limit for a mapping."""
        if isinstance(cost, Mapping):
            costs = self.per_limit(cost)
            if not self._many:
                return kind(costs[0])
            return tuple(kind(c) for c in costs)
        return kind(cost)
