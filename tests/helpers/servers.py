"""Real servers for the tests: uvicorn in a thread on a free loopback port, gunicorn in
a subprocess; and requests sent to them in a known arrival order."""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import uvicorn


def wait_until_up(port, deadline=60.0):  # generous: a busy machine
    end = time.monotonic() + deadline
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.02)


@contextlib.contextmanager
def uvicorn_running(app: Any, **options: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread on a free 127.0.0.1 port; yields its base URL.

    ``options`` go to ``uvicorn.Config`` (log level warning, no lifespan).
    """
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says
    # TCP, and without it each response waited out a 40 ms delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        end = time.monotonic() + 60  # generous: a busy machine
        while not server.started:
            assert thread.is_alive() and time.monotonic() < end, "uvicorn did not start"
            time.sleep(0.01)  # waits for start-up; rate-limit time is the tests' ManualClock's
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
    assert not thread.is_alive(), "uvicorn did not stop"


@contextlib.contextmanager
def gunicorn_running(
    source: str,
    folder: Path,
    *,
    workers: int = 1,
    env: Optional[Dict[str, str]] = None,
    health: str = "/health",
) -> Iterator[str]:
    """The WSGI ``app`` of ``source`` (written to ``folder``/limited_app.py) served by
    gunicorn with ``workers`` workers (``gunicorn_process``); yields its base URL."""
    (folder / "limited_app.py").write_text(source)
    options = ("--workers", str(workers))
    with gunicorn_process(folder, "limited_app:app", *options, env=env, health=health) as (url, _):
        yield url


@contextlib.contextmanager
def waitress_running(app: Any, **options: Any) -> Iterator[str]:
    """``app`` (WSGI) served by waitress in a thread on a free 127.0.0.1 port; yields its URL.

    ``options`` go to ``waitress.create_server`` (2 threads unless given).
    """
    import waitress

    server = waitress.create_server(app, host="127.0.0.1", port=0, **{"threads": 2, **options})
    closing = threading.Event()

    def run() -> None:
        try:
            server.run()
        except OSError as exc:  # close() from this thread may pull the socket from under select()
            if not (closing.is_set() and exc.errno == errno.EBADF):
                raise

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until_up(server.effective_port)
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        closing.set()
        server.close()
        thread.join(10)
    assert not thread.is_alive(), "waitress did not stop"


@contextlib.contextmanager
def gunicorn_process(
    folder: Any,
    app: str,
    *options: str,
    env: Optional[Dict[str, str]] = None,
    health: str = "/health",
) -> Iterator[Any]:
    """gunicorn serving ``app`` (``"module:app"``, the module in ``folder``) on a free
    127.0.0.1 port; yields ``(base URL, process)``. ``options``: more command-line options;
    ``env``: added to the server's environment.

    Up once ``health`` answers 200; stopped with SIGINT (quick: no graceful wait).
    """

    import httpx

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--bind", f"fd://{sock.fileno()}",
         "--log-level", "warning", *options, app],
        pass_fds=[sock.fileno()],
        env={**os.environ, **(env or {}), "PYTHONPATH": path},
        start_new_session=True,  # its own process group: the workers go with the master
    )  # fmt: skip
    sock.close()
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 60  # generous: a busy machine
        while True:
            try:
                if httpx.get(url + health, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, "gunicorn exited"
            assert time.monotonic() < end, "gunicorn did not start"
            time.sleep(0.05)  # waits for start-up only
        yield url, process
    finally:
        process.send_signal(signal.SIGINT)  # quick shutdown; SIGTERM waits for workers
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        # A master killed after the wait left its worker running for ever (seen in CI,
        # a worker blocked in a view): the whole group goes, whatever is left of it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def in_arrival_order(
    count: int,
    send: Callable[[int], Any],
    arrived: Callable[[int], None],
    release: Callable[[], Any] = lambda: None,
    timeout: float = 60.0,
) -> List[Any]:
    """Requests ``0 .. count - 1``, each ``send(number)`` in its own thread, in that order.

    The next is sent only once ``arrived(number)`` has returned: it blocks
    until the server has request ``number`` in hand (in the view, or queued
    for its turn), so the server sees them arrive in order.  Then
    ``release()`` (say, lets a slow view finish); returns what each
    ``send`` returned, by number (an exception in one is raised here).
    """
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        futures = []
        try:
            for number in range(count):
                futures.append(pool.submit(send, number))
                arrived(number)
        finally:
            release()
        return [future.result(timeout) for future in futures]
