"""A cost a ``Concurrency`` policy cannot take (a slot is one unit, ``RateLimiter.slot``)
is refused when an adapter is built, not at each request as a 500; a cost known only
per request (a cost or limiter function) fails then with an error naming its source.
Integrations: tests/integrations/test_slot_costs_integrations.py.
"""

from __future__ import annotations

import asyncio
import io
import re
from http.server import BaseHTTPRequestHandler
from typing import Any, Dict, List, Tuple
from wsgiref.handlers import SimpleHandler

import pytest

from limiter import Concurrency, ManualClock, RateLimiter, Rule
from limiter.adapters import asgi, wsgi
from limiter.adapters.httpserver import rate_limited
from limiter.http.guard import Guard
from limiter.http.options import Options
from limiter.testing._shared import T0

PEER = "203.0.113.7"
TAIL = "; hold more slots with more holders, and give the other policies their cost by name"


def slots_only() -> RateLimiter:
    return RateLimiter(Concurrency(1, lease=30), clock=ManualClock(T0), name="slots")


def mixed() -> RateLimiter:
    return RateLimiter(
        {"rate": "5/second", "inflight": Concurrency(1, lease=30)},
        clock=ManualClock(T0),
        name="mixed",
    )


def refusal(policy: str, value: str, limiter: str) -> str:
    """The error a cost a slot cannot take raises."""
    return (
        f"limiter {limiter!r}: a slot is one unit: Concurrency policy {policy!r} takes "
        f"one per holder, not a cost of {value}{TAIL}"
    )


def refused(policy: str, value: str, limiter: str) -> str:
    """``refusal`` as a ``match`` pattern for the whole message."""
    return "^" + re.escape(refusal(policy, value, limiter)) + "$"


def hello(environ: Any, start: Any) -> List[bytes]:
    start("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


async def asgi_hello(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()


def served(app: Any) -> Tuple[str, str]:
    """The status and the error log of one GET through a real WSGI handler."""
    out, errors = io.BytesIO(), io.StringIO()
    request = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "REMOTE_ADDR": PEER,
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    SimpleHandler(io.BytesIO(), out, errors, request, multithread=False).run(app)
    status_line = out.getvalue().split(b"\r\n", 1)[0].decode()
    return status_line.split(" ", 1)[1], errors.getvalue()


BUILDERS = {
    "wsgi": lambda limiter, **o: wsgi.RateLimitMiddleware(hello, limiter, **o),
    "asgi": lambda limiter, **o: asgi.RateLimitMiddleware(asgi_hello, limiter, **o),
    "http.server": lambda limiter, **o: rate_limited(limiter, **o)(Handler),
    "Guard": lambda limiter, **o: Guard(limiter, **o),
}


@pytest.mark.parametrize("adapter", sorted(BUILDERS))
def test_a_fixed_cost_on_a_limiter_of_slots_only_is_refused_when_built(adapter: str) -> None:
    build = BUILDERS[adapter]
    # It was built, then every request raised this ValueError (a 500).
    with pytest.raises(ValueError, match=refused("default", "2", "slots")):
        build(slots_only(), cost=2)
    with pytest.raises(ValueError, match=refused("default", "0", "slots")):
        build(slots_only(), cost=0)
    with pytest.raises(ValueError, match=refused("inflight", "2", "mixed")):
        build(mixed(), cost={"rate": 1, "inflight": 2})
    build(slots_only(), cost=1)  # one slot: fine
    build(mixed(), cost=3)  # a number is the rate's cost
    build(mixed(), cost={"rate": 3, "inflight": 1})


def test_a_fixed_cost_is_refused_for_every_limiter_that_takes_it_rules_included() -> None:
    def app() -> Any:
        return wsgi.RateLimitMiddleware(hello, RateLimiter("5/second"), **options)

    # A rule without a cost of its own takes the middleware's.
    options: Dict[str, Any] = {"cost": 2, "rules": [Rule("/slow", slots_only())]}
    with pytest.raises(ValueError, match=refused("default", "2", "slots")):
        app()
    # A rule's own cost: refused by the Rule itself, as its mapping is.
    with pytest.raises(ValueError, match=refused("default", "2", "slots")):
        Rule("/slow", slots_only(), cost=2)
    with pytest.raises(ValueError, match=refused("inflight", "0", "mixed")):
        Rule("/slow", mixed(), cost={"inflight": 0})
    options = {"cost": 2, "rules": [Rule("/slow", slots_only(), cost=1)]}
    assert served(app())[0] == "200 OK"


def test_a_guard_given_options_built_without_its_limiter_refuses_the_cost() -> None:
    # The integrations' view limits build Options first (the cost made a float), then the Guard.
    with pytest.raises(ValueError, match=refused("default", "2.0", "slots")):
        Guard(slots_only(), Options({"cost": 2}))


def test_a_cost_function_answering_what_no_slot_takes_is_a_500_naming_it() -> None:
    status, log = served(wsgi.RateLimitMiddleware(hello, slots_only(), cost=lambda r: 2))
    assert status == "500 Internal Server Error"
    shown = "ValueError: a cost function returned 2 for " + refusal("default", "2", "slots")
    assert shown + "\n" in log, log
    ok = wsgi.RateLimitMiddleware(hello, slots_only(), cost=lambda r: 1)
    assert served(ok)[0] == "200 OK"


def test_asgi_a_cost_function_answering_what_no_slot_takes_raises_naming_it() -> None:
    async def cost(request: Any) -> Dict[str, int]:
        return {"rate": 1, "inflight": 3}

    app = asgi.RateLimitMiddleware(asgi_hello, mixed(), cost=cost)
    scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "client": (PEER, 1)}

    async def call() -> None:
        async def receive() -> Dict[str, Any]:
            return {"type": "http.disconnect"}

        async def send(message: Dict[str, Any]) -> None:
            pass

        await app(scope, receive, send)

    shown = "a cost function returned {'rate': 1, 'inflight': 3} for "
    with pytest.raises(ValueError, match=re.escape(shown + refusal("inflight", "3", "mixed"))):
        asyncio.run(call())


def test_a_limiter_function_choosing_a_limiter_of_slots_only_for_a_fixed_cost_names_it() -> None:
    chosen = slots_only()
    status, log = served(wsgi.RateLimitMiddleware(hello, lambda r: chosen, cost=2))
    assert status == "500 Internal Server Error"
    shown = "ValueError: a limiter function returned " + refusal("default", "2.0", "slots")
    assert shown + "\n" in log, log


@pytest.mark.parametrize("option", ["ws_messages_per_key", "ws_messages_per_connection"])
def test_a_websocket_message_limit_holding_slots_is_refused_when_built(option: str) -> None:
    # Each message is a check(): it raised a TypeError at the first message.
    shown = (
        f"{option} must be a limiter without a Concurrency policy: a message cannot hold "
        f"a slot (the middleware's limiter holds one per connection), got "
        f"'1inflight/30s'"
    )
    limiter = RateLimiter(Concurrency(1, lease=30))
    with pytest.raises(TypeError, match="^" + re.escape(shown) + "$"):
        asgi.RateLimitMiddleware(asgi_hello, RateLimiter("5/second"), **{option: limiter})
