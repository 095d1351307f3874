"""A WebSocket client for the tests: the ``websockets`` library's, one message at a time.

Each message waits for its answer (the app's echo, the limiter's notice or the
close) before the next is sent, so the server charges every message at the
time the test set on the shared ``ManualClock``: no sleeps.
"""

from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Optional, Tuple, Union

from helpers.needs import need_module

Payload = Union[str, bytes]


class Exchange(NamedTuple):
    """What the client saw: the answers, in order, and the close, if the server closed."""

    replies: List[Payload]
    #: ``(index of the message answered by the close, code, reason)``, or ``None``.
    closed: Optional[Tuple[int, int, str]]


def websockets_client() -> Any:
    """``websockets.sync.client``, or the test is skipped (fails under CI) saying how to get it."""
    need_module("websockets", "pip install -e '.[dev]'")
    return need_module("websockets.sync.client", "pip install -e '.[dev]'")


def ws_url(base: str, path: str) -> str:
    """The ``ws://`` URL of ``path`` on the server at ``base`` (``http://host:port``)."""
    return "ws" + base[len("http") :] + path


def exchange(
    connection: Any,
    count: int,
    clock: Any,
    start: float,
    per_second: float = 10,
    message: Callable[[int], Payload] = lambda i: f"m{i}",
) -> Exchange:
    """Send ``count`` messages on ``connection``, message ``i`` at ``start + i / per_second``
    on ``clock`` (set before it is sent), each answered before the next."""
    from websockets.exceptions import ConnectionClosed

    replies: List[Payload] = []
    for i in range(count):
        clock.set(start + i / per_second)
        try:
            connection.send(message(i))
            replies.append(connection.recv(timeout=30))
        except ConnectionClosed as closed:
            assert closed.rcvd is not None, f"no close frame from the server: {closed!r}"
            return Exchange(replies, (i, closed.rcvd.code, closed.rcvd.reason))
    return Exchange(replies, None)
