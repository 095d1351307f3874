"""docs/proxies.md end to end: real uvicorn and waitress servers on loopback.

The test client plays both the reverse proxy and the clients behind it: it
connects from 127.0.0.1 (the trusted proxy) and sends the forwarding headers
a proxy would, with whatever a malicious client added itself.  Each server
runs in a thread of this process with a limiter on a ManualClock that never
advances, so a bucket's remaining tokens count exactly the requests charged
to its key.
"""

from __future__ import annotations

from typing import List, Tuple

import httpx
import pytest

from helpers.servers import uvicorn_running, waitress_running
from limiter import ManualClock, RateLimiter
from limiter.adapters.asgi import RateLimitMiddleware as ASGIMiddleware
from limiter.adapters.wsgi import RateLimitMiddleware as WSGIMiddleware

pytestmark = pytest.mark.servers

Headers = List[Tuple[str, str]]
PROXY = "ip:127.0.0.1"
ALICE, BOB = "198.51.100.1", "198.51.100.2"
ATTACKER_CLAIM = "1.1.1.1"


def limiter() -> RateLimiter:
    return RateLimiter("5/second", clock=ManualClock())


def remaining(lim: RateLimiter, *addresses: str) -> List[int]:
    return [lim.peek(a if a.startswith("ip:") else "ip:" + a).remaining for a in addresses]


def via_xff_proxy(client: str) -> Headers:
    """nginx ``proxy_add_x_forwarded_for``: appends to the client's own XFF.

    The client spoofed an X-Forwarded-For entry on the left and added a
    Forwarded header that the proxy passes through untouched.
    """
    return [
        ("Forwarded", f"for={ATTACKER_CLAIM}"),
        ("X-Forwarded-For", f"6.6.6.6, {client}"),
    ]


def via_forwarded_proxy(client: str) -> Headers:
    """A proxy that appends RFC 7239 Forwarded; the client added its own XFF."""
    return [
        ("X-Forwarded-For", ATTACKER_CLAIM),
        ("Forwarded", f"for=6.6.6.6, for={client}"),
    ]


def hit(url: str, headers: Headers, path: str = "/") -> httpx.Response:
    with httpx.Client(base_url=url) as client:
        return client.get(path, headers=headers)


# -- servers -------------------------------------------------------------------


def wsgi_hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


async def asgi_hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


# -- item 8: the pinned header, through uvicorn ----------------------------------------


def asgi_by_path(apps):
    async def app(scope, receive, send):
        await apps[scope.get("path", "/")](scope, receive, send)

    return app


def test_uvicorn_pinned_header_keys_the_address_the_proxy_saw():
    xff_lim, fwd_lim = limiter(), limiter()
    app = asgi_by_path(
        {
            "/xff": ASGIMiddleware(
                asgi_hello, xff_lim, trusted_proxies=["127.0.0.1"], proxy_header="x-forwarded-for"
            ),
            "/fwd": ASGIMiddleware(
                asgi_hello, fwd_lim, trusted_proxies=["127.0.0.1"], proxy_header="Forwarded"
            ),
        }
    )
    # proxy_headers=False: uvicorn would otherwise rewrite the client itself.
    with uvicorn_running(app, proxy_headers=False) as url:
        xff = [hit(url, via_xff_proxy(c), "/xff") for c in (ALICE, ALICE, BOB)]
        fwd = [hit(url, via_forwarded_proxy(c), "/fwd") for c in (ALICE, BOB, BOB)]
    assert [r.headers["x-ratelimit-remaining"] for r in xff] == ["4", "3", "4"]
    assert [r.headers["x-ratelimit-remaining"] for r in fwd] == ["4", "4", "3"]
    assert remaining(xff_lim, ALICE, BOB, PROXY, ATTACKER_CLAIM, "6.6.6.6") == [3, 4, 5, 5, 5]
    assert remaining(fwd_lim, ALICE, BOB, PROXY, ATTACKER_CLAIM, "6.6.6.6") == [4, 3, 5, 5, 5]


def test_uvicorn_rewriting_the_client_itself_ignores_a_client_forwarded():
    # uvicorn's default --proxy-headers (trusting 127.0.0.1) reads only
    # X-Forwarded-For; the middleware then gets no trusted_proxies.
    lim = limiter()
    with uvicorn_running(ASGIMiddleware(asgi_hello, lim), proxy_headers=True) as url:
        for client in (ALICE, BOB, BOB):
            assert hit(url, via_xff_proxy(client)).status_code == 200
    assert remaining(lim, ALICE, BOB, PROXY, ATTACKER_CLAIM) == [4, 3, 5, 5]


# -- item 9: waitress ----------------------------------------------------------------


def test_waitress_defaults_strip_the_header_and_every_client_shares_the_proxy_key():
    # The documented wrong set-up: waitress's clear_untrusted_proxy_headers
    # removes X-Forwarded-For before the app sees it.
    lim = limiter()
    app = WSGIMiddleware(
        wsgi_hello, lim, trusted_proxies=["127.0.0.1"], proxy_header="x-forwarded-for"
    )
    with waitress_running(app) as url:
        responses = [hit(url, via_xff_proxy(c)) for c in (ALICE, BOB, ALICE)]
    assert [r.headers["x-ratelimit-remaining"] for r in responses] == ["4", "3", "2"]
    assert remaining(lim, PROXY, ALICE, BOB) == [2, 5, 5]


@pytest.mark.parametrize(
    ("waitress_header", "via"),
    [("x-forwarded-for", via_xff_proxy), ("forwarded", via_forwarded_proxy)],
)
def test_waitress_trusted_proxy_rewrites_the_peer_per_client(waitress_header, via):
    # Right set-up 1: waitress trusts the proxy and sets REMOTE_ADDR; the
    # middleware has no trusted_proxies.  The header the client added is
    # removed by waitress as untrusted.
    lim = limiter()
    options = {
        "trusted_proxy": "127.0.0.1",
        "trusted_proxy_headers": waitress_header,
        "trusted_proxy_count": 1,
    }
    with waitress_running(WSGIMiddleware(wsgi_hello, lim), **options) as url:
        responses = [hit(url, via(c)) for c in (ALICE, BOB, BOB)]
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert remaining(lim, ALICE, BOB, PROXY, ATTACKER_CLAIM, "6.6.6.6") == [4, 3, 5, 5, 5]


@pytest.mark.parametrize(
    ("proxy_header", "via"),
    [("x-forwarded-for", via_xff_proxy), ("forwarded", via_forwarded_proxy)],
)
def test_waitress_passing_headers_through_to_the_pinned_middleware(proxy_header, via):
    # Right set-up 2: waitress keeps the headers (clear_untrusted_proxy_headers
    # =False); the middleware trusts the proxy and reads only the pinned one.
    lim = limiter()
    app = WSGIMiddleware(
        wsgi_hello, lim, trusted_proxies=["127.0.0.0/8"], proxy_header=proxy_header
    )
    with waitress_running(app, clear_untrusted_proxy_headers=False) as url:
        responses = [hit(url, via(c)) for c in (ALICE, ALICE, BOB)]
    assert [r.headers["x-ratelimit-remaining"] for r in responses] == ["4", "3", "4"]
    assert remaining(lim, ALICE, BOB, PROXY, ATTACKER_CLAIM, "6.6.6.6") == [3, 4, 5, 5, 5]
