"""End to end: real servers on free loopback ports, hit with httpx.

uvicorn (ASGI) and waitress (WSGI) run in threads of this process, so they
share a ManualClock with the test; gunicorn runs in a subprocess, so its
limit ("3/hour") refills too slowly to matter during the test.
"""

from __future__ import annotations

import asyncio
import math
import textwrap
import time

import httpx
import pytest

from helpers.servers import gunicorn_running, uvicorn_running, waitress_running
from limiter import ManualClock, RateLimiter
from limiter.adapters.asgi import RateLimitMiddleware as ASGIMiddleware
from limiter.adapters.wsgi import RateLimitMiddleware as WSGIMiddleware

pytestmark = pytest.mark.servers

BODY_429 = b'{"status":429,"code":"rate_limited","message":"too many requests"}'


# -- uvicorn ---------------------------------------------------------------------


async def asgi_hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": b"hello"})


@pytest.fixture(scope="module")
def uvicorn_server():
    clock = ManualClock()
    limiter = RateLimiter("3/second", clock=clock)
    app = ASGIMiddleware(
        asgi_hello,
        limiter,
        trusted_proxies=["127.0.0.1"],
        proxy_header="x-forwarded-for",
        exempt=lambda r: r.path == "/health",
    )
    # proxy_headers=False: uvicorn would otherwise rewrite scope["client"] from
    # X-Forwarded-For itself (see docs/proxies.md).
    with uvicorn_running(app, proxy_headers=False) as url:
        yield url, limiter, clock


def test_uvicorn_exact_counts_headers_and_body(uvicorn_server):
    url, _, clock = uvicorn_server
    clock.advance(10)
    with httpx.Client(base_url=url) as client:
        responses = [client.get("/") for _ in range(4)]
        assert [r.status_code for r in responses] == [200, 200, 200, 429]
        assert [r.headers["x-ratelimit-remaining"] for r in responses] == ["2", "1", "0", "0"]
        assert responses[0].text == "hello"
        assert responses[0].headers["content-type"] == "text/plain"
        denied = responses[3]
        assert denied.content == BODY_429
        assert denied.headers["content-type"] == "application/json"
        assert denied.headers["retry-after"] == "1"
        head = client.head("/")
        assert (head.status_code, head.content) == (429, b"")
        clock.advance(1 / 3)
        assert client.get("/").status_code == 200
        assert client.get("/health").status_code == 200


def test_uvicorn_repeated_forwarded_headers_from_a_trusted_peer(uvicorn_server):
    url, limiter, clock = uvicorn_server
    clock.advance(10)
    headers = [("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-For", "198.51.100.4")]
    with httpx.Client(base_url=url) as client:
        statuses = [client.get("/", headers=headers).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert limiter.peek("ip:198.51.100.4").remaining == 0
    assert limiter.peek("ip:127.0.0.1").remaining == 3


def test_uvicorn_async_client_concurrency_admits_exactly_burst(uvicorn_server):
    url, _, clock = uvicorn_server
    clock.advance(10)

    async def burst():
        async with httpx.AsyncClient(base_url=url) as client:
            return await asyncio.gather(*(client.get("/") for _ in range(10)))

    statuses = [r.status_code for r in asyncio.run(burst())]
    assert sorted(statuses) == [200] * 3 + [429] * 7


# -- waitress --------------------------------------------------------------------


def wsgi_hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


@pytest.fixture(scope="module")
def waitress_server():
    clock = ManualClock()
    limiter = RateLimiter("3/second", clock=clock)
    app = WSGIMiddleware(wsgi_hello, limiter)
    with waitress_running(app, threads=4) as url:
        yield url, limiter, clock


def test_waitress_exact_counts_headers_and_body(waitress_server):
    url, _, clock = waitress_server
    with httpx.Client(base_url=url) as client:
        responses = [client.get("/") for _ in range(4)]
        assert [r.status_code for r in responses] == [200, 200, 200, 429]
        assert responses[0].headers["x-ratelimit-limit"] == "3"
        assert responses[0].text == "hello"
        assert responses[3].content == BODY_429
        assert responses[3].headers["retry-after"] == "1"
        head = client.head("/")
        assert (head.status_code, head.content) == (429, b"")
        assert client.post("/", content=b"x" * 10_000).status_code == 429
        clock.advance(1 / 3)
        assert client.get("/").status_code == 200
        assert client.get("/").status_code == 429


# -- gunicorn --------------------------------------------------------------------

GUNICORN_APP = textwrap.dedent(
    """
    from limiter import RateLimiter
    from limiter.adapters.wsgi import RateLimitMiddleware

    def hello(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]

    app = RateLimitMiddleware(
        hello, RateLimiter("3/hour"), exempt=lambda r: r.path == "/health"
    )
    """
)


@pytest.fixture(scope="module")
def gunicorn_server(tmp_path_factory):
    with gunicorn_running(GUNICORN_APP, tmp_path_factory.mktemp("gunicorn_app")) as url:
        yield url


def test_gunicorn_exact_counts_headers_and_body(gunicorn_server):
    with httpx.Client(base_url=gunicorn_server) as client:
        started = time.monotonic()
        responses = [client.get("/") for _ in range(4)]
        elapsed = time.monotonic() - started
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert [r.headers["x-ratelimit-remaining"] for r in responses] == ["2", "1", "0", "0"]
    assert responses[0].text == "hello"
    assert responses[3].content == BODY_429
    # A real clock: 1200 s less the time the requests took, rounded up (1200 but
    # on a very busy machine).
    assert 1200 - math.ceil(elapsed) <= int(responses[3].headers["retry-after"]) <= 1200
