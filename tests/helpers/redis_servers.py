"""Throwaway redis-server processes for the tests: single servers and a 3-master cluster.

Every server binds 127.0.0.1 only, on a free port, with no persistence, in a
temporary directory, and is killed at teardown: no test uses a Redis that
happens to run on this machine (6379 or any other).  Without a ``redis-server``
binary on PATH the tests that need one skip with a reason that says how to
enable them, except under ``CI=true`` where they fail: CI must run them
(``.ci/run`` installs Redis).
"""

from __future__ import annotations

import atexit
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
from typing import Any, Awaitable, Callable, Iterator, List, Optional

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
            args += ["--cluster-enabled", "yes"]
            if "--cluster-node-timeout" not in self.extra:
                args += ["--cluster-node-timeout", "5000"]
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
    """Three masters on loopback, joined with ``redis-cli --cluster create``.

    ``replicas``: replicas per master (``replicas_of`` finds them); ``node_timeout``:
    ``cluster-node-timeout`` in ms (how long before a silent node is failed).
    """

    def __init__(self, replicas: int = 0, node_timeout: int = 5000) -> None:
        self.nodes: List[RedisServer] = []
        self.replicas = replicas
        self.node_timeout = node_timeout

    def start(self, timeout: float = 30.0) -> RedisClusterNodes:
        try:
            ports: List[int] = []
            while len(ports) < 3 * (1 + self.replicas):
                port = free_port(cluster=True)
                if port not in ports:
                    ports.append(port)
            # No delay before a replica's first sync (5 s by default in Redis 7).
            options = ("--cluster-node-timeout", str(self.node_timeout))
            options += ("--repl-diskless-sync-delay", "0")
            self.nodes = [RedisServer(port, *options, cluster=True) for port in ports]
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
                    str(self.replicas),
                    "--cluster-yes",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout,
            )
            self.wait_ok(timeout)
        except BaseException:
            self.remove()
            raise
        return self

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Wait until every running node says ``cluster_state:ok`` and knows every replica."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            if node.proc is None:
                continue
            client = node.client()
            try:
                while not self._settled(client):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the Redis cluster did not reach cluster_state:ok")
                    time.sleep(0.05)
            finally:
                client.close()

    def _settled(self, client: redis.Redis) -> bool:
        if client.cluster("info").get("cluster_state") != "ok":
            return False
        if not self.replicas:
            return True
        # Replicas attach after "create" returns: wait until every one is
        # known as a replica with its link up (a failover needs one).
        info = client.info("replication")
        if info.get("role") == "slave" and info.get("master_link_status") != "up":
            return False  # still syncing: a failover now would lose what it has not got
        nodes = client.cluster("nodes").values()
        alive = [node for node in nodes if "fail" not in node["flags"]]
        replicas = [node for node in alive if "slave" in node["flags"]]
        return len(replicas) >= 3 * self.replicas and all(node["connected"] for node in alive)

    def masters(self) -> List[RedisServer]:
        """The running nodes that are masters now."""
        return [
            node for node in self.nodes if node.proc is not None and self._role(node) == "master"
        ]

    def replicas_of(self, master: RedisServer) -> List[RedisServer]:
        """The running nodes replicating ``master`` now."""
        found = []
        for node in self.nodes:
            if node.proc is None or node is master:
                continue
            info = self._info(node)
            if info.get("role") == "slave" and int(info.get("master_port", 0)) == master.port:
                found.append(node)
        return found

    @staticmethod
    def _info(node: RedisServer) -> Any:
        client = node.client()
        try:
            return client.info("replication")
        finally:
            client.close()

    def _role(self, node: RedisServer) -> str:
        return str(self._info(node).get("role"))

    def node_id(self, node: RedisServer) -> str:
        client = node.client()
        try:
            return str(client.execute_command("CLUSTER", "MYID").decode())
        finally:
            client.close()

    async def migrate_slot(
        self,
        slot: int,
        source: RedisServer,
        target: RedisServer,
        between: Callable[[], Awaitable[None]],
    ) -> int:
        """Move ``slot`` from ``source`` to ``target`` as ``redis-cli --cluster reshard`` does.

        SETSLOT IMPORTING and MIGRATING, MIGRATE its keys one at a time, then
        SETSLOT NODE on every master; ``await between()`` after each step (the
        caller lets its load run on).  Returns the number of keys moved.
        """
        import redis.asyncio

        source_id, target_id = self.node_id(source), self.node_id(target)
        admin = {
            node.port: redis.asyncio.Redis(host="127.0.0.1", port=node.port, socket_timeout=10)
            for node in self.nodes
            if node.proc is not None
        }
        moved = 0
        try:
            await admin[target.port].execute_command(
                "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id
            )
            await between()
            await admin[source.port].execute_command(
                "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id
            )
            await between()
            while True:
                keys = await admin[source.port].execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1)
                if not keys:
                    break
                await admin[source.port].execute_command(
                    "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys
                )
                moved += len(keys)
                await between()
            for node in (target, source):  # the target first, as redis-cli does
                await admin[node.port].execute_command(
                    "CLUSTER", "SETSLOT", slot, "NODE", target_id
                )
            for port, client in admin.items():
                if port not in (target.port, source.port) and self._is_master(port):
                    await client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        finally:
            for client in admin.values():
                await client.aclose()
        return moved

    def _is_master(self, port: int) -> bool:
        node = next(node for node in self.nodes if node.port == port)
        return self._role(node) == "master"

    async def kill_and_promote(self, master: RedisServer, timeout: float = 30.0) -> RedisServer:
        """SIGKILL ``master``, then promote its replica (CLUSTER FAILOVER TAKEOVER); the replica.

        Returns once the replica is a master and every live node says
        ``cluster_state:ok``, polling (a real condition) up to ``timeout`` s.
        """
        import asyncio

        import redis.asyncio

        replica = self.replicas_of(master)[0]
        master.stop()
        client = redis.asyncio.Redis(host="127.0.0.1", port=replica.port, socket_timeout=10)
        try:
            # As an automatic failover would, promote the replica once it has seen
            # its master go (so it applied all the master sent); a replica promoted
            # before that drops the tail of the stream: writes the master acknowledged.
            deadline = time.monotonic() + timeout
            while (await client.info("replication")).get("master_link_status") != "down":
                assert time.monotonic() < deadline, "the replica never saw its master go"
                await asyncio.sleep(0.001)
            await client.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
            while (await client.info("replication")).get("role") != "master":
                assert time.monotonic() < deadline, "the replica was not promoted"
                await asyncio.sleep(0.01)
        finally:
            await client.aclose()
        return replica

    @property
    def ports(self) -> List[int]:
        return [node.port for node in self.nodes]

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()


_SHARED: List[RedisClusterNodes] = []


def shared_cluster() -> RedisClusterNodes:
    """One 3-master cluster for every test module of this process that keeps it whole.

    Started at the first call (about 2 s), removed at exit. A module may move
    slots or flush scripts (the cluster stays valid), and uses its own key
    prefixes (``unique_prefix``); one that kills or stops a node starts its own.
    """
    if not _SHARED:
        cluster = RedisClusterNodes().start()
        atexit.register(cluster.remove)
        _SHARED.append(cluster)
    return _SHARED[0]


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
