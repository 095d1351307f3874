"""``max_wait``/``max_queue`` pass through every integration: Flask, FastAPI, Django."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("flask")
pytest.importorskip("fastapi")
pytest.importorskip("django")

import flask
from django.core.exceptions import ImproperlyConfigured
from fastapi import FastAPI
from starlette.testclient import TestClient

import helpers.django_settings  # noqa: F401  (configures Django, once per process)
from limiter import ManualClock
from limiter.integrations._django_settings import Config
from limiter.integrations.fastapi import RateLimit as FastAPIRateLimit
from limiter.integrations.flask import RateLimit as FlaskRateLimit


def test_flask_waits_instead_of_refusing() -> None:
    clock = ManualClock()
    app = flask.Flask(__name__)
    app.add_url_rule("/", "hello", lambda: "hello")
    FlaskRateLimit(app, default="2/second", clock=clock, max_wait=1.0, max_queue=4)
    client = app.test_client()
    assert [client.get("/").status_code for _ in range(4)] == [200] * 4
    assert clock.now() == 1.0
    with pytest.raises(ValueError, match="max_queue given without max_wait"):
        FlaskRateLimit(default="2/second", max_queue=4)


def test_fastapi_waits_without_blocking_the_loop() -> None:
    clock = ManualClock()
    app = FastAPI()

    @app.get("/")
    async def hello() -> str:
        return "hello"

    FastAPIRateLimit(app, default="2/second", clock=clock, max_wait=1.0)
    client = TestClient(app)
    assert [client.get("/").status_code for _ in range(3)] == [200] * 3
    assert clock.now() == 0.5
    with pytest.raises(TypeError, match="max_wait"):
        FastAPIRateLimit(FastAPI(), default="2/second", max_wait="1")


def test_django_settings_take_max_wait_and_refuse_a_bad_one() -> None:
    config = Config({"default": "2/second", "max_wait": 2, "max_queue": 5})
    assert config.default is not None and config.default.waits is not None
    assert (config.default.waits.max_wait, config.default.waits.max_queue) == (2.0, 5)
    with pytest.raises(ImproperlyConfigured, match=r"max_wait.*-1"):
        Config({"default": "2/second", "max_wait": -1})


def _refusal(where: str) -> str:
    """The whole refusal of the test's lockout limiter waiting under ``where``, as a pattern."""
    return (
        "^"
        + re.escape(
            f"'0.0833333/s:5+lockout:3/60s:600s' has a lockout: waiting for a turn under {where} "
            "would count each refusal on the way as a breach and lock the caller out; a limiter "
            "with a lockout must refuse at once: drop max_wait there, or wait on a limiter "
            "without a lockout"
        )
        + "$"
    )


def test_fastapi_refuses_a_lockout_limiter_that_would_wait_naming_its_max_wait() -> None:
    from limiter import Lockout, RateLimiter

    # It said "waiting for tokens (acquire, throttle)", which the app never called.
    locking = RateLimiter("5/minute", lockout=Lockout(3, within=60, duration=600))
    with pytest.raises(TypeError, match=_refusal("RateLimit(max_wait=1.0)")):
        FastAPIRateLimit(FastAPI(), default=locking, max_wait=1.0)
    rl = FastAPIRateLimit(FastAPI(), default="2/second", max_wait=1.0)
    with pytest.raises(TypeError, match=_refusal("RateLimit(max_wait=1.0)")):
        rl.limit(locking)


def test_flask_refuses_a_lockout_limiter_that_would_wait_when_it_decorates() -> None:
    from limiter import Lockout, RateLimiter

    app = flask.Flask(__name__)
    rl = FlaskRateLimit(app, default="2/second", max_wait=1.0)
    locking = RateLimiter("5/minute", lockout=Lockout(3, within=60, duration=600))
    with pytest.raises(TypeError, match=_refusal("RateLimit(max_wait=1.0)")):
        rl.limit(locking)
    # The default limiter: refused when RateLimit is built, before any app.
    with pytest.raises(TypeError, match=_refusal("RateLimit(max_wait=1.0)")):
        FlaskRateLimit(default=locking, max_wait=1.0)
    assert FlaskRateLimit(app=None, default="2/second").limit(locking)  # no max_wait: fine


def test_django_refuses_a_lockout_limiter_that_would_wait_when_it_decorates() -> None:
    from django.http import HttpResponse
    from django.test import RequestFactory, override_settings

    from limiter import Lockout, RateLimiter
    from limiter.integrations.django import ratelimit

    def view(request: object) -> HttpResponse:
        return HttpResponse("ok")

    locking = RateLimiter("5/minute", lockout=Lockout(3, within=60, duration=600))
    # Refused here, where it was refused at the view's first request (a 500).
    shown = _refusal("settings.RATE_LIMIT['max_wait'] = 1.0")
    with override_settings(RATE_LIMIT={"max_wait": 1.0}), pytest.raises(TypeError, match=shown):
        ratelimit(locking)
    limited = ratelimit(locking)(view)  # no max_wait: fine
    assert limited(RequestFactory().get("/")).status_code == 200
    # Settings given max_wait after the decoration: refused when served, as before.
    refused = pytest.raises(TypeError, match=_refusal("RateLimitMiddleware(max_wait=1.0)"))
    with override_settings(RATE_LIMIT={"max_wait": 1.0}), refused:
        limited(RequestFactory().get("/"))
