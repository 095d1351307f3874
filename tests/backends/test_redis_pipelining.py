"""AsyncRedisStore's auto-pipelining (on by default) against a real redis-server.

Checks issued while one is in flight go out as one pipeline; these tests pin
what a caller relies on: its own result or its own ``StoreError``, exact
admitted counts, ``NOSCRIPT`` never seen, the fallback after a kill, and a
cancelled caller that breaks nothing.  Round trips are counted by the server
(``INFO stats`` ``total_reads_processed``, ``INFO commandstats``), not timed.
The clock is frozen (``now=T0``), so counts are exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, AsyncIterator, Callable, Coroutine, Dict, Iterator, List, Optional

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from helpers.redis_servers import RedisServer, unique_prefix
from limiter import Limit, ManualClock, MemoryStore, RateLimitResult, StoreError
from limiter.backends.redis import AsyncRedisStore, redis_key
from limiter.core.window import FixedWindow, SlidingWindow
from limiter.testing import T0

pytestmark = pytest.mark.redis

LIMIT = Limit(0.001, 5)  # with a frozen clock, exactly 5 per key pass
ROOMY = Limit(0.001, 100)  # room for every check of a burst, each charged its own cost
FIVE_OF_SEVEN = [True] * 5 + [False] * 2  # 7 checks of one key under LIMIT, in order


def async_client(server: RedisServer, timeout: float = 5.0, **kwargs: Any) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(
        host="127.0.0.1",
        port=server.port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=AsyncRetry(NoBackoff(), 0),
        **kwargs,
    )


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


@pytest.fixture
def sync(server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client of the test's own, to ask the server (INFO, SCRIPT FLUSH, CLIENT PAUSE)."""
    client = server.client()
    yield client
    client.close()


@contextlib.asynccontextmanager
async def opened(
    client: Any, warm_up: Optional[Limit] = None, **kwargs: Any
) -> AsyncIterator[AsyncRedisStore]:
    """An AsyncRedisStore on ``client`` (a fresh prefix unless given); the client closed after.

    ``warm_up``: one check first, so the connection is open and the script cached.
    """
    kwargs.setdefault("prefix", unique_prefix())
    try:
        store = AsyncRedisStore(client, **kwargs)
        if warm_up is not None:
            await store.aapply("warm-up", warm_up, 1, T0)
        yield store
    finally:
        await client.aclose()


async def same_checks(
    store: AsyncRedisStore,
    count: int,
    key: str = "k",
    limit: Limit = LIMIT,
    now: Optional[float] = T0,
) -> List[RateLimitResult]:
    """``count`` concurrent checks of ``key`` at cost 1: their results, in order."""
    return list(await asyncio.gather(*(store.aapply(key, limit, 1, now) for _ in range(count))))


async def allowed(store: AsyncRedisStore, now: Optional[float] = T0) -> List[bool]:
    """Which of 7 concurrent checks of "k" under LIMIT were allowed."""
    return [r.allowed for r in await same_checks(store, 7, now=now)]


def reads(sync: redis.Redis) -> int:
    """Reads the server has processed (one per batch of bytes it read), this INFO included."""
    return int(sync.info("stats")["total_reads_processed"])


def calls(sync: redis.Redis, command: str) -> int:
    stat = sync.info("commandstats").get(f"cmdstat_{command}")
    return int(stat["calls"]) if stat else 0


def blocked(sync: redis.Redis) -> int:
    return int(sync.info("clients")["blocked_clients"])


# CLIENT PAUSE WRITE holds every check at the server (INFO still answers), so a
# caller can be cancelled while its check is in flight.
def pause(sync: redis.Redis) -> None:
    sync.execute_command("CLIENT", "PAUSE", 3000, "WRITE")  # < the 5 s socket_timeout


def unpause(sync: redis.Redis) -> None:
    sync.execute_command("CLIENT", "UNPAUSE")


async def until(condition: Callable[[], bool]) -> None:
    """Let the event loop run until ``condition()`` (which may ask the server) holds.

    What the caller does next, without awaiting, happens before any batch is
    sent: the store sends nothing while the loop is not running.
    """
    deadline = time.monotonic() + 30  # generous: a busy machine
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0)


def test_on_by_default_off_with_a_keyword_and_bad_values_rejected(server: RedisServer) -> None:
    async def scenario() -> None:
        client = async_client(server)
        assert AsyncRedisStore(client).pipelining is True
        assert AsyncRedisStore(client, pipelining=False).pipelining is False
        with pytest.raises(TypeError, match="'yes'"):
            AsyncRedisStore(client, pipelining="yes")  # type: ignore[arg-type]
        # Off, a check is the client's own EVALSHA call: same answers.
        async with opened(client, pipelining=False) as plain:
            assert sum(await allowed(plain)) == 5  # in the order the connections got there
        # A single-connection client keeps the per-call path (it locks its connection).
        async with opened(async_client(server, single_connection_client=True)) as store:
            assert await allowed(store) == FIVE_OF_SEVEN

    run(scenario)


def blocking_pool_client(server: RedisServer) -> Any:
    pool = redis.asyncio.BlockingConnectionPool(
        host="127.0.0.1", port=server.port, max_connections=5, timeout=5, socket_timeout=5
    )
    return redis.asyncio.Redis(connection_pool=pool)


def valkey_client(server: RedisServer) -> Any:
    valkey = pytest.importorskip("valkey.asyncio")
    return valkey.Valkey(host="127.0.0.1", port=server.port, socket_timeout=5)


@pytest.mark.parametrize("make_client", [async_client, blocking_pool_client, valkey_client])
def test_a_lone_call_is_one_round_trip_and_a_burst_is_two(
    server: RedisServer, sync: redis.Redis, make_client: Callable[[RedisServer], Any]
) -> None:
    async def scenario() -> None:
        async with opened(make_client(server), warm_up=LIMIT) as store:
            evalsha, before = calls(sync, "evalsha"), reads(sync)
            assert (await store.aapply("k", LIMIT, 1, T0)).remaining == 4
            # One read for the check, one for the INFO that counts it.
            assert reads(sync) - before == 2
            assert calls(sync, "evalsha") == evalsha + 1

            # 21 checks in one tick: the first goes at once, the 20 others queue
            # behind it and go as one pipeline (one write) when it returns.  The
            # server reads that write once, or in a few pieces when its bytes
            # arrive split on a busy machine; 21 separate calls would be 21 reads.
            keys = [f"burst{i}" for i in range(21)]
            before = reads(sync)
            results = await asyncio.gather(*(store.aapply(k, LIMIT, 2, T0) for k in keys))
            assert 3 <= reads(sync) - before <= 5  # two writes and the INFO that counts them
            assert [r.remaining for r in results] == [3] * 21
            assert calls(sync, "evalsha") == evalsha + 22

    run(scenario)


def test_an_error_reply_fails_only_its_caller(server: RedisServer, sync: redis.Redis) -> None:
    prefix = unique_prefix()
    sync.set(redis_key("garbage", prefix), "not a bucket")  # the script's own check: corrupt
    sync.hset(redis_key("hash", prefix), "a", "b")  # GET on a hash: WRONGTYPE

    async def scenario() -> None:
        async with opened(async_client(server), prefix=prefix) as store:
            for bad, message in (("hash", "WRONGTYPE"), ("garbage", "corrupt")):
                for position in (0, 10, 21):  # the lone call, mid-batch, last in the batch
                    keys = [f"{bad}-{position}-{i}" for i in range(21)]
                    keys.insert(position, bad)
                    outcomes = await asyncio.gather(
                        *(store.aapply(k, LIMIT, 1 + i % 3, T0) for i, k in enumerate(keys)),
                        return_exceptions=True,
                    )
                    for i, (key, outcome) in enumerate(zip(keys, outcomes)):
                        if key == bad:
                            assert isinstance(outcome, StoreError), outcome
                            assert message in str(outcome)
                            assert isinstance(outcome.__cause__, redis.ResponseError)
                        else:
                            assert isinstance(outcome, RateLimitResult), (key, outcome)
                            assert outcome.allowed and outcome.remaining == 5 - (1 + i % 3)
            # The connection is in step: the next checks get their own replies.
            assert (await store.aapply("after", LIMIT, 3, T0)).remaining == 2

    run(scenario)


def test_200_concurrent_tasks_on_5_keys_admit_exactly_burst(server: RedisServer) -> None:
    async def scenario() -> None:
        limit = Limit(0.001, 30)
        async with opened(async_client(server)) as store:
            keys = [f"user{i % 5}" for i in range(200)]
            results = await asyncio.gather(*(store.aapply(k, limit, 1, T0) for k in keys))
            by_key: Dict[str, List[Any]] = {}
            for key, result in zip(keys, results):
                by_key.setdefault(key, []).append(result)
            for key, got in by_key.items():
                admitted = [r for r in got if r.allowed]
                assert len(admitted) == 30, key
                assert sorted(r.remaining for r in admitted) == list(range(30))
                assert all(r.retry_after > 0 for r in got if not r.allowed)
            # aapply_many in a burst too: all or nothing, per call, exactly.
            pair = [Limit(0.001, 4), Limit(0.001, 6)]
            many = await asyncio.gather(
                *(store.aapply_many(["{m}:a", "{m}:b"], pair, 1, T0) for _ in range(10))
            )
            assert [r.allowed for r in many] == [True] * 4 + [False] * 6

    run(scenario)


def test_windows_in_a_burst_admit_exactly_count(server: RedisServer) -> None:
    # 100 concurrent checks on each of 3 keys per window policy, and windows
    # beside a bucket in aapply_many: the hour's window (T0 is no boundary of it)
    # admits exactly its count, all or nothing.
    windows = [FixedWindow(7, 3600), FixedWindow(7, 3600, "first"), SlidingWindow(7, 3600)]

    async def scenario() -> None:
        async with opened(async_client(server)) as store:
            for window in windows:
                keys = [f"{window.label}:{i % 3}" for i in range(100)]
                results = await asyncio.gather(*(store.aapply(k, window, 1, T0) for k in keys))
                for key in set(keys):
                    got = [r for k, r in zip(keys, results) if k == key]
                    admitted = sorted(r.remaining for r in got if r.allowed)
                    assert admitted == list(range(7)), (window, key)
                    assert all(r.retry_after > 0 for r in got if not r.allowed)
            policies = [SlidingWindow(4, 60), Limit(0.001, 6)]
            many = await asyncio.gather(
                *(store.aapply_many(["{m}:w", "{m}:b"], policies, 1, T0) for _ in range(10))
            )
            assert [r.allowed for r in many] == [True] * 4 + [False] * 6
            peek = await store.aapply_many(["{m}:w", "{m}:b"], policies, 0, T0)
            assert [r.remaining for r in peek.results] == [0, 2]  # refusals took nothing

    run(scenario)


def test_script_flush_then_a_burst_of_50(server: RedisServer, sync: redis.Redis) -> None:
    def all_admitted_once_each(results: List[RateLimitResult]) -> None:
        assert all(r.allowed for r in results)
        assert sorted(r.remaining for r in results) == list(range(50, 100))

    async def scenario() -> None:
        async with opened(async_client(server), warm_up=ROOMY) as store:
            # Flushed before the burst: the first check meets NOSCRIPT alone.
            sync.script_flush()
            all_admitted_once_each(await same_checks(store, 50, limit=ROOMY))

            # Flushed while the first check is in flight, so every entry of the
            # batch queued behind it meets NOSCRIPT: each is sent again with EVAL.
            evals, evalsha = calls(sync, "eval"), calls(sync, "evalsha")

            async def flush_after_the_first() -> None:
                await until(lambda: calls(sync, "evalsha") == evalsha + 1)
                sync.script_flush()

            checks = [store.aapply("k2", ROOMY, 1, T0) for _ in range(50)]
            results = await asyncio.gather(checks[0], flush_after_the_first(), *checks[1:])
            del results[1]
            all_admitted_once_each(results)
            assert calls(sync, "eval") - evals == 49  # the whole batch, nothing charged twice
            assert (await store.aapply("k2", ROOMY, 50, T0)).remaining == 0

    run(scenario)


@pytest.mark.parametrize("with_fallback", [False, True])
def test_server_killed_mid_burst_then_recovery(
    own_server: RedisServer, with_fallback: bool
) -> None:
    server = own_server
    sync = server.client()
    probes = ManualClock()

    async def scenario() -> None:
        fallback = MemoryStore() if with_fallback else None
        async with opened(
            async_client(server, timeout=0.5),
            warm_up=LIMIT,
            prefix="app:",
            fallback=fallback,
            probe_clock=probes,
        ) as store:
            evalsha = calls(sync, "evalsha")

            async def kill_after_the_first() -> None:
                await until(lambda: calls(sync, "evalsha") == evalsha + 1)
                # Its reply is written before the server reads a later command.
                sync.ping()
                server.stop()  # SIGKILL, with the batch still queued behind the first check

            checks = [store.aapply("k", LIMIT, 1, T0) for _ in range(30)]
            outcomes = await asyncio.gather(
                checks[0], kill_after_the_first(), *checks[1:], return_exceptions=True
            )
            del outcomes[1]
            first, batch = outcomes[0], outcomes[1:]
            assert isinstance(first, RateLimitResult) and first.remaining == 4  # answered by Redis
            if with_fallback:
                # Each failed check got the fallback's answer: a fresh bucket of 5 there.
                assert all(isinstance(r, RateLimitResult) for r in batch), batch
                assert [r.allowed for r in batch] == [True] * 5 + [False] * 24  # type: ignore[union-attr]
                assert store.using_fallback
            else:
                assert all(isinstance(e, StoreError) for e in batch), batch
                assert len({id(e) for e in batch}) == 29  # each caller its own StoreError
                assert all(isinstance(e.__cause__, redis.ConnectionError) for e in batch)  # type: ignore[union-attr]

            server.start()  # same port, empty, no script cached
            probes.advance(0.5)  # a probe is due (with the fallback)
            deadline = time.monotonic() + 30  # generous: a busy machine
            while True:
                try:
                    first = await store.aapply("probe", LIMIT, 1, T0)
                except StoreError:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.01)
                    continue
                if not store.using_fallback:
                    break
                probes.advance(30)
            assert await allowed(store) == FIVE_OF_SEVEN  # Redis again, fresh

    try:
        run(scenario)
    finally:
        sync.close()


def test_cancelled_callers_break_nothing(server: RedisServer, sync: redis.Redis) -> None:
    async def scenario() -> None:
        async with opened(async_client(server), warm_up=ROOMY) as store:
            # Each key is charged its own cost, so a reply given to the wrong caller shows.
            def burst(tag: str) -> List[asyncio.Task[RateLimitResult]]:
                return [
                    asyncio.ensure_future(store.aapply(f"{tag}{i}", ROOMY, i + 1, T0))
                    for i in range(12)
                ]

            def check(tasks: List[asyncio.Task[RateLimitResult]], cancelled: List[int]) -> None:
                for i, task in enumerate(tasks):
                    if i in cancelled:
                        assert task.cancelled()
                    else:
                        assert task.result().remaining == 100 - (i + 1), i

            # A queued caller cancelled before its batch is sent, another while it is in flight.
            pause(sync)
            tasks = burst("a")
            await until(lambda: blocked(sync) == 1)  # the first check waits at the server
            tasks[3].cancel()
            unpause(sync)
            await until(tasks[0].done)
            pause(sync)
            others = [t for i, t in enumerate(tasks) if i not in (0, 3)]
            await until(lambda: blocked(sync) == 1 or all(t.done() for t in others))
            tasks[7].cancel()
            unpause(sync)
            await asyncio.gather(*tasks, return_exceptions=True)
            assert tasks[3].cancelled()
            check(tasks, [i for i in (3, 7) if tasks[i].cancelled()])

            # The lone call cancelled mid-read: its connection is dropped, the
            # calls queued behind it still get their own replies.
            pause(sync)
            tasks = burst("b")
            await until(lambda: blocked(sync) == 1)
            # Python < 3.12's wait_for (in redis-py's send) ignores a cancel that
            # lands as the write completes: let the caller get to its read first.
            for _ in range(3):
                await asyncio.sleep(0)
            tasks[0].cancel()
            await until(tasks[0].done)
            unpause(sync)
            await asyncio.gather(*tasks, return_exceptions=True)
            check(tasks, [0])

            # And the next batches are in step.
            tasks = burst("c")
            await asyncio.gather(*tasks)
            check(tasks, [])
            assert (await store.aapply("a1", ROOMY, 1, T0)).remaining == 97

    run(scenario)


def test_decoded_replies_and_server_time(server: RedisServer) -> None:
    async def scenario() -> None:
        async with opened(async_client(server, decode_responses=True)) as store:
            assert await allowed(store, now=None) == FIVE_OF_SEVEN

    run(scenario)


def test_a_caller_cancelled_before_its_batch_is_sent_is_not_charged(
    server: RedisServer, sync: redis.Redis
) -> None:
    """As without pipelining: a check cancelled before it was written charges nothing."""

    async def scenario() -> None:
        async with opened(async_client(server), warm_up=ROOMY) as store:
            pause(sync)
            try:
                lone = asyncio.ensure_future(store.aapply("lone", ROOMY, 1, T0))
                await until(lambda: blocked(sync) == 1)  # in flight, held at the server
                queued = [
                    asyncio.ensure_future(store.aapply(f"q{i}", ROOMY, 10, T0)) for i in range(3)
                ]
                await until(lambda: len(store._pipeline._state.queue) == 3)  # behind the lone call
                queued[1].cancel()  # e.g. asyncio.wait_for gave up on it
            finally:
                unpause(sync)
            await asyncio.gather(lone, *queued, return_exceptions=True)
            assert queued[1].cancelled()
            assert [queued[i].result().remaining for i in (0, 2)] == [90, 90]
            # A peek: q1's check never reached the server.
            assert (await store.aapply("q1", ROOMY, 0, T0)).remaining == 100

    run(scenario)


class _TracedAsyncRedis(redis.asyncio.Redis):
    """A tracer's subclass: it must see every check."""

    seen: List[Any]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.seen.append(args)
        return await super().execute_command(*args, **options)


def _wrapped_patch(seen: List[Any]) -> Any:
    import functools

    original = redis.asyncio.Redis.execute_command

    @functools.wraps(original)  # as wrapt and OpenTelemetry do: it has __wrapped__
    async def traced(self: Any, *args: Any, **options: Any) -> Any:
        seen.append(args)
        return await original(self, *args, **options)

    return traced


def _plain_patch(seen: List[Any]) -> Any:
    original = redis.asyncio.Redis.execute_command

    async def traced(self: Any, *args: Any, **options: Any) -> Any:  # as sentry-sdk does
        seen.append(args)
        return await original(self, *args, **options)

    return traced


@pytest.mark.parametrize("how", ["subclass", "wrapped", "plain", "instance"])
def test_instrumented_clients_keep_the_per_call_path(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """As RedisStore's fast path: a tracer wrapping execute_command sees every check."""
    seen: List[Any] = []

    async def scenario() -> None:
        if how == "subclass":
            client: Any = _TracedAsyncRedis(host="127.0.0.1", port=server.port, socket_timeout=5)
            client.seen = seen
        else:
            if how in ("wrapped", "plain"):
                patch = _wrapped_patch if how == "wrapped" else _plain_patch
                monkeypatch.setattr(redis.asyncio.Redis, "execute_command", patch(seen))
            client = async_client(server)
            if how == "instance":
                original = client.execute_command

                async def traced(*args: Any, **options: Any) -> Any:
                    seen.append(args)
                    return await original(*args, **options)

                client.execute_command = traced
        async with opened(client) as store:
            assert store._pipeline is None
            assert sum(await allowed(store)) == 5
            assert sum(1 for args in seen if args and args[0] == "EVALSHA") == 7

    run(scenario)


def test_a_plain_subclass_still_pipelines(server: RedisServer) -> None:
    class Quiet(redis.asyncio.Redis):
        pass

    async def scenario() -> None:
        async with opened(Quiet(host="127.0.0.1", port=server.port, socket_timeout=5)) as store:
            assert store._pipeline is not None
            assert await allowed(store) == FIVE_OF_SEVEN

    run(scenario)
