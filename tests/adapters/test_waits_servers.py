"""Waiting instead of refusing under a real uvicorn (issue 26, item 5).

The slot test serves the ASGI adapter with ``max_wait`` around a slow view
under ``Concurrency(3)``: it takes a slot per request (waiting for one in
arrival order), holds it for the response and gives it back.  The view
waits on an event (all 20 requests have arrived), not on a timer.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, List

import httpx
import pytest

from helpers.servers import uvicorn_running
from limiter import Concurrency, ManualClock, RateLimiter
from limiter.adapters.asgi import RateLimitMiddleware

pytestmark = pytest.mark.servers

CLIENTS = 20
LIMIT = 3


class SlowGateway:
    """The ASGI adapter with ``max_wait`` around a slow view, under ``Concurrency(3)`` per key.

    Arrivals are counted before the adapter (their order is the clients'); the
    view counts who is inside and holds every request until all 20 have arrived.
    """

    def __init__(self) -> None:
        self.limiter = RateLimiter({"inflight": Concurrency(LIMIT, lease=60)}, name="gw")
        self.adapter = RateLimitMiddleware(
            self.view, self.limiter, key_func=lambda request: "client", max_wait=30.0
        )
        self.arrived = 0
        self.arrivals = threading.Condition()
        self.inside = 0
        self.most_inside = 0
        self.admitted: List[int] = []
        self.at_once: List[int] = []  # in the view before the last arrival: no wait
        self.all_here: Any = None  # an asyncio.Event, made on the server's loop

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if self.all_here is None:
            self.all_here = asyncio.Event()
        with self.arrivals:
            self.arrived += 1
            self.arrivals.notify_all()
        if self.arrived == CLIENTS:
            self.all_here.set()
        await self.adapter(scope, receive, send)

    async def view(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        number = int(scope["query_string"].decode().partition("=")[2])
        self.inside += 1
        try:
            assert self.inside <= LIMIT, f"{self.inside} requests inside at once"
            self.most_inside = max(self.most_inside, self.inside)
            self.admitted.append(number)
            if not self.all_here.is_set():
                self.at_once.append(number)
            await self.all_here.wait()  # slow: held until every request has arrived
        finally:
            self.inside -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(number).encode()})


def test_twenty_requests_wait_for_three_slots_in_arrival_order() -> None:
    app = SlowGateway()
    statuses: Dict[int, int] = {}

    def client(number: int, url: str) -> None:
        response = httpx.get(f"{url}/?n={number}", timeout=60)
        statuses[number] = response.status_code

    with uvicorn_running(app) as url:
        threads = []
        for number in range(CLIENTS):
            thread = threading.Thread(target=client, args=(number, url))
            thread.start()
            threads.append(thread)
            with app.arrivals:  # the next one leaves once this one is in the server
                assert app.arrivals.wait_for(lambda n=number: app.arrived > n, timeout=30)
        for thread in threads:
            thread.join(60)
    assert statuses == {number: 200 for number in range(CLIENTS)}
    assert app.admitted == list(range(CLIENTS))  # arrival order
    assert app.at_once == [0, 1, 2]  # exactly three without waiting
    assert app.most_inside == LIMIT


async def hello(scope: Dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


def test_the_asgi_adapter_waits_for_tokens_instead_of_refusing() -> None:
    clock = ManualClock()
    limiter = RateLimiter("3/second", clock=clock)
    app = RateLimitMiddleware(hello, limiter, max_wait=1.0)
    with uvicorn_running(app) as url, httpx.Client(base_url=url) as session:
        statuses = [session.get("/").status_code for _ in range(5)]
    assert statuses == [200] * 5
    assert clock.now() == pytest.approx(2 / 3)  # two waits of a third of a second
