"""The applications under test: the same one-route app, bare and behind each limiter.

Factories (call them) so that servers can import them by name:
``uvicorn --factory bench.apps:starlette_ours`` or
``gunicorn 'bench.apps:flask_ours()'``.  Every limiter gets the same limit,
high enough that no request is ever denied (``peers.HIGH`` per second), and
keys on the client address (loopback: one hot key).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Dict, Iterable, List

from .peers import HIGH

HIGH_TEXT = f"{HIGH}/second"
BODY = b"hello, world"


# -- raw ASGI / WSGI -------------------------------------------------------------


async def asgi_raw(scope: Dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
    if scope["type"] != "http":
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", b"12")],
        }
    )
    await send({"type": "http.response.body", "body": BODY})


def wsgi_raw(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "12")])
    return [BODY]


def asgi_raw_ours() -> Any:
    from limiter import RateLimiter
    from limiter.adapters.asgi import RateLimitMiddleware

    return RateLimitMiddleware(asgi_raw, RateLimiter(HIGH, HIGH))


def wsgi_raw_ours_observed() -> Any:
    from limiter import RateLimiter
    from limiter.adapters.wsgi import RateLimitMiddleware

    from .peers import counting_observer

    return RateLimitMiddleware(wsgi_raw, RateLimiter(HIGH, HIGH, on_decision=counting_observer()))


def wsgi_raw_ours() -> Any:
    from limiter import RateLimiter
    from limiter.adapters.wsgi import RateLimitMiddleware

    return RateLimitMiddleware(wsgi_raw, RateLimiter(HIGH, HIGH))


# -- Starlette -------------------------------------------------------------------


def starlette_bare() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def home(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello, world")

    return Starlette(routes=[Route("/", home)])


def starlette_ours() -> Any:
    from limiter import RateLimiter
    from limiter.adapters.asgi import RateLimitMiddleware

    app = starlette_bare()
    app.add_middleware(RateLimitMiddleware, limiter=RateLimiter(HIGH, HIGH))
    return app


def starlette_slowapi() -> Any:
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.middleware import SlowAPIMiddleware
    from slowapi.util import get_remote_address

    app = starlette_bare()
    app.state.limiter = Limiter(key_func=get_remote_address, default_limits=[HIGH_TEXT])
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    app.add_middleware(SlowAPIMiddleware)
    return app


def _redis_url() -> str:
    import os

    url = os.environ.get("BENCH_REDIS_URL")
    if not url:
        raise RuntimeError("BENCH_REDIS_URL is not set: the bench passes its one Redis URL here")
    return url


def starlette_ours_redis() -> Any:
    """The middleware with ``AsyncRedisStore`` on the bench's Redis (its default settings)."""
    import redis.asyncio as aredis

    from limiter import RateLimiter
    from limiter.adapters.asgi import RateLimitMiddleware
    from limiter.backends.redis import AsyncRedisStore

    from .redisenv import CLIENT_OPTIONS

    client = aredis.Redis.from_url(_redis_url(), **CLIENT_OPTIONS)
    store = AsyncRedisStore(client, prefix="bench:servers:")
    app = starlette_bare()
    app.add_middleware(RateLimitMiddleware, limiter=RateLimiter(HIGH, HIGH, store=store))
    return app


def starlette_slowapi_redis() -> Any:
    """slowapi on the same Redis, with the same connection settings (its own pool)."""
    import redis
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.middleware import SlowAPIMiddleware
    from slowapi.util import get_remote_address

    from .redisenv import CLIENT_OPTIONS

    url = _redis_url()
    app = starlette_bare()
    app.state.limiter = Limiter(
        key_func=get_remote_address,
        default_limits=[HIGH_TEXT],
        storage_uri=url,
        storage_options={"connection_pool": redis.ConnectionPool.from_url(url, **CLIENT_OPTIONS)},
        key_prefix="bench:servers:slowapi",
    )
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    app.add_middleware(SlowAPIMiddleware)
    return app


# -- Flask -----------------------------------------------------------------------


def flask_bare() -> Any:
    from flask import Flask

    app = Flask("bench")

    @app.route("/")
    def home() -> str:
        return "hello, world"

    return app


def flask_ours() -> Any:
    from limiter import RateLimiter
    from limiter.adapters.wsgi import RateLimitMiddleware

    app = flask_bare()
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, RateLimiter(HIGH, HIGH))  # type: ignore[method-assign]
    return app


def flask_flask_limiter() -> Any:
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    app = flask_bare()
    Limiter(get_remote_address, app=app, default_limits=[HIGH_TEXT], storage_uri="memory://")
    return app


def flask_ours_default() -> Any:
    from limiter.integrations.flask import RateLimit

    app = flask_bare()
    RateLimit(app, default=HIGH_TEXT)
    return app


def flask_ours_route() -> Any:
    from flask import Flask

    from limiter.integrations.flask import RateLimit

    app = Flask("bench")
    rl = RateLimit(app)

    @app.route("/")
    @rl.limit(HIGH_TEXT)
    def home() -> str:
        return "hello, world"

    return app


def flask_flask_limiter_route() -> Any:
    from flask import Flask
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    app = Flask("bench")
    limiter = Limiter(get_remote_address, app=app, storage_uri="memory://")

    @app.route("/")
    @limiter.limit(HIGH_TEXT)
    def home() -> str:
        return "hello, world"

    return app


# -- FastAPI ---------------------------------------------------------------------


def fastapi_bare(limit: str = "") -> Any:
    from fastapi import Depends, FastAPI
    from fastapi.responses import PlainTextResponse

    app = FastAPI()
    if limit == "ours":
        from limiter.integrations.fastapi import RateLimit

        rl = RateLimit(app)
        dependencies = [Depends(rl.limit(HIGH_TEXT))]
    elif limit == "ours-default":
        from limiter.integrations.fastapi import RateLimit

        RateLimit(app, default=HIGH_TEXT)
        dependencies = []
    else:
        dependencies = []

    @app.get("/", dependencies=dependencies)
    async def home() -> PlainTextResponse:
        return PlainTextResponse("hello, world")

    return app


def fastapi_slowapi() -> Any:
    from fastapi import FastAPI, Request
    from fastapi.responses import PlainTextResponse
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    app = FastAPI()
    limiter = Limiter(key_func=get_remote_address)
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]

    async def home(request: Request) -> PlainTextResponse:  # slowapi needs the request
        return PlainTextResponse("hello, world")

    # This module's annotations are strings, and Request is a local name here:
    # give FastAPI the class, or it takes "request" for a query parameter.
    home.__annotations__["request"] = Request
    app.get("/")(limiter.limit(HIGH_TEXT)(home))
    return app


# -- Django ----------------------------------------------------------------------


class _DjangoURLs:
    urlpatterns: ClassVar[List[Any]] = []


def _django(middleware: List[str], view: Any) -> Any:
    import django
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler
    from django.urls import clear_url_caches, path

    if not settings.configured:
        settings.configure(
            DEBUG=False,
            ALLOWED_HOSTS=["*"],
            ROOT_URLCONF=_DjangoURLs,
            MIDDLEWARE=[],
            CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
            RATE_LIMIT={"default": HIGH_TEXT},
            SECRET_KEY="bench-not-a-secret",
        )
        django.setup()
    settings.MIDDLEWARE = middleware
    _DjangoURLs.urlpatterns = [path("", view)]
    clear_url_caches()
    return WSGIHandler()  # loads MIDDLEWARE now: each app keeps its own stack


def _django_home(request: Any) -> Any:
    from django.http import HttpResponse

    return HttpResponse(b"hello, world", content_type="text/plain")


def django_bare() -> Any:
    return _django([], _django_home)


def django_ours() -> Any:
    return _django(["limiter.integrations.django.RateLimitMiddleware"], _django_home)


def django_ours_route() -> Any:
    from limiter.integrations.django import ratelimit

    return _django([], ratelimit(HIGH_TEXT)(_django_home))


def django_django_ratelimit() -> Any:
    from django_ratelimit.decorators import ratelimit

    return _django([], ratelimit(key="ip", rate=f"{HIGH}/s", block=True)(_django_home))


# -- http.server -----------------------------------------------------------------


def httpserver_handler(limited: bool) -> Any:
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "12")
            self.end_headers()
            self.wfile.write(BODY)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    if not limited:
        return Handler
    from limiter import RateLimiter
    from limiter.adapters.httpserver import rate_limited

    return rate_limited(RateLimiter(HIGH, HIGH))(Handler)


#: name -> (factory, kind, library)
APPS: Dict[str, List[Any]] = {
    "asgi.raw": [lambda: asgi_raw, "asgi", ""],
    "asgi.raw+limiter": [asgi_raw_ours, "asgi", "tokenlimiter"],
    "starlette": [starlette_bare, "asgi", ""],
    "starlette+limiter": [starlette_ours, "asgi", "tokenlimiter"],
    "starlette+slowapi": [starlette_slowapi, "asgi", "slowapi"],
    "wsgi.raw": [lambda: wsgi_raw, "wsgi", ""],
    "wsgi.raw+limiter": [wsgi_raw_ours, "wsgi", "tokenlimiter"],
    "wsgi.raw+limiter+observer": [wsgi_raw_ours_observed, "wsgi", "tokenlimiter"],
    "flask": [flask_bare, "wsgi", ""],
    "flask+limiter": [flask_ours, "wsgi", "tokenlimiter"],
    "flask+flask-limiter": [flask_flask_limiter, "wsgi", "flask-limiter"],
    "flask+RateLimit(default)": [flask_ours_default, "wsgi", "tokenlimiter"],
    "flask+@rl.limit": [flask_ours_route, "wsgi", "tokenlimiter"],
    "flask+@flask-limiter.limit": [flask_flask_limiter_route, "wsgi", "flask-limiter"],
    "fastapi": [fastapi_bare, "asgi", ""],
    "fastapi+Depends(rl.limit)": [lambda: fastapi_bare("ours"), "asgi", "tokenlimiter"],
    "fastapi+RateLimit(default)": [lambda: fastapi_bare("ours-default"), "asgi", "tokenlimiter"],
    "fastapi+@slowapi.limit": [fastapi_slowapi, "asgi", "slowapi"],
    "django": [django_bare, "wsgi", ""],
    "django+RateLimitMiddleware": [django_ours, "wsgi", "tokenlimiter"],
    "django+@ratelimit": [django_ours_route, "wsgi", "tokenlimiter"],
    "django+@django-ratelimit": [django_django_ratelimit, "wsgi", "django-ratelimit"],
    "http.server": [lambda: httpserver_handler(False), "httpserver", ""],
    "http.server+limiter": [lambda: httpserver_handler(True), "httpserver", "tokenlimiter"],
}
