"""Section ``scaling``: what one check costs a Redis server, the figures behind docs/scaling.md.

Run it with ``python -m bench --only scaling`` (or ``python -m bench.scaling``
to print the figures as JSON).  The server is this run's one Redis
(``bench/redisenv.py``).  Every figure is a difference of the server's own
counters before and after a run of checks (nothing is reset):

* Lua time per check: ``INFO commandstats`` usec / calls of EVALSHA, for a
  check with 1 limit and with 3 limits (``apply_many``), over many distinct
  clients (every check creates or updates a key, as in production).
* Server CPU per check: ``INFO cpu`` used_cpu_user + used_cpu_sys over the
  run, which includes reading, parsing and answering the command: sequential
  checks, and 64 asyncio tasks with and without auto-pipelining.
* Network bytes per check: ``INFO stats`` total_net_input_bytes and
  total_net_output_bytes, less what the INFO calls themselves add, and the
  size of the packed command.
* Memory per tracked key: ``MEMORY USAGE`` of the keys the script writes, and
  the ``INFO memory`` used_memory delta over many new clients.

The model (``model``) turns them into what 1M active clients at 100k checks/s
need; its assumptions are in ``ASSUMPTIONS``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import statistics
import time
from typing import Any, Callable, Dict, List

from . import redisenv
from .common import Progress, Settings, Unavailable, new_section
from .peers import HIGH

PREFIX = f"bench:scaling:{os.getpid()}:"

#: The model's inputs that are not measured.
ASSUMPTIONS: Dict[str, float] = {
    "clients": 1_000_000,
    "checks_per_s": 100_000,
    # Plan each node's main thread at half its measured capacity (headroom for
    # replication, persistence, bursts and the other commands the node serves).
    "cpu_headroom": 0.5,
    # Client keys live as long as their bucket is not full again: with the
    # figure per key, memory scales with *active* clients, not all clients.
    "limits_per_client": 1,
}


def _evalsha(client: Any) -> Dict[str, float]:
    stats = client.info("commandstats")
    calls = usec = 0.0
    for cmd in ("evalsha", "eval"):
        entry = stats.get(f"cmdstat_{cmd}", {})
        calls += float(entry.get("calls", 0))
        usec += float(entry.get("usec", 0))
    return {"calls": calls, "usec": usec}


def _cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _net(client: Any) -> Dict[str, float]:
    info = client.info("stats")
    return {
        "in": float(info["total_net_input_bytes"]),
        "out": float(info["total_net_output_bytes"]),
    }


def _stores(client: Any, long_lived: bool = False) -> Dict[str, Callable[[str], Any]]:
    """name -> op(client_key): one check of that client with 1 or 3 limits.

    The limits are a typical API's: 10/s burst 20; with 3 limits also 1/s burst
    60 and 1 per minute burst 1,000.  ``long_lived``: limits that refill so
    slowly (per hour) that no key expires while memory is measured.
    """
    from limiter import Limit
    from limiter.backends.redis import RedisStore

    store = RedisStore(client, prefix=PREFIX)
    if long_lived:
        one = Limit(1 / 3600, 100)
        three = [one, Limit(1 / 7200, 200), Limit(1 / 36000, 1000)]
    else:
        one = Limit(10, 20)
        three = [one, Limit(1, 60), Limit(1 / 60, 1000)]
    apply, apply_many = store.apply, store.apply_many

    def op1(key: str) -> Any:
        return apply(key, one, 1, None)

    def op3(key: str) -> Any:
        # One client's limits share a hash tag, so they stay on one Cluster slot.
        tag = "{" + key + "}"
        return apply_many([tag + ":s", tag + ":m", tag + ":h"], three, 1, None)

    return {"1 limit": op1, "3 limits": op3}


def lua_cost(client: Any, n: int, clients: int) -> Dict[str, Any]:
    """Server-side µs of Lua per check (commandstats), 1 and 3 limits."""
    out: Dict[str, Any] = {}
    for name, op in _stores(client).items():
        op("u0")
        before = _evalsha(client)
        for i in range(n):
            op(f"u{i % clients}")
        after = _evalsha(client)
        calls = after["calls"] - before["calls"]
        out[name] = {
            "checks": n,
            "evalsha_calls": calls,
            "usec_per_call": (after["usec"] - before["usec"]) / calls if calls else float("nan"),
        }
    return out


def network(client: Any, n: int) -> Dict[str, Any]:
    """Bytes in and out of the server per check (1 limit), and the packed command's size."""
    op = _stores(client)["1 limit"]
    op("u0")
    # What two INFO calls add on their own (the first's reply, the second's request).
    a, b = _net(client), _net(client)
    info_in, info_out = b["in"] - a["in"], b["out"] - a["out"]
    before = _net(client)
    for i in range(n):
        op(f"u{i % 1000}")
    after = _net(client)
    packed = _packed_size(client)
    return {
        "checks": n,
        "in_bytes_per_check": (after["in"] - before["in"] - info_in) / n,
        "out_bytes_per_check": (after["out"] - before["out"] - info_out) / n,
        "packed_command_bytes": packed,
    }


def _packed_size(client: Any) -> float:
    """Bytes of one EVALSHA as redis-py packs it (1 limit, a typical key)."""
    try:
        from limiter import Limit
        from limiter.backends.redis import RedisStore
        from limiter.backends.redis._store import _SHA

        store = RedisStore(client, prefix="limiter:")
        limit = Limit(10, 20)
        key = store._key("203.0.113.7")
        args = store._args((limit,), 1, None)
        conn = client.connection_pool.get_connection()
        try:
            chunks = conn.pack_command("EVALSHA", _SHA, 1, key, *args)
        finally:
            client.connection_pool.release(conn)
        return float(sum(len(c) for c in chunks))
    except Exception:  # internals moved: the INFO figures stand alone
        return float("nan")


def memory(client: Any, keys: int) -> Dict[str, Any]:
    """Bytes per tracked client in Redis: MEMORY USAGE and used_memory delta."""
    out: Dict[str, Any] = {}
    for name, op in _stores(client, long_lived=True).items():
        base = f"mem{name[0]}-"
        client.execute_command("MEMORY", "PURGE")
        before = float(client.info("memory")["used_memory"])
        for i in range(keys):
            op(base + str(i))
        after = float(client.info("memory")["used_memory"])
        written = list(client.scan_iter(match=f"{PREFIX}*{base}1*", count=1000))[:200]
        usage = [float(client.memory_usage(k, samples=0) or 0) for k in written]
        per_client_keys = 3 if name == "3 limits" else 1
        out[name] = {
            "clients": keys,
            "redis_keys_per_client": per_client_keys,
            "memory_usage_per_key": sum(usage) / len(usage) if usage else float("nan"),
            "used_memory_per_client": (after - before) / keys,
            "sample_key": (written[0].decode() if written else ""),
        }
        _delete(client, f"{PREFIX}*{base}*")
    return out


def _delete(client: Any, pattern: str) -> None:
    batch: List[Any] = []
    for key in client.scan_iter(match=pattern, count=2000):
        batch.append(key)
        if len(batch) >= 1000:
            client.delete(*batch)
            batch.clear()
    if batch:
        client.delete(*batch)


async def _async_checks(n: int, tasks: int, pipelining: Any) -> float:
    from limiter import RateLimiter
    from limiter.backends.redis import AsyncRedisStore

    client = redisenv.async_client()
    options = {} if pipelining is None else {"pipelining": pipelining}
    acheck = RateLimiter(HIGH, HIGH, store=AsyncRedisStore(client, prefix=PREFIX, **options)).acheck
    per_task = max(1, n // tasks)

    async def worker(t: int) -> None:
        for i in range(per_task):
            await acheck(f"a{(t * per_task + i) % 1000}")

    await acheck("a0")
    start = time.perf_counter()
    await asyncio.gather(*(worker(t) for t in range(tasks)))
    seconds = time.perf_counter() - start
    await client.aclose()
    return per_task * tasks / seconds


def server_cpu(client: Any, n: int) -> Dict[str, Any]:
    """Server CPU µs per check (INFO cpu), sequential and with 64 asyncio tasks."""
    from .redis_bench import pipelining_keyword

    op = _stores(client)["1 limit"]
    out: Dict[str, Any] = {}

    def measure(name: str, run: Callable[[], float]) -> None:
        cpu0 = _cpu(client)
        rate = run()
        cpu = _cpu(client) - cpu0
        out[name] = {"checks": n, "server_cpu_us_per_check": cpu / n * 1e6, "checks_per_s": rate}

    def sequential() -> float:
        start = time.perf_counter()
        for i in range(n):
            op(f"u{i % 1000}")
        return n / (time.perf_counter() - start)

    measure("sequential (one connection)", sequential)
    why = pipelining_keyword()
    if why is None:
        measure(
            "asyncio, 64 tasks, auto-pipelining",
            lambda: asyncio.run(_async_checks(n, 64, True)),
        )
        measure(
            "asyncio, 64 tasks, pipelining=False",
            lambda: asyncio.run(_async_checks(n, 64, False)),
        )
    else:
        measure(
            "asyncio, 64 tasks (AsyncRedisStore defaults)",
            lambda: asyncio.run(_async_checks(n, 64, None)),
        )
        out["note"] = f"pipelining on/off not compared: {why}"
    return out


def model(figures: Dict[str, Any]) -> Dict[str, Any]:
    """1M active clients at 100k checks/s: nodes, memory and network, from the figures."""
    a = ASSUMPTIONS
    cpu = figures.get("server_cpu", {})
    seq = cpu.get("sequential (one connection)", {}).get("server_cpu_us_per_check", float("nan"))
    piped = [
        v["server_cpu_us_per_check"]
        for k, v in cpu.items()
        if isinstance(v, dict) and k.startswith("asyncio") and "False" not in k
    ]
    lua = figures.get("lua", {}).get("1 limit", {}).get("usec_per_call", float("nan"))
    mem = figures.get("memory", {}).get("1 limit", {}).get("used_memory_per_client", float("nan"))
    net = figures.get("network", {})
    out: Dict[str, Any] = {"assumptions": dict(a)}
    for name, us in (("un-pipelined", seq), ("pipelined", min(piped) if piped else float("nan"))):
        if math.isnan(us) or us <= 0:
            continue
        capacity = 1e6 / us
        planned = capacity * a["cpu_headroom"]
        out[name] = {
            "server_cpu_us_per_check": us,
            "checks_per_s_per_node_at_full_cpu": capacity,
            "nodes_for_target": max(1, math.ceil(a["checks_per_s"] / planned)),
        }
    if not math.isnan(lua) and lua > 0:
        out["lua_only_checks_per_s_per_core"] = 1e6 / lua
    if not math.isnan(mem):
        out["memory_bytes_for_clients"] = mem * a["clients"] * a["limits_per_client"]
    if net:
        per_check = net.get("in_bytes_per_check", 0.0) + net.get("out_bytes_per_check", 0.0)
        out["network_bytes_per_check"] = per_check
        out["network_mbit_per_s"] = per_check * a["checks_per_s"] * 8 / 1e6
    return out


def _median_of(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Runs of the same measurement -> each figure's median, with ``<figure>_range`` (min, max)."""
    out: Dict[str, Any] = {}
    for name, first in runs[0].items():
        if not isinstance(first, dict):
            out[name] = first
            continue
        merged: Dict[str, Any] = {}
        for field in first:
            values = [r[name][field] for r in runs if name in r]
            if all(isinstance(v, (int, float)) for v in values) and len(values) > 1:
                merged[field] = statistics.median(values)
                merged[f"{field}_range"] = [min(values), max(values)]
            else:
                merged[field] = values[0]
        out[name] = merged
    return out


def measure_all(settings: Settings, progress: Progress) -> Dict[str, Any]:
    try:
        from limiter.backends.redis import RedisStore  # noqa: F401
    except ImportError as exc:
        raise Unavailable(f"limiter.backends.redis not available ({exc})") from None
    redisenv.url()
    client = redisenv.sync_client()
    n = settings.scale(20_000, 2_000, 100)
    keys = settings.scale(100_000, 5_000, 200)
    # CPU figures move with whatever else the machine runs: repeat, keep medians.
    reps = 1 if settings.quick or settings.tiny else 3
    progress.plan(2 + 2 * reps)
    figures: Dict[str, Any] = {}
    try:
        lua, cpu = [], []
        for _ in range(reps):
            lua.append(lua_cost(client, n, clients=10_000))
            progress.step("scaling: Lua time")
            cpu.append(server_cpu(client, n))
            progress.step("scaling: server CPU")
        figures["lua"], figures["server_cpu"] = _median_of(lua), _median_of(cpu)
        figures["repetitions"] = reps
        figures["network"] = network(client, n)
        progress.step("scaling: network")
        figures["memory"] = memory(client, keys)
        progress.step("scaling: memory")
    finally:
        _delete(client, PREFIX + "*")
        _delete(client, "*" + PREFIX + "*")
    info = client.info("server")
    figures["server"] = {
        "redis_version": info.get("redis_version"),
        "io_threads": client.config_get("io-threads").get("io-threads", "?"),
    }
    figures["model"] = model(figures)
    return figures


def run(settings: Settings, progress: Progress) -> Dict[str, Any]:
    section = new_section("scaling")
    section["data"] = measure_all(settings, progress)
    return section


if __name__ == "__main__":
    try:
        print(json.dumps(measure_all(Settings(), Progress(enabled=False)), indent=1))
    finally:
        redisenv.close()
