"""``python -m limiter inspect`` and ``reset``: one key's buckets in a shared store.

The CLI builds its limiter on the system clock, so the assertions allow for
the time the test takes: on ``5/minute`` a token comes back every 12 s, and
the test reads the buckets well within a second of charging them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

import pytest

from helpers.cli import run
from limiter import RateLimiter
from limiter.urls import STORAGE_URL_ENV

Run = Tuple[int, str, str]


def inspect_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Dict[str, Any]:
    code, out, err = run(capsys, "inspect", "--json", *argv)
    assert (code, err) == (0, ""), err
    report: Dict[str, Any] = json.loads(out)
    return report


@pytest.fixture
def db(tmp_path: Path) -> str:
    """The URL of an SQLite file, as docs/stores.md writes it (four slashes: absolute)."""
    return f"sqlite:///{tmp_path / 'limits.db'}"


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORAGE_URL_ENV, raising=False)


def charged(
    url: str, rate: str = "5/minute", key: str = "user:42", times: int = 3, **kw: Any
) -> RateLimiter:
    limiter = RateLimiter(rate, store=url, **kw)
    for _ in range(times):
        assert limiter.allow(key)
    return limiter


# -- inspect -------------------------------------------------------------------


def test_inspect_json_fields(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    app = charged(db)
    report = inspect_json(capsys, "--store", db, "--limit", "5/minute", "user:42")
    assert set(report) == {"key", "limiter", "store", "allowed", "retry_after", "limits"}
    assert report["key"] == "user:42"
    assert report["limiter"] == app.name == "0.0833333/s:5"  # RateLimiter's default name
    assert report["store"] == db
    assert (report["allowed"], report["retry_after"]) == (True, 0.0)
    [bucket] = report["limits"]
    assert set(bucket) == {
        "name", "algorithm", "rate", "burst", "window", "tokens", "tokens_exact", "full_in",
        "allowed", "retry_after",
    }  # fmt: skip
    assert bucket["algorithm"] == "token-bucket"
    assert (bucket["name"], bucket["burst"], bucket["window"]) == ("5/minute", 5, 60.0)
    assert bucket["rate"] == pytest.approx(5 / 60)
    assert bucket["tokens"] == 2
    assert 2 <= bucket["tokens_exact"] < 2.1
    assert 34 < bucket["full_in"] <= 36  # 3 tokens at 12 s each, less the time since
    assert (bucket["allowed"], bucket["retry_after"]) == (True, 0.0)


def test_inspect_takes_nothing(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    app = charged(db)
    for _ in range(5):
        inspect_json(capsys, "--store", db, "--limit", "5/minute", "user:42")
    assert app.peek("user:42").remaining == 2


def test_inspect_text(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    charged(db)
    code, out, err = run(capsys, "inspect", "--store", db, "--limit", "5/minute", "user:42")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"key 'user:42' of limiter '0.0833333/s:5' on {db}"
    assert lines[1].split() == ["limit", "burst", "tokens", "exact", "full", "in", "request", "now"]
    name, burst, tokens, exact, full_in, unit, now = lines[2].split()
    assert (name, burst, tokens, unit, now) == ("5/minute", "5", "2", "s", "allowed")
    assert 2 <= float(exact) < 2.1 and 34 < float(full_in) <= 36
    assert len(lines) == 3


def test_inspect_empty_bucket_is_denied(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    charged(db, times=5)
    report = inspect_json(capsys, "--store", db, "--limit", "5/minute", "user:42")
    [bucket] = report["limits"]
    assert (bucket["tokens"], bucket["allowed"], report["allowed"]) == (0, False, False)
    assert 0 <= bucket["tokens_exact"] < 0.1
    assert 11 < bucket["retry_after"] <= 12 and report["retry_after"] == bucket["retry_after"]
    code, out, _ = run(capsys, "inspect", "--store", db, "--limit", "5/minute", "user:42")
    assert code == 0 and "denied, in 1" in out.splitlines()[2]


NO_STATE_HINT = (
    ": a wrong --name or store prefix is the usual cause (a key never seen, or idle "
    "until its buckets were full and forgotten, has none either)\n"
)


@pytest.mark.parametrize("command", ["inspect", "reset"])
def test_unseen_key_has_no_stored_state(
    db: str, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    charged(db)
    code, out, err = run(capsys, command, "--store", db, "--limit", "5/minute", "user:7")
    assert (code, out) == (3, "")
    assert err == (
        f"limiter {command}: no stored state for key 'user:7' of limiter '0.0833333/s:5' "
        f"on {db}" + NO_STATE_HINT
    )


def test_inspect_several_limits(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    rate = "2/minute;10/hour"
    charged(db, rate, times=2)
    report = inspect_json(capsys, "--store", db, "--limit", rate, "user:42")
    assert report["limiter"] == RateLimiter(rate).name
    fast, slow = report["limits"]
    assert (fast["name"], fast["burst"], fast["tokens"], fast["allowed"]) == (
        "2/minute",
        2,
        0,
        False,
    )
    assert (slow["name"], slow["burst"], slow["tokens"], slow["allowed"]) == (
        "10/hour",
        10,
        8,
        True,
    )
    assert 8 <= slow["tokens_exact"] < 8.1
    assert report["allowed"] is False
    assert 29 < report["retry_after"] == fast["retry_after"] <= 30
    code, out, _ = run(capsys, "inspect", "--store", db, "--limit", rate, "user:42")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 5
    assert lines[2].startswith("2/minute ") and lines[3].startswith("10/hour ")
    verdict, _, wait = lines[4].partition(", in ")
    assert verdict == "a request of cost 1 now: denied"
    assert wait.endswith(" s") and 29 < float(wait[:-2]) <= 30


def test_names_are_namespaces(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    charged(db, name="api", times=4)
    charged(db, name="login", times=1)
    tokens = {}
    for name in ("api", "login"):
        report = inspect_json(
            capsys, "--store", db, "--limit", "5/minute", "--name", name, "user:42"
        )
        assert report["limiter"] == name
        tokens[name] = report["limits"][0]["tokens"]
    assert tokens == {"api": 1, "login": 4}
    # A name no limiter uses, or none (the default name): no stored state, exit 3.
    for name in (["--name", "other"], []):
        code, out, err = run(
            capsys, "inspect", "--store", db, "--limit", "5/minute", *name, "user:42"
        )
        assert (code, out) == (3, "") and "no stored state for key 'user:42'" in err


def test_burst_and_numeric_rate_name_like_ratelimiter(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    app = RateLimiter("5/minute", 10, store=db)
    app.check("k", 4)
    report = inspect_json(capsys, "--store", db, "--limit", "5/minute", "--burst", "10", "k")
    assert report["limiter"] == app.name and report["limits"][0]["tokens"] == 6
    number = RateLimiter(0.5, store=db)
    number.check("k")
    report = inspect_json(capsys, "--store", db, "--limit", "0.5", "k")
    assert report["limiter"] == number.name == "0.5/s:1"
    assert report["limits"][0]["tokens"] == 0


def test_store_from_the_environment(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    charged(db)
    monkeypatch.setenv(STORAGE_URL_ENV, db)
    code, out, err = run(capsys, "inspect", "--limit", "5/minute", "user:42")
    assert (code, err) == (0, "")
    assert out.splitlines()[0].endswith(f"on {db} (from {STORAGE_URL_ENV})")
    assert "  2  " in out.splitlines()[2]


def test_entry_point(db: str, tmp_path: Path) -> None:
    charged(db)
    env = {k: v for k, v in os.environ.items() if k != STORAGE_URL_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "limiter", "inspect", "--store", db, "--limit", "5/minute",
         "--json", "user:42"],
        capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["limits"][0]["tokens"] == 2


# -- reset ---------------------------------------------------------------------


def test_reset(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    app = charged(db, times=5)
    other = charged(db, key="user:7", times=5)
    code, out, err = run(capsys, "reset", "--store", db, "--limit", "5/minute", "user:42")
    assert (code, err) == (0, "")
    assert out == (
        f"reset key 'user:42' of limiter '0.0833333/s:5' on {db}: "
        "full buckets for 5/minute (burst 5)\n"
    )
    assert app.peek("user:42").remaining == 5
    assert other.peek("user:7").remaining == 0  # only that key


def test_reset_several_limits_json(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    rate = "2/minute;10/hour"
    app = charged(db, rate, times=2, name="api")
    code, out, err = run(
        capsys, "reset", "--json", "--store", db, "--limit", rate, "--name", "api", "user:42"
    )
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "key": "user:42",
        "limiter": "api",
        "store": db,
        "reset": True,
        "limits": [
            {"name": "2/minute", "algorithm": "token-bucket", "rate": 2 / 60, "burst": 2},
            {"name": "10/hour", "algorithm": "token-bucket", "rate": 10 / 3600, "burst": 10},
        ],
    }
    result = app.peek("user:42")
    assert [r.remaining for r in result.results] == [2, 10]


# -- usage errors (2) and failing stores (1) -------------------------------------


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, ""), err
    assert err.startswith("usage: limiter ")
    return err.splitlines()[-1]


@pytest.mark.parametrize("command", ["inspect", "reset"])
def test_bad_rate(db: str, capsys: pytest.CaptureFixture[str], command: str) -> None:
    message = usage_error(capsys, command, "--store", db, "--limit", "5/fortnight", "k")
    assert message.startswith(f"limiter {command}: error: argument --limit: ")
    assert "'5/fortnight'" in message


def test_limit_twice(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    message = usage_error(capsys, "inspect", "--store", db, "--limit", "1/s", "--limit", "9/h", "k")
    assert "given twice" in message and "'10/second;1000/hour'" in message


@pytest.mark.parametrize("url", ["memory://", "MEMORY://?max_keys=5", "sqlite:///:memory:"])
def test_private_store_refused(capsys: pytest.CaptureFixture[str], url: str) -> None:
    message = usage_error(capsys, "inspect", "--store", url, "--limit", "5/minute", "k")
    assert message.startswith("limiter inspect: error: --store: ") and url in message
    assert "memory of one process" in message


def test_private_store_from_env_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORAGE_URL_ENV, "memory://")
    message = usage_error(capsys, "reset", "--limit", "5/minute", "k")
    assert message.startswith(f"limiter reset: error: {STORAGE_URL_ENV}: memory://")


def test_no_store(capsys: pytest.CaptureFixture[str]) -> None:
    message = usage_error(capsys, "inspect", "--limit", "5/minute", "k")
    assert STORAGE_URL_ENV in message and "--store" in message


def test_bad_store_url(capsys: pytest.CaptureFixture[str]) -> None:
    message = usage_error(capsys, "inspect", "--store", "mongo://u:pw@h/", "--limit", "1/s", "k")
    assert "'mongo://'" in message and "pw" not in message


@pytest.mark.parametrize("key", ["5/minute", "10 per second"])
def test_rate_like_key(db: str, capsys: pytest.CaptureFixture[str], key: str) -> None:
    message = usage_error(capsys, "inspect", "--store", db, "--limit", "5/minute", key)
    assert message.startswith("limiter inspect: error: argument KEY: ") and repr(key) in message


def test_missing_sqlite_file_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "typo.db"
    code, out, err = run(capsys, "reset", "--store", f"sqlite:///{path}", "--limit", "1/s", "k")
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and "does not exist" in err
    assert not path.exists()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on (bound, never listening, while the test runs)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


# A password with "/" unescaped: the store reads it whole, so must the message's redaction.
@pytest.mark.parametrize("password", ["s3cr%40t-pw", "s3cr/t-pw"])
@pytest.mark.parametrize("command", ["inspect", "reset"])
def test_unreachable_redis(
    closed_port: int, capsys: pytest.CaptureFixture[str], command: str, password: str
) -> None:
    pytest.importorskip(
        "redis", reason="redis-py is not installed: pip install 'tokenlimiter[redis]'"
    )
    url = f"redis://app:{password}@127.0.0.1:{closed_port}/0?fallback=memory"
    code, out, err = run(capsys, command, "--store", url, "--limit", "5/minute", "k")
    assert (code, out) == (1, "")  # no answer from the fallback: an error
    assert err.count("\n") == 1
    assert err.startswith(f"limiter {command}: the store redis://app:***@127.0.0.1:{closed_port}/0")
    assert "does not answer" in err
    assert "s3cr" not in err and "t-pw" not in err


def test_a_client_error_echoing_the_password_is_redacted() -> None:
    """A client library's message that repeats the password (as typed or percent-decoded)
    shows ``***``, also for a password holding ``/``, which the store reads whole."""
    from limiter.cli._inspect import _one_line

    for url, secret in [
        ("redis://u:pa/ss@h:1/0", "pa/ss"),
        ("redis://u:s3cr%40t@h:1/0", "s3cr@t"),
        ("redis://u:s3cr%40t@h:1/0", "s3cr%40t"),
    ]:
        shown = _one_line(ValueError(f"auth failed:\n password {secret} refused"), url)
        assert shown == "auth failed: password *** refused", url


# -- a real Redis ----------------------------------------------------------------


class TestRedis:
    @pytest.fixture
    def url(self, server: Any) -> str:
        from helpers.redis_servers import unique_prefix

        return f"redis://127.0.0.1:{server.port}/0?prefix={unique_prefix()}"

    def test_inspect_and_reset(self, url: str, capsys: pytest.CaptureFixture[str]) -> None:
        app = charged(url, name="api")
        both = charged(url, "2/minute;10/hour", times=2)
        report = inspect_json(
            capsys, "--store", url, "--limit", "5/minute", "--name", "api", "user:42"
        )
        [bucket] = report["limits"]
        assert (report["limiter"], bucket["tokens"]) == ("api", 2)
        assert 2 <= bucket["tokens_exact"] < 2.1
        report = inspect_json(capsys, "--store", url, "--limit", "2/minute;10/hour", "user:42")
        assert report["limiter"] == both.name
        assert [b["tokens"] for b in report["limits"]] == [0, 8]
        assert report["allowed"] is False
        for args in (["--name", "api", "--limit", "5/minute"], ["--limit", "2/minute;10/hour"]):
            code, out, err = run(capsys, "reset", "--store", url, *args, "user:42")
            assert (code, err) == (0, "") and out.startswith("reset key 'user:42' ")
        assert app.peek("user:42").remaining == 5
        assert [r.remaining for r in both.peek("user:42").results] == [2, 10]


def test_demo_still_parses(capsys: pytest.CaptureFixture[str]) -> None:
    message = usage_error(capsys, "demo", "--rate", "5/fortnight")
    assert message.startswith("limiter demo: error: ")


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys)
    assert code == 2
    for command in ("demo", "inspect", "reset"):
        assert command in out


def test_keys_are_printed_escaped(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    key = "\x1b]0;pwn\x07\x1b[2J\u202e"
    charged(db, key=key, times=1)
    code, out, err = run(capsys, "inspect", "--store", db, "--limit", "5/minute", key)
    assert (code, err) == (0, "")
    assert (
        out.splitlines()[0]
        == f"key '\\x1b]0;pwn\\x07\\x1b[2J\\u202e' of limiter '0.0833333/s:5' on {db}"
    )
    code, out, err = run(capsys, "reset", "--store", db, "--limit", "5/minute", "--name", "x", key)
    assert code == 3
    assert err.startswith(
        "limiter reset: no stored state for key '\\x1b]0;pwn\\x07\\x1b[2J\\u202e' "
    )
    assert "\x1b" not in out + err and "\u202e" not in out + err
