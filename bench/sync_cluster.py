"""Would per-node pipelining pay for the sync ``RedisStore`` on a Redis Cluster? (issue 27)

A measurement, not a feature: ``python -m bench.sync_cluster`` starts a
throwaway cluster of 3 masters on loopback (``redis_bench._ThrowawayCluster``,
or ``REDIS_CLUSTER_URL``), and runs 8 and 16 threads on one sync
``RedisCluster`` client, each thread checking its own keys (spread over the
masters), through:

* ``RedisStore`` as it is: one ``EVALSHA`` round trip per check;
* the same store with a prototype per-node combiner in place of its
  ``_send``: a thread that finds its node's lane idle sends every check
  queued for that node meanwhile (its own included) as one non-transactional
  pipeline on the node's client, and wakes the threads whose checks it sent
  ("flat combining"; no error handling beyond what a measurement needs).

It prints checks/s per case (best of ``ROUNDS``) and the ratio, as JSON. The
figures and the decision are in docs/scaling.md ("Sync clients on a Cluster").
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional

from . import redisenv
from .peers import HIGH

PREFIX = f"bench:sync-cluster:{os.getpid()}:"
THREADS = (8, 16)
ROUNDS = 3
SECONDS = 2.0
KEYS_PER_THREAD = 64


class _Lane:
    __slots__ = ("busy", "cond", "queue")

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.busy = False
        self.queue: List[List[Any]] = []


class Combiner:
    """Per-node flat combining of ``EVALSHA`` calls from many threads (prototype)."""

    def __init__(self, client: Any, sha: str) -> None:
        self.client = client
        self.sha = sha
        self.lanes: Dict[str, _Lane] = {}
        self.lock = threading.Lock()
        self.batches = 0
        self.sent = 0

    def run(self, numkeys: Any, rkeys: List[bytes], args: List[bytes]) -> Any:
        node = self.client.nodes_manager.get_node_from_slot(self.client.keyslot(rkeys[0]))
        lane = self.lanes.get(node.name)
        if lane is None:
            with self.lock:
                lane = self.lanes.setdefault(node.name, _Lane())
        entry: List[Any] = [(numkeys, rkeys, args), None, False]
        with lane.cond:
            lane.queue.append(entry)
            while lane.busy and not entry[2]:
                lane.cond.wait()
            if not entry[2]:
                lane.busy = True
                batch, lane.queue = lane.queue, []
        if not entry[2]:
            try:
                pipe = node.redis_connection.pipeline(transaction=False)
                for (nk, rk, a), _, _ in batch:
                    pipe.evalsha(self.sha, nk, *rk, *a)
                replies = pipe.execute(raise_on_error=False)
            except Exception as exc:  # a measurement: every entry fails
                replies = [exc] * len(batch)
            self.batches += 1
            self.sent += len(batch)
            with lane.cond:
                for done, reply in zip(batch, replies):
                    done[1], done[2] = reply, True
                lane.busy = False
                lane.cond.notify_all()
        if isinstance(entry[1], Exception):
            raise entry[1]
        return entry[1]


def _case(url: str, threads: int, combined: bool) -> Dict[str, float]:
    from redis.cluster import RedisCluster

    from limiter import RateLimiter
    from limiter.backends.redis import RedisStore
    from limiter.backends.redis._store import _SHA

    options = dict(redisenv.CLIENT_OPTIONS)
    # The store's advice about the cluster client's retries is not this measurement's.
    logging.getLogger("limiter.stores").setLevel(logging.ERROR)
    client = RedisCluster.from_url(url, **options)
    store = RedisStore(client, prefix=PREFIX)
    combiner: Optional[Combiner] = None
    if combined:
        combiner = Combiner(client, _SHA.decode() if isinstance(_SHA, bytes) else _SHA)
        store._send = lambda rkeys, args: combiner.run(len(rkeys), rkeys, args)  # type: ignore[method-assign]
    check = RateLimiter(HIGH, HIGH, store=store).check
    for t in range(threads):  # warm-up: scripts, connections, slot table
        check(f"t{t}-0")
    counts = [0] * threads
    stop = threading.Event()
    start = threading.Barrier(threads + 1)

    def worker(t: int) -> None:
        keys = [f"t{t}-{i}" for i in range(KEYS_PER_THREAD)]
        n = 0
        start.wait()
        while not stop.is_set():
            check(keys[n % KEYS_PER_THREAD])
            n += 1
        counts[t] = n

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(SECONDS)
    stop.set()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - began
    client.close()
    row = {"checks_per_s": sum(counts) / elapsed}
    if combiner is not None and combiner.batches:
        row["mean_batch"] = combiner.sent / combiner.batches
    return row


def measure(url: str) -> Dict[str, Any]:
    rows: Dict[str, Any] = {}
    for threads in THREADS:
        best: Dict[str, Dict[str, float]] = {}
        for _ in range(ROUNDS):  # interleaved, so that load drifts hit both alike
            for combined in (False, True):
                name = "combined" if combined else "plain"
                row = _case(url, threads, combined)
                if row["checks_per_s"] > best.get(name, {}).get("checks_per_s", 0.0):
                    best[name] = row
        rows[f"{threads} threads"] = {
            **best,
            "ratio": best["combined"]["checks_per_s"] / best["plain"]["checks_per_s"],
        }
    return rows


def main() -> None:
    from .redis_bench import _ThrowawayCluster

    url = os.environ.get("REDIS_CLUSTER_URL")
    cluster = None if url else _ThrowawayCluster()
    try:
        print(json.dumps(measure(url or cluster.url), indent=2))  # type: ignore[union-attr]
    finally:
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
