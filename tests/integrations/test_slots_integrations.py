"""Issue 26: the Flask integration holds a slot until the response is closed
(streamed or not) and gives it back when the view, a hook or a later limit
raises; Django gives it back when an async request is cancelled. FastAPI and
Django otherwise: AdapterConformance's slot cases; real servers:
tests/adapters/test_slots_servers.py."""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import TYPE_CHECKING, Awaitable, Callable, Iterator, List

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.test import RequestFactory, override_settings
from flask import Flask, Response

import helpers.django_settings  # noqa: F401  (configures Django, once per process)
from limiter import Concurrency, ManualClock, RateLimiter
from limiter.integrations.django import RateLimitMiddleware, ratelimit
from limiter.integrations.flask import RateLimit
from limiter.testing._shared import T0

if TYPE_CHECKING:
    from helpers.redis_servers import RedisServer


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


def test_flask_an_after_request_hook_that_raises_gives_the_slot_back() -> None:
    # A hook registered before init_app runs after the limiter's: when it raises,
    # Flask answers a 500 and drops the response the slot's release was put on.
    slots = RateLimiter(Concurrency(1, lease=30), clock=ManualClock(T0))
    app = Flask(__name__)

    @app.after_request
    def broken(response: Response) -> Response:
        raise RuntimeError("a hook failed")

    rl = RateLimit(app, key_func=lambda r: "k")

    @app.route("/")
    @rl.limit(slots)
    def index() -> str:
        return "ok"

    with app.test_client().get("/") as response:
        assert response.status_code == 500
    assert slots.peek("k").remaining == 1


def test_flask_a_later_limit_that_raises_gives_the_earlier_slot_back() -> None:
    slots = RateLimiter(Concurrency(1, lease=30), clock=ManualClock(T0))
    app = Flask(__name__)
    app.testing = True
    rl = RateLimit(app, key_func=lambda r: "k")

    def broken_key(request: object) -> str:
        raise LookupError("no such client")

    @app.route("/")
    @rl.limit(slots)
    @rl.limit("10/second", key_func=broken_key)
    def index() -> str:
        return "ok"

    with pytest.raises(LookupError):
        app.test_client().get("/")
    assert slots.peek("k").remaining == 1


@pytest.mark.parametrize("where", ["request-after", "request-before", "appcontext"])
@pytest.mark.parametrize("path", ["/", "/stream", "/boom"])
def test_flask_a_teardown_handler_that_raises_gives_the_slot_back(path: str, where: str) -> None:
    # When a teardown handler raises, Flask runs no other teardown handler and
    # the server never gets the response whose close would give the slot back:
    # the slot was held for its whole lease (the next request a 429).  Request
    # handlers run in reverse order of registration (one registered after
    # init_app runs before the limiter's), app-context ones after them all.
    slots = RateLimiter(Concurrency(1, lease=30), clock=ManualClock(T0))
    app = Flask(__name__)
    failing = [True]

    def broken(error: object) -> None:
        if failing[0]:
            raise RuntimeError("a teardown handler failed")

    if where == "request-before":
        app.teardown_request(broken)
    elif where == "appcontext":
        app.teardown_appcontext(broken)
    rl = RateLimit(app, key_func=lambda r: "k")
    if where == "request-after":
        app.teardown_request(broken)

    @app.route("/")
    @rl.limit(slots)
    def index() -> str:
        return "ok"

    @app.route("/stream")
    @rl.limit(slots)
    def stream() -> Response:
        return Response(iter([b"first", b"last"]))

    @app.route("/boom")
    @rl.limit(slots)
    def boom() -> str:
        raise LookupError("the view failed")

    client = app.test_client()
    with pytest.raises(RuntimeError, match="a teardown handler failed"):
        client.get(path)
    assert slots.peek("k").remaining == 1
    failing[0] = False
    with client.get("/") as response:
        assert response.status_code == 200


async def cancelled(call: Awaitable[object], started: Callable[[], bool]) -> None:
    """Run ``call`` until ``started()``, then cancel it as a server does on a disconnect."""
    task = asyncio.ensure_future(call)
    for _ in range(5):
        await asyncio.sleep(0)
    assert started()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_django_an_async_view_cancelled_gives_the_slot_back() -> None:
    # Django (5.0+) cancels the view's task when the client disconnects: a
    # CancelledError is no Exception, and must give the slot back all the same.
    slots = RateLimiter(Concurrency(1, lease=30), clock=ManualClock(T0))

    @ratelimit(slots, key_func=lambda r: "k")
    async def slow(request: object) -> HttpResponse:
        await asyncio.Event().wait()  # until cancelled
        return HttpResponse(b"never")

    with override_settings(RATE_LIMIT={"clock": slots.clock}, MIDDLEWARE=[]):
        started = lambda: slots.peek("k").remaining == 0  # noqa: E731
        asyncio.run(cancelled(slow(RequestFactory().get("/")), started))
    assert slots.peek("k").remaining == 1


def test_django_middleware_a_cancelled_async_request_gives_the_slot_back() -> None:
    slots = RateLimiter(Concurrency(1, lease=30), clock=ManualClock(T0))
    entered: List[object] = []

    def view(request: object) -> HttpResponse:
        return HttpResponse(b"never")

    async def inner(request: object) -> HttpResponse:
        assert await middleware.process_view(request, view, (), {}) is None
        entered.append(request)
        await asyncio.Event().wait()  # until cancelled
        return HttpResponse(b"never")

    config = {"default": slots, "clock": slots.clock, "key_func": lambda r: "k"}
    with override_settings(RATE_LIMIT=config, MIDDLEWARE=[]):
        middleware = RateLimitMiddleware(inner)
        asyncio.run(cancelled(middleware(RequestFactory().get("/")), lambda: bool(entered)))
        again = asyncio.run(middleware.process_view(RequestFactory().get("/"), view, (), {}))
    assert again is None  # admitted: the cancelled request's slot came back


# -- Django with an async-only store (AsyncRedisStore) --------------------------------


def async_only_slots(server: RedisServer) -> RateLimiter:
    import redis.asyncio
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    from helpers.redis_servers import unique_prefix
    from limiter import AsyncRedisStore

    client = redis.asyncio.Redis(
        port=server.port, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
    )
    return RateLimiter(
        Concurrency(1, lease=60), store=AsyncRedisStore(client, prefix=unique_prefix())
    )


@pytest.mark.redis
def test_django_an_async_view_gives_an_async_only_stores_slot_back(
    server: RedisServer, current_loop: asyncio.AbstractEventLoop
) -> None:
    # The response is closed in a thread (Django's ASGI handler, and AsyncClient,
    # run close() through sync_to_async): the slot must go back on the loop. It
    # used to be given back with the store's (missing) sync apply: held for the
    # whole lease, so the second request was refused.
    from django.test import AsyncClient
    from django.urls import path

    slots = async_only_slots(server)

    @ratelimit(slots, key_func=lambda r: "k")
    async def view(request: object) -> HttpResponse:
        return HttpResponse(b"ok")

    urls = ModuleType("urls")
    urls.urlpatterns = [path("", view)]  # type: ignore[attr-defined]

    async def three() -> List[int]:
        client = AsyncClient()
        return [(await client.get("/")).status_code for _ in range(3)]

    with override_settings(ROOT_URLCONF=urls, MIDDLEWARE=[], RATE_LIMIT={}):
        assert current_loop.run_until_complete(three()) == [200, 200, 200]


@pytest.mark.redis
def test_django_refuses_an_async_only_store_where_it_cannot_await(
    server: RedisServer, current_loop: asyncio.AbstractEventLoop
) -> None:
    slots = async_only_slots(server)

    def view(request: object) -> HttpResponse:
        return HttpResponse(b"ok")

    with pytest.raises(ValueError, match=r"synchronous view .*view cannot await AsyncRedisStore"):
        ratelimit(slots)(view)
    config = {"default": slots, "check_store": False}
    with (
        override_settings(RATE_LIMIT=config, MIDDLEWARE=[]),
        pytest.raises(ImproperlyConfigured, match="async-only AsyncRedisStore"),
    ):
        RateLimitMiddleware(lambda request: HttpResponse(b"ok"))  # WSGI: sync mode
