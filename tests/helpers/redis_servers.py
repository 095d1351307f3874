"""Throwaway redis-server processes for the tests: single servers and a 3-master cluster.

Every server binds 127.0.0.1 only, on a free port, with no persistence, in a
temporary directory, and is killed at teardown: no test uses a Redis that
happens to run on this machine (6379 or any other).  Without a ``redis-server``
binary on PATH the tests that need one skip with a reason that says how to
enable them, except under ``CI=true`` where they fail: CI must run them
(``.ci/run`` installs Redis).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, List, Optional

import pytest

from helpers.needs import need

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")

pytest.importorskip("redis", reason="redis-py is not installed: pip install 'tokenlimiter[redis]'")

import redis  # noqa: E402


def require_redis(cli: bool = False) -> None:
    """Skip (or fail under ``CI=true``) when the Redis binaries are missing."""
    missing = [
        name
        for name, path in (("redis-server", REDIS_SERVER), ("redis-cli", REDIS_CLI))
        if path is None and (name == "redis-server" or cli)
    ]
    if not missing:
        return
    reason = (
        f"{' and '.join(missing)} not found on PATH: the Redis tests start their own "
        "throwaway redis-server on a free loopback port; to run them, install Redis >= 6 "
        "so that redis-server and redis-cli are on PATH (e.g. `apt-get install redis-server`)"
    )
    need(reason)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(cluster: bool = False) -> int:
    """A free loopback port; with ``cluster``, its bus port (+10000) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if not cluster or (port < 55535 and _port_free(port + 10000)):
            return port
    raise RuntimeError("no free loopback port")


class _ExitedEarly(RuntimeError):
    """redis-server exited before answering (its port was taken, say)."""


class RedisServer:
    """One redis-server process on ``port``; ``start``/``stop`` may repeat (same port)."""

    def __init__(self, port: Optional[int] = None, *extra: str, cluster: bool = False) -> None:
        require_redis(cli=cluster)
        # A port picked here may be taken by another process before redis-server
        # binds it (other test runs share the machine): the first start then
        # retries on a new port.  A port given by the caller is kept.
        self._may_move = port is None
        self.port = port or free_port(cluster)
        self.cluster = cluster
        self.extra = list(extra)
        self.dir = tempfile.mkdtemp(prefix="limiter-redis-")
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> RedisServer:
        """Start the server and wait (up to ``timeout`` s: a busy machine) until it answers."""
        for attempt in range(5):
            try:
                return self._start(timeout)
            except _ExitedEarly:
                if not self._may_move or attempt == 4:
                    raise
                self.port = free_port(self.cluster)
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> RedisServer:
        assert REDIS_SERVER is not None
        args = [
            REDIS_SERVER,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self.dir,
            "--logfile",
            os.path.join(self.dir, "redis.log"),
            *self.extra,
        ]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        probe = redis.Redis(port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            while True:
                try:
                    # Ours, not another test run's server that took the port first.
                    if probe.info("server").get("process_id") == self.proc.pid:
                        self._may_move = False  # restarts keep the port clients know
                        return self
                except redis.RedisError:
                    pass
                exited = self.proc.poll() is not None
                if exited or time.monotonic() > deadline:
                    log = self.log()
                    self.stop()
                    error = _ExitedEarly if exited else RuntimeError
                    raise error(f"redis-server on port {self.port} did not start:\n{log}")
                time.sleep(0.01)
        finally:
            probe.close()

    def log(self) -> str:
        try:
            with open(os.path.join(self.dir, "redis.log")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill the server (SIGKILL: a crash, not a shutdown) and wait for it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def client(self, **kwargs: Any) -> redis.Redis:
        # Generous timeouts: this server is up, and a busy machine must not turn
        # a slow answer into a failure.  Tests of failures pass short ones.
        kwargs.setdefault("socket_timeout", 5.0)
        kwargs.setdefault("socket_connect_timeout", 5.0)
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_server(*extra: str) -> Iterator[RedisServer]:
    """Generator for a module-scoped fixture: a running server, removed afterwards."""
    server = RedisServer(None, *extra)
    try:
        yield server.start()
    finally:
        server.remove()


class RedisClusterNodes:
    """Three masters on loopback, joined with ``redis-cli --cluster create``."""

    def __init__(self) -> None:
        self.nodes: List[RedisServer] = []

    def start(self, timeout: float = 30.0) -> RedisClusterNodes:
        try:
            ports: List[int] = []
            while len(ports) < 3:
                port = free_port(cluster=True)
                if port not in ports:
                    ports.append(port)
            self.nodes = [RedisServer(port, cluster=True) for port in ports]
            for node in self.nodes:
                node.start()
            assert REDIS_CLI is not None
            subprocess.run(
                [
                    REDIS_CLI,
                    "--cluster",
                    "create",
                    *(f"127.0.0.1:{p}" for p in ports),
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout,
            )
            deadline = time.monotonic() + timeout
            for node in self.nodes:
                client = node.client()
                try:
                    while client.cluster("info").get("cluster_state") != "ok":
                        if time.monotonic() > deadline:
                            raise RuntimeError("the Redis cluster did not reach cluster_state:ok")
                        time.sleep(0.05)
                finally:
                    client.close()
        except BaseException:
            self.remove()
            raise
        return self

    @property
    def ports(self) -> List[int]:
        return [node.port for node in self.nodes]

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()


def unique_prefix() -> str:
    """A fresh key prefix: tests sharing one server never see each other's keys."""
    return f"test:{uuid.uuid4().hex}:"


@contextlib.contextmanager
def sentinel_for(
    master_port: int,
    conf_dir: Path,
    *,
    password: Optional[str] = None,
    master_password: Optional[str] = None,
) -> Iterator[int]:
    """A redis-server in sentinel mode watching 127.0.0.1:``master_port`` as "primary".

    Yields its port once it has discovered the master; killed afterwards.
    ``password``: the Sentinel's own; ``master_password``: the master's.
    """
    import redis.sentinel

    assert REDIS_SERVER is not None
    port = free_port()
    conf = conf_dir / "sentinel.conf"
    lines = [f"port {port}", "bind 127.0.0.1"]
    if password is not None:
        lines.append(f'requirepass "{password}"')
    lines.append(f"sentinel monitor primary 127.0.0.1 {master_port} 1")
    if master_password is not None:
        lines.append(f'sentinel auth-pass primary "{master_password}"')
    lines.append("sentinel down-after-milliseconds primary 5000")
    conf.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen(
        [REDIS_SERVER, str(conf), "--sentinel"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=str(conf_dir),
    )
    try:
        probe = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            [("127.0.0.1", port)],
            sentinel_kwargs={"socket_timeout": 0.5, "password": password},
        )
        deadline = time.monotonic() + 60  # generous: a busy machine
        while True:
            try:
                if probe.discover_master("primary"):  # type: ignore[no-untyped-call]
                    break
            except (redis.sentinel.MasterNotFoundError, redis.ConnectionError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis sentinel did not come up")
            time.sleep(0.05)  # polling for the process to come up, not a fixed wait
        yield port
    finally:
        proc.kill()
        proc.wait(10)
