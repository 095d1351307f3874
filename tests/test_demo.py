"""``python -m limiter demo``: a real process on a free loopback port."""

from __future__ import annotations

import math
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from limiter.__main__ import main

BODY_429 = b'{"status":429,"code":"rate_limited","message":"too many requests"}'


@pytest.fixture(scope="module")
def demo():
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "limiter",
            "demo",
            "--port",
            "0",
            "--rate",
            "1/hour",
            "--burst",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        first = process.stdout.readline()
        second = process.stdout.readline()
        yield process, first, second
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def test_prints_the_url_and_a_command_and_serves_the_limited_api(demo):
    process, first, second = demo
    assert first.startswith("limiter demo: serving http://127.0.0.1:")
    url = first.split()[3]
    assert url.endswith("/")
    loop = re.match(r"watch the 429s: for i in \$\(seq (\d+)\); do curl ", second)
    assert loop is not None, second
    assert int(loop.group(1)) > 3  # more requests than the burst: the 429s show
    assert url in second
    with httpx.Client(base_url=url, timeout=60) as client:  # generous: a busy machine
        for _ in range(5):
            assert client.get("/health").json() == {"status": "ok"}
        started = time.monotonic()
        responses = [client.get("/") for _ in range(4)]
        elapsed = time.monotonic() - started
        assert [r.status_code for r in responses] == [200, 200, 200, 429]
        assert responses[0].json()["hello"] == "world"
        assert responses[0].headers["X-RateLimit-Limit"] == "3"
        assert responses[3].content == BODY_429
        # One token per hour: the wait is an hour less the time the requests
        # took, rounded up (exactly 3600 unless this machine is very busy).
        retry_after = int(responses[3].headers["Retry-After"])
        assert 3600 - math.ceil(elapsed) <= retry_after <= 3600
        assert client.get("/time").status_code == 429

    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert out == "limiter demo: stopped\n"


def test_no_command_prints_help_and_returns_2(capsys):
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_bad_rate_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--rate", "fast"])
    assert exit_info.value.code == 2
    assert "fast" in capsys.readouterr().err


def test_port_in_use_returns_1(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        assert main(["demo", "--port", str(taken.getsockname()[1])]) == 1
    assert "cannot listen" in capsys.readouterr().err
