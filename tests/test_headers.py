"""Header building: exact names and values for each style."""

from __future__ import annotations

import math

import pytest

from limiter import ManualClock, RateLimiter, RateLimitResult, rate_limit_headers

NOW = 1_700_000_000.25


def result(**kw: object) -> RateLimitResult:
    fields = dict(allowed=True, limit=20, remaining=7, reset_after=1.3, retry_after=0.0, window=2.0)
    fields.update(kw)
    return RateLimitResult(**fields)  # type: ignore[arg-type]


def test_x_style_allowed() -> None:
    assert rate_limit_headers(result(), now=NOW) == [
        ("X-RateLimit-Limit", "20"),
        ("X-RateLimit-Remaining", "7"),
        ("X-RateLimit-Reset", "1700000002"),  # ceil(NOW + 1.3)
    ]


def test_x_style_denied_adds_retry_after_rounded_up() -> None:
    denied = result(allowed=False, remaining=0, retry_after=0.05)
    assert rate_limit_headers(denied, now=NOW)[-1] == ("Retry-After", "1")
    denied = result(allowed=False, remaining=0, retry_after=2.0)
    assert rate_limit_headers(denied, now=NOW)[-1] == ("Retry-After", "2")
    denied = result(allowed=False, remaining=0, retry_after=2.0001)
    assert rate_limit_headers(denied, now=NOW)[-1] == ("Retry-After", "3")


def test_draft_style() -> None:
    assert rate_limit_headers(result(), now=NOW, style="draft") == [
        ("RateLimit-Policy", '"default";q=20;w=2'),
        ("RateLimit", '"default";r=7;t=2'),
    ]
    denied = result(allowed=False, remaining=0, retry_after=0.4, window=100 / 3)
    assert rate_limit_headers(denied, now=NOW, style="draft", policy="api") == [
        ("RateLimit-Policy", '"api";q=20;w=34'),
        ("RateLimit", '"api";r=0;t=2'),
        ("Retry-After", "1"),
    ]


def test_both_styles() -> None:
    names = [name for name, _ in rate_limit_headers(result(allowed=False), now=NOW, style="both")]
    assert names == [
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
        "RateLimit-Policy",
        "RateLimit",
        "Retry-After",
    ]


def test_impossible_cost_never_prints_inf() -> None:
    never = result(allowed=False, retry_after=math.inf)
    headers = dict(rate_limit_headers(never, now=NOW, style="both"))
    assert "Retry-After" not in headers
    assert all(v.replace('"', "").isprintable() and "inf" not in v for v in headers.values())


def test_full_bucket_reset_is_now() -> None:
    headers = dict(rate_limit_headers(result(reset_after=0.0, remaining=20), now=NOW))
    assert headers["X-RateLimit-Reset"] == "1700000001"


def test_unknown_style_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="'X'"):
        rate_limit_headers(result(), now=NOW, style="X")


def test_from_a_real_limiter() -> None:
    clock = ManualClock(1_000.0)
    limiter = RateLimiter(10, 20, clock=clock)
    for _ in range(20):
        limiter.check("ip")
    denied = limiter.check("ip")
    assert rate_limit_headers(denied, now=clock.now()) == [
        ("X-RateLimit-Limit", "20"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "1002"),
        ("Retry-After", "1"),
    ]


def test_float_noise_is_not_a_second_more() -> None:
    debt = 0.0
    for _ in range(20):  # what twenty requests of 0.1 s each add up to
        debt += 0.1
    assert debt == 2.0000000000000004
    noisy = result(reset_after=debt, remaining=0, allowed=False, retry_after=1.0000001)
    headers = dict(rate_limit_headers(noisy, now=NOW - 0.25, style="both"))
    assert headers["RateLimit"] == '"default";r=0;t=2'
    assert headers["X-RateLimit-Reset"] == "1700000002"
    assert headers["Retry-After"] == "1"
