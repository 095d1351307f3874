"""A store that cannot work is loud: SQLite fails at construction, Redis clients are checked.

* ``SQLiteStore`` opens and writes its file once at construction, and raises an
  ``OSError`` naming the path when it never could work (missing directory, no
  permission, read-only, not a database): not a ``StoreError``, which the
  adapters' ``on_error="allow"`` would turn into no limit at all.
* ``RedisStore``/``AsyncRedisStore`` log one WARNING at construction when their
  client lets a check wait much longer than its timeouts (no socket timeout,
  retries with backoff...), and none for the client docs/stores.md shows.
  Reading the configuration needs no server.
* Outages are logged on ``limiter.stores``: the first failure at ERROR with its
  cause, the recovery at WARNING.
* Skewed clocks on a shared store multiply admissions (docs/stores.md).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, List

import pytest

from limiter import Limit, ManualClock, MemoryStore, RateLimiter, StoreError
from limiter.backends import _failover as _fallback
from limiter.backends.sqlite import SQLiteStore
from limiter.testing import T0

ROOT = Path(__file__).resolve().parents[2]
LOGGER = "limiter.stores"


def records(caplog: pytest.LogCaptureFixture, level: int) -> List[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == level]


# -- SQLite: a store that cannot work raises at construction --------------------


def test_missing_directory_raises_file_not_found_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "dir" / "limits.db"
    with pytest.raises(FileNotFoundError) as info:
        SQLiteStore(path)
    assert not isinstance(info.value, StoreError)
    assert info.value.filename == str(path)
    assert "does not exist" in str(info.value) and str(path) in str(info.value)
    assert not (tmp_path / "no").exists()  # nothing created on the way


def test_directory_paths_raise(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match="is a directory"):
        SQLiteStore(tmp_path)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        SQLiteStore(a_file / "limits.db")


def test_a_file_that_is_not_a_database_raises_and_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    text = "not a database, " * 200
    path.write_text(text)
    with pytest.raises(OSError) as info:
        SQLiteStore(path)
    message = str(info.value)
    assert type(info.value) is OSError  # no subclass: nothing to do with errno
    assert str(path) in message and "not a usable SQLite database" in message
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
    assert path.read_text() == text


def test_an_empty_file_or_a_fresh_path_is_a_new_database(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()
    for name in ("empty.db", "new.db"):
        store = SQLiteStore(tmp_path / name)
        assert store.apply("k", Limit(1, 2), 1, T0).remaining == 1
        assert len(store) == 1  # the construction check left no row behind
        store.close()
    assert SQLiteStore(":memory:").apply("k", Limit(1, 1), 1, T0).allowed


def test_construction_leaves_no_connection_open(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "x.db")
    assert store._conn is None  # a store made before a fork carries nothing into the children
    assert store.apply("k", Limit(1, 1), 1, T0).allowed


def test_a_busy_database_is_not_a_misconfiguration(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    SQLiteStore(path).close()
    other = sqlite3.connect(str(path), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process in the middle of a check
    try:
        store = SQLiteStore(path, timeout=0.05)  # waits 0.05 s for the lock, then passes
        with pytest.raises(StoreError, match="locked"):
            store.apply("k", Limit(1, 1), 1, T0)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.apply("k", Limit(1, 1), 1, T0).allowed
    store.close()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory that an unprivileged user can reach (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="limiter-perm-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for root, dirs, _ in os.walk(path):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        shutil.rmtree(path, ignore_errors=True)


def unprivileged(attempt: Callable[[], str]) -> str:
    """``attempt()`` with file permissions enforced.

    As root (CI runs as root, and root ignores permissions), in a forked child
    that drops to ``nobody``; the child reports through a pipe and exits.
    """
    if os.geteuid() != 0:
        return attempt()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        out = "skip"
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            out = attempt()
        except BaseException as exc:
            out = f"{out}: cannot run as nobody: {exc!r}" if out == "skip" else f"crashed: {exc!r}"
        finally:
            try:
                os.write(write, out.encode())
            finally:
                os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        out = pipe.read().decode()
    os.waitpid(pid, 0)
    if out.startswith("skip"):
        pytest.skip(out)
    return out


def construct(path: Path) -> Callable[[], str]:
    def attempt() -> str:
        try:
            SQLiteStore(path).close()
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return "ok"

    return attempt


def make_db(path: Path) -> None:
    SQLiteStore(path).close()
    path.chmod(0o666)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.parametrize(
    "case, reason",
    [
        ("unreadable file", "no read and write permission"),
        ("read-only file", "read-only"),
        ("read-only file in WAL mode", "read-only"),  # opens, and even begins a write
        ("new file in a read-only directory", "no write permission on"),
        ("database in a read-only directory", "read-only"),  # no room for -wal and -shm
    ],
)
def test_permissions_raise_permission_error_naming_the_path(
    shared_dir: Path, case: str, reason: str
) -> None:
    shared_dir.chmod(0o777)
    path = shared_dir / "limits.db"
    if case == "unreadable file":
        make_db(path)
        path.chmod(0)
    elif case.startswith("read-only file"):
        make_db(path)
        if case.endswith("WAL mode"):
            assert sqlite3.connect(str(path)).execute("PRAGMA journal_mode").fetchone() == ("wal",)
        path.chmod(0o444)
    elif case == "new file in a read-only directory":
        shared_dir.chmod(0o555)
    else:
        make_db(path)
        shared_dir.chmod(0o555)
    outcome = unprivileged(construct(path))
    assert outcome.startswith("PermissionError: [Errno 13] SQLiteStore"), outcome
    assert reason in outcome and str(path) in outcome


def test_runtime_failures_are_store_errors_logged_once_at_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "db"
    directory.mkdir()
    store = SQLiteStore(directory / "limits.db")
    shutil.rmtree(directory)  # the disk went away after start-up
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            with pytest.raises(StoreError):
                store.apply("k", Limit(1, 1), 1, T0)
        with pytest.raises(StoreError):
            store.reset("k")
        [error] = records(caplog, logging.ERROR)
        assert "SQLiteStore is failing: OperationalError: unable to open database file" in (
            error.getMessage()
        )
        assert error.exc_info is not None  # the traceback, with the cause
        directory.mkdir()
        assert store.apply("k", Limit(1, 1), 1, T0).allowed
        [recovered] = records(caplog, logging.WARNING)
        assert recovered.getMessage() == "SQLiteStore answers again"
    store.close()


def test_sqlite_argument_types_and_values(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    for kwargs, error, message in [
        ({"timeout": "5"}, TypeError, "timeout must be a number of seconds, got '5'"),
        ({"timeout": True}, TypeError, "timeout must be a number of seconds, got True"),
        ({"timeout": -1}, ValueError, "timeout must be a finite number of seconds >= 0 and <="),
        # Beyond threading.TIMEOUT_MAX every call raised OverflowError from the lock's wait.
        (
            {"timeout": 1e10},
            ValueError,
            "<= threading.TIMEOUT_MAX (9.22337e+09), got 10000000000.0",
        ),
        ({"timeout": float("inf")}, ValueError, "got inf"),
        ({"timeout": float("nan")}, ValueError, "got nan"),
        ({"purge_every": 1.5}, TypeError, "purge_every must be an int, got 1.5"),
        ({"purge_every": 0}, ValueError, "purge_every must be an int >= 1, got 0"),
        ({"fallback": MemoryStore(), "probe_after": "1"}, TypeError, "probe_after must be"),
        ({"fallback": MemoryStore(), "probe_after": 0}, ValueError, "probe_after must be"),
    ]:
        with pytest.raises(error, match=re.escape(message)):
            SQLiteStore(path, **kwargs)
    for bad in (123, b"x.db", None):
        with pytest.raises(TypeError, match=r"path must be a str or an os\.PathLike"):
            SQLiteStore(bad)  # type: ignore[arg-type]


# -- Clocks: skew on a shared store -----------------------------------------------


@pytest.mark.parametrize(
    "skew, admitted", [(0.0, 10), (0.125, 11), (0.25, 11), (1.0, 11), (1.5, 400), (3.0, 400)]
)
def test_skewed_clocks_on_a_shared_store(tmp_path: Path, skew: float, admitted: int) -> None:
    """What docs/stores.md warns about: 10/second, frozen clocks, two hosts alternating.

    Within CLOCK_TOLERANCE the host behind is applied at the last update: the
    skew is gained once (one whole token here). Beyond it the bucket is
    re-anchored at every switch and the host ahead refills rate * skew tokens
    each time: nothing is limited.
    """
    store = SQLiteStore(tmp_path / "skew.db")
    host_a = RateLimiter("10/second", store=store, clock=ManualClock(T0))
    host_b = RateLimiter("10/second", store=store, clock=ManualClock(T0 + skew))
    assert sum(host.allow("alice") for _ in range(200) for host in (host_a, host_b)) == admitted
    store.close()


# -- Redis: the client's configuration is checked at construction ----------------

pytest.importorskip("redis")
import redis  # noqa: E402
import redis.asyncio  # noqa: E402
import redis.asyncio.cluster  # noqa: E402
import redis.sentinel  # noqa: E402
from redis.asyncio.retry import Retry as AsyncRetry  # noqa: E402
from redis.backoff import ExponentialBackoff, NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402

from helpers.redis_servers import free_port  # noqa: E402
from limiter.backends.redis import AsyncRedisStore, RedisStore  # noqa: E402

FAST: Any = {"socket_timeout": 0.1, "socket_connect_timeout": 0.1}
PORT = 1  # constructing a client or a store connects to nothing


def documented() -> Any:
    """The first client of docs/stores.md (see test_every_documented_client_fails_fast)."""
    url = f"redis://127.0.0.1:{PORT}/0"
    return redis.Redis.from_url(url, **FAST, retry=Retry(NoBackoff(), 0))


def warnings_for(caplog: pytest.LogCaptureFixture, make: Callable[[], Any]) -> List[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        make()
    return [r.getMessage() for r in records(caplog, logging.WARNING)]


@pytest.mark.parametrize(
    "client, expected",
    [
        # redis-py >= 6's default: 3 (8.x: 10) retries with exponential backoff.
        (lambda: redis.Redis(port=PORT), "the client retries [0-9]+ times with backoff"),
        (
            lambda: redis.Redis(port=PORT, **FAST, retry=Retry(ExponentialBackoff(), 2)),
            "the client retries 2 times with backoff",
        ),
        (
            lambda: redis.Redis(port=PORT, socket_timeout=None, retry=Retry(NoBackoff(), 0)),
            "the client has no socket_timeout",
        ),
        (
            lambda: redis.Redis(
                port=PORT,
                socket_timeout=None,
                socket_connect_timeout=None,
                retry=Retry(NoBackoff(), 0),
            ),
            "the client has no socket_connect_timeout",
        ),
        (
            lambda: redis.Redis(port=PORT, **FAST, retry=Retry(NoBackoff(), 5)),
            r"the client retries 5 times \(each retry waits for the timeouts again\)",
        ),
        (
            lambda: redis.Redis(port=PORT, **FAST, retry=Retry(NoBackoff(), -1)),
            "the client retries for ever",
        ),
        (
            lambda: redis.Redis(
                connection_pool=redis.BlockingConnectionPool(
                    port=PORT, timeout=None, **FAST, retry=Retry(NoBackoff(), 0)
                )
            ),
            "the client's BlockingConnectionPool waits for ever for a free connection",
        ),
        (
            # Explicit: redis-py's default for the Sentinel connections retried with
            # backoff up to 8.1, and does not retry from 8.2 on.
            lambda: redis.sentinel.Sentinel(
                [("127.0.0.1", PORT)],
                sentinel_kwargs={**FAST, "retry": Retry(ExponentialBackoff(), 3)},
            ).master_for("primary", **FAST, retry=Retry(NoBackoff(), 0)),
            r"each Sentinel client \(sentinel_kwargs\) retries 3 times with backoff",
        ),
    ],
)
def test_a_slow_client_is_reported_once_at_construction(
    caplog: pytest.LogCaptureFixture, client: Callable[[], Any], expected: str
) -> None:
    made = client()
    [message] = warnings_for(caplog, lambda: RedisStore(made))
    assert message.startswith("RedisStore: a check may wait much longer than the client's ")
    assert re.search(expected, message), message
    assert "socket_timeout" in message and "retry=Retry(NoBackoff(), 0)" in message
    assert "docs/stores.md" in message


def test_several_problems_make_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    client = redis.Redis(port=PORT, socket_timeout=None, socket_connect_timeout=None)
    [message] = warnings_for(caplog, lambda: RedisStore(client))
    assert "no socket_timeout" in message and "with backoff" in message


@pytest.mark.parametrize(
    "client",
    [
        documented,
        lambda: redis.Redis(port=PORT, **FAST, retry=None),  # no retry object: no retries
        lambda: redis.Redis(port=PORT, **FAST, retry=Retry(NoBackoff(), 1)),  # one quick retry
        lambda: redis.Redis(port=PORT, socket_timeout=0.1, retry=Retry(NoBackoff(), 0)),
        lambda: redis.sentinel.Sentinel(
            [("127.0.0.1", PORT)], sentinel_kwargs={**FAST, "retry": Retry(NoBackoff(), 0)}
        ).master_for("primary", **FAST, retry=Retry(NoBackoff(), 0)),
    ],
)
def test_a_fast_client_is_not_reported(
    caplog: pytest.LogCaptureFixture, client: Callable[[], Any]
) -> None:
    made = client()
    assert warnings_for(caplog, lambda: RedisStore(made)) == []


@pytest.mark.usefixtures("current_loop")
def test_async_clients_are_checked_too(caplog: pytest.LogCaptureFixture) -> None:
    bad = redis.asyncio.Redis(port=PORT)
    [message] = warnings_for(caplog, lambda: AsyncRedisStore(bad))
    assert message.startswith("AsyncRedisStore: ") and "with backoff" in message
    # The asyncio example of docs/stores.md: a bounded pool that waits at most 1 s.
    pool = redis.asyncio.BlockingConnectionPool(
        port=PORT, max_connections=50, timeout=1, **FAST, retry=AsyncRetry(NoBackoff(), 0)
    )
    good = redis.asyncio.Redis(connection_pool=pool)
    assert warnings_for(caplog, lambda: AsyncRedisStore(good)) == []


@pytest.mark.usefixtures("current_loop")
def test_cluster_clients_are_checked_without_connecting(caplog: pytest.LogCaptureFixture) -> None:
    # The asyncio cluster client connects at its first command only, so this
    # needs no cluster; the sync one is checked the same way (its nodes' pools).
    cluster = redis.asyncio.cluster.RedisCluster
    [message] = warnings_for(
        caplog, lambda: AsyncRedisStore(cluster(host="127.0.0.1", port=PORT, **FAST))
    )
    assert re.search("the cluster client retries [0-9]+ times with backoff", message)
    [message] = warnings_for(
        caplog,
        lambda: AsyncRedisStore(
            cluster(
                host="127.0.0.1", port=PORT, socket_timeout=None, retry=AsyncRetry(NoBackoff(), 0)
            )
        ),
    )
    assert "the cluster client has no socket_timeout" in message
    good = cluster(host="127.0.0.1", port=PORT, **FAST, retry=AsyncRetry(NoBackoff(), 0))
    assert warnings_for(caplog, lambda: AsyncRedisStore(good)) == []


def test_valkey_clients_are_checked_too(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("valkey")
    import valkey
    import valkey.backoff
    import valkey.retry

    [message] = warnings_for(caplog, lambda: RedisStore(valkey.Valkey(port=PORT)))
    assert "no socket_timeout" in message and "no socket_connect_timeout" in message
    good = valkey.Valkey(port=PORT, **FAST, retry=valkey.retry.Retry(valkey.backoff.NoBackoff(), 0))
    assert warnings_for(caplog, lambda: RedisStore(good)) == []


def test_a_client_that_cannot_be_read_is_not_a_problem(caplog: pytest.LogCaptureFixture) -> None:
    class Minimal:  # anything with evalsha: no pool to read
        def evalsha(self, *args: Any) -> Any:
            raise NotImplementedError

    class Hostile(Minimal):
        @property
        def connection_pool(self) -> Any:
            raise RuntimeError("no")

    for client in (Minimal(), Hostile()):
        assert warnings_for(caplog, lambda c=client: RedisStore(c)) == []  # type: ignore[misc]


def test_the_warning_is_given_once_not_per_check(caplog: pytest.LogCaptureFixture) -> None:
    client = redis.Redis(
        host="127.0.0.1",
        port=free_port(),  # nothing listens: refused at once
        socket_timeout=None,
        socket_connect_timeout=None,
        retry=Retry(NoBackoff(), 0),
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        store = RedisStore(client, fallback=MemoryStore())
        for _ in range(3):
            store.apply("k", Limit(1, 1), 0, T0)  # the fallback answers
    assert len(records(caplog, logging.WARNING)) == 1
    assert len(records(caplog, logging.ERROR)) == 1  # the outage, once


def test_redis_argument_types() -> None:
    with pytest.raises(TypeError, match="client must be a redis-py or valkey-py client"):
        RedisStore(object())
    with pytest.raises(TypeError, match="prefix must be a str, got 1"):
        RedisStore(documented(), prefix=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="probe_after must be a number of seconds, got '1'"):
        RedisStore(documented(), fallback=MemoryStore(), probe_after="1")  # type: ignore[arg-type]


# -- Outage logging ---------------------------------------------------------------


def test_outages_are_logged_once_each_and_at_most_once_a_minute(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    failover = _fallback.Failover("TestStore", None)

    def fail() -> None:
        try:
            raise StoreError("TestStore: down") from ConnectionError("refused")
        except StoreError as exc:
            failover.failed(exc)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        fail()
        fail()
        [error] = records(caplog, logging.ERROR)
        assert error.getMessage() == "TestStore is failing: ConnectionError: refused"
        failover.succeeded()
        failover.succeeded()
        assert [r.getMessage() for r in records(caplog, logging.WARNING)] == [
            "TestStore answers again"
        ]
        fail()  # flapping within a minute: not logged again, nor its recovery
        failover.succeeded()
        assert len(records(caplog, logging.ERROR)) == 1
        assert len(records(caplog, logging.WARNING)) == 1
        monkeypatch.setattr(_fallback, "ERROR_LOG_INTERVAL", 0.0)
        fail()  # the first failure after a recovery, a minute later
        failover.succeeded()
        assert len(records(caplog, logging.ERROR)) == 2
        assert len(records(caplog, logging.WARNING)) == 2


# -- docs/stores.md: every client example fails fast ---------------------------------

CLIENT_CALL = re.compile(
    r"(redis\.Redis|valkey\.Valkey|RedisCluster|BlockingConnectionPool|Sentinel|master_for)"
    r"(\.from_url)?\("
)


def calls(text: str) -> Iterator[str]:
    """The argument text of each client-making call in ``text`` (balanced parentheses)."""
    for match in CLIENT_CALL.finditer(text):
        depth, start = 1, match.end()
        for end in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                yield text[start:end]
                break


def test_every_documented_client_fails_fast() -> None:
    """docs/stores.md's clients (python and text blocks) set both timeouts and no retries."""
    text = (ROOT / "docs" / "stores.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```(?:python|text)\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    found = [args for block in blocks for args in calls(block)]
    assert len(found) >= 7
    for args in found:
        if "connection_pool=" in args:  # a client around a pool: the pool is checked
            continue
        if args.startswith("[") and "sentinel_kwargs=" in args:  # Sentinel(...)
            continue  # its kwargs are a dict checked below
        settings = args if "**" not in args else args + text[text.index("fast = {") :][:200]
        for name in ("socket_timeout", "socket_connect_timeout", "NoBackoff(), 0)"):
            assert name in settings, f"{name} missing in a client of docs/stores.md: {args}"
    assert "retry=Retry(NoBackoff(), 0)" in text
