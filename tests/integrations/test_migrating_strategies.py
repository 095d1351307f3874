"""docs/migrating.md, "Strategies": each ``strategy=`` of flask-limiter and slowapi
beside its port here, on the same request times, with the same statuses.

The peers (the ``full`` extra) run on ``time_machine`` (limits' memory
storage reads ``time.time()``); ours on a ``ManualClock``. Request times are
chosen off the windows' exact edges but for the fixed window's, where both
sides agree to the float (a window that opened at 10 s ends at 70 s sharp).
Every sequence is written out, so a peer that changes is seen.

``"2/minute"`` everywhere; ``BASE`` is a clock minute's start, so epoch
windows are ``[BASE + 60k, BASE + 60(k + 1))``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.responses import PlainTextResponse
from fastapi.testclient import TestClient
from flask import Flask

from helpers.needs import need_module
from limiter import FixedWindow, ManualClock, RateLimiter
from limiter.integrations import fastapi as ours_fastapi
from limiter.integrations import flask as ours_flask

BASE = 1_699_999_980.0  # a clock minute's start (T0 - 20 s)
OK, NO = 200, 429
#: ``get()``: one request to the limited route, its status.
Get = Callable[[], int]

# -- the peers, as their docs write them ----------------------------------------------


def flask_limiter_app(strategy: str) -> Get:
    need_module("flask_limiter")
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    app = Flask("peer")
    limiter = Limiter(get_remote_address, app=app, storage_uri="memory://", strategy=strategy)

    @app.route("/search")
    @limiter.limit("2/minute")
    def search() -> str:
        return "results"

    client = app.test_client()
    return lambda: client.get("/search").status_code


def slowapi_app(strategy: str) -> Get:
    need_module("slowapi")
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    limiter = Limiter(key_func=get_remote_address, storage_uri="memory://", strategy=strategy)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

    @app.get("/search")
    @limiter.limit("2/minute")
    async def search(request: Request) -> PlainTextResponse:
        return PlainTextResponse("results")

    client = TestClient(app)
    return lambda: client.get("/search").status_code


# -- the ports: the same route, limit and key (the client IP) --------------------------


def flask_port(clock: ManualClock, rate: Any, **options: Any) -> Get:
    app = Flask("port")
    rl = ours_flask.RateLimit(app, clock=clock)

    @app.route("/search")
    @rl.limit(rate, **options)
    def search() -> str:
        return "results"

    client = app.test_client()
    return lambda: client.get("/search").status_code


def fastapi_port(clock: ManualClock, rate: Any, **options: Any) -> Get:
    app = FastAPI()
    rl = ours_fastapi.RateLimit(app, clock=clock)

    @app.get("/search", dependencies=[Depends(rl.limit(rate, **options))])
    async def search() -> PlainTextResponse:
        return PlainTextResponse("results")

    client = TestClient(app)
    return lambda: client.get("/search").status_code


PEERS: Dict[str, Any] = {
    "flask-limiter": (flask_limiter_app, flask_port),
    "slowapi": (slowapi_app, fastapi_port),
}


def peer_statuses(get: Get, times: Sequence[float]) -> List[int]:
    import time_machine

    out = []
    # One travel for the whole sequence: between two travels the real clock (years
    # after BASE) would be back, and limits' expiry thread could drop every count.
    with time_machine.travel(BASE + times[0], tick=False) as traveller:
        for seconds in times:
            traveller.move_to(BASE + seconds)
            out.append(get())
    return out


def port_statuses(get: Get, clock: ManualClock, times: Sequence[float]) -> List[int]:
    out = []
    for seconds in times:
        clock.set(BASE + seconds)
        out.append(get())
    return out


def both(peer: str, strategy: str, times: Sequence[float], rate: Any, **options: Any) -> Any:
    """``(peer's statuses, ours)`` for ``times``; ``rate`` may need the clock (a function)."""
    peer_app, port = PEERS[peer]
    theirs = peer_statuses(peer_app(strategy), times)
    clock = ManualClock(BASE)
    if callable(rate):
        rate = rate(clock)
    ours = port_statuses(port(clock, rate, **options), clock, times)
    return theirs, ours


pytestmark = pytest.mark.parametrize("peer", list(PEERS))


# -- strategy="fixed-window" -> a FixedWindow, anchored at the first request ------------

#: Their window opens at the first request (10 s) and ends 60 s later, sharp.
FIXED_TIMES = [10, 20, 30, 65, 70, 71, 72, 125, 130]
FIXED = [OK, OK, NO, NO, OK, OK, NO, NO, OK]


def test_fixed_window_is_a_first_request_fixed_window(peer: str) -> None:
    theirs, ours = both(
        peer,
        "fixed-window",
        FIXED_TIMES,
        lambda clock: RateLimiter(FixedWindow(2, 60, anchor="first"), clock=clock),
    )
    assert theirs == ours == FIXED


def test_fixed_window_s_epoch_default_counts_per_clock_minute(peer: str) -> None:
    """``algorithm="fixed-window"``: the clock's minutes, as Envoy and Kong count."""
    theirs, ours = both(peer, "fixed-window", FIXED_TIMES, "2/minute", algorithm="fixed-window")
    assert theirs == FIXED
    # 65 s is in the next clock minute (a new count), and so on from there.
    assert ours == [OK, OK, NO, OK, OK, NO, NO, OK, OK]


# -- strategy="sliding-window-counter" -> algorithm="sliding-window" ---------------------

SLIDING_TIMES = [10.5, 20.5, 30.5, 60.5, 61.5, 90.5, 100.5, 150.5, 151.5, 152.5]
# At 60.5 s the 2 of the first minute weigh 2 x 59.5/60: one more fits; at
# 90.5 s they weigh 0.98 beside the 1 of this minute; at 150.5 s, 2 x 0.49.
SLIDING = [OK, OK, NO, OK, NO, OK, NO, OK, OK, NO]


def test_sliding_window_counter_is_the_sliding_window(peer: str) -> None:
    theirs, ours = both(
        peer, "sliding-window-counter", SLIDING_TIMES, "2/minute", algorithm="sliding-window"
    )
    assert theirs == ours == SLIDING


# -- strategy="moving-window" -> the sliding window, an estimate of it -------------------

MOVING_TIMES = [10.5, 20.5, 30.5, 71, 72, 178.5, 179.5, 180.5, 181.5]
EDGE = MOVING_TIMES.index(180.5)


def test_moving_window_agrees_but_at_a_burst_across_a_window_s_edge(peer: str) -> None:
    theirs, ours = both(peer, "moving-window", MOVING_TIMES, "2/minute", algorithm="sliding-window")
    assert theirs == [OK, OK, NO, OK, NO, OK, OK, NO, NO]
    # The one difference: 2 admitted at 178.5 and 179.5 s, at the end of a
    # minute. The moving window keeps their times: a third at 180.5 s makes 3
    # within 60 s, refused. The counter keeps only "2 in the previous minute"
    # and weighs them by the share of it still in the last 60 s (59.5/60):
    # 1.98, rounded down to 1, so it lets one more in.
    assert ours == [OK, OK, NO, OK, NO, OK, OK, OK, NO]
    assert [i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b] == [EDGE]
