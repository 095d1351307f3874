"""OpenTelemetry metrics: ``limiter.metrics.otel.OTelMetrics`` (issue 13 item 3).

Every figure is read back through the SDK's ``InMemoryMetricReader``: exact
counts by attributes, histogram counts, gauge values.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Tuple

import pytest

pytest.importorskip(
    "opentelemetry.sdk.metrics",
    reason='the OpenTelemetry SDK is not installed: pip install -e ".[dev]"',
)

from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import limiter as limiter_package
from limiter import Concurrency, RateLimiter
from limiter.adapters.wsgi import RateLimitMiddleware
from limiter.backends.memory import MemoryStore
from limiter.clock import ManualClock
from limiter.events import DecisionEvent, Outcome
from limiter.metrics import STORE_SECONDS_BUCKETS
from limiter.metrics.otel import OTelMetrics
from limiter.store import StoreError

T0 = 1_700_000_000.0
SRC = Path(__file__).resolve().parents[2] / "src"
Attrs = FrozenSet[Tuple[str, Any]]


class Down(MemoryStore):
    """A store that always fails."""

    def apply(self, key, limit, cost, now):  # type: ignore[no-untyped-def]
        raise StoreError("down")


class Degraded(MemoryStore):
    """A store whose ``using_fallback`` the test flips, as a shared store's breaker does."""

    using_fallback = False


def attrs(**labels: str) -> Attrs:
    return frozenset(labels.items())


def collect(reader: InMemoryMetricReader) -> Dict[str, Dict[Attrs, Any]]:
    """metric name -> {attributes: data point}, from one collection."""
    found: Dict[str, Dict[Attrs, Any]] = {}
    data = reader.get_metrics_data()
    if data is None:  # nothing recorded yet
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points = found.setdefault(metric.name, {})
                for point in metric.data.data_points:
                    points[frozenset(point.attributes.items())] = point
    return found


def counts(points: Dict[Attrs, Any]) -> Dict[Attrs, float]:
    return {key: point.value for key, point in points.items()}


def setup() -> Tuple[InMemoryMetricReader, OTelMetrics]:
    reader = InMemoryMetricReader()
    return reader, OTelMetrics(MeterProvider(metric_readers=[reader]))


def decided(reader: InMemoryMetricReader) -> Dict[Attrs, float]:
    return counts(collect(reader).get("limiter.decisions", {}))


def test_allowed_and_denied_decisions_are_counted_exactly() -> None:
    reader, observer = setup()
    clock = ManualClock(T0)
    limiter = RateLimiter("2/second", clock=clock, name="api", on_decision=observer)
    assert [limiter.allow("alice") for _ in range(5)] == [True, True, False, False, False]
    assert limiter.check("bob").allowed
    clock.advance(1.0)
    assert limiter.allow("alice")
    found = collect(reader)
    assert counts(found["limiter.decisions"]) == {
        attrs(limiter="api", policy="2/second", outcome="allowed"): 4,
        attrs(limiter="api", policy="2/second", outcome="denied"): 3,
    }
    # One duration per decision, none keyed by client; no error, no fallback.
    (duration,) = found["limiter.store.duration"].items()
    assert duration[0] == attrs(store="MemoryStore", operation="check")
    assert duration[1].count == 7
    assert 0.0 <= duration[1].min <= duration[1].max < 60.0
    assert tuple(duration[1].explicit_bounds) == STORE_SECONDS_BUCKETS
    assert "limiter.store.errors" not in found
    assert counts(found["limiter.fallback.active"]) == {attrs(limiter="api"): 0}
    # No series carries a client key.
    for points in found.values():
        for key in points:
            assert all(value not in ("alice", "bob") for _, value in key)


def test_attribute_values_are_plain_strings() -> None:
    reader, observer = setup()
    limiter = RateLimiter("1/second", clock=ManualClock(T0), name="api", on_decision=observer)
    limiter.allow("k")
    limiter.allow("k")
    for points in collect(reader).values():
        for key in points:
            assert all(type(value) is str for _, value in key), key


def test_shadow_mode_through_the_wsgi_middleware_counts_shadow_denials() -> None:
    reader, observer = setup()
    limiter = RateLimiter("2/second", clock=ManualClock(T0), name="api", on_decision=observer)
    statuses: List[str] = []

    def hello(environ, start_response):  # type: ignore[no-untyped-def]
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]

    app = RateLimitMiddleware(hello, limiter, mode="shadow")
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "203.0.113.7"}
    for _ in range(5):
        body = app(dict(environ), lambda status, headers, *exc: statuses.append(status))
        assert b"".join(body) == b"hello"
    assert statuses == ["200 OK"] * 5  # shadow mode refuses nothing
    # The enforced limiter shares the buckets: the third client call is denied.
    assert not limiter.allow("ip:203.0.113.7")
    assert decided(reader) == {
        attrs(limiter="api", policy="2/second", outcome="allowed"): 2,
        attrs(limiter="api", policy="2/second", outcome="shadow_denied"): 3,
        attrs(limiter="api", policy="2/second", outcome="denied"): 1,
    }
    (duration,) = collect(reader)["limiter.store.duration"].values()
    assert duration.count == 6


def test_a_failing_store_counts_errors_and_their_durations() -> None:
    reader, observer = setup()
    limiter = RateLimiter(
        "2/second", store=Down(), clock=ManualClock(T0), name="api", on_decision=observer
    )
    for _ in range(3):
        with pytest.raises(StoreError):
            limiter.allow("k")
    with pytest.raises(StoreError):
        limiter.check("k")
    found = collect(reader)
    assert counts(found["limiter.decisions"]) == {
        attrs(limiter="api", policy="", outcome="error"): 4
    }
    assert counts(found["limiter.store.errors"]) == {attrs(limiter="api", store="Down"): 4}
    assert {key: p.count for key, p in found["limiter.store.duration"].items()} == {
        attrs(store="Down", operation="check"): 4
    }
    # An error says nothing of the fallback: the limiter is reported, at 0.
    assert counts(found["limiter.fallback.active"]) == {attrs(limiter="api"): 0}


def test_the_fallback_gauge_follows_the_last_decision_of_each_limiter() -> None:
    reader, observer = setup()
    store = Degraded()
    clock = ManualClock(T0)
    api = RateLimiter("2/second", store=store, clock=clock, name="api", on_decision=observer)
    other = RateLimiter("5/second", clock=clock, name="other", on_decision=observer)
    other.allow("k")

    def gauge() -> Dict[Attrs, float]:
        return counts(collect(reader)["limiter.fallback.active"])

    api.allow("k")
    assert gauge() == {attrs(limiter="api"): 0, attrs(limiter="other"): 0}
    store.using_fallback = True
    api.allow("k")
    api.allow("k")  # a denial from the fallback is a fallback decision too
    assert gauge() == {attrs(limiter="api"): 1, attrs(limiter="other"): 0}
    assert gauge() == {attrs(limiter="api"): 1, attrs(limiter="other"): 0}  # a state, not a sum
    store.using_fallback = False
    clock.advance(1.0)
    api.allow("k")
    assert gauge() == {attrs(limiter="api"): 0, attrs(limiter="other"): 0}
    found = collect(reader)
    assert counts(found["limiter.decisions"]) == {
        attrs(limiter="api", policy="2/second", outcome="allowed"): 2,
        attrs(limiter="api", policy="2/second", outcome="fallback"): 2,
        attrs(limiter="other", policy="5/second", outcome="allowed"): 1,
    }
    # Fallback decisions are answered by the in-memory fallback: no store duration.
    assert {key: p.count for key, p in found["limiter.store.duration"].items()} == {
        attrs(store="Degraded", operation="check"): 2,
        attrs(store="MemoryStore", operation="check"): 1,
    }


def test_an_error_leaves_the_fallback_state_as_it_was() -> None:
    reader, observer = setup()

    def event(outcome: Outcome) -> DecisionEvent:
        return DecisionEvent("api", "p", outcome, None, 1, "k", 0.001, T0, "RedisStore")

    observer(event(Outcome.FALLBACK))
    observer(event(Outcome.ERROR))
    assert counts(collect(reader)["limiter.fallback.active"]) == {attrs(limiter="api"): 1}
    observer(event(Outcome.EXPIRED))  # a late give on the fallback, as Prometheus's test
    assert counts(collect(reader)["limiter.fallback.active"]) == {attrs(limiter="api"): 1}
    observer(event(Outcome.SHADOW_DENIED))
    assert counts(collect(reader)["limiter.fallback.active"]) == {attrs(limiter="api"): 0}


def test_several_limiters_share_one_observer_and_a_multi_limit_names_its_policy() -> None:
    reader, observer = setup()
    clock = ManualClock(T0)
    login = RateLimiter("1/second;3/minute", clock=clock, name="login", on_decision=observer)
    search = RateLimiter("2/second", clock=clock, name="search", on_decision=observer)
    assert [login.allow("k"), login.allow("k")] == [True, False]
    clock.advance(1.0)
    login.allow("k")
    clock.advance(1.0)
    login.allow("k")
    clock.advance(1.0)
    assert not login.allow("k")  # the minute's 3 are spent
    search.allow("k")
    # The policy is the result's: the limit with the fewest tokens left.
    assert decided(reader) == {
        attrs(limiter="login", policy="1/second", outcome="allowed"): 2,
        attrs(limiter="login", policy="3/minute", outcome="allowed"): 1,
        attrs(limiter="login", policy="1/second", outcome="denied"): 1,
        attrs(limiter="login", policy="3/minute", outcome="denied"): 1,
        attrs(limiter="search", policy="2/second", outcome="allowed"): 1,
    }


def test_acheck_is_recorded() -> None:
    import asyncio

    reader, observer = setup()
    limiter = RateLimiter("1/second", clock=ManualClock(T0), name="api", on_decision=observer)

    async def run() -> None:
        await limiter.acheck("k")
        await limiter.acheck("k")

    asyncio.run(run())
    assert decided(reader) == {
        attrs(limiter="api", policy="1/second", outcome="allowed"): 1,
        attrs(limiter="api", policy="1/second", outcome="denied"): 1,
    }


def test_the_meter_is_named_limiter_with_the_package_version() -> None:
    reader, observer = setup()
    RateLimiter("1/second", clock=ManualClock(T0), on_decision=observer).allow("k")
    data = reader.get_metrics_data()
    assert data is not None
    scopes = [scope for resource in data.resource_metrics for scope in resource.scope_metrics]
    assert [(s.scope.name, s.scope.version) for s in scopes] == [
        ("limiter", limiter_package.__version__)
    ]
    units = {m.name: m.unit for s in scopes for m in s.metrics}
    assert units == {
        "limiter.decisions": "{decision}",
        "limiter.store.duration": "s",
        "limiter.fallback.active": "1",
    }


def test_none_uses_the_global_meter_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    # The global provider can be set once per process: the lookup is patched instead.
    monkeypatch.setattr(otel_metrics, "get_meter_provider", lambda: provider)
    observer = OTelMetrics()
    RateLimiter("1/second", clock=ManualClock(T0), name="g", on_decision=observer).allow("k")
    assert decided(reader) == {attrs(limiter="g", policy="1/second", outcome="allowed"): 1}


def test_a_wrong_meter_provider_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="MeterProvider"):
        OTelMetrics("http://collector:4317")  # type: ignore[arg-type]


def test_without_opentelemetry_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ImportError, match=r'pip install "tokenlimiter\[otel\]"'):
        OTelMetrics()


def test_import_limiter_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, limiter, limiter.metrics, limiter.metrics.otel\n"
        "from limiter import RateLimiter\n"
        "RateLimiter('1/second').allow('k')\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], sys.modules\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


class Recorder:
    """A duck-typed meter provider and instruments: what the observer passes, by identity."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, float, Dict[str, str]]] = []
        self.callbacks: List[Any] = []

    def get_meter(self, name: str, version: Optional[str] = None) -> Recorder:
        return self

    def create_counter(self, name: str, **options: Any) -> Instrument:
        return Instrument(self, name)

    def create_histogram(self, name: str, **options: Any) -> Instrument:
        return Instrument(self, name)

    def create_up_down_counter(self, name: str, **options: Any) -> Instrument:
        return Instrument(self, name)

    def create_observable_gauge(self, name: str, callbacks: Iterable[Any], **options: Any) -> None:
        self.callbacks.extend(callbacks)


class Instrument:
    def __init__(self, recorder: Recorder, name: str) -> None:
        self.recorder, self.name = recorder, name

    def add(self, amount: float, attributes: Dict[str, str]) -> None:
        self.recorder.calls.append((self.name, amount, attributes))

    record = add


def test_the_steady_state_reuses_the_same_attribute_dicts() -> None:
    recorder = Recorder()
    observer = OTelMetrics(recorder)  # type: ignore[arg-type]
    limiter = RateLimiter("1/second", clock=ManualClock(T0), name="api", on_decision=observer)
    for _ in range(4):
        limiter.allow("k")
    by_name: Dict[str, List[Dict[str, str]]] = {}
    for name, _, attributes in recorder.calls:
        by_name.setdefault(name, []).append(attributes)
    decisions = by_name["limiter.decisions"]
    assert decisions[0] == {"limiter": "api", "policy": "1/second", "outcome": "allowed"}
    assert [d["outcome"] for d in decisions] == ["allowed", "denied", "denied", "denied"]
    assert decisions[1] is decisions[2] is decisions[3]  # made once per series
    durations = by_name["limiter.store.duration"]
    assert len(durations) == 4 and all(d is durations[0] for d in durations)
    assert [amount for name, amount, _ in recorder.calls if name == "limiter.decisions"] == [1] * 4


def test_slots_held_reuse_one_attribute_dict_per_series() -> None:
    recorder = Recorder()
    observer = OTelMetrics(recorder)  # type: ignore[arg-type]
    slots = RateLimiter(Concurrency(2), clock=ManualClock(T0), name="gw", on_decision=observer)
    for _ in range(2):
        with slots.slot("k"):
            pass
    held = [(amount, a) for name, amount, a in recorder.calls if name == "limiter.slots.held"]
    assert [amount for amount, _ in held] == [1, -1, 1, -1]
    assert held[0][1] == {"limiter": "gw", "policy": "default"}
    assert all(attributes is held[0][1] for _, attributes in held)


def test_concurrent_decisions_and_collections_count_exactly() -> None:
    reader, observer = setup()
    threads, per_thread = 8, 500
    limiters = [
        RateLimiter("1000000/second", clock=ManualClock(T0), name=f"l{i % 4}", on_decision=observer)
        for i in range(threads)
    ]
    start = threading.Barrier(threads + 1)

    def work(limiter: RateLimiter) -> None:
        start.wait()
        for n in range(per_thread):
            limiter.allow(f"k{n % 7}")

    workers = [threading.Thread(target=work, args=(lim,)) for lim in limiters]
    for worker in workers:
        worker.start()
    start.wait()
    while any(worker.is_alive() for worker in workers):
        collect(reader)  # the gauge's callback runs beside the writers
    for worker in workers:
        worker.join()
    assert decided(reader) == {
        attrs(limiter=f"l{i}", policy="1000000/second", outcome="allowed"): 2 * per_thread
        for i in range(4)
    }
    assert counts(collect(reader)["limiter.fallback.active"]) == {
        attrs(limiter=f"l{i}"): 0 for i in range(4)
    }


def test_waits_are_recorded_by_limiter_policy_and_outcome() -> None:
    from limiter.metrics import WAIT_SECONDS_BUCKETS
    from limiter.waiting import Waits

    reader, observer = setup()
    limiter = RateLimiter("1/second", clock=ManualClock(T0), name="w", on_decision=observer)
    waits = Waits(2.0, 10)
    assert all(waits.run(limiter, "k", 1).allowed for _ in range(3))  # waits of 0, 1, 1 s
    (wait,) = collect(reader)["limiter.wait.duration"].items()
    assert wait[0] == attrs(limiter="w", policy="1/second", outcome="allowed")
    assert (wait[1].count, wait[1].sum) == (2, pytest.approx(2.0))
    assert tuple(wait[1].explicit_bounds) == WAIT_SECONDS_BUCKETS
