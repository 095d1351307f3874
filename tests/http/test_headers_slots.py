"""Issue 26: the draft headers of a Concurrency policy, checked by a real Structured
Field parser (http-sfv): ``q`` the slots, ``qu="concurrent-requests"``, no ``w``;
``RateLimit``'s ``r`` the free slots, no ``t`` (no time says when a holder gives back)."""

from __future__ import annotations

from typing import Dict, List, Tuple

import http_sfv

from limiter import Concurrency, ManualClock, RateLimiter, rate_limit_headers
from limiter.testing._shared import T0


def items(value: str) -> List[Tuple[str, Dict[str, object]]]:
    parsed = http_sfv.List()
    parsed.parse(value.encode("ascii"))
    return [(item.value, dict(item.params)) for item in parsed]


def test_a_slot_beside_a_rate_in_the_draft_style() -> None:
    clock = ManualClock(T0)
    limiter = RateLimiter({"rate": "60/minute", "inflight": Concurrency(2, lease=120)}, clock=clock)
    first = limiter.slot("k")
    first.take()
    second = limiter.slot("k")
    held = second.take()
    fields = dict(rate_limit_headers(held, now=clock.now(), style="draft"))
    assert items(fields["RateLimit-Policy"]) == [
        ("rate", {"q": 60, "w": 60}),
        ("inflight", {"q": 2, "qu": "concurrent-requests"}),
    ]
    assert items(fields["RateLimit"]) == [("rate", {"r": 58, "t": 1}), ("inflight", {"r": 0})]
    clock.advance(30)
    refused = limiter.slot("k").take()
    fields = dict(rate_limit_headers(refused, now=clock.now(), style="draft"))
    # Retry-After is a hint: the latest a slot frees (the earliest lease's end)
    # if no holder gives back before.
    assert fields["Retry-After"] == "90"
    assert items(fields["RateLimit"])[1] == ("inflight", {"r": 0})


def test_a_single_concurrency_policy_renamed_and_in_both_styles() -> None:
    clock = ManualClock(T0)
    limiter = RateLimiter(Concurrency(3, lease=60), clock=clock)
    result = limiter.slot("k").take()
    fields = dict(rate_limit_headers(result, now=clock.now(), style="both", policy="slots"))
    assert items(fields["RateLimit-Policy"]) == [("slots", {"q": 3, "qu": "concurrent-requests"})]
    assert items(fields["RateLimit"]) == [("slots", {"r": 2})]
    assert fields["X-RateLimit-Limit"] == "3" and fields["X-RateLimit-Remaining"] == "2"
