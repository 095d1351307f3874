"""``demo``: a small rate-limited JSON API and a page to watch it (docs/cli.md)."""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import logging
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Dict, Iterator, NamedTuple, Optional, Tuple, Type, Union

from limiter import __version__
from limiter.adapters.httpserver import rate_limited, request_info
from limiter.backends._url import is_number, redact_url
from limiter.cli._inspect import close_store, from_env, limit_buckets, store_url
from limiter.cli._output import algorithm_name, duration, quiet_store_logs
from limiter.events import fan_out
from limiter.http.keys import ClientIP
from limiter.http.request import RequestInfo
from limiter.metrics.top import TopOffenders
from limiter.ratelimiter import RateLimiter
from limiter.store import StoreError
from limiter.urls import resolve_store

if TYPE_CHECKING:
    from limiter.metrics.prometheus import PrometheusMetrics

#: The demo's default limit: slow enough that no machine refills a token
#: while the printed loop runs (one every 12 s), so the 429s always show.
DEFAULT_RATE = "5/minute"
#: What ``/metrics`` says when prometheus_client is not installed.
NO_METRICS = 'no metrics: /metrics needs prometheus_client, pip install "tokenlimiter[prometheus]"'
#: How many requests past the burst the printed loop sends (the 429s it shows).
EXTRA_REQUESTS = 3
# A refill interval at least this long (seconds) makes the printed loop's
# output certain: its burst + 3 requests take well under a second.
_SURE_INTERVAL = 10.0

#: The paths that take no token: the page, its chart's data and the operator's endpoints.
#: (``/favicon.ico``: a browser asks for it with the page, and must not spend a token.)
EXEMPT_PATHS = frozenset(("/", "/api/bucket", "/health", "/metrics", "/top", "/favicon.ico"))
#: The JSON endpoints ``/api/`` lists.
ENDPOINTS = ["/api/", "/api/time", "/api/bucket", "/health"]

HEADER_STYLES = {
    "x": "X-RateLimit-* headers",
    "draft": "RateLimit and RateLimit-Policy headers",
    "both": "X-RateLimit-*, RateLimit and RateLimit-Policy headers",
}


def _shape(limit: Any) -> str:
    """``"burst 5"`` for a bucket, ``"fixed window"`` or ``"sliding window"`` for a window."""
    return (
        limit.kind.replace("-", " ") if limit.kind.endswith("-window") else f"burst {limit.burst}"
    )


def _describe_limits(limiter: RateLimiter, rate: Optional[str] = None) -> str:
    """``"5/minute burst 5"``: each limit as written with its burst or window kind."""
    if rate is not None and len(limiter.limits) == 1:
        return f"{' '.join(rate.split())} {_shape(limiter.limits[0])}"
    # The one limit: "0.1/s burst 3"; one of several, named after its text: "10/second ...".
    return "; ".join(
        str(lim) if lim.name == "default" else f"{lim.name} {_shape(lim)}" for lim in limiter.limits
    )


class _Demo(NamedTuple):
    """What a demo handler serves: its limiter, the client's key, the texts and trackers."""

    limiter: RateLimiter
    client_key: ClientIP
    described: str
    page: bytes
    metrics: Optional[PrometheusMetrics]
    top: Optional[TopOffenders]


def demo_handler(
    limiter: RateLimiter,
    *,
    description: Optional[str] = None,
    header_style: str = "x",
    metrics: Optional[PrometheusMetrics] = None,
    top: Optional[TopOffenders] = None,
) -> Type[BaseHTTPRequestHandler]:
    """The demo's handler class: ``/api/`` limited per client IP, ``EXEMPT_PATHS`` not.

    ``header_style``: the adapters' option; ``metrics``/``top``: what ``/metrics``
    and ``/top`` serve (``None``: a 404).
    """
    client_key = ClientIP()
    described = _describe_limits(limiter) if description is None else description
    charted = min(limiter.limits, key=lambda lim: lim.burst)  # the first to refuse
    page = _page(described, limiter.burst, charted.kind)

    def exempt(request: RequestInfo) -> bool:
        return request.path in EXEMPT_PATHS

    @rate_limited(limiter, key_func=client_key, exempt=exempt, header_style=header_style)
    class DemoHandler(_DemoHandler):
        demo = _Demo(limiter, client_key, described, page, metrics, top)

    return DemoHandler


class _DemoHandler(BaseHTTPRequestHandler):
    """The demo's routes; ``demo_handler`` gives a subclass its ``demo``."""

    demo: _Demo
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # one send per response: no Nagle stalls on kept-alive connections
    server_version = f"limiter-demo/{__version__}"

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self, path: str, query: str) -> Tuple[int, Dict[str, Any]]:
        """The JSON answer to ``path``."""
        demo = self.demo
        if path == "/api/":
            return 200, {"hello": "world", "limit": demo.described, "endpoints": ENDPOINTS}
        if path == "/api/time":
            return 200, {"unix": time.time()}
        if path == "/api/bucket":
            key = demo.client_key(request_info(self))
            return _bucket_state(demo.limiter, key, demo.described)
        if path == "/health":
            return 200, {"status": "ok"}
        if path == "/metrics":  # served by do_GET when there are metrics
            return _problem(404, "no_metrics", NO_METRICS)
        if path != "/top":
            return _problem(404, "not_found", "no such endpoint: the JSON API is under /api/")
        if demo.top is None:
            return _problem(404, "not_found", "no tracker")
        n = _top_n(query)
        if n is None:
            return _problem(400, "bad_request", "n must be a whole number from 1 to 1000")
        return 200, demo.top.as_dict(n)

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        metrics = self.demo.metrics
        if path == "/":
            self._send(200, self.demo.page, "text/html; charset=utf-8")
        elif path == "/metrics" and metrics is not None:
            self._send(200, metrics.generate_latest(), metrics.content_type)
        else:
            status, payload = self._route(path, query)
            body = json.dumps(payload, separators=(",", ":")).encode()
            self._send(status, body, "application/json")

    do_HEAD = do_GET

    def log_request(self, code: Union[int, str] = "-", size: Union[int, str] = "-") -> None:
        # The page polls /api/bucket every second while the bucket refills:
        # its answers would bury the requests worth reading.
        if code != 200 or self.path.partition("?")[0] != "/api/bucket":
            super().log_request(code, size)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def _problem(status: int, code: str, message: str) -> Tuple[int, Dict[str, Any]]:
    """An error's status and JSON body."""
    return status, {"status": status, "code": code, "message": message}


def _level(limit: Dict[str, Any]) -> float:
    """What is left of one of ``limit_buckets``' limits: exact tokens, or a window's count."""
    return float(limit["tokens_exact"] if "tokens_exact" in limit else limit["remaining"])


def _full(limit: Dict[str, Any]) -> bool:
    """Whether nothing more is to come back: a full bucket, a window that counts nothing."""
    if "tokens_exact" in limit:
        return bool(limit["full_in"] <= 0)
    return bool(limit["remaining"] >= limit["count"])


def _bucket_state(limiter: RateLimiter, key: str, described: str) -> Tuple[int, Dict[str, Any]]:
    """``/api/bucket``: ``key``'s limits peeked for the chart: ``tokens``/``burst`` of
    the one with the least left, ``full`` when all are full; 503 when the store fails.
    """
    try:
        result = limiter.peek(key)
    except StoreError as exc:
        return _problem(503, "store_unavailable", f"the store does not answer: {exc}")
    buckets = limit_buckets(limiter, result)
    fewest = min(buckets, key=_level)
    return 200, {
        "key": key,
        "limit": described,
        "algorithm": fewest["algorithm"],
        "tokens": round(_level(fewest), 4),
        "burst": fewest.get("burst", fewest.get("count")),
        "full": all(_full(b) for b in buckets),
        "limits": buckets,
    }


#: The page's first paragraph and the chart's title and unit, by the charted limit's kind.
_PAGE_TEXTS = {
    "bucket": (
        "Your bucket: {{LIMIT}}, one bucket per client IP. Each request to "
        "<code>/api/</code> takes a token; one that finds the bucket empty gets a "
        "<code>429</code> and waits for the refill.",
        "Tokens in your bucket",
        "the tokens",
    ),
    "fixed-window": (
        "Your window: {{LIMIT}}, one count per client IP. Each request to "
        "<code>/api/</code> counts in the current window of the clock; once the "
        "count is reached, requests get a <code>429</code> until the window ends, "
        "and the next window starts from zero.",
        "Requests left in your window",
        "what is left of the window's count",
    ),
    "sliding-window": (
        "Your sliding window: {{LIMIT}}, one count per client IP. A request to "
        "<code>/api/</code> passes while the current window's count, plus the "
        "previous window's weighted by the share of it still within the last "
        "period, leaves room for it; a refused one gets a <code>429</code>, and "
        "room comes back bit by bit as the previous window slides out.",
        "Requests left in your sliding window",
        "what is left of the count (the estimate, rounded down)",
    ),
}


def _page(described: str, burst: int, kind: str = "bucket") -> bytes:
    """``demo.html`` for a limit (tests/cli/test_demo_page.py reads its counters and
    data-* attributes).
    """
    from importlib.resources import files  # Python >= 3.9

    intro, title, line = _PAGE_TEXTS.get(kind, _PAGE_TEXTS["fixed-window"])  # a Quota counts
    page = files(__package__).joinpath("demo.html").read_text(encoding="utf-8")
    return (
        page.replace("{{INTRO}}", intro)
        .replace("{{CHART_TITLE}}", title)
        .replace("{{LINE}}", line)
        .replace("{{ALGORITHM}}", algorithm_name(kind))
        .replace("{{LIMIT}}", f'<strong id="limit">{html.escape(described)}</strong>')
        .replace("{{BURST}}", str(burst))
        .replace("{{BURST_SIZE}}", str(burst + EXTRA_REQUESTS))
        .encode()
    )


def _describe_store(given: Optional[str]) -> str:
    """Where the store comes from, for the start-up line; passwords are ``***``."""
    url, source = store_url(given)
    return "memory:// (this process only)" if url is None else redact_url(url) + from_env(source)


class _Brief(logging.Formatter):
    """One line per record, without the traceback: the demo's store warnings."""

    def formatException(self, ei: Any) -> str:
        return ""

    def formatStack(self, stack_info: str) -> str:
        return ""


@contextlib.contextmanager
def _brief_logging() -> Iterator[None]:
    """Show the limiter's log records on one line each; undone on the way out."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Brief("limiter demo: %(levelname)s: %(message)s"))
    logger = logging.getLogger("limiter")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)  # (setLevel, not .level =: it clears the loggers' cache)
        logger.propagate = propagate


def _check_store(store: Any, shown: str) -> Optional[str]:
    """Ping a store that can be pinged (Redis): ``None`` if usable, else the error to show."""
    ping = getattr(store, "ping", None)
    if not callable(ping):
        return None
    try:
        with quiet_store_logs():  # the outage is reported below, with the URL, instead
            ping()
    except StoreError as exc:
        if getattr(store, "fallback", None) is not None:
            print(
                f"limiter demo: warning: the store {shown} does not answer ({exc}); "
                "its fallback answers until it does",
                file=sys.stderr,
                flush=True,
            )
            return None
        return f"the store {shown} does not answer: {exc}"
    return None


def demo_command(args: argparse.Namespace, demo: argparse.ArgumentParser) -> int:
    """``demo``: serve until Ctrl-C (0); usage errors exit 2, a store or port that fails 1."""
    try:  # the limit first: a bad --rate opens no store
        limits = RateLimiter(args.rate, args.burst, algorithm=args.algorithm).limits
    except (TypeError, ValueError) as exc:
        demo.error(str(exc))
    shown_store = _describe_store(args.store)
    try:
        store = resolve_store(args.store)
    except (ValueError, ImportError) as exc:
        # A bad URL or scheme (the message shows the URL with its password as
        # ***), or a client library to install (the message names the extra).
        demo.error(f"--store: {exc}" if args.store is not None else str(exc))
    except OSError as exc:  # sqlite:///: a directory that does not exist, ...
        print(f"limiter demo: cannot open the store {shown_store}: {exc}", file=sys.stderr)
        return 1
    try:
        metrics = _metrics()
        top = TopOffenders(capacity=100, window=300.0)
        limiter = RateLimiter(
            list(limits), store=store, name="demo", on_decision=fan_out(metrics, top)
        )
        with _brief_logging():
            problem = _check_store(store, shown_store)
            if problem is not None:
                print(f"limiter demo: {problem}", file=sys.stderr)
                return 1
            return _serve(args, limiter, shown_store, metrics, top)
    finally:
        close_store(store)


def _expect_note(limiter: RateLimiter) -> str:
    """Why the printed loop's line holds, and when it may not, for the limits that refuse first."""
    burst = limiter.burst
    first = [lim for lim in limiter.limits if lim.burst == burst]
    if all(lim.kind == "bucket" for lim in first):
        # The slowest refill of the buckets that empty first: while it has not
        # brought a token back, every request past the burst is a 429.
        interval = max(lim.interval for lim in first)
        note = f"one token back every {duration(interval)}"
        if interval < _SURE_INTERVAL:
            note += "; a slower loop shows fewer 429s"
        return note
    period = min(lim.window for lim in first)
    if any(lim.kind == "sliding-window" for lim in first):
        return f"room comes back as the {duration(period)} window slides"
    return (
        f"all back when the {duration(period)} window of the clock ends; "
        "a loop across its end shows more 200s"
    )


def _top_n(query: str) -> Optional[int]:
    """``n`` from ``/top``'s query string (default 10), or ``None`` when it is no count."""
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name == "n":
            if not is_number(value) or not 1 <= int(value) <= 1000:
                return None
            return int(value)
    return 10


def _metrics() -> Optional[PrometheusMetrics]:
    """The demo's metrics on prometheus_client's default registry, or ``None`` without it."""
    try:
        from limiter.metrics.prometheus import PrometheusMetrics
    except ImportError as exc:
        if exc.name != "prometheus_client":
            raise
        return None  # /metrics says which extra to install
    return PrometheusMetrics()


def _serve(
    args: argparse.Namespace,
    limiter: RateLimiter,
    shown_store: str,
    metrics: Optional[PrometheusMetrics],
    top: TopOffenders,
) -> int:
    described = _describe_limits(limiter, args.rate)
    handler = demo_handler(
        limiter, description=described, header_style=args.headers, metrics=metrics, top=top
    )
    try:
        server = ThreadingHTTPServer((args.host, args.port), handler)
    except OSError as exc:
        print(f"limiter demo: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    server.daemon_threads = True
    host, port = server.server_address[:2]
    if isinstance(host, bytes):
        host = host.decode()
    shown = f"[{host}]" if ":" in str(host) else str(host)
    url = f"http://{shown}:{port}/"
    burst = limiter.burst
    expected = " ".join(["200"] * burst + ["429"] * EXTRA_REQUESTS)
    note = _expect_note(limiter)
    print(f"limiter demo: serving {url} at {described} (open it in a browser; Ctrl-C to stop)")
    print(f"limiter demo: store {shown_store}; {HEADER_STYLES[args.headers]}")
    print(
        "watch the 429s: "
        f"for i in $(seq {burst + EXTRA_REQUESTS}); "
        f"do curl -s -o /dev/null -w '%{{http_code}} ' {url}api/; done; echo"
    )
    print(f"expect: {expected} ({note})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print("limiter demo: stopped", flush=True)
    return 0
