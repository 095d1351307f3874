"""Section ``redis``: round trips and latency against a PING, async throughput, several
limits, and a flood of denied requests.

The server is this run's one Redis (``bench/redisenv.py``: ``REDIS_URL``, else a
throwaway ``redis-server``); every key is under a ``bench:`` prefix that is
deleted afterwards.  Every client, ours and the peers', is built from the same
URL with the same settings (``redisenv.CLIENT_OPTIONS``: timeouts, RESP
version, pool size).

* Sequential: one ``check`` on a hot key against one ``PING`` on the same
  connection; limits' fixed window ``hit`` and pyrate-limiter's Redis token
  bucket do the same.  Round trips per operation are counted at the socket
  (``send_packed_command`` calls), not inferred.
* Async: 64 tasks on one event loop, and 1 task, each checking the hot key in
  a loop, against the same number of tasks sending un-pipelined PINGs; ops/s.
  ``AsyncRedisStore`` runs with its defaults and, when the keyword exists,
  with ``pipelining=False``.
* Window policies (issue 24): ``check`` under ``FixedWindow`` (both anchors)
  and ``SlidingWindow`` beside limits' fixed window and sliding-window
  counter on the same server, when ``RedisStore`` takes window policies (a
  store that refuses one with ``ValueError`` skips its row, with a note).
* Several limits per request: ``RedisStore.apply_many`` with 1, 3 and 5
  limits; round trips stay at one.
* Deny flood: one client hammering a denied key, checks/s with and without
  ``DenyCache``, and the EVALSHA calls Redis saw (``INFO commandstats``).
* Redis Cluster (issue 27): 64 tasks on one asyncio Cluster client, each
  checking its own key (the 64 keys spread over the masters): ``acheck()``
  auto-pipelined per node, with ``pipelining=False``, and limits.aio's fixed
  window on the same cluster; ops/s.  The cluster is ``REDIS_CLUSTER_URL``
  (``redis://host:port`` of one node), else a throwaway one of 3 masters on
  loopback (``redis-server`` and ``redis-cli`` on PATH).  Alone:
  ``python -m bench.redis_bench``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import math
import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import redisenv
from .common import Measure, Progress, Settings, Unavailable, interleave, new_section, ratios
from .common import summary as _summary
from .peers import HIGH, window_policy

PREFIX = f"bench:{os.getpid()}:"
TASKS = 64

OURS_ASYNC = "limiter acheck()"
OURS_ASYNC_UNPIPELINED = "limiter acheck(), pipelining=False"
LIMITS_ASYNC = "limits fixed window hit() (limits.aio)"
PYRATE_ASYNC = "pyrate-limiter try_acquire_async()"
LIMITS_FIXED = "limits fixed window hit()"
LIMITS_SLIDING = "limits sliding window counter hit()"

#: Our window rows, sequential: row -> (``peers.window_policy`` kind, limits' matching row).
WINDOW_ROWS: Dict[str, Tuple[str, str]] = {
    "limiter check(), FixedWindow": ("fixed", LIMITS_FIXED),
    'limiter check(), FixedWindow anchor="first"': ("fixed-first", LIMITS_FIXED),
    "limiter check(), SlidingWindow": ("sliding", LIMITS_SLIDING),
}


class _Timer:
    """The one stopwatch of this module: ``with _Timer() as t: ...``, then ``t.seconds``.

    A ``with`` block, so that it times an ``await`` as well as a loop of calls.
    """

    seconds = 0.0

    def __enter__(self) -> _Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start


def _us_per_call(op: Callable[[], Any], n: int) -> Callable[[], float]:
    """A case for ``interleave``: ``n`` sequential calls of ``op``, microseconds per call."""

    def case() -> float:
        with _Timer() as timer:
            for _ in range(n):
                op()
        return timer.seconds / n * 1e6

    return case


def _counting_client() -> Any:
    import redis

    class CountingConnection(redis.Connection):  # type: ignore[misc]
        sends = 0

        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            CountingConnection.sends += 1
            super().send_packed_command(command, check_health)

    client = redisenv.sync_client(CountingConnection)
    client.counter = CountingConnection  # type: ignore[attr-defined]
    return client


def _sync_ops() -> Tuple[Dict[str, Callable[[], Any]], Dict[str, Any], Dict[str, str]]:
    """name -> one operation, each on its own counting client; name -> its counter; and
    the window rows the store refused -> why (``_window_ops``)."""
    ops: Dict[str, Callable[[], Any]] = {}
    counters: Dict[str, Any] = {}
    ping_client = _counting_client()
    ops["PING"] = ping_client.ping
    counters["PING"] = ping_client.counter
    from limiter import Limit, RateLimiter

    try:
        from limiter.backends.redis import RedisStore
    except ImportError as exc:
        raise Unavailable(f"limiter.backends.redis not available in this tree ({exc})") from None
    client = _counting_client()
    store = RedisStore(client, prefix=PREFIX)
    limiter = RateLimiter(HIGH, HIGH, store=store)
    check = limiter.check
    ops["limiter check()"] = lambda: check("hot")
    counters["limiter check()"] = client.counter
    refused = _window_ops(ops, counters)
    for n in (3, 5):
        keys = [f"multi:{i}" for i in range(n)]
        lims = [Limit(HIGH / (i + 1), HIGH) for i in range(n)]
        many = _counting_client()
        mstore = RedisStore(many, prefix=PREFIX)
        ops[f"limiter apply_many() x{n}"] = lambda mstore=mstore, keys=keys, lims=lims: (
            mstore.apply_many(keys, lims, 1, None)
        )
        counters[f"limiter apply_many() x{n}"] = many.counter
    wanted = [("FixedWindowRateLimiter", LIMITS_FIXED)]
    if any(ours in ops for ours, (kind, _) in WINDOW_ROWS.items() if kind == "sliding"):
        wanted.append(("SlidingWindowCounterRateLimiter", LIMITS_SLIDING))
    for strategy, name in wanted:
        with contextlib.suppress(ImportError):  # limits is optional
            ops[name], counters[name] = _limits_op(strategy)
    try:
        from pyrate_limiter import (
            Duration,
            Limiter,
            Rate,
            RedisStateStore,
            StateBucket,
            TokenBucket,
        )

        pclient = _counting_client()
        bucket = StateBucket(
            [Rate(HIGH, Duration.SECOND)],
            algorithm=TokenBucket(),
            store=RedisStateStore(pclient, PREFIX + "pyrate-hot"),
        )
        acquire = Limiter(bucket).try_acquire
        ops["pyrate-limiter try_acquire()"] = lambda: acquire("hot", 1, False)
        counters["pyrate-limiter try_acquire()"] = pclient.counter
    except ImportError:
        pass
    return ops, counters, refused


def _window_ops(ops: Dict[str, Callable[[], Any]], counters: Dict[str, Any]) -> Dict[str, str]:
    """Add a ``check`` op per ``WINDOW_ROWS`` row; returns row -> why not, for the refused ones.

    A store that does not take window policies (``ValueError``, at
    construction or at the first check) skips the row: nothing half-measured.
    """
    from limiter import RateLimiter
    from limiter.backends.redis import RedisStore

    refused: Dict[str, str] = {}
    for name, (kind, _) in WINDOW_ROWS.items():
        client = _counting_client()
        try:
            check = RateLimiter(window_policy(kind), store=RedisStore(client, prefix=PREFIX)).check
            check(f"window-{kind}")  # the script's verdict on the policy, before timing it
        except ValueError as exc:
            refused[name] = f"ValueError: {exc}"
            continue
        ops[name] = lambda check=check, key=f"window-{kind}": check(key)
        counters[name] = client.counter
    return refused


def _limits_op(strategy: str) -> Tuple[Callable[[], Any], Any]:
    """limits' ``strategy`` on Redis at ``HIGH``/s on a hot key: (op, its socket counter)."""
    from limits import RateLimitItemPerSecond, storage, strategies

    counter = _counting_client().counter
    lstorage = storage.RedisStorage(redisenv.url(), connection_pool=redisenv.sync_pool(counter))
    hit = getattr(strategies, strategy)(lstorage).hit
    item = RateLimitItemPerSecond(HIGH)
    key = f"{PREFIX}limits-{strategy}"
    return (lambda: hit(item, key)), counter


def _round_trips(op: Callable[[], Any], counter: Any) -> float:
    before = counter.sends
    for _ in range(20):
        op()
    return (counter.sends - before) / 20


def pipelining_keyword() -> Optional[str]:
    """None when ``AsyncRedisStore`` takes ``pipelining=``, else why the row is not measured."""
    try:
        from limiter.backends.redis import AsyncRedisStore
    except ImportError as exc:
        return f"limiter.backends.redis not available ({exc})"
    if "pipelining" not in inspect.signature(AsyncRedisStore.__init__).parameters:
        return "AsyncRedisStore has no pipelining= keyword in this tree"
    return None


async def _async_case(name: str, n: int, tasks: int) -> float:
    """ops/s of ``tasks`` tasks sharing one client, ``n`` operations in all."""
    per_task = max(1, n // tasks)
    client = redisenv.async_client()
    op: Callable[[], Any]
    closers: List[Any] = [client]
    if name == "PING":
        op = client.ping
    elif name in (OURS_ASYNC, OURS_ASYNC_UNPIPELINED):
        from limiter import RateLimiter
        from limiter.backends.redis import AsyncRedisStore

        options = {"pipelining": False} if name == OURS_ASYNC_UNPIPELINED else {}
        store = AsyncRedisStore(client, prefix=PREFIX, **options)
        acheck = RateLimiter(HIGH, HIGH, store=store).acheck

        def op() -> Any:
            return acheck("hot")

    elif name == LIMITS_ASYNC:
        from limits import RateLimitItemPerSecond
        from limits.aio import storage, strategies

        pool = redisenv.async_pool()
        lstorage = storage.RedisStorage(
            "async+" + redisenv.url(), implementation="redispy", connection_pool=pool
        )
        closers.append(pool)
        hit = strategies.FixedWindowRateLimiter(lstorage).hit
        item = RateLimitItemPerSecond(HIGH)

        def op() -> Any:
            return hit(item, PREFIX + "limits-hot")

    else:
        from pyrate_limiter import (
            Duration,
            Limiter,
            Rate,
            RedisStateStore,
            StateBucket,
            TokenBucket,
        )

        bucket = StateBucket(
            [Rate(HIGH, Duration.SECOND)],
            algorithm=TokenBucket(),
            store=RedisStateStore(client, PREFIX + "pyrate-ahot"),
        )
        limiter = Limiter(bucket)

        def op() -> Any:
            return limiter.try_acquire_async("hot", 1, False)

    async def worker() -> None:
        for _ in range(per_task):
            await op()

    await op()  # warm-up: scripts loaded, connection open
    await asyncio.gather(*(op() for _ in range(min(tasks, 8))))  # a few connections open
    with _Timer() as timer:
        await asyncio.gather(*(worker() for _ in range(tasks)))
    for c in closers:
        close = getattr(c, "aclose", None) or c.disconnect
        await close()
    return per_task * tasks / timer.seconds


def run(settings: Settings, progress: Progress) -> Dict[str, Any]:
    try:
        import redis  # noqa: F401
    except ImportError:
        raise Unavailable("redis-py is not installed") from None
    url = redisenv.url()
    section = new_section("redis")
    if not settings.with_peers:
        section["notes"].append("peers skipped (--no-peers)")
    ops, counters, refused = _sync_ops()
    for name, why in refused.items():
        note = f"{name}: not measured, RedisStore refuses the policy in this tree ({why})"
        section["notes"].append(note)
        progress.write(f"redis: {note}")
    if not settings.with_peers:
        ops = {k: v for k, v in ops.items() if k == "PING" or k.startswith("limiter")}
    n = settings.scale(3_000, 300, 50)
    rounds = settings.rounds if not settings.tiny else 1
    trips: Dict[str, float] = {}
    for name, op in ops.items():
        op()  # script load, connection
        trips[name] = _round_trips(op, counters[name])

    samples = interleave(
        {k: _us_per_call(v, n) for k, v in ops.items()}, rounds, progress, "redis sync"
    )
    notes = {name: f"{trips.get(name, float('nan')):g} round trips per op" for name in samples}
    _add_measures(section, samples, "redis/sync", "us/op", "sequential, one connection", notes)
    vs_ping = {
        name: _summary(ratios(values, samples["PING"]))
        for name, values in samples.items()
        if name != "PING"
    }
    limits_hit = samples.get(LIMITS_FIXED)
    vs_limits = {
        name: _summary(ratios(values, limits_hit))
        for name, values in samples.items()
        if limits_hit and name.startswith("limiter")
    }
    no_pipelining = pipelining_keyword()
    if no_pipelining is not None:
        section["notes"].append(f"{OURS_ASYNC_UNPIPELINED}: not measured, {no_pipelining}")
    async_data: Dict[str, Any] = {}
    for tasks in (TASKS, 1):
        anames = ["PING", OURS_ASYNC]
        if no_pipelining is None:
            anames.append(OURS_ASYNC_UNPIPELINED)
        if settings.with_peers:
            anames.append(LIMITS_ASYNC)
            if tasks > 1 and not settings.quick:  # the slowest peer: full runs only
                anames.append(PYRATE_ASYNC)
        an = settings.scale(20_000, 1_500, 128) if tasks > 1 else settings.scale(3_000, 200, 32)

        def acase(name: str, an: int = an, tasks: int = tasks) -> Callable[[], float]:
            return lambda: asyncio.run(_async_case(name, an, tasks))

        errors: Dict[str, str] = {}
        asamples = interleave(
            {name: acase(name) for name in anames},
            rounds,
            progress,
            f"redis async x{tasks}",
            lambda name, exc, errors=errors: errors.update({name: repr(exc)}),
        )
        group = f"asyncio, {tasks} task{'s' if tasks > 1 else ''}"
        _add_measures(section, asamples, f"redis/async{tasks}", "ops/s", group, errors)
        # ratios of throughputs: > 1 means more ops/s than the other row
        async_data[str(tasks)] = {
            other: {
                name: _summary(ratios(values, asamples[other]))
                for name, values in asamples.items()
                if name != other and values and asamples.get(other)
            }
            for other in ("PING", LIMITS_ASYNC, OURS_ASYNC_UNPIPELINED)
            if asamples.get(other)
        }
    # Each window row against limits' matching strategy: a time ratio, < 1 is faster.
    vs_strategy = {
        name: _summary(ratios(samples[name], samples[peer]))
        for name, (_, peer) in WINDOW_ROWS.items()
        if samples.get(name) and samples.get(peer)
    }
    section["data"] = {
        "url": url,
        "client_options": redisenv.CLIENT_OPTIONS,
        "round_trips": trips,
        "vs_ping": vs_ping,
        "vs_limits": vs_limits,
        "windows": {"vs_limits_strategy": vs_strategy, "refused": refused},
        "async": async_data,
    }
    try:
        if not settings.quick:
            section["data"]["breakdown"] = _breakdown(n, rounds, progress)
    except Exception as exc:  # internals moved: the breakdown is a diagnostic only
        section["notes"].append(f"breakdown not measured: {exc!r}")
    try:
        if settings.tiny:  # the smoke tests: three more servers and a cluster to join
            raise Unavailable("not run with tiny settings")
        section["data"]["cluster"] = cluster_rows(settings, rounds, progress, section)
    except Unavailable as exc:
        section["data"]["cluster"] = {"error": str(exc)}
    try:
        flood_rounds = 1 if settings.quick else min(rounds, 3)
        section["data"]["deny_flood"] = deny_flood(settings, flood_rounds, progress)
    except Unavailable as exc:
        section["data"]["deny_flood"] = {"error": str(exc)}
    _cleanup()
    return section


def _deny_cache() -> Any:
    try:
        from limiter import DenyCache  # type: ignore[attr-defined]

        return DenyCache
    except ImportError:
        pass
    try:
        from limiter.backends.denycache import DenyCache  # type: ignore[import-not-found]

        return DenyCache
    except ImportError as exc:
        raise Unavailable(f"DenyCache is not in this tree ({exc})") from None


def eval_calls(client: Any) -> int:
    """EVALSHA + EVAL calls the server has counted so far (``INFO commandstats``)."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{cmd}", {}).get("calls", 0)) for cmd in ("evalsha", "eval"))


#: The deny flood's rows: name -> DenyCache keywords (None: the bare RedisStore).
FLOOD_CASES: Dict[str, Optional[Dict[str, Any]]] = {
    "RedisStore": None,
    "DenyCache(RedisStore) (defaults)": {},
    "DenyCache(RedisStore, max_stale=None)": {"max_stale": None},
}


def deny_flood(settings: Settings, rounds: int, progress: Progress) -> Dict[str, Any]:
    """One client hammering a denied key for a while: checks/s, and the calls Redis saw.

    The limit is one token per ``window`` seconds, burst 1: the first check is
    admitted (untimed), later ones are denied with ``retry_after`` up to
    ``window``, and one is admitted again each window.  Each round hammers a
    fresh key for 2.5 windows; Redis's EVALSHA count is read before and after
    (``INFO commandstats``), and the calls that answered a denial (all calls
    less the admitted checks, which only Redis can admit) are divided by the
    windows the flood started (``ceil(elapsed / window)``).
    """
    deny_cache = _deny_cache()
    from limiter import Limit, RateLimiter
    from limiter.backends.redis import RedisStore

    window = settings.scale(2.0, 0.25, 0.05)
    # Two and a half windows: the flood ends mid-window, away from a refill, so
    # every row admits the same two checks.
    seconds = 2.5 * window
    limit = Limit(1 / window, 1)
    client = redisenv.sync_client()
    counter = iter(range(10**9))
    per_window: Dict[str, List[float]] = {name: [] for name in FLOOD_CASES}
    admitted_per_window: Dict[str, List[float]] = {name: [] for name in FLOOD_CASES}
    answers: Dict[str, Any] = {}

    def case(name: str, options: Optional[Dict[str, Any]]) -> Callable[[], float]:
        def go() -> float:
            store: Any = RedisStore(client, prefix=PREFIX)
            if options is not None:
                store = deny_cache(store, max_keys=10_000, **options)
            check = RateLimiter(limit, store=store).check
            key = f"flood:{next(counter)}"
            first = check(key)
            denied = check(key)  # the answer every row must give alike
            n = admitted = 0
            before = eval_calls(client)
            perf = time.perf_counter
            start = perf()
            while perf() - start < seconds:
                for _ in range(256):
                    last = check(key)
                    admitted += last.allowed
                n += 256
            elapsed = perf() - start
            denials = eval_calls(client) - before - admitted
            windows = math.ceil(elapsed / window)
            per_window[name].append(denials / windows)
            admitted_per_window[name].append(admitted / windows)
            answers[name] = [first.allowed, denied.allowed, denied.remaining, denied.limit]
            return n / elapsed

        return go

    samples = interleave(
        {name: case(name, options) for name, options in FLOOD_CASES.items()},
        rounds,
        progress,
        "redis deny flood",
    )
    return {
        "seconds": seconds,
        "window": window,
        "limit": f"1 token per {window:g} s, burst 1",
        "checks_per_s": {k: _summary(v) for k, v in samples.items()},
        "speedup": {
            name: _summary(ratios(samples[name], samples["RedisStore"]))
            for name in FLOOD_CASES
            if name != "RedisStore"
        },
        "calls_per_window": {k: _summary(v) for k, v in per_window.items()},
        "admitted_per_window": {k: _summary(v) for k, v in admitted_per_window.items()},
        "same_answers": len({tuple(v) for v in answers.values()}) == 1,
        "answers": answers,
    }


def _breakdown(n: int, rounds: int, progress: Progress) -> Dict[str, float]:
    """us per call: PING, a trivial EVALSHA, our script by raw EVALSHA, store.apply, check."""
    from limiter import Limit, RateLimiter
    from limiter.backends.redis import SCRIPT, RedisStore

    client = redisenv.sync_client()
    store = RedisStore(client, prefix=PREFIX)
    limit = Limit(HIGH, HIGH)
    limiter = RateLimiter(limit, store=store)
    trivial = client.script_load("return 1")
    sha = client.script_load(SCRIPT)
    rkey = store._key(limiter.storage_key("hot"))
    args = store._args((limit,), 1, None)
    ops: Dict[str, Callable[[], Any]] = {
        "PING": client.ping,
        "EVALSHA of `return 1`": lambda: client.evalsha(trivial, 0),
        "EVALSHA of the check script, ARGV prepared": lambda: client.evalsha(sha, 1, rkey, *args),
        "RedisStore.apply()": lambda: store.apply(limiter.storage_key("hot"), limit, 1, None),
        "RateLimiter.check()": lambda: limiter.check("hot"),
    }
    for op in ops.values():
        op()

    samples = interleave(
        {k: _us_per_call(v, n) for k, v in ops.items()}, rounds, progress, "redis profile"
    )
    return {k: sorted(v)[len(v) // 2] for k, v in samples.items() if v}


def _add_measures(
    section: Dict[str, Any],
    samples: Dict[str, List[float]],
    prefix: str,
    unit: str,
    group: str,
    notes: Dict[str, str],
) -> None:
    """A measure per row of ``samples`` (PING: redis-py's), noted ``notes[name]`` if any."""
    for name, values in samples.items():
        section["measures"].append(
            Measure(
                id=f"{prefix}/{name}",
                label=name,
                library="redis" if name == "PING" else _lib(name),
                unit=unit,
                samples=values,
                group=group,
                note=notes.get(name, ""),
            ).as_dict()
        )


def _lib(name: str) -> str:
    if name.startswith("limiter"):
        return "tokenlimiter"
    return name.split()[0]


def _cleanup() -> None:
    client = redisenv.sync_client()
    keys = list(client.scan_iter(match=PREFIX + "*", count=1000))
    keys += list(client.scan_iter(match="*" + PREFIX + "*", count=1000))
    if keys:
        client.delete(*set(keys))


# Redis Cluster rows (issue 27).
CLUSTER_ROWS = (OURS_ASYNC, OURS_ASYNC_UNPIPELINED, LIMITS_ASYNC)


class _ThrowawayCluster:
    """Three redis-server masters on loopback, joined by ``redis-cli --cluster create``."""

    def __init__(self) -> None:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            raise Unavailable("REDIS_CLUSTER_URL is not set and redis-server/redis-cli not on PATH")
        self.tmp = tempfile.mkdtemp(prefix="bench-cluster-")
        self.procs: List[Any] = []
        ports = []
        while len(ports) < 3:  # the bus port (+10000) must be free too
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port < 55535 and port not in ports:
                ports.append(port)
        try:
            for port in ports:
                folder = os.path.join(self.tmp, str(port))
                os.mkdir(folder)
                self.procs.append(subprocess.Popen(
                    [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", folder, "--cluster-enabled", "yes",
                     "--logfile", os.path.join(folder, "redis.log")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))  # fmt: skip
            self._wait(ports)
            joined = subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                 "--cluster-replicas", "0", "--cluster-yes"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
            )  # fmt: skip
            if joined.returncode:
                stderr = joined.stderr.decode(errors="replace").strip()
                raise Unavailable(f"redis-cli --cluster create failed: {stderr[-300:]}")
            self._wait(ports, state=True)
        except BaseException:
            self.close()
            raise
        self.url = f"redis://127.0.0.1:{ports[0]}"

    def _wait(self, ports: List[int], state: bool = False) -> None:
        import redis

        deadline = time.monotonic() + 30
        for port in ports:
            client = redis.Redis(port=port, socket_timeout=1)
            while True:
                try:
                    if not state or client.cluster("info").get("cluster_state") == "ok":
                        break
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise Unavailable("the throwaway Redis cluster did not come up")
                time.sleep(0.05)
            client.close()

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)


async def _cluster_case(url: str, name: str, n: int, tasks: int) -> float:
    """ops/s of ``tasks`` tasks on one Cluster client, each checking its own key."""
    from redis.asyncio.cluster import RedisCluster

    options = {k: v for k, v in redisenv.CLIENT_OPTIONS.items() if k != "max_connections"}
    per_task = max(1, n // tasks)
    closer: Any
    if name == LIMITS_ASYNC:
        from limits import RateLimitItemPerSecond
        from limits.aio import storage, strategies

        lstorage = storage.RedisClusterStorage(
            "async+redis+cluster://" + url.split("://", 1)[1], implementation="redispy", **options
        )
        hit = strategies.FixedWindowRateLimiter(lstorage).hit
        item = RateLimitItemPerSecond(HIGH)
        closer = lstorage.bridge.storage

        def op(t: int) -> Any:
            return hit(item, f"{PREFIX}limits-{t}")

    else:
        from limiter import RateLimiter
        from limiter.backends.redis import AsyncRedisStore

        closer = RedisCluster.from_url(url, **options)
        await closer.initialize()
        pipelining = {"pipelining": False} if name == OURS_ASYNC_UNPIPELINED else {}
        store = AsyncRedisStore(closer, prefix=PREFIX, **pipelining)
        acheck = RateLimiter(HIGH, HIGH, store=store).acheck

        def op(t: int) -> Any:
            return acheck(f"hot{t}")

    async def worker(t: int) -> None:
        for _ in range(per_task):
            await op(t)

    await asyncio.gather(*(op(t) for t in range(tasks)))  # warm-up: scripts, connections
    with _Timer() as timer:
        await asyncio.gather(*(worker(t) for t in range(tasks)))
    await closer.aclose()
    return per_task * tasks / timer.seconds


def cluster_rows(
    settings: Settings, rounds: int, progress: Progress, section: Dict[str, Any]
) -> Dict[str, Any]:
    """The cluster rows into ``section``'s measures; their ratios and the cluster's size."""
    try:
        import redis.asyncio.cluster  # noqa: F401
    except ImportError:
        raise Unavailable("redis-py has no asyncio cluster client") from None
    given = os.environ.get("REDIS_CLUSTER_URL")
    throwaway = None if given else _ThrowawayCluster()
    url = given or throwaway.url  # type: ignore[union-attr]
    try:
        names = [name for name in CLUSTER_ROWS if settings.with_peers or name != LIMITS_ASYNC]
        if pipelining_keyword() is not None:
            names.remove(OURS_ASYNC_UNPIPELINED)
        n = settings.scale(20_000, 1_500, 128)
        errors: Dict[str, str] = {}
        samples = interleave(
            {name: (lambda name=name: asyncio.run(_cluster_case(url, name, n, TASKS)))
             for name in names},
            rounds,
            progress,
            f"redis cluster x{TASKS}",
            lambda name, exc: errors.update({name: repr(exc)}),
        )  # fmt: skip
        group = f"Redis Cluster (3 masters), asyncio, {TASKS} tasks"
        _add_measures(section, samples, f"redis/cluster{TASKS}", "ops/s", group, errors)
        return {
            "url": url if given else "throwaway, 3 masters on loopback",
            "tasks": TASKS,
            "ops_per_s": {k: _summary(v) for k, v in samples.items() if v},
            "vs": {
                other: {
                    name: _summary(ratios(values, samples[other]))
                    for name, values in samples.items()
                    if name != other and values and samples.get(other)
                }
                for other in (OURS_ASYNC_UNPIPELINED, LIMITS_ASYNC)
                if samples.get(other)
            },
            "errors": errors,
        }
    finally:
        if throwaway is not None:
            throwaway.close()


if __name__ == "__main__":
    from .common import new_section as _new

    figures = cluster_rows(Settings(), 5, Progress(enabled=False), _new("redis"))
    print(json.dumps(figures, indent=1))
