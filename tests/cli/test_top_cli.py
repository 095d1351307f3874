"""The demo's ``/top`` endpoint and ``python -m limiter top --url`` (issue 13 item 6)."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple

import pytest

from limiter import RateLimiter
from limiter.cli import main
from limiter.cli._demo import demo_handler
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
    # str.isdigit() is true of a superscript two (the request line's byte 0xB2, read as
    # Latin-1), which int() refuses: a 400, not a handler that dies without an answer.
    host, port = base.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.sendall(b"GET /top?n=\xb2 HTTP/1.0\r\n\r\n")
        assert raw.makefile("rb").readline().split()[1:2] == [b"400"]
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


# -- credentials and redirects (issue 22 item 3) ----------------------------------

TOP_JSON = b'{"window_seconds": 300.0, "total": 0, "capacity": 10, "offenders": []}'


class _Recorder(BaseHTTPRequestHandler):
    """Answers ``/top`` JSON, or a 302 to ``server.redirect_to``; records Authorization."""

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Authorization")))  # type: ignore[attr-defined]
        target = self.server.redirect_to  # type: ignore[attr-defined]
        if target is not None:
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(TOP_JSON)))
        self.end_headers()
        self.wfile.write(TOP_JSON)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def recording_server(
    redirect_to: Optional[str] = None, tls: Optional[ssl.SSLContext] = None
) -> Iterator[Tuple[int, List[Tuple[str, Optional[str]]]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.daemon_threads = True
    server.seen = []  # type: ignore[attr-defined]
    server.redirect_to = redirect_to  # type: ignore[attr-defined]
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield server.server_address[1], server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


BASIC = "Basic " + base64.b64encode(b"user:s3cret").decode()


def test_top_sends_credentials_to_their_origin_only(capsys: Any) -> None:
    with recording_server() as (other, other_seen):
        target = f"http://127.0.0.1:{other}/elsewhere"
        with recording_server(redirect_to=target) as (port, seen):
            url = f"http://user:s3cret@127.0.0.1:{port}/top"
            assert main(["top", "--url", url]) == 0
    assert seen == [("/top?n=10", BASIC)]
    assert other_seen == [("/elsewhere", None)]  # another port: another origin
    out = capsys.readouterr().out
    assert (
        out
        == f"0 denials in the last 5 min (http://user:***@127.0.0.1:{port}/top)\nno key denied\n"
    )
    assert "s3cret" not in out


def test_top_keeps_credentials_on_a_same_origin_redirect(capsys: Any) -> None:
    # One server that redirects /top to /moved on itself: a second handler path.
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.daemon_threads = True
    server.seen = []  # type: ignore[attr-defined]
    port = server.server_address[1]
    server.redirect_to = None  # type: ignore[attr-defined]

    class SelfRedirect(_Recorder):
        def do_GET(self) -> None:
            self.server.redirect_to = (  # type: ignore[attr-defined]
                f"http://127.0.0.1:{port}/moved" if self.path.startswith("/top") else None
            )
            super().do_GET()

    server.RequestHandlerClass = SelfRedirect
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        assert main(["top", "--url", f"http://user:s3cret@127.0.0.1:{port}/top"]) == 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert server.seen == [("/top?n=10", BASIC), ("/moved", BASIC)]  # type: ignore[attr-defined]
    capsys.readouterr()


@pytest.fixture
def self_signed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A server context with a self-signed cert for 127.0.0.1, trusted by the CLI's urllib."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the default context trusts it
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    return context


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_top_drops_credentials_from_https_to_http(self_signed: ssl.SSLContext, capsys: Any) -> None:
    with recording_server() as (plain, plain_seen):
        target = f"http://127.0.0.1:{plain}/top"
        with recording_server(redirect_to=target, tls=self_signed) as (port, seen):
            url = f"https://user:s3cret@127.0.0.1:{port}/top"
            assert main(["top", "--url", url]) == 0, capsys.readouterr().err
    assert seen == [("/top?n=10", BASIC)]
    assert plain_seen == [("/top", None)]
    assert capsys.readouterr().out.endswith("no key denied\n")


# -- keys clients chose are escaped (issue 22 item 15) -----------------------------


def test_top_escapes_control_characters_in_keys(capsys: Any) -> None:
    clock = ManualClock(T0)
    top = TopOffenders(capacity=10, window=300.0, clock=clock)
    keys = ["\x1b]0;pwn\x07", "\x1b[2J", "del\x7f c1\x9b", "bidi\u202eevil\u2066"]
    for times, key in enumerate(keys, start=1):
        for _ in range(times):
            top.add(key)
    limiter = RateLimiter("2/minute", clock=clock, name="demo", on_decision=top)
    server = ThreadingHTTPServer(("127.0.0.1", 0), demo_handler(limiter, top=top))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/top"
        assert main(["top", "--url", url]) == 0
        out = capsys.readouterr().out
        assert main(["top", "--url", url, "--json"]) == 0
        raw = capsys.readouterr().out
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert out.splitlines() == [
        f"10 denials in the last 5 min ({url})",
        "bidi\\u202eevil\\u2066  4",
        "del\\x7f c1\\x9b        3",
        "\\x1b[2J               2",
        "\\x1b]0;pwn\\x07        1",
    ]
    assert "\x1b" not in raw and "\x07" not in raw and "\u202e" not in raw  # JSON escapes
    assert json.loads(raw)["offenders"][-1]["key"] == "\x1b]0;pwn\x07"
