"""docs/scaling.md, written from the ``scaling`` section's figures (``bench/scaling.py``).

The page is generated so that every figure in it comes from one run and can be
reproduced with the command it names; the reasoning around the figures lives
here, beside the code that measures them.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

#: The sync-store-on-a-Cluster measurement (``python -m bench.sync_cluster``, a one-off
#: prototype, not part of a bench run): its figures are fixed text, dated.
SYNC_CLUSTER = (
    "## Sync clients on a Cluster\n"
    "\n"
    "`RedisStore` (sync) sends each check as its own round trip, on a Cluster client "
    "too. Would pipelining per node across threads pay, as it does for asyncio tasks? "
    "Measured with a prototype outside the library (`python -m bench.sync_cluster`: a "
    "thread that finds its node idle sends every check queued for that node meanwhile "
    "as one pipeline, and wakes the threads whose checks it sent), against "
    "`RedisStore` as it is, on a throwaway cluster of 3 masters on loopback, threads "
    "on one `RedisCluster` client, each checking its own keys, best of 3 interleaved "
    "rounds of 2 s (2026-12-06, a 2-core machine shared with other work, so three "
    "runs):\n"
    "\n"
    "| threads | `RedisStore` checks/s | prototype checks/s | ratio (3 runs) | checks "
    "per batch |\n"
    "|---|---|---|---|---|\n"
    "| 8 | 8,507 | 9,316 | 1.10x (0.96x-1.38x) | 1.9 |\n"
    "| 16 | 9,649 | 12,246 | 1.27x (1.13x-1.27x) | 3.3 |\n"
    "\n"
    "It does not pay enough to build (the bar was 1.5x): the threads share one "
    "interpreter lock, so the client's own Python work per check (building the "
    "command, the pipeline's bookkeeping, decoding the reply, handing results between "
    "threads) stays per check, and only the system calls are shared; batches stay "
    "small (2-3 checks) because a thread holds the lock for most of a round trip. For "
    "throughput on a Cluster, use `AsyncRedisStore` (pipelined per node: 3.0x above), "
    "or more processes; the un-pipelined column applies to sync clients.\n"
    "\n"
)


def _f(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.{digits}f}"


def _fr(figures: Dict[str, Any], field: str) -> str:
    """A figure with its range over the repetitions, when it was repeated."""
    text = _f(figures.get(field))
    low_high = figures.get(f"{field}_range")
    if low_high and low_high[0] != low_high[1]:
        text += f" ({_f(low_high[0])}-{_f(low_high[1])})"
    return text


def _cluster_figures(cluster: Optional[Dict[str, Any]]) -> str:
    """The sentence on the measured Cluster rows (``sections.redis.data.cluster``), or ""."""
    ops, tasks = (cluster or {}).get("ops_per_s", {}), (cluster or {}).get("tasks", 64)
    piped = ops.get("limiter acheck()", {}).get("median")
    unpiped = ops.get("limiter acheck(), pipelining=False", {}).get("median")
    if not piped or not unpiped:
        return ""
    text = (
        f" Measured on a cluster of 3 masters on loopback, {tasks} tasks on "
        f"one client, each checking its own key: {_f(piped, 0)} checks/s pipelined per node "
        f"against {_f(unpiped, 0)} with `pipelining=False` ({_f(piped / unpiped)}x)"
    )
    peer = ops.get("limits fixed window hit() (limits.aio)", {}).get("median")
    if peer:
        text += (
            f" and {_f(peer, 0)} for limits.aio's fixed window on the same cluster "
            f"({_f(piped / peer)}x)"
        )
    return text + " (the `redis` section's cluster rows; alone: `python -m bench.redis_bench`)."


def page(
    data: Dict[str, Any], generated: str, command: str, cluster: Optional[Dict[str, Any]] = None
) -> str:
    """The Markdown of docs/scaling.md from ``sections.scaling.data`` of a results JSON.

    ``cluster``: ``sections.redis.data.cluster`` of the same run, when it has one.
    """
    lua, cpu, net = data.get("lua", {}), data.get("server_cpu", {}), data.get("network", {})
    mem, model, server = data.get("memory", {}), data.get("model", {}), data.get("server", {})
    a = model.get("assumptions", {})
    lua1 = lua.get("1 limit", {}).get("usec_per_call", float("nan"))
    lua3 = lua.get("3 limits", {}).get("usec_per_call", float("nan"))
    seq = cpu.get("sequential (one connection)", {})
    piped = cpu.get("asyncio, 64 tasks, auto-pipelining", {})
    unpiped = cpu.get("asyncio, 64 tasks, pipelining=False", {})
    m1, m3 = mem.get("1 limit", {}), mem.get("3 limits", {})
    unp, pip = model.get("un-pipelined", {}), model.get("pipelined", {})
    net_in = net.get("in_bytes_per_check", float("nan"))
    net_out = net.get("out_bytes_per_check", float("nan"))
    per_check = net_in + net_out
    target = a.get("checks_per_s", 100_000)
    clients = a.get("clients", 1_000_000)
    mem1 = m1.get("used_memory_per_client", float("nan"))
    mem3 = m3.get("used_memory_per_client", float("nan"))
    lines: List[str] = [
        "# Scaling with Redis",
        "",
        "<!-- Generated by `python -m bench --publish` (bench/scaling_doc.py) from the "
        "`scaling` section of bench/results/latest.json. -->",
        "",
        "What one check costs a Redis server, how many checks one node serves, how much "
        "memory a tracked client takes, and what 1,000,000 active clients at 100,000 "
        "checks/s need. Every figure below was measured on the server by its own counters "
        f"(Redis {server.get('redis_version', '?')}, `io-threads` "
        f"{server.get('io_threads', '?')}, loopback, on the machine of "
        f"[benchmarks.md](benchmarks.md); run {generated}, `{command}`), as differences "
        "before and after a run of checks; nothing is reset. Reproduce:",
        "",
        "```text",
        "python -m bench --only scaling     # into bench/results/, with REDIS_URL or a throwaway",
        "python -m bench.scaling            # the same figures as JSON on stdout",
        "```",
        "",
        "The machine was shared with other jobs while it ran: CPU figures are upper bounds.",
        "",
        "## The cost of one check on the server",
        "",
        "A check is one `EVALSHA` of the store's Lua script (`GET` the bucket, the token "
        "bucket arithmetic, `SET` it back with an expiry). Its cost on the server has two "
        "parts: the script itself, and reading the command from the socket and writing the "
        "reply.",
        "",
        f"| what | server µs per check (median of {data.get('repetitions', 1)} runs, "
        "min-max) | measured by |",
        "|---|---|---|",
        f"| Lua, 1 limit | {_fr(lua.get('1 limit', {}), 'usec_per_call')} | "
        "`INFO commandstats`: usec / calls of `evalsha` |",
        f"| Lua, 3 limits (one script call, 3 keys) | "
        f"{_fr(lua.get('3 limits', {}), 'usec_per_call')} | the same |",
        "| whole check, sequential client (one connection) | "
        f"{_fr(seq, 'server_cpu_us_per_check')} | `INFO cpu`: used_cpu_user + "
        "used_cpu_sys over the run / checks |",
        "| whole check, 64 asyncio tasks, `pipelining=False` | "
        f"{_fr(unpiped, 'server_cpu_us_per_check')} | the same |",
        "| whole check, 64 asyncio tasks, auto-pipelining (the default) | "
        f"{_fr(piped, 'server_cpu_us_per_check')} | the same |",
        "",
        "Redis runs commands on one main thread, so a node's ceiling is one core: "
        f"about **{_f(unp.get('checks_per_s_per_node_at_full_cpu'), 0)} checks/s** from "
        "un-pipelined clients and "
        f"**{_f(pip.get('checks_per_s_per_node_at_full_cpu'), 0)} checks/s** from pipelined "
        f"ones, and at most {_f(model.get('lua_only_checks_per_s_per_core'), 0)} checks/s if "
        "the socket work cost nothing (the Lua alone). Three limits in one call cost "
        f"{_f(lua3 / lua1 if lua1 else float('nan'))}x the Lua time of one (a `GET` and a "
        "`SET` per limit, one `TIME` call and one reply in all), and the same single round "
        "trip.",
        "",
        "## Memory per tracked client",
        "",
        "The script writes one string key per limit, `limiter:{<client>}...` holding the "
        "tokens and the time, with a `PX` expiry at the moment the bucket is full again: a "
        "client that stops sending costs nothing once its bucket has refilled, so memory "
        "follows *active* clients (those whose bucket is not full), not all clients ever "
        "seen.",
        "",
        "| limits per client | `MEMORY USAGE` per key | keys | `used_memory` per client |",
        "|---|---|---|---|",
        f"| 1 | {_f(m1.get('memory_usage_per_key'), 0)} bytes | 1 | {_f(mem1, 0)} bytes |",
        f"| 3 | {_f(m3.get('memory_usage_per_key'), 0)} bytes | 3 | {_f(mem3, 0)} bytes |",
        "",
        f"`used_memory` per client is the `INFO memory` delta over {m1.get('clients', 0):,} "
        "new clients, divided by their number: it adds what `MEMORY USAGE` leaves out (the "
        "main dictionary's and the expiry dictionary's entries). Keys were like "
        f"`{m1.get('sample_key', '')}`; longer client keys (an API key, an IPv6 address) add "
        "their extra length.",
        "",
        "## How a Redis Cluster spreads the keys",
        "",
        "A cluster has 16,384 slots spread over its masters; a key's slot is CRC16 of its "
        "hash tag (the text between the first `{` and the next `}`). Every key the store "
        "writes carries a hash tag: the client's own key, so different clients spread evenly "
        "over the slots, and one client's limits (several limits of one `RateLimiter`, or "
        "`apply_many` keys that share a tag) land in one slot, which is what lets one script "
        "charge them all atomically:",
        "",
        "```python",
        "from limiter.backends.redis import hash_tag, redis_key",
        "",
        'assert redis_key("ip:203.0.113.7") == "limiter:{ip:203.0.113.7}"',
        'assert redis_key("{user:42}:minute") == "limiter:{user:42}{user:42}:minute"',
        'assert hash_tag(redis_key("{user:42}:minute")) == hash_tag(redis_key("{user:42}:day"))',
        "```",
        "",
        "So load spreads with the number of clients, and a single client never spans two "
        "nodes: one very hot client is served by one master, at most that node's checks/s "
        "above. Put `DenyCache` in front of the store so that a client hammering while "
        "denied is answered locally (see [benchmarks.md](benchmarks.md), the deny flood).",
        "",
        f"## {clients:,} active clients at {target:,} checks/s",
        "",
        "Assumptions: every client has one limit (the 3-limit figures are above); clients "
        "spread evenly over the slots (no single client near one node's capacity); each "
        f"master is planned at {a.get('cpu_headroom', 0.5):.0%} of the CPU measured here, "
        "leaving room for replication, persistence, failover and bursts; Redis 7 with one "
        "main thread; one replica per master for availability.",
        "",
        "| | un-pipelined clients (sync, or `pipelining=False`) | auto-pipelined asyncio clients |",
        "|---|---|---|",
        f"| server CPU per check | {_f(unp.get('server_cpu_us_per_check'))} µs | "
        f"{_f(pip.get('server_cpu_us_per_check'))} µs |",
        f"| masters for {target:,} checks/s | **{unp.get('nodes_for_target', 'n/a')}** | "
        f"**{pip.get('nodes_for_target', 'n/a')}** |",
        f"| memory for {clients:,} clients (1 limit) | {_f(mem1 * clients / 2**20, 0)} MiB "
        "per copy | the same |",
        f"| network per check (RESP, both ways) | {_f(per_check, 0)} bytes | the same bytes, "
        "fewer packets |",
        f"| network at {target:,} checks/s | {_f(model.get('network_mbit_per_s'), 0)} Mbit/s "
        "+ TCP/IP headers | the same + fewer headers |",
        "",
        "Several masters mean a Redis Cluster client, and `AsyncRedisStore` pipelines on "
        "an asyncio Cluster client per master: the checks in flight to one master go out as "
        "one pipeline on that master's connection, so the pipelined column applies to a "
        "Cluster (sync clients and `pipelining=False` keep the un-pipelined one)."
        + _cluster_figures(cluster),
        "",
        f"Memory is not the constraint: {clients:,} clients with 3 limits each take "
        f"{_f(mem3 * clients / 2**20, 0)} MiB, which one node holds; the masters are there "
        "for CPU. Network per check was measured from `INFO stats` (total_net_input_bytes and "
        f"total_net_output_bytes): {_f(net_in, 0)} bytes in (the packed `EVALSHA` alone is "
        f"{_f(net.get('packed_command_bytes'), 0)} bytes) and {_f(net_out, 0)} bytes out per "
        "check. On a network, each un-pipelined check is also a request and a reply packet "
        "of its own (about 66 bytes of Ethernet, IP and TCP headers each way, not measured "
        "here), so headers can double the bytes on the wire; a pipeline shares them.",
        "",
        "## What auto-pipelining changes",
        "",
        "`AsyncRedisStore` sends the checks issued while one is in flight as one pipeline "
        "when it returns (on a Redis Cluster client, one pipeline per master; a check "
        "redirected by `MOVED` or `ASK` during a slot migration or a failover is sent again "
        "alone, where it belongs, and one whose outcome a lost connection left unknown is a "
        "`StoreError`, never sent twice). Each check still runs its own script, so the "
        "Lua time is the same; what the server saves is the per-command socket work: one read and "
        "one write system call, and one event-loop wakeup, for a whole batch instead of per "
        "check. Measured above, server CPU per check went from "
        f"{_f(unpiped.get('server_cpu_us_per_check'))} µs (64 tasks, `pipelining=False`) to "
        f"{_f(piped.get('server_cpu_us_per_check'))} µs, against {_f(lua1)} µs for the "
        "script itself, so one master serves more checks and the cluster needs fewer. "
        "The clients save the same: a batch is one round trip, so "
        f"64 tasks on one loop ran {_f(piped.get('checks_per_s'), 0)} checks/s against "
        f"{_f(unpiped.get('checks_per_s'), 0)} without pipelining here. A lone check is sent "
        "at once, so a quiet client pays no added latency. Sequential (sync) clients cannot "
        "batch: one check is one round trip, and the un-pipelined column applies.",
        "",
    ]
    if cpu.get("note"):
        lines += [f"Note: {cpu['note']}.", ""]
    lines.append(SYNC_CLUSTER)
    return "\n".join(lines)
