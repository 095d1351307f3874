"""A check is sent once: the client's retry policy may reconnect, never send a script call again.

The server is made to answer late (``DEBUG SLEEP`` sent on a socket of the
test's own, so the whole server stops): the store's check is read by the
server and runs when it wakes, after the client's read timed out.  A retry
that sent the check again would take a second token.
"""

from __future__ import annotations

import socket
import time
from typing import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from helpers.redis_servers import RedisServer, unique_prefix
from limiter import Limit, StoreError
from limiter.backends.redis import RedisStore
from limiter.testing import T0

pytestmark = pytest.mark.redis

LIMIT = Limit(0.001, 5)  # frozen clock: remaining counts every token taken
TIMEOUT = 0.5  # the client's read timeout
SLEEP = 0.8  # the server's nap: past one timeout, within two


@pytest.fixture(scope="module")
def debug_server() -> Iterator[RedisServer]:
    server = RedisServer(None, "--enable-debug-command", "local")
    try:
        yield server.start()
    finally:
        server.remove()


def _nap(port: int) -> socket.socket:
    """Send ``DEBUG SLEEP`` on a raw socket (its reply is left unread) and let it start."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$3\r\n%.1f\r\n" % SLEEP)
    time.sleep(0.05)  # the server reads it before the check below (a real-time nap)
    return sock


def test_a_read_timeout_never_sends_the_check_again(debug_server: RedisServer) -> None:
    # A plain client: the sync fast path (the store's own connections).
    client = redis.Redis(
        host="127.0.0.1",
        port=debug_server.port,
        socket_timeout=TIMEOUT,
        socket_connect_timeout=TIMEOUT,
        retry=Retry(NoBackoff(), 1),
    )
    store = RedisStore(client, prefix=unique_prefix())
    assert store.apply("k", LIMIT, 1, T0).remaining == 4  # connected: one token taken
    sock = _nap(debug_server.port)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="Timeout"):
            store.apply("k", LIMIT, 1, T0)
        assert time.monotonic() - started < SLEEP  # one timeout, no second wait
        sock.recv(16)  # the nap is over: the check above has run, once
    finally:
        sock.close()
    assert store.apply("k", LIMIT, 0, T0).remaining == 3  # a peek: two tokens taken in all
    store.close()
    client.close()
