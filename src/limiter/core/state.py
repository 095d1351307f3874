"""The state codec: how each policy's state is stored, read, and how long it is kept.

A state is one ``complex`` (32 bytes), or a tuple for the policies needing more;
stores keep, expire and sweep it without knowing the policy (docs/concepts.md,
"Why the bucket computes as it does"):

* A token bucket: ``complex(debt, updated_at)``, seconds (``bucket.py`` rule 9).
* A count in a window (``Quota``, ``FixedWindow``): ``complex(used * 2**-600, end)``.
* A lockout: ``complex(breaches * 2**-600, run_end)`` for an open run,
  ``complex(-2**-600, until)`` when locked out.
* A ``SlidingWindow``: ``(previous, current, until)``.
* A ``Concurrency`` policy: ``(holder, expiry, ..., until)``, a pair per slot held.

``keep_until`` (``real + imag``, or a tuple's last number) is when any state may
be forgotten; ``None`` is a key never seen.  A policy reading another shape's
state (another kind of policy wrote the key) reads nothing held, over since
``-inf`` (docs/policies.md); bucket.lua and apply.sql read it as missing.
"""

from __future__ import annotations

import math
import struct
from typing import Optional, Sequence, Tuple, Union

State = Union[complex, Tuple[float, ...]]

_SCALE = 2.0**-600
_UNSCALE = 2.0**600
_LOCKED = -(2.0**-600)
_NEVER = -math.inf


def bucket_state(debt: float, updated_at: float) -> State:
    """A token bucket that lacked ``debt`` seconds of refill at ``updated_at`` (seconds)."""
    return complex(debt, updated_at)


def read_bucket(state: State) -> Tuple[float, float]:
    """``(debt, updated_at)`` of a bucket's ``state``; (0.0, -inf), full, for another shape's."""
    try:
        return state.real, state.imag  # type: ignore[union-attr]
    except AttributeError:  # a tuple (no cost unless raised)
        return 0.0, _NEVER


def count_state(used: float, end: float) -> State:
    """A window ending at ``end`` (seconds) with ``used`` units taken (quota, fixed window)."""
    return complex(used * _SCALE, end)


def read_count(state: State) -> Tuple[float, float]:
    """``(used, end)`` of a quota's or fixed window's ``state``; (0.0, -inf) for another shape's."""
    try:
        return state.real * _UNSCALE, state.imag  # type: ignore[union-attr]
    except AttributeError:  # a tuple (no cost unless raised)
        return 0.0, _NEVER


def sliding_state(previous: float, current: float, until: float) -> State:
    """A sliding window: units in the previous and current window, forgotten at ``until``."""
    return (previous, current, until)


def read_sliding(state: State) -> Tuple[float, float, float]:
    """``(previous, current, until)`` of a sliding window's ``state`` (or another shape's)."""
    if state.__class__ is tuple:
        return state  # type: ignore[return-value]
    return 0.0, 0.0, _NEVER


class Leases(tuple):  # type: ignore[type-arg]
    """A concurrency policy's state: a tuple that says what it holds (``to_row`` packs it)."""

    __slots__ = ()


def leases_state(pairs: Sequence[float], now: float) -> State:
    """Leases ``[holder, expiry, ...]`` at ``now``, forgotten at the last expiry (or ``now``)."""
    expiries = pairs[1::2]
    return Leases((*pairs, max(expiries) if expiries else now))


def read_leases(state: State) -> Tuple[float, ...]:
    """The ``(holder, expiry, ...)`` pairs of a concurrency policy's ``state`` (or ``()``)."""
    if state.__class__ is not Leases:
        return ()
    return state[:-1]


def lockout_state(breaches: float, end: float, locked: bool = False) -> State:
    """A lockout's state: ``breaches`` in a run ending at ``end``, or locked until ``end``
    (``breaches`` not kept: the key starts afresh at ``end``).
    """
    return complex(_LOCKED, end) if locked else complex(breaches * _SCALE, end)


def read_lockout(state: State) -> Tuple[bool, float, float]:
    """``(locked, breaches, end)`` of a lockout's ``state`` (``breaches`` 0.0 when locked)."""
    if state.__class__ is not complex:
        return False, 0.0, _NEVER
    mark = state.real
    if mark < 0.0:
        return True, 0.0, state.imag
    return False, mark * _UNSCALE, state.imag


def evicted_last(state: State) -> bool:
    """True when a store at its cap evicts ``state`` last: a lockout's locked state, or
    leases (slots held: forgetting them admits more than the limit in flight)."""
    cls = state.__class__
    return (cls is complex and state.real < 0.0) or cls is Leases  # type: ignore[union-attr]


Row = Tuple[float, float, Optional[Union[float, bytes]]]


def to_row(state: State) -> Row:
    """Any policy's ``state`` as three values: ``(real, imag, None)``, a sliding window's
    numbers, or leases' ``(slots held, until, pairs as little-endian doubles)``.
    """
    cls = state.__class__
    if cls is Leases:
        pairs = read_leases(state)
        return len(pairs) / 2.0, state[-1], struct.pack(f"<{len(pairs)}d", *pairs)  # type: ignore[index]
    if cls is tuple:
        return state  # type: ignore[return-value]
    return state.real, state.imag, None  # type: ignore[union-attr]


def from_row(first: object, second: object, third: object = None) -> State:
    """The state ``to_row`` gave ``(first, second, third)`` for; a row no store wrote
    is a ``ValueError`` or ``TypeError``.
    """
    numbers = [float(first), float(second)]  # type: ignore[arg-type]
    if third.__class__ is bytes:
        if len(third) % 16:
            raise ValueError(f"leases of {len(third)} bytes: not pairs of doubles")
        numbers[:1] = struct.unpack(f"<{len(third) // 8}d", third)
    elif third is not None:
        numbers.append(float(third))  # type: ignore[arg-type]
    if not all(map(math.isfinite, numbers)):
        raise ValueError(f"a state holds a NaN or an infinity: {numbers!r:.100}")
    if third is None:
        return complex(*numbers)
    return Leases(numbers) if third.__class__ is bytes else tuple(numbers)


def forgettable(state: State, now: float, horizon: float) -> bool:
    """True when a store may drop ``state`` at ``now``: ``keep_until(state) <= now``, or
    its time is before ``horizon`` (``now - max_age``; ``-inf``: never).
    """
    if state.__class__ is not complex:
        at = state[-1]  # type: ignore[index]
        return at <= now or at < horizon
    at = state.imag
    return state.real + at <= now or at < horizon


def keep_until(state: State) -> float:
    """When ``state`` stops mattering (seconds): an absent key means the same from then."""
    if state.__class__ is not complex:
        return state[-1]  # type: ignore[index]
    return state.real + state.imag
