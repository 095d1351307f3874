"""Issue 26: the Flask integration holds a slot until the response is closed
(streamed or not) and gives it back when the view raises. FastAPI and Django:
AdapterConformance's slot cases; real servers: tests/adapters/test_slots_servers.py."""

from __future__ import annotations

from typing import Iterator

import pytest
from flask import Flask, Response

from limiter import Concurrency, ManualClock, RateLimiter
from limiter.integrations.flask import RateLimit
from limiter.testing._shared import T0


@pytest.fixture
def site() -> tuple:
    slots = RateLimiter(Concurrency(1, lease=30), clock=ManualClock(T0))
    app = Flask(__name__)
    app.testing = True  # a view's exception propagates: no after_request hook runs
    rl = RateLimit(app, key_func=lambda r: "k")

    @app.route("/stream")
    @rl.limit(slots)
    def stream() -> Response:
        def chunks() -> Iterator[bytes]:
            yield b"first"
            yield b"last"

        return Response(chunks())

    @app.route("/boom")
    @rl.limit(slots)
    def boom() -> str:
        raise RuntimeError("the view failed")

    return app.test_client(), slots


def test_flask_holds_the_slot_until_the_streamed_response_is_closed(site: tuple) -> None:
    client, slots = site
    with client.get("/stream") as response:
        assert response.status_code == 200
        assert slots.peek("k").remaining == 0
        with client.get("/stream") as refused:
            assert refused.status_code == 429
        assert response.get_data() == b"firstlast"
        assert slots.peek("k").remaining == 0  # all sent, not yet closed
    assert slots.peek("k").remaining == 1


def test_flask_a_view_that_raises_gives_the_slot_back(site: tuple) -> None:
    client, slots = site
    with pytest.raises(RuntimeError):
        client.get("/boom")
    assert slots.peek("k").remaining == 1
