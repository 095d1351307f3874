"""Section ``sqlite``: ``SQLiteStore`` checks per second with 1 and with 4 processes.

Each process (``python -m bench.sqlite_bench PATH SECONDS SEED``) opens the
same database file, checks keys drawn from 1,000 for a fixed time and prints
its rate; the 4-process figure is the sum of the four concurrent rates.  The
machine's core count is recorded with the results: with 2 cores, 4 processes
mostly measure lock contention on the database file.  No peer is compared:
none of the peers ships an SQLite token bucket keyed per client.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

from .common import Measure, Progress, Settings, Unavailable, interleave, new_section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(path: str, seconds: float, seed: int) -> Dict[str, float]:
    from limiter import RateLimiter
    from limiter.backends.sqlite import SQLiteStore

    from .peers import HIGH

    check = RateLimiter(HIGH, HIGH, store=SQLiteStore(path)).check
    rng = random.Random(seed)
    keys = [f"user:{rng.randrange(1000)}" for _ in range(4096)]
    check(keys[0])
    ops = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for k in keys[:256]:
            check(k)
        ops += 256
        keys.append(keys.pop(0))
    return {"ops": ops, "rate": ops / (time.perf_counter() - start)}


def _processes(path: str, count: int, seconds: float) -> float:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.sqlite_bench", path, str(seconds), str(i)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    total = 0.0
    for proc in procs:
        out, err = proc.communicate(timeout=seconds + 60)
        if proc.returncode != 0:
            raise RuntimeError(f"sqlite worker failed: {err[-1500:]}")
        total += json.loads(out.strip().splitlines()[-1])["rate"]
    return total


def run(settings: Settings, progress: Progress) -> Dict[str, Any]:
    try:
        from limiter.backends.sqlite import SQLiteStore  # noqa: F401
    except ImportError as exc:
        raise Unavailable(f"limiter.backends.sqlite not available in this tree ({exc})") from None
    section = new_section("sqlite")
    seconds = settings.scale(3.0, 0.5, 0.2)
    rounds = 1 if settings.quick or settings.tiny else max(1, min(settings.rounds, 3))
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-") as tmp:
        path = os.path.join(tmp, "limiter.db")
        _processes(path, 1, 0.2)  # create the schema once
        counts: List[int] = [1, 4]
        samples = interleave(
            {
                f"{n} process{'es' if n > 1 else ''}": (lambda n=n: _processes(path, n, seconds))
                for n in counts
            },
            rounds,
            progress,
            "sqlite",
        )
    for name, values in samples.items():
        section["measures"].append(
            Measure(
                id=f"sqlite/{name}",
                label=f"SQLiteStore check(), {name}",
                library="tokenlimiter",
                unit="checks/s",
                samples=values,
                group="SQLite, one file",
            ).as_dict()
        )
    section["data"] = {"seconds_per_run": seconds, "keys": 1000, "cores": os.cpu_count()}
    return section


if __name__ == "__main__":
    print(json.dumps(worker(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]))))
