"""``DenyCache``: a store wrapper that answers repeated denials without asking the store.

A denial takes nothing, so until its ``retry_after`` the same check (same keys,
limits and positive cost, same clock domain) is denied again; the wrapper
replays it through ``limiter.core.bucket.step`` from the debt the store
reported, so ``bucket.py`` stays the only place with the arithmetic.  What is
replayed, the staleness bound ``min(retry_after, max_stale)`` and what never
is: docs/stores.md, "Deny cache".
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

from limiter.clock import finite_seconds
from limiter.core.bucket import admission_excess, step, tokens_left
from limiter.core.costs import Charge, Cost, Refund
from limiter.core.limits import CLOCK_TOLERANCE, Policy
from limiter.core.many import step_all
from limiter.core.result import RateLimitResult
from limiter.core.state import State, bucket_state, lockout_state
from limiter.store import is_nonblocking

_monotonic = time.monotonic

#: How many of the oldest entries an insertion into a full cache checks for expiry.
_PURGE_SCAN = 16
#: Ulps (of twice the largest window) kept from a threshold: the store's
#: arithmetic may differ from a replay's by a rounding or two.
_MARGIN_ULPS = 16

_CacheKey = Union[str, Tuple[str, ...]]


class _Denial(NamedTuple):
    """One remembered denial: enough to replay it through ``step``."""

    limits: Tuple[Policy, ...]  # the limits it was denied under
    cost: float
    # Seconds each bucket lacked to be full at ``at``; when ``locked``, the
    # last is the seconds the lockout had left.
    debts: Tuple[float, ...]
    at: float  # when: the caller's ``now``, or time.monotonic() before the call
    until: float  # replays stop here (seconds, same clock as ``at``)
    injected: bool  # ``at`` is the caller's clock, not time.monotonic()
    many: bool  # from apply_many (the result carries ``results``)
    locked: bool  # a Lockout (the last limit) refused: the key is locked out

    def states(self) -> List[State]:
        """The states the store's answer came from, as seen at ``at``."""
        at = self.at
        if not self.locked:
            return [bucket_state(d, at) for d in self.debts]
        *debts, left = self.debts
        return [*(bucket_state(d, at) for d in debts), lockout_state(0.0, at + left, locked=True)]


def _settled(result: RateLimitResult, limits: Tuple[Policy, ...], cost: float) -> bool:
    """Whether no rounding of the store's own arithmetic could give another ``result``:
    False when an admission, a whole token of ``remaining`` or a tie between limits
    is within a few ulps (then the store is asked).
    """
    parts = result[6] or (result,)
    locked = result[8] == "lockout"
    if locked:
        # Locked out: the lockout's result is the answer (its time left is one
        # subtraction, like a debt), beside the other limits' peeks (cost 0).
        parts, limits, cost = parts[:-1], limits[:-1], 0.0
    top: List[float] = []
    widest = 0.0
    for part, limit in zip(parts, limits):
        debt = part[3]  # a denial's reset_after is the debt; so is a peek's
        margin = _MARGIN_ULPS * math.ulp(2.0 * limit.window)
        widest = max(widest, margin)
        if abs(admission_excess(debt, cost, limit)) <= margin:
            return False
        tokens = tokens_left(debt, limit)
        if tokens < limit.burst:
            fraction = tokens - math.floor(tokens)
            slack = margin * limit.rate + _MARGIN_ULPS * math.ulp(tokens)
            if fraction <= slack or fraction >= 1.0 - slack:
                return False
        if not part[0]:
            top.append(part[4])
    if locked:
        # combine shows the limit and window of the peek with the fewest tokens
        # left, then the longest reset_after: a near tie there could swap them.
        fewest = min((part[2] for part in parts), default=0)
        near = sorted(part[3] for part in parts if part[2] == fewest)
    else:
        # combine shows the denial with the longest retry_after: the same for a tie.
        near = sorted(top)
    # "not (gap <= widest)" rather than "gap > widest": a NaN gap counts as settled.
    return len(near) < 2 or not (near[-1] - near[-2] <= widest)


_SETTLING = (Refund, Charge)


def _settles(cost: Any) -> bool:
    """Whether ``cost`` is a refund's or a charge's (a ``Refund`` or ``Charge``, or one
    among per-limit costs): it changes buckets without a decision, so the entries of
    its keys are out of date, also those a lockout's key joins (``charge`` leaves it out).
    """
    cls = cost.__class__
    return cls in _SETTLING or (
        (cls is tuple or cls is list) and any(c.__class__ in _SETTLING for c in cost)
    )


def _positive_cost(cost: object) -> bool:
    """Whether a denial at ``cost`` may be remembered and replayed (a plain positive number)."""
    cls = cost.__class__
    # A Refund is a float subclass and a bool an int subclass: neither passes.
    return (cls is int or cls is float) and cost > 0  # type: ignore[operator]


class _Call(NamedTuple):
    """A store call planned by ``DenyCache._plan``: what to note or forget after it."""

    keys: Sequence[str]  # what a refund forgets
    limits: Tuple[Policy, ...]
    cost: Cost
    now: Optional[float]
    noted: Optional[_CacheKey]  # the answer is noted under it (None: a refund, or never)
    epoch: int
    at: float
    many: bool


class DenyCache:
    """Wrap a (shared) store so that repeated denials are answered in this process.

    A denied check is replayed from memory with the fields the store would give,
    until its ``retry_after`` or ``max_stale`` seconds have passed; everything else
    goes to ``store``, whose ``StoreError`` passes through.  ``store``: a ``Store``
    and/or ``AsyncStore`` (the wrapper offers the same sides; ``Nonblocking`` when
    it is).  ``max_keys``: entries kept (int >= 1).  ``max_stale``: seconds > 0, or
    ``None`` for no cap beyond ``retry_after``.  Bad values: ``TypeError``/``ValueError``.
    Thread- and asyncio-safe.  See docs/stores.md, "Deny cache".
    """

    nonblocking: bool

    def __init__(
        self, store: Any, *, max_keys: int = 10_000, max_stale: Optional[float] = 1.0
    ) -> None:
        sync = callable(getattr(store, "apply", None))
        asynchronous = callable(getattr(store, "aapply", None))
        if not (sync or asynchronous):
            raise TypeError(f"store must implement Store or AsyncStore, got {store!r:.100}")
        if isinstance(max_keys, bool) or not isinstance(max_keys, int):
            raise TypeError(f"max_keys must be an integer >= 1, got {max_keys!r:.100}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be an integer >= 1, got {max_keys!r}")
        if max_stale is not None and not finite_seconds(max_stale, "max_stale") > 0:
            raise ValueError(
                f"max_stale must be None or a number of seconds > 0, got {max_stale!r}"
            )
        self.store = store
        self._max_keys = max_keys
        self._max_stale = math.inf if max_stale is None else float(max_stale)
        self._entries: OrderedDict[_CacheKey, _Denial] = OrderedDict()
        # Store key -> the apply_many key tuples holding it, for reset(key).
        self._members: Dict[str, Set[Tuple[str, ...]]] = {}
        self._lock = threading.Lock()
        # Bumped by every reset or refund through the wrapper: a denial whose store
        # call overlapped one may predate it and is not remembered.
        self._epoch = 0
        # The latest injected ``now`` (raised under the lock: _settle forgets the keys
        # of a call far behind it, so a lost update would miss a re-anchored bucket).
        self._latest = -math.inf
        self.nonblocking = is_nonblocking(store)
        # Offer exactly the store's sides: RateLimiter and the adapters tell a
        # sync store from an asyncio-only one by callable(store.apply).
        if not sync:
            self.apply = self.apply_many = self.reset = None  # type: ignore[assignment]
        if not asynchronous:
            self.aapply = self.aapply_many = self.areset = None  # type: ignore[assignment]
        for name in ("ping", "aping", "close"):
            if not callable(getattr(store, name, None)):
                setattr(self, name, None)

    @property
    def max_keys(self) -> int:
        """The most entries kept."""
        return self._max_keys

    @property
    def max_stale(self) -> Optional[float]:
        """Seconds a denial may be replayed at most; ``None``: until its ``retry_after``."""
        return None if self._max_stale == math.inf else self._max_stale

    @property
    def using_fallback(self) -> bool:
        """The wrapped store's ``using_fallback`` (False when it has none)."""
        return getattr(self.store, "using_fallback", False) is True

    @property
    def fallback(self) -> Any:
        """The wrapped store's ``fallback`` store, or ``None``."""
        return getattr(self.store, "fallback", None)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return (
            f"DenyCache({self.store!r}, max_keys={self._max_keys!r}, "
            f"max_stale={self.max_stale!r}, entries={len(self._entries)})"
        )

    def clear(self) -> None:
        """Forget every remembered denial (the store is not touched)."""
        with self._lock:
            self._entries.clear()
            self._members.clear()
            self._epoch += 1

    def apply(self, key: str, limit: Policy, cost: float, now: Optional[float]) -> RateLimitResult:
        """The store's ``apply``, or the replay of its last denial of this check."""
        plan = self._plan((key,), (limit,), cost, now)
        return self._run(plan, self.store.apply, key, limit) if isinstance(plan, _Call) else plan

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Policy], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """The store's ``apply_many``, or the replay of its last denial of this check."""
        plan = self._plan(keys, tuple(limits), cost, now, True)
        if isinstance(plan, _Call):
            return self._run(plan, self.store.apply_many, keys, plan.limits)
        return plan

    def reset(self, key: str) -> None:
        """Reset ``key`` in the store, and forget its remembered denials."""
        try:
            self.store.reset(key)
        finally:
            self._forget(key)

    def ping(self) -> None:
        """The wrapped store's ``ping()`` (``None`` on the instance when it has none)."""
        self.store.ping()

    def close(self) -> None:
        """The wrapped store's ``close()`` (``None`` on the instance when it has none)."""
        self.store.close()

    async def aapply(
        self, key: str, limit: Policy, cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """``apply`` for asyncio: the store's ``aapply``, or a replay (no I/O, no await)."""
        plan = self._plan((key,), (limit,), cost, now)
        return (
            await self._arun(plan, self.store.aapply, key, limit)
            if isinstance(plan, _Call)
            else plan
        )

    async def aapply_many(
        self, keys: Sequence[str], limits: Sequence[Policy], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """``apply_many`` for asyncio."""
        plan = self._plan(keys, tuple(limits), cost, now, True)
        if isinstance(plan, _Call):
            return await self._arun(plan, self.store.aapply_many, keys, plan.limits)
        return plan

    async def areset(self, key: str) -> None:
        """``reset`` for asyncio."""
        try:
            await self.store.areset(key)
        finally:
            self._forget(key)

    async def aping(self) -> None:
        """The wrapped store's ``aping()`` (``None`` on the instance when it has none)."""
        await self.store.aping()

    def _plan(
        self,
        keys: Sequence[str],
        limits: Tuple[Policy, ...],
        cost: Cost,
        now: Optional[float],
        many: bool = False,
    ) -> Union[RateLimitResult, _Call]:
        """What a check does, decided without I/O: a replayed result, or the store call.

        A denial is remembered under the ``str`` key or the tuple of keys (never for
        other types); a refund's ``keys`` are forgotten after the call.
        """
        ckey: Optional[_CacheKey]
        noted: Optional[_CacheKey]
        if many:
            # Only str keys are remembered: anything else goes to the store, which judges it.
            noted = tuple(keys) if isinstance(keys, (list, tuple)) else None
            if noted is not None and not all(k.__class__ is str for k in noted):
                noted = None
            ckey = noted
        else:
            noted = keys[0]
            ckey = noted if noted.__class__ is str else None
        replayed = self._replay(ckey, many, limits, cost, now)
        if replayed is not None:
            return replayed
        # The time the answer counts from.  A refund notes nothing, but its now
        # counts as the latest seen: a later denial at an earlier now was applied
        # at the refund's time (the clock tolerance), which a replay from the
        # earlier now would not see.
        at = _monotonic() if now is None else 0.0
        if (now.__class__ is float or now.__class__ is int) and now > self._latest:
            with self._lock:
                if now > self._latest:
                    self._latest = now
        noted = None if _settles(cost) else noted
        return _Call(keys, limits, cost, now, noted, self._epoch, at, many)

    def _run(self, plan: _Call, call: Callable[..., Any], key: Any, limit: Any) -> RateLimitResult:
        """``plan`` carried out: the store's ``apply`` or ``apply_many`` (``call``) of these."""
        try:
            result: RateLimitResult = call(key, limit, plan.cost, plan.now)
        finally:
            self._settle(plan)
        self._after(plan, result)
        return result

    async def _arun(
        self, plan: _Call, call: Callable[..., Any], key: Any, limit: Any
    ) -> RateLimitResult:
        """``_run`` for asyncio, with the store's ``aapply`` or ``aapply_many``."""
        try:
            result: RateLimitResult = await call(key, limit, plan.cost, plan.now)
        finally:
            self._settle(plan)
        self._after(plan, result)
        return result

    def _settle(self, call: _Call) -> None:
        """After the store call, answered or not: a refund's or charge's keys are forgotten, and so
        are those of a call more than ``CLOCK_TOLERANCE`` behind the latest ``now``.
        """
        now = call.now
        if (call.noted is None and _settles(call.cost)) or (
            isinstance(now, (int, float)) and now < self._latest - CLOCK_TOLERANCE
        ):
            # Tokens given back or charged, or the clock stepped back: the store re-anchored the
            # bucket at that now, even on denial (bucket.py rule 7), so a denial
            # remembered at a later now may deny what the store admits.
            self._forget(*call.keys)

    def _replay(
        self,
        ckey: Optional[_CacheKey],
        many: bool,
        limits: Tuple[Policy, ...],
        cost: Cost,
        now: Optional[float],
    ) -> Optional[RateLimitResult]:
        """The replay of ``ckey``'s remembered denial now, or ``None``: ask the store."""
        if ckey is None:
            return None
        entry = self._entries.get(ckey)
        if entry is None or entry.many is not many:
            return None
        if cost != entry.cost or not _positive_cost(cost) or limits != entry.limits:
            return None
        if now is None:
            if entry.injected:
                return None
            t = _monotonic()
        elif not entry.injected or not (now.__class__ is float or now.__class__ is int):
            return None
        else:
            t = now
        if not entry.at <= t < entry.until:
            return None  # earlier than the denial (another frame) or past its deadline
        if entry.many:
            _, result = step_all(entry.states(), t, limits, cost)
        else:
            _, result = step(entry.states()[0], t, limits[0], cost)
        if entry.locked and result[8] != "lockout":
            return None  # the lockout ends: a denial now is a breach for the store to count
        if result[0] or not _settled(result, limits, cost):
            return None  # may pass now, or a rounding could tip a field: ask the store
        return result

    def _after(self, call: _Call, result: RateLimitResult) -> None:
        """Remember a denial; forget the key's entry when the store changed its bucket."""
        _, limits, cost, now, ckey, epoch, at, many = call
        if ckey is None:
            return  # a refund, or a key never remembered
        if result[0]:
            if cost != 0 and ckey in self._entries:
                # An admission took tokens: the entry's debts are out of date.
                with self._lock:
                    self._drop(ckey)
            return
        if not _positive_cost(cost) or self.using_fallback:
            return
        if any(limit.standalone and limit.kind != "bucket" for limit in limits):
            return  # no debt, the store's clock, or a slot given back any moment
        locked = not limits[-1].standalone
        if locked and result[8] != "lockout":
            # A breach: the store must count the next one too, and the lock an
            # entry replays is over (a later call up to CLOCK_TOLERANCE behind
            # counts at the store's time, after it).
            if ckey in self._entries:
                with self._lock:
                    self._drop(ckey)
            return
        if not many and ckey.__class__ is not str:
            return  # only str keys are remembered (a subclass may compare as another key)
        injected = now is not None
        if injected:
            if not (now.__class__ is float or now.__class__ is int) or now < self._latest:
                # The store may have applied it at that later time (CLOCK_TOLERANCE).
                return
            at = now
        parts = result[6] if many else (result,)
        if len(parts) != len(limits):
            return  # not a result this wrapper can replay: never guess
        debts = tuple(part[3] for part in parts)
        until = at + min(result[4], self._max_stale)
        entry = _Denial(limits, cost, debts, at, until, injected, many, locked)  # type: ignore[arg-type]
        with self._lock:
            if self._epoch != epoch:
                return  # a reset or refund overlapped the store call
            entries = self._entries
            if ckey in entries:
                self._drop(ckey)
            elif len(entries) >= self._max_keys:
                self._make_room(at if injected else None)
            entries[ckey] = entry
            if many:
                for member in ckey:
                    self._members.setdefault(member, set()).add(ckey)  # type: ignore[arg-type]

    def _make_room(self, injected_now: Optional[float]) -> None:
        # Caller holds the lock.  An entry on the caller's clock can be judged
        # only against a reading of that clock (``injected_now``).
        entries = self._entries
        mono = _monotonic()
        for ckey, entry in list(itertools.islice(entries.items(), _PURGE_SCAN)):
            clock = injected_now if entry.injected else mono
            if clock is not None and entry.until <= clock:
                self._drop(ckey)
        if len(entries) >= self._max_keys:
            self._drop(next(iter(entries)))

    def _drop(self, ckey: _CacheKey) -> None:
        # Caller holds the lock.
        entry = self._entries.pop(ckey, None)
        if entry is not None and entry.many:
            for member in ckey:
                holders = self._members.get(member)
                if holders is not None:
                    holders.discard(ckey)
                    if not holders:
                        del self._members[member]

    def _forget(self, *keys: str) -> None:
        """Drop every entry that holds one of ``keys`` and bump the epoch, so a denial
        whose store call overlapped this reset or refund is not remembered.
        """
        with self._lock:
            self._epoch += 1
            for key in keys:
                if isinstance(key, str):  # a subclass too: it drops the equal str's entry
                    self._drop(key)
                    for ckey in list(self._members.get(key, ())):
                        self._drop(ckey)
