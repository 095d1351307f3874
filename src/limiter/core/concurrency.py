"""Concurrency limits: at most ``limit`` slots held per key at once, each under a lease.

The rules, cited by number in the code (the why: docs/concurrency.md):

1. A slot is taken by a holder (a random number its taker draws, ``Hold``)
   for ``lease`` seconds: the request is admitted when fewer than ``limit``
   live leases are held, all or nothing beside the limiter's other policies.
2. A lease is live while ``now < expiry``; an expired one is dropped by the
   next step of its key, which frees the slot of a holder that died.
3. Giving back (``Hold(holder, "give")``) drops the holder's lease; its
   result admits when the holder still held it, refuses when the lease had
   expired already (the slot was freed then).  It never takes a slot.
4. Renewing (``"renew"``) moves the holder's expiry to ``now + lease``; a
   holder whose lease expired takes a slot again if one is free, else is
   refused.  Taking again with a holder already holding renews it.
5. A plain number is no holder: 0 (or a ``Refund`` or ``Charge``) is a peek,
   admitted, taking nothing; any other cost is a ``TypeError`` (slots are
   taken through ``RateLimiter.slot``).
6. An expiry more than ``lease + CLOCK_TOLERANCE`` after ``now`` (a clock
   stepped back) is brought back to ``now + lease``.
7. Refusing, ``retry_after`` is the time until the earliest lease expires:
   an upper bound, as a holder usually gives its slot back before then.
   ``reset_after`` is the time until the last lease expires.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, List, Literal, Optional, Sequence, Tuple, Union

from limiter.core._values import Frozen, duration_value, show
from limiter.core.costs import Charge, Hold, policy_cost
from limiter.core.limits import CLOCK_TOLERANCE
from limiter.core.result import RateLimitResult
from limiter.core.state import State, leases_state, read_leases

_isfinite = math.isfinite

#: The most slots one key may have: a key's state holds one lease per slot.
MAX_SLOTS = 1000


def slot_step(
    state: Optional[State], now: float, policy: Concurrency, cost: Any = 0, detail: bool = True
) -> Tuple[Optional[State], Union[RateLimitResult, bool]]:
    """Take, give back or renew a slot of ``policy`` at ``now`` (seconds): the rules above.
    Returns ``(new_state, result)`` (``allowed`` without ``detail``).
    """
    if cost.__class__ is not Hold:
        value = policy_cost(cost, policy.limit, now)  # rule 5: a number's errors first
        if value > 0.0 and cost.__class__ is not Charge:
            raise TypeError(
                f"a Concurrency policy takes slots through RateLimiter.slot() or the "
                f"adapters, not a cost of {show(cost)}"
            )
        action, holder = "peek", 0.0
    else:
        action, holder = cost.action, cost.holder
    if not _isfinite(now):
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    lease = policy.lease
    live, changed = _live(state, now, lease)
    held = _index(live, holder) if action != "peek" else -1
    allowed = True
    if action == "give":  # rule 3
        if held >= 0:
            del live[held : held + 2]
            changed = True
        allowed = held >= 0
    elif action != "peek":  # take or renew: rules 1 and 4
        if held >= 0:
            live[held + 1] = now + lease
            changed = True
        elif len(live) < 2 * policy.limit:
            live += (holder, now + lease)
            changed = True
        else:
            allowed = False
    if changed:
        state = leases_state(live, now)
    if not detail:
        return state, allowed
    # rule 7; a give refused (its lease had expired) waits for nothing
    retry = min(live[1::2]) - now if not allowed and action != "give" else 0.0
    return state, _slot_result(policy, allowed, live, now, retry)


def refuse_slot_shares(name: str, limits: Sequence[Any], shares: Any) -> None:
    """Raise ``TypeError`` when ``shares`` (``validate_cost``'s answer) would take a slot
    (rule 5): nobody would give back a paced call's (``throttle``, the outbound clients).
    """
    if shares.__class__ is not tuple:
        shares = (shares,) * len(limits)
    for limit, share in zip(limits, shares):
        if limit.kind == "concurrency" and share.__class__ is float and share > 0.0:
            raise TypeError(
                f"{name!r} has a Concurrency policy ({limit.name!r}): a call cannot "
                "hold its slot; hold one with limiter.slot(key) around the call, or give "
                "it a cost of 0"
            )


def refuse_slot_cost(limits: Sequence[Any], cost: Any, shares: Any) -> None:
    """Raise ``ValueError`` when ``RateLimiter.slot``'s ``cost`` (``shares``: its
    ``validate_cost``) asks a ``Concurrency`` policy for other than one slot.
    """
    named = hasattr(cost, "keys")  # a mapping: the policies it names
    if not named and any(limit.kind != "concurrency" for limit in limits):
        return  # a number is the other policies' cost
    for i, limit in enumerate(limits):
        if limit.kind != "concurrency" or (named and limit.name not in cost):
            continue
        value = cost[limit.name] if named else cost
        share = shares[i] if shares.__class__ is tuple else shares
        if share.__class__ is not float or share != 1.0:
            raise ValueError(
                f"a slot is one unit: Concurrency policy {limit.name!r} takes one per "
                f"holder, not a cost of {show(value)}; hold more slots with more holders, "
                "and give the other policies their cost by name"
            )


def _live(state: Optional[State], now: float, lease: float) -> Tuple[List[float], bool]:
    """The live ``[holder, expiry, ...]`` of ``state`` at ``now``, and whether any was dropped."""
    if state is None:
        return [], False
    pairs = read_leases(state)
    live: List[float] = []
    changed = False
    latest = now + lease
    for i in range(0, len(pairs), 2):
        expiry = pairs[i + 1]
        if not now < expiry:  # rule 2
            changed = True
            continue
        if expiry - now > lease + CLOCK_TOLERANCE:  # rule 6
            expiry = latest
            changed = True
        live += (pairs[i], expiry)
    return live, changed


def _index(live: List[float], holder: float) -> int:
    """The index of ``holder`` in ``live``'s pairs, or -1."""
    for i in range(0, len(live), 2):
        if live[i] == holder:
            return i
    return -1


def _slot_result(
    policy: Concurrency, allowed: bool, live: List[float], now: float, retry: float
) -> RateLimitResult:
    """The result of a concurrency step leaving the ``live`` leases (rule 7)."""
    expiries = live[1::2]
    free = max(policy.limit - len(expiries), 0)
    reset = max(expiries) - now if expiries else 0.0
    return RateLimitResult(
        allowed=allowed,
        limit=policy.limit,
        remaining=free,
        reset_after=reset,
        retry_after=retry,
        window=policy.lease,
        policy=policy.name,
        kind="concurrency",
    )


class Concurrency(Frozen):
    """At most ``limit`` (an int from 1 to 1000, else ``TypeError``) requests in flight per
    key, each slot held ``lease`` seconds (in (0, 1e9]) at most, so that a dead holder's
    slot is freed when its lease runs out: ``Concurrency(3, lease=120)``.  Results:
    ``remaining`` the free slots, ``window`` the lease.  Guide: docs/concurrency.md.
    """

    kind: ClassVar[Literal["concurrency"]] = "concurrency"
    _params = ("limit", "lease")
    _positional = 1

    limit: int
    lease: float
    window: float

    def __init__(self, limit: int, lease: float = 60.0, name: str = "default") -> None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"concurrency limit must be an int, got {show(limit)}")
        if not 1 <= limit <= MAX_SLOTS:
            raise ValueError(f"concurrency limit must be from 1 to {MAX_SLOTS}, got {limit!r}")
        seconds = duration_value(lease, "lease")
        self._freeze(name, limit, seconds, limit=limit, lease=seconds, window=seconds, slack=0.0)

    #: As ``FixedWindow.step_function``.
    step_function = staticmethod(slot_step)

    def numbered(self, i: int) -> Concurrency:
        """This policy named apart as the ``i``-th of a limiter's policies."""
        return self.renamed(f"{self.limit}inflight#{i}")

    @property
    def label(self) -> str:
        """This policy in a limiter's default name (``"3inflight/60s"``)."""
        return f"{self.limit}inflight/{self.lease:g}s"

    def __str__(self) -> str:
        return f"{self.limit} in flight, lease {self.lease:g}s ({self.name})"
