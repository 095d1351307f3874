"""Waiting instead of refusing under a real uvicorn and a real gunicorn (issue 26, item 5).

The slot tests serve an adapter with ``max_wait`` around a slow view under
``Concurrency(3)``: each of 20 requests takes a slot (waiting for one in
arrival order), holds it for the response and gives it back.  The requests
are sent one by one, each once the server has the previous one in hand
(``in_arrival_order``), and the view waits on an event, not on a timer:
under uvicorn the last arrival sets it; under gunicorn (one gthread worker,
so that arrival order is one process's) the test does, once all 20 are in
the view or queued, as the worker's ``/stats`` says.
"""

from __future__ import annotations

import asyncio
import textwrap
import threading
import time
from typing import Any, Dict, List

import httpx
import pytest

from helpers.servers import gunicorn_process, in_arrival_order, uvicorn_running
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

    def arrived(number: int) -> None:
        with app.arrivals:  # the next one leaves once this one is in the server
            assert app.arrivals.wait_for(lambda: app.arrived > number, timeout=30)

    with uvicorn_running(app) as url:
        statuses = in_arrival_order(
            CLIENTS, lambda n: httpx.get(f"{url}/?n={n}", timeout=60).status_code, arrived
        )
    assert statuses == [200] * CLIENTS
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


# -- gunicorn (one gthread worker): the WSGI adapter waits on worker threads ---------

MAX_WAIT = 20.0

GUNICORN_GATEWAY = textwrap.dedent(
    f"""
    import json, threading

    from limiter import Concurrency, RateLimiter
    from limiter.adapters.wsgi import RateLimitMiddleware

    LIMIT = {LIMIT}
    lock = threading.Lock()
    room = {{"inside": 0, "most": 0, "entered": 0, "admitted": []}}
    go = threading.Event()
    request = threading.local()  # the number of the request this thread serves


    def taken(event):
        # Reported as the slot is taken, in the taker's thread: the order of
        # admission, whichever thread then reaches the view first.
        if event.outcome == "allowed":
            room["admitted"].append(request.number)


    LIMITER = RateLimiter(
        {{"inflight": Concurrency(LIMIT, lease=60)}}, name="gw", on_decision=taken
    )


    def answer(start_response, body):
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]


    def view(environ, start_response):
        with lock:
            room["inside"] += 1
            room["entered"] += 1
            room["most"] = max(room["most"], room["inside"])
            inside = room["inside"]
        try:
            assert inside <= LIMIT, f"{{inside}} requests inside the view"
            go.wait(60)  # slow: until the test lets them out
        finally:
            with lock:
                room["inside"] -= 1
        return answer(start_response, request.number)


    GATEWAY = RateLimitMiddleware(
        view, LIMITER, key_func=lambda r: "client", max_wait={MAX_WAIT}, max_queue={CLIENTS}
    )


    def app(environ, start_response):
        path = environ["PATH_INFO"]
        if path in ("/health", "/stats"):
            with lock:
                return answer(start_response, {{**room, "waiting": GATEWAY.guard.waits.waiting}})
        if path == "/go":
            go.set()
            return answer(start_response, {{}})
        request.number = int(environ["QUERY_STRING"].partition("=")[2])
        return GATEWAY(environ, start_response)
    """
)


def test_gunicorn_gthread_20_requests_wait_for_3_slots_in_arrival_order(tmp_path: Any) -> None:
    # One worker: arrival order is one process's; 24 threads: 20 requests and the test's.
    (tmp_path / "gateway.py").write_text(GUNICORN_GATEWAY)
    options = ("--workers", "1", "--worker-class", "gthread", "--threads", "24")
    with (
        gunicorn_process(tmp_path, "gateway:app", *options) as (url, _),
        httpx.Client(base_url=url, timeout=60) as stats,
    ):

        def arrived(number: int) -> None:
            # In the server's hands: in the view, or in the line for a slot.
            end = time.monotonic() + 60  # generous: a busy machine
            while True:
                room = stats.get("/stats").json()
                if room["entered"] + room["waiting"] > number:
                    return
                assert time.monotonic() < end, f"request {number} did not arrive"

        started = time.monotonic()
        answers = in_arrival_order(
            CLIENTS,
            lambda n: httpx.get(f"{url}/slow?n={n}", timeout=60),
            arrived,
            release=lambda: stats.get("/go"),
        )
        served = time.monotonic() - started
        room = stats.get("/stats").json()
    assert [(a.status_code, a.json()) for a in answers] == [(200, n) for n in range(CLIENTS)]
    assert room["admitted"] == list(range(CLIENTS))  # slots taken in arrival order
    assert (room["most"], room["entered"], room["inside"]) == (LIMIT, CLIENTS, 0)
    assert served < MAX_WAIT  # every one within max_wait of its arrival, or it had a 429
