"""A cost a ``Concurrency`` policy cannot take (a slot is one unit) is refused when
Flask's, FastAPI's and Django's limits are declared, as by the adapters
(tests/adapters/test_adapter_slot_costs.py), not at a view's first request (a 500).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

pytest.importorskip("flask")
pytest.importorskip("fastapi")
pytest.importorskip("django")

import flask
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from fastapi import Depends, FastAPI
from starlette.testclient import TestClient

import helpers.django_settings  # noqa: F401  (configures Django, once per process)
from limiter import Concurrency, ManualClock, RateLimiter
from limiter.integrations._django_settings import Config
from limiter.integrations.django import ratelimit
from limiter.integrations.fastapi import RateLimit as FastAPIRateLimit
from limiter.integrations.flask import RateLimit as FlaskRateLimit
from limiter.testing._shared import T0

TAIL = "; hold more slots with more holders, and give the other policies their cost by name"


def slots_only() -> RateLimiter:
    return RateLimiter(Concurrency(1, lease=30), clock=ManualClock(T0), name="slots")


def refusal(value: str, policy: str = "default", limiter: str = "slots") -> str:
    return (
        f"limiter {limiter!r}: a slot is one unit: Concurrency policy {policy!r} takes "
        f"one per holder, not a cost of {value}{TAIL}"
    )


def refused(value: str, policy: str = "default", limiter: str = "slots") -> str:
    return "^" + re.escape(refusal(value, policy, limiter)) + "$"


def test_flask_refuses_the_cost_when_limit_decorates_and_when_the_default_is_built() -> None:
    rl = FlaskRateLimit(flask.Flask(__name__))
    # Decorated, then each request to the view raised this ValueError (a 500).
    with pytest.raises(ValueError, match=refused("2")):
        rl.limit(slots_only(), cost=2)
    mixed = RateLimiter({"rate": "5/second", "inflight": Concurrency(2)}, name="mixed")
    with pytest.raises(ValueError, match=refused("3", "inflight", "mixed")):
        rl.limit(mixed, cost={"rate": 1, "inflight": 3})
    assert rl.limit(slots_only(), cost=1) and rl.limit(mixed, cost=5)
    with pytest.raises(ValueError, match=refused("2")):
        FlaskRateLimit(default=slots_only(), cost=2)


def test_flask_a_cost_function_a_slot_cannot_take_is_a_500_naming_its_answer() -> None:
    app = flask.Flask(__name__)
    rl = FlaskRateLimit(app, key_func=lambda r: "k")

    @app.route("/")
    @rl.limit(slots_only(), cost=lambda r: 2)
    def view() -> str:
        return "ok"

    errors: list = []

    def record(sender: Any, exception: Exception, **extra: Any) -> None:
        errors.append(exception)

    flask.got_request_exception.connect(record, app)
    assert app.test_client().get("/").status_code == 500
    assert [str(e) for e in errors] == ["a cost function returned 2 for " + refusal("2")]


def test_fastapi_refuses_the_cost_of_the_default_and_of_a_limit_when_built() -> None:
    with pytest.raises(ValueError, match=refused("2")):
        FastAPIRateLimit(FastAPI(), default=slots_only(), cost=2)
    rl = FastAPIRateLimit(FastAPI())
    with pytest.raises(ValueError, match=refused("0")):
        rl.limit(slots_only(), cost=0)
    app = FastAPI()
    rl = FastAPIRateLimit(app)

    @app.get("/", dependencies=[Depends(rl.limit(slots_only(), cost=1))])
    async def view() -> str:
        return "ok"

    assert TestClient(app).get("/").status_code == 200


def test_django_refuses_the_cost_when_ratelimit_decorates_and_in_the_settings() -> None:
    with pytest.raises(ValueError, match=refused("2")):
        ratelimit(slots_only(), cost=2)

    def view(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    assert ratelimit(slots_only(), cost=1)(view)
    shown = "settings.RATE_LIMIT is invalid: " + refusal("2")
    with pytest.raises(ImproperlyConfigured, match="^" + re.escape(shown) + "$"):
        Config({"default": slots_only(), "cost": 2})
