"""Several limits per RateLimiter: all must allow, a refusal takes nothing, headers list each."""

from __future__ import annotations

import asyncio
import math
import threading
from fractions import Fraction
from pathlib import Path
from typing import Any, List, Union

import pytest

from limiter import (
    FixedWindow,
    Limit,
    Lockout,
    ManualClock,
    MemoryStore,
    Quota,
    RateLimiter,
    RateLimitExceeded,
    RateLimitResult,
    SlidingWindow,
    SQLiteStore,
    rate_limit_headers,
)
from limiter.events import DecisionEvent


def test_string_with_several_limits() -> None:
    limiter = RateLimiter("10/second;1000/hour")
    assert limiter.limits == (Limit(10, 10), Limit(1000 / 3600, 1000))
    assert [lim.name for lim in limiter.limits] == ["10/second", "1000/hour"]
    assert RateLimiter("5/second, 100/minute").limits == (Limit(5, 5), Limit(100 / 60, 100))


def test_list_of_limits_gets_distinct_policy_names() -> None:
    limiter = RateLimiter([Limit(10, 20), Limit(1, 100)])
    assert [lim.name for lim in limiter.limits] == ["20per2s#0", "100per100s#1"]
    named = RateLimiter([Limit(10, 20, "burst"), "1000/day"])
    assert [lim.name for lim in named.limits] == ["burst", "1000/day"]


@pytest.mark.parametrize(
    "policy, numbered",
    [
        (Quota(5, "week", "Europe/Paris", name="weekly"), "5/week#2"),
        (FixedWindow(3, 60, "first"), "3per60s#2"),
        (SlidingWindow(3, 0.5), "3per0.5s#2"),
        (Lockout(3, 30, 600), None),
    ],
)
def test_a_renamed_policy_keeps_its_class_and_parameters(policy: Any, numbered: Any) -> None:
    renamed = policy.renamed("api")
    assert (type(renamed), renamed.name, renamed) == (type(policy), "api", policy)
    assert renamed.identity() == policy.identity() and repr(renamed) != repr(policy)
    if numbered is not None:
        assert policy.numbered(2).name == numbered and policy.numbered(2) == policy


@pytest.mark.parametrize(
    "rate, burst, match",
    [
        ("10/second;", None, "empty limit"),
        ("10/second;1/hour", 5, "ambiguous"),
        ([Limit(1, 1)], 5, "ambiguous"),
        ([], None, "at least one limit"),
    ],
)
def test_bad_specs(rate: object, burst: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RateLimiter(rate, burst)  # type: ignore[arg-type]


def test_a_limit_of_the_wrong_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"each limit must be a Limit or a string .*, got 3"):
        RateLimiter([3])  # type: ignore[list-item]


@pytest.mark.parametrize("name", ['say "hi"', "back\\slash", "", "naïve"])
def test_policy_names_must_be_header_safe(name: object) -> None:
    with pytest.raises(ValueError, match="limit name must be printable ASCII"):
        Limit(1, 1, name)  # type: ignore[arg-type]


def test_a_policy_name_of_the_wrong_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="limit name must be a str, got 3"):
        Limit(1, 1, 3)  # type: ignore[arg-type]


def test_every_limit_must_allow_and_a_refusal_takes_nothing() -> None:
    clock = ManualClock(1_700_000_000.0)
    limiter = RateLimiter("2/second;3/minute", clock=clock)
    assert [limiter.allow("ip") for _ in range(3)] == [True, True, False]  # per second
    clock.advance(1)
    result = limiter.check("ip")
    assert result.allowed and result.remaining == 0  # the minute limit: 3 - 3
    assert [r.remaining for r in result.results] == [1, 0]
    clock.advance(1)
    denied = limiter.check("ip")  # the second limit has 2, the minute limit none
    assert not denied.allowed
    assert denied.policy == "3/minute" and denied.limit == 3
    assert denied.retry_after == pytest.approx(18.0)  # 20 s a token, 2 s already passed
    clock.advance(18)
    assert limiter.check("ip").allowed
    # The per-second bucket was not charged by the refusal: it still has both tokens
    # minus the one just taken.
    assert limiter.peek("ip").results[0].remaining == 1


def test_draft_headers_list_each_policy() -> None:
    clock = ManualClock(1_700_000_000.0)
    limiter = RateLimiter("10/second;1000/hour", clock=clock)
    result = limiter.check("ip")
    assert rate_limit_headers(result, now=clock.now(), style="draft") == [
        ("RateLimit-Policy", '"10/second";q=10;w=1, "1000/hour";q=1000;w=3600'),
        ("RateLimit", '"10/second";r=9;t=1, "1000/hour";r=999;t=4'),
    ]
    x = dict(rate_limit_headers(result, now=clock.now()))
    assert (x["X-RateLimit-Limit"], x["X-RateLimit-Remaining"]) == ("10", "9")


def test_reset_and_async_cover_every_bucket() -> None:
    import asyncio

    limiter = RateLimiter("1/second;2/minute", clock=ManualClock())
    assert limiter.allow("k") and not limiter.allow("k")
    limiter.reset("k")
    assert limiter.allow("k")

    async def go() -> List[bool]:
        await limiter.areset("k")
        return [(await limiter.acheck("k")).allowed for _ in range(2)]

    assert asyncio.run(go()) == [True, False]


def test_sixteen_threads_never_exceed_any_limit() -> None:
    clock = ManualClock(1_700_000_000.0)
    store = MemoryStore()
    limiter = RateLimiter([Limit(1, 40, "a"), Limit(1, 25, "b")], store=store, clock=clock)
    other = RateLimiter(Limit(1, 30), store=store, clock=clock, name="other")
    barrier = threading.Barrier(16)
    admitted: List[int] = []

    def worker(i: int) -> None:
        barrier.wait()
        n = 0
        for _ in range(500):
            n += limiter.allow("hot")
            other.allow("hot")
        admitted.append(n)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 25
    peek = limiter.peek("hot")
    assert [r.remaining for r in peek.results] == [15, 0]  # refusals took nothing from "a"


# -- named limits and per-limit costs (issue 15) ------------------------------------------

T0 = 1_700_000_000.0
LLM = {"requests": "60/minute", "tokens": "90000/minute"}
LLM_NAME = "1/s:60+1500/s:90000"


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Union[MemoryStore, SQLiteStore]:
    if request.param == "memory":
        return MemoryStore()
    return SQLiteStore(str(tmp_path / "policies.db"))


def llm(store: object, clock: ManualClock, **options: Any) -> RateLimiter:
    """An LLM API's limiter: 60 requests and 90,000 tokens a minute."""
    return RateLimiter(LLM, store=store, clock=clock, **options)  # type: ignore[arg-type]


def remaining(limiter: RateLimiter, key: str) -> List[int]:
    return [r.remaining for r in limiter.peek(key).results]


class TestNamedLimits:
    def test_a_mapping_names_each_limit_after_its_key(self) -> None:
        limiter = RateLimiter(LLM)
        assert limiter.limits == (Limit(1, 60), Limit(1500, 90000))
        assert [lim.name for lim in limiter.limits] == ["requests", "tokens"]
        assert limiter.name == LLM_NAME and limiter.lockout is None
        mixed = RateLimiter(
            {"a": 5, "b": Limit(1, 3, "ignored"), "c": Quota(100, "day"), "d": "10 per second"}
        )
        assert mixed.limits == (Limit(5, 5), Limit(1, 3), Quota(100, "day"), Limit(10, 10))
        assert [lim.name for lim in mixed.limits] == ["a", "b", "c", "d"]
        assert isinstance(mixed.limits[2], Quota) and mixed.limits[2].per == "day"

    @pytest.mark.parametrize(
        "rate, burst, error, message",
        [
            (
                {"a": "1/s;10/m"},
                None,
                ValueError,
                "limit 'a': must be one rate, got '1/s;10/m': give each rate its own name",
            ),
            ({}, None, ValueError, "need at least one limit, got an empty mapping"),
            ({"a": "10/s"}, 5, ValueError, "burst=5 is ambiguous with a mapping of limits"),
            ({'say "hi"': "1/s"}, None, ValueError, "limit name must be printable ASCII"),
            ({"": "1/s"}, None, ValueError, "got ''"),
            ({"a\\b": "1/s"}, None, ValueError, "limit name must be printable ASCII"),
            ({3: "1/s"}, None, TypeError, "limit name must be a str, got 3"),
            ({"a": [1]}, None, TypeError, "limit 'a' must be a rate like '10/second'"),
            ({"a": True}, None, TypeError, "a Limit or a Quota, got True"),
            ({"a": 0}, None, ValueError, "limit 'a': rate must be a number of tokens"),
            ({"a": "10/fortnight"}, None, ValueError, "got '10/fortnight'"),
            ({"a": Lockout()}, None, TypeError, "a Lockout is no limit"),
            ([Lockout()], None, TypeError, "a Lockout is no limit"),
            (Lockout(), None, TypeError, "a Lockout is no limit"),
        ],
    )
    def test_bad_mappings_name_the_bad_part(
        self, rate: object, burst: object, error: type, message: str
    ) -> None:
        with pytest.raises(error) as info:
            RateLimiter(rate, burst)  # type: ignore[arg-type]
        assert message in str(info.value)

    @pytest.mark.parametrize("lockout", [5, "10/60/900", Limit(1, 1), {"breaches": 10}])
    def test_a_lockout_of_the_wrong_type_is_a_type_error(self, lockout: object) -> None:
        with pytest.raises(TypeError) as info:
            RateLimiter(LLM, lockout=lockout)  # type: ignore[arg-type]
        assert str(info.value) == f"lockout must be a limiter.Lockout or None, got {lockout!r}"

    def test_a_lockout_may_not_share_a_limit_name(self) -> None:
        with pytest.raises(ValueError, match="the lockout's name 'lockout' is also a limit's"):
            RateLimiter({"lockout": "1/s"}, lockout=Lockout())
        named = RateLimiter({"lockout": "1/s"}, lockout=Lockout(name="banned"))
        assert named.lockout is not None and named.lockout.name == "banned"


class TestNamedCosts:
    def test_tokens_run_out_first(self, store: MemoryStore) -> None:
        clock = ManualClock(T0)
        limiter = llm(store, clock)
        cost = {"requests": 1, "tokens": 2000}
        admitted = 0
        while limiter.allow("k", cost):
            admitted += 1
        assert admitted == 45  # 90000 // 2000; requests would allow 60
        denied = limiter.check("k", cost)
        assert not denied.allowed and denied.policy == "tokens" and denied.limit == 90000
        assert [r.policy for r in denied.results] == ["requests", "tokens"]
        assert [r.allowed for r in denied.results] == [True, False]
        assert [r.retry_after for r in denied.results] == [0.0, pytest.approx(2000 / 1500)]
        assert denied.retry_after == denied.results[1].retry_after
        assert remaining(limiter, "k") == [15, 0]  # the refusals took no request
        small = limiter.check("k", {"tokens": 100})
        assert small.policy == "tokens" and small.retry_after == pytest.approx(100 / 1500)
        clock.advance(denied.retry_after)
        assert limiter.check("k", cost).allowed
        assert remaining(limiter, "k") == [15, 0]  # 4/3 s refilled 1.33 requests

    def test_requests_run_out_first(self, store: MemoryStore) -> None:
        clock = ManualClock(T0)
        limiter = llm(store, clock)
        cost = {"requests": 1, "tokens": 100}
        admitted = 0
        while limiter.allow("k", cost):
            admitted += 1
        assert admitted == 60
        denied = limiter.check("k", cost)
        assert denied.policy == "requests" and denied.limit == 60
        assert [r.retry_after for r in denied.results] == [1.0, 0.0]
        assert [r.remaining for r in denied.results] == [0, 84000]
        clock.advance(1.0)
        assert limiter.check("k", cost).allowed

    def test_a_limit_not_named_costs_nothing_and_a_number_costs_every_limit(
        self, store: MemoryStore
    ) -> None:
        limiter = llm(store, ManualClock(T0))
        assert [r.remaining for r in limiter.check("k", {"tokens": 500}).results] == [60, 89500]
        assert [r.remaining for r in limiter.check("k", {"requests": 1}).results] == [59, 89500]
        assert [r.remaining for r in limiter.check("k", 2).results] == [57, 89498]
        assert [r.remaining for r in limiter.check("k", {}).results] == [57, 89498]  # a peek

    def test_headers_of_a_denial_by_one_limits_cost(self) -> None:
        clock = ManualClock(T0)
        limiter = llm(None, clock)
        for _ in range(45):
            limiter.check("k", {"requests": 1, "tokens": 2000})
        denied = limiter.check("k", {"requests": 1, "tokens": 2000})
        assert rate_limit_headers(denied, now=clock.now()) == [
            ("X-RateLimit-Limit", "90000"),
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Reset", "1700000060"),
            ("Retry-After", "2"),
        ]
        assert rate_limit_headers(denied, now=clock.now(), style="draft") == [
            ("RateLimit-Policy", '"requests";q=60;w=60, "tokens";q=90000;w=60'),
            ("RateLimit", '"requests";r=15;t=1, "tokens";r=0;t=1'),
            ("Retry-After", "2"),
        ]

    def test_validate_cost_normalizes(self) -> None:
        limiter = RateLimiter(LLM)
        assert limiter.validate_cost({"tokens": 350, "requests": 1}) == (1.0, 350.0)
        assert limiter.validate_cost({"tokens": Fraction(1, 2)}) == (0.0, 0.5)
        assert limiter.validate_cost({}) == (0.0, 0.0)
        assert limiter.validate_cost(3) == 3.0 and type(limiter.validate_cost(3)) is float
        assert limiter.validate_cost({"tokens": 10**400}) == (0.0, math.inf)
        one = RateLimiter({"calls": "3/second"})
        assert one.validate_cost({"calls": 2}) == 2.0 and one.validate_cost({}) == 0.0

    def test_a_one_limit_limiter_takes_a_mapping_for_its_limit(self, store: MemoryStore) -> None:
        events: List[DecisionEvent] = []
        for observer in (None, events.append):
            limiter = RateLimiter(
                {"calls": "3/second"},
                store=store,
                clock=ManualClock(T0),
                name=f"one{observer is None}",
                on_decision=observer,
            )
            assert limiter.check("k", {"calls": 2}).remaining == 1
            assert limiter.allow("k", {"calls": 1}) and not limiter.allow("k", {"calls": 1})
            assert limiter.check("k", {}).remaining == 0  # a peek
            with pytest.raises(ValueError, match=r"no limit of this limiter: 'nope' \(limits:"):
                limiter.check("k", {"nope": 1})
            with pytest.raises(TypeError, match="key must be a str, got 5"):
                limiter.check(5, {"calls": 1})  # type: ignore[arg-type]
        cost = {"calls": 2}
        limiter.check("j", cost)
        assert events[-1].cost is cost  # the mapping as given
        assert [e.outcome for e in events] == ["allowed", "allowed", "denied", "allowed", "allowed"]

    def test_async_methods_take_mappings(self, store: MemoryStore) -> None:
        clock = ManualClock(T0)
        limiter = llm(store, clock)
        one = RateLimiter({"calls": "3/second"}, store=store, clock=clock, name="one")

        async def run() -> None:
            assert (await limiter.acheck("k", {"tokens": 89000})).allowed
            denied = await limiter.acheck("k", {"requests": 1, "tokens": 2000})
            assert denied.policy == "tokens"
            refunded = await limiter.arefund("k", {"tokens": 1000})
            assert [r.remaining for r in refunded.results] == [60, 2000]
            charged = await limiter.acharge("k", {"requests": 10, "tokens": 2000})
            assert [r.remaining for r in charged.results] == [50, 0]
            waited = await limiter.aacquire("k", {"requests": 1, "tokens": 1500})
            assert waited.allowed and clock.now() == pytest.approx(T0 + 1.0)
            assert (await one.acheck("k", {"calls": 3})).remaining == 0
            assert (await one.arefund("k", {"calls": 2})).remaining == 2
            assert (await one.acharge("k", {"calls": 2})).remaining == 0

        asyncio.run(run())

    def test_throttle_takes_a_mapping_and_checks_it_when_decorating(self) -> None:
        clock = ManualClock(T0)
        limiter = llm(None, clock)

        @limiter.throttle("api", cost={"requests": 1, "tokens": 30000})
        def call() -> str:
            return "ok"

        assert [call() for _ in range(4)] == ["ok"] * 4
        assert clock.now() == pytest.approx(T0 + 20.0)  # the 4th waited for 30000 tokens
        with pytest.raises(ValueError, match="'token'"):
            limiter.throttle("api", cost={"token": 1})
        with pytest.raises(TypeError, match="got True"):
            limiter.throttle("api", cost={"tokens": True})


class TestChargeAndSettle:
    def test_charge_into_debt_then_wait_exactly(self, store: MemoryStore) -> None:
        events: List[DecisionEvent] = []
        clock = ManualClock(T0)
        limiter = llm(store, clock, on_decision=events.append)
        assert limiter.check("k", {"requests": 1, "tokens": 1000}).allowed
        charged = limiter.charge("k", {"tokens": 99000})  # 100000 used: 10000 owed
        assert charged.allowed and charged.policy == "tokens" and charged.remaining == 0
        assert [r.remaining for r in charged.results] == [59, 0]
        assert charged.results[1].reset_after == pytest.approx(60 + 10000 / 1500)
        assert len(events) == 1  # a charge is no decision
        denied = limiter.check("k", {"requests": 1, "tokens": 1000})
        assert denied.policy == "tokens"
        assert denied.retry_after == pytest.approx((10000 + 1000) / 1500)
        clock.advance(denied.retry_after - 0.001)
        almost = limiter.check("k", {"requests": 1, "tokens": 1000})
        assert not almost.allowed and almost.retry_after == pytest.approx(0.001, abs=1e-6)
        clock.advance(almost.retry_after)
        assert limiter.check("k", {"requests": 1, "tokens": 1000}).allowed
        assert [e.outcome for e in events] == ["allowed", "denied", "denied", "allowed"]

    def test_a_charge_owes_at_most_one_burst(self, store: MemoryStore) -> None:
        limiter = llm(store, ManualClock(T0))
        charged = limiter.charge("k", {"tokens": 10**12})
        assert charged.results[1].reset_after == 120.0  # two windows: -90000 tokens
        assert charged.results[0].reset_after == 0.0  # requests untouched
        retry = limiter.check("k", {"tokens": 1500}).retry_after
        assert retry == pytest.approx(61.0)
        both = limiter.charge("k", 3)  # a number charges every limit
        assert [r.remaining for r in both.results] == [57, 0]

    @pytest.mark.parametrize(
        "estimates, real",
        [
            ([1000, 1000, 1000], [1200, 300, 1000]),
            ([500] * 4, [80000, 1, 0, 499]),
            ([2000, 2000], [60000, 35000]),  # into debt: 5000 owed
        ],
    )
    def test_estimate_then_settle_charges_the_real_usage(
        self, store: MemoryStore, estimates: List[int], real: List[int]
    ) -> None:
        limiter = llm(store, ManualClock(T0))
        for estimate, used in zip(estimates, real):
            assert limiter.check("k", {"requests": 1, "tokens": estimate}).allowed
            if used > estimate:
                limiter.charge("k", {"tokens": used - estimate})
            else:
                limiter.refund("k", {"tokens": estimate - used})
        total = sum(real)
        peek = limiter.peek("k")
        assert [r.remaining for r in peek.results] == [60 - len(real), max(0, 90000 - total)]
        assert peek.results[1].reset_after == pytest.approx(total / 1500)

    def test_refund_and_charge_check_their_costs(self) -> None:
        limiter = llm(MemoryStore(), ManualClock(T0))
        with pytest.raises(ValueError, match=r"cost of limit 'tokens': .* got -1"):
            limiter.charge("k", {"tokens": -1})
        with pytest.raises(TypeError, match="got True"):
            limiter.refund("k", {"requests": True})
        with pytest.raises(TypeError, match="got True"):
            limiter.charge("k", True)  # type: ignore[arg-type]
        assert remaining(limiter, "k") == [60, 90000]


class TestLockout:
    def test_ten_denials_in_a_minute_lock_a_key_out_for_900_seconds(
        self, store: MemoryStore
    ) -> None:
        events: List[DecisionEvent] = []
        clock = ManualClock(T0)
        limiter = RateLimiter(
            {"requests": "5/minute"},
            store=store,
            clock=clock,
            lockout=Lockout(breaches=10, within=60, duration=900),
            on_decision=events.append,
        )
        assert all(limiter.allow("u") for _ in range(5))
        results = []
        for i in range(10):  # one a second: no token refills (one per 12 s)
            clock.set(T0 + i)
            results.append(limiter.check("u"))
        assert [r.locked_out for r in results] == [False] * 9 + [True]
        assert {r.policy for r in results[:9]} == {"requests"}
        locked = results[-1]
        assert locked.kind == "lockout" and locked.policy == "lockout"
        assert (locked.allowed, locked.retry_after, locked.reset_after) == (False, 900.0, 900.0)
        assert [e.locked_out for e in events] == [False] * 14 + [True]
        assert events[-1].outcome == "denied" and events[-1].policy == "lockout"
        clock.set(T0 + 300)  # the bucket is full again, the key still locked out
        assert limiter.check("u").retry_after == 609.0
        peek = limiter.peek("u")
        assert peek.locked_out and not peek.allowed and peek.retry_after == 609.0
        assert [r.remaining for r in peek.results] == [5, 0]  # nothing taken
        for _ in range(100):  # refused checks are no breaches and do not extend it
            assert limiter.check("u").locked_out
        assert not limiter.allow("u")
        assert events[-1].locked_out
        # While locked out, refunds and charges still settle the bucket (no decision).
        assert limiter.charge("u", 1).allowed and limiter.refund("u", 1).allowed
        clock.set(T0 + 908.5)
        assert limiter.check("u").retry_after == 0.5
        clock.set(T0 + 909)
        after = limiter.check("u")
        assert after.allowed and after.remaining == 4 and not after.locked_out

    def test_reset_lifts_a_lockout_and_the_count_starts_afresh(self, store: MemoryStore) -> None:
        clock = ManualClock(T0)
        limiter = llm(store, clock, lockout=Lockout(3, 60, 900))
        limiter.check("u", {"tokens": 90000})
        assert [limiter.check("u", {"tokens": 1}).locked_out for _ in range(3)] == [
            False,
            False,
            True,
        ]
        limiter.reset("u")
        assert remaining(limiter, "u") == [60, 90000]
        assert limiter.check("u", {"tokens": 90000}).allowed
        assert [limiter.check("u", {"tokens": 1}).locked_out for _ in range(3)] == [
            False,
            False,
            True,
        ]

        async def areset() -> None:
            await limiter.areset("u")

        asyncio.run(areset())
        assert limiter.check("u").allowed

    def test_a_run_of_breaches_counts_from_its_first(self, store: MemoryStore) -> None:
        clock = ManualClock(T0)
        limiter = RateLimiter(
            "5/hour", store=store, clock=clock, lockout=Lockout(10, within=60, duration=900)
        )
        assert all(limiter.allow("u") for _ in range(5))
        for i in range(9):
            clock.set(T0 + i)
            assert not limiter.check("u").locked_out
        clock.set(T0 + 61)  # the first run ended at T0 + 60: this opens a new one
        assert not limiter.check("u").locked_out
        for i in range(8):
            clock.set(T0 + 62 + i)
            assert not limiter.check("u").locked_out
        clock.set(T0 + 70)
        assert limiter.check("u").retry_after == 900.0

    def test_waiting_for_tokens_with_a_lockout_is_refused(self, store: MemoryStore) -> None:
        # Each refusal on the way would be a breach: a pacing caller would lock
        # itself out (2/second, breaches=3: the 5th call waited 900 s).
        clock = ManualClock(T0)
        limiter = RateLimiter("2/second", store=store, clock=clock, lockout=Lockout(3, 60, 900))
        with pytest.raises(TypeError, match="has a lockout: waiting for tokens"):
            limiter.acquire("u")
        with pytest.raises(TypeError, match="has a lockout: waiting for tokens"):
            asyncio.run(limiter.aacquire("u"))
        with pytest.raises(TypeError, match="has a lockout: waiting for tokens"):
            limiter.throttle("partner")
        assert limiter.peek("u").remaining == 2  # nothing was taken
        calls = limiter.throttle("partner", wait=False)(lambda: clock.now())
        assert [calls(), calls()] == [T0, T0]
        with pytest.raises(RateLimitExceeded):
            calls()

    def test_a_locked_refusal_waits_for_the_longest_of_its_reasons(self) -> None:
        clock = ManualClock(T0)
        limiter = RateLimiter(
            {"requests": "60/minute", "month": Quota(10, per="month")},
            clock=clock,
            lockout=Lockout(2, 60, 900),
        )
        for _ in range(10):
            assert limiter.check("k").allowed
        first = limiter.check("k")  # the quota refuses: a breach
        assert first.policy == "month" and not first.locked_out
        locked = limiter.check("k")  # the second breach locks the key...
        # ... but the quota's wait (to the 1st of next month) is longer than 900 s.
        assert locked.locked_out and locked.retry_after == first.retry_after > 900
        assert rate_limit_headers(locked, now=clock.now())[-1] == (
            "Retry-After",
            str(math.ceil(first.retry_after)),
        )
        never = RateLimiter("5/minute", clock=clock, lockout=Lockout(1, 60, 900)).check("z", 6)
        assert never.locked_out and never.retry_after == math.inf  # a cost above the burst

    def test_headers_of_a_locked_out_key(self) -> None:
        clock = ManualClock(T0)
        limiter = llm(None, clock, lockout=Lockout(10, 60, 900))
        for _ in range(45):
            limiter.check("k", {"requests": 1, "tokens": 2000})
        for _ in range(10):
            locked = limiter.check("k", {"requests": 1, "tokens": 2000})
        assert locked.locked_out
        assert rate_limit_headers(locked, now=clock.now()) == [
            ("X-RateLimit-Limit", "90000"),  # the limit that refused, not the breach count
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Reset", "1700000900"),
            ("Retry-After", "900"),
        ]
        assert rate_limit_headers(locked, now=clock.now(), style="draft") == [
            (
                "RateLimit-Policy",
                '"requests";q=60;w=60, "tokens";q=90000;w=60, "lockout";q=10;w=60',
            ),
            # No limit's t while locked: it would point before the lockout's end.
            ("RateLimit", '"requests";r=15, "tokens";r=0, "lockout";r=0;t=900'),
            ("Retry-After", "900"),
        ]
        clock.set(T0 + 300.5)  # full buckets, still locked out
        later = limiter.check("k", {"requests": 1, "tokens": 2000})
        assert rate_limit_headers(later, now=clock.now(), style="both") == [
            ("X-RateLimit-Limit", "60"),
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Reset", "1700000900"),
            (
                "RateLimit-Policy",
                '"requests";q=60;w=60, "tokens";q=90000;w=60, "lockout";q=10;w=60',
            ),
            ("RateLimit", '"requests";r=60, "tokens";r=90000, "lockout";r=0;t=600'),
            ("Retry-After", "600"),
        ]

    def test_a_single_limits_policy_name_survives_a_lockout(self) -> None:
        clock = ManualClock(T0)
        limiter = RateLimiter("1/minute", clock=clock, lockout=Lockout(1, 60, 900))
        limiter.check("k")
        locked = limiter.check("k")
        assert rate_limit_headers(locked, now=clock.now(), style="draft", policy="login") == [
            ("RateLimit-Policy", '"login";q=1;w=60, "lockout";q=1;w=60'),
            ("RateLimit", '"login";r=0, "lockout";r=0;t=900'),
            ("Retry-After", "900"),
        ]

    def test_the_lockout_has_its_own_key_and_name(self, store: MemoryStore) -> None:
        clock = ManualClock(T0)
        lockout = Lockout(1, 60, 900)
        locking = llm(store, clock, lockout=lockout)
        plain = llm(store, clock)
        assert locking.lockout is lockout and plain.lockout is None
        assert locking.name == LLM_NAME + "+lockout:1/60s:900s" and plain.name == LLM_NAME
        locking.check("u", {"requests": 61})
        assert locking.check("u").locked_out
        assert plain.check("u").allowed  # another name: other buckets
        # Where its state is kept: the name's ":" escaped in the namespace (docs/concepts.md#keys).
        store.reset("{" + locking.name.replace(":", "\\:") + ':u}|"lockout"')
        assert locking.check("u").allowed


BAD_COSTS = [
    (
        {"tokenz": 1},
        ValueError,
        "cost names no limit of this limiter: 'tokenz' (limits: 'requests', 'tokens')",
    ),
    ({5: 1}, TypeError, "cost names must be limit names (str), got 5"),
    (
        {"tokens": True},
        TypeError,
        "cost of limit 'tokens': cost must be a number of tokens, got True",
    ),
    (
        {"requests": 1, "tokens": -1},
        ValueError,
        "cost of limit 'tokens': cost must be a number of tokens >= 0, got -1",
    ),
    (
        {"tokens": math.nan},
        ValueError,
        "cost of limit 'tokens': cost must be a number of tokens >= 0, got nan",
    ),
    (
        {"tokens": "5"},
        TypeError,
        "cost of limit 'tokens': cost must be a number of tokens, got '5'",
    ),
    (True, TypeError, "cost must be a number of tokens, got True"),
    (-1, ValueError, "cost must be a number of tokens >= 0, got -1"),
]


class TestBadCosts:
    @pytest.mark.parametrize("cost, error, message", BAD_COSTS)
    @pytest.mark.parametrize(
        "method", ["check", "allow", "acheck", "acquire", "refund", "charge", "validate_cost"]
    )
    def test_bad_costs_raise_and_change_nothing(
        self, store: MemoryStore, method: str, cost: object, error: type, message: str
    ) -> None:
        events: List[DecisionEvent] = []
        # acquire refuses a lockout before looking at the cost (tested apart).
        lockout = None if method == "acquire" else Lockout(1, 60, 900)
        limiter = llm(store, ManualClock(T0), lockout=lockout, on_decision=events.append)
        with pytest.raises(error) as info:
            if method == "acheck":
                asyncio.run(limiter.acheck("k", cost))  # type: ignore[arg-type]
            elif method == "validate_cost":
                limiter.validate_cost(cost)  # type: ignore[arg-type]
            else:
                getattr(limiter, method)("k", cost)
        assert str(info.value) == message
        assert events == []
        assert remaining(limiter, "k") == [60, 90000]
        assert limiter.check("k").allowed  # no breach either

    @pytest.mark.parametrize(
        "cost, error, message", BAD_COSTS[:1] + BAD_COSTS[2:3] + BAD_COSTS[4:6]
    )
    def test_a_one_limit_limiter_checks_mappings_as_well(
        self, store: MemoryStore, cost: object, error: type, message: str
    ) -> None:
        limiter = RateLimiter({"tokens": "10/second"}, store=store, clock=ManualClock(T0))
        message = message.replace("'requests', 'tokens'", "'tokens'")
        for method in ("check", "allow", "refund", "charge"):
            with pytest.raises(error) as info:
                getattr(limiter, method)("k", cost)
            assert str(info.value) == message
        assert limiter.peek("k").remaining == 10


def test_threads_with_named_costs_admit_exactly() -> None:
    clock = ManualClock(T0)  # frozen: nothing refills
    limiter = RateLimiter(
        {"requests": Limit(1, 1000), "tokens": Limit(1, 5000)},
        store=MemoryStore(),
        clock=clock,
        lockout=Lockout(breaches=100, within=60, duration=900),
    )
    barrier = threading.Barrier(8)
    outcomes: List[List[RateLimitResult]] = []

    def worker() -> None:
        barrier.wait()
        outcomes.append([limiter.check("hot", {"requests": 1, "tokens": 7}) for _ in range(250)])

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = [r for mine in outcomes for r in mine]
    assert len(results) == 2000
    assert sum(r.allowed for r in results) == 714  # 5000 // 7
    assert sum(not r.allowed and not r.locked_out for r in results) == 99
    assert sum(r.locked_out for r in results) == 2000 - 714 - 99  # the 100th breach locked it
    assert [r.remaining for r in limiter.peek("hot").results] == [286, 2, 0]


def test_an_event_is_locked_out_only_for_a_lockouts_refusal() -> None:
    from limiter.events import Outcome

    events: List[DecisionEvent] = []
    limiter = RateLimiter(
        "1/minute",
        clock=ManualClock(T0),
        lockout=Lockout(2, 60, 900),
        on_decision=events.append,
    )
    for _ in range(4):
        limiter.check("u")
    assert [(e.outcome, e.policy, e.locked_out) for e in events] == [
        ("allowed", "1/minute", False),
        ("denied", "1/minute", False),
        ("denied", "lockout", True),
        ("denied", "lockout", True),
    ]
    error = events[0]._replace(outcome=Outcome.ERROR, result=None, policy="")
    assert not error.locked_out
