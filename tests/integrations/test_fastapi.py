"""``limiter.integrations.fastapi``: the FastAPI / Starlette integration.

The conformance suite runs twice: once with the limiter as ``RateLimit``'s
``default`` (applied by the middleware) and once as a ``limit()`` dependency
on the route.  Requests go through Starlette's ``TestClient`` with the peer
address set by its ``client=`` argument.  The specific tests use a
``ManualClock`` at ``T0``, so header values are exact; one module-scoped
uvicorn server on 127.0.0.1 checks the same over real sockets.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, HTTPException
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from helpers.servers import uvicorn_running
from helpers.websocket_client import exchange, websockets_client, ws_url
from limiter import DENIED_BODY, ManualClock, RateLimiter, RequestInfo, header_key
from limiter.http.rules import Rule
from limiter.integrations.fastapi import RateLimit
from limiter.testing._adapter_suite import AdapterConformance

with warnings.catch_warnings():
    # Starlette >= 1.x nudges towards httpx2; the client works the same here.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

T0 = 1_700_000_000.0
PEER = "203.0.113.7"
Reply = Tuple[int, Sequence[Tuple[str, str]], bytes]


def status_of(path: str) -> int:
    return int(path[8:]) if path.startswith("/status/") else 200


def hello(request: Request) -> Response:
    """The conformance app's answer: the status of ``/status/<code>``, X-App, b"hello"."""
    head = request.method == "HEAD"
    response = Response(
        b"" if head else b"hello", status_of(request.url.path), media_type="text/plain"
    )
    response.raw_headers.append((b"X-App", b"1"))  # its case kept, as the suite compares it
    return response


def call(app: Any, method: str, path: str, headers: Optional[Dict[str, str]], peer: str) -> Reply:
    client = TestClient(app, client=(peer, 50000))
    response = client.request(method, path, headers=headers or {})
    pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]
    return response.status_code, pairs, response.content


class TestDefaultConformance(AdapterConformance):
    """The limiter as ``default``: every route without a limit of its own."""

    awaits = True
    takes_rate_strings = True

    def make_app(self, limiter: Any, **options: Any) -> Any:
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "HEAD", "POST"])
        def catch_all(request: Request) -> Response:
            return hello(request)

        RateLimit(app, default=limiter, **options)
        return app

    def request(
        self,
        app: Any,
        method: str = "GET",
        path: str = "/",
        headers: Optional[Dict[str, str]] = None,
        peer: Optional[str] = None,
    ) -> Reply:
        return call(app, method, path, headers, peer or self.client_peer)


class TestDependencyConformance(TestDefaultConformance):
    """The limiter as ``Depends(rl.limit(limiter))`` on the route, no default."""

    def make_app(self, limiter: Any, **options: Any) -> Any:
        own = {k: options.pop(k) for k in ("key_func", "cost", "deduct_when") if k in options}
        app = FastAPI()
        rl = RateLimit(app, **options)

        @app.api_route(
            "/{path:path}",
            methods=["GET", "HEAD", "POST"],
            dependencies=[Depends(rl.limit(limiter, **own))],
        )
        async def catch_all(request: Request) -> Response:
            return hello(request)

        return app

    # rules= belong to the default limit: without a default, RateLimit refuses
    # them when built rather than ignore them.
    def test_rules_use_their_own_limiter_and_key(self) -> None:
        with pytest.raises(ValueError, match="rules apply to the default limit only"):
            self.app(self.limiter(), rules=[Rule("/login", self.limiter(name="login"))])

    test_rule_cost = test_rules_use_their_own_limiter_and_key
    test_a_rule_deduct_when_applies_to_its_route_only = test_rules_use_their_own_limiter_and_key
    test_a_rule_in_shadow_mode_beside_an_enforced_default = test_rules_use_their_own_limiter_and_key


# -- specific behaviour -------------------------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def x_headers(limit: int, remaining: int, reset_in: int) -> List[Tuple[str, str]]:
    return [
        ("x-ratelimit-limit", str(limit)),
        ("x-ratelimit-remaining", str(remaining)),
        ("x-ratelimit-reset", str(int(T0) + reset_in)),
    ]


LIMIT_NAMES = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after")


def limit_headers(response: httpx.Response) -> List[Tuple[str, str]]:
    return [(k, v) for k, v in response.headers.multi_items() if k in LIMIT_NAMES]


def client(app: FastAPI, peer: str = PEER) -> TestClient:
    return TestClient(app, client=(peer, 50000))


def statuses(c: TestClient, path: str, n: int, method: str = "GET") -> List[int]:
    return [c.request(method, path).status_code for _ in range(n)]


def test_two_routes_with_the_same_rate_have_their_own_buckets(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, clock=clock)

    @app.get("/a", dependencies=[Depends(rl.limit("2/minute"))])
    async def a() -> Dict[str, str]:
        return {"route": "a"}

    @app.get("/b", dependencies=[Depends(rl.limit("2/minute"))])
    async def b() -> Dict[str, str]:
        return {"route": "b"}

    c = client(app)
    assert statuses(c, "/a", 3) == [200, 200, 429]
    replies = [c.get("/b") for _ in range(3)]
    assert [r.status_code for r in replies] == [200, 200, 429]
    assert replies[0].json() == {"route": "b"}
    assert limit_headers(replies[0]) == x_headers(2, 1, 30)


def test_the_same_name_shares_buckets(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, clock=clock)
    shared = "search"

    @app.get("/a", dependencies=[Depends(rl.limit("3/minute", name=shared))])
    async def a() -> str:
        return "a"

    @app.get("/b", dependencies=[Depends(rl.limit("3/minute", name=shared))])
    async def b() -> str:
        return "b"

    c = client(app)
    assert [c.get(p).status_code for p in ("/a", "/b", "/a", "/b")] == [200, 200, 200, 429]


def test_the_buckets_of_an_unnamed_limit_are_named_by_its_routes(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, clock=clock)
    dependency = rl.limit("2/minute")
    shared = rl.limit("3/minute")

    @app.get("/x/{item}", dependencies=[Depends(dependency), Depends(shared)])
    async def x(item: str) -> str:
        return "x"

    @app.post("/y", dependencies=[Depends(shared)])
    async def y() -> str:
        return "y"

    assert client(app).get("/x/1").status_code == 200
    # "<methods> <path template>": the same in every worker process on a shared
    # store, whatever the lines above the route.
    limiter = rl.integration.limiter_for("2/minute", "GET /x/{item}")
    assert limiter.name == "GET /x/{item}|2/minute"
    assert limiter.peek(f"ip:{PEER}").remaining == 1
    both = rl.integration.limiter_for("3/minute", "GET /x/{item}, POST /y")
    assert both.peek(f"ip:{PEER}").remaining == 2


def test_editing_the_file_above_a_route_keeps_its_buckets(clock: ManualClock) -> None:
    """Two deploys of one module, the second with lines added above the route,
    on one store: the second sees the tokens the first took (issue 22)."""
    from limiter import MemoryStore

    store = MemoryStore()
    source = """
from fastapi import Depends, FastAPI
from limiter.integrations.fastapi import RateLimit

app = FastAPI()
rl = RateLimit(app, store=store, clock=clock)
{padding}
@app.get("/search", dependencies=[Depends(rl.limit("3/minute"))])
async def search() -> str:
    return "found"
"""
    apps = []
    for padding in ("", "\n\n\n# a comment added above the route\n"):
        namespace: Dict[str, Any] = {"store": store, "clock": clock, "__name__": "deploy"}
        exec(compile(source.format(padding=padding), "deploy.py", "exec"), namespace)
        apps.append(namespace["app"])
    first, second = client(apps[0]), client(apps[1])
    assert statuses(first, "/search", 2) == [200, 200]
    assert statuses(second, "/search", 2) == [200, 429]  # 3/minute across both deploys


def test_several_limits_on_a_route_show_the_first_and_refuse_on_any(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, clock=clock)
    burst = rl.limit("5/minute")
    slow = rl.limit("1/minute")

    @app.get("/x", dependencies=[Depends(burst), Depends(slow)])
    async def x() -> str:
        return "x"

    c = client(app)
    first = c.get("/x")
    assert (first.status_code, limit_headers(first)) == (200, x_headers(5, 4, 12))
    second = c.get("/x")
    assert (second.status_code, second.content) == (429, DENIED_BODY)
    assert limit_headers(second) == [*x_headers(1, 0, 60), ("retry-after", "60")]


def test_the_third_request_gets_the_exact_429_while_other_routes_keep_the_default(
    clock: ManualClock,
) -> None:
    app = FastAPI()
    rl = RateLimit(app, default="5/minute", clock=clock)

    @app.get("/limited", dependencies=[Depends(rl.limit("2/minute"))])
    def limited() -> Dict[str, int]:
        return {"n": 1}

    @app.get("/other")
    def other() -> Dict[str, int]:
        return {"n": 2}

    @app.post("/also")
    def also() -> Dict[str, int]:
        return {"n": 3}

    c = client(app)
    first, second, third = (c.get("/limited") for _ in range(3))
    assert (first.status_code, first.json()) == (200, {"n": 1})
    assert limit_headers(first) == x_headers(2, 1, 30)
    assert limit_headers(second) == x_headers(2, 0, 60)
    assert third.status_code == 429
    assert third.content == DENIED_BODY  # not FastAPI's {"detail": ...}
    assert third.headers.multi_items() == [
        ("x-ratelimit-limit", "2"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", str(int(T0) + 60)),
        ("retry-after", "30"),
        ("content-type", "application/json"),
        ("content-length", str(len(DENIED_BODY))),
    ]
    # The default: one set of buckets for /other and /also, untouched by /limited.
    other_replies = [c.get("/other"), c.post("/also")]
    assert [r.status_code for r in other_replies] == [200, 200]
    assert [limit_headers(r) for r in other_replies] == [x_headers(5, 4, 12), x_headers(5, 3, 24)]
    assert statuses(c, "/other", 4) == [200, 200, 200, 429]
    clock.advance(30)
    assert c.get("/limited").status_code == 200


def test_default_covers_routes_without_a_limit_and_exempt_skips_it(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, default="2/minute", clock=clock)

    @app.get("/items")
    async def items() -> List[int]:
        return [1]

    @app.get("/health")
    @rl.exempt
    async def health() -> str:
        return "ok"

    @rl.exempt  # above the route decorator works too
    @app.get("/ready")
    async def ready() -> str:
        return "ready"

    c = client(app)
    for path in ("/health", "/ready"):
        for _ in range(3):
            reply = c.get(path)
            assert (reply.status_code, limit_headers(reply)) == (200, [])
    assert statuses(c, "/items", 3) == [200, 200, 429]
    # A path no route matches is under the default too.
    missing = c.get("/missing")
    assert (missing.status_code, missing.content) == (429, DENIED_BODY)


def test_an_exempt_route_keeps_its_own_limit(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, default="1/minute", clock=clock)

    @app.get("/x", dependencies=[Depends(rl.limit("3/minute"))])
    @rl.exempt
    async def x() -> str:
        return "x"

    assert statuses(client(app), "/x", 4) == [200, 200, 200, 429]


def test_sync_and_async_routes_and_response_objects_get_the_headers(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, clock=clock)

    @app.get("/sync", dependencies=[Depends(rl.limit("3/minute"))])
    def sync_route() -> PlainTextResponse:
        return PlainTextResponse("sync", headers={"X-Own": "1"})

    @app.get("/async", dependencies=[Depends(rl.limit("3/minute"))])
    async def async_route() -> JSONResponse:
        return JSONResponse({"ok": True}, status_code=201)

    c = client(app)
    plain = c.get("/sync")
    assert (plain.status_code, plain.text, plain.headers["x-own"]) == (200, "sync", "1")
    assert plain.headers["content-type"] == "text/plain; charset=utf-8"
    assert limit_headers(plain) == x_headers(3, 2, 20)
    created = c.get("/async")
    assert (created.status_code, created.json()) == (201, {"ok": True})
    assert limit_headers(created) == x_headers(3, 2, 20)


def test_parameter_style_and_a_dependency_that_takes_the_request(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, clock=clock)

    def user(request: Request) -> str:
        return request.headers.get("X-User", "anonymous")

    @app.get("/me")
    async def me(_: None = Depends(rl.limit("1/minute")), who: str = Depends(user)) -> str:
        return who

    c = client(app)
    reply = c.get("/me", headers={"X-User": "ann"})
    assert (reply.status_code, reply.json()) == (200, "ann")
    assert limit_headers(reply) == x_headers(1, 0, 60)
    assert c.get("/me").status_code == 429


def test_api_router_routes_and_router_dependencies(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, default="10/minute", clock=clock)
    router = APIRouter(prefix="/v1")

    @router.get("/own", dependencies=[Depends(rl.limit("1/minute"))])
    def own() -> str:
        return "own"

    @router.get("/plain")
    def plain() -> str:
        return "plain"

    grouped = APIRouter(dependencies=[Depends(rl.limit("2/minute", name="grouped"))])

    @grouped.get("/g1")
    def g1() -> str:
        return "g1"

    @grouped.get("/g2")
    def g2() -> str:
        return "g2"

    app.include_router(router)
    app.include_router(grouped, prefix="/g")
    extra = APIRouter()

    @extra.get("/e")
    def e() -> str:
        return "e"

    app.include_router(extra, prefix="/x", dependencies=[Depends(rl.limit("1/minute"))])

    c = client(app)
    assert statuses(c, "/v1/own", 2) == [200, 429]
    assert limit_headers(c.get("/v1/plain")) == x_headers(10, 9, 6)  # the default
    assert [c.get(p).status_code for p in ("/g/g1", "/g/g2", "/g/g1")] == [200, 200, 429]
    assert statuses(c, "/x/e", 2) == [200, 429]
    assert limit_headers(c.get("/v1/plain")) == x_headers(10, 8, 12)  # none of those


def test_methods_limit_only_the_named_ones(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, clock=clock)

    @app.api_route(
        "/form",
        methods=["GET", "POST"],
        dependencies=[Depends(rl.limit("1/minute", methods=["post"]))],
    )
    def form() -> str:
        return "form"

    c = client(app)
    get = c.get("/form")
    assert (get.status_code, limit_headers(get)) == (200, [])
    assert statuses(c, "/form", 2, "POST") == [200, 429]
    assert statuses(c, "/form", 2) == [200, 200]


def test_async_key_function_and_async_plan_function(clock: ManualClock) -> None:
    app = FastAPI()

    async def api_key(request: RequestInfo) -> Optional[str]:
        return request.headers.get("X-API-Key")

    async def plan(request: RequestInfo) -> str:
        return "3/minute" if request.headers.get("X-API-Key", "").startswith("pro-") else "1/minute"

    rl = RateLimit(app, key_func=api_key, clock=clock)

    @app.get("/data", dependencies=[Depends(rl.limit(plan))])
    async def data() -> str:
        return "data"

    c = client(app)
    pro, free = {"X-API-Key": "pro-1"}, {"X-API-Key": "free-1"}
    replies = [c.get("/data", headers=pro) for _ in range(4)]
    assert [r.status_code for r in replies] == [200, 200, 200, 429]
    assert limit_headers(replies[0]) == x_headers(3, 2, 20)
    assert [c.get("/data", headers=free).status_code for _ in range(2)] == [200, 429]
    assert c.get("/data", headers={"X-API-Key": "free-2"}).status_code == 200  # its own key
    # A plan function's own key_func overrides the RateLimit's.
    lim = RateLimiter("1/minute", clock=clock)

    @app.get("/ip", dependencies=[Depends(rl.limit(lim, key_func=lambda request: None))])
    async def by_ip() -> str:
        return "ip"

    assert [c.get("/ip", headers=pro).status_code for _ in range(2)] == [200, 429]
    assert lim.peek(f"ip:{PEER}").remaining == 0


def test_deduct_when_charges_an_http_exception_401(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, clock=clock)

    @app.post(
        "/login", dependencies=[Depends(rl.limit("2/minute", deduct_when=lambda s: s == 401))]
    )
    def login(password: str = "") -> Dict[str, bool]:
        if password != "secret":
            raise HTTPException(status_code=401, detail="bad password")
        return {"ok": True}

    c = client(app)
    for _ in range(3):  # successes are free
        ok = c.post("/login?password=secret")
        assert (ok.status_code, limit_headers(ok)) == (200, x_headers(2, 2, 0))
    failures = [c.post("/login") for _ in range(2)]
    assert [r.status_code for r in failures] == [401, 401]
    assert failures[0].json() == {"detail": "bad password"}
    assert [limit_headers(r) for r in failures] == [x_headers(2, 1, 30), x_headers(2, 0, 60)]
    refused = c.post("/login?password=secret")  # cannot pay any more: refused
    assert (refused.status_code, refused.content) == (429, DENIED_BODY)
    assert limit_headers(refused) == [*x_headers(2, 0, 60), ("retry-after", "30")]


def test_a_later_limit_refusing_gives_back_an_earlier_deduct_when_charge(
    clock: ManualClock,
) -> None:
    app = FastAPI()
    rl = RateLimit(app, clock=clock)
    outer = rl.limit("5/minute", name="outer", deduct_when=lambda s: s == 401)

    @app.get("/x", dependencies=[Depends(outer), Depends(rl.limit("1/minute"))])
    async def x() -> str:
        return "x"

    @app.get("/y", dependencies=[Depends(outer)])
    async def y() -> str:
        raise HTTPException(status_code=401, detail="no")

    c = client(app)
    replies = [c.get("/x") for _ in range(6)]
    assert [r.status_code for r in replies] == [200, *[429] * 5]
    assert limit_headers(replies[0]) == x_headers(5, 5, 0)  # the outer's, refunded on 200
    # A refusal carries the refusing limit's headers only.
    assert limit_headers(replies[1]) == [*x_headers(1, 0, 60), ("retry-after", "60")]
    # Each refused request's charge on "outer" was given back: all 5 are left,
    # and a charged 401 takes exactly one.
    charged = c.get("/y")
    assert (charged.status_code, limit_headers(charged)) == (401, x_headers(5, 4, 12))
    assert rl.integration.limiter_for("5/minute", "outer").peek(f"ip:{PEER}").remaining == 4


def test_a_crashing_route_keeps_its_deduct_when_charge(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, clock=clock)

    @app.get(
        "/boom",
        dependencies=[Depends(rl.limit("5/minute", name="b", deduct_when=lambda s: s == 401))],
    )
    async def boom() -> str:
        raise RuntimeError("crash")

    c = TestClient(app, client=(PEER, 50000), raise_server_exceptions=False)
    crashed = [c.get("/boom") for _ in range(2)]
    # The 500 comes from Starlette's outermost error middleware, past ours: it
    # has no limit headers, and the charge is never settled, so it stays taken.
    assert [(r.status_code, limit_headers(r)) for r in crashed] == [(500, []), (500, [])]
    assert rl.integration.limiter_for("5/minute", "b").peek(f"ip:{PEER}").remaining == 3


def _middleware(app: Any) -> Any:
    from limiter.integrations.fastapi import _RateLimitMiddleware

    node = app.middleware_stack
    while not isinstance(node, _RateLimitMiddleware):
        node = node.app
    return node


def test_the_default_finds_routes_through_hosts_mounts_routers_and_late_additions(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Host, Route

    import limiter.integrations.fastapi as module

    monkeypatch.setattr(module, "_CACHE_SIZE", 4)  # the cache starts afresh when full
    app = FastAPI()
    rl = RateLimit(app, default="2/minute", clock=clock)

    @app.get("/own", dependencies=[Depends(rl.limit("3/minute"))])
    async def own() -> str:
        return "own"

    async def page(request: Request) -> PlainTextResponse:
        return PlainTextResponse("page")

    app.router.routes.append(
        Host("api.example.com", rl.exempt(Starlette(routes=[Route("/{p:path}", page)])))
    )
    router = APIRouter()

    @router.get("/r", dependencies=[Depends(rl.limit("2/minute", name="r"))])
    def r() -> str:
        return "r"

    app.include_router(router, prefix="/v1")
    app.mount("/static", rl.exempt(Starlette(routes=[Route("/{p:path}", page)])))

    @app.get("/plain")
    def plain() -> str:
        return "plain"

    c = client(app)
    api = TestClient(app, base_url="http://api.example.com", client=(PEER, 50000))
    assert statuses(c, "/own", 4) == [200, 200, 200, 429]
    for path in ("/plain", "/v1/r", "/anything"):  # the exempt host, routes after it
        assert [(r.status_code, limit_headers(r)) for r in (api.get(path) for _ in range(3))] == [
            (200, [])
        ] * 3
    assert [(r.status_code, limit_headers(r)) for r in (c.get("/static/a") for _ in range(3))] == [
        (200, [])
    ] * 3
    assert statuses(c, "/v1/r", 3) == [200, 200, 429]
    assert statuses(c, "/plain", 3) == [200, 200, 429]  # the default
    assert (c.get("/late").status_code, c.get("/v1/late").status_code) == (429, 429)
    cache = _middleware(app).routes.cache
    assert cache is not None and 0 < len(cache) <= 4

    # Routes added after the first request are found.
    @app.get("/late", dependencies=[Depends(rl.limit("1/minute"))])
    def late() -> str:
        return "late"

    extra = APIRouter()

    @extra.get("/late")
    @rl.exempt
    def late_v1() -> str:
        return "late v1"

    app.include_router(extra, prefix="/v1")
    first = c.get("/late")
    assert (first.status_code, limit_headers(first)) == (200, x_headers(1, 0, 60))
    assert [(r.status_code, limit_headers(r)) for r in (c.get("/v1/late") for _ in range(3))] == [
        (200, [])
    ] * 3
    assert statuses(c, "/plain", 1) == [429]


def test_a_custom_route_is_asked_on_every_request(clock: ManualClock) -> None:
    from starlette.routing import BaseRoute, Match

    app = FastAPI()
    rl = RateLimit(app, default="1/minute", clock=clock)

    async def beta(scope: Any, receive: Any, send: Any) -> None:
        await PlainTextResponse("beta")(scope, receive, send)

    class Beta(BaseRoute):  # matches on a header: no answer can be cached by path
        def __init__(self) -> None:
            self.endpoint = beta

        def matches(self, scope: Any) -> Tuple[Match, Dict[str, Any]]:
            beta_header = (b"x-beta", b"1") in scope.get("headers", [])
            return (Match.FULL if beta_header else Match.NONE), {"endpoint": beta}

        async def handle(self, scope: Any, receive: Any, send: Any) -> None:
            await beta(scope, receive, send)

    app.router.routes.append(Beta())
    rl.exempt(beta)

    @app.get("/x")
    def x() -> str:
        return "x"

    c = client(app)
    assert [c.get("/x", headers={"X-Beta": "1"}).text for _ in range(3)] == ["beta"] * 3
    assert statuses(c, "/x", 2) == [200, 429]
    assert _middleware(app).routes.cache is None


def test_enabled_false_limits_nothing_and_adds_no_headers(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, default="1/minute", enabled=False, clock=clock)

    @app.get("/own", dependencies=[Depends(rl.limit("1/minute"))])
    async def own() -> str:
        return "own"

    @app.get("/other")
    async def other() -> str:
        return "other"

    c = client(app)
    for path in ("/own", "/other"):
        for _ in range(3):
            reply = c.get(path)
            assert (reply.status_code, limit_headers(reply)) == (200, [])


def test_header_style_none_sends_only_retry_after(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, header_style=None, clock=clock)

    @app.get("/x", dependencies=[Depends(rl.limit("1/minute"))])
    async def x() -> str:
        return "x"

    c = client(app)
    ok = c.get("/x")
    assert (ok.status_code, limit_headers(ok)) == (200, [])
    denied = c.get("/x")
    assert (denied.status_code, limit_headers(denied)) == (429, [("retry-after", "60")])


def test_allow_list_and_head(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, allow_list=["198.51.100.0/24"], clock=clock)

    @app.api_route("/x", methods=["GET", "HEAD"], dependencies=[Depends(rl.limit("1/minute"))])
    async def x() -> str:
        return "x"

    listed = client(app, "198.51.100.9")
    assert [limit_headers(listed.get("/x")) for _ in range(3)] == [[], [], []]
    c = client(app)
    assert c.head("/x").status_code == 200
    head = c.head("/x")
    assert (head.status_code, head.content) == (429, b"")
    assert limit_headers(head) == [*x_headers(1, 0, 60), ("retry-after", "60")]


def test_a_limit_without_init_app_is_a_clear_error(clock: ManualClock) -> None:
    rl = RateLimit(clock=clock)
    app = FastAPI()

    @app.get("/x", dependencies=[Depends(rl.limit("1/minute"))])
    async def x() -> str:
        return "x"

    with pytest.raises(RuntimeError, match=r"call rl\.init_app\(app\)"):
        client(app).get("/x")
    with pytest.raises(RuntimeError, match="before the app serves its first request"):
        rl.init_app(app)


def test_init_app_later_and_bad_arguments(clock: ManualClock) -> None:
    rl = RateLimit(default="1/minute", clock=clock)
    app = FastAPI()

    @app.get("/x")
    async def x() -> str:
        return "x"

    rl.init_app(app)
    with pytest.raises(RuntimeError, match="already called"):
        rl.init_app(app)
    assert statuses(client(app), "/x", 2) == [200, 429]
    with pytest.raises(TypeError, match="FastAPI or Starlette application, got 'app'"):
        rl.init_app("app")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="5/fortnight"):
        rl.limit("5/fortnight")
    with pytest.raises(TypeError, match="rate must be a string"):
        rl.limit(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="methods must be"):
        rl.limit("1/minute", methods="POST")
    with pytest.raises(TypeError, match="exempt\\(\\) takes a route's endpoint function, got 3"):
        rl.exempt(3)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="unexpected keyword argument 'key_fnc'"):
        RateLimit(key_fnc=None)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="on_error must be 'allow' or 'deny', got 'ignore'"):
        RateLimit(on_error="ignore")


def test_a_plain_starlette_app_gets_the_default_and_exempt(clock: ManualClock) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Route

    rl = RateLimit(default="1/minute", clock=clock)

    async def index(request: Request) -> PlainTextResponse:
        return PlainTextResponse("index")

    @rl.exempt
    async def health(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/", index), Route("/health", health)])
    rl.init_app(app)
    c = TestClient(app, client=(PEER, 50000))
    assert statuses(c, "/health", 2) == [200, 200]
    assert statuses(c, "/", 2) == [200, 429]


def test_a_websocket_route_refuses_the_handshake_with_1013(clock: ManualClock) -> None:
    app = FastAPI()
    rl = RateLimit(app, default="1/minute", clock=clock)

    @app.websocket("/ws", dependencies=[Depends(rl.limit("2/minute"))])
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text("hi")
        await websocket.close()

    c = client(app)
    for _ in range(2):
        with c.websocket_connect("/ws") as session:
            assert session.receive_text() == "hi"
    with pytest.raises(WebSocketDisconnect) as refused, c.websocket_connect("/ws"):
        pass
    assert refused.value.code == 1013


def test_a_websocket_gives_its_slot_back_through_a_middleware_copying_the_scope(
    clock: ManualClock,
) -> None:
    # A middleware added before init_app runs inside the limiter's; one that
    # rewrites the path passes on a copy of the scope, where the slot was recorded.
    from limiter import Concurrency, MemoryStore

    slots = RateLimiter(Concurrency(1, lease=30), store=MemoryStore(), clock=clock)
    app = FastAPI()

    class Rewrite:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            path = scope["path"].replace("/v1", "", 1)
            await self.app({**scope, "path": path, "raw_path": path.encode()}, receive, send)

    app.add_middleware(Rewrite)
    rl = RateLimit(app, key_func=lambda r: "k", clock=clock)

    @app.websocket("/ws", dependencies=[Depends(rl.limit(slots))])
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(str(slots.peek("k").remaining))
        await websocket.close()

    c = client(app)
    for _ in range(2):
        with c.websocket_connect("/v1/ws") as session:
            assert session.receive_text() == "0"  # held for the connection's life
        assert slots.peek("k").remaining == 1


def test_a_websocket_slot_on_an_app_without_the_middleware_is_refused_not_leaked(
    clock: ManualClock,
) -> None:
    # As for HTTP: without init_app nothing would give the slot back at the end.
    from limiter import Concurrency, MemoryStore

    slots = RateLimiter(Concurrency(1, lease=30), store=MemoryStore(), clock=clock)
    app = FastAPI()
    rl = RateLimit(key_func=lambda r: "k", clock=clock)  # init_app never called

    @app.websocket("/ws", dependencies=[Depends(rl.limit(slots))])
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()

    with (
        pytest.raises(RuntimeError, match=r"without its middleware: call rl\.init_app"),
        client(app).websocket_connect("/ws"),
    ):
        pass
    assert slots.peek("k").remaining == 1  # given back


def test_importing_limiter_does_not_import_fastapi() -> None:
    code = (
        "import sys, limiter, limiter.adapters, limiter.adapters.asgi\n"
        "limiter.RateLimiter('1/second')\n"
        "assert 'fastapi' not in sys.modules and 'starlette' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- an async store --------------------------------------------------------------------


@pytest.mark.redis
def test_an_async_redis_store_from_a_url(
    server: Any, clock: ManualClock, current_loop: Any
) -> None:
    from limiter import store_from_url

    # (current_loop: on Python 3.9 the client is built asking for a current loop.)

    store = store_from_url(server.url, asyncio=True)
    app = FastAPI()
    rl = RateLimit(app, default="3/minute", store=store, clock=clock)

    @app.get("/own", dependencies=[Depends(rl.limit("1/minute"))])
    async def own() -> str:
        return "own"

    @app.get("/other")
    async def other() -> str:
        return "other"

    # One portal (one event loop) for every request: the asyncio client is
    # bound to the loop it first ran in.
    with TestClient(app, client=(PEER, 50000)) as c:
        first = c.get("/own")
        assert (first.status_code, limit_headers(first)) == (200, x_headers(1, 0, 60))
        denied = c.get("/own")
        assert (denied.status_code, denied.content) == (429, DENIED_BODY)
        assert statuses(c, "/other", 4) == [200, 200, 200, 429]


# -- uvicorn on loopback ---------------------------------------------------------------


@pytest.fixture(scope="module")
def uvicorn_app() -> Iterator[Tuple[str, ManualClock]]:
    clock = ManualClock(T0)
    app = FastAPI()
    rl = RateLimit(app, default="3/minute", clock=clock)

    @app.get("/search", dependencies=[Depends(rl.limit("2/minute"))])
    async def search(q: str = "") -> Dict[str, str]:
        return {"q": q}

    @app.get("/items")
    def items() -> List[int]:
        return [1, 2]

    @app.get("/health")
    @rl.exempt
    async def health() -> str:
        return "ok"

    with uvicorn_running(app) as url:
        yield url, clock


@pytest.mark.servers
def test_uvicorn_exact_statuses_bodies_and_headers(uvicorn_app: Tuple[str, ManualClock]) -> None:
    url, clock = uvicorn_app
    with httpx.Client(base_url=url) as c:
        replies = [c.get("/search", params={"q": "x"}) for _ in range(3)]
        assert [r.status_code for r in replies] == [200, 200, 429]
        assert replies[0].json() == {"q": "x"}
        assert limit_headers(replies[0]) == x_headers(2, 1, 30)
        denied = replies[2]
        assert denied.content == DENIED_BODY
        assert limit_headers(denied) == [*x_headers(2, 0, 60), ("retry-after", "30")]
        assert denied.headers["content-type"] == "application/json"
        items = [c.get("/items") for _ in range(4)]
        assert [r.status_code for r in items] == [200, 200, 200, 429]
        assert items[0].json() == [1, 2]
        assert limit_headers(items[0]) == x_headers(3, 2, 20)
        health = c.get("/health")
        assert (health.status_code, health.json(), limit_headers(health)) == (200, "ok", [])
        clock.advance(30)
        assert c.get("/search").status_code == 200

    async def burst() -> List[int]:
        async with httpx.AsyncClient(base_url=url) as ac:
            return [
                r.status_code for r in await asyncio.gather(*(ac.get("/items") for _ in range(6)))
            ]

    clock.advance(60)  # the default bucket is full again: exactly 3 pass
    assert sorted(asyncio.run(burst())) == [200, 200, 200, 429, 429, 429]


# -- WebSocket messages under a real uvicorn ------------------------------------------


def echo_app(rl_options: Dict[str, Any]) -> Tuple[FastAPI, RateLimit, List[Any], Any]:
    """A FastAPI app with a ``/ws`` echo route limited to 2 handshakes a minute; what
    the route received (a ``WebSocketDisconnect`` as its ``(code, reason)``), and a
    semaphore released as each connection's route returns."""
    import threading

    app = FastAPI()
    rl = RateLimit(app, **rl_options)
    got: List[Any] = []
    ended = threading.Semaphore(0)

    @app.websocket("/ws", dependencies=[Depends(rl.limit("2/minute"))])
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                text = await websocket.receive_text()
                got.append(text)
                await websocket.send_text("echo:" + text)
        except WebSocketDisconnect as gone:
            got.append((gone.code, gone.reason))
        finally:
            ended.release()

    return app, rl, got, ended


def test_websocket_messages_closed_after_the_burst_and_the_refill_under_uvicorn() -> None:
    client = websockets_client()
    from websockets.exceptions import InvalidStatus

    clock = ManualClock(T0)
    limit = RateLimiter("2/second", burst=5, clock=clock)
    app, _, got, ended = echo_app({"clock": clock, "ws_messages_per_connection": limit})
    with uvicorn_running(app) as url:
        with client.connect(ws_url(url, "/ws")) as ws:
            seen = exchange(ws, 100, clock, T0)  # 10 a second
        assert ended.acquire(timeout=30)
        # 5 from the burst and the 6th on the token refilled by 0.5 s; the 7th closes.
        assert seen.replies == [f"echo:m{i}" for i in range(6)]
        assert seen.closed == (6, 1008, "too many messages")
        assert got == [*(f"m{i}" for i in range(6)), (1008, "too many messages")]
        # The route's own limit() still refuses the third handshake (1013 before
        # accept, which uvicorn answers with a 403).
        with client.connect(ws_url(url, "/ws")):
            pass
        with pytest.raises(InvalidStatus) as refused:
            client.connect(ws_url(url, "/ws"))
        assert refused.value.response.status_code == 403


def test_websocket_messages_per_key_follow_ratelimits_key_func_under_uvicorn() -> None:
    client = websockets_client()
    clock = ManualClock(T0)
    app, _, got, ended = echo_app(
        {
            "clock": clock,
            "key_func": header_key("X-API-Key"),
            "ws_messages_per_key": "2/minute",  # on RateLimit's store and clock
            "ws_on_limit": "drop",
        }
    )
    still = float("inf")  # every message at T0
    with uvicorn_running(app) as url:
        for api_key in ("a", "b"):
            headers = {"X-API-Key": api_key}
            with client.connect(ws_url(url, "/ws"), additional_headers=headers) as ws:
                replies = exchange(ws, 3, clock, T0, still).replies
            assert ended.acquire(timeout=30)
            assert replies[:2] == ["echo:m0", "echo:m1"], api_key
            assert json.loads(replies[2]) == {
                "status": 429,
                "code": "rate_limited",
                "message": "too many messages",
                "retry_after": 30.0,
            }
    assert got == ["m0", "m1", (1000, ""), "m0", "m1", (1000, "")]


def test_websocket_message_options_are_checked_by_ratelimit() -> None:
    with pytest.raises(TypeError, match=r"RateLimit\(\).*did you mean 'ws_on_limit'"):
        RateLimit(ws_on_limt="drop")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="ws_on_limit given without a limit"):
        RateLimit(ws_on_limit="drop")
    with pytest.raises(ValueError, match="ws_close_code must be 1008, 1013 or 4000-4999"):
        RateLimit(ws_messages_per_connection="1/second", ws_close_code=1011)
    assert RateLimit().messages is None
    limits, _ = RateLimit(ws_messages_per_key="1/second").messages  # type: ignore[misc]
    assert limits.per_key is not None and limits.per_connection is None
