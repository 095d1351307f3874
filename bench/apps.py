"""The applications under test: the same one-route app, bare and behind each limiter.

Factories (call them) so that servers can import them by name:
``uvicorn --factory bench.apps:starlette_ours`` or
``gunicorn 'bench.apps:flask_ours()'``.  Every limiter gets the same limit,
high enough that no request is ever denied (``peers.HIGH`` per second), and
keys on the client address (loopback: one hot key).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List

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
    "flask": [flask_bare, "wsgi", ""],
    "flask+limiter": [flask_ours, "wsgi", "tokenlimiter"],
    "flask+flask-limiter": [flask_flask_limiter, "wsgi", "flask-limiter"],
    "http.server": [lambda: httpserver_handler(False), "httpserver", ""],
    "http.server+limiter": [lambda: httpserver_handler(True), "httpserver", "tokenlimiter"],
}
