"""Throwaway PostgreSQL servers for the tests: initdb and pg_ctl in a temporary directory.

Every server listens on 127.0.0.1 only, on a free port, with its socket in
its own directory, and is removed at teardown: no test uses a PostgreSQL
that happens to run on this machine (5432 or any other).  It is built for
speed, not safety (fsync off, small buffers).  Without the binaries the
tests that need one skip with a reason that says how to enable them, except
under ``CI=true`` where they fail (``.ci/run`` installs PostgreSQL).

PostgreSQL refuses to run as root: as root, the binaries run as the
``postgres`` system user (``runuser``), which owns the directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, List, Optional

import pytest

from helpers.needs import need

pytest.importorskip(
    "psycopg", reason="psycopg is not installed: pip install 'tokenlimiter[postgres]'"
)
pytest.importorskip(
    "psycopg_pool", reason="psycopg_pool is not installed: pip install 'tokenlimiter[postgres]'"
)

import psycopg

from limiter.backends.postgres import row_key
from limiter.core.state import State, keep_until, to_row

#: Where Debian puts a version's binaries (not on PATH there); PATH is searched first.
_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)

#: The role the stores under test log in as, with a password (scram-sha-256 over TCP).
APP_USER = "app"
APP_PASSWORD = "s3cret-Pa55"


def _binary(name: str) -> Optional[str]:
    found = shutil.which(name)
    if found:
        return found
    for directory in _BIN_DIRS:
        if (directory / name).exists():
            return str(directory / name)
    return None


INITDB = _binary("initdb")
PG_CTL = _binary("pg_ctl")


def require_postgres() -> None:
    """Skip (fail under ``CI=true``) without initdb and pg_ctl, or as root without user postgres."""
    missing = [name for name, path in (("initdb", INITDB), ("pg_ctl", PG_CTL)) if path is None]
    if missing:
        need(
            f"{' and '.join(missing)} not found (PATH, /usr/lib/postgresql/*/bin): the PostgreSQL "
            "tests start their own throwaway server on a free loopback port; to run them, "
            "install PostgreSQL >= 12 (e.g. `apt-get install postgresql`)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            need(
                "running as root, and PostgreSQL refuses root: the tests run it as the "
                "`postgres` system user, which does not exist (`apt-get install postgresql` "
                "creates it)"
            )


def free_port() -> int:
    """A free loopback port (another process may take it before the server binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _as_owner(args: List[str]) -> List[str]:
    """``args`` run as the postgres system user when we are root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory; ``start`` and ``stop`` may repeat."""

    def __init__(self) -> None:
        require_postgres()
        self.dir = tempfile.mkdtemp(prefix="limiter-postgres-")
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        if os.geteuid() == 0:
            os.chmod(self.dir, 0o755)
            shutil.chown(self.dir, "postgres", "postgres")
        assert INITDB is not None
        self._run(
            [
                INITDB,
                "-D",
                self.data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ]
        )
        with open(os.path.join(self.data, "pg_hba.conf"), "w") as f:
            f.write(
                "local all all trust\n"
                "host all postgres 127.0.0.1/32 trust\n"
                "host all all 127.0.0.1/32 scram-sha-256\n"
            )
        self.started = False

    def _run(self, args: List[str]) -> None:
        done = subprocess.run(_as_owner(args), capture_output=True, text=True, cwd=self.dir)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    def _options(self) -> str:
        return " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.dir}",
                "-c fsync=off",
                "-c full_page_writes=off",
                "-c shared_buffers=16MB",
                "-c max_connections=100",
                "-c shared_preload_libraries=pg_stat_statements",
                "-c pg_stat_statements.track=all",
            ]
        )

    def start(self, timeout: float = 60.0) -> PostgresServer:
        """Start the server and wait until it answers; the first start also creates the app role."""
        assert PG_CTL is not None
        log = os.path.join(self.dir, "server.log")
        for attempt in range(5):
            try:
                self._run(
                    [
                        PG_CTL,
                        "-D",
                        self.data,
                        "-l",
                        log,
                        "-w",
                        "-t",
                        str(int(timeout)),
                        "-o",
                        self._options(),
                        "start",
                    ]
                )
                break
            except RuntimeError:
                # The port may have been taken meanwhile (other runs share the machine).
                if self.started or attempt == 4:
                    raise RuntimeError(f"PostgreSQL did not start:\n{self.log()}") from None
                self.port = free_port()
        if not self.started:
            with self.admin() as conn:
                conn.execute(f"CREATE ROLE {APP_USER} LOGIN PASSWORD '{APP_PASSWORD}'")
                conn.execute(f"CREATE DATABASE limiter OWNER {APP_USER}")
            with self.admin("limiter") as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.started = True
        return self

    def log(self) -> str:
        try:
            return Path(self.dir, "server.log").read_text()[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop at once (immediate: a crash, not a shutdown)."""
        assert PG_CTL is not None
        subprocess.run(
            _as_owner([PG_CTL, "-D", self.data, "-m", "immediate", "-w", "stop"]),
            capture_output=True,
            cwd=self.dir,
        )

    def url(
        self, user: str = APP_USER, password: Optional[str] = APP_PASSWORD, dbname: str = "limiter"
    ) -> str:
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def admin(self, dbname: str = "postgres") -> Any:
        """A superuser connection (autocommit), for setting up and inspecting."""
        return psycopg.connect(
            self.url("postgres", None, dbname), autocommit=True, connect_timeout=10
        )

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def postgres_server() -> Iterator[PostgresServer]:
    """Generator for a module-scoped fixture: a running server, removed afterwards."""
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.remove()


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)


def check_row(store: Any, key: str, state: Optional[State]) -> None:
    """The row of ``key`` is ``to_row(state)`` and ``keep_until(state)`` bit for bit, or absent.

    ``store`` is a ``PostgresStore`` (its pool, table and prefix are used).
    """
    with store.pool.connection() as conn:
        row = conn.execute(  # binary: exact whatever the session's extra_float_digits
            f"SELECT a, b, c, keep_until FROM {store.names.table} WHERE key = %s",
            (row_key(key, store.prefix),),
            binary=True,
        ).fetchone()
    if state is None:
        assert row is None
        return
    assert row is not None
    assert tuple(row[:3]) == to_row(state)
    assert row[3] == keep_until(state)
