"""Section ``middleware``: per-request cost of each rate-limiting middleware over the bare app.

Requests are driven in-process (no sockets, no server): an ASGI scope through
an event loop, a WSGI environ through ``start_response``, and a raw HTTP/1.1
request through a ``BaseHTTPRequestHandler`` on a fake socket.  Each app runs
a batch per round, interleaved with its bare twin; the overhead of a round is
``time(app + middleware) - time(bare app)`` per request, and the published
figure is the median over rounds (with the range).
"""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any, Callable, Dict, List, Tuple

from .apps import APPS
from .common import (
    Measure,
    Progress,
    Settings,
    Unavailable,
    interleave,
    new_section,
    profile_text,
    summary,
)

SCOPE: Dict[str, Any] = {
    "type": "http",
    "asgi": {"version": "3.0", "spec_version": "2.3"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/",
    "raw_path": b"/",
    "query_string": b"",
    "root_path": "",
    "headers": [(b"host", b"bench"), (b"user-agent", b"bench"), (b"accept", b"*/*")],
    "client": ("127.0.0.1", 50000),
    "server": ("127.0.0.1", 8000),
}

ENVIRON: Dict[str, Any] = {
    "REQUEST_METHOD": "GET",
    "SCRIPT_NAME": "",
    "PATH_INFO": "/",
    "QUERY_STRING": "",
    "SERVER_NAME": "bench",
    "SERVER_PORT": "8000",
    "SERVER_PROTOCOL": "HTTP/1.1",
    "REMOTE_ADDR": "127.0.0.1",
    "HTTP_HOST": "bench",
    "HTTP_USER_AGENT": "bench",
    "HTTP_ACCEPT": "*/*",
    "wsgi.version": (1, 0),
    "wsgi.url_scheme": "http",
    "wsgi.input": io.BytesIO(b""),
    "wsgi.errors": io.StringIO(),
    "wsgi.multithread": False,
    "wsgi.multiprocess": False,
    "wsgi.run_once": False,
}

RAW_REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench\r\nConnection: close\r\n\r\n"


def asgi_batch(app: Any) -> Callable[[int], float]:
    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    statuses: List[int] = []

    async def send(message: Dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def many(n: int) -> float:
        scope = SCOPE
        start = time.perf_counter()
        for _ in range(n):
            await app(dict(scope), receive, send)
        return time.perf_counter() - start

    loop = asyncio.new_event_loop()

    def batch(n: int) -> float:
        statuses.clear()
        seconds = loop.run_until_complete(many(n))
        if statuses.count(200) != n:
            raise RuntimeError(f"expected {n} 200s, got {sorted(set(statuses))}")
        return seconds

    return batch


def wsgi_batch(app: Any) -> Callable[[int], float]:
    statuses: List[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        statuses.append(status)
        return None

    def batch(n: int) -> float:
        statuses.clear()
        environ = ENVIRON
        start = time.perf_counter()
        for _ in range(n):
            body = app(dict(environ), start_response)
            for _chunk in body:
                pass
            close = getattr(body, "close", None)
            if close is not None:
                close()
        seconds = time.perf_counter() - start
        if sum(s.startswith("200") for s in statuses) != n:
            raise RuntimeError(f"expected {n} 200s, got {sorted(set(statuses))}")
        return seconds

    return batch


class _FakeSocket:
    def __init__(self) -> None:
        self.sent = 0

    def makefile(self, mode: str, bufsize: int = -1) -> Any:
        return io.BytesIO(RAW_REQUEST)

    def sendall(self, data: bytes) -> None:
        self.sent += len(data)

    def settimeout(self, value: Any) -> None:
        pass

    def setsockopt(self, *args: Any) -> None:
        pass


class _FakeServer:
    server_name = "bench"
    server_port = 8000


def httpserver_batch(handler: Any) -> Callable[[int], float]:
    server = _FakeServer()
    addr = ("127.0.0.1", 50000)

    def batch(n: int) -> float:
        sock = _FakeSocket()
        start = time.perf_counter()
        for _ in range(n):
            handler(sock, addr, server)
        seconds = time.perf_counter() - start
        if sock.sent < n * 12:
            raise RuntimeError("http.server handler sent no response")
        return seconds

    return batch


BATCHERS = {"asgi": asgi_batch, "wsgi": wsgi_batch, "httpserver": httpserver_batch}

#: comparisons: (title, bare app, [apps with a limiter])
GROUPS: List[Tuple[str, str, List[str]]] = [
    ("ASGI, raw app", "asgi.raw", ["asgi.raw+limiter"]),
    ("Starlette", "starlette", ["starlette+limiter", "starlette+slowapi"]),
    ("WSGI, raw app", "wsgi.raw", ["wsgi.raw+limiter", "wsgi.raw+limiter+observer"]),
    (
        "Flask",
        "flask",
        [
            "flask+limiter",
            "flask+RateLimit(default)",
            "flask+@rl.limit",
            "flask+flask-limiter",
            "flask+@flask-limiter.limit",
        ],
    ),
    (
        "FastAPI",
        "fastapi",
        ["fastapi+Depends(rl.limit)", "fastapi+RateLimit(default)", "fastapi+@slowapi.limit"],
    ),
    (
        "Django",
        "django",
        ["django+RateLimitMiddleware", "django+@ratelimit", "django+@django-ratelimit"],
    ),
    ("http.server", "http.server", ["http.server+limiter"]),
]


def build(name: str) -> Callable[[int], float]:
    factory, kind, _library = APPS[name]
    app = factory()
    batch: Callable[[int], float] = BATCHERS[kind](app)
    batch(10)  # warm-up: lazy middleware stacks, first-key creation
    return batch


def run(settings: Settings, progress: Progress) -> Dict[str, Any]:
    section = new_section("middleware")
    n = settings.scale(20_000, 500, 50)
    rounds = max(settings.rounds, 3) if not settings.tiny else 1
    overheads: Dict[str, Any] = {}
    any_ours = False
    for title, bare, variants in GROUPS:
        batches: Dict[str, Callable[[int], float]] = {}
        for name in [bare, *variants]:
            library = APPS[name][2]
            if library not in ("", "tokenlimiter") and not settings.with_peers:
                continue
            try:
                batches[name] = build(name)
                any_ours = any_ours or library == "tokenlimiter"
            except ImportError as exc:
                section["notes"].append(f"{name}: not available in this tree ({exc})")
            except Exception as exc:
                section["notes"].append(f"{name}: cannot be set up ({exc!r})")
        if bare not in batches or len(batches) < 2:
            continue
        cases = {name: (lambda b=b: b(n) / n * 1e6) for name, b in batches.items()}
        samples = interleave(cases, rounds, progress, f"middleware {title}")
        for name, values in samples.items():
            section["measures"].append(
                Measure(
                    id=f"middleware/{name}",
                    label=name,
                    library=APPS[name][2] or "(bare)",
                    unit="us/request",
                    samples=values,
                    group=title,
                ).as_dict()
            )
        for name in variants:
            if name not in samples or not samples[name]:
                continue
            diffs = [a - b for a, b in zip(samples[name], samples[bare])]
            overheads[name] = {
                "group": title,
                "bare": bare,
                "library": APPS[name][2],
                "samples": diffs,
                **summary(diffs),
            }
    if not any_ours:
        raise Unavailable(
            "no limiter adapter (limiter.adapters.asgi/wsgi/httpserver) in this tree; "
            + "; ".join(section["notes"])
        )
    section["data"]["overhead_us"] = overheads
    if "asgi.raw+limiter" in APPS and not (settings.tiny or settings.quick):
        try:
            batch = build("asgi.raw+limiter")
            section["data"]["profile"] = profile_text(lambda: batch(n // 4), top=12)
        except Exception as exc:
            section["notes"].append(f"profile failed: {exc!r}")
    section["data"]["requests_per_batch"] = n
    return section
