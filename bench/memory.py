"""Section ``memory``: bytes per tracked key, a 1,000,000-key flood under ``max_keys``,
and the worst ``check`` latency while ``MemoryStore.sweep`` walks 1,000,000 keys.

Every measurement runs in a fresh child process (``python -m bench.memory
TASK ARGS``) so that RSS figures start from a clean interpreter and a million
keys never outlive their measurement.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from typing import Any, Dict, List

from .common import Measure, Progress, Settings, new_section, rss_bytes
from .peers import LIBS, available

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(task: str, **kwargs: Any) -> Dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.memory", task, json.dumps(kwargs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"bench.memory {task} failed: {proc.stderr[-2000:]}")
    result: Dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- child tasks -----------------------------------------------------------------


def task_bytes_per_key(lib: str, keys: int) -> Dict[str, Any]:
    """Bytes a library keeps per tracked key (tracemalloc), after touching ``keys`` keys."""
    make = {x.id: x.make for x in LIBS}[lib]
    loop = make()
    names = [f"user:{i}" for i in range(keys)]
    loop(names[:10])  # lazily created structures are not per-key costs
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    loop(names)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return {"bytes_per_key": used / keys, "keys": keys}


def task_flood(max_keys: Any, keys: int, checkpoints: int) -> Dict[str, Any]:
    """A flood of distinct keys at 10/s burst 10 (every bucket stays not-full)."""
    from limiter import MemoryStore, RateLimiter

    store = MemoryStore(max_keys=max_keys)
    check = RateLimiter(10, 10, store=store).check
    gc.collect()
    rss0 = rss_bytes()
    series: List[List[float]] = []
    step = max(1, keys // checkpoints)
    longest = 0
    start = time.perf_counter()
    for base in range(0, keys, step):
        for i in range(base, min(keys, base + step)):
            check(f"flood:{i}")
        longest = max(longest, len(store))
        series.append([min(keys, base + step), len(store), (rss_bytes() - rss0) / 2**20])
    seconds = time.perf_counter() - start
    return {
        "max_keys": max_keys,
        "keys": keys,
        "len_store": len(store),
        "max_len_store": longest,
        "rss_growth_mib": (rss_bytes() - rss0) / 2**20,
        "ops_per_s": keys / seconds,
        "series": series,
    }


def task_sweep(keys: int, full: bool) -> Dict[str, Any]:
    """Worst ``check`` latency on another thread while ``sweep`` walks ``keys`` keys.

    ``full``: every bucket is full at sweep time (the sweep deletes all keys);
    otherwise none is (it only scans).
    """
    from limiter import MemoryStore, RateLimiter

    store = MemoryStore(max_keys=keys * 2)
    limiter = RateLimiter(1, 10, store=store)
    check = limiter.check
    for i in range(keys):
        check(f"idle:{i}")
    gc.collect()
    gc.disable()  # a collection pause is not the sweeper's doing
    now = time.time() + (3600.0 if full else 0.0)
    done = threading.Event()
    swept: List[float] = []

    def sweeper() -> None:
        t = time.perf_counter()
        swept.append(store.sweep(now, None))
        swept.append(time.perf_counter() - t)
        done.set()

    latencies: List[float] = []
    perf = time.perf_counter
    thread = threading.Thread(target=sweeper)
    thread.start()
    while not done.is_set():
        t = perf()
        check("probe")
        latencies.append(perf() - t)
    thread.join()
    gc.enable()
    latencies.sort()
    return {
        "keys": keys,
        "deleted": int(swept[0]),
        "sweep_seconds": swept[1],
        "checks_during_sweep": len(latencies),
        "max_ms": latencies[-1] * 1e3 if latencies else float("nan"),
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3 if latencies else float("nan"),
        "p50_ms": statistics.median(latencies) * 1e3 if latencies else float("nan"),
        "switch_interval_ms": sys.getswitchinterval() * 1e3,
        "len_after": len(store),
    }


TASKS = {"bytes_per_key": task_bytes_per_key, "flood": task_flood, "sweep": task_sweep}


# -- the section ----------------------------------------------------------------


def run(settings: Settings, progress: Progress) -> Dict[str, Any]:
    section = new_section("memory")
    data = section["data"]
    # allow() keeps what check() keeps: one row per state kind (bucket, each window).
    libs = [
        lib for lib in LIBS if (lib.ours or settings.with_peers) and not lib.id.endswith(".allow")
    ]
    libs = [lib for lib in libs if available(lib) is None]
    if settings.quick:  # a child process per library is most of this section's time
        libs = [lib for lib in libs if lib.id == "ours.check"]
    per_key = settings.scale(100_000, 5_000, 500)
    flood_keys = settings.scale(1_000_000, 50_000, 2_000)
    flood_cap = settings.scale(100_000, 5_000, 200)
    sweep_keys = settings.scale(1_000_000, 100_000, 2_000)
    sweep_rounds = 1 if settings.tiny or settings.quick else min(settings.rounds, 3)
    progress.plan(len(libs) + 2 + 2 * sweep_rounds + (0 if settings.quick or settings.tiny else 1))

    bpk: Dict[str, Any] = {}
    for lib in libs:
        keys = per_key if lib.max_keys is None else min(per_key, lib.max_keys)
        try:
            bpk[lib.id] = _child("bytes_per_key", lib=lib.id, keys=keys)
            bpk[lib.id]["label"] = lib.label
        except Exception as exc:
            section["notes"].append(f"bytes per key, {lib.id}: {exc}")
        progress.step(f"memory: bytes/key {lib.id}")
    if not (settings.quick or settings.tiny):
        try:
            big = _child("bytes_per_key", lib="ours.check", keys=1_000_000)
            big["label"] = "limiter check() at 1,000,000 keys"
            bpk["ours.check@1M"] = big
        except Exception as exc:
            section["notes"].append(f"bytes per key at 1M: {exc}")
        progress.step("memory: bytes/key at 1M")
    data["bytes_per_key"] = bpk

    floods = []
    for cap in (flood_cap, None):
        floods.append(_child("flood", max_keys=cap, keys=flood_keys, checkpoints=20))
        progress.step(f"memory: flood max_keys={cap}")
    data["flood"] = floods

    sweeps: Dict[str, List[Dict[str, Any]]] = {"full": [], "scan": []}
    for _ in range(sweep_rounds):
        for kind in ("full", "scan"):
            sweeps[kind].append(_child("sweep", keys=sweep_keys, full=kind == "full"))
            progress.step(f"memory: sweep ({kind})")
    data["sweep"] = sweeps
    for kind, label in (("full", "deletes every key"), ("scan", "deletes nothing")):
        section["measures"].append(
            Measure(
                id=f"memory/sweep-{kind}/max",
                label=f"worst check() during sweep of {sweep_keys:,} keys ({label})",
                library="tokenlimiter",
                unit="ms",
                samples=[r["max_ms"] for r in sweeps[kind]],
                group="sweep",
            ).as_dict()
        )
    return section


if __name__ == "__main__":
    task = TASKS[sys.argv[1]]
    print(json.dumps(task(**json.loads(sys.argv[2]))))
