"""The sync Redis store's fast path: EVALSHA on the store's own redis-py connections.

A pool checkout per call cost ~30 us more than a held connection, so checks go
on connections of the client's class and settings, in a per-process free list.
Which clients qualify: docs/stores.md "The fast path".
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import sys
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Type, TypeVar

from limiter.store import PoolFullError

_T = TypeVar("_T")


def named(obj: object, name: str) -> bool:
    """Whether ``obj``'s class or a base of it is called ``name`` (matched by name: no
    client library needs to be installed)."""
    return any(cls.__name__ == name for cls in type(obj).__mro__)


def pool_full(exc: BaseException) -> Optional[bool]:
    """``True``: ``exc`` says the pool is full (try again); ``False``: a blocking pool
    that already waited; ``None``: anything else."""
    for cls in type(exc).__mro__:
        name = cls.__name__
        if name == "MaxConnectionsError":
            return True
        if name == "ConnectionError":
            text = str(exc)
            if text == "Too many connections":  # redis-py < 5.1 and valkey-py
                return True
            if text == "No connection available.":  # a BlockingConnectionPool's timeout
                return False
            return None
    return None


def pool_wait(client: Any) -> Optional[float]:
    """How long a check may wait for a pool connection: the client's connect (else
    socket) timeout, or ``None`` (no bound)."""
    try:
        pool = getattr(client, "connection_pool", None)
        kwargs = getattr(pool, "connection_kwargs", None)
        if not isinstance(kwargs, dict):  # a cluster client keeps them itself
            kwargs = getattr(client, "connection_kwargs", None)
        if not isinstance(kwargs, dict):
            kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None)
        for name in ("socket_connect_timeout", "socket_timeout"):
            value = kwargs.get(name) if isinstance(kwargs, dict) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return float(value)
    except Exception:  # a client whose attributes cannot be read: no bound, as for none
        pass
    return None


# Polling a full pool: redis-py has no "connection released" signal to wait on.
_FIRST_DELAY = 0.0005
_MAX_DELAY = 0.01


class _Waiting:
    """The pauses between tries while the pool is full, for up to ``wait`` seconds."""

    def __init__(self, wait: Optional[float]) -> None:
        self.wait = wait
        self.deadline = None if wait is None else time.monotonic() + wait
        self.delay = _FIRST_DELAY

    def pause(self, exc: BaseException) -> float:
        """The pause before the next try; raise ``PoolFullError`` when the wait is over,
        ``exc`` when it is not about the pool."""
        full = pool_full(exc)
        if full is None:
            raise exc
        if full is False or (self.deadline is not None and time.monotonic() >= self.deadline):
            raise PoolFullError(
                f"the client's connection pool stayed full for {self.wait} s "
                f"({type(exc).__name__}: {exc}): raise its max_connections"
            ) from exc
        delay, self.delay = self.delay, min(self.delay * 2, _MAX_DELAY)
        return delay


def wait_for_pool(call: Callable[[], _T], wait: Optional[float]) -> _T:
    """``call()``, tried again while the pool is full, for up to ``wait`` seconds from the
    first failure; any other exception propagates."""
    waiting = None
    while True:
        try:
            return call()
        except Exception as exc:
            waiting = waiting or _Waiting(wait)
            time.sleep(waiting.pause(exc))


async def await_pool(call: Callable[[], Awaitable[_T]], wait: Optional[float]) -> _T:
    """``wait_for_pool`` for asyncio: ``await call()``, tried again while the pool is full."""
    import asyncio

    waiting = None
    while True:
        try:
            return await call()
        except Exception as exc:
            waiting = waiting or _Waiting(wait)
            await asyncio.sleep(waiting.pause(exc))


_CLIENT_CLASSES = {("redis.client", "Redis"), ("valkey.client", "Valkey")}
_ASYNC_CLIENT_CLASSES = {
    ("redis.asyncio.client", "Redis"),
    ("valkey.asyncio.client", "Valkey"),
    ("redis.asyncio.cluster", "RedisCluster"),
    ("valkey.asyncio.cluster", "ValkeyCluster"),
}
# The methods a check goes through on the client's own path.
_CHECK_METHODS = ("evalsha", "eval", "execute_command")
_POOL_CLASSES = {("redis.connection", "ConnectionPool"), ("valkey.connection", "ConnectionPool")}

_getpid = os.getpid
_POLLIN = getattr(select, "POLLIN", 1)
_HAS_POLL = hasattr(select, "poll")


def bulk(value: bytes) -> bytes:
    """``value`` as a RESP bulk string."""
    return b"$%d\r\n%b\r\n" % (len(value), value)


def plain_client(client: Any, *, asyncio: bool = False) -> bool:
    """Whether ``client``'s checks may skip its ``execute_command``: a redis/valkey
    client (or subclass) whose ``evalsha``, ``eval`` and ``execute_command`` are the
    library's own, not overridden, patched or wrapped (so a tracer sees every check)."""
    kind = type(client)
    classes = _ASYNC_CLIENT_CLASSES if asyncio else _CLIENT_CLASSES
    base = next((cls for cls in kind.__mro__ if (cls.__module__, cls.__name__) in classes), None)
    if base is None:
        return False
    package = base.__module__.split(".")[0] + "."
    instance = getattr(client, "__dict__", None) or {}
    for name in _CHECK_METHODS:
        if name in instance:  # patched on the instance
            return False
        method = getattr(kind, name, None)
        if method is None or method is not getattr(base, name, None):
            return False  # overridden by a subclass
        if not str(getattr(method, "__module__", "")).startswith(package):
            return False  # replaced on the library's class by another module
    # A wrapper made with functools.wraps or wrapt carries the library's
    # __module__ and __qualname__, and __wrapped__.
    return not hasattr(getattr(kind, "execute_command", None), "__wrapped__")


class _Held:
    """One connection and the ``poll`` of the socket it had when last used."""

    __slots__ = ("conn", "poll", "sock")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sock: Any = None
        self.poll: Any = None


class Connections:
    """Packed commands sent on the store's own connections (build with ``for_client``);
    ``execute`` raises the client library's own exceptions.  Thread- and fork-safe."""

    def __init__(
        self, pool: Any, script: str, sha: bytes, response_error: Type[BaseException]
    ) -> None:
        self._pool = pool
        self._script = bulk(script.encode("utf-8"))
        self._response_error = response_error
        self._free: List[_Held] = []
        self._pid = _getpid()
        self._sha = bulk(sha)
        self._heads: Dict[int, bytes] = {}

    @classmethod
    def for_client(cls, client: Any, script: str, sha: bytes) -> Optional[Connections]:
        """A ``Connections`` for ``client``, or ``None`` when it must keep its own path."""
        if not plain_client(client):  # instrumented: it keeps seeing calls
            return None
        if getattr(client, "connection", None) is not None:  # single_connection_client
            return None
        pool = getattr(client, "connection_pool", None)
        pool_class = type(pool)
        if (pool_class.__module__, pool_class.__name__) not in _POOL_CLASSES:
            return None
        if getattr(pool, "cache", None) is not None:  # client-side caching (RESP3)
            return None
        connection_class = getattr(pool, "connection_class", None)
        if not isinstance(getattr(pool, "connection_kwargs", None), dict) or not all(
            callable(getattr(connection_class, name, None))
            for name in ("send_packed_command", "read_response", "disconnect")
        ):
            return None
        library = sys.modules[pool_class.__module__.split(".")[0]]  # redis or valkey
        return cls(pool, script, sha, library.ResponseError)

    def evalsha(self, numkeys: bytes, keys: List[bytes], args: List[bytes]) -> bytes:
        """``EVALSHA sha numkeys *keys *args`` in RESP."""
        count = len(keys) + len(args)
        head = self._heads.get(count)
        if head is None:
            head = b"*%d\r\n$7\r\nEVALSHA\r\n" % (count + 3) + self._sha
            self._heads[count] = head
        return b"".join([head, bulk(numkeys), *map(bulk, keys), *map(bulk, args)])

    def eval(self, numkeys: bytes, keys: List[bytes], args: List[bytes]) -> bytes:
        """``EVAL script numkeys *keys *args`` in RESP (after ``NOSCRIPT``: rare)."""
        head = b"*%d\r\n$4\r\nEVAL\r\n" % (len(keys) + len(args) + 3) + self._script
        return b"".join([head, bulk(numkeys), *map(bulk, keys), *map(bulk, args)])

    def execute(self, packed: bytes) -> Any:
        """Send one packed command on a connection of this process and read its reply."""
        if self._pid != _getpid():
            self._forked()
        free = self._free
        try:
            held = free.pop()
        except IndexError:
            pool = self._pool
            held = _Held(pool.connection_class(**pool.connection_kwargs))
        conn = held.conn
        try:
            sock = getattr(conn, "_sock", None)
            if sock is not None:
                if sock is not held.sock:
                    held.sock = sock
                    held.poll = _poller(sock)
                if held.poll() if held.poll is not None else _can_read(conn):
                    conn.disconnect()  # closed by the server while idle, or stray bytes

            # Sent once: a retry could take its tokens twice.
            if getattr(conn, "_sock", None) is None:
                conn.connect()
            conn.send_packed_command((packed,))  # chunks (bytes would be read as ints)
            reply = conn.read_response()
        except self._response_error:
            free.append(held)  # an error reply, read whole: the connection is clean
            if free is not self._free:
                _drain(free)  # close() ran meanwhile
            raise
        except BaseException:
            # Unread bytes may remain (a timeout mid-reply): never reuse that socket.
            try:
                conn.disconnect()
            finally:
                free.append(held)  # the next use reconnects it
            raise
        free.append(held)
        if free is not self._free:
            _drain(free)  # close() ran meanwhile: it could not disconnect this one
        return reply

    def close(self) -> None:
        """Disconnect this process's connections (one in use: when its command ends); the
        next ``execute`` connects again."""
        if self._pid != _getpid():
            self._forked()  # the parent's sockets are the parent's to close
            return
        free, self._free = self._free, []
        _drain(free)

    def _forked(self) -> None:
        # The child drops the parent's connections unused (never shut down).
        self._free = []
        self._pid = _getpid()


def _can_read(conn: Any) -> bool:
    """``conn.can_read()`` where there is no ``poll``: True also when it finds the socket closed."""
    try:
        return bool(conn.can_read())
    except Exception:  # "Connection closed by server.": reconnect, as the client's pool does
        return True


def _drain(free: List[_Held]) -> None:
    """Disconnect every connection in ``free``, emptying it (safe from several threads)."""
    while True:
        try:
            held = free.pop()
        except IndexError:
            return
        with contextlib.suppress(Exception):  # already broken: nothing more to close
            held.conn.disconnect()


def _poller(sock: Any) -> Any:
    """A zero-timeout readability test of ``sock`` (``None`` without ``select.poll``)."""
    if not _HAS_POLL:
        return None
    poller = select.poll()
    poller.register(sock, _POLLIN)
    return functools.partial(poller.poll, 0)
