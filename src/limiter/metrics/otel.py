"""OpenTelemetry metrics: an ``on_decision`` observer (extra ``otel``), with the
instruments of ``limiter.metrics.prometheus``.  docs/observability.md "OpenTelemetry".
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Optional, Tuple

from limiter.events import DecisionEvent, Outcome
from limiter.metrics import STORE_SECONDS_BUCKETS, WAIT_SECONDS_BUCKETS, slots_moved

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

__all__ = ["OTelMetrics"]


_INSTALL = 'OTelMetrics needs the OpenTelemetry API: pip install "tokenlimiter[otel]"'

_Attributes = Dict[str, str]
# What one (limiter, store, policy, outcome) records: the decision's attributes,
# the duration's (None: not recorded), the error's (None: not an error), and
# the fallback state it sets (None: leaves it).
_Plan = Tuple[_Attributes, Optional[_Attributes], Optional[_Attributes], Optional[int]]
_FALLBACK_STATE = {
    Outcome.FALLBACK.value: 1,
    Outcome.ALLOWED.value: 0,
    Outcome.DENIED.value: 0,
    Outcome.SHADOW_DENIED.value: 0,
}
_GIVEN = Outcome.GIVEN.value


class OTelMetrics:
    """An ``on_decision`` observer recording on a meter ``"limiter"`` of
    ``meter_provider`` (``None``: the global one), for any number of limiters.
    ``ImportError`` without opentelemetry-api; ``TypeError`` for a provider without
    ``get_meter``.  Thread-safe.

        limiter = RateLimiter("10/s", name="api", on_decision=OTelMetrics())
    """

    def __init__(self, meter_provider: Optional[MeterProvider] = None) -> None:
        try:
            from opentelemetry import metrics
        except ImportError as exc:
            raise ImportError(_INSTALL) from exc
        if meter_provider is None:
            meter_provider = metrics.get_meter_provider()
        elif not callable(getattr(meter_provider, "get_meter", None)):
            raise TypeError(
                f"meter_provider must be an OpenTelemetry MeterProvider or None, "
                f"got {meter_provider!r}"
            )
        self._observation = metrics.Observation
        # Read from sys.modules: this layer may not import the facade.
        version = getattr(sys.modules.get("limiter"), "__version__", None)
        self.meter = meter = meter_provider.get_meter("limiter", version)
        self._add: Callable[..., None] = meter.create_counter(
            "limiter.decisions",
            unit="{decision}",
            description="Rate limiter decisions, by limiter, policy and outcome.",
        ).add
        self._record: Callable[..., None] = _histogram(
            meter,
            "limiter.store.duration",
            "Wall time of the rate limiter's store calls.",
            STORE_SECONDS_BUCKETS,
        ).record
        self._record_wait = _histogram(
            meter,
            "limiter.wait.duration",
            "Time requests waited for their turn (an adapter's max_wait).",
            WAIT_SECONDS_BUCKETS,
        ).record
        self._add_error: Callable[..., None] = meter.create_counter(
            "limiter.store.errors",
            unit="{error}",
            description="Rate limiter store failures (StoreError), by limiter and store.",
        ).add
        self._add_held: Callable[..., None] = meter.create_up_down_counter(
            "limiter.slots.held",
            unit="{slot}",
            description="Slots of Concurrency policies held (taken, not given back yet).",
        ).add
        # (limiter, policy) -> the attributes of its slots held.
        self._held_attributes: Dict[Tuple[str, str], _Attributes] = {}
        # Nested, so that a hit builds no key tuple.
        self._plans: Dict[str, Dict[str, Dict[str, Dict[Any, _Plan]]]] = {}
        self._lock = threading.Lock()
        # limiter -> 1 (fallback) or 0, and its gauge attributes; written under
        # the lock, read by the gauge's callback.
        self._fallback: Dict[str, int] = {}
        self._limiter_attributes: Dict[str, _Attributes] = {}
        self._store_attributes: Dict[str, _Attributes] = {}
        meter.create_observable_gauge(
            "limiter.fallback.active",
            callbacks=[self._observe_fallback],
            unit="1",
            description="1 while the limiter's decisions come from its store's fallback, else 0.",
        )

    def __repr__(self) -> str:
        return f"OTelMetrics(meter={getattr(self.meter, 'name', self.meter)!r})"

    def __call__(self, event: DecisionEvent) -> None:
        """Record one decision (the ``on_decision`` hook)."""
        step, policies = slots_moved(event)
        if step:
            self._held(event.limiter, policies, step)
        if event.outcome == _GIVEN:  # a slot given back is not a decision
            return
        try:
            plan = self._plans[event.limiter][event.store][event.policy][event.outcome]
        except KeyError:
            plan = self._plan(event)
        decision, duration, error, state = plan
        self._add(1, decision)
        if duration is not None:
            self._record(event.store_seconds, duration)
        if error is not None:
            self._add_error(1, error)
        if event.waited:  # by limiter, policy and outcome: the decision's attributes
            self._record_wait(event.waited, decision)
        if state is not None and self._fallback[event.limiter] != state:
            with self._lock:
                self._fallback[event.limiter] = state

    def _plan(self, event: DecisionEvent) -> _Plan:
        """Make and cache the plan of a new (limiter, store, policy, outcome)."""
        # Plain strs: an exporter sees "denied", not an Outcome member.
        limiter, store, policy = str(event.limiter), str(event.store), str(event.policy)
        outcome = event.outcome
        value = outcome.value if isinstance(outcome, Outcome) else str(outcome)
        decision = {"limiter": limiter, "policy": policy, "outcome": value}
        error: Optional[_Attributes] = None
        if value == Outcome.ERROR.value:
            error = {"limiter": limiter, "store": store}
        with self._lock:
            duration: Optional[_Attributes] = None
            if value != Outcome.FALLBACK.value:
                # One dict per store: every outcome's durations go to one series.
                duration = self._store_attributes.setdefault(
                    store, {"store": store, "operation": "check"}
                )
            plan: _Plan = (decision, duration, error, _FALLBACK_STATE.get(value))
            if event.limiter not in self._fallback:
                self._fallback[event.limiter] = 0
                self._limiter_attributes[event.limiter] = {"limiter": limiter}
            by_store = self._plans.setdefault(event.limiter, {})
            by_policy = by_store.setdefault(event.store, {})
            by_outcome = by_policy.setdefault(event.policy, {})
            # Another thread may have made it first: keep one dict per series.
            return by_outcome.setdefault(outcome, plan)

    def _held(self, limiter: str, policies: Tuple[str, ...], step: int) -> None:
        for policy in policies:
            attributes = self._held_attributes.get((limiter, policy))
            if attributes is None:
                with self._lock:  # one dict per series, whichever thread makes it
                    attributes = self._held_attributes.setdefault(
                        (limiter, policy), {"limiter": str(limiter), "policy": str(policy)}
                    )
            self._add_held(step, attributes)

    def _observe_fallback(self, options: CallbackOptions) -> Iterable[Observation]:
        make, attributes = self._observation, self._limiter_attributes
        with self._lock:
            return [make(state, attributes[name]) for name, state in self._fallback.items()]


def _histogram(meter: Any, name: str, description: str, buckets: Tuple[float, ...]) -> Any:
    """A histogram of seconds with ``buckets`` advised; a meter that takes no advice (a
    third-party ``MeterProvider``'s) gets one with its own buckets."""
    try:
        return meter.create_histogram(
            name, unit="s", description=description, explicit_bucket_boundaries_advisory=buckets
        )
    except TypeError:
        return meter.create_histogram(name, unit="s", description=description)
