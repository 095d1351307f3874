"""Command line: ``python -m limiter demo`` serves a small rate-limited JSON API.

The demo runs the standard library's ``ThreadingHTTPServer`` behind
``limiter.adapters.httpserver.rate_limited``; it needs nothing else installed
(a ``redis://`` store needs the ``redis`` extra).

Its defaults are chosen so that the loop it prints shows the limit on the
first try on any machine: ``5/minute`` with a burst of 5 refills one token
every 12 s, and the loop sends burst + 3 requests, so it prints five ``200``
and three ``429`` unless the eight requests take more than 12 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type

from . import __version__
from .adapters.common import RequestInfo
from .adapters.httpserver import rate_limited
from .ratelimiter import RateLimiter
from .store import StoreError
from .urls import STORAGE_URL_ENV, redact_url, resolve_store

__all__ = ["demo_handler", "main"]

#: The demo's default limit: slow enough that no machine refills a token
#: while the printed loop runs (one every 12 s), so the 429s always show.
DEFAULT_RATE = "5/minute"
#: How many requests past the burst the printed loop sends (the 429s it shows).
EXTRA_REQUESTS = 3
# A refill interval at least this long (seconds) makes the printed loop's
# output certain: its burst + 3 requests take well under a second.
_SURE_INTERVAL = 10.0

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
) -> Type[BaseHTTPRequestHandler]:
    """The demo's handler class: ``/`` and ``/time`` are limited, ``/health`` is exempt.

    ``description`` is the limit as ``/`` reports it (default: ``_describe_limits``);
    ``header_style`` is the adapters' option (``"x"``, ``"draft"`` or ``"both"``).
    """

    def exempt(request: RequestInfo) -> bool:
        return request.path == "/health"

    @rate_limited(limiter, exempt=exempt, header_style=header_style)
    class DemoHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = -1  # one send per response: no Nagle stalls on kept-alive connections
        server_version = f"limiter-demo/{__version__}"

        def _json(self, status: int, payload: Dict[str, Any]) -> None:
            body = json.dumps(payload, separators=(",", ":")).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _route(self) -> Tuple[int, Dict[str, Any]]:
            path = self.path.partition("?")[0]
            if path == "/":
                return 200, {
                    "hello": "world",
                    "limit": described,
                    "endpoints": ["/", "/time", "/health"],
                }
            if path == "/time":
                return 200, {"unix": time.time()}
            if path == "/health":
                return 200, {"status": "ok"}
            return 404, {"status": 404, "code": "not_found", "message": "no such endpoint"}

        def do_GET(self) -> None:
            self._json(*self._route())

        do_HEAD = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    described = _describe_limits(limiter) if description is None else description
    return DemoHandler


def _parser() -> argparse.ArgumentParser:
    return _parsers()[0]


def _parsers() -> Tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command line's parser and its ``demo`` subparser (for the demo's usage errors)."""
    parser = argparse.ArgumentParser(prog="limiter", description="tokenlimiter tools")
    parser.add_argument("--version", action="version", version=f"tokenlimiter {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="serve a small rate-limited JSON API",
        description=(
            "Serve a small JSON API on http.server behind the rate limiter, and print "
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
    return parser, demo


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
    """Run the command line; returns the exit status."""
    parser, demo = _parsers()
    args = parser.parse_args(argv)
    if args.command != "demo":
        parser.print_help()
        return 2
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
        limiter = RateLimiter(list(limits), store=store, name="demo")
        with _brief_logging():
            problem = _check_store(store, shown_store)
            if problem is not None:
                print(f"limiter demo: {problem}", file=sys.stderr)
                return 1
            return _serve(args, limiter, shown_store)
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()


def _serve(args: argparse.Namespace, limiter: RateLimiter, shown_store: str) -> int:
    described = _describe_limits(limiter, args.rate)
    handler = demo_handler(limiter, description=described, header_style=args.headers)
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
    print(f"limiter demo: serving {url} at {described} (Ctrl-C to stop)")
    print(f"limiter demo: store {shown_store}; {_HEADER_STYLES[args.headers]}")
    print(
        "watch the 429s: "
        f"for i in $(seq {burst + EXTRA_REQUESTS}); "
        f"do curl -s -o /dev/null -w '%{{http_code}} ' {url}; done; echo"
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


if __name__ == "__main__":
    sys.exit(main())
