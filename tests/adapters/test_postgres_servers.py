"""The PostgreSQL stores behind real servers: gunicorn with several workers, uvicorn.

A throwaway PostgreSQL (tests/helpers/postgres_servers.py) holds the one key
every request from 127.0.0.1 charges.  gunicorn's workers are processes, each
with its own ``PostgresStore`` and pool: exactly ``burst`` requests are
admitted among them, the others get real 429s.  uvicorn serves an
``AsyncPostgresStore`` on its event loop with as many requests in flight.
The limits are per hour on the real clock: nothing refills during a test.
"""

from __future__ import annotations

import asyncio
import textwrap
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, List, Set

import httpx
import pytest

from helpers.postgres_servers import PostgresServer, postgres_server
from helpers.servers import gunicorn_running, uvicorn_running
from limiter import RateLimiter
from limiter.adapters.asgi import RateLimitMiddleware as ASGIMiddleware
from limiter.backends.postgres import AsyncPostgresStore

pytestmark = [pytest.mark.servers, pytest.mark.postgres]

BURST = 10
REQUESTS = 40
WORKERS = 3


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    yield from postgres_server()


# -- gunicorn, several workers, PostgresStore ---------------------------------------

GUNICORN_APP = textwrap.dedent(
    f"""
    import os
    from limiter import RateLimiter
    from limiter.adapters.wsgi import RateLimitMiddleware
    from limiter.backends.postgres import PostgresStore

    def hello(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]

    store = PostgresStore(os.environ["TEST_POSTGRES_URL"], table="gunicorn_rates")
    limited = RateLimitMiddleware(
        hello, RateLimiter("{BURST}/hour", store=store), exempt=lambda r: r.path == "/health"
    )

    def app(environ, start_response):  # every response names the worker that made it
        def respond(status, headers, exc_info=None):
            headers = headers + [("X-Worker", str(os.getpid()))]
            return start_response(status, headers, exc_info)

        return limited(environ, respond)
    """
)


def parallel_gets(url: str, path: str, n: int) -> List[httpx.Response]:
    """``n`` GETs of ``path``, 8 connections at a time (each request its own connection)."""

    def get(_: int) -> httpx.Response:
        return httpx.get(url + path, timeout=30)

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(get, range(n)))


def test_gunicorn_workers_admit_exactly_burst_on_one_key(
    pg: PostgresServer, tmp_path_factory: Any
) -> None:
    folder = tmp_path_factory.mktemp("gunicorn_postgres")
    env = {"TEST_POSTGRES_URL": pg.url()}
    with gunicorn_running(GUNICORN_APP, folder, workers=WORKERS, env=env) as url:
        # Several workers answer (the exempt path, until two have: the kernel
        # hands connections to whichever worker accepts first).
        workers: Set[str] = set()
        for _ in range(20):
            workers |= {r.headers["x-worker"] for r in parallel_gets(url, "/health", 16)}
            if len(workers) >= 2:
                break
        assert len(workers) >= 2
        responses = parallel_gets(url, "/", REQUESTS)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * BURST + [429] * (REQUESTS - BURST)
    admitted = [r for r in responses if r.status_code == 200]
    assert {r.text for r in admitted} == {"hello"}
    remaining = sorted(int(r.headers["x-ratelimit-remaining"]) for r in admitted)
    assert remaining == list(range(BURST))  # each token taken once, whichever worker took it
    refused = [r for r in responses if r.status_code == 429]
    assert all(int(r.headers["retry-after"]) > 0 for r in refused)


# -- uvicorn, AsyncPostgresStore -----------------------------------------------------


def test_uvicorn_async_store_admits_exactly_burst_of_concurrent_requests(
    pg: PostgresServer,
) -> None:
    store = AsyncPostgresStore(pg.url(), table="uvicorn_rates", max_connections=4)

    async def hello(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/close":  # the pool closes on the loop that made it
            await store.aclose()
        start = {"type": "http.response.start", "status": 200, "headers": []}
        await send(start)
        await send({"type": "http.response.body", "body": b"hello"})

    limiter = RateLimiter(f"{BURST}/hour", store=store)
    app = ASGIMiddleware(hello, limiter, exempt=lambda r: r.path == "/close")

    async def burst(url: str) -> List[httpx.Response]:
        limits = httpx.Limits(max_connections=REQUESTS)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
            return await asyncio.gather(*(client.get("/") for _ in range(REQUESTS)))

    with uvicorn_running(app) as url:
        responses = asyncio.run(burst(url))
        assert httpx.get(url + "/close", timeout=30).status_code == 200
    assert store.pool is None
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * BURST + [429] * (REQUESTS - BURST)
    remaining = sorted(int(r.headers["x-ratelimit-remaining"]) for r in responses)
    assert remaining == [0] * (REQUESTS - BURST) + list(range(BURST))
