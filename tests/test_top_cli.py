"""The demo's ``/top`` endpoint and ``python -m limiter top --url`` (issue 13 item 6)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from http.server import ThreadingHTTPServer
from typing import Any, Iterator, Tuple

import pytest

from limiter import RateLimiter
from limiter.__main__ import demo_handler, main
from limiter.clock import ManualClock
from limiter.metrics.top import TopOffenders

T0 = 1_700_000_000.0


@pytest.fixture
def demo() -> Iterator[Tuple[str, Any]]:
    clock = ManualClock(T0)
    top = TopOffenders(capacity=10, window=300.0, clock=clock)
    limiter = RateLimiter("2/minute", clock=clock, name="demo", on_decision=top)
    server = ThreadingHTTPServer(("127.0.0.1", 0), demo_handler(limiter, top=top))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def get(base: str, path: str, peer_header: str = "") -> Tuple[int, bytes]:
    host, port = base.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_top_reports_the_denied_keys_and_is_not_limited(demo: Any, capsys: Any) -> None:
    base, _ = demo
    assert [get(base, "/api/")[0] for _ in range(5)] == [200, 200, 429, 429, 429]
    for _ in range(4):  # /top itself is exempt
        status, body = get(base, "/top?n=5")
        assert status == 200
    assert json.loads(body) == {
        "window_seconds": 300.0,
        "total": 3,
        "capacity": 10,
        "offenders": [{"key": "ip:127.0.0.1", "count": 3, "error": 0}],
    }
    assert get(base, "/top?n=0")[0] == 400
    assert main(["top", "--url", base + "/top"]) == 0
    out = capsys.readouterr().out
    assert out == f"3 denials in the last 5 min ({base}/top)\nip:127.0.0.1  3\n"
    assert main(["top", "--url", base + "/top", "--json", "-n", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["offenders"][0]["count"] == 3


def test_top_usage_errors_exit_2_and_an_unreachable_app_exits_1(capsys: Any) -> None:
    with pytest.raises(SystemExit) as info:
        main(["top", "--url", "ftp://127.0.0.1/top"])
    assert info.value.code == 2
    assert "--url must be an http:// or https:// URL, got 'ftp://127.0.0.1/top'" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as info:
        main(["top", "--url", "http://127.0.0.1/top", "-n", "0"])
    assert info.value.code == 2
    assert "-n must be from 1 to 1000, got 0" in capsys.readouterr().err
    with socket.socket() as closed:  # a loopback port that nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://user:secret@127.0.0.1:{port}/top"
    assert main(["top", "--url", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"limiter top: cannot read http://user:***@127.0.0.1:{port}/top: ")
    assert "secret" not in err
