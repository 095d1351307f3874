"""The one Redis server a bench run talks to, and the client settings everyone gets.

* ``REDIS_URL`` set: that server and nothing else (keys under a ``bench:``
  prefix, deleted afterwards; counters such as ``INFO commandstats`` are read as
  deltas, never reset).
* ``REDIS_URL`` unset and ``redis-server`` on PATH: a throwaway server on a free
  loopback port (no persistence, its own temporary directory), started the
  first time a section asks for it and stopped when the run ends.
* Neither: the Redis sections and rows report ``Unavailable`` with the reason.

Nothing here ever falls back to ``127.0.0.1:6379``.  Child processes (the
servers of ``bench.servers``) get the URL in ``BENCH_REDIS_URL``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any, Dict, Optional

from .common import Unavailable, server_url

#: The connection settings of every client in the bench, ours and the peers':
#: same timeouts (seconds), RESP version and pool size.
CLIENT_OPTIONS: Dict[str, Any] = {
    "socket_timeout": 5.0,
    "socket_connect_timeout": 5.0,
    "protocol": 2,
    "max_connections": 64,
}

_state: Dict[str, Any] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start_throwaway() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise Unavailable("REDIS_URL is not set and redis-server is not on PATH")
    tmp = tempfile.mkdtemp(prefix="bench-redis-")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", tmp, "--logfile", os.path.join(tmp, "redis.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _state["proc"], _state["tmp"] = proc, tmp
    atexit.register(close)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Unavailable(f"the throwaway redis-server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return f"redis://127.0.0.1:{port}/0"
        except OSError:
            pass
        time.sleep(0.05)
    close()
    raise Unavailable("the throwaway redis-server did not answer within 10 s")


def _probe(found: str) -> None:
    import redis

    redis.Redis.from_url(found, socket_timeout=2).ping()


def url() -> str:
    """The URL of this run's Redis server, or raise ``Unavailable`` saying why there is none."""
    if "url" not in _state:
        names = ("Redis", "redis-server", "redis-py is not installed")
        os.environ["BENCH_REDIS_URL"] = server_url(
            _state, "REDIS_URL", _start_throwaway, _probe, names
        )
    return str(_state["url"])


def origin() -> str:
    """Where this run's server came from (``REDIS_URL`` or a throwaway), "" when none."""
    return str(_state.get("origin", ""))


def describe() -> str:
    """The server used in this run (version and origin), or why none was."""
    if "url" not in _state:
        return _state.get("error", "not used in this run")
    try:
        import redis

        version = redis.Redis.from_url(_state["url"], socket_timeout=2).info("server")
        return f"{version['redis_version']} ({_state['origin']})"
    except Exception as exc:
        return f"unreachable at the end of the run ({exc})"


def sync_client(connection_class: Optional[Any] = None) -> Any:
    """A redis-py client on its own pool, with ``CLIENT_OPTIONS``."""
    import redis

    pool = redis.ConnectionPool.from_url(url(), **_pool_options(connection_class))
    return redis.Redis(connection_pool=pool)


def sync_pool(connection_class: Optional[Any] = None) -> Any:
    import redis

    return redis.ConnectionPool.from_url(url(), **_pool_options(connection_class))


def async_pool() -> Any:
    import redis.asyncio as aredis

    return aredis.ConnectionPool.from_url(url(), **CLIENT_OPTIONS)


def async_client() -> Any:
    import redis.asyncio as aredis

    return aredis.Redis.from_url(url(), **CLIENT_OPTIONS)  # closing it closes its pool


def _pool_options(connection_class: Optional[Any]) -> Dict[str, Any]:
    options = dict(CLIENT_OPTIONS)
    if connection_class is not None:
        options["connection_class"] = connection_class
    return options


def close() -> None:
    """Stop the throwaway server, if this run started one."""
    proc = _state.pop("proc", None)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    tmp = _state.pop("tmp", None)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    _state.pop("url", None)
    _state.pop("error", None)
    os.environ.pop("BENCH_REDIS_URL", None)
