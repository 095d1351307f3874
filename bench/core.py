"""Section ``core``: in-memory operations per second, and how the cost grows with keys.

For each number of keys K, every library gets a fresh limiter per round, a
warm-up pass that touches all K keys once (untimed: that is where keys are
created), then a timed pass over the same, shuffled key sequence.  The limit
always admits (see ``peers.HIGH``) except for limits' moving window.
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import random
import time
from typing import Any, Callable, Dict, List

from .common import Measure, Progress, Settings, interleave, new_section
from .peers import HIGH, LIBS, Lib, available, window_policy


def key_counts(settings: Settings) -> List[int]:
    if settings.tiny:
        return [1, 100]
    if settings.quick:
        return [1, 10_000]
    return [1, 1_000, 10_000, 100_000, 1_000_000]


def _sequence(keys: List[str], ops: int, rng: random.Random) -> List[str]:
    if len(keys) == 1:
        return keys * ops
    if ops <= len(keys):
        return rng.sample(keys, ops)
    seq: List[str] = []
    while len(seq) < ops:
        chunk = keys[:]
        rng.shuffle(chunk)
        seq.extend(chunk)
    return seq[:ops]


def _case(lib: Lib, keys: List[str], seq: List[str]) -> Any:
    def run() -> float:
        loop = lib.make()
        if len(keys) > 1:
            loop(keys)  # warm-up: create every key
        else:
            loop(seq[: max(1, len(seq) // 10)])
        seconds = loop(seq)
        del loop
        return len(seq) / seconds

    return run


def _recorder(errors: Dict[str, str]) -> Callable[[str, BaseException], None]:
    def record(name: str, exc: BaseException) -> None:
        errors[name] = repr(exc)

    return record


def run(settings: Settings, progress: Progress) -> Dict[str, Any]:
    section = new_section("core")
    libs = [lib for lib in LIBS if lib.ours or settings.with_peers]
    skipped: Dict[str, str] = {}
    for lib in libs:
        why = available(lib)
        if why is not None:
            skipped[lib.id] = why
    for lib_id, why in skipped.items():
        section["notes"].append(f"{lib_id}: {why}")
    libs = [lib for lib in libs if lib.id not in skipped]
    budget = settings.scale(150_000, 20_000, 300)
    rng = random.Random(6)
    curve: Dict[str, Dict[str, float]] = {lib.id: {} for lib in libs}
    for k in key_counts(settings):
        keys = ["hot"] if k == 1 else [f"user:{i}" for i in range(k)]
        rounds = settings.rounds if k < 1_000_000 else min(settings.rounds, 3)
        cases = {}
        for lib in libs:
            if lib.max_keys is not None and k > lib.max_keys:
                continue
            ops = max(100, int(budget * lib.weight))
            cases[lib.id] = _case(lib, keys, _sequence(keys, ops, rng))
        errors: Dict[str, str] = {}
        samples = interleave(cases, rounds, progress, f"core {k} keys", _recorder(errors))
        group = "hot key" if k == 1 else f"{k:,} keys"
        for lib in libs:
            if lib.id not in cases:
                continue
            measure = Measure(
                id=f"core/{k}/{lib.id}",
                label=lib.label,
                library=lib.dist,
                unit="ops/s",
                samples=samples[lib.id],
                group=group,
                note=errors.get(lib.id, ""),
            )
            section["measures"].append(measure.as_dict())
            if measure.samples:
                curve[lib.id][str(k)] = 1e9 / measure.median
        del keys, cases
        gc.collect()
    section["data"]["ns_per_op_by_keys"] = curve
    section["data"]["labels"] = {lib.id: lib.label for lib in libs}
    section["data"]["limit"] = (
        f"{HIGH} tokens/s, burst {HIGH}; windows (ours and limits'): {HIGH} per 1 s window "
        "(moving window: 1000/s)"
    )
    if settings.quick:
        section["notes"].append("--quick: no per-piece breakdown nor profile (full runs have them)")
    elif not settings.tiny:
        progress.plan(1)
        section["data"]["breakdown"] = breakdown(settings)
        section["data"]["profile"] = profile_check(settings)
        section["data"]["window_profiles"] = {
            kind: profile_check(settings, window_policy(kind)) for kind in ("fixed", "sliding")
        }
        progress.step("core: profile")
    return section


def breakdown(settings: Settings) -> Dict[str, float]:
    """Nanoseconds per call of each piece of ``RateLimiter.check`` on a hot key.

    Medians of interleaved rounds; the pieces are what ``check`` ->
    ``MemoryStore.apply`` -> ``bucket.step`` do, measured in isolation.
    """
    import threading

    from limiter import Limit, MemoryStore, RateLimiter
    from limiter.core.bucket import step

    n = settings.scale(200_000, 50_000, 1_000)
    limiter = RateLimiter(HIGH, HIGH)
    store = limiter.store
    assert isinstance(store, MemoryStore)
    limit = Limit(HIGH, HIGH)
    lock = threading.Lock()
    d = {"k": 0j}
    now = time.time()
    state = step(None, now, limit, 1)[0]
    prefix = limiter._prefix
    key = "hot"
    rng = range(n)

    def t_loop() -> float:
        s = time.perf_counter()
        for _ in rng:
            pass
        return time.perf_counter() - s

    def t_concat() -> float:
        s = time.perf_counter()
        for _ in rng:
            prefix + key
        return time.perf_counter() - s

    def t_clock() -> float:
        tt = time.time
        s = time.perf_counter()
        for _ in rng:
            tt()
        return time.perf_counter() - s

    def t_lock() -> float:
        acq, rel = lock.acquire, lock.release
        s = time.perf_counter()
        for _ in rng:
            acq()
            rel()
        return time.perf_counter() - s

    def t_dict() -> float:
        get = d.get
        s = time.perf_counter()
        for _ in rng:
            get("k")
            d["k"] = 1j
        return time.perf_counter() - s

    def t_step() -> float:
        s = time.perf_counter()
        for _ in rng:
            step(state, now, limit, 1)
        return time.perf_counter() - s

    def t_apply() -> float:
        apply = store.apply
        skey = prefix + key
        s = time.perf_counter()
        for _ in rng:
            apply(skey, limit, 1, None)
        return time.perf_counter() - s

    def t_check() -> float:
        check = limiter.check
        s = time.perf_counter()
        for _ in rng:
            check(key)
        return time.perf_counter() - s

    def t_allow() -> float:
        allow = limiter.allow
        s = time.perf_counter()
        for _ in rng:
            allow(key)
        return time.perf_counter() - s

    parts = {
        "empty loop": t_loop,
        "prefix + key (str concat)": t_concat,
        "time.time()": t_clock,
        "lock acquire + release": t_lock,
        "dict get + set": t_dict,
        "bucket.step() alone": t_step,
        "MemoryStore.apply()": t_apply,
        "RateLimiter.check()": t_check,
        "RateLimiter.allow()": t_allow,
    }
    try:
        import token_bucket

        consume = token_bucket.Limiter(HIGH, HIGH, token_bucket.MemoryStorage()).consume

        def t_tb() -> float:
            s = time.perf_counter()
            for _ in rng:
                consume(key)
            return time.perf_counter() - s

        parts["token-bucket consume()"] = t_tb
    except ImportError:
        pass
    samples = interleave(
        {name: (lambda f=f: f()) for name, f in parts.items()},
        max(3, settings.rounds),
        Progress(enabled=False),
        "breakdown",
    )
    out = {}
    for name, values in samples.items():
        values.sort()
        out[name] = values[len(values) // 2] / n * 1e9
    return out


def profile_check(settings: Settings, policy: Any = None) -> str:
    """cProfile of ``check`` on 10,000 keys: where the time goes, by function.

    ``policy``: the limiter's policy (default: a token bucket at ``HIGH``).
    """
    from limiter import RateLimiter

    n = settings.scale(100_000, 30_000, 1_000)
    check = (RateLimiter(HIGH, HIGH) if policy is None else RateLimiter(policy)).check
    keys = [f"user:{i % 10_000}" for i in range(n)]
    profiler = cProfile.Profile()
    profiler.enable()
    for k in keys:
        check(k)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(8)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    # Keep the header and the table; drop the absolute paths' noise.
    return "\n".join(line.replace(str(_site()), "") for line in lines[:16])


def _site() -> str:
    import limiter

    return limiter.__file__.rsplit("limiter", 1)[0]
