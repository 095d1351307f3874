"""Limits on inbound WebSocket messages (the ASGI adapter's ``ws_*`` options).

Under a real uvicorn in a thread of this process, driven by the ``websockets``
client: the server's limiters read the test's ManualClock, set before each
message (helpers/websocket_client.py), so 100 messages "at 10/s" take no
wall time. The last tests drive the middleware in-process for what a client
cannot provoke on demand (a failing store, an app sending after the close).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
from typing import Any, Dict, List, Optional, Tuple

import pytest

from helpers.servers import uvicorn_running
from helpers.websocket_client import exchange, websockets_client, ws_url
from limiter import ManualClock, RateLimiter
from limiter.adapters.asgi import RateLimitMiddleware
from limiter.store import StoreError

pytestmark = pytest.mark.servers

START = 1_700_000_000.0
#: ``exchange``'s ``per_second`` for messages all sent at ``START``.
STILL = math.inf


def notice(retry_after: Optional[float]) -> str:
    """The text frame a dropped message gets, as docs/adapters.md shows it."""
    return json.dumps(
        {
            "status": 429,
            "code": "rate_limited",
            "message": "too many messages",
            "retry_after": retry_after,
        },
        separators=(",", ":"),
    )


class Echo:
    """A raw ASGI WebSocket app: accepts, echoes each message, records what it got."""

    def __init__(self) -> None:
        self.got: List[Any] = []
        self.disconnects: List[Tuple[Any, Any]] = []

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "websocket"
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                self.disconnects.append((message.get("code"), message.get("reason")))
                return
            text = message.get("text")
            self.got.append(message.get("bytes") if text is None else text)
            if text is None:
                await send({"type": "websocket.send", "bytes": message["bytes"]})
            else:
                await send({"type": "websocket.send", "text": "echo:" + text})


class Server:
    """One uvicorn for the module; each test mounts its middleware on a path of its own."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.apps: Dict[str, Any] = {}
        self.ended = threading.Semaphore(0)  # released when a connection's app returned

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await self.apps[scope["path"]](scope, receive, send)
        finally:
            if scope["type"] == "websocket":
                self.ended.release()

    def mount(self, path: str, app: Any) -> str:
        self.apps[path] = app
        return ws_url(self.url, path)

    def wait_ended(self, count: int = 1) -> None:
        for _ in range(count):
            assert self.ended.acquire(timeout=30), "the connection's app did not return"


@pytest.fixture(scope="module")
def server():
    websockets_client()
    holder: Dict[str, Server] = {}

    async def app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
        await holder["server"](scope, receive, send)

    with uvicorn_running(app) as url:
        holder["server"] = Server(url)
        yield holder["server"]


def limited(clock: ManualClock, **options: Any) -> Tuple[Echo, RateLimitMiddleware]:
    echo = Echo()
    return echo, RateLimitMiddleware(echo, RateLimiter("100/second", clock=clock), **options)


def two_per_second_burst_5(clock: ManualClock) -> RateLimiter:
    return RateLimiter("2/second", burst=5, clock=clock)


# -- the scenario: 100 messages at 10/s, 2/s with a burst of 5 ---------------


@pytest.mark.parametrize("code", [1008, 1013])
def test_close_after_the_burst_and_the_refilled_message(server: Server, code: int) -> None:
    connect = websockets_client().connect
    clock = ManualClock(START)
    limit = two_per_second_burst_5(clock)
    options: Dict[str, Any] = {"ws_messages_per_connection": limit}
    if code != 1008:
        options["ws_close_code"] = code  # 1008 is the default
    echo, app = limited(clock, **options)
    url = server.mount(f"/close-{code}", app)
    with connect(url) as ws:
        seen = exchange(ws, 100, clock, START)
    server.wait_ended()
    # 5 from the burst, the 6th at 0.5 s on the token refilled meanwhile; the 7th closes.
    assert seen.replies == [f"echo:m{i}" for i in range(6)]
    assert seen.closed == (6, code, "too many messages")
    assert echo.got == [f"m{i}" for i in range(6)]
    assert echo.disconnects == [(code, "too many messages")]


def test_drop_sends_a_notice_per_dropped_message(server: Server) -> None:
    connect = websockets_client().connect
    clock = ManualClock(START)
    echo, app = limited(
        clock, ws_messages_per_connection=two_per_second_burst_5(clock), ws_on_limit="drop"
    )
    url = server.mount("/drop", app)
    with connect(url) as ws:
        seen = exchange(ws, 100, clock, START)
    server.wait_ended()
    assert seen.closed is None
    # After the first six, one message in five (every 0.5 s) finds a token.
    delivered = [*range(6), *range(10, 100, 5)]
    assert len(delivered) == 24
    assert echo.got == [f"m{i}" for i in delivered]
    assert [seen.replies[i] for i in delivered] == [f"echo:m{i}" for i in delivered]
    # The 7th to 10th are dropped; each notice says when a token is back.
    assert seen.replies[6:10] == [notice(0.4), notice(0.3), notice(0.2), notice(0.1)]
    assert sum(reply.startswith("{") for reply in seen.replies) == 76  # type: ignore[union-attr]
    assert echo.disconnects == [(1000, "")]  # the client's own close, passed through


def send_bytes(server: Server, path: str, sent: List[Any]) -> Tuple[Echo, List[Any]]:
    """``sent`` at one instant on a connection allowed 10 bytes (10 a second); the replies."""
    connect = websockets_client().connect
    clock = ManualClock(START)
    echo, app = limited(
        clock,
        ws_messages_per_connection=RateLimiter("10/second", burst=10, clock=clock),
        ws_cost="bytes",
        ws_on_limit="drop",
    )
    with connect(server.mount(path, app)) as ws:
        seen = exchange(ws, len(sent), clock, START, STILL, message=sent.__getitem__)
    server.wait_ended()
    return echo, seen.replies


def test_cost_per_byte(server: Server) -> None:
    echo, replies = send_bytes(server, "/bytes", ["abcd", "é€", b"\x00\x01\x02", "", b"\x00", "12"])
    # 4 bytes, then 5 ("é" is 2 in UTF-8, "€" 3): 1 left, too few for 3; an empty
    # text costs nothing; 1 byte takes the last, and 2 more wait.
    assert echo.got == ["abcd", "é€", "", b"\x00"]
    assert replies == [
        "echo:abcd",
        "echo:é€",
        notice(0.2),  # 2 bytes short, at 10 bytes a second
        "echo:",
        b"\x00",
        notice(0.2),
    ]


def test_a_message_larger_than_the_burst_can_never_pass(server: Server) -> None:
    echo, replies = send_bytes(server, "/huge", ["x" * 11, "ok"])
    assert replies == [notice(None), "echo:ok"]
    assert echo.got == ["ok"]


# -- per connection, per key, both -----------------------------------------------


def test_per_connection_limits_are_apart_and_per_key_limits_shared(server: Server) -> None:
    connect = websockets_client().connect
    clock = ManualClock(START)
    _, per_connection = limited(
        clock,
        ws_messages_per_connection=RateLimiter("1/minute", burst=2, clock=clock),
        ws_on_limit="drop",
    )
    _, per_key = limited(
        clock,
        ws_messages_per_key=RateLimiter("3/minute", burst=3, clock=clock),
        ws_on_limit="drop",
    )
    for path, app in (("/apart", per_connection), ("/shared", per_key)):
        url = server.mount(path, app)
        with connect(url) as a, connect(url) as b:
            assert exchange(a, 2, clock, START, STILL).replies == ["echo:m0", "echo:m1"]
            second = exchange(b, 3, clock, START, STILL).replies
        server.wait_ended(2)
        if path == "/apart":  # each connection its own 2
            assert second == ["echo:m0", "echo:m1", notice(60.0)]
        else:  # the client's 3 across its connections
            assert second == ["echo:m0", notice(20.0), notice(20.0)]


def test_both_limits_a_message_refused_by_the_key_is_not_charged_to_the_connection(
    server: Server,
) -> None:
    connect = websockets_client().connect
    clock = ManualClock(START)
    _, app = limited(
        clock,
        ws_messages_per_connection=RateLimiter("1/minute", burst=2, clock=clock),
        ws_messages_per_key=RateLimiter("1/second", burst=3, clock=clock),
        ws_on_limit="drop",
    )
    url = server.mount("/both", app)
    with connect(url) as a, connect(url) as b:
        assert exchange(a, 3, clock, START, STILL).replies == ["echo:m0", "echo:m1", notice(60.0)]
        # The key has 1 left (the connection refused a's 3rd before the key saw it).
        assert exchange(b, 2, clock, START, STILL).replies == ["echo:m0", notice(1.0)]
        # A second later the key has a token again, and b's connection still has
        # one: its refused message was given back.
        assert exchange(b, 1, clock, START + 1).replies == ["echo:m0"]
    server.wait_ended(2)


def test_a_connections_bucket_is_forgotten_when_it_closes(server: Server) -> None:
    connect = websockets_client().connect
    clock = ManualClock(START)
    _, app = limited(clock, ws_messages_per_connection="2/second")
    assert app.messages is not None and app.messages.per_connection is not None
    store = app.messages.per_connection.store  # a MemoryStore of its own
    url = server.mount("/forgotten", app)
    for _ in range(3):
        with connect(url) as ws:
            assert exchange(ws, 2, clock, START).replies == ["echo:m0", "echo:m1"]
            assert len(store) == 1  # type: ignore[arg-type]
        server.wait_ended()
        assert len(store) == 0  # type: ignore[arg-type]


def test_the_handshake_is_still_limited(server: Server) -> None:
    client = websockets_client()
    from websockets.exceptions import InvalidStatus

    clock = ManualClock(START)
    echo = Echo()
    app = RateLimitMiddleware(
        echo,
        RateLimiter("2/minute", clock=clock),
        ws_messages_per_connection=RateLimiter("1/minute", burst=1, clock=clock),
    )
    url = server.mount("/handshake", app)
    for _ in range(2):
        with client.connect(url) as ws:
            assert exchange(ws, 2, clock, START).closed == (1, 1008, "too many messages")
        server.wait_ended()
    with pytest.raises(InvalidStatus) as refused:
        client.connect(url)
    server.wait_ended()
    assert refused.value.response.status_code == 429
    assert echo.got == ["m0", "m0"]


# -- in-process: what a client cannot provoke on demand --------------------------


class Broken:
    """A store that always fails."""

    def apply(self, *args: Any) -> Any:
        raise StoreError("down")

    def reset(self, key: str) -> None:
        raise StoreError("down")


def drive(app: Any, incoming: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Run ``app`` on one connection fed ``incoming`` (then a disconnect); what it sent."""
    sent: List[Dict[str, Any]] = []
    events = [{"type": "websocket.connect"}, *incoming, {"type": "websocket.disconnect"}]

    async def receive() -> Dict[str, Any]:
        return events.pop(0)

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": "/", "headers": [], "client": ("192.0.2.1", 1)}
    asyncio.run(app(scope, receive, send))
    return sent


TEXT = {"type": "websocket.receive", "text": "hi"}


@pytest.mark.parametrize("on_error", ["allow", "deny"])
@pytest.mark.parametrize("action", ["close", "drop"])
def test_a_failing_store_follows_on_error(
    on_error: str, action: str, caplog: pytest.LogCaptureFixture
) -> None:
    echo = Echo()
    app = RateLimitMiddleware(
        echo,
        RateLimiter("10/second"),
        ws_messages_per_key=RateLimiter("10/second", store=Broken()),  # type: ignore[arg-type]
        ws_on_limit=action,
        on_error=on_error,
    )
    with caplog.at_level(logging.WARNING, "limiter.adapters"):
        sent = drive(app, [TEXT, TEXT])
    assert "failed" in caplog.text
    if on_error == "allow":
        assert echo.got == ["hi", "hi"]
        return
    assert echo.got == []
    unavailable = (
        '{"status":503,"code":"rate_limiter_unavailable","message":"rate limiter unavailable",'
        '"retry_after":null}'
    )
    if action == "drop":
        assert sent[1:] == [{"type": "websocket.send", "text": unavailable}] * 2
    else:
        assert sent[1:] == [
            {"type": "websocket.close", "code": 1013, "reason": "rate limiter unavailable"}
        ]
        assert echo.disconnects == [(1013, "rate limiter unavailable")]


def test_shadow_mode_delivers_every_message_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    echo = Echo()
    app = RateLimitMiddleware(
        echo, RateLimiter("10/second"), ws_messages_per_connection="1/minute", mode="shadow"
    )
    with caplog.at_level(logging.WARNING, "limiter.adapters"):
        drive(app, [TEXT, TEXT, TEXT])
    assert echo.got == ["hi", "hi", "hi"]
    assert "shadow mode" in caplog.text


def test_exempt_connections_are_not_limited() -> None:
    echo = Echo()
    app = RateLimitMiddleware(
        echo,
        RateLimiter("10/second"),
        ws_messages_per_connection="1/minute",
        allow_list=["192.0.2.1"],
    )
    drive(app, [TEXT, TEXT, TEXT])
    assert echo.got == ["hi", "hi", "hi"]


def test_after_the_close_the_app_cannot_send_and_its_own_close_is_absorbed() -> None:
    outcome: List[Any] = []

    async def app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await receive()  # the first message
        outcome.append(await receive())  # the second: refused, the connection closed
        outcome.append(await receive())  # asked again: the same disconnect
        await send({"type": "websocket.close", "code": 1000})  # absorbed
        try:
            await send({"type": "websocket.send", "text": "late"})
        except OSError as error:
            outcome.append(str(error))

    limitedapp = RateLimitMiddleware(
        app, RateLimiter("10/second"), ws_messages_per_connection="1/minute"
    )
    sent = drive(limitedapp, [TEXT, TEXT, TEXT])
    gone = {"type": "websocket.disconnect", "code": 1008, "reason": "too many messages"}
    assert outcome == [gone, gone, "the rate limiter closed this WebSocket (1008)"]
    assert sent == [
        {"type": "websocket.accept"},
        {"type": "websocket.close", "code": 1008, "reason": "too many messages"},
    ]


def test_no_notice_after_the_app_closed() -> None:
    async def app(scope: Dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1000})
        while (await receive())["type"] != "websocket.disconnect":
            pass

    limitedapp = RateLimitMiddleware(
        app, RateLimiter("10/second"), ws_messages_per_connection="1/minute", ws_on_limit="drop"
    )
    sent = drive(limitedapp, [TEXT, TEXT, TEXT])
    assert sent == [{"type": "websocket.accept"}, {"type": "websocket.close", "code": 1000}]


# -- options ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "text"),
    [
        ({"ws_messages_per_connection": 5}, TypeError, "ws_messages_per_connection must be"),
        ({"ws_messages_per_key": "often"}, ValueError, "often"),
        ({"ws_messages_per_key": "1/s", "ws_cost": "frames"}, ValueError, "ws_cost must be"),
        ({"ws_messages_per_key": "1/s", "ws_cost": 1}, TypeError, "ws_cost must be"),
        ({"ws_messages_per_key": "1/s", "ws_on_limit": "ignore"}, ValueError, "ws_on_limit"),
        ({"ws_messages_per_key": "1/s", "ws_close_code": 1000}, ValueError, "1008, 1013"),
        ({"ws_messages_per_key": "1/s", "ws_close_code": True}, TypeError, "ws_close_code"),
        (
            {"ws_messages_per_key": "1/s", "ws_on_limit": "drop", "ws_close_code": 1013},
            ValueError,
            "applies to ws_on_limit='close'",
        ),
        ({"ws_cost": "bytes"}, ValueError, "ws_cost given without a limit"),
        ({"ws_mesages_per_key": "1/s"}, TypeError, "did you mean 'ws_messages_per_key'"),
    ],
)
def test_options_are_checked_when_built(options: Dict[str, Any], error: type, text: str) -> None:
    with pytest.raises(error, match=text) as raised:
        RateLimitMiddleware(Echo(), RateLimiter("1/second"), **options)
    if error is TypeError and "did you mean" in text:
        assert "RateLimitMiddleware()" in str(raised.value)


def test_application_close_codes_and_no_limit_at_all() -> None:
    app = RateLimitMiddleware(
        Echo(), RateLimiter("1/second"), ws_messages_per_key="1/s", ws_close_code=4429
    )
    assert app.messages is not None and app.messages.close_code == 4429
    unlimited = RateLimitMiddleware(Echo(), RateLimiter("1/s"), ws_messages_per_key=None)
    assert unlimited.messages is None
