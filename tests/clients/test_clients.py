"""Outbound clients (limiter.clients): httpx transports and the requests adapter.

Every request goes to a real ThreadingHTTPServer on a loopback port: either
this library's own http.server middleware, or a scripted app that answers
what a test lists (a 429 with an HTTP-date, an absurd Retry-After...).  The
server's limiter and the client's share one ManualClock, so the client's
waits move the server's time too and nothing really sleeps.  Every arrival is
logged with its time on that clock, its status and its Retry-After.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple

import httpx
import pytest
import requests

from limiter import Concurrency, Lockout, ManualClock, MemoryStore, RateLimiter
from limiter.adapters.httpserver import rate_limited
from limiter.clients._pacing import host_key, server_delay
from limiter.clients.httpx import AsyncRateLimitTransport, RateLimitTransport
from limiter.clients.requests import RateLimitAdapter

pytestmark = pytest.mark.servers

NOW = 1_700_000_000.0
EPS = 1e-6
_CLOCK_DATE = object()  # send the Date of the shared clock


@dataclasses.dataclass
class Arrival:
    at: float  # seconds since NOW, on the shared clock
    status: int
    path: str
    body: Optional[bytes] = None
    retry_after: Optional[str] = None


# A header value: a str, None (Date only: leave it out), or a list (one field each).
Script = List[Tuple[int, Dict[str, Any]]]


def app(clock: ManualClock, log: List[Arrival], script: Optional[Script] = None) -> type:
    """A handler class answering from ``script`` (FIFO; 200 "ok" once empty), logging arrivals.

    A scripted ``"Date": None`` leaves the Date header out; a scripted Date
    replaces the clock's.
    """

    class App(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = -1  # one write per response: no Nagle / delayed-ACK stalls
        _date: object = _CLOCK_DATE
        _body: Optional[bytes] = None

        def parse_request(self) -> bool:
            self._date, self._body = _CLOCK_DATE, None
            return super().parse_request()

        def send_response(self, code: int, message: Optional[str] = None) -> None:
            # BaseHTTPRequestHandler.send_response, with the Date of the shared clock.
            log.append(Arrival(round(clock.now() - NOW, 9), code, self.path, self._body))
            self.send_response_only(code, message)
            self.send_header("Server", self.version_string())
            date = self._date
            if date is _CLOCK_DATE:
                date = email.utils.formatdate(clock.now(), usegmt=True)
            if date is not None:
                self.send_header("Date", str(date))

        def send_header(self, keyword: str, value: str) -> None:
            if keyword.lower() == "retry-after":
                log[-1].retry_after = value
            super().send_header(keyword, value)

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    chunk = self.rfile.read(size)
                    self.rfile.readline()
                    if not size:
                        return b"".join(chunks)
                    chunks.append(chunk)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _reply(self) -> None:
            self._body = self._read_body()
            status, headers = script.pop(0) if script else (200, {})
            headers = dict(headers)
            if "Date" in headers:
                self._date = headers.pop("Date")
            body = b"ok" if status == 200 else b"slow down"
            self.send_response(status)
            for name, value in headers.items():
                for one in value if isinstance(value, list) else [value]:
                    self.send_header(name, str(one))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _reply

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return App


class Server(ThreadingHTTPServer):
    request_queue_size = 64  # the default 5 drops concurrent SYNs: 1 s retransmits
    daemon_threads = True


@contextlib.contextmanager
def serve(handler: type) -> Iterator[str]:
    server = Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def limited_server(
    clock: ManualClock, rate: str = "5/second", **options: Any
) -> Iterator[Tuple[str, List[Arrival]]]:
    """This library's http.server middleware, limiting every client to ``rate``."""
    log: List[Arrival] = []
    handler = rate_limited(RateLimiter(rate, clock=clock), **options)(app(clock, log))
    with serve(handler) as url:
        yield url, log


@contextlib.contextmanager
def scripted_server(clock: ManualClock, script: Script) -> Iterator[Tuple[str, List[Arrival]]]:
    log: List[Arrival] = []
    with serve(app(clock, log, script)) as url:
        yield url, log


def client(limiter: RateLimiter, **options: Any) -> httpx.Client:
    return httpx.Client(transport=RateLimitTransport(limiter, **options), timeout=10)


def session(limiter: RateLimiter, **options: Any) -> requests.Session:
    s = requests.Session()
    s.mount("http://", RateLimitAdapter(limiter, **options))
    return s


def no_retry_before_its_retry_after(log: List[Arrival]) -> bool:
    """Every arrival after a 429 came at least its Retry-After later (sequential clients)."""
    for i, arrival in enumerate(log):
        if arrival.status == 429:
            assert arrival.retry_after is not None
            not_before = arrival.at + float(arrival.retry_after) - EPS
            if any(later.at < not_before for later in log[i + 1 :]):
                return False
    return True


# The server allows 5 at once, then one per 0.2 s; an unpaced client of 12
# requests gets 5, a 429 with "Retry-After: 1", 5 more a second later (the
# bucket is full again), a 429, and the last 2 a second after that.
UNPACED = [(0.0, 200)] * 5 + [(0.0, 429)] + [(1.0, 200)] * 5 + [(1.0, 429)] + [(2.0, 200)] * 2


# -- (1), (2): httpx against this library's middleware ------------------------------


def test_a_client_paced_like_the_server_sends_no_wasted_request():
    clock = ManualClock(NOW)
    with limited_server(clock) as (url, log), client(RateLimiter("5/second", clock=clock)) as c:
        statuses = [c.get(f"{url}/item/{i}").status_code for i in range(12)]
    assert statuses == [200] * 12
    assert [a.status for a in log] == [200] * 12  # the server saw exactly the 12
    # 5 at once, then one every 0.2 s
    assert [a.at for a in log] == pytest.approx([0.0] * 5 + [0.2 * i for i in range(1, 8)])


def test_an_unpaced_client_waits_out_each_retry_after_and_gets_every_200():
    clock = ManualClock(NOW)
    with limited_server(clock) as (url, log), client(RateLimiter("1000/second", clock=clock)) as c:
        responses = [c.get(f"{url}/item/{i}") for i in range(12)]
    assert [r.status_code for r in responses] == [200] * 12
    assert [r.text for r in responses] == ["ok"] * 12
    assert [(a.at, a.status) for a in log] == UNPACED
    assert [a.retry_after for a in log if a.status == 429] == ["1", "1"]
    assert no_retry_before_its_retry_after(log)
    # The retried request is the one refused: the same path, sent again.
    assert [a.path for a in log][5:7] == ["/item/5", "/item/5"]


def test_a_body_in_memory_is_sent_again_and_a_streamed_one_is_not():
    clock = ManualClock(NOW)
    script: Script = [(429, {"Retry-After": "2"}), (200, {}), (429, {"Retry-After": "2"})]
    with scripted_server(clock, script) as (url, log), client(RateLimiter(100, clock=clock)) as c:
        sent = c.post(f"{url}/upload", content=b"payload")
        streamed = c.post(f"{url}/upload", content=iter([b"pay", b"load"]))
    assert sent.status_code == 200
    assert streamed.status_code == 429  # returned as is: the stream is spent
    assert streamed.headers["Retry-After"] == "2"
    assert [(a.at, a.status, a.body) for a in log] == [
        (0.0, 429, b"payload"),
        (2.0, 200, b"payload"),
        (2.0, 429, b"payload"),
    ]


def test_discarded_responses_are_closed():
    clock = ManualClock(NOW)
    seen: List[httpx.Response] = []

    class Recording(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            response = self.inner.handle_request(request)
            seen.append(response)
            return response

    script: Script = [(429, {"Retry-After": "1"}), (503, {"Retry-After": "1"})]
    transport = RateLimitTransport(RateLimiter(100, clock=clock), transport=Recording())
    with scripted_server(clock, script) as (url, log), httpx.Client(transport=transport) as c:
        response = c.get(url)
    assert response.status_code == 200
    assert [r.status_code for r in seen] == [429, 503, 200]
    assert [r.is_closed for r in seen[:2]] == [True, True]
    assert [(a.at, a.status) for a in log] == [(0.0, 429), (1.0, 503), (2.0, 200)]


# -- (3) max_retries ----------------------------------------------------------------


def test_when_max_retries_is_spent_the_last_429_is_returned_as_it_came():
    clock = ManualClock(NOW)
    script: Script = [(429, {"Retry-After": "1", "X-Try": str(i)}) for i in range(5)]
    with scripted_server(clock, script) as (url, log):
        with client(RateLimiter(100, clock=clock), max_retries=2) as c:
            response = c.get(url)
        assert response.status_code == 429
        assert response.headers["X-Try"] == "2" and response.text == "slow down"
        assert [(a.at, a.status) for a in log] == [(0.0, 429), (1.0, 429), (2.0, 429)]
        # max_retries=0: no retry, but the pause still holds the next request.
        with client(RateLimiter(100, clock=clock), max_retries=0) as c:
            first = c.get(url)
            second = c.get(url)
        assert (first.status_code, second.status_code) == (429, 429)
        assert [a.at for a in log[3:]] == [2.0, 3.0]


def test_respect_server_false_returns_the_429_and_does_not_pause():
    clock = ManualClock(NOW)
    script: Script = [(429, {"Retry-After": "5"})]
    lim = RateLimiter(100, clock=clock)
    with scripted_server(clock, script) as (url, log), client(lim, respect_server=False) as c:
        assert [c.get(url).status_code, c.get(url).status_code] == [429, 200]
    assert [(a.at, a.status) for a in log] == [(0.0, 429), (0.0, 200)]


def test_a_429_or_503_without_a_hint_is_returned_and_other_statuses_are_never_retried():
    clock = ManualClock(NOW)
    script: Script = [
        (429, {}),
        (503, {}),
        (500, {"Retry-After": "1"}),
        (200, {"Retry-After": "1"}),
    ]
    with scripted_server(clock, script) as (url, log), client(RateLimiter(100, clock=clock)) as c:
        statuses = [c.get(url).status_code for _ in range(4)]
    assert statuses == [429, 503, 500, 200]
    assert [a.at for a in log] == [0.0] * 4


# -- (4) asyncio ---------------------------------------------------------------------


def async_get_all(limiter: RateLimiter, urls: List[str], concurrent: bool) -> List[httpx.Response]:
    async def run() -> List[httpx.Response]:
        transport = AsyncRateLimitTransport(limiter)
        async with httpx.AsyncClient(transport=transport, timeout=10) as c:
            if concurrent:
                return list(await asyncio.gather(*(c.get(u) for u in urls)))
            return [await c.get(u) for u in urls]

    return asyncio.run(run())


def test_async_transport_paced_and_unpaced_against_the_middleware():
    clock = ManualClock(NOW)
    with limited_server(clock) as (url, log):
        urls = [f"{url}/item/{i}" for i in range(12)]
        paced = async_get_all(RateLimiter("5/second", clock=clock), urls, concurrent=False)
        assert [r.status_code for r in paced] == [200] * 12
        assert [a.status for a in log] == [200] * 12
        clock.set(NOW + 20)  # the server's bucket is full again
        del log[:]
        unpaced = async_get_all(RateLimiter("1000/second", clock=clock), urls, concurrent=False)
    assert [r.status_code for r in unpaced] == [200] * 12
    assert [(a.at - 20, a.status) for a in log] == UNPACED
    assert no_retry_before_its_retry_after(log)


def test_concurrent_async_requests_share_the_pause_of_their_host():
    clock = ManualClock(NOW)
    with limited_server(clock) as (url, log):
        responses = async_get_all(
            RateLimiter("1000/second", clock=clock), [f"{url}/{i}" for i in range(12)], True
        )
    assert [r.status_code for r in responses] == [200] * 12
    assert [a.status for a in log].count(200) == 12
    refused = [a for a in log if a.status == 429]
    assert refused and all(a.retry_after == "1" for a in refused)
    # The clock moves only when a client waits: every request sent after a 429
    # arrived came at least its Retry-After after it (those in flight with it
    # arrived at the same instant).
    for first in refused:
        assert not [a for a in log if first.at < a.at < first.at + 1 - EPS]


# -- (5) requests --------------------------------------------------------------------


def test_requests_adapter_paced_sends_no_wasted_request():
    clock = ManualClock(NOW)
    with limited_server(clock) as (url, log), session(RateLimiter("5/second", clock=clock)) as s:
        statuses = [s.get(f"{url}/item/{i}", timeout=10).status_code for i in range(12)]
    assert statuses == [200] * 12
    assert [a.status for a in log] == [200] * 12
    assert [a.at for a in log] == pytest.approx([0.0] * 5 + [0.2 * i for i in range(1, 8)])


def test_requests_adapter_unpaced_waits_out_each_retry_after():
    clock = ManualClock(NOW)
    with limited_server(clock) as (url, log), session(RateLimiter(1000, clock=clock)) as s:
        responses = [s.get(f"{url}/item/{i}", timeout=10) for i in range(12)]
    assert [(r.status_code, r.text) for r in responses] == [(200, "ok")] * 12
    assert [(a.at, a.status) for a in log] == UNPACED
    assert no_retry_before_its_retry_after(log)


def test_requests_adapter_retries_bytes_not_generators_and_returns_the_last_429():
    clock = ManualClock(NOW)
    script: Script = [(429, {"Retry-After": "2"}), (200, {}), (429, {"Retry-After": "2"})]
    script += [(429, {"Retry-After": "1", "X-Try": str(i)}) for i in range(4)]
    with scripted_server(clock, script) as (url, log), session(RateLimiter(100, clock=clock)) as s:
        sent = s.post(f"{url}/u", data=b"payload", timeout=10)
        streamed = s.post(f"{url}/u", data=iter([b"pay", b"load"]), timeout=10)
        spent = s.get(url, timeout=10)
    assert (sent.status_code, streamed.status_code, spent.status_code) == (200, 429, 429)
    assert spent.headers["X-Try"] == "3" and spent.text == "slow down"
    assert [(a.at, a.status, a.body) for a in log] == [
        (0.0, 429, b"payload"),
        (2.0, 200, b"payload"),
        (2.0, 429, b"payload"),  # sent chunked, read whole by the app
        (4.0, 429, b""),  # the streamed request's pause held this one
        (5.0, 429, b""),
        (6.0, 429, b""),
        (7.0, 429, b""),  # max_retries=3 spent: this one is returned
    ]


def test_requests_adapter_keeps_httpadapter_options():
    limiter = RateLimiter(10)
    adapter = RateLimitAdapter(limiter, connection_retries=2, pool_maxsize=3)
    assert adapter.max_retries.total == 2  # urllib3's Retry, as HTTPAdapter makes it
    assert adapter._pool_maxsize == 3
    assert adapter.limiter is limiter


# -- (6) HTTP-date, (7) absurd waits -------------------------------------------------


def http_date(t: float) -> str:
    return email.utils.formatdate(t, usegmt=True)


def test_an_http_date_retry_after_is_measured_against_the_server_date():
    clock = ManualClock(NOW)
    skewed = NOW - 1000  # the server's clock is 1000 s behind: only the difference counts
    script: Script = [
        (429, {"Date": http_date(skewed), "Retry-After": http_date(skewed + 30)}),
        (200, {}),
        # No Date: the date is measured against the limiter's clock (Unix seconds).
        (503, {"Date": None, "Retry-After": http_date(NOW + 30 + 20)}),
        (200, {}),
        # A date already past: retry at once.
        (429, {"Retry-After": http_date(NOW - 5)}),
    ]
    with scripted_server(clock, script) as (url, log), client(RateLimiter(100, clock=clock)) as c:
        statuses = [c.get(url).status_code for _ in range(3)]
    assert statuses == [200] * 3
    assert [(a.at, a.status) for a in log] == [
        (0.0, 429),
        (30.0, 200),
        (30.0, 503),
        (50.0, 200),
        (50.0, 429),
        (50.0, 200),
    ]


def test_an_absurd_retry_after_is_returned_not_slept():
    clock = ManualClock(NOW)
    script: Script = [
        (429, {"Retry-After": "3600"}),
        (200, {}),
        (429, {"Retry-After": http_date(NOW + 86400)}),
        (429, {"Retry-After": "301"}),
        (429, {"Retry-After": "3600"}),
    ]
    with scripted_server(clock, script) as (url, log):
        with client(RateLimiter(100, clock=clock)) as c:
            hour = c.get(url)
            after = c.get(url)  # no pause was recorded: sent at once
            day = c.get(url)
        with client(RateLimiter(100, clock=clock), max_wait=10) as c:
            over = c.get(url)
        with client(RateLimiter(100, clock=clock), max_wait=None) as c:
            uncapped = c.get(url)  # no cap: an hour on the ManualClock
    assert [r.status_code for r in (hour, after, day, over, uncapped)] == [429, 200, 429, 429, 200]
    assert hour.headers["Retry-After"] == "3600"
    assert [(a.at, a.status) for a in log] == [
        (0.0, 429),
        (0.0, 200),
        (0.0, 429),
        (0.0, 429),
        (0.0, 429),
        (3600.0, 200),
    ]


def test_draft_ratelimit_fields_and_x_ratelimit_reset_pause_the_key():
    clock = ManualClock(NOW)
    script: Script = [
        (429, {"RateLimit": '"burst";r=0;t=3, "day";r=500;t=80000'}),
        (429, {"RateLimit-Reset": "4"}),
        (429, {"X-RateLimit-Reset": str(int(NOW) + 3 + 4 + 5)}),  # a Unix time
        (200, {}),
        (429, {"Retry-After": "soon", "X-RateLimit-Reset": "2"}),  # bad hint skipped; seconds
    ]
    with scripted_server(clock, script) as (url, log), client(RateLimiter(100, clock=clock)) as c:
        assert c.get(url).status_code == 200
        assert c.get(url).status_code == 200
    assert [(a.at, a.status) for a in log] == [
        (0.0, 429),
        (3.0, 429),
        (7.0, 429),
        (12.0, 200),
        (12.0, 429),
        (14.0, 200),
    ]


def test_our_own_draft_style_429_is_understood():
    clock = ManualClock(NOW)
    server = limited_server(clock, "2/second", header_style="draft")
    with server as (url, log), client(RateLimiter(1000, clock=clock)) as c:
        assert [c.get(url).status_code for _ in range(3)] == [200] * 3
    assert [(a.at, a.status) for a in log] == [(0.0, 200), (0.0, 200), (0.0, 429), (1.0, 200)]


@pytest.mark.parametrize("style", ["draft", "both", "x", None])
def test_our_problem_details_429_and_a_lockout_are_waited_out_in_every_style(style):
    # Every form the server side sends: each header style, the RFC 9457 body,
    # a quota unit, and a lockout's long Retry-After.
    clock = ManualClock(NOW)
    log: List[Arrival] = []
    limiter = RateLimiter(
        {"requests": "2/second", "upload": "1000/minute"},
        clock=clock,
        lockout=Lockout(breaches=2, within=60, duration=30),
    )
    handler = rate_limited(
        limiter,
        header_style=style,
        on_limited="problem",
        quota_units={"upload": "content-bytes"},
    )(app(clock, log))
    with serve(handler) as url, client(RateLimiter(1000, clock=clock)) as c:
        responses = [c.get(url) for _ in range(5)]
    assert [r.status_code for r in responses] == [200] * 5
    assert [(a.at, a.status, a.retry_after) for a in log] == [
        (0.0, 200, None),
        (0.0, 200, None),
        (0.0, 429, "1"),  # the first breach
        (1.0, 200, None),
        (1.0, 200, None),
        (1.0, 429, "30"),  # the second: locked out for 30 s
        (31.0, 200, None),
    ]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"Retry-After": " 1.5 "}, 1.5),
        (
            {
                "Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT",
                "Date": "Sun, 06 Nov 1994 08:49:07 GMT",
            },
            30.0,
        ),
        (
            {
                "Retry-After": "Sunday, 06-Nov-94 08:49:37 GMT",
                "Date": "Sun, 06 Nov 1994 08:49:27 GMT",
            },
            10.0,
        ),
        ({"Retry-After": "Sun Nov  6 08:49:37 1994", "Date": "Sun, 06 Nov 1994 08:49:36 GMT"}, 1.0),
        ({"Retry-After": "-3"}, None),
        ({"Retry-After": "1e3"}, None),
        ({"Retry-After": "9" * 400}, None),
        ({"RateLimit": '"a,b;c";r=0;t=9'}, 9.0),  # quoted names may hold , and ;
        ({"RateLimit": '"a";r=1;t=9'}, None),  # nothing exhausted
        ({"RateLimit": '"a";r=0'}, None),
        ({"RateLimit": '"a";r=0;t=2, "b";r=0;t=5'}, 5.0),
        # qu and pk (a Byte Sequence, with = and / in it) are read past
        ({"RateLimit": '"up";r=0;t=4;pk=:cHsd/sRa894==:'}, 4.0),
        ({"RateLimit": '"a";r=9;t=1, "up";r=0;t=7;qu="content-bytes"'}, 7.0),
        # the editors' proposed rename (r -> a, t -> w), read when r is absent
        ({"RateLimit": '"a";a=0;w=6'}, 6.0),
        ({"RateLimit": '"a";a=3;w=6'}, None),
        ({"RateLimit": '"a";r=1;t=2;a=0;w=9'}, None),  # r wins
        ({"RateLimit": '"a";r=0;w=9'}, None),  # w is not t beside r
        # from a cache (Age > 0): the draft fields are stale, ignored (draft-11, 7.3)
        ({"RateLimit": '"a";r=0;t=6', "Age": "3"}, None),
        ({"RateLimit-Reset": "6", "Age": "1"}, None),
        ({"RateLimit": '"a";r=0;t=6', "Age": "3", "X-RateLimit-Reset": "2"}, 2.0),
        ({"RateLimit": '"a";r=0;t=6', "Age": "3", "Retry-After": "4"}, 4.0),
        ({"RateLimit": '"a";r=0;t=6', "Age": "0"}, 6.0),  # fresh
        ({"RateLimit": '"a";r=0;t=6', "Age": "soon"}, 6.0),  # no valid Age: fresh
        ({"X-RateLimit-Reset": "1000000060"}, 60.0),
        ({"X-RateLimit-Reset": "999999999"}, 999999999.0),
        ({"X-RateLimit-Reset": "1"}, 1.0),
        ({}, None),
    ],
)
def test_server_delay(headers: Dict[str, str], expected: Optional[float]):
    folded = {k.lower(): v for k, v in headers.items()}
    assert server_delay(lambda name: folded.get(name.lower()), 1_000_000_000.0) == expected


# -- (8) keys ------------------------------------------------------------------------


def test_hosts_have_independent_buckets_and_pauses():
    clock = ManualClock(NOW)
    server_a = scripted_server(clock, [(429, {"Retry-After": "5"})])
    paced = client(RateLimiter("2/second", clock=clock), max_retries=0)
    with server_a as (a, log_a), scripted_server(clock, []) as (b, log_b), paced as c:
        assert c.get(a).status_code == 429  # pauses host a for 5 s
        assert [c.get(b).status_code for _ in range(2)] == [200, 200]  # b: at once
        assert c.get(a).status_code == 200  # waited out a's pause
        assert c.get(b).status_code == 200  # b's bucket refilled meanwhile
    assert [a.at for a in log_a] == [0.0, 5.0]
    assert [a.at for a in log_b] == [0.0, 0.0, 5.0]


def test_a_string_or_callable_key_chooses_the_bucket():
    clock = ManualClock(NOW)
    with scripted_server(clock, []) as (a, log_a), scripted_server(clock, []) as (b, log_b):
        with client(RateLimiter("2/second", clock=clock), key="partner-api") as c:
            [c.get(a), c.get(b), c.get(b)]  # one bucket for both hosts
        with client(RateLimiter("1/second", clock=clock), key=lambda r: r.url.path) as c:
            [c.get(f"{a}/x"), c.get(f"{a}/y"), c.get(f"{a}/x")]
    assert [x.at for x in log_a] == [0.0, 0.5, 0.5, 1.5]
    assert [x.at for x in log_b] == [0.0, 0.5]


def test_host_key():
    assert host_key("https", "API.example.com", None) == "api.example.com"
    assert host_key("https", "api.example.com", 443) == "api.example.com"
    assert host_key("http", "api.example.com", 443) == "api.example.com:443"
    assert host_key("http", "127.0.0.1", 8080) == "127.0.0.1:8080"
    assert host_key("http", "::1", 8080) == "[::1]:8080"


def test_a_key_function_must_return_a_str():
    transport = RateLimitTransport(RateLimiter(10), key=lambda request: 42)
    with httpx.Client(transport=transport) as c, pytest.raises(TypeError, match="got 42"):
        c.get("http://127.0.0.1:9/")


# -- arguments and imports -----------------------------------------------------------


class AsyncOnly:
    async def aapply(self, key: str, limit: Any, cost: float, now: Any) -> Any:
        raise AssertionError("not called")


@pytest.mark.parametrize("make", [RateLimitTransport, AsyncRateLimitTransport, RateLimitAdapter])
@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"limiter": "5/second"}, TypeError, "'5/second'"),
        ({"max_retries": -1}, ValueError, "-1"),
        ({"max_retries": 1.5}, TypeError, "1.5"),
        ({"max_retries": True}, TypeError, "True"),
        ({"respect_server": 1}, TypeError, "respect_server"),
        ({"max_wait": -1}, ValueError, "-1"),
        ({"max_wait": float("nan")}, ValueError, "nan"),
        ({"max_wait": "300"}, TypeError, "'300'"),
        ({"key": 42}, TypeError, "42"),
        ({"key": "5/minute"}, TypeError, "looks like a rate"),
        # Refused here, not at the first request: a request cannot hold a slot
        # nor wait out a lockout.
        ({"limiter": RateLimiter(Concurrency(2))}, TypeError, "Concurrency"),
        (
            {"limiter": RateLimiter(10, lockout=Lockout(3, 60, 60))},
            TypeError,
            "has a lockout: ",
        ),
        (
            {"limiter": RateLimiter(10, lockout=Lockout(3, 60, 60))},
            TypeError,
            " pacing its requests",
        ),
    ],
)
def test_bad_arguments(make: Any, kwargs: Dict[str, Any], error: type, named: str):
    kwargs = dict(kwargs)  # the parameters are shared by the three classes
    limiter = kwargs.pop("limiter", RateLimiter(10))
    with pytest.raises(error, match=named.replace("(", r"\(").replace("[", r"\[")):
        make(limiter, **kwargs)


def test_bad_transports_and_stores():
    with pytest.raises(TypeError, match=r"httpx\.BaseTransport"):
        RateLimitTransport(RateLimiter(10), transport=httpx.AsyncHTTPTransport())
    with pytest.raises(TypeError, match=r"httpx\.AsyncBaseTransport"):
        AsyncRateLimitTransport(RateLimiter(10), transport=httpx.HTTPTransport())
    async_only = RateLimiter(10, store=AsyncOnly())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="async only"):
        RateLimitTransport(async_only)
    with pytest.raises(TypeError, match="async only"):
        RateLimitAdapter(async_only)
    assert AsyncRateLimitTransport(async_only).limiter is async_only
    assert RateLimitTransport(RateLimiter(10, store=MemoryStore())).transport is not None


def test_importing_the_package_imports_no_http_library():
    code = (
        "import json, sys, limiter.clients, limiter.clients._pacing\n"
        "print(json.dumps(sorted(m for m in ('httpx', 'requests') if m in sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


# -- review: hostile hints, refunds, leaks ---------------------------------------------


def test_a_hint_no_clock_can_sleep_is_returned_and_pauses_nothing_even_uncapped():
    # max_wait=None on the real clock: a Retry-After of 1e308 seconds, a date in
    # the year 9999 or an X-RateLimit-Reset in ms read as seconds used to make
    # time.sleep raise OverflowError, and the pause stayed, so every later
    # request to the host raised too.  Nothing here really sleeps.
    server_clock = ManualClock(time.time())
    script: Script = [
        (429, {"Retry-After": "1" + "0" * 308}),
        (200, {}),
        (503, {"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}),
        (200, {}),
    ]
    uncapped = client(RateLimiter(100), max_wait=None)  # the real clock
    with scripted_server(server_clock, script) as (url, log), uncapped as c:
        statuses = [c.get(url).status_code for _ in range(4)]
    assert statuses == [429, 200, 503, 200]
    assert len(log) == 4


def test_x_ratelimit_reset_in_milliseconds_is_a_unix_time_in_milliseconds():
    clock = ManualClock(NOW)
    script: Script = [(429, {"X-RateLimit-Reset": str(int((NOW + 7) * 1000))})]
    with scripted_server(clock, script) as (url, log), client(RateLimiter(100, clock=clock)) as c:
        assert c.get(url).status_code == 200
    assert [(a.at, a.status) for a in log] == [(0.0, 429), (7.0, 200)]


def test_a_repeated_retry_after_is_obeyed_with_its_longest_delay():
    # Two Retry-After fields (a proxy adding its own) reach the client joined
    # as "3, 5"; both are valid waits: the longer one is kept.
    clock = ManualClock(NOW)
    script: Script = [(429, {"Retry-After": ["3", "5"]}), (503, {"Retry-After": ["2", "2"]})]
    with scripted_server(clock, script) as (url, log), client(RateLimiter(100, clock=clock)) as c:
        assert c.get(url).status_code == 200
    assert [(a.at, a.status) for a in log] == [(0.0, 429), (5.0, 503), (7.0, 200)]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "3, 5"}, 5.0),
        ({"Retry-After": "120 , 120"}, 120.0),
        ({"Retry-After": "3, soon"}, None),
        ({"Retry-After": "1" + "0" * 308}, None),  # no clock can sleep that long
        ({"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, None),
        ({"X-RateLimit-Reset": "1000000060000"}, 60.0),  # a Unix time in ms
        ({"X-RateLimit-Reset": "1000000060500.0"}, 60.5),
    ],
)
def test_server_delay_review(headers: Dict[str, str], expected: Optional[float]):
    folded = {k.lower(): v for k, v in headers.items()}
    assert server_delay(lambda name: folded.get(name.lower()), 1_000_000_000.0) == expected


class PausingClock(ManualClock):
    """A ManualClock on which, during the first wait for a token, a 429 pauses the host.

    It stands for another thread or task whose request got "Retry-After: 5"
    while this one waited: deterministic, where real threads are not.
    """

    pacer: Any = None
    key = ""

    def _first_wait(self) -> None:
        pacer, self.pacer = self.pacer, None
        if pacer is not None:
            pacer.pause(self.key, 429, {"Retry-After": "5"}.get)

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self._first_wait()

    async def asleep(self, seconds: float) -> None:
        await super().asleep(seconds)
        self._first_wait()


@pytest.mark.parametrize("flavour", ["sync", "async", "requests"])
def test_a_token_taken_during_a_pause_is_given_back(flavour: str):
    # One token per 30 s, burst 2.  The third request waits 30 s for its token;
    # meanwhile a 429 pauses the host until 35.  It takes its token at 30, sees
    # the pause, gives the token back and is sent at 35 with that same token.
    # Kept instead of refunded, the token would be missing: sent at 60.
    clock = PausingClock(NOW)
    limiter = RateLimiter("2/minute", clock=clock)
    with scripted_server(clock, []) as (url, log):
        clock.key = url.split("//")[1]
        if flavour == "sync":
            transport = RateLimitTransport(limiter)
            clock.pacer = transport._pacer
            with httpx.Client(transport=transport, timeout=10) as c:
                statuses = [c.get(url).status_code for _ in range(3)]
        elif flavour == "requests":
            adapter = RateLimitAdapter(limiter)
            clock.pacer = adapter._pacer
            with requests.Session() as s:
                s.mount("http://", adapter)
                statuses = [s.get(url, timeout=10).status_code for _ in range(3)]
        else:

            async def run() -> List[int]:
                transport = AsyncRateLimitTransport(limiter)
                clock.pacer = transport._pacer
                async with httpx.AsyncClient(transport=transport, timeout=10) as c:
                    return [(await c.get(url)).status_code for _ in range(3)]

            statuses = asyncio.run(run())
    assert statuses == [200] * 3
    assert [a.at for a in log] == [0.0, 0.0, 35.0]
    assert limiter.peek(clock.key).remaining == 0  # and the bucket holds no extra token


def test_a_failing_key_function_surfaces_unchanged_and_takes_nothing():
    class Boom(Exception):
        pass

    def key(request: Any) -> str:
        raise Boom("from the application")

    limiter = RateLimiter(1)
    with client(limiter, key=key) as c, pytest.raises(Boom, match="from the application"):
        c.get("http://127.0.0.1:9/")
    with session(limiter, key=key) as s, pytest.raises(Boom, match="from the application"):
        s.get("http://127.0.0.1:9/")

    async def run() -> None:
        transport = AsyncRateLimitTransport(limiter, key=key)
        async with httpx.AsyncClient(transport=transport) as c:
            await c.get("http://127.0.0.1:9/")

    with pytest.raises(Boom, match="from the application"):
        asyncio.run(run())


def test_retries_release_their_connection_to_a_pool_of_one():
    # A discarded 429 left checked out would leave the retry no connection:
    # httpx's pool times out, a blocking urllib3 pool waits forever.
    clock = ManualClock(NOW)
    script: Script = [(429, {"Retry-After": "1"})] * 3 + [(200, {})]
    script += [(503, {"Retry-After": "1"})] * 3
    with scripted_server(clock, script) as (url, log):
        transport = RateLimitTransport(
            RateLimiter(100, clock=clock),
            transport=httpx.HTTPTransport(limits=httpx.Limits(max_connections=1)),
        )
        with httpx.Client(transport=transport, timeout=httpx.Timeout(5, pool=2)) as c:
            assert c.get(url).status_code == 200
        adapter = RateLimitAdapter(RateLimiter(100, clock=clock), pool_maxsize=1, pool_block=True)
        with requests.Session() as s:
            s.mount("http://", adapter)
            assert s.get(url, timeout=5).status_code == 200
    assert [a.status for a in log] == [429, 429, 429, 200, 503, 503, 503, 200]


# -- a call's bound: max_wait of pauses in total, inherited ones included ------------


class WaitLog(ManualClock):
    """A ManualClock that adds up, per thread, the seconds each thread slept."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self.mine = threading.local()

    def sleep(self, seconds: float) -> None:
        self.mine.waited = getattr(self.mine, "waited", 0.0) + seconds
        super().sleep(seconds)

    def waited(self) -> float:
        """This thread's seconds slept since the last call, then zero again."""
        total, self.mine.waited = getattr(self.mine, "waited", 0.0), 0.0
        return float(total)


def _calls(flavour: str, limiter: RateLimiter, **options: Any) -> Any:
    if flavour == "sync":
        return client(limiter, **options)
    return session(limiter, **options)


@pytest.mark.parametrize("retries", [3, 10])
@pytest.mark.parametrize("flavour", ["sync", "requests"])
def test_eight_threads_sharing_a_transport_each_wait_at_most_max_wait(flavour: str, retries: int):
    # Every answer is a 429 "Retry-After: 1"; max_retries=3, max_wait=5.  The
    # threads' 429s keep pausing the host they share, so without a bound per
    # call a call waits out the others' pauses too (up to 38 s were seen).
    # Tokens never wait here (10,000 a second): every sleep is a pause.  With
    # max_retries=10 the unbounded calls waited 10 s: the bound stops at 5.
    clock = WaitLog(NOW)
    script: Script = [(429, {"Retry-After": "1"})] * 300
    waits: List[float] = []
    statuses: List[int] = []
    limiter = RateLimiter(10_000, clock=clock)
    with (
        scripted_server(clock, script) as (url, log),
        _calls(flavour, limiter, max_wait=5, max_retries=retries) as c,
    ):

        def run() -> None:
            for _ in range(3):
                clock.waited()
                statuses.append(c.get(url, timeout=10).status_code)
                waits.append(clock.waited())

        threads = [threading.Thread(target=run) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert statuses == [429] * 24
    assert len(waits) == 24 and all(w <= 5.0 for w in waits), waits
    assert len(log) <= 24 * (retries + 1)  # at most max_retries + 1 attempts a call


@pytest.mark.parametrize("flavour", ["sync", "requests"])
def test_a_retry_that_would_pass_max_wait_returns_the_429_unslept(flavour: str):
    # Retry-After: 2, max_wait=5: a call waits 2 + 2, then a third 2 would
    # make 6, so its third 429 comes back (whole) at 4, retries unspent.  The
    # next call inherits the pause until 6 (2 s of its 5), then 2 more, then
    # returns its second 429 at 8: 4 s in total again.
    clock = WaitLog(NOW)
    script: Script = [(429, {"Retry-After": "2", "X-Try": str(i)}) for i in range(9)]
    limiter = RateLimiter(100, clock=clock)
    with scripted_server(clock, script) as (url, log), _calls(flavour, limiter, max_wait=5) as c:
        first = c.get(url, timeout=10)
        first_wait = clock.waited()
        second = c.get(url, timeout=10)
        second_wait = clock.waited()
    assert (first.status_code, first.headers["X-Try"], first.text) == (429, "2", "slow down")
    assert (second.status_code, second.headers["X-Try"], second.text) == (429, "4", "slow down")
    assert (first_wait, second_wait) == (4.0, 4.0)
    assert [a.at for a in log] == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_async_a_retry_that_would_pass_max_wait_returns_the_429_unslept():
    clock = ManualClock(NOW)
    script: Script = [(429, {"Retry-After": "2", "X-Try": str(i)}) for i in range(9)]
    with scripted_server(clock, script) as (url, log):

        async def run() -> List[httpx.Response]:
            transport = AsyncRateLimitTransport(RateLimiter(100, clock=clock), max_wait=5)
            async with httpx.AsyncClient(transport=transport, timeout=10) as c:
                return [await c.get(url), await c.get(url)]

        first, second = asyncio.run(run())
    assert [(r.status_code, r.headers["X-Try"], r.text) for r in (first, second)] == [
        (429, "2", "slow down"),
        (429, "4", "slow down"),
    ]
    assert [a.at for a in log] == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_default_max_wait_bounds_one_call_to_300_s_not_900():
    # Retry-After: 300 every time, the defaults (max_retries=3, max_wait=300):
    # 1,200 s were seen (an inherited pause, then 3 x 300); now 300 at most.
    clock = WaitLog(NOW)
    script: Script = [(429, {"Retry-After": "300"})] * 6
    with scripted_server(clock, script) as (url, log), client(RateLimiter(100, clock=clock)) as c:
        waits = []
        for _ in range(2):
            assert c.get(url).status_code == 429
            waits.append(clock.waited())
    # The first call: sent at 0 and 300, then another 300 would pass max_wait.
    # The second inherits the pause until 600, and is sent then.
    assert waits == [300.0, 300.0]
    assert [a.at for a in log] == [0.0, 300.0, 600.0]


@pytest.mark.parametrize("flavour", ["sync", "async", "requests"])
def test_a_first_attempt_whose_budget_is_spent_is_sent_despite_the_pause(flavour: str):
    # The host is paused for 3 s before the call (another request's 429).
    # While this call waits it out, a 429 elsewhere pauses the host again,
    # until 8: 5 more seconds, with 2 left of max_wait=5.  The call has no
    # response to return, so it is sent at 3; the 200 comes back.
    clock = PausingClock(NOW)
    limiter = RateLimiter(100, clock=clock)
    with scripted_server(clock, []) as (url, log):
        clock.key = url.split("//")[1]
        if flavour == "sync":
            transport = RateLimitTransport(limiter, max_wait=5)
            transport._pacer.pause(clock.key, 429, {"Retry-After": "3"}.get)
            clock.pacer = transport._pacer
            with httpx.Client(transport=transport, timeout=10) as c:
                status = c.get(url).status_code
        elif flavour == "requests":
            adapter = RateLimitAdapter(limiter, max_wait=5)
            adapter._pacer.pause(clock.key, 429, {"Retry-After": "3"}.get)
            clock.pacer = adapter._pacer
            with requests.Session() as s:
                s.mount("http://", adapter)
                status = s.get(url, timeout=10).status_code
        else:

            async def run() -> int:
                transport = AsyncRateLimitTransport(limiter, max_wait=5)
                transport._pacer.pause(clock.key, 429, {"Retry-After": "3"}.get)
                clock.pacer = transport._pacer
                async with httpx.AsyncClient(transport=transport, timeout=10) as c:
                    return (await c.get(url)).status_code

            status = asyncio.run(run())
    assert status == 200
    assert [a.at for a in log] == [3.0]
