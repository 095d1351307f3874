"""``inspect``, ``reset`` and ``demo`` with window policies (``--algorithm``, issue 24).

For a window ``inspect`` shows the count used and left and when the window
ends, never tokens; for a ``Concurrency`` policy the slots held and free.
The app module runs on a ManualClock, which the CLI then uses
(``--limiter``), so every number is exact; ``--limit`` with
``--algorithm`` runs on the system clock and is bounded instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Iterator, Tuple

import pytest

from helpers.cli import app_module, run
from limiter import FixedWindow, RateLimiter
from limiter.urls import STORAGE_URL_ENV

APP = """
from limiter import Concurrency, FixedWindow, ManualClock, Quota, RateLimiter, SlidingWindow

clock = ManualClock(1_700_000_000.0)  # 20 s into a clock minute
fixed = RateLimiter(FixedWindow(5, 60), store={url!r}, name="fixed", clock=clock)
first = RateLimiter(
    FixedWindow(5, 60, anchor="first"), store={url!r}, name="first", clock=clock
)
sliding = RateLimiter(SlidingWindow(5, 60), store={url!r}, name="sliding", clock=clock)
mixed = RateLimiter(
    {{"burst": "5/minute", "window": SlidingWindow(100, 3600)}},
    store={url!r},
    name="mixed",
    clock=clock,
)
slots = RateLimiter(
    {{"rate": "60/minute", "inflight": Concurrency(2, lease=120)}},
    store={url!r},
    name="slots",
    clock=clock,
)
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tuple[str, ModuleType]]:
    yield from app_module(APP, tmp_path, monkeypatch)


def inspect(capsys: pytest.CaptureFixture[str], target: str, *extra: str) -> Tuple[str, str]:
    code, out, err = run(capsys, "inspect", "--limiter", target, *extra, "user:42")
    assert (code, err) == (0, ""), err
    return out, err


def test_a_fixed_window_shows_used_left_and_its_end(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    name, module = app
    assert [module.fixed.allow("user:42") for _ in range(3)] == [True] * 3
    out, _ = inspect(capsys, f"{name}:fixed", "--json")
    report = json.loads(out)
    assert (report["allowed"], report["retry_after"]) == (True, 0.0)
    assert report["limits"] == [
        {
            "name": "default",
            "algorithm": "fixed-window",
            "count": 5,
            "period": 60.0,
            "used": 3,
            "remaining": 2,
            "window_ends_in": 40.0,  # the clock minute's end
            "full_in": 40.0,
            "allowed": True,
            "retry_after": 0.0,
        }
    ]
    assert module.fixed.peek("user:42").remaining == 2  # inspect took nothing
    assert [module.fixed.allow("user:42") for _ in range(3)] == [True, True, False]
    module.clock.advance(15)
    out, _ = inspect(capsys, f"{name}:fixed")
    assert out.splitlines() == [
        f"key 'user:42' of limiter 'fixed' on sqlite:///{module.fixed.store.path}",
        "limit    window      count  used  left  ends in  request now",
        "default  fixed 60 s      5     5     0   25.0 s  denied, in 25.0 s",
    ]


def test_a_first_request_window_ends_a_period_after_its_first_request(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    name, module = app
    module.first.allow("user:42")
    module.clock.advance(10)
    [limit] = json.loads(inspect(capsys, f"{name}:first", "--json")[0])["limits"]
    assert (limit["used"], limit["remaining"], limit["window_ends_in"]) == (1, 4, 50.0)


def test_a_sliding_window_shows_the_estimate_and_a_bounded_wait(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    name, module = app
    assert [module.sliding.allow("user:42") for _ in range(6)] == [True] * 5 + [False]
    [limit] = json.loads(inspect(capsys, f"{name}:sliding", "--json")[0])["limits"]
    assert limit == {
        "name": "default",
        "algorithm": "sliding-window",
        "count": 5,
        "period": 60.0,
        "used": 5,
        "remaining": 0,
        "window_ends_in": 40.0,  # the current clock minute
        "full_in": 100.0,  # nothing counted from the next one's end
        "allowed": False,
        "retry_after": 100.0,  # a bound: a peek does not tell when the estimate falls
    }
    module.clock.advance(55)  # 15 s into the next minute: 5 x 45/60 = 3.75, so 3 used
    out, _ = inspect(capsys, f"{name}:sliding")
    assert out.splitlines()[1:] == [
        "limit    window        count  used  left  ends in  request now",
        "default  sliding 60 s      5     3     2   45.0 s  allowed",
    ]
    module.clock.advance(45)  # two minutes on: nothing counted, no window to tell of
    [limit] = json.loads(inspect(capsys, f"{name}:sliding", "--json")[0])["limits"]
    assert (limit["used"], limit["window_ends_in"], limit["full_in"]) == (0, None, 0.0)
    # Refused at once: the printed wait says it is a bound.
    assert [module.sliding.allow("user:42") for _ in range(6)] == [True] * 5 + [False]
    out, _ = inspect(capsys, f"{name}:sliding")
    assert out.splitlines()[2].endswith("denied, in at most 120.0 s")


def test_a_bucket_and_a_window_side_by_side(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    name, module = app
    assert [module.mixed.allow("user:42") for _ in range(6)] == [True] * 5 + [False]
    out, _ = inspect(capsys, f"{name}:mixed")
    lines = out.splitlines()
    assert lines[1:3] == [
        "limit  burst  tokens   exact  full in  request now",
        "burst      5       0  0.0000   60.0 s  denied, in 12.0 s",
    ]
    assert lines[3:5] == [
        "limit   window          count  used  left   ends in  request now",
        "window  sliding 3600 s    100     5    95  2800.0 s  allowed",  # T0: 800 s into an hour
    ]
    assert lines[5] == "a request of cost 1 now: denied, in 12.0 s"
    code, out, err = run(capsys, "reset", "--limiter", f"{name}:mixed", "user:42")
    assert (code, err) == (0, "")
    assert out.endswith("full buckets for burst (burst 5), window (count 100)\n")
    assert module.mixed.peek("user:42").remaining == 5


def test_a_concurrency_policy_shows_its_slots_held_and_free(
    app: Tuple[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    name, module = app
    held = [module.slots.slot("user:42") for _ in range(2)]
    assert [slot.take().allowed for slot in held] == [True, True]
    module.clock.advance(30)
    out, _ = inspect(capsys, f"{name}:slots")
    assert out.splitlines()[3:] == [
        "limit     window       count  used  left  ends in  request now",
        "inflight  lease 120 s      2     2     0   90.0 s  denied, in at most 90.0 s",
        "a request of cost 1 now: denied, in 90.0 s",
    ]
    code, out, err = run(capsys, "reset", "--limiter", f"{name}:slots", "user:42")
    assert (code, err) == (0, "")
    assert out.endswith("full buckets for rate (burst 60), inflight (slots 2)\n")
    assert module.slots.peek("user:42").results[1].remaining == 2
    assert held[0].give() is False  # reset freed it


def test_limit_with_algorithm_builds_the_same_window_as_the_app(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STORAGE_URL_ENV, raising=False)
    url = f"sqlite:///{tmp_path / 'limits.db'}"
    app = RateLimiter("5/minute", store=url, algorithm="fixed-window")
    assert app.limits == (FixedWindow(5, 60),)
    for _ in range(2):
        app.check("user:42")
    argv = ["inspect", "--json", "--store", url, "--limit", "5/minute", "user:42"]
    code, out, err = run(capsys, *argv[:4], "--algorithm", "fixed-window", *argv[4:])
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["limiter"] == app.name == "5/60s:fixed"
    [limit] = report["limits"]
    assert (limit["algorithm"], limit["used"], limit["remaining"]) == ("fixed-window", 2, 3)
    assert 0 < limit["window_ends_in"] <= 60
    # The bucket of the same rate is another limiter, named apart: nothing stored.
    assert run(capsys, *argv)[0] == 3
    app.store.close()


def test_algorithm_is_a_choice_and_not_with_limiter(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "inspect", "--limit", "5/minute", "--algorithm", "moving", "k")
    assert code == 2 and "invalid choice: 'moving'" in err
    code, _, err = run(capsys, "inspect", "--limiter", "x:y", "--algorithm", "fixed-window", "k")
    assert code == 2 and "argument --algorithm: not with --limiter" in err
    code, _, err = run(capsys, "demo", "--algorithm", "sliding-window", "--burst", "3")
    assert code == 2 and "burst=3 does not apply to a window" in err


def test_the_demo_serves_a_window(start_demo) -> None:
    demo = start_demo("--rate", "3/hour", "--algorithm", "fixed-window")
    assert " at 3/hour fixed window (open it" in demo.lines[0]
    assert demo.lines[3] == (
        "expect: 200 200 200 429 429 429 (all back when the 60 min window of the clock "
        "ends; a loop across its end shows more 200s)\n"
    )
    with demo.client() as client:
        page = client.get("/").text
        codes = [client.get("/api/").status_code for _ in range(4)]
        bucket = client.get("/api/bucket").json()
    assert '<strong id="limit">3/hour fixed window</strong>' in page
    assert 'data-algorithm="fixed-window"' in page
    assert "Requests left in your window" in page and "{{" not in page
    assert codes[:3] == [200, 200, 200]  # (a 4th passes only across an hour's end)
    limit = bucket["limits"][0]
    assert (bucket["algorithm"], bucket["burst"], limit["count"]) == ("fixed-window", 3, 3)
    assert bucket["tokens"] == limit["remaining"] and bucket["full"] is (limit["used"] == 0)
    assert demo.stop() == "limiter demo: stopped\n"
