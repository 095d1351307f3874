"""Start-up checks of the framework integrations (issue 22, item 8).

A store that does not answer (a Redis URL on a dead loopback port) stops the
app from starting, with a message naming the store and never its password.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Iterator

import pytest

from limiter.store import StoreError

PASSWORD = "s3cret-pw"


@pytest.fixture
def dead_url() -> Iterator[str]:
    """A Redis URL with a password on a loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield f"redis://app:{PASSWORD}@127.0.0.1:{port}/0"


def shown(url: str) -> str:
    return url.replace(PASSWORD, "***")


# -- FastAPI ------------------------------------------------------------------------------


def fastapi_app(url: str, **options: object) -> object:
    from fastapi import Depends, FastAPI

    from limiter.integrations.fastapi import RateLimit

    app = FastAPI()
    rl = RateLimit(app, store=url, **options)  # type: ignore[arg-type]

    @app.get("/", dependencies=[Depends(rl.limit("5/minute"))])
    async def index() -> dict:  # type: ignore[type-arg]
        return {}

    return app


@pytest.mark.usefixtures("current_loop")  # Python 3.9: redis.asyncio asks for the current loop
def test_fastapi_startup_fails_on_a_dead_store_naming_it_without_the_password(
    dead_url: str,
) -> None:
    from fastapi.testclient import TestClient

    app = fastapi_app(dead_url)
    with pytest.raises(StoreError) as caught, TestClient(app):  # type: ignore[arg-type]
        pass
    message = str(caught.value)
    assert message.startswith(f"RateLimit: the store {shown(dead_url)} does not answer at start-up")
    assert "check_store=False" in message
    assert PASSWORD not in message


def test_fastapi_under_uvicorn_does_not_start_on_a_dead_store(
    dead_url: str, caplog: pytest.LogCaptureFixture, current_loop: asyncio.AbstractEventLoop
) -> None:
    # The app is built under current_loop and served on it: on Python 3.9 the
    # redis.asyncio client's locks belong to the loop current when it was built.
    import uvicorn

    config = uvicorn.Config(fastapi_app(dead_url), lifespan="on", log_config=None)
    server = uvicorn.Server(config)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        # Straight to uvicorn's logger: a uvicorn run before may have stopped it propagating.
        uvicorn_log = logging.getLogger("uvicorn.error")
        uvicorn_log.addHandler(caplog.handler)
        try:
            # "Application startup failed": uvicorn exits 3 (older ones, as on
            # Python 3.9, return without serving instead).
            current_loop.run_until_complete(server.serve(sockets=[sock]))
        except SystemExit as exc:
            assert exc.code == 3
        finally:
            uvicorn_log.removeHandler(caplog.handler)
    assert not server.started
    assert f"the store {shown(dead_url)} does not answer at start-up" in caplog.text
    assert PASSWORD not in caplog.text


@pytest.mark.usefixtures("current_loop")  # Python 3.9: redis.asyncio asks for the current loop
def test_fastapi_check_store_false_starts_without_the_store(dead_url: str) -> None:
    from fastapi.testclient import TestClient

    with TestClient(fastapi_app(dead_url, check_store=False)) as client:  # type: ignore[arg-type]
        response = client.get("/")
    assert response.status_code == 200  # on_error="allow": no headers, as before
    assert "X-RateLimit-Limit" not in response.headers


# -- Flask --------------------------------------------------------------------------------


def test_flask_init_app_fails_on_a_dead_store_naming_it_without_the_password(
    dead_url: str,
) -> None:
    from flask import Flask

    from limiter.integrations.flask import RateLimit

    with pytest.raises(StoreError) as caught:
        RateLimit(Flask("dead"), store=dead_url)
    message = str(caught.value)
    assert message.startswith(
        f"RateLimit.init_app: the store {shown(dead_url)} does not answer at start-up"
    )
    assert PASSWORD not in message

    app = Flask("dead-config")
    app.config["RATELIMIT_STORAGE_URL"] = dead_url
    with pytest.raises(StoreError, match="does not answer at start-up") as caught:
        RateLimit(app)
    assert shown(dead_url) in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_flask_check_store_false_and_a_fallback_start(
    dead_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from flask import Flask

    from limiter import MemoryStore
    from limiter.backends.redis import RedisStore
    from limiter.integrations.flask import RateLimit

    RateLimit(Flask("unchecked"), store=dead_url, check_store=False)
    import redis

    store = RedisStore(redis.Redis.from_url(dead_url), fallback=MemoryStore())
    with caplog.at_level(logging.WARNING, logger="limiter.adapters"):
        RateLimit(Flask("fallback"), store=store)
    assert "its fallback answers until it does" in caplog.text
    assert PASSWORD not in caplog.text


def test_flask_with_a_store_that_answers_starts() -> None:
    from flask import Flask

    from limiter.integrations.flask import RateLimit

    app = Flask("memory")
    RateLimit(app, default="1/minute")  # a MemoryStore has no ping: nothing to check
    assert app.test_client().get("/").status_code == 404


# -- Django -------------------------------------------------------------------------------


def test_django_start_up_fails_on_a_dead_store_naming_it_without_the_password(
    dead_url: str,
) -> None:
    from django.core.handlers.wsgi import WSGIHandler
    from django.test import override_settings

    import helpers.django_settings  # noqa: F401  (configures Django)

    middleware = ["limiter.integrations.django.RateLimitMiddleware"]
    with override_settings(MIDDLEWARE=middleware, RATE_LIMIT={"store": dead_url}):
        with pytest.raises(StoreError) as caught:
            WSGIHandler()  # builds the middleware, as a server does at start-up
        with override_settings(RATE_LIMIT={"store": dead_url, "check_store": False}):
            WSGIHandler()
    message = str(caught.value)
    assert message.startswith(
        f"RateLimitMiddleware: the store {shown(dead_url)} does not answer at start-up"
    )
    assert PASSWORD not in message
