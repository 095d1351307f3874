"""RedisStore and AsyncRedisStore against a real redis-server started for this module.

The conformance suite, the Lua script checked against ``limiter.core.bucket`` by
hypothesis (results and the stored state, exactly), the key scheme and expiry,
server time, one round trip per check, and 4 processes on one key.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import time
from decimal import Decimal
from fractions import Fraction
from typing import Any, Iterator, List, Optional

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers.redis_servers import RedisServer, unique_prefix
from helpers.redis_state import check_stored, check_stored_until, read_state
from helpers.step_strategies import LOCKOUTS, OPS, PER_LIMIT, RATES, move, op_cost
from limiter import Limit, ManualClock, MemoryStore, RateLimiter, StoreError
from limiter.backends._wire import SCRIPT_SHA
from limiter.backends.redis import AsyncRedisStore, RedisStore, hash_tag, redis_key
from limiter.core.bucket import step
from limiter.core.costs import Charge, Refund
from limiter.core.limits import CLOCK_TOLERANCE
from limiter.core.lockout import Lockout
from limiter.core.many import step_all
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing import T0
from limiter.testing._store_suite import StoreConformance

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def client(server: RedisServer) -> Iterator[redis.Redis]:
    c = server.client()
    yield c
    c.close()


class TestRedisStore(StoreConformance):
    @pytest.fixture(autouse=True)
    def _client(self, client: redis.Redis) -> None:
        self.client = client

    def make_store(self) -> RedisStore:
        return RedisStore(self.client, prefix=unique_prefix())


class TestRedisStoreLocalTime(StoreConformance):
    """``server_time=False``: ``now=None`` reads ``time.time()`` instead of ``TIME``."""

    @pytest.fixture(autouse=True)
    def _client(self, client: redis.Redis) -> None:
        self.client = client

    def make_store(self) -> RedisStore:
        return RedisStore(self.client, prefix=unique_prefix(), server_time=False)


class TestRedisStoreDecodedResponses(StoreConformance):
    """A client with ``decode_responses=True`` returns str, not bytes: same results."""

    @pytest.fixture(autouse=True)
    def _client(self, server: RedisServer) -> Iterator[None]:
        self.client = server.client(decode_responses=True)
        yield
        self.client.close()

    def make_store(self) -> RedisStore:
        return RedisStore(self.client, prefix=unique_prefix())


@pytest.mark.usefixtures("class_event_loop")
class TestAsyncRedisStore(StoreConformance):
    mode = "async"
    loop: asyncio.AbstractEventLoop

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def make_store(self) -> AsyncRedisStore:
        # A bounded pool that waits for a free connection, as an app server should
        # use: the conformance flood sends 1,000 checks at once.
        pool = redis.asyncio.BlockingConnectionPool(
            port=self.port, max_connections=50, timeout=60, socket_timeout=10
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        return AsyncRedisStore(client, prefix=unique_prefix())

    def close_store(self, store: AsyncRedisStore) -> None:
        self.run(store.client.aclose())


# -- the Lua script is limiter.core.bucket.step ---------------------------------------


def assert_same(got: Any, expected: Any) -> None:
    assert (got.allowed, got.limit, got.remaining) == (
        expected.allowed,
        expected.limit,
        expected.remaining,
    )
    assert got.reset_after == pytest.approx(expected.reset_after, abs=1e-6, rel=0)
    assert got.retry_after == pytest.approx(expected.retry_after, abs=1e-6, rel=0)
    assert got.window == expected.window


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rate=RATES,
    burst=st.integers(1, 30),
    other=st.tuples(RATES, st.integers(1, 30)),
    ops=OPS,
    switches=st.lists(st.sampled_from([False, False, False, True]), min_size=40, max_size=40),
)
def test_script_matches_step(
    client: redis.Redis, rate: float, burst: int, other: Any, ops: Any, switches: List[bool]
) -> None:
    # Now and then a step goes under another limit: a state written under a
    # larger one (or deep in debt) is read as at most one burst owed.
    store = RedisStore(client, prefix=unique_prefix())
    limits = (Limit(rate, burst), Limit(*other))
    rkey = redis_key("k", store.prefix)
    state = None
    now = T0
    for (dt, cost), switch in zip(ops, switches):
        limit = limits[switch]
        now = move(now, dt, [state])
        state, expected = step(state, now, limit, cost)
        since = time.monotonic()
        got = store.apply("k", limit, cost, now)
        assert got == expected  # every field, bit for bit
        assert got.results == ()
        # The stored state is bit-for-bit the one step computed (None: never written).
        state = check_stored(client, rkey, state, since)
    client.delete(rkey)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    limits=st.lists(st.tuples(RATES, st.integers(1, 20)), min_size=1, max_size=4),
    ops=OPS,
    per_limit=st.lists(PER_LIMIT, min_size=40, max_size=40),
)
def test_script_matches_step_all(
    client: redis.Redis, limits: Any, ops: Any, per_limit: List[Any]
) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    lims = [Limit(rate, burst) for rate, burst in limits]
    keys = [f"{{user}}:{i}" for i in range(len(lims))]
    rkeys = [redis_key(k, store.prefix) for k in keys]
    states: List[Optional[complex]] = [None] * len(lims)
    now = T0
    for i, ((dt, cost), costs) in enumerate(zip(ops, per_limit)):
        cost = op_cost(cost, costs, len(lims), i % 2 == 0)
        now = move(now, dt, states)
        states, expected = step_all(states, now, lims, cost)
        since = time.monotonic()
        got = store.apply_many(keys, lims, cost, now)
        assert got == expected  # every field, bit for bit (results, policy too)
        states = [check_stored(client, k, s, since) for k, s in zip(rkeys, states)]
    client.delete(*rkeys)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    limits=st.lists(st.tuples(RATES, st.integers(1, 5)), min_size=1, max_size=3),
    lockout=LOCKOUTS,
    ops=OPS,
    per_limit=st.lists(PER_LIMIT, min_size=40, max_size=40),
)
def test_script_matches_step_all_with_a_lockout(
    client: redis.Redis, limits: Any, lockout: Lockout, ops: Any, per_limit: List[Any]
) -> None:
    # Small bursts: denials (breaches) are frequent, lockouts begin and end,
    # clocks step back over runs and lockouts.
    store = RedisStore(client, prefix=unique_prefix())
    lims = [*(Limit(rate, burst) for rate, burst in limits), lockout]
    keys = [f"{{user}}:{i}" for i in range(len(lims))]
    rkeys = [redis_key(k, store.prefix) for k in keys]
    states: List[Optional[complex]] = [None] * len(lims)
    now = T0
    for i, ((dt, cost), costs) in enumerate(zip(ops, per_limit)):
        cost = op_cost(cost, costs, len(lims), i % 2 == 0)
        now = move(now, dt, states[:-1])
        states, expected = step_all(states, now, lims, cost)
        since = time.monotonic()
        got = store.apply_many(keys, lims, cost, now)
        assert got == expected  # every field, bit for bit (results, policy too)
        assert got.__class__ is expected.__class__
        assert [r.__class__ for r in got.results] == [r.__class__ for r in expected.results]
        event(f"locked out: {got.locked_out}")
        buckets = [check_stored(client, k, s, since) for k, s in zip(rkeys, states[:-1])]
        states = [*buckets, check_stored_until(client, rkeys[-1], states[-1], now, since)]
    client.delete(*rkeys)


def test_script_matches_step_up_to_2_53_tokens(client: redis.Redis) -> None:
    # remaining is formatted as %d below 2**53 and as %.17g at 2**53: both exact.
    # (A burst above 2**53 is a ValueError: tests/core/test_bucket.py.)
    store = RedisStore(client, prefix=unique_prefix())
    for limit in (Limit(1e9, 2**53), Limit(3.0, 2**53), Limit(0.5, 2**53 - 1), Limit(1, 2**53)):
        key = f"big{limit.burst}:{limit.rate}"
        state = None
        for dt, cost in (
            *((0.0, 0), (0.0, 1), (0.5, 12345), (0.0, 0), (-1.0, 10**18), (2.0, 1)),
            *((0.0, 2**53), (0.0, 2**53 + 1), (0.0, 10**400), (1e9, 0), (0.0, 2**53 - 1)),
            # Charges between 2**53 and 2**54 take their own amount (sent exactly);
            # from 2 * burst up, max_debt (2**54 stands for all above it).
            *((1e9, Charge(2**53 + 2)), (0.0, 0), (1e9, Charge(2**54 - 2)), (1e9, Charge(2**54))),
            *((1e9, Charge(2**54 + 4)), (0.0, Charge(10**400)), (0.0, Refund(2**53 + 2))),
            *((0.0, Refund(math.inf)), (1e9, Charge(3)), (0.0, Refund(2**54 + 4))),
        ):
            state, expected = step(state, T0 + dt, limit, cost)
            since = time.monotonic()
            got = store.apply(key, limit, cost, T0 + dt)
            assert got == expected  # every field, bit for bit
            assert 0 <= got.remaining <= limit.burst
            state = check_stored(client, redis_key(key, store.prefix), state, since)
        client.delete(redis_key(key, store.prefix))


def test_script_applies_a_late_reading_at_the_stored_update(client: redis.Redis) -> None:
    # Every branch of the script with a now behind updated_at, against step, bit for
    # bit: results and the stored state (None: nothing written since the last check).
    store = RedisStore(client, prefix=unique_prefix())
    rkey = redis_key("k", store.prefix)
    big, small = Limit(1, 10), Limit(1, 2)
    state = None
    for now, limit, cost, stored_at in (
        (T0, big, 10, T0),  # 10 s of debt at T0
        (T0 - 0.5, small, 1, T0),  # late, under a shrunk limit: cut to 4 s at T0, denied
        (T0 - CLOCK_TOLERANCE, small, 0, T0),  # exactly the tolerance behind: a peek
        (T0 + 2.5, small, 0.25, T0 + 2.5),  # admitted: 1.75 s of debt
        (T0 + 2.499, small, 0.25, T0 + 2.5),  # late: admitted at T0 + 2.5, not before
        (T0 + 2.499, small, 1, T0 + 2.5),  # late and denied: nothing written
        (T0 + 2.5 - CLOCK_TOLERANCE - 1e-6, small, 1, T0 + 1.5 - 1e-6),  # stepped back
        (T0 - 3600, small, 1, T0 - 3600),  # an hour back: re-anchored
        (T0 - 3599, small, 1, T0 - 3599),  # refilling from there
    ):
        state, expected = step(state, now, limit, cost)
        since = time.monotonic()
        assert store.apply("k", limit, cost, now) == expected  # every field, bit for bit
        state = check_stored(client, rkey, state, since)
        assert state is not None and state.imag == stored_at
    client.delete(rkey)

    # Several keys: each late reading is applied at its own key's last update.
    keys = ["{u}:a", "{u}:b"]
    limits = [Limit(10, 5), Limit(1, 5)]
    states: List[Optional[complex]] = [None, None]
    for now, keys_of, cost in (
        (T0, [0], 5),
        (T0 - 5, [1], 5),
        (T0 - 0.2, [0, 1], 1),  # behind a (denied there), 5 s after b (a peek)
        (T0 + 0.1, [0, 1], 1),
        (T0 + 0.3, [0, 1], 1),
        (T0 + 0.25, [0, 1], 1),  # late for both: admitted at T0 + 0.3
    ):
        ks = [keys[i] for i in keys_of]
        ls = [limits[i] for i in keys_of]
        new, expected = step_all([states[i] for i in keys_of], now, ls, cost)
        since = time.monotonic()
        assert store.apply_many(ks, ls, cost, now) == expected
        for i, s in zip(keys_of, new):
            states[i] = check_stored(client, redis_key(keys[i], store.prefix), s, since)
    assert [s.imag for s in states if s is not None] == [T0 + 0.3, T0 + 0.3]
    assert [round(s.real, 6) for s in states if s is not None] == [0.5, 2.8]
    client.delete(*(redis_key(k, store.prefix) for k in keys))


# -- keys --------------------------------------------------------------------------


def test_key_scheme() -> None:
    assert redis_key("10/s:20:1.2.3.4") == "limiter:{10/s:20:1.2.3.4}"
    assert redis_key("a}b%", "p:") == "p:{a%7Db%25}"
    assert redis_key("rl:{alice}:daily", "p:") == "p:{alice}rl:{alice}:daily"
    assert redis_key("{}", "p:") == "p:{{%7D}"
    assert hash_tag("x{a}y{b}") == "a"
    assert hash_tag("{}a") is None and hash_tag("}{") is None and hash_tag("{a") is None
    # One-to-one, including keys that look like escapes or like wrapped keys.
    keys = ["a", "{a}", "a}", "a%7D", "%", "%25", "{a}a", "", "}", "{", "{}", "{{a}}"]
    assert len({redis_key(k) for k in keys}) == len(keys)


def test_keys_of_a_tag_share_a_slot(client: redis.Redis) -> None:
    from redis.crc import key_slot

    slot = key_slot(redis_key("alice").encode())
    assert key_slot(redis_key("rl:{alice}:1/s").encode()) == slot
    assert key_slot(redis_key("rl:{alice}:100/day").encode()) == slot


def test_hostile_keys_stay_distinct(client: redis.Redis) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    limit = Limit(1, 1)
    keys = ["a", "{a}", "a}", "a%7D", "\ud800", "\n", "{\n}", "☃" * 3000, "x" * 10_000]
    for key in keys:
        assert store.apply(key, limit, 1, T0).allowed, key
    for key in keys:
        assert not store.apply(key, limit, 1, T0).allowed, key
    assert len(client.keys(store.prefix + "*")) == len(keys)


# -- expiry ------------------------------------------------------------------------


def test_key_expires_when_the_bucket_is_full_again(client: redis.Redis) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    rkey = redis_key("k", store.prefix)
    limit = Limit(1, 1000)

    def step_then_ttl(cost: float, now: float) -> tuple[int, int]:
        """The key's TTL (ms; -1: this step set none) and the ms the step took; keeps the key.

        A TTL runs in real time: it lost at most the time the step took, which
        may be long on a busy machine.  Made persistent, the key cannot expire
        before the next step, and a step that writes nothing leaves it at -1.
        """
        since = time.monotonic()
        store.apply("k", limit, cost, now)
        ttl, _ = client.pipeline().pttl(rkey).persist(rkey).execute()
        return ttl, math.ceil((time.monotonic() - since) * 1000) + 2

    ttl, took = step_then_ttl(300, T0)  # full again in 300 s
    assert 300_000 - took <= ttl <= 300_000
    assert step_then_ttl(0, T0 + 100)[0] == -1  # a peek writes nothing
    assert step_then_ttl(2000, T0 + 100)[0] == -1  # denied: nothing written
    ttl, took = step_then_ttl(100, T0 + 200)  # 100 s of debt left + 100 s
    assert 200_000 - took <= ttl <= 200_000
    ttl, took = step_then_ttl(2000, T0 - 100)  # clock back: re-anchored with the same debt
    assert 200_000 - took <= ttl <= 200_000
    assert read_state(client, rkey) == complex(200.0, T0 - 100)


def test_expired_key_is_a_full_bucket(client: redis.Redis) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    limit = Limit(1000, 2)  # full again 2 ms after a request
    assert store.apply("k", limit, 2, T0).allowed
    rkey = redis_key("k", store.prefix)
    assert client.pttl(rkey) > 2  # kept for ttl_ms's floor (the clock tolerance), not 2 ms
    deadline = time.monotonic() + 60  # generous: a busy machine
    while client.exists(rkey):  # the server expires it; nothing sweeps
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert store.apply("k", limit, 0, T0).remaining == 2


def test_huge_window_gets_a_bounded_ttl(client: redis.Redis) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    assert store.apply("k", Limit(1e-9, 10**6), 10**6, T0).allowed
    assert 10**15 - 60_000 < client.pttl(redis_key("k", store.prefix)) <= 10**15


def test_corrupt_state_is_a_store_error(client: redis.Redis) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    client.set(redis_key("k", store.prefix), "garbage")
    with pytest.raises(StoreError, match="corrupt"):
        store.apply("k", Limit(1, 1), 1, T0)
    client.hset(redis_key("w", store.prefix), "a", "b")
    with pytest.raises(StoreError, match="WRONGTYPE"):
        store.apply("w", Limit(1, 1), 1, T0)


# -- time --------------------------------------------------------------------------


def server_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def test_server_time_ignores_a_skewed_local_clock(client: redis.Redis) -> None:
    import time_machine

    server = RedisStore(client, prefix=unique_prefix())
    local = RedisStore(client, prefix=unique_prefix(), server_time=False)
    with time_machine.travel(1_000_000_000, tick=False):  # this host thinks it is 2001
        server.apply("k", Limit(1, 5), 1, None)
        local.apply("k", Limit(1, 5), 1, None)
    _, updated_at = client.get(redis_key("k", server.prefix)).split()
    assert abs(float(updated_at) - server_now(client)) < 600  # vs 2001: the server's time
    _, updated_at = client.get(redis_key("k", local.prefix)).split()
    assert float(updated_at) == 1_000_000_000


def test_injected_clock_is_passed_to_the_script(client: redis.Redis) -> None:
    clock = ManualClock(T0)
    limiter = RateLimiter("2/second", store=RedisStore(client, prefix=unique_prefix()), clock=clock)
    assert [limiter.allow("a") for _ in range(3)] == [True, True, False]
    clock.advance(0.5)
    assert [limiter.allow("a") for _ in range(2)] == [True, False]


def test_bad_arguments_never_reach_the_server(client: redis.Redis) -> None:
    store = RedisStore(client, prefix=unique_prefix())
    client.config_resetstat()
    for bad in (-1, float("nan"), Decimal("NaN"), -(10**400)):
        with pytest.raises(ValueError, match="cost must be a number of tokens >= 0, got"):
            store.apply("k", Limit(1, 1), bad, T0)  # type: ignore[arg-type]
    for wrong in ("1", None, True, b"1"):
        with pytest.raises(TypeError, match="cost must be a number of tokens, got"):
            store.apply("k", Limit(1, 1), wrong, T0)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="cost must be a number of tokens, got"):
            store.apply_many(["{k}a", "{k}b"], [Limit(1, 1)] * 2, wrong, T0)  # type: ignore
    with pytest.raises(ValueError, match="now"):
        store.apply("k", Limit(1, 1), 1, float("inf"))
    assert "cmdstat_evalsha" not in client.info("commandstats")


# -- one round trip ----------------------------------------------------------------


def test_one_round_trip_per_check_and_script_flush_is_invisible(server: RedisServer) -> None:
    # A client of its own, so the counts are exactly this test's commands.
    client = server.client()
    try:
        store = RedisStore(client, prefix=unique_prefix())
        limiter = RateLimiter(Limit(1, 100), store=store, clock=ManualClock(T0))
        limiter.allow("warm-up")
        client.config_resetstat()
        allowed = [limiter.allow("k") for _ in range(50)]
        client.script_flush()
        allowed += [limiter.allow("k") for _ in range(50)]
        assert allowed == [True] * 100
        assert not limiter.allow("k")  # nothing was lost across the flush
        store.apply_many(["{k}:a", "{k}:b"], [Limit(1, 5), Limit(2, 5)], 1, T0)
        stats = client.info("commandstats")
        calls = {name: stat["calls"] for name, stat in stats.items()}
        # 102 checks: 101 EVALSHA, and one EVAL after the flush's NOSCRIPT.
        assert calls.pop("cmdstat_evalsha") == 102
        assert calls.pop("cmdstat_eval") == 1
        assert calls.pop("cmdstat_script|flush") == 1
        assert calls.pop("cmdstat_config|resetstat", 1) == 1
        # Inside the script: one GET per key, one SET per charged key.
        assert calls.pop("cmdstat_get") == 103 and calls.pop("cmdstat_set") == 102
        assert calls == {}, "no other command on the hot path"
        assert client.script_exists(SCRIPT_SHA) == [True]
    finally:
        client.close()


# -- processes ---------------------------------------------------------------------


#: Each admits 100 at a frozen clock (T0): a bucket that refills nothing
#: meanwhile, and windows of an hour (T0 is no boundary of theirs).
HAMMERED = (
    Limit(0.001, 100),
    FixedWindow(100, 3600),
    FixedWindow(100, 3600, "first"),
    SlidingWindow(100, 3600),
)


def hammer(port: int, prefix: str, checks: int, start: Any) -> List[int]:
    """``checks`` checks of each of ``HAMMERED`` in turn, each on its key: the admitted."""
    store = RedisStore(redis.Redis(port=port, socket_timeout=30), prefix=prefix)
    keys = [f"hot{i}" for i in range(len(HAMMERED))]
    admitted = [0] * len(HAMMERED)
    start.wait()
    for _ in range(checks):
        for i, policy in enumerate(HAMMERED):
            admitted[i] += store.apply(keys[i], policy, 1, T0).allowed
    return admitted


def test_four_processes_admit_exactly_burst(server: RedisServer) -> None:
    ctx = multiprocessing.get_context("spawn")
    prefix = unique_prefix()
    with ctx.Manager() as manager:
        start = manager.Event()
        with ctx.Pool(4) as pool:
            pending = [
                pool.apply_async(hammer, (server.port, prefix, 500, start)) for _ in range(4)
            ]
            start.set()
            admitted = [p.get(300) for p in pending]  # generous: a busy machine
    assert [sum(column) for column in zip(*admitted)] == [100] * len(HAMMERED)


# -- construction ------------------------------------------------------------------


def test_repr_and_validation(client: redis.Redis) -> None:
    store = RedisStore(client, prefix="p:", fallback=MemoryStore())
    assert "prefix='p:'" in repr(store) and "MemoryStore" in repr(store)
    with pytest.raises(TypeError, match="client"):
        RedisStore(object())
    with pytest.raises(TypeError, match="prefix"):
        RedisStore(client, prefix=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="probe_after"):
        RedisStore(client, fallback=MemoryStore(), probe_after=0)
    with pytest.raises(ValueError, match="one key per limit"):
        store.apply_many(["a"], [Limit(1, 1), Limit(2, 2)], 1, T0)


# -- costs the script can always read (issue 9) ------------------------------------


class _Recording:
    """A client that records every script argument and passes the call on."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.args: List[bytes] = []

    def evalsha(self, sha: Any, numkeys: Any, *keys_and_args: Any) -> Any:
        self.args.append(keys_and_args[-1])
        return self.client.evalsha(sha, numkeys, *keys_and_args)

    def eval(self, script: str, numkeys: Any, *keys_and_args: Any) -> Any:
        self.args.append(keys_and_args[-1])
        return self.client.eval(script, numkeys, *keys_and_args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_any_cost_reaches_the_script_as_a_plain_finite_number(client: redis.Redis) -> None:
    # A 400-digit cost was a ValueError (the middleware then admitted the
    # request); "inf" is not a number the script should have to read.  Every
    # cost above 2**53, more than any burst, is sent as 2**54, denied alike.
    recording = _Recording(client)
    store = RedisStore(recording, prefix=unique_prefix())
    limit = Limit(10, 20)
    huge = (10**400, 10**5000, math.inf, Decimal("1e999"), Fraction(10**400, 3), 2**53 + 1)
    for cost in huge:
        result = store.apply("k", limit, cost, T0)  # type: ignore[arg-type]
        assert (result.allowed, result.remaining, result.retry_after) == (False, 20, math.inf)
        assert not store.apply_many(["{k}a", "{k}b"], [limit, limit], cost, T0).allowed  # type: ignore
    assert store.apply("k", limit, Decimal("2.5"), T0).remaining == 17  # type: ignore[arg-type]
    assert store.apply("k", limit, Fraction(1, 10**400), T0).remaining == 17  # type: ignore
    sent = [arg.split()[1] for arg in recording.args]  # "now cost rate burst ..."
    assert sent == [b"1.8014398509481984e+16"] * 2 * len(huge) + [b"2.5", b"5e-324"]
