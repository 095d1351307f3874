"""Command line: ``python -m limiter demo`` serves a small rate-limited JSON API
and a page to watch it; ``inspect`` and ``reset`` look at and refill one client's
buckets in a shared store; ``top`` prints a running app's most denied keys.

The demo runs the standard library's ``ThreadingHTTPServer`` behind
``limiter.adapters.httpserver.rate_limited``; it needs nothing else installed
(a ``redis://`` store needs the ``redis`` extra).  ``/`` is an HTML page (no
external assets) that fires requests at ``/api/`` and charts the bucket from
``/api/bucket``; the JSON API is under ``/api/`` so that a browser opening the
page spends no token.  With the ``prometheus``
extra installed it also serves the limiter's metrics at ``/metrics``
(``limiter.metrics.prometheus``, on prometheus_client's default registry);
without it, ``/metrics`` answers 404 with the extra to install.

Its defaults are chosen so that the loop it prints shows the limit on the
first try on any machine: ``5/minute`` with a burst of 5 refills one token
every 12 s, and the loop sends burst + 3 requests, so it prints five ``200``
and three ``429`` unless the eight requests take more than 12 s.

``inspect`` and ``reset`` are the operator's tools (docs/cli.md): they import
the application's ``RateLimiter`` (``--limiter module:attribute``), or build
the one it builds (same limits, same name, so the same keys) on the shared
store the URL names, without its fallback (an operator must see the shared
store or an error, never a private stand-in), and ``peek`` or ``reset`` one
key through it; a key the store holds nothing of is said so (exit 3).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import logging
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)
from urllib.parse import unquote

from limiter import __version__
from limiter.adapters.httpserver import rate_limited, request_info
from limiter.core.bucket import peek_view
from limiter.core.limits import Policy
from limiter.core.result import RateLimitResult
from limiter.events import fan_out
from limiter.http.guard import RequestInfo
from limiter.http.keys import ClientIP
from limiter.metrics.top import TopOffenders
from limiter.ratelimiter import RateLimiter
from limiter.store import StoreError
from limiter.urls import STORAGE_URL_ENV, redact_url, resolve_store, store_from_url

if TYPE_CHECKING:
    from limiter.metrics.prometheus import PrometheusMetrics

__all__ = ["demo_handler", "main"]

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

_HEADER_STYLES = {
    "x": "X-RateLimit-* headers",
    "draft": "RateLimit and RateLimit-Policy headers",
    "both": "X-RateLimit-*, RateLimit and RateLimit-Policy headers",
}


def _describe_limits(limiter: RateLimiter, rate: Optional[str] = None) -> str:
    """``"5/minute burst 5"``: each limit as written (``rate``, if one) with its burst."""
    if rate is not None and len(limiter.limits) == 1:
        return f"{' '.join(rate.split())} burst {limiter.limits[0].burst}"
    parts = []
    for lim in limiter.limits:
        if lim.name == "default":
            parts.append(str(lim))  # "0.1/s burst 3"
        else:  # one of several limits, named after its text: "10/second"
            parts.append(f"{lim.name} burst {lim.burst}")
    return "; ".join(parts)


def demo_handler(
    limiter: RateLimiter,
    *,
    description: Optional[str] = None,
    header_style: str = "x",
    metrics: Optional[PrometheusMetrics] = None,
    top: Optional[TopOffenders] = None,
) -> Type[BaseHTTPRequestHandler]:
    """The demo's handler class.

    ``/api/`` and ``/api/time`` are limited (one bucket per client IP, which
    any other path but the exempt ones also spends); ``/`` (the HTML page),
    ``/api/bucket`` (the client's bucket, peeked: the tokens, exact, and each
    limit's state), ``/health``, ``/metrics``, ``/top`` and ``/favicon.ico``
    are exempt: they take no token and get no rate-limit headers.

    ``description`` is the limit as ``/api/`` reports it (default: ``_describe_limits``);
    ``header_style`` is the adapters' option (``"x"``, ``"draft"`` or ``"both"``);
    ``metrics``: the ``PrometheusMetrics`` ``/metrics`` serves (``None``: a 404
    that names the extra to install).  ``top``: the ``TopOffenders`` that
    ``/top`` reports as JSON (``?n=`` keys, default 10; ``None``: a 404).
    """
    client_key = ClientIP()

    def exempt(request: RequestInfo) -> bool:
        return request.path in EXEMPT_PATHS

    @rate_limited(limiter, key_func=client_key, exempt=exempt, header_style=header_style)
    class DemoHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = -1  # one send per response: no Nagle stalls on kept-alive connections
        server_version = f"limiter-demo/{__version__}"

        def _json(self, status: int, payload: Dict[str, Any]) -> None:
            body = json.dumps(payload, separators=(",", ":")).encode()
            self._send(status, body, "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _route(self) -> Tuple[int, Dict[str, Any]]:
            path = self.path.partition("?")[0]
            if path == "/api/":
                return 200, {"hello": "world", "limit": described, "endpoints": ENDPOINTS}
            if path == "/api/time":
                return 200, {"unix": time.time()}
            if path == "/api/bucket":
                return _bucket_state(limiter, client_key(request_info(self)), described)
            if path == "/health":
                return 200, {"status": "ok"}
            message = "no such endpoint: the JSON API is under /api/"
            return 404, {"status": 404, "code": "not_found", "message": message}

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            if path == "/":
                self._send(200, page, "text/html; charset=utf-8")
                return
            if path == "/top":
                if top is None:
                    self._json(404, {"status": 404, "code": "not_found", "message": "no tracker"})
                    return
                n = _top_n(query)
                if n is None:
                    message = "n must be a whole number from 1 to 1000"
                    self._json(400, {"status": 400, "code": "bad_request", "message": message})
                    return
                self._json(200, top.as_dict(n))
                return
            if path == "/metrics":
                if metrics is None:
                    self._json(404, {"status": 404, "code": "no_metrics", "message": NO_METRICS})
                else:
                    self._send(200, metrics.generate_latest(), metrics.content_type)
                return
            self._json(*self._route())

        do_HEAD = do_GET

        def log_request(self, code: Union[int, str] = "-", size: Union[int, str] = "-") -> None:
            # The page polls /api/bucket every second while the bucket refills:
            # its answers would bury the requests worth reading.
            if code != 200 or self.path.partition("?")[0] != "/api/bucket":
                super().log_request(code, size)

        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    described = _describe_limits(limiter) if description is None else description
    page = _page(described, limiter.burst)
    return DemoHandler


def _bucket_state(limiter: RateLimiter, key: str, described: str) -> Tuple[int, Dict[str, Any]]:
    """``/api/bucket``: ``key``'s buckets, peeked (nothing taken), for the page's chart.

    ``tokens`` and ``burst`` are those of the bucket with the fewest tokens (the
    one that refuses first); ``full`` is whether every bucket is full (the page
    stops polling then).  A store that fails without a fallback is a 503.
    """
    try:
        result = limiter.peek(key)
    except StoreError as exc:
        message = f"the store does not answer: {exc}"
        return 503, {"status": 503, "code": "store_unavailable", "message": message}
    by_policy = {r.policy: r for r in result.results or (result,)}
    buckets = [_bucket(lim, by_policy.get(lim.name, result)) for lim in limiter.limits]
    fewest = min(buckets, key=lambda b: float(b["tokens_exact"]))
    return 200, {
        "key": key,
        "limit": described,
        "tokens": round(fewest["tokens_exact"], 4),
        "burst": fewest["burst"],
        "full": all(b["full_in"] <= 0 for b in buckets),
        "limits": buckets,
    }


def _page(described: str, burst: int) -> bytes:
    """The demo's HTML page for a limit: its text, its burst (the chart's scale) and the
    burst button's default size (burst + ``EXTRA_REQUESTS``, as the printed loop)."""
    return (
        _PAGE.replace("{{LIMIT}}", html.escape(described))
        .replace("{{BURST}}", str(burst))
        .replace("{{BURST_SIZE}}", str(burst + EXTRA_REQUESTS))
        .encode()
    )


def _parser() -> argparse.ArgumentParser:
    return _parsers()[0]


def _parsers() -> Tuple[argparse.ArgumentParser, Dict[str, argparse.ArgumentParser]]:
    """The command line's parser and its subparsers by name (for their usage errors)."""
    parser = argparse.ArgumentParser(prog="limiter", description="tokenlimiter tools")
    parser.add_argument("--version", action="version", version=f"tokenlimiter {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="serve a small rate-limited JSON API and a page to watch it",
        description=(
            "Serve a small JSON API (/api/) on http.server behind the rate limiter, "
            "and a page (/) that fires requests at it and charts the bucket; print "
            "a curl loop that shows the 200s and then the 429s."
        ),
    )
    demo.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    demo.add_argument("--port", type=int, default=8484, help="port (default 8484; 0 = any free)")
    demo.add_argument(
        "--rate",
        default=DEFAULT_RATE,
        help=f"sustained rate, e.g. 10/second or '10/second;100/hour' (default {DEFAULT_RATE})",
    )
    demo.add_argument(
        "--burst",
        type=int,
        default=None,
        help="bucket capacity (default: the rate's count, 5 for 5/minute)",
    )
    demo.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help=(
            f"storage URL: memory://, sqlite:///path.db, redis://host:6379/0, ... "
            f"(default: ${STORAGE_URL_ENV} if set, else memory://)"
        ),
    )
    demo.add_argument(
        "--headers",
        choices=list(_HEADER_STYLES),
        default="x",
        help="rate-limit headers: x (X-RateLimit-*, the default), draft (RateLimit, "
        "RateLimit-Policy: the IETF draft) or both",
    )
    inspect = _bucket_parser(
        commands,
        "inspect",
        help="show one key's buckets in a shared store (takes no token)",
        description=(
            "Show KEY's buckets as the application's limiter (--limiter) or "
            "RateLimiter(RATE, name=NAME) on the store sees them: "
            "for each limit its burst, the tokens available, the seconds until the "
            "bucket is full again and whether a request of cost 1 would pass now. "
            "Reading takes nothing (a peek)."
        ),
    )
    reset = _bucket_parser(
        commands,
        "reset",
        help="give one key full buckets in a shared store",
        description="Give KEY full buckets, as RateLimiter(RATE, name=NAME).reset(KEY) does.",
    )
    top = commands.add_parser(
        "top",
        help="show the most denied keys, from a running app's top-offenders endpoint",
        description=(
            "Fetch URL (a TopOffenders.as_dict() JSON endpoint, such as the demo's "
            "http://127.0.0.1:8484/top) and print the most denied keys with their "
            "counts and error bounds."
        ),
    )
    top.add_argument("--url", required=True, help="the endpoint, http:// or https://")
    top.add_argument("-n", type=int, default=10, help="how many keys (default 10, 1-1000)")
    top.add_argument("--json", action="store_true", help="print the JSON as fetched")
    top.add_argument(
        "--timeout", type=float, default=2.0, help="seconds to wait for the answer (default 2)"
    )
    return parser, {"demo": demo, "inspect": inspect, "reset": reset, "top": top}


class _Once(argparse.Action):
    """An option that may be given once (a second ``--limit`` would silently win)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(
                f"argument {option_string}: given twice; write several limits as one "
                f"{option_string} '10/second;1000/hour', as RateLimiter takes them"
            )
        setattr(namespace, self.dest, values)


def _bucket_parser(
    commands: Any, name: str, *, help: str, description: str
) -> argparse.ArgumentParser:
    """The parser of ``inspect`` or ``reset``: the limiter's arguments, then KEY."""
    sub: argparse.ArgumentParser = commands.add_parser(name, help=help, description=description)
    sub.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help=(
            "the shared store the application uses: sqlite:///path.db, redis://host:6379/0, "
            f"... (default: ${STORAGE_URL_ENV}; memory:// is refused: it lives in one process)"
        ),
    )
    sub.add_argument(
        "--limiter",
        metavar="MODULE:ATTRIBUTE",
        default=None,
        help=(
            "the application's RateLimiter, imported (myapp.limits:rl): its limits, "
            "lockout, name, store and clock, exactly; instead of --limit/--burst/--name"
        ),
    )
    sub.add_argument(
        "--limit",
        metavar="RATE",
        default=None,
        action=_Once,
        help=(
            "the limit as the application gives it to RateLimiter: 5/minute, "
            "'10/second;1000/hour', or a number of tokens per second"
        ),
    )
    sub.add_argument(
        "--burst",
        type=int,
        default=None,
        help="the bucket capacity, if the application gives RateLimiter one",
    )
    sub.add_argument(
        "--name",
        default=None,
        help=(
            "the limiter's name (RateLimiter(name=...)); default: the name RateLimiter "
            "derives from the limits, 0.0833333/s:5 for 5/minute"
        ),
    )
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    sub.add_argument(
        "key",
        metavar="KEY",
        help="the client's key as the application checks it (write -- before a key "
        "that starts with -)",
    )
    return sub


def _describe_store(given: Optional[str]) -> str:
    """Where the store comes from, for the start-up line; passwords are ``***``."""
    if given is not None:
        return redact_url(given.strip())
    from_env = os.environ.get(STORAGE_URL_ENV, "").strip()
    if from_env:
        return f"{redact_url(from_env)} (from {STORAGE_URL_ENV})"
    return "memory:// (this process only)"


def _duration(seconds: float) -> str:
    """``12 s``, ``100 ms``, ``60 min``, ``24 h``: a refill interval for people."""
    for unit, size in (("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= 2 * size or (unit == "s" and seconds >= 1):
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds * 1000:.3g} ms"


class _Brief(logging.Formatter):
    """One line per record, without the traceback: the demo's store warnings."""

    def formatException(self, ei: Any) -> str:
        return ""

    def formatStack(self, stack_info: str) -> str:
        return ""


@contextlib.contextmanager
def _brief_logging() -> Iterator[None]:
    """Show the limiter's log records (a store failing, answering again) on one line each.

    Undone on the way out, so ``main()`` called in a test leaves logging as it was.
    """
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

    def quiet(record: logging.LogRecord) -> bool:
        return False  # the outage is reported below, with the URL, instead

    stores_log = logging.getLogger("limiter.stores")
    stores_log.addFilter(quiet)
    try:
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
    finally:
        stores_log.removeFilter(quiet)
    return None


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; returns the exit status (0 done, 1 a store failed, 2 usage)."""
    parser, subparsers = _parsers()
    args = parser.parse_args(argv)
    if args.command in ("inspect", "reset"):
        return _bucket_command(args, subparsers[args.command])
    if args.command == "top":
        return _top_command(args, subparsers["top"])
    if args.command != "demo":
        parser.print_help()
        return 2
    return _demo(args, subparsers["demo"])


def _demo(args: argparse.Namespace, demo: argparse.ArgumentParser) -> int:
    try:  # the limit first: a bad --rate opens no store
        limits = RateLimiter(args.rate, args.burst).limits
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
        close = getattr(store, "close", None)
        if callable(close):
            close()


def _top_n(query: str) -> Optional[int]:
    """``n`` from ``/top``'s query string (default 10), or ``None`` when it is no count."""
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name == "n":
            if not value.isdigit() or not 1 <= int(value) <= 1000:
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
    metrics: Optional[PrometheusMetrics] = None,
    top: Optional[TopOffenders] = None,
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
    # The buckets that empty first, and the slowest of their refills: while it
    # has not brought a token back, every request past the burst is a 429.
    interval = max(lim.interval for lim in limiter.limits if lim.burst == burst)
    expected = " ".join(["200"] * burst + ["429"] * EXTRA_REQUESTS)
    note = f"one token back every {_duration(interval)}"
    if interval < _SURE_INTERVAL:
        note += "; a slower loop shows fewer 429s"
    print(f"limiter demo: serving {url} at {described} (open it in a browser; Ctrl-C to stop)")
    print(f"limiter demo: store {shown_store}; {_HEADER_STYLES[args.headers]}")
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


# -- the demo page ----------------------------------------------------------------

# Served at "/": plain HTML and a little JavaScript, no external asset (it works
# offline).  The counters and the chart's data-* attributes are what
# tests/test_demo_page.py reads in a headless browser; keep their ids.
_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>limiter demo</title>
<style>
body { font: 15px/1.45 system-ui, sans-serif; margin: 1.2em auto; max-width: 62em;
       padding: 0 1em; color: #1f2328; }
h1 { margin-bottom: .2em; } h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
code { background: #f0f2f4; padding: 0 .25em; border-radius: 3px; }
button { font: inherit; padding: .35em .9em; margin-right: .4em; cursor: pointer; }
input { font: inherit; width: 4em; }
.counts b { display: inline-block; min-width: 2.5em; }
.counts span { margin-right: 1.5em; }
.ok { color: #1a7f37; } .no { color: #cf222e; }
#chart { border: 1px solid #d0d7de; width: 100%; height: auto; }
pre { background: #f6f8fa; padding: .6em; margin: 0; min-height: 4.5em; }
.cols { display: flex; gap: 2em; flex-wrap: wrap; } .cols > div { flex: 1 1 22em; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: .05em .5em; text-align: right; border-bottom: 1px solid #eaeef2; }
#log-box { max-height: 16em; overflow-y: auto; }
</style>
</head>
<body>
<h1>limiter demo</h1>
<p>Your bucket: <strong id="limit">{{LIMIT}}</strong>, one bucket per client IP.
Each request to <code>/api/</code> takes a token; one that finds the bucket empty
gets a <code>429</code> and waits for the refill. This page and
<code>/api/bucket</code>, which it reads for the chart, take none.</p>
<p>
<button id="send-one" type="button">Send one request</button>
<button id="burst" type="button">Send a burst</button> of
<input id="burst-size" type="number" min="1" max="100" value="{{BURST_SIZE}}"> requests at once
<span id="burst-error" class="no" role="alert"></span>
</p>
<p class="counts">
<span>sent <b id="count-sent">0</b></span>
<span class="ok">200 <b id="count-200">0</b></span>
<span class="no">429 <b id="count-429">0</b></span>
<span>other <b id="count-other">0</b></span>
</p>
<h2>Tokens in your bucket</h2>
<canvas id="chart" width="960" height="260" data-burst="{{BURST}}"
 data-points="0" data-last-tokens=""></canvas>
<p><small>Line: the tokens, as <code>/api/bucket</code> peeks them (polled while the
bucket refills). Dots: the remaining count of each response, green for a
<code>200</code>, red for a <code>429</code>. Time in seconds since the page opened.</small></p>
<div class="cols">
<div><h2>Last response</h2><pre id="headers">(none yet)</pre></div>
<div><h2>Responses</h2><div id="log-box"><table>
<thead><tr><th>#</th><th>at (s)</th><th>status</th><th>remaining</th><th>retry after (s)</th>
</tr></thead><tbody id="log"></tbody></table></div></div>
</div>
<script>
"use strict";
const chart = document.getElementById("chart");
const counts = {sent: 0, 200: 0, 429: 0, other: 0};
let answered = 0;  // the responses' numbers, in the order they came back
const points = [];  // {t: seconds, tokens, status: 0 for a peek, else the response's}
const started = performance.now();
const WINDOW = 120;  // seconds of history the chart shows
let scale = Number(chart.dataset.burst);  // the y axis, in tokens; then /api/bucket's burst
let rate = 0;  // tokens per second the emptiest bucket refills, from /api/bucket
const MAX_BURST = 100;  // requests one burst may send at once
let polling = null;
let peekQueued = false;

function now() { return (performance.now() - started) / 1000; }

function text(id, value) { document.getElementById(id).textContent = String(value); }

function showCounts() {
  for (const name of ["sent", "200", "429", "other"]) text("count-" + name, counts[name]);
}

function remainingOf(response) {
  const x = response.headers.get("X-RateLimit-Remaining");
  if (x !== null) return Number(x);
  const draft = /(?:^|;)\\s*r=(\\d+)/.exec(response.headers.get("RateLimit") || "");
  return draft ? Number(draft[1]) : null;
}

function showResponse(response, at) {
  const lines = ["HTTP " + response.status];
  response.headers.forEach(function (value, name) {
    if (/^(x-ratelimit-|ratelimit|retry-after)/i.test(name)) lines.push(name + ": " + value);
  });
  if (lines.length === 1) lines.push("(no rate-limit headers)");
  text("headers", lines.join("\\n"));
  const row = document.createElement("tr");
  const retry = response.headers.get("Retry-After");
  const remaining = remainingOf(response);
  answered += 1;
  for (const cell of [answered, at.toFixed(1), response.status,
                      remaining === null ? "" : remaining, retry === null ? "" : retry]) {
    const td = document.createElement("td");
    td.textContent = String(cell);
    row.appendChild(td);
  }
  row.className = response.status === 200 ? "ok" : response.status === 429 ? "no" : "";
  const log = document.getElementById("log");
  log.insertBefore(row, log.firstChild);
  while (log.children.length > 200) log.removeChild(log.lastChild);
  if (remaining !== null) points.push({t: at, tokens: remaining, status: response.status});
}

async function fire() {
  counts.sent += 1;
  showCounts();
  try {
    const response = await fetch("/api/", {cache: "no-store"});
    await response.text();
    const key = response.status === 200 || response.status === 429 ? response.status : "other";
    counts[key] += 1;
    showResponse(response, now());
  } catch (err) {
    counts.other += 1;
    text("headers", "no answer: " + err);
  }
  showCounts();
  draw();
  peekSoon();
}

async function burst() {
  const given = document.getElementById("burst-size").value;
  const size = Number(given);
  if (!Number.isInteger(size) || size < 1 || size > MAX_BURST) {
    // Refused, and said so: never a smaller burst than asked for.
    const told = "a burst is 1 to " + MAX_BURST + " requests, not " + JSON.stringify(given);
    text("burst-error", told + ": nothing sent");
    return;
  }
  text("burst-error", "");
  const all = [];
  for (let i = 0; i < size; i += 1) all.push(fire());
  await Promise.all(all);
}

async function peek() {
  try {
    const response = await fetch("/api/bucket", {cache: "no-store"});
    if (!response.ok) return null;
    const bucket = await response.json();
    scale = bucket.burst;
    let low = null;  // the emptiest bucket: the one charted
    for (const b of bucket.limits || []) {
      if (low === null || b.tokens_exact < low.tokens_exact) low = b;
    }
    if (low !== null) rate = low.rate;
    points.push({t: now(), tokens: bucket.tokens, status: 0});
    draw();
    return bucket;
  } catch (err) {
    return null;
  }
}

function peekSoon() {
  // One peek for a whole burst of answers, then a poll while the bucket refills.
  if (peekQueued) return;
  peekQueued = true;
  setTimeout(async function () {
    peekQueued = false;
    const bucket = await peek();
    if (bucket && !bucket.full && polling === null) polling = setInterval(poll, 1000);
  }, 50);
}

async function poll() {
  const bucket = await peek();
  if (bucket && bucket.full && polling !== null) {
    clearInterval(polling);
    polling = null;
  }
}

function refilled(tokens, seconds) {
  return Math.min(scale, tokens + rate * Math.max(0, seconds));
}

function linePath(all, end) {
  // The bucket between peeks, as [t, tokens] vertices: a refill is a slope (at the
  // bucket's rate, up to its burst), the tokens the admitted requests took drop
  // vertically, when the first 200 since the peek before came back (a 429 takes
  // nothing); the last peek is carried on to now.
  const path = [];
  let last = null;
  let drop = null;  // when the first 200 since the last peek came back
  for (const p of all) {
    if (p.status !== 0) {
      if (p.status === 200 && last !== null && drop === null) drop = p.t;
      continue;
    }
    if (last === null) {
      path.push([p.t, p.tokens]);
    } else {
      const expected = refilled(last.tokens, p.t - last.t);
      if (drop !== null) {
        const at = drop;
        const before = refilled(last.tokens, at - last.t);
        const after = Math.max(0, p.tokens - rate * (p.t - at));
        path.push(...corner(last, at, before), [at, before], [at, after]);
      } else {
        path.push(...corner(last, p.t, expected));
      }
      path.push([p.t, p.tokens]);
    }
    last = p;
    drop = null;
  }
  if (last !== null && end > last.t) {
    const level = refilled(last.tokens, end - last.t);
    path.push(...corner(last, end, level), [end, level]);
  }
  return path;
}

function corner(from, until, level) {
  // Where a refill from ``from`` reaches the burst before ``until``: the slope ends there.
  if (rate <= 0 || level < scale || from.tokens >= scale) return [];
  const full = from.t + (scale - from.tokens) / rate;
  return full < until ? [[full, scale]] : [];
}

function draw() {
  const ctx = chart.getContext("2d");
  const W = chart.width, H = chart.height, left = 44, right = 12, top = 12, bottom = 28;
  const end = Math.max(now(), points.length ? points[points.length - 1].t : 0);
  const start = Math.max(0, end - WINDOW);
  const span = Math.max(10, end - start);
  let most = scale;
  for (const p of points) most = Math.max(most, p.tokens);
  const x = function (t) { return left + (t - start) / span * (W - left - right); };
  const y = function (v) { return H - bottom - v / Math.max(most, 1) * (H - top - bottom); };
  ctx.clearRect(0, 0, W, H);
  ctx.font = "12px system-ui, sans-serif";
  ctx.fillStyle = "#57606a";
  ctx.strokeStyle = "#d0d7de";
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const v of [0, Math.round(most / 2), most]) {
    ctx.beginPath(); ctx.moveTo(left, y(v)); ctx.lineTo(W - right, y(v)); ctx.stroke();
    ctx.fillText(String(v), left - 6, y(v));
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const step = span > 60 ? 20 : span > 30 ? 10 : 5;
  for (let t = Math.ceil(start / step) * step; t <= start + span; t += step) {
    ctx.fillText(t + " s", x(t), H - bottom + 6);
  }
  const shown = points.filter(function (p) { return p.t >= start; });
  const path = linePath(points, end).filter(function (v) { return v[0] >= start; });
  ctx.strokeStyle = "#0969da";
  ctx.lineWidth = 2;
  ctx.beginPath();
  path.forEach(function (v, i) {
    if (i === 0) ctx.moveTo(x(v[0]), y(v[1])); else ctx.lineTo(x(v[0]), y(v[1]));
  });
  ctx.stroke();
  chart.dataset.path = JSON.stringify(path.map(function (v) {
    return [Number(v[0].toFixed(3)), Number(v[1].toFixed(4))];
  }));
  for (const p of shown) {
    if (p.status === 0) continue;
    ctx.fillStyle = p.status === 200 ? "#1a7f37" : "#cf222e";
    ctx.beginPath(); ctx.arc(x(p.t), y(p.tokens), 4, 0, 2 * Math.PI); ctx.fill();
  }
  chart.dataset.points = String(shown.length);
  if (points.length) chart.dataset.lastTokens = points[points.length - 1].tokens.toFixed(2);
}

document.getElementById("send-one").addEventListener("click", fire);
document.getElementById("burst").addEventListener("click", burst);
// The current state at once, carried on to now every second (refills slope up).
peek().then(function (bucket) {
  if (bucket && !bucket.full && polling === null) polling = setInterval(poll, 1000);
});
setInterval(draw, 1000);
draw();
</script>
</body>
</html>
"""


# -- inspect and reset ---------------------------------------------------------


def _rate(text: str) -> Union[str, float]:
    """``--limit`` as RateLimiter takes it: the string, or a bare number as tokens per second."""
    try:
        number = float(text)
    except ValueError:
        return text
    return number if number == number else text  # NaN: the string, refused by RateLimiter


def _store_url(given: Optional[str]) -> Tuple[Optional[str], str]:
    """``(url, where it comes from)``: ``--store``, else ``$LIMITER_STORAGE_URL``."""
    if given is not None:
        return given.strip(), "--store"
    return os.environ.get(STORAGE_URL_ENV, "").strip() or None, STORAGE_URL_ENV


def _private_store(url: str) -> Optional[str]:
    """Why the store of ``url`` cannot be another process's, or ``None``."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme == "memory":
        return "memory:// is the memory of one process"
    if scheme == "sqlite" and _sqlite_path(url) == ":memory:":
        return "sqlite:///:memory: is the memory of one process"
    return None


def _sqlite_path(url: str) -> Optional[str]:
    """The file of an ``sqlite:///path`` URL (as ``store_from_url`` reads it), else ``None``."""
    if not url.lower().startswith("sqlite:///"):
        return None  # not sqlite, or a host: store_from_url explains
    return unquote(url[len("sqlite:///") :].partition("?")[0]) or None


def _one_line(exc: BaseException, url: str) -> str:
    """``exc`` as one line, without the URL's password should a client library echo it."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    rest = url.partition("://")[2]
    userinfo = rest.partition("/")[0].partition("?")[0].rpartition("@")[0]
    password = userinfo.partition(":")[2]
    for secret in {password, unquote(password)} - {""}:
        text = text.replace(secret, "***")
    return text


@contextlib.contextmanager
def _quiet_store_logs() -> Iterator[None]:
    """Drop the stores' log records: a failure is reported once, on one line, by the command."""

    def quiet(record: logging.LogRecord) -> bool:
        return False

    stores_log = logging.getLogger("limiter.stores")
    stores_log.addFilter(quiet)
    try:
        yield
    finally:
        stores_log.removeFilter(quiet)


#: The exit status of ``inspect`` and ``reset`` when the store holds nothing for the key.
NO_STATE = 3


def _load_limiter(spec: str, sub: argparse.ArgumentParser) -> RateLimiter:
    """The ``RateLimiter`` that ``module:attribute`` names (a usage error otherwise)."""
    import importlib

    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        sub.error(f"argument --limiter: expected MODULE:ATTRIBUTE (myapp.limits:rl), got {spec!r}")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        sub.error(f"argument --limiter: cannot import {module_name!r}: {exc}")
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            sub.error(f"argument --limiter: {module_name!r} has no attribute {attribute!r}")
    if not isinstance(found, RateLimiter):
        sub.error(f"argument --limiter: {spec!r} is no RateLimiter, got {found!r:.100}")
    return found


def _has_state(limiter: RateLimiter, key: str) -> Optional[bool]:
    """Whether ``limiter``'s store holds any state of ``key`` (``None``: it cannot tell)."""
    from limiter.backends.memory import MemoryStore
    from limiter.backends.redis import RedisStore
    from limiter.backends.sqlite import SQLiteStore

    skeys = limiter._storage_keys(key) if limiter._many else [limiter.storage_key(key)]
    store: Any = limiter.store
    if isinstance(store, SQLiteStore):
        blobs = [skey.encode("utf-8", "surrogatepass") for skey in skeys]

        def any_row(conn: Any) -> bool:
            marks = ",".join("?" * len(blobs))
            sql = f"SELECT 1 FROM limiter_buckets WHERE key IN ({marks}) LIMIT 1"
            return conn.execute(sql, blobs).fetchone() is not None

        return bool(store._run(any_row))
    if isinstance(store, RedisStore):
        try:
            return bool(store.client.exists(*[store._key(skey) for skey in skeys]))
        except Exception as exc:
            raise StoreError(str(exc)) from exc
    if type(store) is MemoryStore:
        with store._lock:
            return any(skey in store._young or skey in store._old for skey in skeys)
    return None


def _no_state(command: str, key: str, limiter: RateLimiter, shown: str) -> int:
    print(
        f"{command}: no stored state for key {_printable(key)} of limiter "
        f"{_printable(limiter.name)} on {shown}: a wrong --name or store prefix is the "
        "usual cause (a key never seen, or idle until its buckets were full and "
        "forgotten, has none either)",
        file=sys.stderr,
    )
    return NO_STATE


def _bucket_command(args: argparse.Namespace, sub: argparse.ArgumentParser) -> int:
    """``inspect`` or ``reset``: usage errors exit 2, a store that fails exits 1,
    no stored state for the key exits 3."""
    if args.limiter is not None:
        for given, option in ((args.limit, "--limit"), (args.burst, "--burst")):
            if given is not None:
                sub.error(f"argument {option}: not with --limiter, which gives the limits")
        if args.name is not None:
            sub.error("argument --name: not with --limiter, which gives the name")
        return _app_bucket_command(args, sub, _load_limiter(args.limiter, sub))
    if args.limit is None:
        sub.error("give the application's limiter as --limiter MODULE:ATTRIBUTE, or --limit RATE")
    try:  # the limiter and the key first: a usage error opens no store
        bare = RateLimiter(_rate(args.limit), args.burst, name=args.name)
    except (TypeError, ValueError) as exc:
        sub.error(f"argument --limit: {exc}")
    try:
        bare.storage_key(args.key)
    except TypeError as exc:
        sub.error(f"argument KEY: {exc}")
    url, source = _store_url(args.store)
    if url is None:
        sub.error(f"no store: give --store URL or set {STORAGE_URL_ENV}")
    return _on_store(
        args,
        sub,
        url,
        source,
        lambda store: RateLimiter(list(bare.limits), store=store, name=bare.name),
    )


def _app_bucket_command(
    args: argparse.Namespace, sub: argparse.ArgumentParser, app: RateLimiter
) -> int:
    """``inspect`` or ``reset`` through the application's own limiter (``--limiter``)."""
    try:
        app.storage_key(args.key)
    except TypeError as exc:
        sub.error(f"argument KEY: {exc}")
    if args.store is None:
        from limiter.backends.memory import MemoryStore

        store_of = f"{args.limiter}'s store, {type(app.store).__name__},"
        if isinstance(app.store, MemoryStore) or getattr(app.store, "path", None) == ":memory:":
            sub.error(
                f"argument --limiter: {store_of} is the memory of one process: give "
                "--store URL, the shared store the application uses"
            )
        if not callable(getattr(app.store, "apply", None)):
            sub.error(f"argument --limiter: {store_of} is async only: give --store URL")
        path = getattr(app.store, "path", None)
        own = f"sqlite:///{path}" if isinstance(path, str) else ""
        return _run_bucket_command(args, app, own or type(app.store).__name__, "--limiter", own)
    clock = app.clock if app._clock_now is not None else None
    return _on_store(
        args,
        sub,
        args.store.strip(),
        "--store",
        lambda store: RateLimiter(
            list(app.limits), store=store, name=app.name, lockout=app.lockout, clock=clock
        ),
    )


def _on_store(
    args: argparse.Namespace,
    sub: argparse.ArgumentParser,
    url: str,
    source: str,
    build: Callable[[Any], RateLimiter],
) -> int:
    """Open the shared store at ``url`` (given by ``source``), run the bucket command
    on the limiter ``build`` makes over it, and close the store."""
    command = f"limiter {args.command}"
    shown = redact_url(url)
    private = _private_store(url)
    if private is not None:
        sub.error(
            f"{source}: {private} ({shown}): {args.command} needs the shared store the "
            "application uses (sqlite:///path.db, redis://host:6379/0, ...)"
        )
    path = _sqlite_path(url)
    if path is not None and not os.path.exists(path):
        # SQLiteStore would create an empty database: a typo would show full buckets.
        print(f"{command}: the store {shown} does not exist: no file {path!r}", file=sys.stderr)
        return 1
    try:
        # No fallback, whatever the URL says: the shared store answers, or an error.
        store = store_from_url(url, fallback=None)
    except (ValueError, ImportError) as exc:
        # A bad URL or scheme (shown with its password as ***) or an extra to install.
        sub.error(f"{source}: {exc}")
    except OSError as exc:  # sqlite: not a database, no permission, ...
        print(f"{command}: cannot open the store {shown}: {_one_line(exc, url)}", file=sys.stderr)
        return 1
    try:
        return _run_bucket_command(args, build(store), shown, source, url)
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()


def _run_bucket_command(
    args: argparse.Namespace, limiter: RateLimiter, shown: str, source: str, url: str
) -> int:
    command = f"limiter {args.command}"
    try:
        with _quiet_store_logs():
            if _has_state(limiter, args.key) is False:
                return _no_state(command, args.key, limiter, shown)
            if args.command == "inspect":
                report = _inspect_report(limiter, args.key, limiter.peek(args.key), shown)
            else:
                limiter.reset(args.key)
                if _has_state(limiter, args.key):
                    print(
                        f"{command}: the store {shown} still holds key "
                        f"{_printable(args.key)} after the reset: nothing reset",
                        file=sys.stderr,
                    )
                    return 1
                report = _reset_report(limiter, args.key, shown)
    except StoreError as exc:
        print(
            f"{command}: the store {shown} does not answer: {_one_line(exc, url)}", file=sys.stderr
        )
        return 1
    if args.json:
        print(json.dumps(report, sort_keys=False))
    elif args.command == "inspect":
        print(_inspect_text(report, source))
    else:
        print(_reset_text(report, source))
    return 0


def _bucket(limit: Policy, result: RateLimitResult) -> Dict[str, Any]:
    """One limit's bucket, from a peek's result for it."""
    exact, wait = peek_view(limit, result)
    allowed = wait <= limit.slack
    return {
        "name": limit.name,
        "rate": limit.rate,
        "burst": limit.burst,
        "window": limit.window,
        "tokens": result.remaining,
        "tokens_exact": exact,
        "full_in": result.reset_after,
        "allowed": allowed,
        "retry_after": 0.0 if allowed else wait,
    }


def _inspect_report(
    limiter: RateLimiter, key: str, result: RateLimitResult, shown: str
) -> Dict[str, Any]:
    by_policy = {r.policy: r for r in result.results or (result,)}
    buckets = [_bucket(lim, by_policy.get(lim.name, result)) for lim in limiter.limits]
    locked = result.locked_out
    locked_for = float(result.retry_after or 0.0) if locked else 0.0
    report: Dict[str, Any] = {
        "key": key,
        "limiter": limiter.name,
        "store": shown,
        "allowed": not locked and all(b["allowed"] for b in buckets),
        "retry_after": max([locked_for] + [b["retry_after"] for b in buckets]),
        "limits": buckets,
    }
    if limiter.lockout is not None:
        report["locked_out"] = locked
        report["locked_out_for"] = locked_for
    return report


def _reset_report(limiter: RateLimiter, key: str, shown: str) -> Dict[str, Any]:
    return {
        "key": key,
        "limiter": limiter.name,
        "store": shown,
        "reset": True,
        "limits": [
            {"name": lim.name, "rate": lim.rate, "burst": lim.burst} for lim in limiter.limits
        ],
    }


def _seconds(value: float) -> str:
    """``0 s``, ``0.250 s``, ``35.8 s``: a wait for people."""
    if value <= 0:
        return "0 s"
    return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"


def _origin(report: Dict[str, Any], source: str) -> str:
    where = f" (from {STORAGE_URL_ENV})" if source == STORAGE_URL_ENV else ""
    return f"limiter {_printable(report['limiter'])} on {report['store']}{where}"


def _inspect_text(report: Dict[str, Any], source: str) -> str:
    header = ("limit", "burst", "tokens", "exact", "full in", "request now")
    rows = [header]
    for b in report["limits"]:
        now = "allowed" if b["allowed"] else f"denied, in {_seconds(b['retry_after'])}"
        rows.append(
            (
                b["name"],
                str(b["burst"]),
                str(b["tokens"]),
                f"{b['tokens_exact']:.4f}",
                _seconds(b["full_in"]),
                now,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"key {_printable(report['key'])} of {_origin(report, source)}"]
    for row in rows:
        cells = [
            cell.ljust(width) if i in (0, len(row) - 1) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths))
        ]
        lines.append("  ".join(cells).rstrip())
    if report.get("locked_out"):
        lines.append(f"locked out: for {_seconds(report['locked_out_for'])} more")
    if len(report["limits"]) > 1 or "locked_out" in report:
        verdict = (
            "allowed" if report["allowed"] else f"denied, in {_seconds(report['retry_after'])}"
        )
        lines.append(f"a request of cost 1 now: {verdict}")
    return "\n".join(lines)


def _reset_text(report: Dict[str, Any], source: str) -> str:
    limits = ", ".join(f"{lim['name']} (burst {lim['burst']})" for lim in report["limits"])
    key = _printable(report["key"])
    return f"reset key {key} of {_origin(report, source)}: full buckets for {limits}"


def _printable(text: str) -> str:
    """``repr(text)`` for a terminal: control characters escaped (see ``_escape``)."""
    return _escape(repr(text))


_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escape(text: str) -> str:
    """``text`` with C0, DEL, C1 and bidi controls as ``\\xNN``/``\\uNNNN``: a key a client
    chose must not set the terminal's title, clear it or reorder a line."""
    out = []
    for char in text:
        code = ord(char)
        if code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif char in _BIDI:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


# -- top ------------------------------------------------------------------------


def _top_command(args: argparse.Namespace, sub: argparse.ArgumentParser) -> int:
    import base64
    import urllib.error
    import urllib.parse
    import urllib.request

    url: str = args.url
    parts = urllib.parse.urlsplit(url)
    shown = redact_url(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        sub.error(f"--url must be an http:// or https:// URL, got {shown!r}")
    if not 1 <= args.n <= 1000:
        sub.error(f"-n must be from 1 to 1000, got {args.n}")
    if not 0 < args.timeout <= 60:
        sub.error(f"--timeout must be seconds from 0 to 60, got {args.timeout}")
    query = urllib.parse.urlencode({"n": args.n})
    # user:password@ goes in a header: urllib would read it as part of the host.
    netloc = parts.netloc.rpartition("@")[2]
    fetch = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path or "/", query, ""))
    request = urllib.request.Request(fetch, headers={"Accept": "application/json"})
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    opener = _same_origin_opener()
    try:
        with opener.open(request, timeout=args.timeout) as response:
            payload = json.loads(response.read(1_000_000))
        offenders = payload["offenders"]
        rows = [(str(o["key"]), int(o["count"]), int(o["error"])) for o in offenders]
        window, total = float(payload["window_seconds"]), int(payload["total"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = getattr(exc, "reason", None) or exc
        print(f"limiter top: cannot read {shown}: {_escape(str(reason))}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(payload, indent=1))
        return 0
    print(f"{total} denials in the last {_duration(window)} ({shown})")
    if not rows:
        print("no key denied")
        return 0
    rows = [(_escape(key), count, error) for key, count, error in rows]  # keys clients chose
    width = max(len(key) for key, _, _ in rows)
    for key, count, error in rows:
        bound = f"  (up to {error} fewer)" if error else ""
        print(f"{key:<{width}}  {count}{bound}")
    return 0


def _origin_of(url: str) -> Tuple[str, str, Optional[int]]:
    """``(scheme, host, port)`` of ``url``, the port made explicit: its origin."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def _same_origin_opener() -> Any:
    """An opener that follows redirects but sends ``Authorization`` only to its origin.

    urllib copies a request's headers onto the redirected request whatever its
    host or scheme: a 302 to another port or host, or from https to http,
    would receive the URL's password.
    """
    import urllib.request

    class SameOriginCredentials(urllib.request.HTTPRedirectHandler):
        def redirect_request(
            self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
        ) -> Any:
            new = super().redirect_request(req, fp, code, msg, headers, newurl)
            if new is not None and _origin_of(new.full_url) != _origin_of(req.full_url):
                for name in [h for h in new.headers if h.lower() == "authorization"]:
                    del new.headers[name]
                new.unredirected_hdrs.pop("Authorization", None)
            return new

    return urllib.request.build_opener(SameOriginCredentials())


# Last: main() calls functions defined anywhere above.
if __name__ == "__main__":
    sys.exit(main())
