"""Mistakes a migrant from flask-limiter, slowapi or django-ratelimit makes (issue 22,
item 9): each fails at decoration or start-up with an error naming the fix."""

from __future__ import annotations

from typing import Any, ClassVar, List

import pytest
from flask import Flask

from limiter import ManualClock
from limiter.integrations.flask import RateLimit as FlaskRateLimit


def test_flask_limit_of_a_rate_limit_never_set_up_fails_loudly() -> None:
    rl = FlaskRateLimit()  # init_app(app) forgotten
    app = Flask("forgotten")
    app.testing = True  # exceptions reach the test instead of a 500 page

    @app.get("/login")
    @rl.limit("1/minute")
    def login() -> str:
        return "ok"

    with pytest.raises(RuntimeError) as caught:
        app.test_client().get("/login")
    message = str(caught.value)
    assert "'login' has rl.limit(...)" in message
    assert "call rl.init_app(app)" in message


def test_flask_limit_set_up_later_works_and_stops_checking() -> None:
    rl = FlaskRateLimit(clock=ManualClock())
    app = Flask("factory")

    @app.get("/login")
    @rl.limit("1/minute")
    def login() -> str:
        return "ok"

    rl.init_app(app)  # the application factory's order
    client = app.test_client()
    assert [client.get("/login").status_code for _ in range(2)] == [200, 429]
    assert not rl._watching  # disconnected after the first request


def test_a_bare_flask_limit_fails_at_decoration() -> None:
    rl = FlaskRateLimit()
    with pytest.raises(TypeError) as caught:

        @rl.limit  # type: ignore[arg-type]
        def index() -> str:
            return "ok"

    assert "a bare @rl.limit or @ratelimit needs one" in str(caught.value)
    assert '@rl.limit("5/minute")' in str(caught.value)
    assert "index()" in str(caught.value)


def test_a_bare_flask_limit_on_a_view_with_a_url_argument_fails_its_first_request() -> None:
    app = Flask("bare")
    app.testing = True
    rl = FlaskRateLimit(app)

    @app.get("/users/<user>")
    @rl.limit  # type: ignore[arg-type]
    def user(user: str) -> str:  # one argument: it could be a rate function
        return user

    with pytest.raises(TypeError) as caught:
        app.test_client().get("/users/ann")
    assert str(caught.value) == (
        "the view 'test_a_bare_flask_limit_on_a_view_with_a_url_argument_fails_its_first_request."
        "<locals>.user' is under a bare @rl.limit: the rate comes first, as in "
        '@rl.limit("5/minute")'
    )


def test_a_bare_django_ratelimit_is_a_system_check_error_and_a_clear_request_error() -> None:
    from django.core import checks
    from django.test import RequestFactory, override_settings
    from django.urls import path

    import helpers.django_settings  # noqa: F401  (configures Django)
    from limiter.integrations.django import ratelimit

    @ratelimit  # type: ignore[arg-type]
    def view(request: Any) -> Any:
        raise AssertionError("not reached")

    class urls:
        urlpatterns: ClassVar[List[Any]] = [path("bare", view)]  # type: ignore[arg-type]

    with override_settings(ROOT_URLCONF=urls):
        errors = [
            e for e in checks.run_checks(tags=[checks.Tags.urls]) if e.id.startswith("limiter")
        ]
    assert [e.id for e in errors] == ["limiter.E001"]
    assert "'bare' is @ratelimit without a rate" in errors[0].msg
    assert errors[0].hint == '@ratelimit needs a rate: write @ratelimit("5/minute")'
    with pytest.raises(TypeError, match=r'@ratelimit needs a rate: write @ratelimit\("5/minute"\)'):
        view(RequestFactory().get("/bare"))  # type: ignore[call-arg]


def get_remote_address() -> str:  # flask-limiter's key function: no argument
    return "127.0.0.1"


def test_a_key_func_without_the_request_argument_fails_at_construction() -> None:
    from limiter.integrations.fastapi import RateLimit as FastAPIRateLimit

    for build in (
        lambda: FlaskRateLimit(key_func=get_remote_address),
        lambda: FlaskRateLimit().limit("1/minute", key_func=get_remote_address),
        lambda: FastAPIRateLimit().limit("1/minute", key_func=get_remote_address),
    ):
        with pytest.raises(TypeError) as caught:
            build()
        message = str(caught.value)
        assert (
            "key_func must take the request (a limiter.RequestInfo) as its one argument" in message
        )
        assert "key_func=lambda request:" in message
        assert "get_remote_address()" in message
    FlaskRateLimit(key_func=len)  # a builtin's signature: accepted as it is


def test_a_deduct_when_of_the_response_fails_at_decoration() -> None:
    rl = FlaskRateLimit()
    with pytest.raises(TypeError) as caught:
        rl.limit("1/minute", deduct_when=lambda response: response.status_code >= 400)
    message = str(caught.value)
    assert message.startswith(
        "deduct_when gets the status code (an int): deduct_when=lambda status: status >= 400"
    )
    assert "takes 'response'" in message
    with pytest.raises(TypeError, match="deduct_when gets the status code"):
        rl.limit("1/minute", deduct_when=lambda: True)
    rl.limit("1/minute", deduct_when=lambda status: status >= 400)


def test_slowapi_decorator_style_on_a_fastapi_route_names_the_dependency_form() -> None:
    from fastapi import FastAPI

    from limiter.integrations.fastapi import RateLimit as FastAPIRateLimit

    app = FastAPI()
    rl = FastAPIRateLimit(app)
    with pytest.raises(TypeError) as caught:

        @app.get("/home")
        @rl.limit("5/minute")
        async def home() -> str:
            return "home"

    message = str(caught.value)
    assert "is a dependency, not a decorator" in message
    assert "dependencies=[Depends(rl.limit(...))]" in message


def test_a_list_of_rates_as_flask_limiter_writes_them_is_accepted() -> None:
    clock = ManualClock()
    app = Flask("quickstart")
    rl = FlaskRateLimit(app, default=["2 per minute", "1 per second"], clock=clock)

    @app.get("/")
    def index() -> str:
        return "ok"

    @app.get("/slow")
    @rl.limit(["1 per day"])
    def slow() -> str:
        return "slow"

    client = app.test_client()
    assert [client.get("/").status_code for _ in range(2)] == [200, 429]  # 1 per second
    clock.advance(1)
    assert client.get("/").status_code == 200
    clock.advance(1)
    assert client.get("/").status_code == 429  # 2 per minute
    assert [client.get("/slow").status_code for _ in range(2)] == [200, 429]
    with pytest.raises(TypeError) as caught:
        FlaskRateLimit(default=["2 per minute", 5])
    assert "'2/minute;1/second'" in str(caught.value)
