"""What the conformance suites share: their start time, how they call a store, property tests.

Private: import the suites from ``limiter.testing``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, TypeVar, cast

from limiter.core.bucket import step

if TYPE_CHECKING:
    from limiter.core.costs import Cost
    from limiter.core.result import RateLimitResult

T = TypeVar("T")

#: The suites' start time, equal to ``limiter.testing.T0`` (a test checks it):
#: defined here too so that the suites do not import the plugin that loads them.
T0 = 1_700_000_000.0

_keys = itertools.count()


def fresh_key(prefix: str) -> str:
    """A key no other example of a property test uses."""
    return f"{prefix}-{next(_keys)}"


class StoreDriver:
    """How the store suites call a store (``mode``, ``threads``: see ``StoreConformance``)."""

    mode = "sync"
    threads = 16

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine to completion (async mode)."""
        return asyncio.run(coro)

    def call(self, target: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        """``target.<method>(...)``, or ``target.a<method>(...)`` run by ``run`` (async mode)."""
        if self.mode == "async":
            return self.run(getattr(target, "a" + method)(*args, **kwargs))
        return getattr(target, method)(*args, **kwargs)

    def apply(
        self, store: Any, key: str, limit: Any, cost: float = 1, now: Optional[float] = T0
    ) -> RateLimitResult:
        return cast("RateLimitResult", self.call(store, "apply", key, limit, cost, now))

    def apply_many(
        self,
        store: Any,
        keys: List[str],
        limits: Sequence[Any],
        cost: Cost = 1,
        now: Optional[float] = T0,
    ) -> RateLimitResult:
        return cast("RateLimitResult", self.call(store, "apply_many", keys, limits, cost, now))

    def reset(self, store: Any, key: str) -> None:
        self.call(store, "reset", key)

    def replay(
        self, store: Any, prefix: str, policy: Any, steps: Iterable[Tuple[float, Any]]
    ) -> None:
        """Send ``steps`` (``(seconds on, cost)`` from ``T0``; a callable cost is
        ``cost(now)``) for a fresh key under ``policy``; each result must be what
        ``limiter.core.bucket.step`` computes (the property tests' body)."""
        key = fresh_key(prefix)
        state, now = None, T0
        for seconds, cost in steps:
            now += seconds
            if callable(cost):
                cost = cost(now)
            state, expected = step(state, now, policy, cost)
            assert_same_result(self.apply(store, key, policy, cost, now), expected)
        self.reset(store, key)

    def flood(self, store: Any, checks: Sequence[Tuple[str, Any]]) -> int:
        """How many pass of ``checks`` (``(key, policy)``, cost 1) sent by each of
        ``threads`` threads at once (``at_once``)."""
        return self.at_once(store, [[(key, policy, 1) for key, policy in checks]] * self.threads)

    def at_once(self, store: Any, batches: Sequence[Sequence[Tuple[str, Any, Any]]]) -> int:
        """How many pass of ``batches``' ``(key, policy, cost)`` at ``T0``, a thread per
        batch started together (skipped when ``threads`` is 0); in async mode, all
        gathered on one loop.
        """
        if self.mode == "async":

            async def gather() -> int:
                calls = [store.aapply(*check, T0) for batch in batches for check in batch]
                return sum(r.allowed for r in await asyncio.gather(*calls))

            return self.run(gather())
        if self.threads == 0:
            import pytest

            pytest.skip("this store is documented as not thread-safe")
        admitted: List[int] = []
        barrier = threading.Barrier(len(batches))

        def worker(batch: Sequence[Tuple[str, Any, Any]]) -> None:
            barrier.wait()
            admitted.append(sum(self.apply(store, *check).allowed for check in batch))

        threads = [threading.Thread(target=worker, args=(batch,)) for batch in batches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(admitted)


def property_test(strategies: Callable[[Any], Dict[str, Any]]) -> Callable[..., Any]:
    """A decorator making a suite's method a hypothesis test, ``given`` ``strategies(st)``.

    One test function serves every subclass (one executor per store); each
    example uses its own key (``fresh_key``), so the shared ``store`` fixture
    is harmless.  Without hypothesis (a test dependency, not a runtime one)
    the test skips, so the suites load without it.
    """
    import pytest

    try:
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st
    except ImportError:  # pragma: no cover

        def needs_hypothesis(self: Any) -> None:
            pytest.skip("install hypothesis to run the property test")

        return lambda body: needs_hypothesis

    checks = [HealthCheck.function_scoped_fixture, HealthCheck.differing_executors]
    run = settings(max_examples=60, deadline=None, suppress_health_check=checks)
    return lambda body: run(given(**strategies(st))(body))


def assert_same_result(got: Any, expected: Any) -> None:
    """A store's result ``got`` is ``step``'s ``expected``: the same figures, waits to 1e-5 s."""
    import pytest

    assert (got.allowed, got.limit, got.remaining, got.kind) == (
        expected.allowed,
        expected.limit,
        expected.remaining,
        expected.kind,
    )
    assert got.reset_after == pytest.approx(expected.reset_after, abs=1e-5)
    assert got.retry_after == pytest.approx(expected.retry_after, abs=1e-5)
