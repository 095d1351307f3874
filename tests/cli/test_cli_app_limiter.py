"""``inspect`` and ``reset`` through the application's own limiter (issue 22 item 4).

``--limiter MODULE:ATTRIBUTE`` imports the app's ``RateLimiter``: its limits,
lockout, name, store and clock, so the CLI reads exactly the app's buckets.
The app module here runs on a ManualClock, which the CLI then uses too.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Iterator, Tuple

import pytest

from helpers.cli import app_module, run

APP = """
from limiter import Lockout, ManualClock, RateLimiter

clock = ManualClock(1_700_000_000.0)
rl = RateLimiter(
    "5/minute",
    store={url!r},
    name="login",
    clock=clock,
    lockout=Lockout(breaches=3, within=60, duration=900),
)
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tuple[str, ModuleType]]:
    yield from app_module(APP, tmp_path, monkeypatch)


def lock_out(module: ModuleType, key: str = "user:42") -> None:
    rl = module.rl
    assert [rl.allow(key) for _ in range(8)] == [True] * 5 + [False] * 3  # 3 breaches
    module.clock.advance(1.0)
    assert rl.check(key).locked_out


def test_inspect_shows_the_lockout_with_the_seconds_left(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    name, module = app
    lock_out(module)
    db = f"sqlite:///{module.rl.store.path}"
    code, out, err = run(capsys, "inspect", "--limiter", f"{name}:rl", "user:42")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"key 'user:42' of limiter 'login' on {db}",
        "limit     burst  tokens   exact  full in  request now",
        "5/minute      5       0  0.0833   59.0 s  denied, in 11.0 s",
        "locked out: for 899.0 s more",
        "a request of cost 1 now: denied, in 899.0 s",
    ]
    code, out, err = run(capsys, "inspect", "--json", "--limiter", f"{name}:rl", "user:42")
    assert code == 0

    report = json.loads(out)
    assert (report["allowed"], report["locked_out"], report["locked_out_for"]) == (
        False,
        True,
        899.0,
    )
    assert report["retry_after"] == 899.0


def test_reset_through_the_app_limiter_lets_the_app_admit(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    name, module = app
    lock_out(module)
    code, out, err = run(capsys, "reset", "--limiter", f"{name}:rl", "user:42")
    assert (code, err) == (0, "")
    db = f"sqlite:///{module.rl.store.path}"
    assert out == (
        f"reset key 'user:42' of limiter 'login' on {db}: full buckets for 5/minute (burst 5)\n"
    )
    result = module.rl.check("user:42")
    assert result.allowed and result.remaining == 4
    # Nothing stored any more for it: a second reset says so, and resets nothing.
    module.rl.reset("user:42")
    code, out, err = run(capsys, "reset", "--limiter", f"{name}:rl", "user:42")
    assert (code, out) == (3, "")
    assert err.startswith("limiter reset: no stored state for key 'user:42' of limiter 'login'")


def test_the_app_limiter_on_a_given_store(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    name, module = app
    lock_out(module)
    db = f"sqlite:///{module.rl.store.path}"
    code, out, err = run(capsys, "inspect", "--limiter", f"{name}:rl", "--store", db, "user:42")
    assert (code, err) == (0, "")
    assert "locked out: for 899.0 s more" in out.splitlines()


def test_the_bare_limit_misses_the_lockout_and_says_no_stored_state(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    _name, module = app
    lock_out(module)
    db = f"sqlite:///{module.rl.store.path}"
    # Without the lockout the keys differ ({key}|limit vs key): nothing there, said so.
    code, out, err = run(
        capsys, "inspect", "--store", db, "--limit", "5/minute", "--name", "login", "user:42"
    )
    assert (code, out) == (3, "")
    assert err.startswith("limiter inspect: no stored state for key 'user:42' of limiter 'login'")
    code, out, err = run(
        capsys, "reset", "--store", db, "--limit", "5/minute", "--name", "wrong", "user:42"
    )
    assert (code, out) == (3, "")
    assert not module.rl.check("user:42").allowed  # nothing was reset


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "nocolon",
            "argument --limiter: expected MODULE:ATTRIBUTE (myapp.limits:rl), got 'nocolon'",
        ),
        ("no_such_module_xyz:rl", "argument --limiter: cannot import 'no_such_module_xyz': "),
        ("{name}:missing", "argument --limiter: '{name}' has no attribute 'missing'"),
        ("{name}:clock", "argument --limiter: '{name}:clock' is no RateLimiter, got "),
    ],
)
def test_bad_limiter_is_a_usage_error(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str], spec: str, message: str
) -> None:
    name, _ = app
    code, _out, err = run(capsys, "inspect", "--limiter", spec.format(name=name), "user:42")
    assert code == 2
    assert f"limiter inspect: error: {message.format(name=name)}" in err


def test_limiter_excludes_limit_and_name(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    name, _ = app
    code, _, err = run(capsys, "inspect", "--limiter", f"{name}:rl", "--limit", "5/minute", "k")
    assert code == 2 and "argument --limit: not with --limiter, which gives the limits" in err
    code, _, err = run(capsys, "inspect", "--limiter", f"{name}:rl", "--name", "x", "k")
    assert code == 2 and "argument --name: not with --limiter, which gives the name" in err
    code, _, err = run(capsys, "inspect", "--store", "sqlite:///x.db", "k")
    assert code == 2
    assert "give the application's limiter as --limiter MODULE:ATTRIBUTE, or --limit RATE" in err


@pytest.mark.usefixtures("current_loop")  # Python 3.9: redis.asyncio asks for the current loop
def test_a_limiter_on_a_private_or_async_store_needs_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"cli_app_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(
        "from limiter import RateLimiter, store_from_url\n"
        "mem = RateLimiter('5/minute', name='m')\n"
        "aio = RateLimiter('5/minute', name='a',"
        " store=store_from_url('redis://127.0.0.1:1/0', asyncio=True))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        code, _, err = run(capsys, "inspect", "--limiter", f"{name}:mem", "k")
        assert code == 2
        assert (
            f"argument --limiter: {name}:mem's store, MemoryStore, is the memory of one "
            "process: give --store URL, the shared store the application uses"
        ) in err
        code, _, err = run(capsys, "reset", "--limiter", f"{name}:aio", "k")
        assert code == 2
        assert f"argument --limiter: {name}:aio's store, AsyncRedisStore, is async only" in err
    finally:
        sys.modules.pop(name, None)
