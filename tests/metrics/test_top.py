"""``limiter.metrics.top.TopOffenders``: the Space-Saving bounds, window expiry, the observer.

The property tests replay random streams (skewed and uniform, in and out of
time order) against an exact count of the same window and check the bounds
the module's docstring states, at several moments of each stream.
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter.clock import ManualClock
from limiter.events import DecisionEvent, Outcome
from limiter.metrics.top import Offender, TopOffenders


def event(key: str, at: float, outcome: Any = Outcome.DENIED) -> DecisionEvent:
    return DecisionEvent(
        limiter="api",
        policy="10/s",
        outcome=outcome,
        result=None,
        cost=1.0,
        key=key,
        store_seconds=0.0,
        at=at,
        store="MemoryStore",
    )


# -- the exact model ---------------------------------------------------------------


def true_counts(
    stream: List[Tuple[str, float]], tracker: TopOffenders, now: float
) -> Dict[str, int]:
    """Events per key in the slices the tracker keeps live at ``now`` (no Space-Saving)."""
    width = tracker.window / tracker.slices
    head = max([int(t // width) for _, t in stream] + [int(now // width)])
    live = Counter(key for key, t in stream if int(t // width) > head - tracker.slices)
    return dict(live)


def check_bounds(tracker: TopOffenders, stream: List[Tuple[str, float]], now: float) -> None:
    true = true_counts(stream, tracker, now)
    total = tracker.total
    assert total == sum(true.values())
    capacity = tracker.capacity
    assert tracker.counters <= capacity * tracker.slices
    everything = tracker.top(capacity * tracker.slices)
    assert len({o.key for o in everything}) == len(everything)
    for key, count, error in everything:
        assert count - error <= true.get(key, 0) <= count, (key, count, error, true.get(key))
        assert 0 <= error <= total / capacity
    # Sorted by count, highest first.
    assert [o.count for o in everything] == sorted((o.count for o in everything), reverse=True)
    reported = {o.key for o in tracker.top(capacity)}
    heavy = {key for key, n in true.items() if n > total / capacity}
    assert heavy <= reported, (heavy - reported, total, capacity)
    if len(true) <= capacity:
        # Room for every key in every slice: Space-Saving is exact.
        assert {o.key: o.count for o in everything} == true
        assert all(o.error == 0 for o in everything)


def replay(
    seed: int, capacity: int, slices: int, n: int, keys: int, skew: float, disorder: float
) -> None:
    rng = random.Random(seed)
    clock = ManualClock(1000.0)
    tracker = TopOffenders(capacity=capacity, window=10.0, slices=slices, clock=clock)
    stream: List[Tuple[str, float]] = []
    t = 1000.0
    checkpoints = {n // 3, n // 2, n}
    for i in range(1, n + 1):
        # Skew: rank r ~ keys * u**skew, so small ranks (heavy keys) dominate.
        key = f"k{int(keys * rng.random() ** skew)}"
        t += rng.choice((0.0, 0.0, 0.01, 0.1, 0.5)) if rng.random() < 0.98 else 7.0
        at = t - rng.uniform(0.0, 12.0) if rng.random() < disorder else t
        tracker(event(key, at))
        stream.append((key, at))
        if i in checkpoints:
            # A query may move the window before the events do (the next
            # events then land in a slice the query opened).
            t += rng.choice((0.0, 1.0, 3.0))
            clock.set(t)
            check_bounds(tracker, stream, t)
    # Then time passes with no events: the window empties slice by slice.
    for step in (2.0, 4.0, 11.0):
        clock.set(t + step)
        check_bounds(tracker, stream, t + step)
    assert tracker.total == 0
    assert tracker.top() == []


@settings(max_examples=200)
@given(
    seed=st.integers(0, 2**32),
    capacity=st.integers(1, 12),
    slices=st.integers(1, 5),
    n=st.integers(1, 1500),
    keys=st.integers(1, 300),
    skew=st.sampled_from([1.0, 2.0, 4.0]),
    disorder=st.sampled_from([0.0, 0.05, 0.5]),
)
def test_random_streams_meet_the_bounds(
    seed: int, capacity: int, slices: int, n: int, keys: int, skew: float, disorder: float
) -> None:
    """skew=1 is uniform; 2 and 4 are ever more skewed; disorder sends events back in time."""
    replay(seed, capacity, slices, n, keys, skew, disorder)


heavy_keys = st.sampled_from(["a", "b", "c"])
light_keys = st.integers(0, 60).map(lambda i: f"u{i}")


@settings(max_examples=200)
@given(
    capacity=st.integers(1, 6),
    slices=st.integers(1, 4),
    stream=st.lists(
        st.tuples(st.one_of(heavy_keys, light_keys), st.integers(0, 40).map(lambda i: i / 2)),
        max_size=300,
    ),
)
def test_drawn_streams_meet_the_bounds(
    capacity: int, slices: int, stream: List[Tuple[str, float]]
) -> None:
    """Hypothesis draws the events themselves (and shrinks a failure to a short stream)."""
    clock = ManualClock(0.0)
    tracker = TopOffenders(capacity=capacity, window=8.0, slices=slices, clock=clock)
    for key, at in stream:
        tracker.add(key, at)
    check_bounds(tracker, stream, 0.0)
    for later in (5.0, 20.0, 30.0):
        clock.set(later)
        check_bounds(tracker, stream, later)


# -- exact small examples ---------------------------------------------------------


def test_space_saving_by_hand() -> None:
    clock = ManualClock(0.0)
    top = TopOffenders(capacity=2, window=60.0, slices=1, clock=clock)
    for key in "aab":
        top.add(key, 1.0)
    assert top.top() == [Offender("a", 2, 0), Offender("b", 1, 0)]
    top.add("c", 2.0)  # full: c replaces b (the smallest, 1) and inherits it as error
    assert top.top() == [Offender("a", 2, 0), Offender("c", 2, 1)]
    top.add("c", 3.0)
    top.add("c", 3.0)
    assert top.top() == [Offender("c", 4, 1), Offender("a", 2, 0)]
    top.add("d", 4.0)  # replaces a (2): d starts at 3, error 2
    assert top.top(1) == [Offender("c", 4, 1)]
    assert top.top() == [Offender("c", 4, 1), Offender("d", 3, 2)]
    assert top.total == 7
    assert top.counters == 2
    assert top.top(0) == []


def test_merging_slices_adds_the_low_of_a_full_slice_missing_the_key() -> None:
    clock = ManualClock(0.0)
    top = TopOffenders(capacity=2, window=20.0, slices=2, clock=clock)  # slices of 10 s
    for key in "aabbb":
        top.add(key, 1.0)  # slice 0: a=2, b=3 (full, low 2)
    for key in "aac":
        top.add(key, 11.0)  # slice 1: a=2, c=1 (full, low 1)
    # a: 2 + 2, exact.  b: 3 here, absent from slice 1, where it may have had
    # up to 1.  c: likewise up to 2 in slice 0.
    assert top.top() == [Offender("a", 4, 0), Offender("b", 4, 1), Offender("c", 3, 2)]
    assert top.total == 8


def test_ties_go_to_the_smaller_error_then_the_key() -> None:
    top = TopOffenders(capacity=3, window=10.0, slices=1, clock=ManualClock())
    for key in "bac":
        top.add(key, 0.0)
    assert [o.key for o in top.top()] == ["a", "b", "c"]


def test_window_expiry_with_a_manual_clock() -> None:
    clock = ManualClock(100.0)
    top = TopOffenders(capacity=10, window=60.0, slices=3, clock=clock)  # slices of 20 s
    top(event("early", 100.0))  # slice 5: [100, 120)
    top(event("mid", 125.0))  # slice 6
    clock.set(159.9)  # still slice 7 at most: slices 5..7 live
    assert {o.key for o in top.top()} == {"early", "mid"}
    clock.set(160.0)  # slice 8: slice 5 is out
    assert top.top() == [Offender("mid", 1, 0)]
    assert top.total == 1
    # Too old for a live slice: not counted.
    top(event("late", 110.0))
    assert top.total == 1
    # Late, but its slice is live: counted there.
    top(event("late", 121.0))
    assert top.total == 2
    clock.set(1000.0)
    assert top.total == 0
    assert top.counters == 0


def test_the_newest_event_moves_the_window_even_if_the_clock_lags() -> None:
    clock = ManualClock(0.0)
    top = TopOffenders(capacity=4, window=10.0, slices=2, clock=clock)
    top(event("old", 0.0))
    top(event("new", 100.0))  # the limiter's clock is ahead of the tracker's
    assert top.top() == [Offender("new", 1, 0)]
    clock.set(-50.0)  # time never moves back for the tracker
    assert top.top() == [Offender("new", 1, 0)]


def test_a_query_moves_the_window_then_an_event_fills_its_newest_slice() -> None:
    clock = ManualClock(0.0)
    top = TopOffenders(capacity=4, window=10.0, slices=2, clock=clock)
    top.add("a", 0.0)
    clock.set(20.0)
    assert top.total == 0  # the query moved the window to 20 s; no slice there yet
    top.add("b", 21.0)
    top.add("b", 22.0)
    assert top.top() == [Offender("b", 2, 0)]


def test_an_event_without_a_usable_time_counts_now() -> None:
    clock = ManualClock(50.0)
    top = TopOffenders(capacity=4, window=10.0, clock=clock)
    top(event("nan", float("nan")))
    top(event("inf", float("inf")))
    top.add("default")
    assert top.total == 3
    clock.set(61.0)
    assert top.total == 0


def test_outcomes_filter() -> None:
    top = TopOffenders(capacity=4, window=10.0, clock=ManualClock())
    for outcome in Outcome:
        top(event(f"member-{outcome.value}", 0.0, outcome))
        top(event(f"str-{outcome.value}", 0.0, outcome.value))
    # Enum members and their str values count alike.
    assert top.total == 4
    assert {o.key for o in top.top()} == {
        "member-denied",
        "member-shadow_denied",
        "str-denied",
        "str-shadow_denied",
    }
    errors = TopOffenders(outcomes=["error", Outcome.FALLBACK], clock=ManualClock())
    errors(event("a", 0.0, Outcome.ERROR))
    errors(event("b", 0.0, "fallback"))
    errors(event("c", 0.0, Outcome.DENIED))
    assert sorted(o.key for o in errors.top()) == ["a", "b"]


def test_as_dict_shape() -> None:
    top = TopOffenders(capacity=3, window=120.0, slices=4, clock=ManualClock())
    for key in ("10.0.0.1", "10.0.0.1", "10.0.0.2"):
        top(event(key, 0.0))
    top(event("10.0.0.3", 0.0, Outcome.ALLOWED))
    data = top.as_dict(1)
    assert data == {
        "window_seconds": 120.0,
        "total": 3,
        "capacity": 3,
        "offenders": [{"key": "10.0.0.1", "count": 2, "error": 0}],
    }
    assert json.loads(json.dumps(data)) == data
    assert len(top.as_dict()["offenders"]) == 2


def test_properties_repr_and_clear() -> None:
    top = TopOffenders(capacity=7, window=30, slices=3, clock=ManualClock())
    assert (top.capacity, top.window, top.slices) == (7, 30.0, 3)
    assert isinstance(top.window, float)
    assert repr(top) == (
        "TopOffenders(capacity=7, window=30.0, slices=3, outcomes=['denied', 'shadow_denied'])"
    )
    top.add("a", 0.0)
    top.clear()
    assert (top.total, top.counters, top.top()) == (0, 0, [])


def test_default_clock_is_the_system_clock() -> None:
    import time

    top = TopOffenders(window=60.0)
    top(event("a", time.time()))
    top(event("ancient", time.time() - 3600))
    assert top.top() == [Offender("a", 1, 0)]


def test_memory_stays_bounded_under_many_distinct_keys() -> None:
    clock = ManualClock(0.0)
    top = TopOffenders(capacity=50, window=10.0, slices=5, clock=clock)
    for i in range(20_000):
        top.add(f"key-{i}", i / 1000)  # 20 s of distinct keys, plus one heavy key
        top.add("heavy", i / 1000)
        assert top.counters <= 250 if i % 997 == 0 else True
    clock.set(20.0)
    assert top.counters <= 250
    assert top.top(1)[0].key == "heavy"


# -- threads -----------------------------------------------------------------------


def test_concurrent_observers_count_every_event() -> None:
    top = TopOffenders(capacity=16, window=60.0, slices=2, clock=ManualClock(0.0))
    threads, per_thread = 4, 5000
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            top(event(f"t{n}-{i % 40}" if i % 2 else "shared", 1.0))

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert top.total == threads * per_thread
    assert top.counters <= 16
    first = top.top(1)[0]
    assert first.key == "shared"
    assert first.count - first.error <= threads * per_thread // 2 <= first.count


# -- bad arguments -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"capacity": 0}, ValueError, "capacity must be >= 1, got 0"),
        ({"capacity": 2.0}, TypeError, "capacity must be an int, got 2.0"),
        ({"capacity": True}, TypeError, "got True"),
        ({"slices": 0}, ValueError, "slices must be >= 1, got 0"),
        ({"slices": "5"}, TypeError, "slices must be an int, got '5'"),
        ({"window": 0}, ValueError, "got 0"),
        ({"window": -1.0}, ValueError, "got -1.0"),
        ({"window": float("inf")}, ValueError, "got inf"),
        ({"window": float("nan")}, ValueError, "got nan"),
        ({"window": "300"}, TypeError, "window must be a number of seconds, got '300'"),
        ({"window": 5e-324, "slices": 2}, ValueError, "too small for 2 slices"),
        ({"outcomes": "denied"}, TypeError, "got 'denied'"),
        ({"outcomes": 3}, TypeError, "got 3"),
        ({"outcomes": ["deny"]}, ValueError, "unknown outcome 'deny'"),
        ({"outcomes": [1]}, TypeError, "got 1"),
        ({"outcomes": []}, ValueError, "at least one"),
        ({"clock": object()}, TypeError, "clock must have a now() method"),
    ],
)
def test_bad_arguments(kwargs: Dict[str, Any], error: type, named: str) -> None:
    with pytest.raises(error) as info:
        TopOffenders(**kwargs)
    assert named in str(info.value)


@pytest.mark.parametrize(("n", "error"), [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_n(n: Any, error: type) -> None:
    top = TopOffenders(clock=ManualClock())
    with pytest.raises(error, match=repr(n).replace(".", r"\.")):
        top.top(n)
    with pytest.raises(error, match=repr(n).replace(".", r"\.")):
        top.as_dict(n)


@pytest.mark.parametrize("window", [10**400, -(10**400)])
def test_a_window_past_the_largest_float_is_a_value_error(window: int) -> None:
    with pytest.raises(ValueError, match=r"^window must be a finite number of seconds > 0, got "):
        TopOffenders(window=window)


def test_slices_past_the_largest_float_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^window 300\.0 is too small for 1000+ slices$"):
        TopOffenders(slices=10**400)


def test_huge_ints_elsewhere_do_not_overflow() -> None:
    clock = ManualClock(1_700_000_000.0)
    top = TopOffenders(capacity=10**400, clock=clock)  # a bound, never allocated
    top.add("k", at=10**400)  # no finite time: counted at clock.now()
    top.add("k")
    assert top.top(10**400) == [Offender("k", 2, 0)]
    assert top.as_dict(10**400)["offenders"] == [{"key": "k", "count": 2, "error": 0}]
