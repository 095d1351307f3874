"""MemoryStore: the conformance suite, plus what only an in-process store promises."""

from __future__ import annotations

import math
import tracemalloc
from typing import Dict, List, Optional

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from limiter import FixedWindow, Limit, ManualClock, MemoryStore, RateLimiter, SlidingWindow
from limiter.backends import memory
from limiter.core.bucket import step
from limiter.core.many import step_all
from limiter.testing._store_suite import StoreConformance


class TestMemoryStoreSync(StoreConformance):
    def make_store(self) -> MemoryStore:
        return MemoryStore()


class TestMemoryStoreAsync(StoreConformance):
    mode = "async"

    def make_store(self) -> MemoryStore:
        return MemoryStore()


class TestMemoryStoreBounded(StoreConformance):
    """A cap far above what the suite uses must not change any behaviour."""

    def make_store(self) -> MemoryStore:
        return MemoryStore(max_keys=100)


# --- Memory stays proportional to the live keys (issue 9, item 2) -----------------------

T0 = 1_700_000_000.0
LIMIT = Limit(5, 10)


def order_entries(store: MemoryStore) -> int:
    """Entries in the store's order lists (each keeps its key string alive)."""
    return len(store._young_order) + len(store._old_order)


def assert_well_formed(store: MemoryStore, slack: int) -> None:
    young_order, old_order = store._young_order, store._old_order
    # Eviction and sweep find every key through its generation's order list.
    assert set(store._young) <= set(young_order)
    assert set(store._old) <= set(old_order[store._old_pos :])
    assert order_entries(store) <= 3 * len(store) + slack


def test_check_reset_cycles_keep_memory_flat() -> None:
    # A login flow: check a key, reset it on success.  Each cycle builds its key
    # anew, as RateLimiter.storage_key does for a named limiter.
    store = MemoryStore()
    tracemalloc.start()
    try:
        traced = []
        for i in range(200_000):
            key = "".join(("login:", "alice@example.com"))
            store.allow(key, LIMIT, 1, T0 + i * 0.001)
            store.reset(key)
            if i + 1 in (20_000, 200_000):
                traced.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert len(store) == 0
    # The original code grew by about 70 bytes a cycle here: 12 MB.
    assert traced[1] - traced[0] < 64 * 1024, traced
    assert order_entries(store) <= memory._ORDER_SLACK


def test_a_key_reset_and_seen_again_is_not_kept_once_per_reset() -> None:
    # The key is live (not full) at every sweep, so a sweep alone would keep each
    # of its duplicate entries: start_cleanup never reclaimed them.
    store = MemoryStore(max_keys=None)
    for i in range(10_000):
        store.apply("k", LIMIT, 1, T0 + i)
        store.reset("k")
    store.apply("k", LIMIT, 1, T0 + 10_000)
    store.sweep(T0 + 10_000)
    assert len(store) == 1
    assert order_entries(store) <= 2 + memory._ORDER_SLACK


def test_resets_with_evictions_and_generation_swaps_stay_bounded() -> None:
    # At the cap, keys reset and seen again are promoted, evicted and carried
    # through generation swaps: no path may keep their stale entries.
    store = MemoryStore(max_keys=50)
    slow = Limit(1 / 3600, 1)  # flood keys stay in use: sweeps keep them
    for i in range(20_000):
        now = T0 + i * 0.01
        if i % 20 == 0:
            store.apply(f"flood-{i // 20}", slow, 1, now)  # at the cap: evicts, swaps
        user = f"user-{i % 7}"
        store.apply(user, LIMIT, 1, now)  # re-added, or promoted from the old generation
        if i % 3:
            store.reset(user)
        if i % 997 == 0:
            store.sweep(now)
        assert len(store) <= 50
        assert_well_formed(store, memory._ORDER_SLACK)
    assert len(store) == 49  # at the cap, less the user key just reset


def test_rebuilt_order_lists_keep_the_least_recent_first() -> None:
    store = MemoryStore(max_keys=10)
    slow = Limit(1 / 3600, 1)  # never full again within the test: LRU decides
    store.apply("keep", slow, 1, T0)
    for i in range(200):
        store.apply("gone", slow, 1, T0)
        store.reset("gone")  # stale entries: the lists are rebuilt now and then
        store.apply(f"k{i}", slow, 1, T0)
        store.apply("keep", slow, 1, T0)  # seen again: stays young
    assert len(store) == 10
    assert not store.allow("keep", slow, 1, T0), "an eviction dropped the most recent key"


def test_a_store_far_from_the_cap_evicts_nothing() -> None:
    # Reset bookkeeping must never make the store drop a live key.
    store = MemoryStore(max_keys=100)
    for i in range(1_000):
        store.apply(f"live-{i % 60}", LIMIT, 1, T0)
        store.apply("gone", LIMIT, 1, T0)
        store.reset("gone")
    assert len(store) == 60
    assert all(not store.allow(f"live-{i}", Limit(1, 1), 1, T0) for i in range(60))


KEYS = [f"k{i}" for i in range(8)]
LIMITS = [Limit(1, 2), Limit(0.5, 3), Limit(1000, 1), Limit(2, 5)]


class StoreVersusModel(RuleBasedStateMachine):
    """MemoryStore against a dict of states stepped by ``bucket.step``.

    The model holds exactly the keys the store should hold.  A key may leave the
    store only through ``reset``, ``sweep`` or an eviction at the cap; after an
    eviction the model forgets the key too (it starts over with a full bucket).
    """

    slack = 0  # set by the test below to the patched memory._ORDER_SLACK

    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()
        self.model: Dict[str, complex] = {}
        self.now = T0

    @initialize(max_keys=st.sampled_from([1, 2, 3, 5, None]))
    def make_store(self, max_keys: Optional[int]) -> None:
        self.store = MemoryStore(max_keys=max_keys)

    def stored(self, key: str) -> Optional[complex]:
        packed = self.store._young.get(key)
        return self.store._old.get(key) if packed is None else packed

    def forget_evicted(self, inserted: int) -> None:
        # Each insert at the cap evicts exactly one key; none below the cap.
        cap = self.store.max_keys
        expected = len(self.model)
        if cap is not None:
            expected = min(expected, cap)
        assert len(self.store) == expected
        evicted = [key for key in self.model if self.stored(key) is None]
        assert len(evicted) == len(self.model) - expected
        assert len(evicted) <= inserted
        for key in evicted:
            del self.model[key]

    @rule(dt=st.sampled_from([0.0, 0.001, 0.3, 1.0, 2.5, 10.0, -0.5]))
    def advance(self, dt: float) -> None:
        self.now += dt  # backwards too: step re-anchors

    @rule(
        key=st.sampled_from(KEYS),
        limit=st.sampled_from(LIMITS),
        cost=st.sampled_from([0, 1, 1, 2, 4]),
        detail=st.booleans(),
    )
    def check(self, key: str, limit: Limit, cost: int, detail: bool) -> None:
        state = self.model.get(key)
        if detail:
            new, expected = step(state, self.now, limit, cost)
            assert self.store.apply(key, limit, cost, self.now) == expected
        else:
            new, allowed = step(state, self.now, limit, cost, False)
            assert self.store.allow(key, limit, cost, self.now) == allowed
        if new is not None:
            self.model[key] = new
        self.forget_evicted(int(state is None and new is not None))

    @rule(
        keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True),
        limit=st.sampled_from(LIMITS),
        cost=st.sampled_from([0, 1, 2]),
    )
    def check_many(self, keys: List[str], limit: Limit, cost: int) -> None:
        states = [self.model.get(key) for key in keys]
        news, expected = step_all(states, self.now, [limit] * len(keys), cost)
        assert self.store.apply_many(keys, [limit] * len(keys), cost, self.now) == expected
        inserted = 0
        for key, old, new in zip(keys, states, news):
            if new is not old and new is not None:
                self.model[key] = new
                inserted += old is None
        self.forget_evicted(inserted)

    @rule(first=st.integers(0, len(KEYS) - 1), count=st.integers(2, len(KEYS)))
    def flood(self, first: int, count: int) -> None:
        # Several distinct keys in a row: evictions and generation swaps.
        for i in range(count):
            self.check(KEYS[(first + i) % len(KEYS)], LIMITS[0], 1, False)

    @rule(key=st.sampled_from(KEYS))
    def reset(self, key: str) -> None:
        self.store.reset(key)
        if self.model.pop(key, None) is not None:  # a reset that forgets a key tidies up
            assert order_entries(self.store) <= 2 * len(self.store) + self.slack

    @rule(max_age=st.sampled_from([None, 0.0, 1.0, 5.0]))
    def sweep(self, max_age: Optional[float]) -> None:
        horizon = -math.inf if max_age is None else self.now - max_age
        gone = [
            key
            for key, packed in self.model.items()
            if packed.real + packed.imag <= self.now or packed.imag < horizon
        ]
        assert self.store.sweep(self.now, max_age) == len(gone)
        for key in gone:
            del self.model[key]
        assert order_entries(self.store) <= 2 * len(self.store) + self.slack

    @invariant()
    def store_matches_model(self) -> None:
        assert len(self.store) == len(self.model)
        for key, packed in self.model.items():
            assert self.stored(key) == packed, key  # nothing lost, nothing stale

    @invariant()
    def order_lists_stay_proportional(self) -> None:
        assert_well_formed(self.store, self.slack)


@pytest.mark.parametrize("slack", [0, 3])
def test_store_versus_model_state_machine(monkeypatch: pytest.MonkeyPatch, slack: int) -> None:
    monkeypatch.setattr(memory, "_ORDER_SLACK", slack, raising=False)
    monkeypatch.setattr(StoreVersusModel, "slack", slack)
    run_state_machine_as_test(
        StoreVersusModel,
        settings=settings(max_examples=100, stateful_step_count=50, deadline=None),
    )


def test_apply_many_at_the_cap_keeps_every_key_findable() -> None:
    # Inserting "b" swaps the generations and evicts "a", a key of the same call;
    # "a" used to be written back past the cap without an order entry, and the
    # next eviction recursed without end.
    store = MemoryStore(max_keys=1)
    limit = Limit(1, 2)
    store.apply_many(["a"], [limit], 1, T0)
    assert store.apply_many(["b", "a"], [limit, limit], 1, T0).allowed
    assert len(store) == 1
    assert_well_formed(store, 0)
    for key in "cdefg":
        store.apply(key, limit, 1, T0)
        assert len(store) == 1
    assert store.sweep(T0 + 100) == 1
    assert len(store) == 0


# --- Eviction at max_keys and sweep(), through RateLimiter ------------------------------


class TestMemoryBounds:
    def test_a_flood_of_distinct_keys_stays_under_max_keys(self) -> None:
        store = MemoryStore(max_keys=1000)
        limiter = RateLimiter(1, 5, store=store, clock=ManualClock())
        for i in range(50_000):
            limiter.allow(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
            assert len(store) <= 1000
        assert len(store) == 1000

    def test_eviction_prefers_full_buckets_so_an_abuser_stays_limited(self) -> None:
        store = MemoryStore(max_keys=100)
        clock = ManualClock(1_700_000_000.0)
        slow = RateLimiter(1 / 3600, 1, store=store, clock=clock, name="slow")
        fast = RateLimiter(1000, 1, store=store, clock=clock, name="fast")
        assert slow.allow("abuser") and not slow.allow("abuser")
        for i in range(10_000):  # each flood key is full again 1 ms later
            fast.allow(f"flood-{i}")
            clock.advance(0.001)
        assert len(store) <= 100
        assert not slow.allow("abuser"), "the flood evicted a non-full bucket"

    def test_without_full_buckets_the_least_recent_go_first(self) -> None:
        store = MemoryStore(max_keys=10)
        limiter = RateLimiter(1 / 3600, 1, store=store, clock=ManualClock())
        limiter.allow("keep")
        for i in range(100):
            limiter.allow(f"k{i}")
            limiter.allow("keep")  # seen again: stays young
        assert len(store) == 10
        assert not limiter.allow("keep")

    def test_max_keys_validation(self) -> None:
        for bad in (0, -1, 1.5, "10", True):
            with pytest.raises(ValueError, match="max_keys"):
                MemoryStore(max_keys=bad)  # type: ignore[arg-type]
        assert MemoryStore(max_keys=None).max_keys is None


class TestSweep:
    def test_sweep_deletes_only_what_changes_no_decision(self) -> None:
        store = MemoryStore()
        clock = ManualClock(1_700_000_000.0)
        limiter = RateLimiter(1, 2, store=store, clock=clock)
        limiter.allow("full-soon")
        limiter.check("empty", cost=2)
        clock.advance(1)
        assert store.sweep(clock.now()) == 1  # "full-soon" is full again
        assert len(store) == 1
        assert limiter.peek("empty").remaining == 1  # kept: half refilled
        assert store.sweep(clock.now(), max_age=0.5) == 1  # idle for 1 s > 0.5 s
        assert len(store) == 0

    def test_sweep_in_slices_covers_every_key(self) -> None:
        store = MemoryStore(max_keys=None)
        limiter = RateLimiter(1, 1, store=store, clock=ManualClock())
        for i in range(10_000):
            limiter.allow(str(i))
        assert store.sweep(0.5) == 0
        assert store.sweep(1.0) == 10_000

    def test_repeated_sweeps_with_churn_keep_bookkeeping_bounded(self) -> None:
        store = MemoryStore(max_keys=None)
        clock = ManualClock(1_700_000_000.0)
        limiter = RateLimiter(10, 1, store=store, clock=clock)
        slow = RateLimiter(0.01, 100, store=store, clock=clock, name="slow")
        for cycle in range(30):
            for i in range(1000):
                limiter.allow(f"c{cycle % 3}-{i}")  # the same keys come back
            slow.allow("kept")  # never full again within the test: always kept
            clock.advance(0.2)  # every bucket but "slow" is full again
            store.sweep(clock.now())
            assert len(store) == 1
            # Internal order lists (8 bytes a key) must not grow with churn.
            assert len(store._young_order) + len(store._old_order) <= 2 * len(store) + 8

    def test_sweeps_and_evictions_interleave(self) -> None:
        store = MemoryStore(max_keys=100)
        clock = ManualClock(1_700_000_000.0)
        slow = RateLimiter(1 / 3600, 1, store=store, clock=clock, name="slow")
        fast = RateLimiter(1000, 1, store=store, clock=clock, name="fast")
        assert slow.allow("abuser")
        for i in range(5_000):
            fast.allow(f"flood-{i}")
            clock.advance(0.0005)
            if i % 250 == 0:
                store.sweep(clock.now())
            assert len(store) <= 100
        assert not slow.allow("abuser")


# -- RateLimiter's check and allow bound to the store (MemoryStore.bind) --------


def _class_paths(*args: object, **kwargs: object) -> RateLimiter:
    """A limiter that goes through its store's apply and allow (no bound fast path)."""
    limiter = RateLimiter(*args, **kwargs)  # type: ignore[arg-type]
    limiter._fast_check = limiter._fast_allow = None
    return limiter


@pytest.mark.parametrize("own_store", [True, False])
def test_bound_check_and_allow_answer_as_the_methods_do(own_store: bool) -> None:
    fast_clock, slow_clock = ManualClock(1_700_000_000.0), ManualClock(1_700_000_000.0)
    stores = (None, None) if own_store else (MemoryStore(max_keys=3), MemoryStore(max_keys=3))
    fast = RateLimiter(2, 3, clock=fast_clock, store=stores[0])
    slow = _class_paths(2, 3, clock=slow_clock, store=stores[1])
    assert fast._fast_check is not None and slow._fast_check is None
    keys = ["user:1", "user:2", "x" * 300, "1abc", "user/42", "é", "", "{a}", "~", "zz", "Z"]
    steps = [0.0, 0.1, 0.0, 0.7, -0.2, 2.0, -5.0, 0.3]
    for i in range(200):
        key, dt = keys[i % len(keys)], steps[i % len(steps)]
        for clock in (fast_clock, slow_clock):  # back as well as forward
            clock.set(clock.now() + dt)
        cost = (1, 1, 2, 0.5, 0, 4)[i % 6]
        if i % 3:
            assert fast.check(key, cost) == slow.check(key, cost)
        else:
            assert fast.allow(key, cost) is slow.allow(key, cost)
        if i % 17 == 0:
            assert fast.refund(key) == slow.refund(key)
    assert len(fast.store) == len(slow.store)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "key, error", [("5/minute", TypeError), (42, TypeError), (None, TypeError)]
)
def test_bound_check_and_allow_refuse_keys_as_the_methods_do(key: object, error: type) -> None:
    fast, slow = RateLimiter(2, 3), _class_paths(2, 3)
    for name in ("check", "allow"):
        with pytest.raises(error) as got:
            getattr(fast, name)(key)
        with pytest.raises(error) as expected:
            getattr(slow, name)(key)
        assert str(got.value) == str(expected.value)
    with pytest.raises(ValueError, match="cost must be a number of tokens >= 0, got -1"):
        fast.allow("user:1", -1)


def test_allow_steps_a_young_key_in_place_and_a_new_one_through_insert() -> None:
    store = MemoryStore(max_keys=2)
    limit = Limit(1, 1)
    assert store.allow("a", limit, 1, 100.0) is True
    assert store.allow("a", limit, 1, 100.0) is False
    assert store.allow("b", limit, 1, 100.0) is True
    assert store.allow("c", limit, 1, 100.0) is True  # evicts one: the cap holds
    assert len(store) == 2
    assert store.allow("a", limit, 1, 101.0) is True  # refilled, or evicted and new


def test_eviction_never_lifts_a_lockout_under_a_flood_of_made_up_usernames():
    from limiter import Lockout

    clock = ManualClock(T0)
    store = MemoryStore(max_keys=1000)
    limiter = RateLimiter(
        "3/hour", store=store, clock=clock, lockout=Lockout(breaches=3, within=60, duration=900)
    )
    outcomes = [limiter.check("victim") for _ in range(6)]
    assert [r.allowed for r in outcomes] == [True] * 3 + [False] * 3
    assert outcomes[-1].locked_out
    for i in range(1124):  # each a bucket; evictions must pick them, not the lockout
        assert limiter.check(f"made-up-{i}").allowed
    assert len(store) == 1000
    still = limiter.check("victim")
    assert still.locked_out and still.retry_after == 900.0
    # Bounded all the same: a store full of lockouts evicts the oldest of them.
    locked = MemoryStore(max_keys=10)
    lockout = Lockout(breaches=1, within=60, duration=900)
    strict = RateLimiter("1/hour", store=locked, clock=clock, lockout=lockout)
    for i in range(11):
        assert strict.check(f"u{i}").allowed and not strict.check(f"u{i}").allowed
    assert len(locked) == 10


def test_eviction_never_frees_a_held_slot_under_a_flood_of_made_up_keys() -> None:
    from limiter import Concurrency

    clock = ManualClock(T0)
    store = MemoryStore(max_keys=100)
    slots = RateLimiter(Concurrency(1, lease=600), store=store, clock=clock)
    held = slots.slot("victim")
    assert held.take().allowed
    flood = RateLimiter("5/minute", store=store, clock=clock, name="flood")
    for i in range(300):  # each a bucket in use; evictions must pick them, not the slot
        clock.advance(0.1)
        assert flood.check(f"made-up-{i}").allowed
    assert len(store) == 100
    assert slots.slot("victim").take().allowed is False  # still 1 in flight
    assert held.give() is True  # still held, not "expired"
    # Bounded all the same: a store full of held slots evicts the oldest of them.
    full = MemoryStore(max_keys=10)
    each = RateLimiter(Concurrency(1, lease=600), store=full, clock=clock)
    assert all(each.slot(f"u{i}").take().allowed for i in range(11))
    assert len(full) == 10 and each.peek("u0").remaining == 1


def test_a_store_at_its_cap_evicts_window_states_too() -> None:
    # Eviction asks state.keep_until when a state is forgotten: a sliding
    # window's (previous, current, until) once made a store at its cap fail.
    store = MemoryStore(max_keys=2)
    sliding, fixed = SlidingWindow(1, 60), FixedWindow(1, 60)
    assert store.apply("s", sliding, 1, T0).allowed and store.apply("f", fixed, 1, T0).allowed
    # Both are forgotten by T0 + 200 (the fixed one at T0 + 40, the sliding one
    # at T0 + 100): evicting them changes no decision.
    for i in range(4):
        assert store.apply(f"new{i}", sliding, 1, T0 + 200).allowed
        assert not store.apply(f"new{i}", sliding, 1, T0 + 200).allowed
    assert len(store) == 2
    assert store.apply("s", sliding, 1, T0 + 200).allowed
    assert store.sweep(T0 + 400) == 2
