"""Section ``slots``: what a concurrency slot costs (take + give back) against a ``check()``.

The same run measures both stores, each against its own plain ``check()`` on
a hot key at a rate that admits everything (``peers.HIGH``), interleaved
round by round, so the headline is a per-round time ratio:

* ``with limiter.slot(key): pass`` on ``Concurrency(3)``: a new ``Slot`` (a
  random holder), one step to take the slot, one to give it back;
* ``take()`` + ``give()`` of one ``Slot`` reused: the same two steps without
  the ``Slot`` object;
* ``with limiter.slot(key)`` on a rate limit beside ``Concurrency(3)``
  (taken all or nothing, given back on the concurrency key alone) against a
  ``check()`` of two rate limits.

Memory: ``MemoryStore``, nanoseconds per operation.  Redis: ``RedisStore``
on this run's server (``bench/redisenv.py``), microseconds per operation,
and the round trips each operation sends (counted at the socket).  A store
that refuses a ``Concurrency`` policy (any error on a first slot, before
timing) leaves its rows NOT MEASURED with the error, nothing half-measured.
Alone: ``python -m bench --only slots``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from . import common
from .common import Measure, Progress, Settings, Unavailable
from .peers import HIGH

#: The rows measured on each store.
CHECK, SLOT, REUSED, CHECK2, SLOT2 = (
    "check()",
    "with slot(): take + give back",
    "take() + give(), one Slot reused",
    "check(), 2 rate limits",
    "with slot(), rate + Concurrency",
)

#: The headline: pair -> (the slot's row, the check's row it is divided by).
PAIRS: Dict[str, Tuple[str, str]] = {
    "one policy": (SLOT, CHECK),
    "one policy, Slot reused": (REUSED, CHECK),
    "rate + Concurrency": (SLOT2, CHECK2),
}
#: store -> (the unit of its figures, seconds -> that unit)
UNITS = {"memory": ("ns/op", 1e9), "redis": ("us/op", 1e6)}

Op = Callable[[], Any]


def _ops(store: Callable[[], Any]) -> Dict[str, Op]:
    """Each row's operation on a fresh store from ``store()``; raises when a slot is refused."""
    from limiter import Concurrency, Limit, RateLimiter

    check = RateLimiter(HIGH, HIGH, store=store()).check
    check2 = RateLimiter({"a": Limit(HIGH, HIGH), "b": Limit(HIGH, HIGH)}, store=store()).check
    alone = RateLimiter(Concurrency(3), store=store())
    both = RateLimiter({"rate": Limit(HIGH, HIGH), "inflight": Concurrency(3)}, store=store())
    slot = alone.slot
    reused = alone.slot("reused")
    slot2 = both.slot

    def with_slot() -> None:
        with slot("hot"):
            pass

    def take_give() -> None:
        reused.take()
        reused.give()

    def with_slot2() -> None:
        with slot2("hot"):
            pass

    ops = {CHECK: lambda: check("hot"), SLOT: with_slot, REUSED: take_give}
    ops.update({CHECK2: lambda: check2("hot"), SLOT2: with_slot2})
    for op in ops.values():
        op()  # the store's verdict on the policy (and a script loaded), before timing
    if not (reused.take()[0] and reused.give()):
        raise RuntimeError(f"a lone slot was not taken and given back: {reused.result}")
    return ops


def _case(op: Op, n: int, scale: float) -> Callable[[], float]:
    """A case for ``interleave``: ``n`` sequential calls of ``op``, in ``scale`` per second."""

    def loop() -> None:
        for _ in range(n):
            op()

    return lambda: common.timed(loop) / n * scale


def measure(
    name: str, ops: Dict[str, Op], n: int, rounds: int, progress: Progress
) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Time ``ops`` interleaved: (the measures, the per-round ratios of ``PAIRS``)."""
    unit, scale = UNITS[name]
    samples = common.interleave(
        {row: _case(op, n, scale) for row, op in ops.items()}, rounds, progress, f"slots {name}"
    )
    measures = [
        Measure(
            id=f"slots/{name}/{row}",
            label=row,
            library="tokenlimiter",
            unit=unit,
            samples=values,
            group=f"{name}, hot key",
        ).as_dict()
        for row, values in samples.items()
    ]
    vs_check = {
        pair: common.summary(common.ratios(samples[slot], samples[check]))
        for pair, (slot, check) in PAIRS.items()
        if samples.get(slot) and samples.get(check)
    }
    return measures, vs_check


def _memory_store() -> Any:
    from limiter import MemoryStore

    return MemoryStore()


def _redis_ops() -> Tuple[Dict[str, Op], Dict[str, float]]:
    """The rows on ``RedisStore``, and each row's round trips per operation."""
    try:
        import redis  # noqa: F401
    except ImportError:
        raise Unavailable("redis-py is not installed") from None
    from .redis_bench import PREFIX, _counting_client, _round_trips

    try:
        from limiter.backends.redis import RedisStore
    except ImportError as exc:
        raise Unavailable(f"limiter.backends.redis not available in this tree ({exc})") from None
    clients: List[Any] = []

    def store() -> Any:
        clients.append(_counting_client())
        return RedisStore(clients[-1], prefix=PREFIX + "slots:")

    ops = _ops(store)
    # _ops made one store (one client) per limiter, in this order.
    counters = dict(zip([CHECK, CHECK2, SLOT, SLOT2], (c.counter for c in clients)))
    counters[REUSED] = counters[SLOT]
    return ops, {row: _round_trips(ops[row], counters[row]) for row in ops}


def run(settings: Settings, progress: Progress) -> Dict[str, Any]:
    section = common.new_section("slots")
    rounds = settings.rounds if not settings.tiny else 1
    data: Dict[str, Any] = {}
    section["data"] = data
    n = settings.scale(200_000, 20_000, 300)
    measures, vs_check = measure("memory", _ops(_memory_store), n, rounds, progress)
    section["measures"] += measures
    data["memory"] = {"ops_per_round": n, "vs_check": vs_check}
    data["redis"] = redis_rows(settings, rounds, progress, section)
    return section


def redis_rows(
    settings: Settings, rounds: int, progress: Progress, section: Dict[str, Any]
) -> Dict[str, Any]:
    """The Redis half: its measures go into ``section``; returns its data, or why not measured."""
    from . import redisenv

    try:
        redisenv.url()
        ops, trips = _redis_ops()
        n = settings.scale(3_000, 300, 50)
        measures, vs_check = measure("redis", ops, n, rounds, progress)
    except Unavailable as exc:
        return {"not_measured": str(exc)}
    except Exception as exc:  # the store refuses Concurrency (its mirror has not landed)
        why = f"RedisStore could not take and give back a slot in this tree: {exc!r}"
        progress.write(f"slots: NOT MEASURED on Redis, {why}")
        return {"not_measured": why}
    finally:
        _cleanup()
    section["measures"] += measures
    return {"ops_per_round": n, "vs_check": vs_check, "round_trips": trips}


def _cleanup() -> None:
    from . import redisenv

    try:
        redisenv.url()
    except Unavailable:
        return
    from .redis_bench import _cleanup as delete_bench_keys

    delete_bench_keys()


def ratio_rows(data: Dict[str, Any]) -> List[Tuple[str, str, Optional[Dict[str, float]]]]:
    """(store, pair, the ratio's summary or None when not measured) for the report."""
    rows: List[Tuple[str, str, Optional[Dict[str, float]]]] = []
    for name in UNITS:
        by = data.get(name) or {}
        for pair in PAIRS:
            rows.append((name, pair, (by.get("vs_check") or {}).get(pair)))
    return rows
