"""Several limits per RateLimiter: all must allow, a refusal takes nothing, headers list each."""

from __future__ import annotations

import threading
from typing import List

import pytest

from limiter import Limit, ManualClock, MemoryStore, RateLimiter, rate_limit_headers


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
