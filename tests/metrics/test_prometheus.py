"""``limiter.metrics.prometheus``: exact metric values, and a real Prometheus scraping the demo.

The unit tests read the metrics back with ``registry.get_sample_value`` after
decisions made on a ``ManualClock``.  The last test is the issue's "done when":
the demo (``python -m limiter demo``) on a free loopback port takes a burst of
requests, then a real ``prometheus`` (Debian's package) started by the test on
another loopback port scrapes its ``/metrics``, and Prometheus's query API
returns the number of denials the test caused.  Without the ``prometheus``
binary that test skips with a reason, except under ``CI=true`` where it fails
(``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

pytest.importorskip(
    "prometheus_client", reason='prometheus_client is not installed: pip install -e ".[dev]"'
)

import httpx
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter
from prometheus_client.utils import floatToGoString

from helpers.needs import need
from limiter import ManualClock, MemoryStore, RateLimiter, StoreError
from limiter.adapters.wsgi import RateLimitMiddleware
from limiter.events import DecisionEvent, Outcome
from limiter.metrics.prometheus import BUCKETS, PrometheusMetrics

PROMETHEUS = shutil.which("prometheus")
TIMEOUT = 60.0  # seconds: a deadline for a real process, generous for a busy machine
LABELS = {
    "limiter_decisions": {"limiter", "policy", "outcome"},
    "limiter_store_duration_seconds": {"store", "operation", "le"},
    "limiter_store_errors": {"limiter", "store"},
    "limiter_fallback_active": {"limiter"},
}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def decisions(
    registry: CollectorRegistry, limiter: str, outcome: str, policy: Optional[str] = None
) -> Optional[float]:
    """``limiter_decisions_total`` of ``limiter`` and ``outcome`` (and ``policy``, if given).

    Without ``policy``, the one series of that limiter and outcome (``None``: none).
    """
    if policy is not None:
        labels = {"limiter": limiter, "policy": policy, "outcome": outcome}
        return registry.get_sample_value("limiter_decisions_total", labels)
    values = [
        sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == "limiter_decisions_total"
        and sample.labels["limiter"] == limiter
        and sample.labels["outcome"] == outcome
    ]
    assert len(values) <= 1, values
    return values[0] if values else None


def fallback(registry: CollectorRegistry, limiter: str) -> Optional[float]:
    return registry.get_sample_value("limiter_fallback_active", {"limiter": limiter})


def store_samples(registry: CollectorRegistry, store: str) -> Dict[str, Optional[float]]:
    """The histogram's samples for ``store``: ``count``, ``sum`` and each bucket by ``le``."""
    labels = {"store": store, "operation": "check"}
    name = "limiter_store_duration_seconds"
    samples = {
        "count": registry.get_sample_value(f"{name}_count", labels),
        "sum": registry.get_sample_value(f"{name}_sum", labels),
    }
    for bound in (*BUCKETS, float("inf")):
        le = floatToGoString(bound)
        samples[le] = registry.get_sample_value(f"{name}_bucket", {**labels, "le": le})
    return samples


def event(outcome: Outcome, *, seconds: float = 0.001, limiter: str = "l") -> DecisionEvent:
    return DecisionEvent(limiter, "10/s", outcome, None, 1, "client", seconds, 0.0, "S")


# -- exact values --------------------------------------------------------------------------


def test_allowed_and_denied_are_counted_exactly(registry) -> None:
    metrics = PrometheusMetrics(registry)
    limiter = RateLimiter("2/minute", clock=ManualClock(), name="api", on_decision=metrics)
    codes = [limiter.allow("10.0.0.1") for _ in range(5)]
    assert codes == [True, True, False, False, False]
    assert decisions(registry, "api", "allowed", policy="2/minute") == 2  # the limit's text
    assert decisions(registry, "api", "denied", policy="2/minute") == 3
    for outcome in ("shadow_denied", "error", "fallback"):
        assert decisions(registry, "api", outcome) is None
    samples = store_samples(registry, "MemoryStore")
    assert samples["count"] == 5 and samples["+Inf"] == 5
    assert samples["sum"] is not None and 0 < samples["sum"] < 5  # measured: 5 checks, < 1 s
    assert registry.get_sample_value("limiter_store_errors_total", {"limiter": "api"}) is None
    assert fallback(registry, "api") == 0  # decided by the store itself

    limiter.clock.advance(30)  # one token back
    assert limiter.allow("10.0.0.1") and not limiter.allow("10.0.0.1")
    assert decisions(registry, "api", "allowed") == 3
    assert decisions(registry, "api", "denied") == 4


def test_every_policy_of_several_limits_is_a_label(registry) -> None:
    metrics = PrometheusMetrics(registry)
    limiter = RateLimiter("2/second;3/hour", clock=ManualClock(), name="m", on_decision=metrics)
    assert [limiter.allow("k") for _ in range(3)] == [True, True, False]  # 2/second refuses
    limiter.clock.advance(10)
    assert [limiter.allow("k") for _ in range(2)] == [True, False]  # 3/hour refuses
    policies = {lim.name for lim in limiter.limits}
    assert policies == {"2/second", "3/hour"}
    allowed = sum(decisions(registry, "m", "allowed", p) or 0 for p in policies)
    assert allowed == 3
    assert decisions(registry, "m", "denied", "2/second") == 1
    assert decisions(registry, "m", "denied", "3/hour") == 1


def test_histogram_buckets_run_from_10_microseconds_to_timeouts(registry) -> None:
    metrics = PrometheusMetrics(registry)
    assert BUCKETS[0] == 0.00001 and BUCKETS[-1] == 5.0 and list(BUCKETS) == sorted(BUCKETS)
    assert 1.0 in BUCKETS
    for seconds in (0.000005, 0.00003, 0.00003, 0.002, 0.7, 3.0, 7.0):
        metrics(event(Outcome.ALLOWED, seconds=seconds))
    metrics(event(Outcome.ERROR, seconds=0.003))  # timed: how long the store took to fail
    metrics(event(Outcome.FALLBACK, seconds=0.5))  # not timed: the fallback answered
    samples = store_samples(metrics.registry, "S")
    assert samples["count"] == 8
    assert samples["sum"] == pytest.approx(0.000005 + 0.00006 + 0.002 + 0.7 + 3.0 + 7.0 + 0.003)
    assert samples["1e-05"] == 1  # 5 µs
    assert samples["2.5e-05"] == 1
    assert samples["5e-05"] == 3  # + the two of 30 µs
    assert samples["0.001"] == 3
    assert samples["0.0025"] == 4  # + 2 ms
    assert samples["0.005"] == 5  # + the error's 3 ms
    assert samples["0.5"] == 5
    assert samples["1.0"] == 6  # + 0.7 s
    assert samples["2.5"] == 6
    assert samples["5.0"] == 7  # + 3 s
    assert samples["+Inf"] == 8  # + 7 s
    assert None not in samples.values()


def test_shadow_mode_counts_shadow_denied_and_refuses_nothing(registry) -> None:
    metrics = PrometheusMetrics(registry)
    limiter = RateLimiter("2/hour", clock=ManualClock(), name="web", on_decision=metrics)

    def app(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    middleware = RateLimitMiddleware(app, limiter, mode="shadow")
    statuses: List[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        statuses.append(status)

    for _ in range(5):
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "203.0.113.7"}
        assert b"".join(middleware(environ, start_response)) == b"ok"
    assert statuses == ["200 OK"] * 5
    assert decisions(registry, "web", "allowed") == 2
    assert decisions(registry, "web", "shadow_denied") == 3
    assert decisions(registry, "web", "denied") is None
    assert fallback(registry, "web") == 0


class FailingStore(MemoryStore):
    def apply(self, *args: Any, **kwargs: Any) -> Any:
        raise StoreError("the store is down")


class FallingBackStore(MemoryStore):
    """A store whose decisions come from its fallback while ``using_fallback`` is True."""

    using_fallback = True


def test_store_errors_are_counted_and_timed(registry) -> None:
    metrics = PrometheusMetrics(registry)
    limiter = RateLimiter("5/s", store=FailingStore(), name="db", on_decision=metrics)
    for _ in range(2):
        with pytest.raises(StoreError):
            limiter.check("k")
    errors = {"limiter": "db", "store": "FailingStore"}
    assert registry.get_sample_value("limiter_store_errors_total", errors) == 2
    assert decisions(registry, "db", "error", policy="") == 2  # no limit decided
    assert store_samples(registry, "FailingStore")["count"] == 2
    assert fallback(registry, "db") == 0  # every limiter seen has the series, at 0


def test_fallback_gauge_follows_the_outcomes(registry) -> None:
    metrics = PrometheusMetrics(registry)
    store = FallingBackStore()
    limiter = RateLimiter("100/s", store=store, name="fb", clock=ManualClock(), on_decision=metrics)
    assert limiter.allow("k")
    assert decisions(registry, "fb", "fallback") == 1
    assert decisions(registry, "fb", "allowed") is None
    assert fallback(registry, "fb") == 1
    store.using_fallback = False  # the primary answers again
    assert limiter.allow("k")
    assert fallback(registry, "fb") == 0
    store.using_fallback = True
    assert limiter.allow("k")
    assert fallback(registry, "fb") == 1
    # Only the primary's decision is timed: the fallback's are not the store's latency.
    assert store_samples(registry, "FallingBackStore")["count"] == 1
    metrics(event(Outcome.ERROR, limiter="fb"))  # an error leaves it as it was
    assert fallback(registry, "fb") == 1
    # So does a slot's late give: the fallback took it back, its lease had run out.
    metrics(event(Outcome.EXPIRED, limiter="fb"))
    assert fallback(registry, "fb") == 1
    for outcome in (Outcome.DENIED, Outcome.FALLBACK, Outcome.SHADOW_DENIED):
        metrics(event(outcome, limiter="fb"))
        assert fallback(registry, "fb") == (1 if outcome == "fallback" else 0)
    # Plain strings work as the str enum does.
    metrics(event("fallback", limiter="fb"))  # type: ignore[arg-type]
    assert fallback(registry, "fb") == 1
    assert decisions(registry, "fb", "fallback", policy="10/s") == 2  # the events'
    assert decisions(registry, "fb", "fallback", policy="100/s") == 2  # the limiter's


def test_the_key_is_never_a_label(registry) -> None:
    metrics = PrometheusMetrics(registry)
    limiter = RateLimiter("1/hour", clock=ManualClock(), name="n", on_decision=metrics)
    for client in ("client-a-198.51.100.1", "client-b-198.51.100.2"):
        limiter.allow(client)
        limiter.allow(client)
    metrics(event(Outcome.ERROR, limiter="n"))
    metrics(event(Outcome.FALLBACK, limiter="n"))
    for family in registry.collect():
        for sample in family.samples:
            assert set(sample.labels) <= LABELS[family.name], sample
            assert not any("client" in value for value in sample.labels.values())
    assert b"client" not in metrics.generate_latest()
    assert decisions(registry, "n", "allowed") == 2 and decisions(registry, "n", "denied") == 2


def test_generate_latest_is_the_text_format(registry) -> None:
    metrics = PrometheusMetrics(registry)
    metrics(event(Outcome.DENIED, limiter="t"))
    text = metrics.generate_latest().decode()
    assert "# TYPE limiter_decisions_total counter" in text
    assert 'limiter_decisions_total{limiter="t",outcome="denied",policy="10/s"} 1.0' in text
    assert "# TYPE limiter_store_duration_seconds histogram" in text
    assert "# TYPE limiter_fallback_active gauge" in text
    assert metrics.content_type == CONTENT_TYPE_LATEST  # as prometheus_client's exporters


def test_instances_on_one_registry_share_the_metrics(registry) -> None:
    one, two = PrometheusMetrics(registry), PrometheusMetrics(registry)  # no Duplicated timeseries
    one(event(Outcome.ALLOWED, limiter="s"))
    two(event(Outcome.ALLOWED, limiter="s"))
    assert decisions(registry, "s", "allowed") == 2
    other = CollectorRegistry()
    PrometheusMetrics(other)(event(Outcome.ALLOWED, limiter="s"))
    assert decisions(other, "s", "allowed") == 1
    assert decisions(registry, "s", "allowed") == 2


def test_none_is_the_default_registry() -> None:
    first, second = PrometheusMetrics(), PrometheusMetrics()  # a second one does not raise
    assert first.registry is REGISTRY and second.registry is REGISTRY
    name = "test-default-registry"
    before = decisions(REGISTRY, name, "denied") or 0
    first(event(Outcome.DENIED, limiter=name))
    second(event(Outcome.DENIED, limiter=name))
    assert decisions(REGISTRY, name, "denied") == before + 2


def test_a_name_taken_by_other_code_is_a_value_error_and_registers_nothing(registry) -> None:
    Counter("limiter_store_errors_total", "someone else's", registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        PrometheusMetrics(registry)
    names = {family.name for family in registry.collect()}
    assert names == {"limiter_store_errors"}  # ours were unregistered again
    with pytest.raises(TypeError, match="CollectorRegistry"):
        PrometheusMetrics("default")  # type: ignore[arg-type]


def test_concurrent_decisions_are_all_counted(registry) -> None:
    metrics = PrometheusMetrics(registry)
    limiter = RateLimiter(1e9, clock=ManualClock(), name="c", on_decision=metrics)
    barrier = threading.Barrier(4)

    def work(n: int) -> None:
        barrier.wait()
        for i in range(500):
            limiter.allow(f"{n}:{i}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert decisions(registry, "c", "allowed") == 2000
    assert store_samples(registry, "MemoryStore")["count"] == 2000


# -- without prometheus_client -------------------------------------------------------------


@pytest.fixture
def no_prometheus_client(tmp_path: Path) -> Dict[str, str]:
    """An environment where ``import prometheus_client`` fails as if it were not installed."""
    shadow = tmp_path / "hide" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'prometheus_client'\", "
        "name='prometheus_client')\n"
    )
    env = dict(os.environ)
    env.pop("LIMITER_STORAGE_URL", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shadow.parent), env.get("PYTHONPATH")]))
    return env


def test_without_prometheus_client_the_import_names_the_extra(no_prometheus_client) -> None:
    code = textwrap.dedent(
        """
        import sys
        import limiter
        limiter.RateLimiter("1/s").check("k")
        import limiter.__main__
        assert "prometheus_client" not in sys.modules
        try:
            import limiter.metrics.prometheus
        except ModuleNotFoundError as exc:
            print(exc.name, exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=no_prometheus_client,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "prometheus_client limiter.metrics.prometheus needs prometheus_client: "
        'pip install "tokenlimiter[prometheus]"\n'
    )


def test_importing_limiter_does_not_import_prometheus_client() -> None:
    code = (
        "import sys, limiter, limiter.__main__, limiter.metrics; "
        "limiter.RateLimiter('1/s').check('k'); "
        "print('prometheus_client' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.stdout == "False\n", done.stderr


# -- the demo --------------------------------------------------------------------------------


def test_the_demo_serves_metrics_exempt_from_its_limit(start_demo) -> None:
    demo = start_demo("--rate", "1/hour", "--burst", "2")
    with httpx.Client(base_url=demo.url, timeout=TIMEOUT) as client:
        codes = [client.get("/api/").status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        for _ in range(3):  # exempt: never limited, takes no token, no rate-limit headers
            scrape = client.get("/metrics")
            assert scrape.status_code == 200
            assert scrape.headers["Content-Type"] == CONTENT_TYPE_LATEST
            assert "X-RateLimit-Limit" not in scrape.headers
        text = scrape.text
        head = client.head("/metrics")
        assert head.status_code == 200 and head.content == b""
    assert 'limiter_decisions_total{limiter="demo",outcome="allowed",policy="1/hour"} 2.0' in text
    assert 'limiter_decisions_total{limiter="demo",outcome="denied",policy="1/hour"} 1.0' in text
    assert 'limiter_fallback_active{limiter="demo"} 0.0' in text
    assert 'limiter_store_duration_seconds_count{operation="check",store="MemoryStore"} 3.0' in text
    assert "127.0.0.1" not in text  # the clients' keys are not labels
    assert demo.stop() == "limiter demo: stopped\n"


def test_the_demo_without_prometheus_client_answers_404_naming_the_extra(
    start_demo, no_prometheus_client
) -> None:
    demo = start_demo(env=no_prometheus_client)
    with httpx.Client(base_url=demo.url, timeout=TIMEOUT) as client:
        missing = client.get("/metrics")
        assert missing.status_code == 404
        assert missing.headers["Content-Type"] == "application/json"
        assert missing.json() == {
            "status": 404,
            "code": "no_metrics",
            "message": "no metrics: /metrics needs prometheus_client, "
            'pip install "tokenlimiter[prometheus]"',
        }
        assert "X-RateLimit-Limit" not in missing.headers  # exempt all the same
        assert client.get("/api/").status_code == 200  # the demo works without the extra
    assert demo.stop() == "limiter demo: stopped\n"


# -- a real Prometheus -----------------------------------------------------------------------


def require_prometheus() -> str:
    """The ``prometheus`` binary; skips without it (fails under ``CI=true``)."""
    if PROMETHEUS is not None:
        return PROMETHEUS
    reason = (
        "prometheus not found on PATH: this test starts its own Prometheus server on a free "
        "loopback port to scrape the demo; to run it, install Prometheus so that `prometheus` "
        "is on PATH (e.g. `apt-get install prometheus`, without starting its service)"
    )
    need(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Prometheus:
    """A ``prometheus`` process of the test's own: loopback, temporary config and storage."""

    def __init__(self, binary: str, directory: Path, target: str) -> None:
        self.binary = binary
        self.dir = directory
        directory.mkdir()
        self.data = directory / "data"
        self.config = directory / "prometheus.yml"
        self.log_path = directory / "prometheus.log"
        # 200 ms between scrapes: the first scrape comes soon after start-up.
        self.config.write_text(
            textwrap.dedent(
                f"""\
                global:
                  scrape_interval: 200ms
                  scrape_timeout: 200ms
                scrape_configs:
                  - job_name: limiter-demo
                    metrics_path: /metrics
                    static_configs:
                      - targets: ["{target}"]
                """
            )
        )
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Prometheus:
        for _ in range(5):  # another process may take the free port first
            self.port = free_port()
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    [
                        self.binary,
                        f"--config.file={self.config}",
                        f"--storage.tsdb.path={self.data}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=str(self.dir),
                )
            if self._wait_ready():
                return self
            self.stop()
        raise AssertionError(f"prometheus did not start:\n{self.log()}")

    def _wait_ready(self) -> bool:
        """Poll until this process answers (True), or it exits (False); deadline TIMEOUT."""
        assert self.process is not None
        deadline = time.monotonic() + TIMEOUT
        with httpx.Client(base_url=self.url, timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return False
                try:
                    flags = client.get("/api/v1/status/flags")
                    # Ours, not another process that took the port first.
                    if flags.json()["data"]["storage.tsdb.path"] == str(self.data):
                        ready = client.get("/-/ready")
                        if ready.status_code == 200:
                            return True
                except (httpx.HTTPError, ValueError, KeyError):
                    pass
                time.sleep(0.05)  # polling a real process that starts, not a fixed wait
        raise AssertionError(f"prometheus did not answer in {TIMEOUT} s:\n{self.log()}")

    def query(self, client: httpx.Client, promql: str) -> List[Dict[str, Any]]:
        answer = client.get(f"{self.url}/api/v1/query", params={"query": promql}).json()
        assert answer["status"] == "success", answer
        result: List[Dict[str, Any]] = answer["data"]["result"]
        return result

    def log(self) -> str:
        try:
            return self.log_path.read_text()[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(TIMEOUT)
        self.process = None


def test_a_real_prometheus_scrape_of_the_demo_returns_the_denials(
    start_demo, tmp_path: Path
) -> None:
    binary = require_prometheus()
    burst, extra = 5, 3
    # 1/hour: no token comes back while the test runs, so exactly `extra` denials.
    demo = start_demo("--rate", "1/hour", "--burst", str(burst))
    with httpx.Client(base_url=demo.url, timeout=TIMEOUT) as client:
        codes = [client.get("/api/").status_code for _ in range(burst + extra)]
    assert codes == [200] * burst + [429] * extra

    target = demo.url[len("http://") :].rstrip("/")  # 127.0.0.1:PORT
    prometheus = Prometheus(binary, tmp_path / "prometheus", target)
    prometheus.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        with httpx.Client(timeout=10.0) as client:
            denied: List[Dict[str, Any]] = []
            while not denied:
                denied = prometheus.query(client, 'limiter_decisions_total{outcome="denied"}')
                if not denied and time.monotonic() > deadline:
                    targets = client.get(f"{prometheus.url}/api/v1/targets").json()
                    pytest.fail(
                        f"no scrape of the demo in {TIMEOUT} s: targets "
                        f"{json.dumps(targets)}\n{prometheus.log()}"
                    )
                if not denied:
                    time.sleep(0.2)  # polling a real external process, not a fixed wait
            allowed = prometheus.query(client, 'limiter_decisions_total{outcome="allowed"}')
            ratio = prometheus.query(
                client,
                'sum(limiter_decisions_total{outcome=~"denied|shadow_denied"})'
                " / sum(limiter_decisions_total)",
            )
    finally:
        prometheus.stop()
    assert len(denied) == 1, denied
    assert denied[0]["metric"] == {
        "__name__": "limiter_decisions_total",
        "instance": target,
        "job": "limiter-demo",
        "limiter": "demo",
        "outcome": "denied",
        "policy": "1/hour",
    }
    assert float(denied[0]["value"][1]) == extra  # exactly the denials this test caused
    assert [float(series["value"][1]) for series in allowed] == [burst]
    assert float(ratio[0]["value"][1]) == pytest.approx(extra / (burst + extra))
    assert demo.stop() == "limiter demo: stopped\n"


def test_waits_are_a_histogram_by_limiter_and_outcome(registry) -> None:
    from limiter.waiting import Waits

    metrics = PrometheusMetrics(registry)
    limiter = RateLimiter("1/second", clock=ManualClock(), name="w", on_decision=metrics)
    waits = Waits(2.0, 10)
    assert all(waits.run(limiter, "k", 1).allowed for _ in range(3))  # waits of 0, 1, 1 s
    labels = {"limiter": "w", "outcome": "allowed"}
    assert registry.get_sample_value("limiter_wait_seconds_count", labels) == 2  # 0 s: none
    assert registry.get_sample_value("limiter_wait_seconds_sum", labels) == pytest.approx(2.0)
    assert decisions(registry, "w", "allowed") == 3  # one decision per request
    assert decisions(registry, "w", "denied") is None
