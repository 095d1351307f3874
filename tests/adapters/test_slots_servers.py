"""Issue 26: slots held for the whole response, under real servers on loopback.

20 concurrent requests to a slow endpoint under ``Concurrency(3)`` per key:
the view counts who is inside under a lock, and blocks on an event the test
sets only once all 20 have been answered or refused, so exactly 3 are
admitted and 17 refused, with no sleep as a timing device. Then: a streamed
response holds its slot until its last chunk, an exception gives the slot
back, and (gunicorn on SQLite and on Redis) a worker killed holding a slot has it
freed by its lease.

Giving back happens after the last byte is sent, so a client may see the
response end a moment before the slot is free: the tests poll, with a
deadline, for the slot to come back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import textwrap
import threading
import time
from typing import Any, Callable, Dict, List

import httpx
import pytest

from helpers.servers import gunicorn_process, uvicorn_running
from limiter import Concurrency, RateLimiter, store_from_url

pytestmark = pytest.mark.servers

CLIENTS = 20
SLOTS = 3
DEADLINE = 60.0  # generous: a busy machine


def until(predicate: Callable[[], bool], what: str) -> None:
    """Poll ``predicate`` (each call a round trip or a store read) until true, or fail."""
    end = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"


def burst(url: str, release: Callable[[], Any]) -> List[int]:
    """20 concurrent GETs of ``url``; ``release()`` once 17 have been answered.

    Returns the statuses of the first 17 to be answered, then of the other 3.
    """
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        futures = [
            pool.submit(lambda: httpx.get(url, timeout=DEADLINE).status_code)
            for _ in range(CLIENTS)
        ]
        try:
            done = concurrent.futures.as_completed(futures, timeout=DEADLINE)
            first = [next(done) for _ in range(CLIENTS - SLOTS)]
        finally:
            release()  # the admitted ones leave the view
        rest = [f for f in futures if f not in first]
        return [f.result(DEADLINE) for f in first + rest]


def streams_holding_its_slot(url: str, step: Callable[[], Any]) -> None:
    """``/one/stream`` (``Concurrency(1)``) sends its first chunk, then its last after
    ``step()``: while it streams ``/one/quick`` is refused, after the last chunk admitted."""
    with (
        httpx.Client(base_url=url, timeout=DEADLINE) as client,
        client.stream("GET", "/one/stream") as streamed,
    ):
        chunks = streamed.iter_raw()
        assert next(chunks) == b"first"
        refused = client.get("/one/quick")
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1  # a hint: the lease's end at the latest
        step()
        assert b"".join(chunks) == b"last"
    until(
        lambda: httpx.get(url + "/one/quick", timeout=DEADLINE).status_code == 200,
        "the streamed response's slot",
    )


# -- uvicorn: the ASGI adapter and the FastAPI integration --------------------------


class Room:
    """Who is inside the view, counted under a lock; ``go`` lets them out."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0
        self.entered = 0
        self.go = threading.Event()
        self.step = threading.Event()

    def enter(self) -> None:
        with self.lock:
            self.inside += 1
            self.entered += 1
            self.most = max(self.most, self.inside)
            assert self.inside <= SLOTS, f"{self.inside} requests inside the view"

    def leave(self) -> None:
        with self.lock:
            self.inside -= 1

    async def wait(self, event: threading.Event) -> None:
        # The event is set from the test's thread: wait for it off the loop.
        await asyncio.get_running_loop().run_in_executor(None, event.wait, DEADLINE)


def fastapi_app(room: Room, limiter_of: Callable[[str], RateLimiter], integration: bool) -> Any:
    from fastapi import Depends, FastAPI
    from fastapi.responses import StreamingResponse

    from limiter.adapters.asgi import RateLimitMiddleware
    from limiter.integrations.fastapi import RateLimit

    app = FastAPI()
    if integration:
        rl = RateLimit(app, key_func=lambda r: "k")
        three = [Depends(rl.limit(limiter_of("three")))]
        one = [Depends(rl.limit(limiter_of("one")))]
    else:
        three = one = []
        app.add_middleware(
            RateLimitMiddleware,
            limiter=lambda r: limiter_of("one" if r.path.startswith("/one") else "three"),
            key_func=lambda r: "k",
            header_style="draft",
        )

    @app.get("/slow", dependencies=three)
    async def slow() -> Dict[str, str]:
        room.enter()
        try:
            await room.wait(room.go)
        finally:
            room.leave()
        return {"ok": "yes"}

    @app.get("/boom", dependencies=three)
    async def boom() -> None:
        raise RuntimeError("the view failed")

    @app.get("/one/stream", dependencies=one)
    async def stream() -> StreamingResponse:
        async def chunks() -> Any:
            yield b"first"
            await room.wait(room.step)
            yield b"last"

        return StreamingResponse(chunks())

    @app.get("/one/quick", dependencies=one)
    async def quick() -> Dict[str, str]:
        return {"ok": "yes"}

    return app


def free(limiter: RateLimiter) -> int:
    return limiter.peek("k").remaining


@pytest.mark.parametrize("integration", [False, True], ids=["asgi-adapter", "fastapi-rl"])
def test_uvicorn_20_concurrent_3_slots(integration: bool) -> None:
    room = Room()
    limiters = {
        "three": RateLimiter(Concurrency(SLOTS, lease=60), name="three"),
        "one": RateLimiter(Concurrency(1, lease=60), name="one"),
    }
    app = fastapi_app(room, limiters.__getitem__, integration)
    with uvicorn_running(app, proxy_headers=False) as url:
        statuses = burst(url + "/slow", room.go.set)
        assert statuses[: CLIENTS - SLOTS] == [429] * (CLIENTS - SLOTS)
        assert sorted(statuses[CLIENTS - SLOTS :]) == [200] * SLOTS
        assert (room.most, room.entered, room.inside) == (SLOTS, SLOTS, 0)
        until(lambda: free(limiters["three"]) == SLOTS, "the 3 slots to be free again")

        # An exception in the view gives the slot back (uvicorn answers 500).
        assert httpx.get(url + "/boom", timeout=DEADLINE).status_code == 500
        until(lambda: free(limiters["three"]) == SLOTS, "the failed view's slot")

        # A streamed response holds its slot until its last chunk.
        streams_holding_its_slot(url, room.step.set)


# -- gunicorn (gthread): plain WSGI on a SQLite file shared by workers ---------------

GUNICORN_APP = textwrap.dedent(
    """
    import json, os, threading

    from limiter import Concurrency, RateLimiter
    from limiter.adapters.wsgi import RateLimitMiddleware
    from limiter import store_from_url

    STORE = store_from_url(os.environ["SLOTS_STORE"])
    LEASE = float(os.environ["SLOTS_LEASE"])
    THREE = RateLimiter(Concurrency(3, lease=LEASE), store=STORE, name="three")
    ONE = RateLimiter(Concurrency(1, lease=LEASE), store=STORE, name="one")
    lock = threading.Lock()
    room = {"inside": 0, "most": 0, "entered": 0, "over": 0}
    go, step = threading.Event(), threading.Event()

    def answer(start_response, status, body):
        start_response(status, [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]

    def enter():
        with lock:
            room["inside"] += 1
            room["entered"] += 1
            room["most"] = max(room["most"], room["inside"])
            if room["inside"] > 3:
                room["over"] += 1  # reported by /stats: asserted by the test

    def leave():
        with lock:
            room["inside"] -= 1

    def view(environ, start_response):
        path = environ["PATH_INFO"]
        if path in ("/health", "/stats"):
            return answer(start_response, "200 OK", {**room, "pid": os.getpid()})
        if path == "/go":
            go.set()
            return answer(start_response, "200 OK", {})
        if path == "/step":
            step.set()
            return answer(start_response, "200 OK", {})
        if path == "/boom":
            raise RuntimeError("the view failed")
        if path == "/one/stream":
            def chunks():
                yield b"first"
                step.wait(60)
                yield b"last"
            start_response("200 OK", [("Content-Type", "text/plain")])
            return chunks()
        if path == "/slow":
            enter()
            try:
                go.wait(60)
            finally:
                leave()
        return answer(start_response, "200 OK", {"ok": True})

    app = RateLimitMiddleware(
        view,
        lambda r: ONE if r.path.startswith("/one") else THREE,
        key_func=lambda r: "k",
        exempt=lambda r: r.path in ("/health", "/stats", "/go", "/step"),
    )
    """
)


@pytest.fixture
def slots_app(tmp_path: Any) -> Any:
    (tmp_path / "slots_app.py").write_text(GUNICORN_APP)
    return tmp_path


def shared(url: str, name: str, limit: int, lease: float) -> RateLimiter:
    """The test's view of a limiter of the app: same store, name and policy."""
    return RateLimiter(Concurrency(limit, lease=lease), store=store_from_url(url), name=name)


def sqlite_url(folder: Any) -> str:
    return f"sqlite:///{folder / 'slots.db'}"


def test_gunicorn_gthread_20_concurrent_3_slots_streaming_and_errors(
    slots_app: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("SLOTS_STORE", sqlite_url(slots_app))
    monkeypatch.setenv("SLOTS_LEASE", "60")
    three = shared(sqlite_url(slots_app), "three", SLOTS, 60)
    options = ("--workers", "1", "--worker-class", "gthread", "--threads", "8")
    with gunicorn_process(slots_app, "slots_app:app", *options) as (url, _):
        statuses = burst(url + "/slow", lambda: httpx.get(url + "/go", timeout=DEADLINE))
        assert statuses[: CLIENTS - SLOTS] == [429] * (CLIENTS - SLOTS)
        assert sorted(statuses[CLIENTS - SLOTS :]) == [200] * SLOTS
        stats = httpx.get(url + "/stats", timeout=DEADLINE).json()
        assert (stats["most"], stats["entered"], stats["over"], stats["inside"]) == (3, 3, 0, 0)
        until(lambda: free(three) == SLOTS, "the 3 slots to be free again")

        assert httpx.get(url + "/boom", timeout=DEADLINE).status_code == 500
        until(lambda: free(three) == SLOTS, "the failed view's slot")

        streams_holding_its_slot(url, lambda: httpx.get(url + "/step", timeout=DEADLINE))


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_gunicorn_worker_killed_holding_a_slot_frees_it_after_its_lease(
    slots_app: Any, monkeypatch: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    lease = 1.5
    if backend == "redis":  # a throwaway redis-server of the module (skips without one)
        url = f"redis://127.0.0.1:{request.getfixturevalue('server').port}/0"
    else:
        url = sqlite_url(slots_app)
    monkeypatch.setenv("SLOTS_STORE", url)
    monkeypatch.setenv("SLOTS_LEASE", str(lease))
    three = shared(url, "three", SLOTS, lease)
    options = ("--workers", "1", "--worker-class", "gthread", "--threads", "6")
    with gunicorn_process(slots_app, "slots_app:app", *options) as (url, _):
        holders = concurrent.futures.ThreadPoolExecutor(SLOTS)
        sent = time.time()
        for _ in range(SLOTS):  # never answered: their worker dies
            holders.submit(httpx.get, url + "/slow", timeout=DEADLINE)
        until(lambda: free(three) == 0, "3 slots held")
        assert httpx.get(url + "/slow", timeout=DEADLINE).status_code == 429
        pid = httpx.get(url + "/stats", timeout=DEADLINE).json()["pid"]
        os.kill(pid, signal.SIGKILL)  # no holder gives back; the master starts a new worker
        until(lambda: free(three) == SLOTS, "the leases to free the dead holders' slots")
        freed = time.time()
        holders.shutdown(wait=True)
        # The slots came back with their leases, not before (taken after ``sent``).
        assert freed - sent >= lease
        assert httpx.get(url + "/quick", timeout=DEADLINE).status_code == 200
