"""``MemoryStore``: bucket state in this process, behind one lock.

Bounded by ``max_keys``; how it evicts and sweeps without stalling requests:
docs/stores.md, "How MemoryStore stays small and fast".
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from limiter.core.bucket import step
from limiter.core.costs import Cost
from limiter.core.limits import Limit, Policy
from limiter.core.many import step_all
from limiter.core.result import RateLimitResult
from limiter.core.state import State, evicted_last, forgettable, keep_until

_isfinite = math.isfinite
_INF = math.inf
_ONE = 1  # ``cost is _ONE``: CPython's cached small int, the default cost

#: How many old entries one eviction looks at for a full bucket.
_EVICTION_PROBES = 8
#: How many old entries one eviction looks at for one that is no lockout nor
#: held slots (``state.evicted_last``): an eviction lifts a lockout or frees
#: slots only when this many entries in a row are such.
_LOCKED_PROBES = 256
#: Keys examined per lock hold while sweeping; keeps each hold near a millisecond.
_SWEEP_SLICE = 2048
#: Order-list entries tolerated beyond twice the live keys before a rebuild.
_ORDER_SLACK = 64


def admit(
    table: Dict[str, State], key: str, now: float, limit: Policy, cost: float = 1
) -> Optional[bool]:
    """``step(table[key], now, limit, cost, detail=False)``, applied to ``table`` in place.

    Whether admitted (``now`` in seconds), with ``step``'s decisions, states and
    errors; ``None``, changing nothing, when ``key`` is not in ``table``.
    """
    # MemoryStore.allow's hot path (CONTRIBUTING.md, "Hot paths"): the usual
    # request without step's call and result tuple.  Each operation is step's,
    # in step's order, so the floats are the same.  The one place outside
    # limiter.core that reads a bucket's state inline (rule 9 of
    # limiter.core.bucket): a call would cost more than the rest of it.
    state = table.get(key)
    if state is None:
        return None
    if cost is _ONE and _isfinite(now) and limit.__class__ is Limit:  # now finite
        try:
            updated_at = state.imag  # type: ignore[union-attr]
        except AttributeError:  # a tuple: another shape's state, step's case (state.read_bucket)
            updated_at = _INF
        if now >= updated_at:
            debt = state.real - (now - updated_at)  # type: ignore[union-attr]
            ceiling = limit.ceiling
            if debt < 0.0 and ceiling > 0.0:
                # Full again: step clamps the debt to 0.0, and 0.0 + interval
                # (1 / rate) is interval, never above window (burst / rate).
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


class MemoryStore:
    """In-process store: dicts guarded by a lock.  Implements ``Store`` and ``AsyncStore``.

    ``max_keys`` (default 1,000,000; ``None``: no bound) caps ``len(store)``,
    the tracked keys: at the cap full buckets go first, then the least recently
    used (which start over full).  Safe to share between threads and limiters
    (give them distinct ``RateLimiter(name=...)``).  Guide: docs/stores.md.
    """

    #: ``apply`` never waits on I/O, so asyncio callers may call it directly.
    nonblocking = True

    def __init__(self, max_keys: Optional[int] = 1_000_000) -> None:
        if max_keys is not None and (
            isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1
        ):
            raise ValueError(f"max_keys must be an integer >= 1 or None, got {max_keys!r}")
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._young: Dict[str, State] = {}
        self._old: Dict[str, State] = {}
        # Each generation's keys in arrival order (may hold stale entries), and
        # how far eviction has read the old one.
        self._young_order: List[str] = []
        self._old_order: List[str] = []
        self._old_pos = 0

    @property
    def max_keys(self) -> Optional[int]:
        """The cap on tracked keys, or ``None``."""
        return self._max_keys

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def __repr__(self) -> str:
        return f"MemoryStore(max_keys={self._max_keys!r}, keys={len(self)})"

    def apply(self, key: str, limit: Policy, cost: float, now: Optional[float]) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``; ``now`` in seconds (``None``: ``time.time()``)."""
        if now is None:
            now = time.time()
        # Hot path, lock taken without ``with``: see CONTRIBUTING.md "Hot paths".
        self._lock.acquire()
        try:
            young = self._young
            packed = young.get(key)
            if packed is None:
                return self._step_new(key, limit, cost, now, True)  # type: ignore[return-value]
            new_state, result = step(packed, now, limit, cost)
            if new_state is not packed:
                young[key] = new_state  # type: ignore[assignment]
            return result
        finally:
            self._lock.release()

    def allow(self, key: str, limit: Policy, cost: float, now: Optional[float]) -> bool:
        """``apply(...).allowed`` without building a result (``RateLimiter.allow``)."""
        if now is None:
            now = time.time()
        self._lock.acquire()
        try:
            # admit steps a young key in place; others take the long way.
            allowed = admit(self._young, key, now, limit, cost)
            return self._step_new(key, limit, cost, now, False) if allowed is None else allowed  # type: ignore[return-value]
        finally:
            self._lock.release()

    def _step_new(
        self, key: str, limit: Policy, cost: float, now: float, detail: bool
    ) -> Union[RateLimitResult, bool]:
        # Caller holds the lock.  ``step`` for a key with no young entry: promoted from the old
        # generation, or inserted (maybe evicting) when the step stores a state.
        packed = self._promote(key)
        new_state, answer = step(packed, now, limit, cost, detail)  # type: ignore[call-overload]
        if packed is None:
            if new_state is not None:
                self._insert(key, new_state, now)
        elif new_state is not packed:
            self._young[key] = new_state
        return answer  # type: ignore[no-any-return]

    def bind(
        self,
        limit: Policy,
        prefix: str,
        now: Optional[Callable[[], float]],
        storage_key: Callable[[str], str],
        max_length: int,
    ) -> Tuple[Callable[[str, float], RateLimitResult], Callable[[str, float], bool]]:
        """``(check, allow)`` of a one-limit ``RateLimiter`` on this store, as functions.

        Each takes ``(key, cost=1)`` and answers as ``RateLimiter.check`` and
        ``.allow``.  A short ``str`` key from ``"A"`` to ``"z"`` is stored as
        ``prefix + key``, any other through ``storage_key``; ``now`` reads the
        clock in seconds (``None``: ``time.time``).
        """
        # The limiter's check and the store's apply in one frame (CONTRIBUTING.md
        # "Hot paths"); the key test is RateLimiter.check's, unchained.
        lock = self._lock
        clock = time.time if now is None else now
        # A policy's own step function where it has one: one frame fewer than
        # step's hand-over (CONTRIBUTING.md, "Hot paths").
        run = getattr(limit, "step_function", None) or step

        def check(key: str, cost: float = 1) -> RateLimitResult:
            if type(key) is str and len(key) <= max_length and key >= "A" and key < "{":
                key = prefix + key
            else:
                key = storage_key(key)
            at = clock()
            lock.acquire()
            try:
                young = self._young
                packed = young.get(key)
                if packed is None:
                    return self._step_new(key, limit, cost, at, True)  # type: ignore[return-value]
                new_state, result = run(packed, at, limit, cost)
                if new_state is not packed:
                    young[key] = new_state  # type: ignore[assignment]
                return result
            finally:
                lock.release()

        def allow(key: str, cost: float = 1) -> bool:
            if type(key) is str and len(key) <= max_length and key >= "A" and key < "{":
                key = prefix + key
            else:
                key = storage_key(key)
            at = clock()
            lock.acquire()
            try:
                allowed = admit(self._young, key, at, limit, cost)
                return self._step_new(key, limit, cost, at, False) if allowed is None else allowed  # type: ignore[return-value]
            finally:
                lock.release()

        return check, allow

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Policy], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """Charge ``cost`` to every ``keys[i]`` under ``limits[i]``, or to none."""
        if now is None:
            now = time.time()
        with self._lock:
            states = [self._lookup(key) for key in keys]
            new_states, result = step_all(states, now, limits, cost)
            inserted = False
            for key, old, new in zip(keys, states, new_states):
                if new is not old and new is not None:
                    # After an insert, look again: its eviction or generation swap
                    # may have moved or dropped a key of this call (and a key may
                    # come twice).  Writing it back blindly would exceed the cap
                    # and leave a key that no eviction or sweep can find.
                    if (self._lookup(key) is None) if inserted else (old is None):
                        self._insert(key, new, now)
                        inserted = True
                    else:
                        self._young[key] = new
            return result

    def _lookup(self, key: str) -> Optional[State]:
        # Caller holds the lock.
        packed = self._young.get(key)
        return self._promote(key) if packed is None else packed

    def _promote(self, key: str) -> Optional[State]:
        # Caller holds the lock and found no young entry: a key seen again
        # moves from the old generation to the young one.
        if not self._old:
            return None
        packed = self._old.pop(key, None)
        if packed is not None:
            self._young[key] = packed
            self._young_order.append(key)
        return packed

    def _insert(self, key: str, state: State, now: float) -> None:
        # Caller holds the lock; ``key`` is in neither generation.
        if self._max_keys is not None and len(self._young) + len(self._old) >= self._max_keys:
            self._evict(now)
        self._young[key] = state
        self._young_order.append(key)

    def _rotate(self) -> None:
        # Caller holds the lock and the old generation is empty.
        self._old, self._young = self._young, {}
        self._old_order, self._young_order = self._young_order, []
        self._old_pos = 0
        self._compact_if_stale()  # stale entries of the young list would live on

    def _compact_if_stale(self) -> None:
        # Caller holds the lock.  Stale order-list entries keep their key strings
        # alive: past the threshold, rebuild each list from its dict (arrival order).
        young, old = self._young, self._old
        live = len(young) + len(old)
        if len(self._young_order) + len(self._old_order) > 2 * live + _ORDER_SLACK:
            if len(self._young_order) != len(young):
                self._young_order = list(young)
            if len(self._old_order) != len(old):
                self._old_order, self._old_pos = list(old), 0

    def _evict(self, now: float) -> None:
        # Caller holds the lock, and the store is at its cap (so not empty).
        if not self._old:
            self._rotate()
        old, order = self._old, self._old_order
        in_use: List[Tuple[str, State]] = []
        probes = _EVICTION_PROBES
        while len(in_use) < probes and self._old_pos < len(order):
            key = order[self._old_pos]
            self._old_pos += 1
            packed = old.pop(key, None)
            if packed is None:  # stale: promoted, reset or swept since
                continue
            if keep_until(packed) <= now:  # full: forgetting it changes nothing
                self._keep_young(in_use)  # a second chance for those looked at
                return
            in_use.append((key, packed))
            if not evicted_last(packed):  # no lockout nor held slots
                if probes != _EVICTION_PROBES:
                    break  # the one looked further for
            elif len(in_use) == probes == _EVICTION_PROBES and all(
                evicted_last(entry[1]) for entry in in_use
            ):
                # Lockouts and held slots go last: when all in reach are, look further,
                # up to _LOCKED_PROBES entries, for one that is neither.
                probes = _LOCKED_PROBES
        if in_use:  # nothing full in reach: the oldest that is neither goes, else the oldest
            victim = next((i for i, (_, state) in enumerate(in_use) if not evicted_last(state)), 0)
            del in_use[victim]
            self._keep_young(in_use)
            return
        # The order list is used up, so the old generation is empty: rotate again.
        self._evict(now)

    def _keep_young(self, entries: List[Tuple[str, State]]) -> None:
        for key, packed in entries:
            self._young[key] = packed
            self._young_order.append(key)

    def reset(self, key: str) -> None:
        """Forget ``key``."""
        with self._lock:
            # A key is never in both generations.
            if self._young.pop(key, None) is None and self._old.pop(key, None) is None:
                return
            self._compact_if_stale()  # its order-list entry is stale now

    def clear(self) -> None:
        """Forget every key."""
        with self._lock:
            self._young, self._old = {}, {}
            self._young_order, self._old_order, self._old_pos = [], [], 0

    async def aapply(
        self, key: str, limit: Policy, cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """``apply`` for asyncio callers; never blocks beyond a brief lock."""
        return self.apply(key, limit, cost, now)

    async def aapply_many(
        self, keys: Sequence[str], limits: Sequence[Policy], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """``apply_many`` for asyncio callers."""
        return self.apply_many(keys, limits, cost, now)

    async def areset(self, key: str) -> None:
        """``reset`` for asyncio callers."""
        self.reset(key)

    def sweep(self, now: Optional[float] = None, max_age: Optional[float] = None) -> int:
        """Delete keys whose bucket is full at ``now`` (seconds; ``None``: ``time.time()``).

        With ``max_age`` (seconds), keys idle longer go too (they come back
        full).  Yields the lock between slices: a check waits about a
        millisecond at most.  Returns the number of keys deleted.
        """
        # One function: how long the lock is held per slice is easier to check
        # when the whole walk is in one place.
        if now is None:
            now = time.time()
        horizon = -float("inf") if max_age is None else now - max_age
        with self._lock:
            old, old_order, old_start = self._old, self._old_order, self._old_pos
            young, young_order = self._young, self._young_order
            young_end = len(young_order)
        deleted = 0
        kept_old: List[str] = []
        kept_young: List[str] = []
        for gen, order, start, end, kept in (
            (old, old_order, old_start, len(old_order), kept_old),
            (young, young_order, 0, young_end, kept_young),
        ):
            for first in range(start, end, _SWEEP_SLICE):
                self._lock.acquire()
                try:
                    for key in order[first : min(first + _SWEEP_SLICE, end)]:
                        packed = gen.get(key)
                        if packed is None:
                            continue  # stale: moved, evicted or reset since
                        if forgettable(packed, now, horizon):
                            del gen[key]  # deleting never resizes a dict: no pause
                            deleted += 1
                        else:
                            kept.append(key)
                finally:
                    self._lock.release()
                # threading.Lock is not fair: without a pause the sweeper would
                # take it straight back and a waiting check would starve.
                time.sleep(0)
        with self._lock:
            # Drop the stale entries from the order lists, unless a rotation
            # replaced them meanwhile (then the next rotation drops them).
            if self._old is old and self._old_order is old_order:
                self._old_order, self._old_pos = kept_old, 0
            if self._young is young and self._young_order is young_order:
                kept_young.extend(young_order[young_end:])  # arrived meanwhile: few
                self._young_order = kept_young
            # A key reset and seen again is kept once per entry; a rotation or a
            # rebuild meanwhile left the lists as they were: bound them here.
            self._compact_if_stale()
        return deleted
