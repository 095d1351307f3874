"""Clocks: ManualClock for tests, SystemClock under freezegun and time-machine."""

from __future__ import annotations

import datetime
import threading

import pytest
import time_machine
from freezegun import freeze_time

from limiter import Clock, ManualClock, RateLimiter, SystemClock


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(start=100.0)
    assert clock.now() == 100.0
    assert clock.advance(2.5) == 102.5
    assert clock.now() == 102.5
    clock.set(50.0)  # backwards is allowed with set()
    assert clock.now() == 50.0
    assert ManualClock().now() == 0.0
    assert isinstance(clock, Clock) and isinstance(SystemClock(), Clock)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (-1, ValueError),
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        ("1", TypeError),  # a wrong type is a TypeError
        (None, TypeError),
    ],
)
def test_manual_clock_rejects_bad_moves(bad: object, error: type) -> None:
    clock = ManualClock(5.0)
    with pytest.raises(error) as info:
        clock.advance(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(info.value) or "seconds >= 0" in str(info.value)
    assert clock.now() == 5.0


def test_manual_clock_advance_is_thread_safe() -> None:
    clock = ManualClock()
    threads = [
        threading.Thread(target=lambda: [clock.advance(1) for _ in range(1000)]) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clock.now() == 8000.0


def test_default_clock_follows_freezegun() -> None:
    with freeze_time("2026-01-01 00:00:00") as frozen:
        limiter = RateLimiter("2/minute")
        assert [limiter.allow("ip") for _ in range(3)] == [True, True, False]
        frozen.tick(datetime.timedelta(seconds=29))
        assert not limiter.allow("ip")
        frozen.tick(datetime.timedelta(seconds=1))
        assert limiter.allow("ip")
        assert (
            SystemClock().now()
            == datetime.datetime(2026, 1, 1, 0, 0, 30)
            .replace(tzinfo=datetime.timezone.utc)
            .timestamp()
        )


def test_default_clock_follows_time_machine() -> None:
    start = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)
    with time_machine.travel(start, tick=False) as traveller:
        limiter = RateLimiter(1, 3)
        assert [limiter.allow("ip") for _ in range(4)] == [True, True, True, False]
        traveller.shift(2.0)
        result = limiter.check("ip")
        assert (result.allowed, result.remaining) == (True, 1)
        assert SystemClock().now() == start.timestamp() + 2.0


def test_limiter_clock_fixture_from_the_plugin(limiter_clock: ManualClock) -> None:
    limiter = RateLimiter("1/second", clock=limiter_clock)
    assert limiter.allow("k") and not limiter.allow("k")
    limiter_clock.advance(1)
    assert limiter.allow("k")


SUITE_WITH_A_LYING_STORE = """
from limiter import MemoryStore
from limiter.testing import StoreConformance


class TestLying(StoreConformance):
    def make_store(self):
        return MemoryStore()

    def apply(self, store, key, limit, cost=1, now=1_700_000_000.0):
        result = super().apply(store, key, limit, cost, now)
        return result._replace(remaining=result.remaining + 1)
"""


def test_a_failing_conformance_case_shows_its_values(pytester: pytest.Pytester) -> None:
    """Every suite module's plain asserts are rewritten, as in the user's own tests:
    a slot case and a window case each show the lists they compared."""
    pytester.makepyfile(test_lying=SUITE_WITH_A_LYING_STORE)
    cases = (
        "test_slots_are_taken_up_to_the_limit_and_come_back",
        "test_a_fixed_window_admits_its_count_in_each_window",
    )
    run = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-k", " or ".join(cases))
    run.assert_outcomes(failed=2)
    shown = run.stdout.str()
    for case in cases:
        failure = shown[shown.index(f"_ TestLying.{case} _") :]
        assert "[3, 2, 1, 1] == [2, 1, 0, 0]" in failure.split("\n_")[0], case
