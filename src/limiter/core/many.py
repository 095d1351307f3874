"""Several policies at once: ``step_all``, all admit or none is charged."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from limiter.core.bucket import step
from limiter.core.costs import Cost, check_count, is_give
from limiter.core.limits import Policy
from limiter.core.lockout import Lockout, breach, lock_status
from limiter.core.result import RateLimitResult, combine
from limiter.core.state import State


def step_all(
    states: Sequence[Optional[State]], now: float, limits: Sequence[Policy], cost: Cost = 1
) -> Tuple[List[Optional[State]], RateLimitResult]:
    """Apply one request to several policies at once: all admit it, or none is charged.

    ``states[i]`` is the state under ``limits[i]``; ``cost`` is one cost for all or
    one per limit (``ValueError`` on a length mismatch).  Returns the new states
    (same objects where unchanged) and ``combine``'s result; on denial, the
    admitting limits' ``results`` are peeks.  A ``Lockout`` may come last
    (docs/policies.md, "Lockout after repeated breaches": while locked, the request
    is refused as a denial is; else a denial is a breach); a ``Hold`` giving slots
    back is never refused as a whole.
    """
    n = len(limits)
    if len(states) != n or not limits:
        raise ValueError(f"need one state per limit and at least one limit, got {n}")
    cls = cost.__class__
    if cls is not tuple and cls is not list and limits[-1].standalone:
        # The usual call (one cost, no lockout) without the general path's work.
        stepped = [step(state, now, limit, cost) for state, limit in zip(states, limits)]  # type: ignore[arg-type]
        results = [result for _, result in stepped]
        if all(result[0] for result in results) or is_give(cost):
            # A give is never refused as a whole: a lease that had lapsed
            # refuses (combine says so) without keeping the other keys'.
            return [new for new, _ in stepped], combine(results)
        return _refused(states, now, limits, stepped, results), combine(results)
    if cls is tuple or cls is list:
        costs: Sequence[float] = cost  # type: ignore[assignment]
        check_count(costs, n)
    else:
        costs = [cost] * n  # type: ignore[list-item]
    lockout: Optional[Lockout] = None
    locked = False
    if not limits[-1].standalone:
        if n == 1:
            raise ValueError("a Lockout needs at least one limit before it")
        lockout = limits[-1]  # type: ignore[assignment]  # the one not standalone
        n -= 1
        lock_state, lock_result, count, run_end = lock_status(states[n], now, lockout)  # type: ignore[arg-type]
        locked = not lock_result[0]
    stepped = [step(states[i], now, limits[i], costs[i]) for i in range(n)]
    results = [result for _, result in stepped]
    admitted = not locked and all(result[0] or is_give(c) for result, c in zip(results, costs))
    if admitted:
        new_states: List[Optional[State]] = [new for new, _ in stepped]
    else:
        new_states = _refused(states, now, limits, stepped, results)
    if lockout is not None:
        if not admitted and not locked:
            lock_state, lock_result = breach(count, run_end, now, lockout)
        new_states.append(lock_state)
        results.append(lock_result)
    return new_states, combine(results)


def _refused(
    states: Sequence[Optional[State]],
    now: float,
    limits: Sequence[Policy],
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
