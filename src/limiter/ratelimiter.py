"""``RateLimiter``: the object users hold.  It binds limits, a store and a clock."""

from __future__ import annotations

import copy
import hashlib
from typing import Any, Callable, List, Mapping, Optional, Tuple, TypeVar, Union

from limiter import cleanup, waiting
from limiter._observed import Observed
from limiter.backends.memory import MemoryStore
from limiter.clock import Clock, SystemClock
from limiter.core.concurrency import refuse_slot_cost
from limiter.core.costs import Charge, Hold, Refund
from limiter.core.keys import MAX_KEY_LENGTH, refuse_rate_key
from limiter.core.limits import Policy
from limiter.core.lockout import Lockout
from limiter.core.result import RateLimitResult
from limiter.core.spec import AnyLimit, CostSpec, NamedCosts, RateSpec, default_name, policies
from limiter.events import Observer, Outcome
from limiter.slots import Slot
from limiter.store import AsyncStore, Store, SupportsAllow, is_nonblocking

_Apply = Callable[[str, Policy, float, Optional[float]], RateLimitResult]
F = TypeVar("F", bound=Callable[..., Any])

_ONE = 1  # ``cost is _ONE``: the default cost, CPython's cached small int

#: The storage-key suffix of a limiter's lockout state.  A limit's suffix is
#: ``|<name>`` and a limit name cannot hold ``"``, so no limit has this one.
_LOCKOUT_SUFFIX = '|"lockout"'


def _store_from(store: Optional[Union[Store, AsyncStore, str]]) -> Union[Store, AsyncStore]:
    if store is None:
        return MemoryStore()
    if isinstance(store, str):
        # Imported here: urls imports backends lazily, and most limiters need none.
        from limiter.urls import store_from_url

        made: Union[Store, AsyncStore] = store_from_url(store)
        return made
    if not (callable(getattr(store, "apply", None)) or callable(getattr(store, "aapply", None))):
        raise TypeError(f"store must implement Store or AsyncStore, got {store!r}")
    return store


class RateLimiter(Observed):
    """Rate limits (token buckets, quotas, windows, slots) applied per key.

    ``rate``: tokens per second, a string (``"100/minute"``, ``"10/second;1000/hour"``),
    a policy, a list of them, or a mapping of names to rates (``{"requests":
    "60/minute", "tokens": "90000/minute"}``); a request passes only if every limit
    allows it.  ``burst``: one bucket's capacity (default N for ``"N/unit"``,
    ``ceil(rate)`` for a number).  ``algorithm``: ``"token-bucket"``,
    ``"fixed-window"`` or ``"sliding-window"``.  ``lockout``: a ``Lockout``.
    ``store``: a ``Store``/``AsyncStore`` or a URL (default: a new ``MemoryStore``).
    ``clock``: default ``SystemClock``.  ``name``: this limiter's key namespace in a
    shared store.  ``on_decision``: called with a ``DecisionEvent`` after each check.
    Wrong types raise ``TypeError``, wrong values ``ValueError``.  See docs/policies.md.
    """

    def __init__(
        self,
        rate: RateSpec,
        burst: Optional[int] = None,
        *,
        store: Optional[Union[Store, AsyncStore, str]] = None,
        clock: Optional[Clock] = None,
        name: Optional[str] = None,
        on_decision: Optional[Observer] = None,
        lockout: Optional[Lockout] = None,
        algorithm: str = "token-bucket",
    ) -> None:
        self.limits: Tuple[AnyLimit, ...] = policies(rate, burst, lockout, algorithm)
        self.lockout: Optional[Lockout] = lockout
        self._named = NamedCosts(self.limits, lockout)
        self.store: Union[Store, AsyncStore] = _store_from(store)
        apply = getattr(self.store, "apply", None)
        aapply = getattr(self.store, "aapply", None)
        if clock is not None and not callable(getattr(clock, "now", None)):
            raise TypeError(f"clock must have a now() method returning seconds, got {clock!r}")
        if name is None:
            name = default_name(self.limits, lockout)
        elif not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r}")
        self.name = name
        # A store of its own needs no namespace: that saves a concatenation per
        # check and some 20 bytes per tracked key.  In the name, ":" and "\" are
        # escaped so that no key of one limiter is another's ("login" with the key
        # "admin:alice" is not "login:admin" with "alice").
        escaped = name.replace("\\", "\\\\").replace(":", "\\:")
        self._prefix = "" if store is None else escaped + ":"
        self._limit = self.limits[0]
        # A lockout is applied with the limits in one apply_many, even beside one limit.
        self._many = len(self.limits) > 1 or lockout is not None
        self._slot_indexes = tuple(
            i for i, policy in enumerate(self.limits) if policy.kind == "concurrency"
        )
        #: True with a ``Concurrency`` policy: a request holds a ``slot``, not a check.
        self.holds_slots: bool = bool(self._slot_indexes)
        self._applied: Tuple[Policy, ...] = (*self.limits, lockout) if lockout else self.limits
        self._suffixes = (
            tuple(f"|{lim.name}" for lim in self.limits) + ((_LOCKOUT_SUFFIX,) if lockout else ())
            if self._many
            else ()
        )
        self.clock: Clock = SystemClock() if clock is None else clock
        self._clock_now: Optional[Callable[[], float]] = None if clock is None else clock.now
        self._apply: Optional[_Apply] = apply if callable(apply) and not self._many else None
        self._sync: Optional[Store] = self.store if callable(apply) else None  # type: ignore[assignment]
        self._async: Optional[AsyncStore] = self.store if callable(aapply) else None  # type: ignore[assignment]
        #: True when checks never wait on I/O: ``acheck`` then calls ``check``.
        self.nonblocking: bool = is_nonblocking(self.store)
        self._bind_fast_paths()
        if on_decision is not None and not callable(on_decision):
            raise TypeError(f"on_decision must be callable or None, got {on_decision!r}")
        self.on_decision: Optional[Observer] = on_decision
        self._denied = Outcome.DENIED
        self.shadow = False
        self._shadow_view: Optional[RateLimiter] = None
        if on_decision is not None:
            self._observe()

    def _bind_fast_paths(self) -> None:
        """The store's ``allow``, and a plain ``MemoryStore``'s functions bound to this limiter."""
        self._allow: Optional[Callable[[str, Policy, float, Optional[float]], bool]] = None
        if self._apply is not None and isinstance(self.store, SupportsAllow):
            allow = self.store.allow
            self._allow = allow if callable(allow) else None
        # CONTRIBUTING.md, "Hot paths": a plain MemoryStore's bound functions.
        self._fast_check: Optional[Callable[[str, float], RateLimitResult]] = None
        self._fast_allow: Optional[Callable[[str, float], bool]] = None
        if type(self.store) is MemoryStore and not self._many:
            self._fast_check, self._fast_allow = self.store.bind(
                self._limit, self._prefix, self._clock_now, self.storage_key, MAX_KEY_LENGTH
            )

    def shadowed(self) -> RateLimiter:
        """The shadow view (made once): same limits, store and buckets; ``shadow`` is True
        and its observer sees a denial as ``"shadow_denied"`` (``mode="shadow"``).
        """
        if self.shadow:
            return self
        view = self._shadow_view
        if view is None:
            view = copy.copy(self)
            view.shadow = True
            view._denied = Outcome.SHADOW_DENIED
            if view.on_decision is not None:
                view._observe()
            self._shadow_view = view
        return view

    def __repr__(self) -> str:
        limits = "; ".join(str(lim) for lim in self._applied)  # with the lockout
        return f"RateLimiter({limits}, name={self.name!r}, store={self.store!r})"

    @property
    def burst(self) -> int:
        """The capacity of the most restrictive bucket, in tokens (for headers and docs)."""
        return min(lim.burst for lim in self.limits)

    def storage_key(self, key: str) -> str:
        """The key as stored: namespaced, hashed when over ``MAX_KEY_LENGTH``; a key that
        parses as a rate (``"5/minute"``) is a ``TypeError``.
        """
        # Per request: a rate has a "/" or a space, so a short key with neither skips the test.
        if type(key) is str and len(key) <= MAX_KEY_LENGTH and "/" not in key and " " not in key:
            return self._prefix + key
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, got {key!r:.100}")
        refuse_rate_key(key)
        if len(key) > MAX_KEY_LENGTH:
            digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
            key = "sha256:" + digest
        return self._prefix + key

    def _storage_keys(self, key: str) -> List[str]:
        # The buckets of one key share a Redis Cluster hash tag ("{...}"), so a
        # store can charge them in one atomic script; a tag cannot hold braces.
        base = self.storage_key(key)
        if "{" in base or "}" in base:
            base = "sha256:" + hashlib.sha256(base.encode("utf-8", "surrogatepass")).hexdigest()
        return [f"{{{base}}}{suffix}" for suffix in self._suffixes]

    def _now(self) -> Optional[float]:
        return None if self._clock_now is None else self._clock_now()

    def validate_cost(self, cost: CostSpec) -> Union[float, Tuple[float, ...]]:
        """``cost`` as this limiter charges it (a float of tokens; for a mapping of limit
        names, one per limit, 0.0 for one not named), or the error a check would raise:
        an unknown name, negative or NaN is a ``ValueError``; a bool, a list or another
        non-number a ``TypeError``.
        """
        return self._named.validate(cost)

    def check(self, key: str, cost: CostSpec = 1) -> RateLimitResult:
        """Take ``cost`` tokens (default 1; a mapping: per limit name) from ``key``'s
        buckets if all are there; a denial takes nothing.  ``0`` is a peek; negative or
        NaN: ``ValueError``; above ``burst``: denied with ``retry_after == inf``.
        See docs/concepts.md, "Several limits at once".
        """
        # The hot path, inlined: the default cost and plain numbers skip the mapping test.
        if (
            cost is not _ONE
            and (cls := cost.__class__) is not float
            and cls is not int
            and isinstance(cost, Mapping)
        ):
            if self._many:
                return self._check_slow(key, cost)
            cost = self._named.per_limit(cost)[0]
        fast = self._fast_check
        if fast is not None:
            return fast(key, cost)  # type: ignore[arg-type]
        apply = self._apply
        if apply is None:
            return self._check_slow(key, cost)
        return apply(self.storage_key(key), self._limit, cost, self._now())  # type: ignore[arg-type]

    def _check_slow(self, key: str, cost: Any) -> RateLimitResult:
        if self._sync is None:
            raise TypeError(f"{self.store!r} is async only: use acheck/apeek/areset")
        if cost.__class__ is not int and cost.__class__ is not float:
            cost = self._named.for_store(cost)
        return self._sync.apply_many(self._storage_keys(key), self._applied, cost, self._now())

    def allow(self, key: str, cost: CostSpec = 1) -> bool:
        """``check(key, cost).allowed``, on the store's fast path when it has one."""
        if (
            cost is not _ONE
            and (cls := cost.__class__) is not float
            and cls is not int
            and isinstance(cost, Mapping)
            and not self._many
        ):
            cost = self._named.per_limit(cost)[0]  # see check
        bound = self._fast_allow
        if bound is not None:
            return bound(key, cost)  # type: ignore[arg-type]
        fast = self._allow
        if fast is None:
            result: RateLimitResult = RateLimiter.check(self, key, cost)
            return result[0]
        return fast(self.storage_key(key), self._limit, cost, self._now())  # type: ignore[arg-type]

    def peek(self, key: str) -> RateLimitResult:
        """``key``'s state now, taking nothing (a locked-out key: the lockout's result)."""
        refuse_rate_key(key)
        return RateLimiter.check(self, key, 0)  # a peek is no decision: not observed

    def refund(
        self, key: str, cost: CostSpec = 1, taken_at: Optional[float] = None
    ) -> RateLimitResult:
        """Give back ``cost`` tokens (as ``check``'s) that a check of ``key`` took; never
        above burst.  ``taken_at`` (this limiter's clock, before the check): a window
        that started after it gets nothing back.  Not observed; no lockout applies.
        """
        refuse_rate_key(key)
        return self._settle(key, self._refund_cost(cost, taken_at))

    async def arefund(
        self, key: str, cost: CostSpec = 1, taken_at: Optional[float] = None
    ) -> RateLimitResult:
        """``refund`` for asyncio."""
        refuse_rate_key(key)
        return await self._asettle(key, self._refund_cost(cost, taken_at))

    def _refund_cost(self, cost: CostSpec, taken_at: Optional[float]) -> Any:
        if taken_at is None:
            return self._named.settled(cost, Refund)
        Refund(0, taken_at)  # taken_at's own error first
        return self._named.settled(cost, lambda c: Refund(c, taken_at))

    def charge(self, key: str, cost: CostSpec = 1) -> RateLimitResult:
        """Take ``cost`` tokens (as ``check``'s) from ``key``'s buckets unconditionally,
        owing at most one burst; the result is ``allowed``.  Not observed; no lockout applies.
        """
        refuse_rate_key(key)
        return self._settle(key, self._named.settled(cost, Charge))

    async def acharge(self, key: str, cost: CostSpec = 1) -> RateLimitResult:
        """``charge`` for asyncio."""
        refuse_rate_key(key)
        return await self._asettle(key, self._named.settled(cost, Charge))

    def _limit_keys(self, key: str) -> List[str]:
        keys = self._storage_keys(key)
        return keys[:-1] if self.lockout is not None else keys

    def _settle(self, key: str, cost: Any) -> RateLimitResult:
        if self._sync is None:
            raise TypeError(f"{self.store!r} is async only: use arefund/acharge")
        if self._many:
            return self._sync.apply_many(self._limit_keys(key), self.limits, cost, self._now())
        return self._sync.apply(self.storage_key(key), self._limit, cost, self._now())

    async def _asettle(self, key: str, cost: Any) -> RateLimitResult:
        store = self._async
        if self.nonblocking or store is None:
            return self._settle(key, cost)
        if self._many:
            return await store.aapply_many(self._limit_keys(key), self.limits, cost, self._now())
        return await store.aapply(self.storage_key(key), self._limit, cost, self._now())

    def reset(self, key: str) -> None:
        """Give ``key`` full buckets again, and lift its lockout if any."""
        refuse_rate_key(key)
        if self._sync is None:
            raise TypeError(f"{self.store!r} is async only: use areset")
        for skey in self._storage_keys(key) if self._many else [self.storage_key(key)]:
            self._sync.reset(skey)

    async def acheck(self, key: str, cost: CostSpec = 1) -> RateLimitResult:
        """``check`` for asyncio (on a ``Nonblocking`` or sync-only store: ``check`` itself)."""
        if self.nonblocking:
            return RateLimiter.check(self, key, cost)  # observed once, by acheck's caller
        store = self._async
        if store is None:
            return RateLimiter.check(self, key, cost)
        charged: Any = cost
        if cost.__class__ is not int and cost.__class__ is not float:
            if self._many:
                charged = self._named.for_store(cost)
            elif isinstance(cost, Mapping):
                charged = self._named.per_limit(cost)[0]
        if self._many:
            keys = self._storage_keys(key)
            return await store.aapply_many(keys, self._applied, charged, self._now())
        return await store.aapply(self.storage_key(key), self._limit, charged, self._now())

    async def apeek(self, key: str) -> RateLimitResult:
        """``peek`` for asyncio."""
        refuse_rate_key(key)
        return await RateLimiter.acheck(self, key, 0)

    async def areset(self, key: str) -> None:
        """``reset`` for asyncio."""
        refuse_rate_key(key)
        if self._async is None:
            self.reset(key)
            return
        for skey in self._storage_keys(key) if self._many else [self.storage_key(key)]:
            await self._async.areset(skey)

    def slot(self, key: str, cost: CostSpec = 1) -> Slot:
        """A ``Slot`` of this limiter's ``Concurrency`` policies for ``key``: ``with
        limiter.slot(key):`` takes the slot and ``cost`` from the other policies, all or
        nothing (else ``RateLimitExceeded``), and gives the slot back at the end.  Asking
        a ``Concurrency`` policy for other than 1 is a ``ValueError``.  See
        docs/concurrency.md.
        """
        shares = self._named.validate(cost)
        if cost is not _ONE:
            refuse_slot_cost(self.limits, cost, shares)
        return Slot(self, key, shares)

    def aslot(self, key: str, cost: CostSpec = 1) -> Slot:
        """``slot`` for ``async with limiter.aslot(key):`` (the store's async methods)."""
        return self.slot(key, cost)

    def _slot_plan(
        self, key: str, cost: Any, hold: Hold
    ) -> Tuple[bool, Any, Any, Any, Optional[float]]:
        # (True, key, policy, hold, now) for apply, else (False, keys, policies,
        # costs, now) for apply_many: a give or renew touches only the slots' keys.
        if not self._many:
            return True, self.storage_key(key), self._limit, hold, self._now()
        keys = self._storage_keys(key)
        applied = self._applied
        costs: List[Any] = list(cost) if cost.__class__ is tuple else [cost] * len(self.limits)
        if self.lockout is not None:
            costs.append(0.0)
        mine = self._slot_indexes
        if hold.action == "take":
            for i in mine:
                costs[i] = hold
            return False, keys, applied, tuple(costs), self._now()
        return False, [keys[i] for i in mine], [applied[i] for i in mine], hold, self._now()

    def acquire(
        self, key: str, cost: CostSpec = 1, timeout: Optional[float] = None
    ) -> RateLimitResult:
        """Block (``clock.sleep``) until ``cost`` tokens are taken; return the allowing
        result.  ``RateLimitExceeded`` at once when the wait would end more than
        ``timeout`` seconds from now (``None``: no bound) or never; with a ``lockout``:
        ``TypeError``.
        """
        return waiting.acquire(self, key, cost, timeout)

    async def aacquire(
        self, key: str, cost: CostSpec = 1, timeout: Optional[float] = None
    ) -> RateLimitResult:
        """``acquire`` for asyncio: waits with ``await clock.asleep(...)``."""
        return await waiting.aacquire(self, key, cost, timeout)

    def throttle(
        self,
        key: Union[str, Callable[..., str]],
        *,
        cost: CostSpec = 1,
        wait: bool = True,
        timeout: Optional[float] = None,
    ) -> Callable[[F], F]:
        """Decorate a function (sync or async) so each call takes ``cost`` tokens from
        ``key`` (a str, or a callable of the call's arguments returning one): it waits
        as ``acquire`` (``wait=True``) or raises ``RateLimitExceeded``.  Misuse is a
        ``TypeError`` at decoration.  ``@limiter.throttle("github")``.
        """
        return waiting.throttle(self, key, cost, wait, timeout)

    def start_cleanup(self, max_age: Optional[float], interval: float) -> Callable[[], None]:
        """Call the store's ``sweep(now, max_age)`` now and every ``interval`` seconds in a
        daemon thread: it deletes full buckets and, unless ``max_age`` is ``None``, keys
        idle longer than ``max_age`` seconds.  Returns an idempotent ``stop()``.
        """
        return cleanup.start(self.store, self.clock, self.name, max_age, interval)
