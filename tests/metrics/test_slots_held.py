"""Slots held (issue 26): ``limiter_slots_held`` (Prometheus) and ``limiter.slots.held`` (OTel).

Both are fed by the decision events: an admitted take +1 for each
``Concurrency`` policy of the limiter, a give (``"given"``, or ``"expired"``
when its lease had run out) -1. Read back from a real ``CollectorRegistry``
and the OpenTelemetry SDK's ``InMemoryMetricReader``, with exact values.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Iterable, List, Tuple

import pytest

pytest.importorskip(
    "prometheus_client", reason='prometheus_client is not installed: pip install -e ".[dev]"'
)
pytest.importorskip(
    "opentelemetry.sdk.metrics",
    reason='the OpenTelemetry SDK is not installed: pip install -e ".[dev]"',
)

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from limiter import Concurrency, ManualClock, MemoryStore, RateLimiter
from limiter.adapters.wsgi import RateLimitMiddleware
from limiter.events import DecisionEvent, Outcome, fan_out
from limiter.metrics import slots_moved
from limiter.metrics.otel import OTelMetrics
from limiter.metrics.prometheus import PrometheusMetrics


class Exporters:
    """A Prometheus registry and an OTel in-memory reader observing the same limiters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reader = InMemoryMetricReader()
        otel = OTelMetrics(MeterProvider(metric_readers=[self.reader]))
        self.observer = fan_out(PrometheusMetrics(self.registry), otel)

    def limiter(self, limits: Any, **options: Any) -> RateLimiter:
        options.setdefault("clock", ManualClock())
        return RateLimiter(limits, on_decision=self.observer, **options)

    def prometheus(self) -> Dict[tuple, float]:
        """``limiter_slots_held`` by (limiter, policy): its only labels."""
        return {
            (sample.labels["limiter"], sample.labels["policy"]): sample.value
            for family in self.registry.collect()
            for sample in family.samples
            if sample.name == "limiter_slots_held" and set(sample.labels) == {"limiter", "policy"}
        }

    def otel(self) -> Dict[tuple, float]:
        """``limiter.slots.held`` by (limiter, policy): its only attributes."""
        found = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != "limiter.slots.held":
                        continue
                    assert not metric.data.is_monotonic  # an UpDownCounter
                    for point in metric.data.data_points:
                        assert set(point.attributes) == {"limiter", "policy"}
                        labels = point.attributes
                        found[labels["limiter"], labels["policy"]] = point.value
        return found

    def held(self) -> Dict[tuple, float]:
        """The slots held, the same in both exporters."""
        prometheus = self.prometheus()
        assert self.otel() == prometheus
        return prometheus

    def decisions(self, limiter: str) -> Dict[str, float]:
        """``limiter_decisions_total`` of ``limiter`` by outcome (every policy summed)."""
        found: Dict[str, float] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name == "limiter_decisions_total" and sample.labels["limiter"] == limiter:
                    outcome = sample.labels["outcome"]
                    found[outcome] = found.get(outcome, 0) + sample.value
        return found


@pytest.fixture
def exporters() -> Exporters:
    return Exporters()


def test_three_takes_and_a_give_hold_two_and_an_expired_give_lowers_it(
    exporters: Exporters,
) -> None:
    clock = ManualClock()
    gw = exporters.limiter({"inflight": Concurrency(3, lease=10)}, name="gw", clock=clock)
    first, second, third = (gw.slot("alice") for _ in range(3))
    assert all(slot.take().allowed for slot in (first, second, third))
    assert exporters.held() == {("gw", "inflight"): 3}
    assert not gw.slot("alice").take().allowed  # refused: takes nothing
    assert exporters.held() == {("gw", "inflight"): 3}
    assert first.give() is True
    assert exporters.held() == {("gw", "inflight"): 2}
    clock.advance(11)  # the leases run out while second and third still work
    assert second.give() is False  # expired: its holder no longer holds it
    assert exporters.held() == {("gw", "inflight"): 1}
    assert third.give() is False
    assert exporters.held() == {("gw", "inflight"): 0}
    # A give in time is no decision; an expired one counts as before.
    assert exporters.decisions("gw") == {"allowed": 3, "denied": 1, "expired": 2}


def test_every_concurrency_policy_of_a_limiter_is_a_series_and_the_rate_none(
    exporters: Exporters,
) -> None:
    limits = {"rate": "2/minute", "inflight": Concurrency(3), "pool": Concurrency(10)}
    api = exporters.limiter(limits, name="api")
    slots = [api.slot(key) for key in ("alice", "bob", "alice")]
    assert [slot.take().allowed for slot in slots] == [True, True, True]
    assert exporters.held() == {("api", "inflight"): 3, ("api", "pool"): 3}
    assert not api.slot("alice").take().allowed  # the rate refuses: no slot taken
    assert exporters.held() == {("api", "inflight"): 3, ("api", "pool"): 3}
    assert slots[0].give() is True
    assert exporters.held() == {("api", "inflight"): 2, ("api", "pool"): 2}
    labels = [s.labels for family in exporters.registry.collect() for s in family.samples]
    assert not any({"alice", "bob"} & set(values.values()) for values in labels)  # never a label


def test_rate_limiters_beside_them_move_no_gauge(exporters: Exporters) -> None:
    rates = exporters.limiter({"a": "1/minute", "b": "5/minute"}, name="rates")
    assert [rates.allow("k") for _ in range(2)] == [True, False]
    assert exporters.held() == {}
    inflight = exporters.limiter(Concurrency(2), name="one")  # its policy: "default"
    with inflight.slot("k"):
        assert exporters.held() == {("one", "default"): 1}
    assert exporters.held() == {("one", "default"): 0}


def test_async_slots_move_it_too(exporters: Exporters) -> None:
    gw = exporters.limiter({"inflight": Concurrency(2)}, name="gw")
    seen: List[Dict[tuple, float]] = []

    async def main() -> None:
        async with gw.aslot("k"), gw.aslot("k"):
            seen.append(exporters.held())
        seen.append(exporters.held())

    asyncio.run(main())
    assert seen == [{("gw", "inflight"): 2}, {("gw", "inflight"): 0}]


def test_a_take_decided_by_the_fallback_is_held_too(exporters: Exporters) -> None:
    class Degraded(MemoryStore):
        using_fallback = True  # as a shared store's breaker says while its primary is down

    gw = exporters.limiter({"inflight": Concurrency(2)}, name="gw", store=Degraded())
    slot = gw.slot("k")
    assert slot.take().allowed
    assert exporters.held() == {("gw", "inflight"): 1}
    assert slot.give() is True
    assert exporters.held() == {("gw", "inflight"): 0}
    assert exporters.decisions("gw") == {"fallback": 1}


def test_the_wsgi_adapter_holds_it_until_the_server_closes_the_response(
    exporters: Exporters,
) -> None:
    gw = exporters.limiter({"inflight": Concurrency(3, lease=60)}, name="gw")

    def view(environ: Dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"streamed"]

    app = RateLimitMiddleware(view, gw, key_func=lambda request: "k")
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "203.0.113.7"}
    bodies = [app(dict(environ), lambda status, headers, exc_info=None: None) for _ in range(3)]
    assert [b"".join(body) for body in bodies] == [b"streamed"] * 3
    assert exporters.held() == {("gw", "inflight"): 3}  # sent, not closed yet
    for left, body in zip((2, 1, 0), bodies):
        body.close()  # type: ignore[attr-defined]
        assert exporters.held() == {("gw", "inflight"): left}


def test_slots_moved_counts_what_a_holder_took_and_gave_back_never_a_check() -> None:
    events: List[DecisionEvent] = []
    clock = ManualClock()
    gw = RateLimiter(
        {"rate": "10/minute", "inflight": Concurrency(1, lease=5)},
        clock=clock,
        on_decision=events.append,
    )

    def moved() -> List[Tuple[str, int, Tuple[str, ...]]]:
        seen = [(str(e.outcome), *slots_moved(e)) for e in events]
        events.clear()
        return seen

    taken = gw.slot("k")
    assert taken.take().allowed and not gw.slot("k").take().allowed
    assert moved() == [("allowed", 1, ("inflight",)), ("denied", 0, ())]
    # A check charges the rate alone and takes no slot; a second take by the
    # holder only renews its lease: neither moves the gauge.
    assert gw.check("k", {"rate": 1}).allowed and taken.take().allowed
    assert moved() == [("allowed", 0, ()), ("allowed", 0, ())]
    clock.advance(6)  # its lease runs out: another holder takes the slot
    other = gw.slot("k")
    assert other.take().allowed
    assert not taken.renew().allowed  # lost to its lease: the holder holds nothing now
    assert taken.give() is False  # nothing more to give
    assert moved() == [
        ("allowed", 1, ("inflight",)),
        ("expired", -1, ("inflight",)),
        ("expired", 0, ()),
    ]
    assert other.give() is True
    assert moved() == [("given", -1, ("inflight",))]
    assert slots_moved(DecisionEvent("l", "", Outcome.ERROR, None, 1, "k", 0.0, 0.0, "S")) == (
        0,
        (),
    )
