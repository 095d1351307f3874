"""``python -m limiter demo``: a real process on a free loopback port.

Nothing here depends on how fast this machine is: the limits refill one token
every 12 s (the default ``5/minute``) or every hour, and where the refill
could matter the assertion is bounded by the measured elapsed time.
"""

from __future__ import annotations

import math
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from limiter.cli import main

BODY_429 = b'{"status":429,"code":"rate_limited","message":"too many requests"}'
LOOP = re.compile(
    r"watch the 429s: for i in \$\(seq (\d+)\); "
    r"do curl -s -o /dev/null -w '%\{http_code\} ' (http://\S+); done; echo\n"
)
TIMEOUT = 60  # seconds; generous: a busy machine


def test_the_printed_loop_shows_the_burst_then_429s(start_demo) -> None:
    """Default options: the loop the demo prints gives exactly what it (and the docs) promise."""
    demo = start_demo()
    first, second, third, fourth = demo.lines
    assert re.fullmatch(
        r"limiter demo: serving http://127\.0\.0\.1:\d+/ at 5/minute burst 5 "
        r"\(open it in a browser; Ctrl-C to stop\)\n",
        first,
    )
    assert second == "limiter demo: store memory:// (this process only); X-RateLimit-* headers\n"
    loop = LOOP.fullmatch(third)
    assert loop is not None, third
    assert loop.group(2) == demo.url + "api/"  # the JSON API; the page is at /
    count = int(loop.group(1))
    assert count == 8  # burst + 3
    expected = "200 200 200 200 200 429 429 429"
    assert fourth == f"expect: {expected} (one token back every 12 s)\n"

    with demo.client() as client:
        for _ in range(3):  # exempt: takes no token, gets no headers
            health = client.get("/health")
            assert health.json() == {"status": "ok"}
            assert "X-RateLimit-Limit" not in health.headers
            page = client.get("/")  # the page: a browser opening it spends nothing
            assert page.status_code == 200
            assert page.headers["Content-Type"] == "text/html; charset=utf-8"
            assert "X-RateLimit-Limit" not in page.headers
            bucket = client.get("/api/bucket")  # what the page charts: a peek
            assert bucket.json()["tokens"] == 5.0
            assert "X-RateLimit-Limit" not in bucket.headers
            assert client.get("/favicon.ico").status_code == 404  # exempt too
        # The printed loop's requests, as curl sends them (one connection each).
        started_wall, started = time.time(), time.monotonic()
        responses = []
        for _ in range(count):
            with demo.client() as once:
                responses.append(once.get("/api/"))
        elapsed = time.monotonic() - started
        codes = [r.status_code for r in responses]
        # One token comes back every 12 s: none can unless the loop took that long.
        assert codes[:5] == [200] * 5
        assert codes[5:].count(200) <= math.floor(elapsed / 12)
        if elapsed < 12:  # (always, but on a machine stalled for 12 s)
            assert " ".join(map(str, codes)) == expected
            remaining = [r.headers["X-RateLimit-Remaining"] for r in responses]
            assert remaining == ["4", "3", "2", "1", "0", "0", "0", "0"]

        ok = responses[0]
        assert ok.json() == {
            "hello": "world",
            "limit": "5/minute burst 5",
            "endpoints": ["/api/", "/api/time", "/api/bucket", "/health"],
        }
        assert ok.headers["X-RateLimit-Limit"] == "5"

        limited = responses[-1]
        assert limited.content == BODY_429
        assert limited.headers["Content-Type"] == "application/json"
        assert limited.headers["Content-Length"] == "66"
        assert limited.headers["X-RateLimit-Limit"] == "5"
        assert limited.headers["X-RateLimit-Remaining"] == "0"
        assert "RateLimit" not in limited.headers  # the draft fields: --headers draft
        # The next token is 12 s after the first request, less the time since.
        retry_after = int(limited.headers["Retry-After"])
        assert max(1, 12 - math.ceil(elapsed)) <= retry_after <= 12
        # Full again 5 tokens (60 s) after the first request: an epoch second.
        reset = int(limited.headers["X-RateLimit-Reset"])
        assert started_wall - 1 <= reset <= time.time() + 61

        assert client.get("/api/time").status_code == 429  # limited too, same bucket
        assert client.head("/api/").status_code == 429
        assert client.get("/health").status_code == 200
        assert client.get("/").status_code == 200  # the page still loads
        bucket = client.get("/api/bucket").json()
        assert bucket["key"] == "ip:127.0.0.1"
        assert (bucket["burst"], bucket["full"]) == (5, False)
        assert 0 <= bucket["tokens"] < 1
        assert [lim["name"] for lim in bucket["limits"]] == ["5/minute"]

    assert demo.stop() == "limiter demo: stopped\n"


def test_headers_draft(start_demo) -> None:
    demo = start_demo("--headers", "draft", "--rate", "1/hour", "--burst", "3")
    assert demo.lines[1].endswith("; RateLimit and RateLimit-Policy headers\n")
    assert demo.lines[3] == "expect: 200 200 200 429 429 429 (one token back every 60 min)\n"
    with demo.client() as client:
        responses = [client.get("/api/") for _ in range(4)]
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    for response in responses:
        assert response.headers["RateLimit-Policy"] == '"1/hour";q=3;w=10800'  # 3 tokens per 3 h
        assert not any(name.lower().startswith("x-ratelimit") for name in response.headers)
    assert re.fullmatch(r'"1/hour";r=2;t=\d+', responses[0].headers["RateLimit"])
    assert re.fullmatch(r'"1/hour";r=0;t=\d+', responses[3].headers["RateLimit"])
    assert int(responses[3].headers["Retry-After"]) > 3000
    assert responses[3].content == BODY_429


def test_two_demos_on_one_sqlite_file_share_the_bucket(start_demo, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"  # an absolute path: sqlite:////...
    limit = ("--rate", "1/hour", "--burst", "3")
    # --store wins over the environment (which is not even read: it is invalid here)...
    one = start_demo(
        "--store", url, "--headers", "both", *limit, env={"LIMITER_STORAGE_URL": "bogus"}
    )
    # ...and the environment is the default store.
    two = start_demo(*limit, env={"LIMITER_STORAGE_URL": url})
    assert one.lines[1] == (
        f"limiter demo: store {url}; X-RateLimit-*, RateLimit and RateLimit-Policy headers\n"
    )
    assert two.lines[1] == (
        f"limiter demo: store {url} (from LIMITER_STORAGE_URL); X-RateLimit-* headers\n"
    )
    with one.client() as a, two.client() as b:
        first = [a.get("/api/") for _ in range(2)]
        second = [b.get("/api/") for _ in range(2)]
        third = a.get("/api/")
    assert [r.status_code for r in first] == [200, 200]
    assert first[1].headers["X-RateLimit-Remaining"] == "1"
    assert first[1].headers["RateLimit"].startswith('"1/hour";r=1;')
    assert [r.status_code for r in second] == [200, 429]
    assert second[0].headers["X-RateLimit-Remaining"] == "0"
    assert third.status_code == 429
    assert one.stop() == "limiter demo: stopped\n"
    assert two.stop() == "limiter demo: stopped\n"


def test_bad_store_scheme_is_a_usage_error_without_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "limiter", "demo", "--store", "ftp://u:secret@files.example/"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("usage: limiter demo ")
    assert "limiter demo: error: --store: unknown store URL scheme 'ftp://'" in done.stderr
    assert "'ftp://u:***@files.example/'" in done.stderr
    assert "supported schemes: memory://, sqlite://, redis://" in done.stderr
    assert "secret" not in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_storage_url_in_the_environment_is_a_usage_error(capsys, monkeypatch) -> None:
    monkeypatch.setenv("LIMITER_STORAGE_URL", "mysql://root:secret@db/")
    with pytest.raises(SystemExit) as exit_info:
        main(["demo"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "LIMITER_STORAGE_URL: unknown store URL scheme 'mysql://'" in err
    assert "secret" not in err


def test_sqlite_store_in_a_missing_directory_returns_1(capsys, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing' / 'x.db'}"
    assert main(["demo", "--store", url, "--port", "0"]) == 1
    assert f"cannot open the store {url}: " in capsys.readouterr().err


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port where connections are refused (bound, never listening)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


def test_unreachable_redis_returns_1_and_never_shows_the_password(capsys, closed_port) -> None:
    pytest.importorskip("redis", reason="redis-py is not installed: pip install -e '.[dev]'")
    url = f"redis://u:secret@127.0.0.1:{closed_port}/0"
    assert main(["demo", "--store", url, "--port", "0"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(
        f"limiter demo: the store redis://u:***@127.0.0.1:{closed_port}/0 does not answer: "
    )
    assert "Traceback" not in err
    assert "secret" not in out + err


def test_unreachable_redis_with_a_fallback_serves_and_never_shows_the_password(
    start_demo, closed_port
) -> None:
    pytest.importorskip("redis", reason="redis-py is not installed: pip install -e '.[dev]'")
    url = f"redis://u:secret@127.0.0.1:{closed_port}/0?fallback=memory"
    demo = start_demo("--store", url, "--rate", "1/hour", "--burst", "3")
    assert demo.lines[1].startswith(f"limiter demo: store redis://u:***@127.0.0.1:{closed_port}/")
    with demo.client() as client:  # the fallback (memory) limits meanwhile
        codes = [client.get("/api/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    out = "".join(demo.lines) + demo.stop()
    err = demo.stderr()
    assert "does not answer" in err and "its fallback answers" in err
    assert "secret" not in out + err
    assert "Traceback" not in err


def test_no_command_prints_help_and_returns_2(capsys) -> None:
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_bad_rate_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--rate", "fast"])
    assert exit_info.value.code == 2
    assert "fast" in capsys.readouterr().err


def test_bad_headers_style_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--headers", "ietf"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'ietf'" in capsys.readouterr().err


def test_port_in_use_returns_1(capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        assert main(["demo", "--port", str(taken.getsockname()[1])]) == 1
    assert "cannot listen" in capsys.readouterr().err


def test_the_json_api_moved_under_api_and_old_paths_say_so(start_demo) -> None:
    demo = start_demo("--rate", "1/hour", "--burst", "3")
    with demo.client() as client:
        old = client.get("/time")
        page = client.get("/")
        assert client.get("/api/time").status_code == 200
    assert old.status_code == 404
    assert old.json() == {
        "status": 404,
        "code": "not_found",
        "message": "no such endpoint: the JSON API is under /api/",
    }
    assert old.headers["X-RateLimit-Remaining"] == "2"  # any other path is limited
    html = page.text
    assert html.startswith("<!doctype html>")
    assert '<strong id="limit">1/hour burst 3</strong>' in html
    assert 'data-burst="3"' in html and 'value="6"' in html  # burst + 3, as the loop
    # Works offline: nothing is fetched from anywhere but the demo itself.
    assert "http://" not in html and "https://" not in html and "src=" not in html
    assert demo.stop() == "limiter demo: stopped\n"
    log = demo.stderr()
    assert '"GET /time HTTP/1.1" 404' in log and '"GET /api/time HTTP/1.1" 200' in log


def test_bucket_peeks_every_limit_and_charts_the_emptiest(start_demo) -> None:
    demo = start_demo("--rate", "3/hour;100/day")
    with demo.client() as client:
        assert [client.get("/api/").status_code for _ in range(4)] == [200, 200, 200, 429]
        bucket = client.get("/api/bucket").json()
        again = client.get("/api/bucket").json()
    assert [lim["name"] for lim in bucket["limits"]] == ["3/hour", "100/day"]
    assert [lim["tokens"] for lim in bucket["limits"]] == [0, 97]
    assert bucket["burst"] == 3 and bucket["tokens"] < 0.01 and bucket["full"] is False
    assert again["limits"][1]["tokens"] == 97  # peeking takes nothing
    assert demo.stop() == "limiter demo: stopped\n"
    log = demo.stderr()
    assert "/api/bucket" not in log  # polled by the page every second: not logged


def test_python_m_limiter_top_reads_the_demo(start_demo) -> None:
    """``python -m limiter top``, as docs/cli.md runs it (the module's guard is its last line)."""
    demo = start_demo("--rate", "1/hour", "--burst", "1")
    with demo.client() as client:
        assert [client.get("/api/").status_code for _ in range(3)] == [200, 429, 429]
    done = subprocess.run(
        [sys.executable, "-m", "limiter", "top", "--url", demo.url + "top"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"2 denials in the last 5 min ({demo.url}top)\nip:127.0.0.1  2\n")
    assert demo.stop() == "limiter demo: stopped\n"


def test_the_documented_inspect_line_reads_the_demo_bucket(start_demo, tmp_path, capsys) -> None:
    """docs/cli.md: the demo's limiter is named ``demo``; its inspect line sees the 429s."""
    from limiter.cli import main

    db = f"sqlite:///{tmp_path / 'demo.db'}"
    demo = start_demo("--store", db)
    with demo.client() as client:
        codes = [client.get("/api/").status_code for _ in range(8)]
    assert codes == [200] * 5 + [429] * 3
    # As docs/cli.md writes it (its sqlite:///demo.db is this db).
    argv = ["inspect", "--store", db, "--limit", "5/minute", "--name", "demo", "ip:127.0.0.1"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"key 'ip:127.0.0.1' of limiter 'demo' on {db}"
    name, burst, tokens, _exact, _full, _unit, verdict = lines[2].split()[:7]
    assert (name, burst, tokens, verdict) == ("5/minute", "5", "0", "denied,")
    # Without --name: another limiter's keys, said so (exit 3), not "full buckets".
    assert main([*argv[:5], "ip:127.0.0.1"]) == 3
    assert "no stored state for key 'ip:127.0.0.1'" in capsys.readouterr().err
