"""Suite-wide settings: nothing here may depend on how fast this machine is today.

* Hypothesis: no per-example deadline and no "too slow" health check by default
  (the defaults fail a test when one example takes over 200 ms, which a busy
  machine does now and then).  A test's own ``@settings`` still wins for the
  fields it sets.
* The report header says whether the Redis tests will run (they start their own
  throwaway ``redis-server``; see ``helpers/redis_servers.py``).
* ``LIMITER_STORAGE_URL`` from the developer's shell is dropped: no test (nor a
  process a test starts, such as the demo) may use a real store by accident.
  Tests of the variable set it themselves (``monkeypatch.setenv``).

Shared Redis scaffolding (``helpers.redis_servers`` is imported inside the fixtures, so
a run without redis-py never loads it):

* ``server``: one throwaway redis-server per test module.  A module whose tests
  stop or kill their server asks for ``own_server`` instead (a fresh one per test).
* ``unique_prefix()``: a plain function, not a fixture (``make_store`` and tests
  call it once per store): ``from helpers.redis_servers import unique_prefix``.
* ``class_event_loop``: one event loop per test class, current while it runs,
  plus ``cls.port = redis_port``.  ``redis_port`` is ``server.port`` unless the
  module overrides it (the cluster tests hand a node's port).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional

import httpx
import pytest

if TYPE_CHECKING:
    from helpers.redis_servers import RedisServer

# pytester: tests of the conformance suites run them as a user's pytest would.
pytest_plugins = ["pytester"]

os.environ.pop("LIMITER_STORAGE_URL", None)

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover - hypothesis is in the dev extra
    pass
else:
    settings.register_profile(
        "limiter", deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile("limiter")


def pytest_report_header(config: pytest.Config) -> List[str]:
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server and cli:
        return [f"redis: {server} (the Redis tests start their own servers on loopback)"]
    missing = " and ".join(
        name for name, path in (("redis-server", server), ("redis-cli", cli)) if path is None
    )
    if os.environ.get("CI", "").lower() == "true":
        return [f"redis: {missing} not found on PATH: the Redis tests fail (CI=true)"]
    return [
        f"redis: {missing} not found on PATH: the Redis tests are skipped "
        "(install Redis >= 6 to run them, e.g. `apt-get install redis-server`)"
    ]


@pytest.fixture
def current_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A fresh event loop, set as current for the test.

    On Python 3.9, asyncio clients built outside a running loop (redis.asyncio
    pools and locks) ask for the current loop, and there is none once any
    earlier test ran ``asyncio.run()``.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        asyncio.set_event_loop(None)
        loop.close()


# -- Redis scaffolding shared by test_redis_*.py ----------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """One throwaway redis-server for the whole module (skips without the binary)."""
    from helpers.redis_servers import redis_server

    yield from redis_server()


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of the test's own, which it may stop, kill and restart."""
    from helpers.redis_servers import RedisServer

    s = RedisServer()
    s.start()
    try:
        yield s
    finally:
        s.remove()


@pytest.fixture(scope="module")
def redis_port(server: RedisServer) -> int:
    """The port ``class_event_loop`` hands the test class; a module may override it."""
    return server.port


@pytest.fixture(scope="class")
def class_event_loop(request: pytest.FixtureRequest, redis_port: int) -> Iterator[None]:
    """One event loop per test class, current while it runs; also sets ``cls.port``.

    redis.asyncio clients are bound to the loop they first ran in, and on
    Python 3.9 asyncio locks bind to the current loop when created.
    """
    cls = request.cls
    cls.loop = asyncio.new_event_loop()
    asyncio.set_event_loop(cls.loop)
    cls.port = redis_port
    try:
        yield
    finally:
        asyncio.set_event_loop(None)
        cls.loop.close()


# -- the demo, started as README says -------------------------------------------------------

#: Seconds to wait for a demo process (generous: a busy machine).
DEMO_TIMEOUT = 60


class DemoProcess:
    """A demo process started by the test, and the four lines it printed at start-up."""

    def __init__(self, args: List[str], out: Path, env: Optional[Dict[str, str]] = None) -> None:
        environ = dict(os.environ)
        environ.pop("LIMITER_STORAGE_URL", None)
        environ.update(env or {})
        self.err_path = out.with_suffix(".err")
        with open(self.err_path, "wb") as err:  # a file: the request log never fills a pipe
            self.process = subprocess.Popen(
                [sys.executable, "-m", "limiter", "demo", "--port", "0", *args],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=environ,
            )
        assert self.process.stdout is not None
        self.lines = [self.process.stdout.readline() for _ in range(4)]
        if not self.lines[-1]:
            self.kill()
            pytest.fail(f"the demo did not start: {self.lines} {self.stderr()}")
        self.url = self.lines[0].split()[3]  # "limiter demo: serving http://127.0.0.1:PORT/ ..."
        assert self.url.startswith("http://127.0.0.1:"), self.lines[0]  # loopback only

    def stderr(self) -> str:
        return self.err_path.read_text()

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=DEMO_TIMEOUT)

    def stop(self) -> str:
        """Ctrl-C: the demo stops cleanly; returns what it printed after the start-up lines."""
        self.process.send_signal(signal.SIGINT)
        out, _ = self.process.communicate(timeout=DEMO_TIMEOUT)
        assert self.process.returncode == 0, self.stderr()
        return out

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(DEMO_TIMEOUT)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def start_demo(tmp_path: Path) -> Iterator:
    """``start_demo(*args, env=None)``: ``python -m limiter demo --port 0 *args``, killed after
    the test; ``env`` is added to the environment (``LIMITER_STORAGE_URL`` is removed first)."""
    demos: List[DemoProcess] = []

    def start(*args: str, env: Optional[Dict[str, str]] = None) -> DemoProcess:
        demo = DemoProcess(list(args), tmp_path / f"demo{len(demos)}", env)
        demos.append(demo)
        return demo

    yield start
    for demo in demos:
        demo.kill()
