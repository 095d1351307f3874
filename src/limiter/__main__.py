"""Command line: ``python -m limiter demo`` serves a small rate-limited JSON API.

The demo runs the standard library's ``ThreadingHTTPServer`` behind
``limiter.adapters.httpserver.rate_limited``; it needs nothing else installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple, Type

from . import __version__
from .adapters.common import RequestInfo
from .adapters.httpserver import rate_limited
from .ratelimiter import RateLimiter

__all__ = ["demo_handler", "main"]


def demo_handler(limiter: RateLimiter) -> Type[BaseHTTPRequestHandler]:
    """The demo's handler class: ``/`` and ``/time`` are limited, ``/health`` is exempt."""

    def exempt(request: RequestInfo) -> bool:
        return request.path == "/health"

    @rate_limited(limiter, exempt=exempt)
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

    described = "; ".join(str(lim) for lim in limiter.limits)
    return DemoHandler


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="limiter", description="tokenlimiter tools")
    parser.add_argument("--version", action="version", version=f"tokenlimiter {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="serve a small rate-limited JSON API",
        description="Serve a small JSON API on http.server behind the rate limiter.",
    )
    demo.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    demo.add_argument("--port", type=int, default=8484, help="port (default 8484; 0 = any free)")
    demo.add_argument("--rate", default="10/second", help="sustained rate (default 10/second)")
    demo.add_argument("--burst", type=int, default=20, help="bucket capacity (default 20)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command != "demo":
        parser.print_help()
        return 2
    try:
        limiter = RateLimiter(args.rate, args.burst, name="demo")
    except ValueError as exc:
        parser.error(str(exc))
    try:
        server = ThreadingHTTPServer((args.host, args.port), demo_handler(limiter))
    except OSError as exc:
        print(f"limiter demo: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    server.daemon_threads = True
    host, port = server.server_address[:2]
    if isinstance(host, bytes):
        host = host.decode()
    shown = f"[{host}]" if ":" in str(host) else str(host)
    url = f"http://{shown}:{port}/"
    described = "; ".join(str(lim) for lim in limiter.limits)
    print(f"limiter demo: serving {url} at {described} (Ctrl-C to stop)", flush=True)
    print(
        "watch the 429s: "
        f"for i in $(seq {limiter.burst + 5}); "
        f"do curl -s -o /dev/null -w '%{{http_code}} ' {url}; done; echo",
        flush=True,
    )
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
