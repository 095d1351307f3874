"""``RateLimiter``: the object users hold.  It binds limits, a store and a clock."""

from __future__ import annotations

import copy
import hashlib
import time
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

_perf_counter = time.perf_counter
_ONE = 1  # ``cost is _ONE``: the default cost, CPython's cached small int
_ALLOWED = Outcome.ALLOWED

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
    """Rate limits (token buckets, quotas, windows) applied per key: the object users hold.

    ``rate``: tokens per second, a string (``"100/minute"``, ``"5 per
    second"``, ``"10/second;1000/hour"``), a policy (``Limit``, ``Quota``,
    ``FixedWindow``, ``SlidingWindow``), a list of them and strings, or a
    mapping of names to one rate each (``{"requests": "60/minute", "tokens":
    "90000/minute"}``): a request passes only if every limit allows it, and
    a refused one takes nothing.  ``burst``: the capacity of a single token
    bucket (default N for ``"N/unit"``, ``ceil(rate)`` for a number; a
    ``ValueError`` with a mapping or a window).  ``algorithm``: what rate
    strings and numbers become: ``"token-bucket"`` (``Limit``, the
    default), ``"fixed-window"`` (``FixedWindow``: ``"10/minute"`` is at most
    10 per clock minute) or ``"sliding-window"`` (``SlidingWindow``).
    ``lockout``: a ``Lockout`` refusing a key for a while after repeated
    denials (results of ``kind`` ``"lockout"``; ``reset`` lifts it).
    ``store``: a ``Store``/``AsyncStore`` or a URL for ``store_from_url``
    (default: a new ``MemoryStore``).  ``clock``: default ``SystemClock``;
    without one the store may use its own time (Redis reads ``TIME``).
    ``name``: the namespace of this limiter's keys in a store it is given
    (default: made from the limits, ``"10/s:20"``).  ``on_decision``: called
    with a ``DecisionEvent`` after each ``check``, ``allow`` and ``acheck``,
    a failed one included (outcome ``"error"``); peeks, refunds and resets
    are no decisions.  Wrong types are ``TypeError``, wrong values
    ``ValueError``, each naming the value.  docs/policies.md has the rest.
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
        #: The ``Lockout`` (``None``: none).
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
        # check and some 20 bytes per tracked key.
        self._prefix = "" if store is None else name + ":"
        self._limit = self.limits[0]
        # A lockout is applied with the limits in one apply_many, even beside one limit.
        self._many = len(self.limits) > 1 or lockout is not None
        # Where the Concurrency policies stand among the limits (RateLimiter.slot).
        self._slot_indexes = tuple(
            i for i, policy in enumerate(self.limits) if policy.kind == "concurrency"
        )
        #: True when the limiter has a ``Concurrency`` policy: a request takes a
        #: slot (``slot``) for its whole life rather than a check.
        self.holds_slots: bool = bool(self._slot_indexes)
        #: What the store applies: the limits, then the lockout if any.
        self._applied: Tuple[Policy, ...] = (*self.limits, lockout) if lockout else self.limits
        # Several limits: one bucket per limit, all in the key's hash slot, and
        # the lockout's state there too.
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
        #: True when checks never wait on I/O (the store is ``limiter.store.Nonblocking``):
        #: ``acheck`` then calls ``check``, and so may any async caller.
        self.nonblocking: bool = is_nonblocking(self.store)
        self._bind_fast_paths()
        if on_decision is not None and not callable(on_decision):
            raise TypeError(f"on_decision must be callable or None, got {on_decision!r}")
        #: The observer of decisions (``None``: none).
        self.on_decision: Optional[Observer] = on_decision
        # How a denial is reported: DENIED, or SHADOW_DENIED on a shadow view.
        self._denied = Outcome.DENIED
        #: True for the view ``shadowed()`` returns: its denials refuse nothing.
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
        # A plain MemoryStore serves check and allow as functions bound to this
        # limiter (key, clock, lock and bucket in one call): check and allow
        # call them first (CONTRIBUTING.md, "Hot paths").
        self._fast_check: Optional[Callable[[str, float], RateLimitResult]] = None
        self._fast_allow: Optional[Callable[[str, float], bool]] = None
        if type(self.store) is MemoryStore and not self._many:
            self._fast_check, self._fast_allow = self.store.bind(
                self._limit, self._prefix, self._clock_now, self.storage_key, MAX_KEY_LENGTH
            )

    def shadowed(self) -> RateLimiter:
        """The shadow view of this limiter (made once): ``shadow`` is True on it.

        Same limits, store, clock, name and buckets; its observer sees a
        denial as ``"shadow_denied"``.  Shadow mode (``mode="shadow"`` on the
        adapters) checks with it and lets every request through.
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
        """The key as stored: namespaced (in a given store), hashed when over ``MAX_KEY_LENGTH``.

        With several limits (or a lockout) each bucket is stored under
        ``{<this key>}|<limit name>`` and the lockout's state under
        ``{<this key>}|"lockout"`` (braces: one Redis Cluster hash tag for all
        of them; no limit name holds a quote).  A key that parses as a rate
        (``"5/minute"``) is a ``TypeError`` (``limiter.core.keys.refuse_rate_key``).
        """
        # The common case first: check, allow and acheck call this per request.
        # A rate has a "/" or a space ("10 per second"), so a short key with
        # neither skips the rate test.
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

    # -- costs ---------------------------------------------------------------

    def validate_cost(self, cost: CostSpec) -> Union[float, Tuple[float, ...]]:
        """``cost`` as this limiter charges it, or the error a check would raise.

        A number is ``limiter.core.costs.validate_cost``'s float (tokens >= 0,
        ``inf`` when too large for a float).  A mapping of limit names to
        tokens is a tuple of one such float per limit, in the order of
        ``limits`` (0.0 for a limit it does not name); on a one-limit limiter
        it is that limit's float.  An unknown name or a negative or NaN value
        is a ``ValueError``, a ``bool`` or a non-number a ``TypeError``, each
        naming the value.  A ``Refund`` or ``Charge`` (negative or
        unconditional by design) is returned as it is.  A list or tuple is a
        ``TypeError``: name the limits.  For adapters and decorators to check
        a fixed cost once, at start-up.
        """
        return self._named.validate(cost)

    # -- decisions -----------------------------------------------------------

    def check(self, key: str, cost: CostSpec = 1) -> RateLimitResult:
        """Take ``cost`` tokens (default 1) from ``key``'s bucket if all are there.

        All or nothing: a denied request takes no tokens.  ``cost`` may be
        fractional; ``0`` is a peek; negative or NaN is a ``ValueError``; above
        ``burst`` it is always denied with ``retry_after == inf``.  A mapping
        of limit names to costs charges each limit its own amount (a limit it
        does not name, 0): ``{"requests": 1, "tokens": 350}``; an unknown name
        is a ``ValueError`` (see ``validate_cost``).  A number charges every
        limit that amount.  With several limits the result's ``policy`` names
        the limit that refused, and ``results`` holds each limit's result.
        With a ``lockout``, a locked-out key gets the lockout's result (``locked_out``).
        """
        # The hot path: everything inline that can be (each call costs ~30-50 ns).
        # A mapping cost becomes the one limit's cost first; the default cost
        # (the cached int 1) and plain numbers pass the test in a few ns.
        if (
            cost is not _ONE
            and (cls := cost.__class__) is not float
            and cls is not int
            and isinstance(cost, Mapping)
        ):
            if self._many:
                return self._check_slow(key, cost)
            cost = self._named.one(cost)
        fast = self._fast_check
        if fast is not None:
            return fast(key, cost)  # type: ignore[arg-type]
        apply = self._apply
        if apply is None:
            return self._check_slow(key, cost)
        return apply(self.storage_key(key), self._limit, cost, self._now())  # type: ignore[arg-type]

    def _check_slow(self, key: str, cost: CostSpec) -> RateLimitResult:
        if self._sync is None:
            raise TypeError(f"{self.store!r} is async only: use acheck/apeek/areset")
        if cost.__class__ is not int and cost.__class__ is not float:
            cost = self._named.for_store(cost)
        return self._sync.apply_many(
            self._storage_keys(key),
            self._applied,
            cost,  # type: ignore[arg-type]
            self._now(),
        )

    def allow(self, key: str, cost: CostSpec = 1) -> bool:
        """``check(key, cost).allowed``: True when the request may proceed.

        The same decision as ``check``, on the store's ``allow`` fast path when
        it has one (``MemoryStore`` skips building the result).
        """
        if (
            cost is not _ONE
            and (cls := cost.__class__) is not float
            and cls is not int
            and isinstance(cost, Mapping)
            and not self._many
        ):
            cost = self._named.one(cost)  # see check
        bound = self._fast_allow
        if bound is not None:
            return bound(key, cost)  # type: ignore[arg-type]
        fast = self._allow
        if fast is None:
            result: RateLimitResult = RateLimiter.check(self, key, cost)
            return result[0]
        return fast(self.storage_key(key), self._limit, cost, self._now())  # type: ignore[arg-type]

    def peek(self, key: str) -> RateLimitResult:
        """``key``'s state now, taking nothing.

        ``allowed`` is True, except for a key locked out by the ``lockout``:
        then the lockout's result (``allowed`` False, ``retry_after`` the
        seconds left), as a check would get.
        """
        refuse_rate_key(key)
        return RateLimiter.check(self, key, 0)  # a peek is no decision: not observed

    def refund(
        self, key: str, cost: CostSpec = 1, taken_at: Optional[float] = None
    ) -> RateLimitResult:
        """Give back ``cost`` tokens (default 1) that a ``check`` of ``key`` took.

        A bucket never holds more than its burst after a refund, so giving back
        more than was taken, or twice, only fills it; the result is the
        bucket's state after it (``allowed`` is True).  ``cost`` is checked
        like a check's (negative or NaN: ``ValueError``), and may be a
        mapping of limit names to tokens.  This is how a charge is undone
        when a response shows it should not count (``deduct_when`` on the
        adapters), or an estimate settled when the real cost was lower.
        Not a decision: not observed, and a ``lockout`` neither counts nor
        blocks it.

        ``taken_at`` is when the check that took the units ran (seconds on
        this limiter's clock, e.g. ``limiter.clock.now()`` read before it):
        a ``Quota`` whose current window started after it gets nothing back
        (its units were forgiven at the boundary, and the new window owes
        nothing), in every store.  Without it a quota's current window gets
        the units back, whichever took them: pass it whenever a refund may
        come after a boundary (``deduct_when`` does).  A token bucket
        ignores it (see ``limiter.core.costs.Refund``).
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
        # A Refund (or one per limit) tied to taken_at: every store's step
        # (the Redis script too) gives a quota nothing back for units taken
        # before its current window.
        if taken_at is None:
            return self._named.settled(cost, Refund)
        Refund(0, taken_at)  # taken_at's own error first
        return self._named.settled(cost, lambda c: Refund(c, taken_at))

    def charge(self, key: str, cost: CostSpec = 1) -> RateLimitResult:
        """Take ``cost`` tokens (default 1) from ``key``'s buckets unconditionally.

        For a cost known only after the work (the tokens an LLM call used):
        always taken, even from an empty bucket, which then owes tokens
        (``remaining`` 0) and denies later checks until refilling has repaid
        them; a bucket owes at most one burst (``limiter.core.costs.Charge``).
        ``cost`` is a number for every limit or a mapping of limit names to
        tokens, checked as ``check``'s.  Returns the result after it
        (``allowed`` True).  Not a decision: not observed, and a ``lockout``
        neither counts nor blocks it.  To settle an estimate, ``check`` with
        the estimate, then ``charge`` what it fell short or ``refund`` what
        it took beyond the real cost.
        """
        refuse_rate_key(key)
        return self._settle(key, self._named.settled(cost, Charge))

    async def acharge(self, key: str, cost: CostSpec = 1) -> RateLimitResult:
        """``charge`` for asyncio."""
        refuse_rate_key(key)
        return await self._asettle(key, self._named.settled(cost, Charge))

    def _limit_keys(self, key: str) -> List[str]:
        # The limits' buckets without the lockout's state.
        keys = self._storage_keys(key)
        return keys[:-1] if self.lockout is not None else keys

    def _settle(self, key: str, cost: Any) -> RateLimitResult:
        # A Refund or Charge (or one per limit) applied to the limits alone.
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
        """``check`` for asyncio; awaits the store's ``aapply`` when it has one.

        This is where async code chooses between awaiting the store and calling
        it: a ``limiter.store.Nonblocking`` store (``MemoryStore``: its
        ``apply`` never waits on I/O) is called directly, saving a coroutine,
        and so is a store that is synchronous only.
        """
        if self.nonblocking:
            return RateLimiter.check(self, key, cost)  # observed once, by acheck's caller
        store = self._async
        if store is None:
            return RateLimiter.check(self, key, cost)
        if cost.__class__ is not int and cost.__class__ is not float:
            if self._many:
                cost = self._named.for_store(cost)
            elif isinstance(cost, Mapping):
                cost = self._named.one(cost)
        if self._many:
            return await store.aapply_many(
                self._storage_keys(key),
                self._applied,
                cost,  # type: ignore[arg-type]
                self._now(),
            )
        return await store.aapply(
            self.storage_key(key),
            self._limit,
            cost,  # type: ignore[arg-type]
            self._now(),
        )

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

    # -- slots (limiter.slots) ----------------------------------------------

    def slot(self, key: str, cost: CostSpec = 1) -> Slot:
        """A slot of this limiter's ``Concurrency`` policies for ``key``, to hold while working.

        ``with limiter.slot(key):`` takes the slot and ``cost`` from the
        other policies, all or nothing (``RateLimitExceeded`` when refused),
        and gives the slot back at the end, exception or not; ``slot.renew()``
        extends its lease.  ``cost`` is ``check``'s, for the other policies: a
        slot is one unit, and a cost asking a ``Concurrency`` policy for other
        than one (naming it, or on a limiter of slots only) is a ``ValueError``
        here.  docs/concurrency.md.
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
        # What a slot asks its store: (True, key, policy, hold, now) for a
        # one-policy limiter's apply, else (False, keys, policies, costs, now)
        # for apply_many: a take charges every policy (the Hold to the
        # Concurrency ones, 0 to a lockout), a give or renew only the
        # Concurrency policies' keys.
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

    # -- waiting for tokens (client side: limiter.waiting) -------------------

    def acquire(
        self, key: str, cost: CostSpec = 1, timeout: Optional[float] = None
    ) -> RateLimitResult:
        """Block until ``cost`` tokens are taken; return the allowing result.

        Waits on ``clock.sleep`` (a ``ManualClock`` advances instead of
        sleeping).  Raises ``RateLimitExceeded`` at once when the wait would end
        more than ``timeout`` seconds after the call (give or take the bucket's
        microsecond of slack, ``Limit.slack``: a wait of exactly ``timeout``
        is waited), or when the request can never pass (cost above burst).
        ``timeout=None`` waits as long as needed.  ``cost`` is ``check``'s (a
        number or a mapping of limit names to tokens).  A limiter with a
        ``lockout`` cannot wait: every refusal on the way would count as a
        breach, so it is a ``TypeError``.
        """
        result: RateLimitResult = waiting.acquire(self, key, cost, timeout)
        return result

    async def aacquire(
        self, key: str, cost: CostSpec = 1, timeout: Optional[float] = None
    ) -> RateLimitResult:
        """``acquire`` for asyncio: waits with ``await clock.asleep(...)``."""
        result: RateLimitResult = await waiting.aacquire(self, key, cost, timeout)
        return result

    def throttle(
        self,
        key: Union[str, Callable[..., str]],
        *,
        cost: CostSpec = 1,
        wait: bool = True,
        timeout: Optional[float] = None,
    ) -> Callable[[F], F]:
        """Decorate a function (sync or async) so each call takes ``cost`` tokens.

        ``key`` is a string, or a callable that gets the call's arguments and
        returns one.  With ``wait=True`` a call waits for its tokens (see
        ``acquire``; ``timeout`` in seconds); with ``wait=False`` it raises
        ``RateLimitExceeded`` instead.  Handy for calling a third-party API at
        its published rate::

            @limiter.throttle("github")
            def fetch(url): ...

        A key that parses as a rate (``@limiter.throttle("5/minute")``) is a
        ``TypeError`` here, at decoration time: the rate belongs in
        ``RateLimiter("5/minute")``.  A callable's keys are checked per call.
        ``cost`` (a number, or a mapping of limit names to tokens) is checked
        here too (``validate_cost``), and one that would take a slot of a
        ``Concurrency`` policy is a ``TypeError`` (a call cannot hold a slot:
        ``slot``).  With ``wait=True``, a limiter with a ``lockout`` is a
        ``TypeError`` (see ``acquire``).
        """
        return waiting.throttle(self, key, cost, wait, timeout)

    # -- housekeeping --------------------------------------------------------

    def start_cleanup(self, max_age: Optional[float], interval: float) -> Callable[[], None]:
        """Sweep the store every ``interval`` seconds in a daemon thread.

        Each sweep deletes keys whose bucket is full (no decision changes) and,
        when ``max_age`` (seconds) is not ``None``, keys idle for longer than
        that.  The first sweep runs at once.  Returns ``stop()``, which ends the
        thread and joins it; calling it again does nothing.  Needs a store with
        ``sweep(now, max_age)`` (``MemoryStore``; Redis expires keys itself).
        """
        return cleanup.start(self.store, self.clock, self.name, max_age, interval)
