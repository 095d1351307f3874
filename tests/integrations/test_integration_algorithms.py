"""``algorithm=`` in the Flask, FastAPI and Django integrations: window routes, end to end.

Each framework serves ``/fixed`` (``"2/minute"`` as a ``FixedWindow``) and
``/sliding`` (as a ``SlidingWindow``), and ``/default`` under the default.
The same requests at the same ``ManualClock`` times give the same statuses
and exact headers in all three. ``T0`` is 20 s into a clock minute, so the
current window ends at ``T0 + 40``.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Dict, Iterator, List, Optional, Tuple

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import path
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from flask import Flask

import helpers.django_settings  # noqa: F401  (configures Django, once per process)
from limiter import ManualClock, RateLimiter
from limiter.integrations import django as django_integration
from limiter.integrations import fastapi as fastapi_integration
from limiter.integrations import flask as flask_integration
from limiter.integrations.common import RouteLimit
from limiter.testing import T0

#: ``get(path) -> (status, headers)``, headers as a dict with lower-case names.
Get = Callable[[str], Tuple[int, Dict[str, str]]]
RATE_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")
RATE_HEADERS += ("RateLimit-Policy", "RateLimit")


@pytest.fixture(autouse=True)
def _no_storage_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIMITER_STORAGE_URL", raising=False)


def lowered(headers: Any) -> Dict[str, str]:
    return {name.lower(): value for name, value in headers}


def x(remaining: int, reset_at: float, retry: Optional[int] = None) -> Dict[str, str]:
    headers = {
        "X-RateLimit-Limit": "2",
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset": str(int(reset_at)),
    }
    if retry is not None:
        headers["Retry-After"] = str(retry)
    return headers


#: (seconds after T0, status, headers) for /fixed: two per clock minute, the
#: minute [T0 - 20, T0 + 40) then [T0 + 40, T0 + 100).
FIXED = [
    (0, 200, x(1, T0 + 40)),
    (0, 200, x(0, T0 + 40)),
    (0, 429, x(0, T0 + 40, retry=40)),  # the window's end
    (40, 200, x(1, T0 + 100)),  # a new window: two more at once
    (40, 200, x(0, T0 + 100)),
    (40, 429, x(0, T0 + 100, retry=60)),
    (70, 429, x(0, T0 + 100, retry=30)),
]
#: The same for /sliding: the previous minute's 2 still weigh on the next one,
#: so it lets one in at T0 + 40 and the next at T0 + 70. Reset: when nothing
#: is counted any more (the end of the window after the current one).
SLIDING = [
    (0, 200, x(1, T0 + 100)),
    (0, 200, x(0, T0 + 100)),
    (0, 429, x(0, T0 + 100, retry=40)),  # when 2 x weight + 0 falls below 2
    (40, 200, x(0, T0 + 160)),  # 2 x 0.99... + 1: floor 2, nothing left
    (40, 429, x(0, T0 + 160, retry=30)),  # 2 x weight + 1 < 2 once weight < 1/2
    (70, 200, x(0, T0 + 160)),
]


def run(get: Get, clock: ManualClock, route: str, table: List[Any]) -> None:
    for seconds, status, headers in table:
        clock.set(T0 + seconds)
        got_status, got = get(route)
        shown = {name: got[name.lower()] for name in RATE_HEADERS if name.lower() in got}
        assert (seconds, got_status, shown) == (seconds, status, headers)


# -- the three frameworks, each with /fixed, /sliding and /default -----------------------


def flask_client(app: Flask) -> Get:
    client = app.test_client()

    def get(route: str) -> Tuple[int, Dict[str, str]]:
        response = client.get(route)
        return response.status_code, lowered(response.headers.items())

    return get


def flask_get(clock: ManualClock, **options: Any) -> Get:
    app = Flask(__name__)
    rl = flask_integration.RateLimit(app, clock=clock, **options)

    @app.route("/fixed")
    @rl.limit("2/minute", algorithm="fixed-window")
    def fixed() -> str:
        return "fixed"

    @app.route("/sliding")
    @rl.limit("2/minute", algorithm="sliding-window")
    def sliding() -> str:
        return "sliding"

    @app.route("/default")
    def default() -> str:
        return "default"

    @app.route("/bucket")
    @rl.limit("2/minute", algorithm="token-bucket")
    def bucket() -> str:
        return "bucket"

    return flask_client(app)


def fastapi_get(clock: ManualClock, **options: Any) -> Get:
    app = FastAPI()
    rl = fastapi_integration.RateLimit(app, clock=clock, **options)

    @app.get("/fixed", dependencies=[Depends(rl.limit("2/minute", algorithm="fixed-window"))])
    async def fixed() -> str:
        return "fixed"

    @app.get("/sliding", dependencies=[Depends(rl.limit("2/minute", algorithm="sliding-window"))])
    async def sliding() -> str:
        return "sliding"

    @app.get("/default")
    async def default() -> str:
        return "default"

    @app.get("/bucket", dependencies=[Depends(rl.limit("2/minute", algorithm="token-bucket"))])
    async def bucket() -> str:
        return "bucket"

    client = TestClient(app)

    def get(route: str) -> Tuple[int, Dict[str, str]]:
        response = client.get(route)
        return response.status_code, lowered(response.headers.items())

    return get


@django_integration.ratelimit("2/minute", algorithm="fixed-window")
def django_fixed(request: Any) -> HttpResponse:
    return HttpResponse(b"fixed")


@django_integration.ratelimit("2/minute", algorithm="sliding-window")
def django_sliding(request: Any) -> HttpResponse:
    return HttpResponse(b"sliding")


@django_integration.ratelimit("2/minute", algorithm="token-bucket")
def django_bucket(request: Any) -> HttpResponse:
    return HttpResponse(b"bucket")


def django_default(request: Any) -> HttpResponse:
    return HttpResponse(b"default")


class window_urls:
    urlpatterns: ClassVar[List[Any]] = [
        path("fixed", django_fixed),
        path("sliding", django_sliding),
        path("default", django_default),
        path("bucket", django_bucket),
    ]


def django_get(clock: ManualClock, **options: Any) -> Get:
    # Settings in place for the test's whole body: the integration is rebuilt
    # from them (a new memory store) when they change.
    settings = override_settings(
        ROOT_URLCONF=window_urls,
        MIDDLEWARE=["limiter.integrations.django.RateLimitMiddleware"],
        RATE_LIMIT={"clock": clock, **options},
    )
    settings.enable()
    client = Client()

    def get(route: str) -> Tuple[int, Dict[str, str]]:
        response = client.get("/" + route.lstrip("/"))
        return response.status_code, lowered(response.headers.items())

    get.settings = settings  # type: ignore[attr-defined]
    return get


@pytest.fixture(params=["flask", "fastapi", "django"])
def app_for(request: pytest.FixtureRequest) -> Iterator[Callable[..., Get]]:
    """``app_for(clock, **options)``: ``get`` on a fresh app of the framework."""
    made: List[Any] = []

    def make(clock: ManualClock, **options: Any) -> Get:
        maker = {"flask": flask_get, "fastapi": fastapi_get, "django": django_get}
        get = maker[request.param](clock, **options)
        made.append(get)
        return get

    yield make
    for get in made:
        settings = getattr(get, "settings", None)
        if settings is not None:
            settings.disable()


def test_a_fixed_window_route(app_for: Any) -> None:
    clock = ManualClock(T0)
    run(app_for(clock), clock, "/fixed", FIXED)


def test_a_sliding_window_route(app_for: Any) -> None:
    clock = ManualClock(T0)
    run(app_for(clock), clock, "/sliding", SLIDING)


def test_the_routes_keep_apart_and_a_token_bucket_is_still_one(app_for: Any) -> None:
    clock = ManualClock(T0)
    get = app_for(clock)
    for route in ("/fixed", "/sliding", "/bucket"):
        assert [get(route)[0] for _ in range(3)] == [200, 200, 429], route
    clock.set(T0 + 30)  # the bucket: a token every 30 s; the windows: not before T0 + 40
    assert [get(route)[0] for route in ("/bucket", "/fixed", "/sliding")] == [200, 429, 429]


def test_the_draft_headers_of_a_window_route(app_for: Any) -> None:
    clock = ManualClock(T0)
    get = app_for(clock, header_style="draft")
    status, headers = get("/fixed")
    assert status == 200
    assert headers["ratelimit-policy"] == '"2/minute";q=2;w=60'
    assert headers["ratelimit"] == '"2/minute";r=1;t=40'  # all back at the window's end
    status, headers = get("/sliding")
    assert headers["ratelimit-policy"] == '"2/minute";q=2;w=60'
    # t is reset_after: nothing counted from T0 + 100 (see docs/headers.md)
    assert headers["ratelimit"] == '"2/minute";r=1;t=100'


def test_the_integration_algorithm_is_the_default_s_and_the_limits_without_one(
    app_for: Any,
) -> None:
    clock = ManualClock(T0)
    get = app_for(clock, default="2/minute", algorithm="sliding-window")
    run(get, clock, "/default", SLIDING)
    # Limits that name an algorithm keep theirs.
    clock.set(T0)
    assert [get("/fixed")[0] for _ in range(3)] == [200, 200, 429]
    clock.set(T0 + 40)
    assert [get("/fixed")[0] for _ in range(3)] == [200, 200, 429]


def test_a_fixed_window_default(app_for: Any) -> None:
    clock = ManualClock(T0)
    run(app_for(clock, default="2/minute", algorithm="fixed-window"), clock, "/default", FIXED)


# -- mistakes, caught when the limit is written -------------------------------------------

BAD = (
    "algorithm must be one of 'token-bucket', 'fixed-window', 'sliding-window', got 'moving-window'"
)


def test_a_bad_algorithm_is_a_value_error_naming_it_at_decoration() -> None:
    flask_rl = flask_integration.RateLimit()
    with pytest.raises(ValueError, match=BAD):
        flask_rl.limit("2/minute", algorithm="moving-window")
    fastapi_rl = fastapi_integration.RateLimit()
    with pytest.raises(ValueError, match=BAD):
        fastapi_rl.limit("2/minute", algorithm="moving-window")
    with pytest.raises(ValueError, match=BAD):
        django_integration.ratelimit("2/minute", algorithm="moving-window")
    with pytest.raises(ValueError, match=BAD):
        RouteLimit("2/minute", scope="s", algorithm="moving-window")
    with pytest.raises(TypeError, match="algorithm must be a str, got 1"):
        flask_rl.limit("2/minute", algorithm=1)  # type: ignore[arg-type]


def test_a_bad_algorithm_of_the_integration_fails_at_start_up() -> None:
    with pytest.raises(ValueError, match=BAD):
        flask_integration.RateLimit(algorithm="moving-window")
    with pytest.raises(ValueError, match=BAD):
        fastapi_integration.RateLimit(algorithm="moving-window")
    with (
        override_settings(RATE_LIMIT={"algorithm": "moving-window"}),
        pytest.raises(ImproperlyConfigured, match=r"RATE_LIMIT\['algorithm'\]: " + BAD),
    ):
        django_integration.RateLimitMiddleware(lambda request: HttpResponse(b""))


def test_an_algorithm_for_a_rate_limiter_is_refused_it_has_its_own() -> None:
    own = RateLimiter("2/minute", algorithm="fixed-window")
    with pytest.raises(ValueError, match=r"algorithm='sliding-window' applies to rate strings"):
        flask_integration.RateLimit().limit(own, algorithm="sliding-window")
    # Without algorithm=, its own policies apply, whatever the integration's algorithm.
    clock = ManualClock(T0)
    app = FastAPI()
    rl = fastapi_integration.RateLimit(app, clock=clock, algorithm="sliding-window")
    limited = RateLimiter("2/minute", algorithm="fixed-window", clock=clock)

    @app.get("/own", dependencies=[Depends(rl.limit(limited))])
    async def own_route() -> str:
        return "own"

    client = TestClient(app)
    assert [client.get("/own").status_code for _ in range(3)] == [200, 200, 429]
    clock.set(T0 + 40)  # a fixed window: two more at once (a sliding one: one)
    assert [client.get("/own").status_code for _ in range(3)] == [200, 200, 429]


def test_flask_reads_ratelimit_algorithm_and_names_flask_limiter_s_strategy_key() -> None:
    clock = ManualClock(T0)
    app = Flask(__name__)
    app.config.update(RATELIMIT_DEFAULT="2/minute", RATELIMIT_ALGORITHM="fixed-window")
    flask_integration.RateLimit(app, clock=clock)
    app.add_url_rule("/", "root", lambda: "root")
    run(flask_client(app), clock, "/", FIXED)
    bad = Flask(__name__)
    bad.config["RATELIMIT_ALGORITHM"] = "moving-window"
    with pytest.raises(ValueError, match="RATELIMIT_ALGORITHM must be one of"):
        flask_integration.RateLimit(bad)
    peer = Flask(__name__)
    peer.config["RATELIMIT_STRATEGY"] = "fixed-window"
    with pytest.raises(
        ValueError, match="flask-limiter's RATELIMIT_STRATEGY is RATELIMIT_ALGORITHM here"
    ):
        flask_integration.RateLimit(peer)
    # An argument wins over the config.
    both = Flask(__name__)
    both.config.update(RATELIMIT_DEFAULT="2/minute", RATELIMIT_ALGORITHM="moving-window")
    flask_integration.RateLimit(both, algorithm="fixed-window")  # the config is not read


def test_a_rate_function_s_strings_take_the_limit_s_algorithm() -> None:
    clock = ManualClock(T0)
    app = Flask(__name__)
    rl = flask_integration.RateLimit(app, clock=clock)

    @app.route("/plan")
    @rl.limit(lambda request: "2/minute", algorithm="fixed-window")
    def plan() -> str:
        return "plan"

    run(flask_client(app), clock, "/plan", FIXED)
