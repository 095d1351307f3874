"""The wire format of the Redis script and the PostgreSQL function (``limiter.backends._wire``).

Arguments for every policy (windows too) and kind of cost, replies, keys and hash tags,
the PX rule, and the grammar that ``_wire.py`` and ``redis/bucket.lua`` share; no server.
"""

from __future__ import annotations

import math
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from importlib.resources import files
from typing import Any, List, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from limiter import Concurrency, Limit, Quota
from limiter.backends import _wire
from limiter.core.costs import Charge, Hold, Refund
from limiter.core.limits import TIME_EPSILON
from limiter.core.lockout import Lockout
from limiter.core.result import RateLimitResult
from limiter.core.window import MAX_PERIOD, MIN_PERIOD, FixedWindow, SlidingWindow
from limiter.store import StoreError

T = 1_700_006_400.0  # 2023-11-15 00:00:00 UTC, a day's start
LOCKOUT = Lockout(breaches=3, within=60, duration=900)


def argv(policies: List[Any], cost: Any, now: Optional[float], server_time: bool = True) -> str:
    [arg] = _wire.Argv(server_time).args(policies, cost, now)
    assert isinstance(arg, bytes)
    return arg.decode("ascii")


# -- the grammar -----------------------------------------------------------------


def grammar_lines(lines: List[str], prefix: str) -> List[str]:
    """The indented block after the first line of ``lines`` that starts ``prefix + "  argv"``."""
    start = next(i for i, line in enumerate(lines) if line.startswith(prefix + "  argv "))
    block = []
    for line in lines[start:]:
        if not line.startswith(prefix + "  "):
            break
        block.append(line[len(prefix) :])
    return block


@pytest.mark.parametrize("first", ["limiter.backends._wire", "limiter.backends.postgres"])
def test_the_wire_loads_the_script_whatever_is_imported_first(first: str) -> None:
    # _wire reads redis/bucket.lua from its own package: importing the redis
    # package there (which imports _wire) would be a cycle when _wire comes first.
    code = f"import {first}, limiter.backends.redis as r; assert r.SCRIPT.startswith('-- ')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_bucket_lua_repeats_the_grammar_verbatim() -> None:
    assert _wire.__doc__ is not None
    python = grammar_lines(_wire.__doc__.splitlines(), "  ")
    lua_text = files("limiter.backends.redis").joinpath("bucket.lua").read_text("utf-8")
    lua = grammar_lines(lua_text.splitlines(), "-- ")
    assert len(python) >= 10
    assert python == lua
    assert all(len(line) <= 100 for line in python)


# -- policies ----------------------------------------------------------------------


def test_each_policy_has_its_text() -> None:
    assert argv([Limit(10, 20)], 1, T) == f"{T!r} 1.0 10.0 20"
    assert argv([Limit(0.5, 3)], 0, None) == " 0.0 0.5 3"  # "": the server's TIME
    day = Quota(100, "day")
    assert argv([day], 2, T) == f"{T!r} 2.0 q{T!r}/{T + 86400!r} 100"
    # The window holds now + TIME_EPSILON: a check at the very end is the next day's.
    late = T + 86400 - TIME_EPSILON / 2
    assert argv([day], 1, late) == f"{late!r} 1.0 q{T + 86400!r}/{T + 2 * 86400!r} 100"
    assert argv([Limit(1, 5), LOCKOUT], 1, T).endswith(" 1.0 5 l60.0/900.0 3")
    # Windows: untimed (the script finds the window from now, the server's TIME too).
    assert argv([FixedWindow(10, 60)], 1, None) == " 1.0 w60.0 10"
    assert argv([FixedWindow(10, 60, "first")], 1, T) == f"{T!r} 1.0 f60.0 10"
    assert argv([SlidingWindow(2**53, 0.001)], 1, T) == f"{T!r} 1.0 s0.001 {2**53}"
    assert argv([SlidingWindow(3, 1 / 3)], 1, T).endswith(f" s{1 / 3!r} 3")
    # Concurrency: untimed (leases run from now, the server's TIME too).
    assert argv([Concurrency(3, lease=120)], Hold(7.0), None) == " t7.0 c120.0 3"
    assert argv([Concurrency(1000, lease=1 / 3)], 0, T) == f"{T!r} 0.0 c{1 / 3!r} 1000"


def test_windows_beside_other_policies() -> None:
    policies = [FixedWindow(5, 86400), Limit(2, 4), SlidingWindow(7, 7.5), LOCKOUT]
    costs = (1, 2, Refund(1, T - 60), 0)
    assert argv(policies, costs, T) == (
        f"{T!r} 1.0,2.0,-1.0@{T - 60!r},0.0 w86400.0 5 2.0 4 s7.5 7 l60.0/900.0 3"
    )


def test_a_quota_fixes_now_from_the_client_clock() -> None:
    text = argv([Quota(5, "hour")], 1, None)  # server_time, but a quota needs the window
    now = float(text.split()[0])
    assert abs(now - __import__("time").time()) < 60
    start, end = Quota(5, "hour").bounds(now + TIME_EPSILON)
    assert text.endswith(f" q{start!r}/{end!r} 5")


def test_the_codec_tells_policies_apart_in_one_place() -> None:
    assert _wire.decode_result(b"1 0 1 0", Limit(1, 1), "x").kind == "bucket"
    assert _wire.decode_result(b"1 0 1 0", FixedWindow(1, 1), "x").kind == "fixed-window"
    assert _wire.decode_result(b"1 0 1 0", SlidingWindow(1, 1), "x").kind == "sliding-window"
    assert _wire.decode_result(b"0 0 60 30", Concurrency(3, 60), "x").kind == "concurrency"
    policies = [Limit(1, 1), Quota(1, "day"), FixedWindow(1, 1), SlidingWindow(1, 1), LOCKOUT]
    policies.append(Concurrency(1))
    assert [(c.timed, c.last) for c in map(_wire.policy_codec, policies)] == [
        (False, False),
        (True, False),
        (False, False),
        (False, False),
        (False, True),
        (False, False),
    ]
    # One codec per kind: the two anchors of a fixed window differ in its text only.
    first = FixedWindow(1, 1, "first")
    assert _wire.policy_codec(first) is _wire.policy_codec(FixedWindow(1, 1))
    with pytest.raises(ValueError, match=r"limit must be a limiter\.Limit"):
        _wire.policy_codec("10/second")
    with pytest.raises(ValueError, match=r"limit must be a limiter\.Limit"):
        _wire.policy_codec(RateLimitResult(True, 1, 1, 0.0, 0.0, 1.0))  # a kind, per instance
    with pytest.raises(ValueError, match=r"limit must be a limiter\.Limit"):
        argv(["10/second"], 1, T)  # type: ignore[list-item]


def test_untimed_texts_are_cached_and_the_cache_is_bounded() -> None:
    builder = _wire.Argv(True)
    builder.args([Limit(1, 1)], 1, T)
    builder.args([Quota(1, "day")], 1, T)
    builder.args([FixedWindow(1, 1), SlidingWindow(1, 1)], 1, T)
    # A quota's text changes with now; windows' do not.
    assert list(builder._texts) == [Limit(1, 1), FixedWindow(1, 1), SlidingWindow(1, 1)]
    assert builder.args([FixedWindow(1, 1, "first")], 1, T) == [f"{T!r} 1.0 f1.0 1".encode()]
    for n in range(1, 1100):
        builder.args([Limit(n, 1)], 1, T)
    assert len(builder._texts) <= 1025


def test_several_policies_and_the_lone_lockout() -> None:
    limits = [Limit(1, 5), Limit(10, 50), LOCKOUT]
    assert argv(limits, 1, T) == f"{T!r} 1.0 1.0 5 10.0 50 l60.0/900.0 3"
    [arg] = _wire.Argv(True).many([Limit(2, 4)], [3], T)  # one cost in a list of one
    assert arg == f"{T!r} 3.0 2.0 4".encode()
    with pytest.raises(ValueError, match="a Lockout needs at least one limit before it"):
        _wire.Argv(True).many([LOCKOUT], 1, T)


# -- costs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cost, text",
    [
        (1, "1.0"),
        (0, "0.0"),
        (2.5, "2.5"),
        (Fraction(1, 3), repr(1 / 3)),
        (Decimal("2.5"), "2.5"),
        (5e-324, "5e-324"),
        (Fraction(1, 10**400), "5e-324"),  # never a free peek
        (2**53, repr(2.0**53)),
        (2**53 + 1, repr(2.0**54)),  # above every burst: denied alike
        (10**400, repr(2.0**54)),
        (math.inf, repr(2.0**54)),
        (Charge(3), "!3.0"),
        (Charge(2**54 - 2), "!" + repr(float(2**54 - 2))),  # exact up to 2**54
        (Charge(math.inf), "!" + repr(2.0**54)),
        (Refund(2), "-2.0"),
        (Refund(0), "-0.0"),
        (Refund(math.inf), repr(-(2.0**54))),  # "-inf" never travels
        (Refund(2, T - 0.5), f"-2.0@{T - 0.5!r}"),
        (Refund(0, 0), "-0.0@0.0"),
        (Hold(7.0), "t7.0"),
        (Hold(7.0, "give"), "g7.0"),
        (Hold(2.0**53 - 1, "renew"), "r9007199254740991.0"),
    ],
)
def test_cost_text(cost: Any, text: str) -> None:
    assert _wire.cost_text(cost) == text


@pytest.mark.parametrize(
    "bad, error", [(-1, ValueError), (math.nan, ValueError), (True, TypeError)]
)
def test_a_bad_cost_fails_before_any_io(bad: Any, error: type) -> None:
    with pytest.raises(error, match="cost"):
        _wire.cost_text(bad)


def test_a_plain_cost_on_a_concurrency_policy_fails_before_any_io() -> None:
    # The step's own TypeError (rule 5), for one policy or several, one cost
    # or one each; 0, a Refund and a Charge are peeks, sent as they are.
    slots = Concurrency(3, lease=60)
    with pytest.raises(TypeError, match="not a cost of 1"):
        argv([slots], 1, T)
    with pytest.raises(TypeError, match=r"not a cost of 2\.5"):
        argv([Limit(1, 5), slots], (1, 2.5), T)
    with pytest.raises(TypeError, match="not a cost of 1"):
        argv([slots, Limit(1, 5), LOCKOUT], 1, T)
    with pytest.raises(ValueError, match="cost must be a number of tokens >= 0"):
        argv([slots], -1, T)  # a bad number's own error first, as in step
    assert argv([slots], Refund(1), T) == f"{T!r} -1.0 c60.0 3"
    assert argv([Limit(1, 5), slots], (1, Charge(2)), T) == f"{T!r} 1.0,!2.0 1.0 5 c60.0 3"
    assert argv([Limit(1, 5), slots, LOCKOUT], (1, Hold(3.0), 0), T).startswith(
        f"{T!r} 1.0,t3.0,0.0 "
    )


def test_costs_per_limit() -> None:
    assert _wire.costs_text(2, 3) == "2.0"
    assert _wire.costs_text((1, Charge(2), Refund(3, T)), 3) == f"1.0,!2.0,-3.0@{T!r}"
    assert _wire.costs_text([0, 1], 2) == "0.0,1.0"
    with pytest.raises(ValueError, match="sequence of 3 costs"):
        _wire.costs_text((1, 2), 3)


@pytest.mark.parametrize("now", [math.nan, math.inf, "soon", 10**400])
def test_a_bad_now_fails_before_any_io(now: Any) -> None:
    with pytest.raises(ValueError, match="now must be a finite number of seconds"):
        argv([Limit(1, 1)], 1, now)


def test_now_without_server_time_is_the_local_clock() -> None:
    now = float(argv([Limit(1, 1)], 1, None, server_time=False).split()[0])
    assert abs(now - __import__("time").time()) < 60


# -- replies --------------------------------------------------------------------------


def test_a_reply_is_decoded_field_for_field() -> None:
    limit = Limit(2, 10, name="api")
    got = _wire.decode_result(b"1 9 0.5 0", limit, "RedisStore")
    assert got == RateLimitResult(True, 10, 9, 0.5, 0.0, 5.0, (), "api")
    assert got.__class__ is RateLimitResult
    denied = _wire.decode_result("0 0 4.5 0.5", limit, "RedisStore")  # decode_responses=True
    assert (denied.allowed, denied.remaining, denied.retry_after) == (False, 0, 0.5)
    big = _wire.decode_result(b"1 9007199254740992 0 0", Limit(1, 2**53), "RedisStore")
    assert big.remaining == 2**53
    assert _wire.decode_result(b"1 3 inf 0", Quota(5, "day"), "x").kind == "quota"


def test_several_replies_in_key_order() -> None:
    policies = [Limit(1, 5), Quota(7, "day"), FixedWindow(9, 60), SlidingWindow(2, 5), LOCKOUT]
    reply = b"1 4 1 0 1 6 3600 0 1 8 30 0 1 1 7.5 0 1 3 0 0"
    got = _wire.decode_results(reply, policies, "RedisStore")
    assert [r.kind for r in got] == ["bucket", "quota", "fixed-window", "sliding-window", "lockout"]
    assert [r.remaining for r in got] == [4, 6, 8, 1, 3]
    assert [r.limit for r in got] == [5, 7, 9, 2, 3]
    assert [r.window for r in got] == [5.0, 86400.0, 60.0, 5.0, 60.0]


@pytest.mark.parametrize(
    "reply", [None, b"", b"1 2 3", b"1 2 3 4 5", b"x 1 0 0", b"1 1 zero 0", 42, b"1 2 3 4 5 6 7"]
)
def test_a_malformed_reply_is_a_store_error(reply: Any) -> None:
    with pytest.raises(StoreError, match="AsyncRedisStore: unexpected script reply"):
        _wire.decode_result(reply, Limit(1, 1), "AsyncRedisStore")
    with pytest.raises(StoreError, match="RedisStore: unexpected script reply"):
        _wire.decode_results(reply, [Limit(1, 1), Limit(2, 2)], "RedisStore")


# -- keys and hash tags -------------------------------------------------------------------


def test_key_scheme() -> None:
    assert _wire.redis_key("10/s:20:1.2.3.4") == "limiter:{10/s:20:1.2.3.4}"
    assert _wire.redis_key("a}b%", "p:") == "p:{a%7Db%25}"
    assert _wire.redis_key("rl:{alice}:daily", "p:") == "p:{alice}rl:{alice}:daily"
    assert _wire.redis_key("{}", "p:") == "p:{{%7D}"
    assert _wire.hash_tag("x{a}y{b}") == "a"
    assert _wire.hash_tag("{}a") is None and _wire.hash_tag("}{") is None
    assert _wire.slot_tag("rl:{alice}:daily") == "alice"
    assert _wire.slot_tag("a}%") == "a%7D%25"
    assert _wire.encode_key("\ud800", "p:") == "p:{\ud800}".encode("utf-8", "surrogatepass")
    with pytest.raises(ValueError, match="key must be a str"):
        _wire.encode_key(b"k", "p:")  # type: ignore[arg-type]


def test_keys_of_a_call() -> None:
    assert _wire.encode_keys(["a", "b"], 2, "p:", cluster=False) == [b"p:{a}", b"p:{b}"]
    tagged = _wire.encode_keys(["{u}:a", "{u}:b"], 2, "p:", cluster=True)
    assert tagged == [b"p:{u}{u}:a", b"p:{u}{u}:b"]
    with pytest.raises(ValueError, match="must share a hash tag"):
        _wire.encode_keys(["a", "b"], 2, "p:", cluster=True)
    with pytest.raises(ValueError, match="one key per limit"):
        _wire.encode_keys(["a"], 2, "p:", cluster=False)
    with pytest.raises(ValueError, match="at least one limit"):
        _wire.encode_keys([], 0, "p:", cluster=False)


@given(st.text(), st.text())
def test_redis_key_is_one_to_one_and_tagged(a: str, b: str) -> None:
    ka, kb = _wire.redis_key(a, "p:"), _wire.redis_key(b, "p:")
    assert (ka == kb) == (a == b)
    if a:  # "" is stored as "p:{}", whose empty tag Redis ignores
        assert _wire.hash_tag(ka[2:]) == _wire.slot_tag(a)  # the key's slot is its tag's


# -- expiry -------------------------------------------------------------------------------


def test_ttl_ms_is_the_time_to_full_with_a_floor_and_a_ceiling() -> None:
    assert _wire.TTL_FLOOR_MS == 1000  # the clock tolerance
    assert _wire.ttl_ms(0.00067) == 1000  # one token of 90,000/minute
    assert _wire.ttl_ms(-5.0) == 1000
    assert _wire.ttl_ms(1.0000001) == 1001
    assert _wire.ttl_ms(300.0) == 300_000
    assert _wire.ttl_ms(1e300) == 10**15


# -- round trips ----------------------------------------------------------------------------

NUMBERS = st.floats(-1e15, 1e15, allow_nan=False, allow_infinity=False)
TOKENS = st.floats(0, 2.0**54, allow_nan=False)


def read_cost(text: str) -> Any:
    """The grammar's cost read back as bucket.lua reads it: (value, mode, taken_at)."""
    if text.startswith("!"):
        return float(text[1:]), "!", None
    if text.startswith("-"):
        value, _, taken = text.partition("@")
        return float(value), "-", float(taken) if taken else None
    return float(text), None, None


@given(TOKENS, st.none() | NUMBERS)
def test_a_refund_round_trips(tokens: float, taken_at: Optional[float]) -> None:
    assert read_cost(_wire.cost_text(Refund(tokens, taken_at))) == (-tokens, "-", taken_at)


@given(st.integers(1, 2**53 - 1), st.sampled_from(["take", "give", "renew"]))
def test_a_hold_round_trips(holder: int, action: str) -> None:
    # bucket.lua reads the holder with tonumber: a whole float's repr is exact.
    text = _wire.cost_text(Hold(float(holder), action))
    assert (text[0], float(text[1:])) == (action[0], holder)


@given(TOKENS)
def test_a_charge_and_a_request_round_trip(tokens: float) -> None:
    assert read_cost(_wire.cost_text(Charge(tokens))) == (tokens, "!", None)
    expected = tokens if tokens <= 2.0**53 else 2.0**54
    assert read_cost(_wire.cost_text(tokens)) == (expected, None, None)


@given(
    st.floats(1e-9, 1e9),
    st.integers(1, 2**53),
    NUMBERS,
    st.lists(st.one_of(TOKENS, TOKENS.map(Charge), TOKENS.map(Refund)), min_size=2, max_size=2),
)
def test_argv_round_trips(rate: float, burst: int, now: float, costs: List[Any]) -> None:
    policies = [Limit(rate, burst), Limit(rate, burst, name="other")]
    nows, cost, *rest = argv(policies, costs, now).split(" ")
    assert float(nows) == now
    assert [read_cost(c)[0] for c in cost.split(",")] == [
        float(c) if float(c) <= 2.0**53 or c.__class__ is not float else 2.0**54 for c in costs
    ]
    assert rest == [repr(rate), str(burst)] * 2


@given(
    st.integers(1, 2**53),
    st.floats(MIN_PERIOD, MAX_PERIOD),
    st.sampled_from(["epoch", "first", "sliding"]),
)
def test_a_window_round_trips(count: int, period: float, anchor: str) -> None:
    # The script reads the period with tonumber: a repr is the very double.
    policy = (
        SlidingWindow(count, period) if anchor == "sliding" else FixedWindow(count, period, anchor)
    )
    _, _, text, burst = argv([policy], 1, T).split(" ")
    letter = {"epoch": "w", "first": "f", "sliding": "s"}[anchor]
    assert (text[0], float(text[1:]), int(burst)) == (letter, period, count)


@given(
    st.booleans(),
    st.integers(0, 2**53),
    st.floats(-1e9, 1e9),
    st.floats(0, 1e9),
    st.sampled_from(
        [
            *(Limit(3, 10), Quota(4, "hour"), FixedWindow(5, 0.001), SlidingWindow(2**53, 60)),
            *(LOCKOUT, Concurrency(1000, lease=120)),
        ]
    ),
)
def test_reply_round_trips(
    allowed: bool, remaining: int, reset: float, retry: float, policy: Any
) -> None:
    # As bucket.lua formats it: %d below 2**53, else %.17g.
    rem = f"{remaining:d}" if remaining < 2**53 else f"{remaining:.17g}"
    reply = f"{int(allowed)} {rem} {reset:.17g} {retry:.17g}".encode()
    got = _wire.decode_result(reply, policy, "RedisStore")
    assert (got.allowed, got.remaining, got.reset_after, got.retry_after) == (
        allowed,
        remaining,
        reset,
        retry,
    )
    assert (got.limit, got.window, got.results) == (policy.burst, policy.window, ())
