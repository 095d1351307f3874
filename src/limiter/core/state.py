"""The state codec: how each policy's state is stored, read, and how long it must be kept.

A policy's state is one ``complex`` (32 bytes; a tuple of two floats takes
104), or, for the one policy that needs three numbers, a tuple of three
floats: stores keep it, expire it and sweep it without knowing the policy,
and this module alone builds or reads one (``bucket.py``'s hot path inlines
``bucket_state`` and ``read_bucket``, citing them).

* A token bucket: ``complex(debt, updated_at)``, seconds (rule 9 of ``bucket.py``).
* A count in a window (a ``Quota``, a ``FixedWindow``):
  ``complex(used * 2**-600, end)``: the units used in the window ending at ``end``.
* A lockout: ``complex(breaches * 2**-600, run_end)`` for an open run of
  breaches, ``complex(-2**-600, until)`` when locked out.
* A ``SlidingWindow``: ``(previous, current, until)``, the units counted in
  the previous and the current window, and the end of the window after the
  current one (when both are forgotten).
* A ``Concurrency`` policy's leases: ``(holder, expiry, ..., until)``, a
  pair per slot held (in the order taken), then the last expiry (or the
  time the last slot was given back).

The scaled counts are far below half a unit in the last place of any time,
so ``keep_until`` (``real + imag``) is the bucket's "full again" time, the
window's end and the lockout's run or lock end alike, and scaling by a
power of two gives the counts back exactly.  ``None`` is a key never seen.
A store with columns keeps ``to_row``'s three values (the third ``None``
but for a sliding window, and ``bytes`` for leases).  A tuple's last
number is always when it may be forgotten.

A policy reads only states of its own shape: a complex (a bucket, a count,
a lockout), a sliding window's three numbers, leases.  A state of another
shape (a key another kind of policy wrote under the same limiter name: a
deployment changed its policy) reads as nothing held, over since ever
(``-inf``): the key starts afresh, as a new key, and the state stays until
the new policy writes its own.  The ``read_*`` functions below apply this
rule; ``bucket.step`` and ``memory.admit``, reading a bucket inline, catch
the ``AttributeError`` of a tuple's ``.imag`` (free unless raised) as
``read_bucket`` does.  The Redis script (``misfit``) reads such a key as
missing.  The complex shapes are
not told apart: a bucket's state read as a count is a window over at its
``updated_at``, a count's read as a bucket owes next to nothing, both
starting afresh but for a clock behind the state's time (the tolerance,
rule 7 of ``bucket.py``, rule 6 of ``window.py``).
"""

from __future__ import annotations

import math
import struct
from typing import Optional, Sequence, Tuple, Union

#: One policy's state of one key (see the module docstring).
State = Union[complex, Tuple[float, ...]]

_SCALE = 2.0**-600
_UNSCALE = 2.0**600
#: The real part of a locked-out key's state: negative marks it.
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
    """``(previous, current, until)`` of a sliding window's ``state``.

    ``(0.0, 0.0, -inf)`` for a state of another shape (a complex, leases).
    """
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
    """The ``(holder, expiry, ...)`` pairs of a concurrency policy's ``state``.

    ``()`` (no slot held) for a state of another shape.
    """
    if state.__class__ is not Leases:
        return ()
    return state[:-1]


def lockout_state(breaches: float, end: float, locked: bool = False) -> State:
    """A lockout's state: ``breaches`` in a run ending at ``end``, or locked until ``end``.

    Locked, ``breaches`` is not kept (the key starts afresh at ``end``).
    """
    return complex(_LOCKED, end) if locked else complex(breaches * _SCALE, end)


def read_lockout(state: State) -> Tuple[bool, float, float]:
    """``(locked, breaches, end)`` of a lockout's ``state`` (``breaches`` 0.0 when locked).

    ``(False, 0.0, -inf)`` for a state of another shape.
    """
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
    """Any policy's ``state`` as three values for a store with columns.

    ``(real, imag, None)`` for a complex state, a sliding window's three
    numbers, and for leases ``(slots held, until, the pairs as bytes)``
    (little-endian doubles).
    """
    cls = state.__class__
    if cls is Leases:
        pairs = read_leases(state)
        return len(pairs) / 2.0, state[-1], struct.pack(f"<{len(pairs)}d", *pairs)  # type: ignore[index]
    if cls is tuple:
        return state  # type: ignore[return-value]
    return state.real, state.imag, None  # type: ignore[union-attr]


def from_row(first: object, second: object, third: object = None) -> State:
    """The state ``to_row`` gave ``(first, second, third)`` for.

    A row no store wrote (a non-number, NaN or infinity, a lease blob of the
    wrong length) is a ``ValueError`` or ``TypeError``.
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
    """True when a store may drop ``state`` at ``now``: ``keep_until(state) <= now``, or idle.

    Idle: its time (a bucket's ``updated_at``, a quota's or lockout's end) is
    before ``horizon`` (``MemoryStore.sweep``'s ``now - max_age``; ``-inf``: never).
    """
    if state.__class__ is not complex:
        at = state[-1]  # type: ignore[index]
        return at <= now or at < horizon
    at = state.imag
    return state.real + at <= now or at < horizon


def keep_until(state: State) -> float:
    """When ``state`` stops mattering (seconds): a store may forget it from then on.

    A bucket is full again, a quota's window or a lockout's run or lock is
    over: an absent key means the same (Redis's ``PX``, SQLite's ``full_at``
    column, ``MemoryStore.sweep``); a sliding window's ``until``.
    """
    if state.__class__ is not complex:
        return state[-1]  # type: ignore[index]
    return state.real + state.imag
