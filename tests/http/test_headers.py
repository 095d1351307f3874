"""Header building: exact names and values for each style, and every draft field
checked by a real Structured Field parser (http-sfv, RFC 9651)."""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import http_sfv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import limiter.http.headers as headers_module
from limiter import (
    FixedWindow,
    Limit,
    Lockout,
    ManualClock,
    Quota,
    RateLimiter,
    RateLimitResult,
    SlidingWindow,
    rate_limit_headers,
)
from limiter.core.bucket import step
from limiter.core.limits import TIME_EPSILON
from limiter.http.headers import SF_INT_MAX, build_headers, build_raw_headers

NOW = 1_700_000_000.25
STYLES = ("x", "draft", "both")
Headers = List[Tuple[str, str]]


def result(**kw: object) -> RateLimitResult:
    fields = dict(allowed=True, limit=20, remaining=7, reset_after=1.3, retry_after=0.0, window=2.0)
    fields.update(kw)
    return RateLimitResult(**fields)  # type: ignore[arg-type]


def sf_items(value: str) -> List[Tuple[str, Dict[str, int]]]:
    """Parse a draft field as an RFC 9651 List: each item a String with Integer parameters
    (but ``qu``, a String: its units are checked where they are given)."""
    parsed = http_sfv.List()
    parsed.parse(value.encode("ascii"))  # raises on anything a parser must reject
    items = []
    for item in parsed:
        assert type(item.value) is str, value  # a String, not a Token
        params = {k: v for k, v in item.params.items() if k != "qu"}
        assert all(type(v) is int and 0 <= v <= SF_INT_MAX for v in params.values()), value
        items.append((item.value, params))
    return items


def draft(result: RateLimitResult, **kw: object) -> Dict[str, object]:
    fields = dict(rate_limit_headers(result, now=NOW, style="draft", **kw))  # type: ignore[arg-type]
    return {
        "policy": sf_items(fields["RateLimit-Policy"]),
        "limit": sf_items(fields["RateLimit"]),
        "retry": fields.get("Retry-After"),
    }


def check_conformance(result: RateLimitResult, headers: Headers, now: float) -> None:
    """What draft-10 and RFC 9110 require of every field, whatever the result."""
    fields = dict(headers)
    assert len(fields) == len(headers)
    for name, value in headers:
        if name not in ("RateLimit", "RateLimit-Policy"):
            assert re.fullmatch(r"0|[1-9][0-9]*", value), (name, value)  # exact, >= 0
    if "X-RateLimit-Reset" in fields:
        assert int(fields["X-RateLimit-Reset"]) >= math.floor(now)
        assert fields["X-RateLimit-Limit"] == str(result.limit)
        assert fields["X-RateLimit-Remaining"] == str(result.remaining)
    retry: Optional[int] = None
    if "Retry-After" in fields:
        retry = int(fields["Retry-After"])
        assert retry >= 1 and retry >= result.retry_after - 1e-6
    assert (retry is not None) == (not result.allowed and math.isfinite(result.retry_after))
    if "RateLimit" not in fields:
        return
    policies = sf_items(fields["RateLimit-Policy"])
    limits = sf_items(fields["RateLimit"])
    parts = result.results or (result,)
    assert len(policies) == len(limits) == len(parts)
    for (name, policy), (same, limit), part in zip(policies, limits, parts):
        assert name == same
        assert set(policy) == {"q", "w"} and policy["w"] >= 1
        assert policy["q"] >= min(part.limit, SF_INT_MAX)
        assert set(limit) in ({"r", "t"}, {"r"}) and limit["r"] == min(part.remaining, SF_INT_MAX)
        assert limit["r"] <= policy["q"]
        if retry is None:
            assert "t" in limit
        else:  # draft-10 section 6: Retry-After SHOULD NOT point earlier than t
            assert limit.get("t", 0) <= retry
        if part.remaining >= part.limit:
            assert limit["t"] == 0


# -- the "x" style ------------------------------------------------------------------


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


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        (1e-9, "1"),
        (0.0, "1"),
        (1.0, "1"),
        (1.0000001, "1"),  # float noise, below the microsecond of slack
        (1.000002, "2"),  # beyond it
        (1.5, "2"),
        (59.01, "60"),
    ],
)
@pytest.mark.parametrize("style", STYLES)
def test_retry_after_is_whole_seconds_rounded_up_at_least_one(
    retry_after: float, expected: str, style: str
) -> None:
    denied = result(allowed=False, remaining=0, retry_after=retry_after)
    assert dict(rate_limit_headers(denied, now=NOW, style=style))["Retry-After"] == expected


@pytest.mark.parametrize(
    ("now", "reset_after", "expected"),
    [
        (1000.0, 0.0, "1000"),  # a full bucket is full now
        (1000.0, 1e-7, "1000"),  # float noise below the slack is not a second more
        (1000.0, 0.5, "1001"),
        (1000.0, 2.0, "1002"),
        (1000.5, 0.5, "1001"),
        (2000.25, 1.3, "2002"),  # from ``now``, not from any clock of its own
    ],
)
def test_x_reset_is_now_plus_reset_after_rounded_up(
    now: float, reset_after: float, expected: str
) -> None:
    headers = dict(rate_limit_headers(result(reset_after=reset_after), now=now))
    assert headers["X-RateLimit-Reset"] == expected


@pytest.mark.parametrize("retry_after", [math.inf, math.nan])
def test_x_style_never_pass_has_no_retry_after(retry_after: float) -> None:
    never = result(allowed=False, retry_after=retry_after)
    assert rate_limit_headers(never, now=NOW) == [
        ("X-RateLimit-Limit", "20"),
        ("X-RateLimit-Remaining", "7"),
        ("X-RateLimit-Reset", "1700000002"),
    ]
    assert build_headers(never, NOW, "x") == rate_limit_headers(never, now=NOW)


def test_impossible_cost_never_prints_inf() -> None:
    never = result(allowed=False, retry_after=math.inf)
    headers = dict(rate_limit_headers(never, now=NOW, style="both"))
    assert "Retry-After" not in headers
    assert all(v.replace('"', "").isprintable() and "inf" not in v for v in headers.values())
    assert headers["RateLimit"] == '"default";r=7;t=1'  # no Retry-After: t is kept


def test_full_bucket_reset_is_now() -> None:
    headers = dict(rate_limit_headers(result(reset_after=0.0, remaining=20), now=NOW))
    assert headers["X-RateLimit-Reset"] == "1700000001"


def test_unknown_style_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="'X'"):
        rate_limit_headers(result(), now=NOW, style="X")
    with pytest.raises(
        TypeError, match="header style must be one of 'x', 'draft', 'both' or None, got 5"
    ):
        rate_limit_headers(result(), now=NOW, style=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("now", [math.nan, math.inf, -math.inf])
def test_now_must_be_finite(now: float) -> None:
    with pytest.raises(ValueError, match=r"now must be a finite number of seconds, got"):
        rate_limit_headers(result(), now=now)


@pytest.mark.parametrize("now", ["1700000000", None, True])
def test_now_must_be_a_number(now: object) -> None:
    with pytest.raises(TypeError, match=r"now must be a number of seconds, got"):
        rate_limit_headers(result(), now=now)  # type: ignore[arg-type]


def test_result_must_be_a_result() -> None:
    with pytest.raises(TypeError, match=r"result must be a RateLimitResult, got \(True"):
        rate_limit_headers((True, 20, 7, 1.3, 0.0, 2.0), now=NOW)  # type: ignore[arg-type]


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
    noisy = result(reset_after=debt, remaining=0, allowed=False, retry_after=debt, limit=1)
    headers = dict(rate_limit_headers(noisy, now=NOW - 0.25, style="both"))
    assert headers["RateLimit"] == '"default";r=0;t=2'
    assert headers["X-RateLimit-Reset"] == "1700000002"
    assert headers["Retry-After"] == "2"


# -- the draft style ------------------------------------------------------------------


def test_draft_style() -> None:
    # 20 tokens refilled in 2 s: one every 0.1 s; 7 whole ones left, full in 1.3 s,
    # so the 8th is complete in 1.3 - 12 * 0.1 = 0.1 s.
    assert rate_limit_headers(result(), now=NOW, style="draft") == [
        ("RateLimit-Policy", '"default";q=20;w=2'),
        ("RateLimit", '"default";r=7;t=1'),
    ]
    denied = result(
        allowed=False, remaining=0, reset_after=100 / 3, retry_after=5 / 3, window=100 / 3
    )
    assert rate_limit_headers(denied, now=NOW, style="draft", policy="api") == [
        ("RateLimit-Policy", '"api";q=20;w=34'),
        ("RateLimit", '"api";r=0;t=2'),
        ("Retry-After", "2"),
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


# Item 10: "w" is a non-zero integer, whatever the window.


def test_w_is_never_zero() -> None:
    peek = RateLimiter(1_000_000, 1).check("k", 0)
    assert rate_limit_headers(peek, now=NOW, style="draft")[0] == (
        "RateLimit-Policy",
        '"default";q=1000000;w=1',
    )


@pytest.mark.parametrize(
    ("rate", "burst", "policy"),
    [
        (1_000_000, 1, "q=1000000;w=1"),  # a window of 1 us is advertised per second
        (3, 1, "q=3;w=1"),
        (7, 1, "q=7;w=1"),
        (93, 1, "q=93;w=1"),  # 1 / (1 / 93) is 92.99999999999999: not a token less
        (25, 7, "q=25;w=1"),
        (10, 9, "q=10;w=1"),
        (1.5, 1, "q=1;w=1"),  # whole tokens per second, rounded down
        (1000.5, 1000, "q=1000;w=1"),
        (10, 10, "q=10;w=1"),
        (10, 20, "q=20;w=2"),
        (10, 11, "q=11;w=2"),  # 1.1 s, rounded up
        (3, 100, "q=100;w=34"),
        (1 / 3600, 1, "q=1;w=3600"),
    ],
)
def test_q_and_w(rate: float, burst: int, policy: str) -> None:
    peek = RateLimiter(Limit(rate, burst), clock=ManualClock(1.0)).check("k", 0)
    assert draft(peek)["policy"] == sf_items(f'"default";{policy}')


@settings(max_examples=300, deadline=None)
@given(rate=st.floats(1e-4, 1e12), burst=st.integers(1, 10**9))
def test_advertised_rate_is_never_above_and_at_least_half_the_real_one(
    rate: float, burst: int
) -> None:
    limit = Limit(rate, burst)
    _, peek = step(None, 1000.0, limit, 0)
    ((_, policy),) = draft(peek)["policy"]  # type: ignore[misc]
    assert policy["w"] >= 1
    assert policy["q"] >= burst
    advertised = policy["q"] / policy["w"]
    assert advertised <= limit.rate * (1 + 2e-6)
    assert advertised >= limit.rate / 2


def test_integers_beyond_structured_fields_are_capped() -> None:
    huge = RateLimitResult(False, 2**53, 2**53 - 1, 2e15, 1e16, 2.0**60, (), "big")
    headers = rate_limit_headers(huge, now=NOW, style="both")
    assert dict(headers)["RateLimit-Policy"] == '"big";q=999999999999999;w=999999999999999'
    assert dict(headers)["RateLimit"] == '"big";r=999999999999999;t=999999999999999'
    assert dict(headers)["Retry-After"] == "10000000000000000"  # delay-seconds has no bound
    check_conformance(huge, headers, NOW)
    tiny = RateLimitResult(True, 1, 1, 0.0, 0.0, 1e-300, (), "fast")
    assert dict(rate_limit_headers(tiny, now=NOW, style="draft"))["RateLimit-Policy"] == (
        '"fast";q=999999999999999;w=1'
    )


# Item 11: every name is a valid sf-string, the rule of Limit.name.

BAD_NAMES = ['a"b', "a\\b", "a\tb", "a\nb", "caf\u00e9", "\u2028", "\x7f", "\x00", ""]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("style", STYLES)
def test_bad_policy_is_a_value_error(name: str, style: str) -> None:
    message = (
        f"policy must be non-empty printable ASCII without quotes or backslashes, got {name!r}"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        rate_limit_headers(result(), now=NOW, style=style, policy=name)
    with pytest.raises(ValueError):
        Limit(1, 1, name)  # the same rule as the limit's own name


@pytest.mark.parametrize("name", [5, b"api", ["api"]])
def test_policy_of_a_wrong_type_is_a_type_error(name: object) -> None:
    with pytest.raises(TypeError, match=re.escape(f"policy must be a str, got {name!r}")):
        rate_limit_headers(result(), now=NOW, style="draft", policy=name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_name_in_a_result_is_a_value_error(name: str) -> None:
    with pytest.raises(ValueError, match=r"^result\.policy must be"):
        rate_limit_headers(result(policy=name), now=NOW, style="draft")
    with pytest.raises(ValueError, match=r"^policy must be"):
        build_headers(result(), NOW, "both", name)


PRINTABLE_ASCII = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20)


@settings(max_examples=300, deadline=None)
@given(name=PRINTABLE_ASCII | st.text(max_size=8))
def test_a_name_is_accepted_iff_limit_accepts_it_and_parses_back(name: str) -> None:
    try:
        Limit(1, 1, name)
    except ValueError:
        with pytest.raises(ValueError):
            rate_limit_headers(result(), now=NOW, style="draft", policy=name)
        with pytest.raises(ValueError):
            rate_limit_headers(result(policy=name), now=NOW, style="draft")
        return
    for fields in (draft(result(), policy=name), draft(result(policy=name))):
        assert fields["policy"] == [(name, {"q": 20, "w": 2})]
        assert fields["limit"] == [(name, {"r": 7, "t": 1})]


def test_policy_override_with_several_limits_keeps_each_limits_name() -> None:
    clock = ManualClock(1_000.0)
    limiter = RateLimiter("10/second; 100 per minute", clock=clock)
    allowed = limiter.check("k")
    expected = [
        ("RateLimit-Policy", '"10/second";q=10;w=1, "100 per minute";q=100;w=60'),
        ("RateLimit", '"10/second";r=9;t=1, "100 per minute";r=99;t=1'),
    ]
    assert rate_limit_headers(allowed, now=clock.now(), style="draft", policy="api") == expected
    assert rate_limit_headers(allowed, now=clock.now(), style="draft") == expected
    with pytest.raises(ValueError, match="policy"):  # validated even where it is not used
        rate_limit_headers(allowed, now=clock.now(), style="draft", policy='a"b')
    single = RateLimiter(10, clock=clock).check("k")
    assert draft(single, policy="api")["policy"] == [("api", {"q": 10, "w": 1})]


def test_policy_cache_stays_small() -> None:
    for i in range(1000):
        rate_limit_headers(result(), now=NOW, style="draft", policy=f"p{i}")
        assert 0 < len(headers_module._POLICIES) <= headers_module._POLICIES_MAX
    assert draft(result(), policy="p999")["policy"] == [("p999", {"q": 20, "w": 2})]


# Item 12: t is the seconds until more quota is available; Retry-After is never earlier.


def test_denied_t_and_retry_after_agree() -> None:
    clock = ManualClock(1_000.0)
    limiter = RateLimiter(10, 20, clock=clock)
    for _ in range(20):
        limiter.check("ip")
    denied = limiter.check("ip")
    assert rate_limit_headers(denied, now=clock.now(), style="draft") == [
        ("RateLimit-Policy", '"default";q=20;w=2'),
        ("RateLimit", '"default";r=0;t=1'),  # the next token, 0.1 s away
        ("Retry-After", "1"),
    ]


def test_t_is_seconds_until_one_more_whole_token() -> None:
    clock = ManualClock(1_000.0)
    limiter = RateLimiter(0.5, 4, clock=clock)  # a token every 2 s
    for _ in range(4):
        limiter.check("k")
    seen = [draft(limiter.check("k", 0))["limit"]]
    for wait in (1.0, 1.0, 5.5, 0.5):
        clock.advance(wait)
        seen.append(draft(limiter.check("k", 0))["limit"])
    assert seen == [
        [("default", {"r": 0, "t": 2})],
        [("default", {"r": 0, "t": 1})],
        [("default", {"r": 1, "t": 2})],
        [("default", {"r": 3, "t": 1})],  # 3.75 tokens: the 4th in 0.5 s
        [("default", {"r": 4, "t": 0})],  # full
    ]


def test_t_is_never_negative() -> None:
    # No limiter gives such a result (empty, yet full now); t is 0, not below.
    assert draft(result(remaining=0, reset_after=0.0))["limit"] == [("default", {"r": 0, "t": 0})]
    odd = result(remaining=0, reset_after=1.0, window=1e300)
    assert draft(odd)["limit"] == [("default", {"r": 0, "t": 0})]


def test_t_is_zero_on_a_full_bucket() -> None:
    fresh = RateLimiter(10, 20).check("k", 0)
    assert rate_limit_headers(fresh, now=NOW, style="draft")[1] == (
        "RateLimit",
        '"default";r=20;t=0',
    )
    full = result(remaining=20, reset_after=0.0)
    assert draft(full)["limit"] == [("default", {"r": 20, "t": 0})]
    nearly = result(remaining=20, reset_after=1e-9)  # within the slack: counted full
    assert draft(nearly)["limit"] == [("default", {"r": 20, "t": 0})]


def test_denied_larger_cost_retry_after_is_after_t() -> None:
    clock = ManualClock(1_000.0)
    limiter = RateLimiter(1, 10, clock=clock)
    for _ in range(8):
        limiter.check("k")
    denied = limiter.check("k", 5)
    assert rate_limit_headers(denied, now=clock.now(), style="draft") == [
        ("RateLimit-Policy", '"default";q=10;w=10'),
        ("RateLimit", '"default";r=2;t=1'),
        ("Retry-After", "3"),
    ]


def test_several_limits_denied_leaves_out_a_t_later_than_retry_after() -> None:
    clock = ManualClock(1_000.0)
    limiter = RateLimiter("10/second;1000/day", clock=clock)
    for _ in range(10):
        limiter.check("k")
    denied = limiter.check("k")
    assert rate_limit_headers(denied, now=clock.now(), style="draft") == [
        ("RateLimit-Policy", '"10/second";q=10;w=1, "1000/day";q=1000;w=86400'),
        # the daily limit's next token is 87 s away: no t rather than one after Retry-After
        ("RateLimit", '"10/second";r=0;t=1, "1000/day";r=990'),
        ("Retry-After", "1"),
    ]
    allowed = limiter.check("k", 0)
    assert dict(rate_limit_headers(allowed, now=clock.now(), style="draft"))["RateLimit"] == (
        '"10/second";r=0;t=1, "1000/day";r=990;t=87'
    )


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(0.01, 1000),
    burst=st.integers(1, 1000),
    ops=st.lists(st.tuples(st.floats(0, 50), st.integers(0, 1001)), max_size=25),
)
def test_t_is_when_r_grows(rate: float, burst: int, ops: Sequence[Tuple[float, int]]) -> None:
    """At ``now + t`` the bucket holds one more whole token; a second earlier it did not."""
    limit = Limit(rate, burst)
    state = None
    now = 1000.0
    for wait, cost in ops:
        now += wait
        state, res = step(state, now, limit, min(cost, burst + 1))
        headers = rate_limit_headers(res, now=now, style="draft")
        check_conformance(res, headers, now)
        ((_, item),) = sf_items(dict(headers)["RateLimit"])
        if "t" not in item:
            continue
        r, t = item["r"], item["t"]
        if r == burst:
            assert t == 0
            continue
        assert step(state, now + t + 2e-6, limit, 0)[1].remaining > r
        assert step(state, now + max(0.0, t - 1 - 2e-6), limit, 0)[1].remaining == r


NAMES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=12)
NAMES = NAMES.filter(lambda n: '"' not in n and "\\" not in n)
LIMITS = st.builds(
    Limit,
    rate=st.floats(1e-3, 1e7),
    burst=st.integers(1, 10**6),
)


@settings(max_examples=150, deadline=None)
@given(
    limits=st.lists(LIMITS, min_size=1, max_size=3),
    names=st.lists(NAMES, min_size=3, max_size=3, unique=True),
    ops=st.lists(
        st.tuples(st.floats(0, 100), st.integers(0, 20) | st.sampled_from([0.5, 1.5, 10**7])),
        min_size=1,
        max_size=15,
    ),
    policy=st.none() | NAMES,
)
def test_every_emitted_field_parses_and_conforms(
    limits: List[Limit], names: List[str], ops: Sequence[Tuple[float, float]], policy: Optional[str]
) -> None:
    named = [Limit(lim.rate, lim.burst, name) for lim, name in zip(limits, names)]
    clock = ManualClock(1_700_000_000.0)
    limiter = RateLimiter(named, clock=clock)
    for wait, cost in ops:
        clock.advance(wait)
        res = limiter.check("k", cost)
        for style in STYLES:
            headers = rate_limit_headers(res, now=clock.now(), style=style, policy=policy)
            assert headers == build_headers(res, clock.now(), style, policy)
            check_conformance(res, headers, clock.now())
            if style != "x":
                items = sf_items(dict(headers)["RateLimit"])
                expected = (
                    [policy] if policy is not None and len(named) == 1 else names[: len(named)]
                )
                assert [name for name, _ in items] == expected


@st.composite
def any_result(draw: st.DrawFn) -> RateLimitResult:
    """A result as its contract allows it, up to extreme values."""
    burst = draw(st.integers(1, 2**53))
    window = draw(st.floats(1e-300, 1e300))
    allowed = draw(st.booleans())
    return RateLimitResult(
        allowed,
        burst,
        draw(st.integers(0, burst)),
        draw(st.floats(0, min(window, 1e30))),
        0.0 if allowed else draw(st.floats(0, 1e30) | st.just(math.inf)),
        window,
        (),
        draw(NAMES),
    )


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(any_result(), min_size=1, max_size=3), now=st.floats(0, 4e9))
def test_any_result_gives_valid_fields(parts: List[RateLimitResult], now: float) -> None:
    res = parts[0]._replace(results=tuple(parts) if len(parts) > 1 else ())
    for style in STYLES:
        headers = rate_limit_headers(res, now=now, style=style)
        check_conformance(res, headers, now)


# -- what mutation testing found unpinned (issue 9, item 14; docs/testing.md) ------


def test_a_one_second_window_advertises_the_burst_exactly() -> None:
    # w=1 from a window of exactly 1 s: q is the burst, not a rate rounded from it.
    _, peek = step(None, NOW, Limit(10**12, 10**12), 0)
    assert rate_limit_headers(peek, now=NOW, style="draft") == [
        ("RateLimit-Policy", '"default";q=1000000000000;w=1'),
        ("RateLimit", '"default";r=1000000000000;t=0'),
    ]


def test_a_result_with_a_zero_or_nan_window_still_gets_valid_fields() -> None:
    # No Limit gives such a result; a hand-built one is advertised as w=1, q=its
    # limit, never divided by (ZeroDivisionError) nor rounded (ValueError on NaN).
    zero = result(limit=10, remaining=5, reset_after=3.0, window=0.0)
    assert rate_limit_headers(zero, now=NOW, style="both") == [
        ("X-RateLimit-Limit", "10"),
        ("X-RateLimit-Remaining", "5"),
        ("X-RateLimit-Reset", "1700000004"),
        ("RateLimit-Policy", '"default";q=10;w=1'),
        ("RateLimit", '"default";r=5;t=3'),
    ]
    nan = result(limit=10, remaining=5, reset_after=3.0, window=math.nan)
    assert rate_limit_headers(nan, now=NOW, style="draft") == [
        ("RateLimit-Policy", '"default";q=10;w=1'),
        ("RateLimit", '"default";r=5;t=0'),
    ]


def test_a_limit_of_zero_is_advertised_as_q_0() -> None:
    nothing = result(allowed=False, limit=0, remaining=0, reset_after=0.0, retry_after=1.0)
    assert rate_limit_headers(nothing, now=NOW, style="draft") == [
        ("RateLimit-Policy", '"default";q=0;w=2'),
        ("RateLimit", '"default";r=0;t=0'),
        ("Retry-After", "1"),
    ]


def test_reset_is_0_for_a_full_bucket_at_time_0() -> None:
    # ManualClock starts at 0: a full bucket is full "now", 0, not a second later.
    clock = ManualClock(0.0)
    full = RateLimiter(10, 20, clock=clock).check("k", 0)
    assert rate_limit_headers(full, now=clock.now()) == [
        ("X-RateLimit-Limit", "20"),
        ("X-RateLimit-Remaining", "20"),
        ("X-RateLimit-Reset", "0"),
    ]
    assert dict(rate_limit_headers(result(reset_after=0.0), now=-5.0))["X-RateLimit-Reset"] == "0"


def test_t_is_0_when_the_next_token_is_within_the_slack() -> None:
    # One token short, full again in half a microsecond (under TIME_EPSILON).
    almost = result(limit=20, remaining=19, reset_after=5e-7)
    assert draft(almost)["limit"] == [("default", {"r": 19, "t": 0})]
    later = result(limit=20, remaining=19, reset_after=2e-6)
    assert draft(later)["limit"] == [("default", {"r": 19, "t": 1})]


def test_a_subclass_of_the_result_is_accepted() -> None:
    class Annotated(RateLimitResult):
        __slots__ = ()

    for style in STYLES:
        assert rate_limit_headers(Annotated(*result()), now=NOW, style=style) == (
            rate_limit_headers(result(), now=NOW, style=style)
        )
    assert rate_limit_headers(Annotated(*result()), now=NOW)[0] == ("X-RateLimit-Limit", "20")


def reference_x(result: RateLimitResult, now: float, style: Optional[str]) -> Headers:
    """The "x" and None styles as first written, without the caches of build_headers."""

    def up(seconds: float) -> int:
        return max(0, math.ceil(seconds - TIME_EPSILON))

    headers = []
    if style == "x":
        headers = [
            ("X-RateLimit-Limit", str(result[1])),
            ("X-RateLimit-Remaining", str(result[2])),
            ("X-RateLimit-Reset", str(up(now + result[3]))),
        ]
    if not result[0] and result[4] < math.inf:
        headers.append(("Retry-After", str(max(1, up(result[4])))))
    return headers


# Limits include what a hand-built result may hold: True == 1 and 2.0 == 2 must
# not be taken for the cached ints (str(True) is "True").
limits = st.one_of(st.integers(0, 10**20), st.sampled_from([True, False, 2.0, 1, 2]))
results = st.builds(
    RateLimitResult,
    allowed=st.booleans(),
    limit=limits,
    remaining=st.integers(-5, 10**20),
    reset_after=st.floats(0, 1e9),
    retry_after=st.one_of(st.floats(0, 1e9), st.just(math.inf), st.just(math.nan)),
    window=st.floats(0.001, 1e6),
    results=st.just(()),
    policy=st.sampled_from(["default", "per-minute"]),
)
nows = st.one_of(
    st.floats(-1e6, 4e9),
    st.sampled_from([0.0, -0.5, NOW, 1_700_000_000.0, 1_700_000_000.999999]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(results, nows), min_size=1, max_size=6))
def test_cached_builders_match_the_plain_one(calls: List[Tuple[RateLimitResult, float]]) -> None:
    # In sequence: the limit and reset caches hit, miss and are replaced between calls.
    for res, now in calls:
        for style in ("x", None):
            assert build_headers(res, now, style) == reference_x(res, now, style)
        for style in ("x", "draft", "both", None):
            try:
                text = build_headers(res, now, style)
            except ArithmeticError:  # the draft's t of a result no bucket gives
                continue
            encoded = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in text]
            assert build_raw_headers(res, now, style) == encoded


def test_raw_headers_are_the_bytes_asgi_sends() -> None:
    denied = result(allowed=False, remaining=0, retry_after=1.5)
    assert build_raw_headers(denied, NOW, "x") == [
        (b"X-RateLimit-Limit", b"20"),
        (b"X-RateLimit-Remaining", b"0"),
        (b"X-RateLimit-Reset", b"1700000002"),
        (b"Retry-After", b"2"),
    ]
    assert build_raw_headers(result(), NOW, None) == []


# -- window policies (FixedWindow, SlidingWindow) --------------------------------------
# X-RateLimit-Reset and the draft's t are what the result gives: a fixed window's
# end, a sliding window's reset_after (when nothing is counted any more); the
# policy item is q=count;w=period for whole-second periods (docs/headers.md).

WINDOW_NOW = 1_700_000_000.25  # 20.25 s into a clock minute, 0.25 s into a second


def window_headers(policy: object, *times: float, style: str = "both") -> List[Headers]:
    """The headers of one request at each of ``times`` (seconds after WINDOW_NOW)."""
    clock = ManualClock(WINDOW_NOW)
    limiter = RateLimiter(policy, clock=clock)  # type: ignore[arg-type]
    out = []
    for seconds in times:
        clock.set(WINDOW_NOW + seconds)
        out.append(rate_limit_headers(limiter.check("k"), now=clock.now(), style=style))
    return out


def test_a_fixed_window_s_headers_count_down_to_its_end() -> None:
    first, second, third, fourth = window_headers(FixedWindow(2, 60), 0, 1, 2, 39.75)
    assert first == [
        ("X-RateLimit-Limit", "2"),
        ("X-RateLimit-Remaining", "1"),
        ("X-RateLimit-Reset", "1700000040"),  # the clock minute's end
        ("RateLimit-Policy", '"default";q=2;w=60'),
        ("RateLimit", '"default";r=1;t=40'),  # all back at the window's end
    ]
    assert second[1:3] == [("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", "1700000040")]
    assert dict(second)["RateLimit"] == '"default";r=0;t=39'
    assert third == [
        ("X-RateLimit-Limit", "2"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "1700000040"),
        ("RateLimit-Policy", '"default";q=2;w=60'),
        ("RateLimit", '"default";r=0;t=38'),  # t and Retry-After agree
        ("Retry-After", "38"),
    ]
    # At the minute's edge: a new window, counted from 0.
    assert fourth[1:3] == [("X-RateLimit-Remaining", "1"), ("X-RateLimit-Reset", "1700000100")]
    assert dict(fourth)["RateLimit"] == '"default";r=1;t=60'


def test_a_first_request_anchored_window_ends_a_period_after_its_first_request() -> None:
    first, denied = window_headers(FixedWindow(1, 60, anchor="first"), 0, 10)
    assert first[2] == ("X-RateLimit-Reset", "1700000061")  # now + 60, rounded up
    assert dict(first)["RateLimit"] == '"default";r=0;t=60'
    assert denied[2:] == [
        ("X-RateLimit-Reset", "1700000061"),
        ("RateLimit-Policy", '"default";q=1;w=60'),
        ("RateLimit", '"default";r=0;t=50'),
        ("Retry-After", "50"),
    ]


def test_a_sliding_window_s_reset_and_t_are_when_nothing_is_counted() -> None:
    first, second, denied, next_window = window_headers(SlidingWindow(2, 60), 0, 1, 2, 39.75)
    assert first == [
        ("X-RateLimit-Limit", "2"),
        ("X-RateLimit-Remaining", "1"),
        ("X-RateLimit-Reset", "1700000100"),  # the end of the next minute
        ("RateLimit-Policy", '"default";q=2;w=60'),
        ("RateLimit", '"default";r=1;t=100'),  # reset_after: an upper bound (see the docs)
    ]
    assert dict(second)["RateLimit"] == '"default";r=0;t=99'
    # Refused: Retry-After is exact (38 s: the previous minute's weight takes over);
    # t, later than it, is left out rather than contradict it.
    assert denied[2:] == [
        ("X-RateLimit-Reset", "1700000100"),
        ("RateLimit-Policy", '"default";q=2;w=60'),
        ("RateLimit", '"default";r=0'),
        ("Retry-After", "38"),
    ]
    # At the edge the 2 of the last minute weigh (nearly) fully: one more is let in.
    assert next_window[1:3] == [
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "1700000160"),
    ]


@pytest.mark.parametrize("kind", [FixedWindow, SlidingWindow])
@pytest.mark.parametrize(
    ("count", "period", "policy"),
    [
        (10, 60, "q=10;w=60"),  # whole seconds: exactly q=count;w=period
        (10, 1, "q=10;w=1"),
        (1000, 86400, "q=1000;w=86400"),
        (3, 1.5, "q=3;w=2"),  # w must be an integer: the period rounded up, q the count
        (7, 2.5, "q=7;w=3"),
        (5, 0.5, "q=10;w=1"),  # under a second: per second, q the whole units in it
        (3, 0.25, "q=12;w=1"),
        (100, 0.3, "q=333;w=1"),  # 333.3 a second, rounded down
        (1, 0.001, "q=1000;w=1"),
    ],
)
def test_a_window_s_policy_item(kind: Any, count: int, period: float, policy: str) -> None:
    (headers,) = window_headers(kind(count, period), 0, style="draft")
    assert dict(headers)["RateLimit-Policy"] == f'"default";{policy}'
    check_conformance(
        RateLimiter(kind(count, period), clock=ManualClock(WINDOW_NOW)).check("k"),
        headers,
        WINDOW_NOW,
    )


@pytest.mark.parametrize("kind", [FixedWindow, SlidingWindow])
def test_a_window_s_advertised_rate_is_never_above_the_real_one(kind: Any) -> None:
    for count in (1, 2, 3, 7, 10, 99, 1000):
        for period in (0.001, 0.3, 0.5, 0.999, 1.0, 1.5, 2.5, 59.9, 60.0, 3600.0):
            ((_, item),) = draft(
                RateLimiter(kind(count, period), clock=ManualClock(1.0)).check("k", 0)
            )["policy"]  # type: ignore[misc]
            assert item["q"] / item["w"] <= count / period * (1 + 1e-9), (count, period)
            if period >= 1.0:
                assert item["q"] == count  # the whole count, in a window a bit longer


def test_a_policy_of_limit_true_is_no_cached_q_true() -> None:
    # True == 1 and hashes alike: the policy cache must not hand "q=True" to a
    # limit of 1 (nor send it at all).
    odd = RateLimitResult(True, True, 1, 0.0, 0.0, 1.5, (), "default")  # type: ignore[arg-type]
    assert dict(rate_limit_headers(odd, now=NOW, style="draft"))["RateLimit-Policy"] == (
        '"default";q=1;w=2'
    )
    (headers,) = window_headers(FixedWindow(1, 1.5), 0, style="draft")
    assert dict(headers)["RateLimit-Policy"] == '"default";q=1;w=2'


# -- the latest draft's grammar, over every kind of policy ---------------------------
# draft-ietf-httpapi-ratelimit-headers-11 (the wire format of -10 unchanged):
# RateLimit-Policy items are Strings with q (Integer, required), qu (a registered
# unit's String), w (Integer > 0); RateLimit items are the same Strings with r
# (Integer, required) and t (Integer); pk (a Byte Sequence) is never sent.

UNITS = st.sampled_from([None, "requests", "content-bytes", "concurrent-requests"])
PERIODS = st.sampled_from([0.25, 0.5, 1, 1.5, 2, 60, 3600])


@st.composite
def any_policy(draw: st.DrawFn, name: str) -> Any:
    """One policy of any kind the library has, named ``name``."""
    count = draw(st.integers(1, 1000))
    kind = draw(st.sampled_from(["bucket", "fixed", "first", "sliding", "quota"]))
    if kind == "bucket":
        return Limit(draw(st.floats(1e-3, 1e4)), count, name)
    if kind in ("fixed", "first"):
        anchor = "epoch" if kind == "fixed" else "first"
        return FixedWindow(count, draw(PERIODS), anchor=anchor, name=name)
    if kind == "sliding":
        return SlidingWindow(count, draw(PERIODS), name=name)
    return Quota(count, draw(st.sampled_from(["hour", "day", "week", "month"])), name=name)


@st.composite
def any_limiter(draw: st.DrawFn) -> Tuple[RateLimiter, Dict[str, str], ManualClock]:
    """A limiter of one to three policies and maybe a lockout, with some limits' units."""
    names = draw(
        st.lists(NAMES.filter(lambda n: n != "lockout"), min_size=1, max_size=3, unique=True)
    )
    policies = [draw(any_policy(name)) for name in names]
    lockout = draw(
        st.none()
        | st.builds(
            Lockout,
            breaches=st.integers(1, 3),
            within=st.floats(1, 100),
            duration=st.floats(1, 1000),
        )
    )
    clock = ManualClock(draw(st.floats(1_600_000_000, 1_800_000_000)))
    limiter = RateLimiter(policies, clock=clock, lockout=lockout)
    units = {name: draw(UNITS) for name in names}
    return limiter, {name: unit for name, unit in units.items() if unit is not None}, clock


def check_draft_grammar(result: RateLimitResult, headers: Headers, units: Dict[str, str]) -> None:
    """Every field parses with a real Structured Field parser (http-sfv) and follows
    the draft's grammar; the other fields are non-negative SF Integers."""
    fields = dict(headers)
    assert len(fields) == len(headers)
    for name, value in headers:
        if name not in ("RateLimit", "RateLimit-Policy"):
            item = http_sfv.Item()
            item.parse(value.encode("ascii"))
            assert type(item.value) is int and item.value >= 0 and not item.params, (name, value)
    retry = int(fields["Retry-After"]) if "Retry-After" in fields else None
    assert (retry is not None) == (not result.allowed and math.isfinite(result.retry_after))
    if "RateLimit" not in fields:
        return
    policies, limits = http_sfv.List(), http_sfv.List()
    policies.parse(fields["RateLimit-Policy"].encode("ascii"))
    limits.parse(fields["RateLimit"].encode("ascii"))
    parts = result.results or (result,)
    assert len(policies) == len(limits) == len(parts)
    for policy, limit, part in zip(policies, limits, parts):
        assert type(policy.value) is str and policy.value == limit.value == part.policy
        q, w = policy.params["q"], policy.params["w"]
        assert type(q) is int and type(w) is int and 0 <= q <= SF_INT_MAX and w >= 1
        unit = None if part.kind == "lockout" else units.get(part.policy)
        if unit in (None, "requests"):  # the default unit is left out
            assert set(policy.params) == {"q", "w"}
        else:
            assert set(policy.params) == {"q", "qu", "w"}
            assert type(policy.params["qu"]) is str and policy.params["qu"] == unit
        assert set(limit.params) in ({"r"}, {"r", "t"})
        r, t = limit.params["r"], limit.params.get("t", 0)
        assert type(r) is int and type(t) is int and 0 <= r <= q and 0 <= t <= SF_INT_MAX
        if retry is not None:  # Retry-After never points before an effective window's end
            assert t <= retry
        else:
            assert "t" in limit.params


@settings(max_examples=200, deadline=None)
@given(
    made=any_limiter(),
    ops=st.lists(
        st.tuples(st.floats(0, 100), st.integers(0, 5) | st.sampled_from([0.5, 10**7])),
        min_size=1,
        max_size=12,
    ),
)
def test_every_field_of_every_policy_kind_parses_in_every_style(
    made: Tuple[RateLimiter, Dict[str, str], ManualClock],
    ops: Sequence[Tuple[float, float]],
) -> None:
    limiter, units, clock = made
    for wait, cost in ops:
        clock.advance(wait)
        res = limiter.check("k", cost)
        for style in (*STYLES, None):
            headers = rate_limit_headers(
                res,
                now=clock.now(),
                style=style,
                quota_units=units,  # type: ignore[arg-type]
            )
            check_draft_grammar(res, headers, units)
            assert headers == build_headers(res, clock.now(), style, None, units)
            raw = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers]
            assert build_raw_headers(res, clock.now(), style, units) == raw


def test_a_limit_s_unit_is_its_qu_and_requests_is_left_out() -> None:
    clock = ManualClock(start=1_700_000_000)
    limiter = RateLimiter(
        {"requests": "60/minute", "upload": "1000000/minute", "slots": "4/second"}, clock=clock
    )
    res = limiter.check("k", cost={"requests": 1, "upload": 250_000, "slots": 1})
    units = {"requests": "requests", "upload": "content-bytes", "slots": "concurrent-requests"}
    assert rate_limit_headers(res, now=clock.now(), style="draft", quota_units=units) == [
        (
            "RateLimit-Policy",
            '"requests";q=60;w=60, "upload";q=1000000;qu="content-bytes";w=60, '
            '"slots";q=4;qu="concurrent-requests";w=1',
        ),
        ("RateLimit", '"requests";r=59;t=1, "upload";r=750000;t=1, "slots";r=3;t=1'),
    ]
    # The "x" style has no place for a unit; nothing changes there.
    assert rate_limit_headers(res, now=clock.now(), quota_units=units) == rate_limit_headers(
        res, now=clock.now()
    )


def test_a_renamed_limit_keeps_its_unit_and_a_lockout_never_has_one() -> None:
    clock = ManualClock(start=1_700_000_000)
    one = RateLimiter(Limit(10, 20, "upload"), clock=clock).check("k")
    fields = dict(
        rate_limit_headers(
            one,
            now=clock.now(),
            style="draft",
            policy="api",
            quota_units={"upload": "content-bytes"},
        )
    )
    assert fields["RateLimit-Policy"] == '"api";q=20;qu="content-bytes";w=2'
    locking = RateLimiter(Limit(1, 1, "upload"), clock=clock, lockout=Lockout(1, 60, 300))
    locking.check("k")
    locked = locking.check("k")
    assert locked.locked_out
    units = {"upload": "content-bytes", "lockout": "content-bytes"}
    assert (
        dict(rate_limit_headers(locked, now=clock.now(), style="draft", quota_units=units))[
            "RateLimit-Policy"
        ]
        == '"upload";q=1;qu="content-bytes";w=1, "lockout";q=1;w=60'
    )


@pytest.mark.parametrize(
    ("units", "error", "message"),
    [
        ({"upload": "bytes"}, ValueError, "quota_units['upload'] must be one of 'requests'"),
        ({"upload": "request"}, ValueError, "got 'request'"),  # the registry's typo: refused
        ({"upload": 1}, TypeError, "got 1"),
        ({'up"load': "content-bytes"}, ValueError, "quota_units name must be non-empty"),
        ({1: "content-bytes"}, TypeError, "quota_units name must be a str"),
        ([("upload", "content-bytes")], TypeError, "must be a mapping of limit names"),
    ],
)
def test_a_bad_unit_is_refused(units: object, error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        rate_limit_headers(result(), now=NOW, style="draft", quota_units=units)  # type: ignore[arg-type]


def test_the_policy_cache_tells_units_apart() -> None:
    res = result(policy="upload")
    plain = dict(rate_limit_headers(res, now=NOW, style="draft"))["RateLimit-Policy"]
    bytes_ = rate_limit_headers(
        res, now=NOW, style="draft", quota_units={"upload": "content-bytes"}
    )
    assert plain == '"upload";q=20;w=2'
    assert dict(bytes_)["RateLimit-Policy"] == '"upload";q=20;qu="content-bytes";w=2'
    assert dict(rate_limit_headers(res, now=NOW, style="draft"))["RateLimit-Policy"] == plain
