"""Prometheus metrics of rate-limit decisions (extra ``prometheus``: ``prometheus_client``):
``PrometheusMetrics``, an ``on_decision`` observer.  The metrics, their labels and
queries: docs/observability.md "Prometheus metrics".
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple

from limiter.events import DecisionEvent
from limiter.metrics import STORE_SECONDS_BUCKETS, WAIT_SECONDS_BUCKETS, slots_moved

try:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        REGISTRY,
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        generate_latest,
    )
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess
    if exc.name is None or exc.name.partition(".")[0] != "prometheus_client":
        raise
    raise ModuleNotFoundError(
        "limiter.metrics.prometheus needs prometheus_client: "
        'pip install "tokenlimiter[prometheus]"',
        name="prometheus_client",
    ) from exc

__all__ = ["PrometheusMetrics"]

BUCKETS = STORE_SECONDS_BUCKETS  # shared with the other exporter
_BUCKETS = {"durations": BUCKETS, "waits": WAIT_SECONDS_BUCKETS}

_FALLBACK = "fallback"
_ERROR = "error"
_GIVEN = "given"
#: Outcomes that say nothing of which store decides: an error, and a slot's late give
#: (the fallback, if it holds the slot, takes it back): the fallback gauge stays.
_NOT_DECIDED = frozenset({_ERROR, "expired"})


#: The metrics: (attribute of ``_Metrics``, type, name, help, label names).
_DEFINITIONS: Tuple[Tuple[str, Any, str, str, Tuple[str, ...]], ...] = (
    (
        "decisions",
        Counter,
        "limiter_decisions_total",
        "Rate-limit decisions, by limiter, policy (the limit that decided) and outcome.",
        ("limiter", "policy", "outcome"),
    ),
    (
        "durations",
        Histogram,
        "limiter_store_duration_seconds",
        "Time the rate limiter's store took per operation, seconds.",
        ("store", "operation"),
    ),
    (
        "errors",
        Counter,
        "limiter_store_errors_total",
        "Rate-limit decisions that failed with a store error.",
        ("limiter", "store"),
    ),
    (
        "fallback",
        Gauge,
        "limiter_fallback_active",
        "1 while the limiter's decisions come from its store's in-memory fallback.",
        ("limiter",),
    ),
    (
        "waits",
        Histogram,
        "limiter_wait_seconds",
        "Time requests waited for their turn (an adapter's max_wait), by limiter and outcome.",
        ("limiter", "outcome"),
    ),
    (
        "slots",
        Gauge,
        "limiter_slots_held",
        "Slots of Concurrency policies this process holds (taken, not given back yet).",
        ("limiter", "policy"),
    ),
)


class _Metrics:
    """The metrics of one registry, and their labelled children by label values."""

    decisions: Counter
    durations: Histogram
    errors: Counter
    fallback: Gauge
    waits: Histogram
    slots: Gauge

    def __init__(self, registry: CollectorRegistry) -> None:
        made: List[Any] = []  # unregistered again if a later name is taken
        try:
            for attribute, kind, name, documentation, labels in _DEFINITIONS:
                extra = {"buckets": _BUCKETS[attribute]} if kind is Histogram else {}
                made.append(kind(name, documentation, labels, registry=registry, **extra))
                setattr(self, attribute, made[-1])
        except ValueError:
            for collector in made:
                registry.unregister(collector)
            raise
        self.lock = threading.Lock()  # so that a fallback gauge and its state agree
        # Children by label values (a race between threads makes the same
        # child twice, which prometheus_client hands back both times): those
        # of every decision by their own keys, the rest by (attribute, labels).
        self.decision_children: Dict[Tuple[str, str, str], Counter] = {}
        self.duration_children: Dict[str, Histogram] = {}
        self.children: Dict[Tuple[str, ...], Any] = {}
        # limiter -> (its gauge child, whether it reads 1): set only on a change.
        self.fallback_children: Dict[str, Tuple[Gauge, bool]] = {}

    def child(self, attribute: str, *labels: str) -> Any:
        """The metric ``attribute``'s child of ``labels``, made on first use."""
        key = (attribute, *labels)
        found = self.children.get(key)
        if found is None:
            found = self.children[key] = getattr(self, attribute).labels(*labels)
        return found


_lock = threading.Lock()
_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, _Metrics] = weakref.WeakKeyDictionary()


def _metrics_of(registry: CollectorRegistry) -> _Metrics:
    with _lock:
        metrics = _by_registry.get(registry)
        if metrics is None:
            metrics = _by_registry[registry] = _Metrics(registry)
        return metrics


class PrometheusMetrics:
    """An ``on_decision`` observer that counts decisions in Prometheus metrics.

    ``registry``: a ``CollectorRegistry`` (default: prometheus_client's
    ``REGISTRY``).  Every instance on one registry shares its metrics.
    ``TypeError`` for another registry type; ``ValueError`` when other code
    already registered one of the metric names there.
    """

    #: The content type to serve ``generate_latest()``'s text with (``CONTENT_TYPE_LATEST``).
    content_type: str = CONTENT_TYPE_LATEST

    def __init__(self, registry: Optional[CollectorRegistry] = None) -> None:
        if registry is None:
            registry = REGISTRY
        elif not isinstance(registry, CollectorRegistry):
            raise TypeError(
                f"registry must be a prometheus_client CollectorRegistry or None, got {registry!r}"
            )
        self.registry: CollectorRegistry = registry
        metrics = _metrics_of(registry)
        self._metrics = metrics
        self._decisions = metrics.decision_children
        self._durations = metrics.duration_children
        self._fallback = metrics.fallback_children

    def __call__(self, event: DecisionEvent) -> None:
        outcome = event.outcome
        step, policies = slots_moved(event)
        for policy in policies:  # none unless a slot moved
            self._metrics.child("slots", event.limiter, policy).inc(step)
        if outcome == _GIVEN:  # a slot given back is not a decision
            return
        key = (event.limiter, event.policy, outcome)
        decisions = self._decisions.get(key)
        if decisions is None:
            decisions = self._decisions[key] = self._metrics.decisions.labels(
                event.limiter, event.policy, str(outcome)
            )
        decisions.inc()
        if event.waited:
            self._metrics.child("waits", event.limiter, str(outcome)).observe(event.waited)
        store = event.store
        active = outcome == _FALLBACK
        if not active:  # (a fallback's time is not the store's)
            duration = self._durations.get(store)
            if duration is None:
                duration = self._durations[store] = self._metrics.durations.labels(store, "check")
            duration.observe(event.store_seconds)
        state = self._fallback.get(event.limiter)
        if outcome == _ERROR:
            self._metrics.child("errors", event.limiter, store).inc()
        if outcome in _NOT_DECIDED:
            if state is None:  # a new limiter: its series, at 0
                self._switch(event.limiter, False, new=True)
        elif state is None or state[1] is not active:
            self._switch(event.limiter, active)

    def _switch(self, limiter: str, active: bool, new: bool = False) -> None:
        """Set ``limiter``'s fallback gauge to ``active`` (``new``: only if it has none yet)."""
        metrics = self._metrics
        with metrics.lock:
            state = self._fallback.get(limiter)
            if state is None:
                gauge = metrics.fallback.labels(limiter)
            elif state[1] is active or new:
                return
            else:
                gauge = state[0]
            gauge.set(1 if active else 0)
            self._fallback[limiter] = (gauge, active)

    def generate_latest(self) -> bytes:
        """The registry's metrics in the Prometheus text format (serve with ``content_type``)."""
        return generate_latest(self.registry)

    def __repr__(self) -> str:
        return f"PrometheusMetrics(registry={self.registry!r})"
