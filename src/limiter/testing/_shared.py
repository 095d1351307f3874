"""What the conformance suites share: their start time, their property tests' scaffolding.

Private: import the suites from ``limiter.testing``.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, Tuple

#: The suites' start time, equal to ``limiter.testing.T0`` (a test checks it):
#: defined here too so that the suites do not import the plugin that loads them.
T0 = 1_700_000_000.0

_keys = itertools.count()


def fresh_key(prefix: str) -> str:
    """A key no other example of a property test uses."""
    return f"{prefix}-{next(_keys)}"


def property_test(make: Callable[[Any], Tuple[Dict[str, Any], Callable[..., None]]]) -> Any:
    """A suite's hypothesis test: ``make(strategies)`` gives ``given``'s strategies and the body.

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

        return needs_hypothesis

    strategies, body = make(st)
    checks = [HealthCheck.function_scoped_fixture, HealthCheck.differing_executors]
    return settings(max_examples=60, deadline=None, suppress_health_check=checks)(
        given(**strategies)(body)
    )


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
