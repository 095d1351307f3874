"""The Django integration: ``limiter.integrations.django`` (middleware and ``ratelimit``).

Django is configured once per process, by whichever module comes first
(helpers.django_settings, or docs/adapters.md's recipe through test_docs /
test_recipes): every
test here sets what it needs with ``override_settings`` (ROOT_URLCONF,
MIDDLEWARE, RATE_LIMIT), never a second ``settings.configure``.  Time moves
only through the ``ManualClock`` given as ``RATE_LIMIT["clock"]``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
from typing import Any, ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpResponse
from django.test import AsyncClient, Client, override_settings
from django.urls import path, re_path
from django.utils.decorators import method_decorator
from django.views import View

import helpers.django_settings  # noqa: F401  (configures Django, once per process)
from helpers.servers import uvicorn_running, waitress_running
from limiter import DENIED_BODY, ManualClock, RequestInfo
from limiter.http.keys import header_key
from limiter.integrations.django import RateLimitMiddleware, ratelimit
from limiter.testing import T0
from limiter.testing._adapter_suite import AdapterConformance

MIDDLEWARE = ["limiter.integrations.django.RateLimitMiddleware"]
Reply = Tuple[int, Sequence[Tuple[str, str]], bytes]


# -- views and URLconfs -------------------------------------------------------------------


def hello(request: Any, code: int = 200) -> HttpResponse:
    """The conformance app: 200 (or ``/status/<code>``), ``X-App: 1``, ``hello``."""
    body = b"" if request.method == "HEAD" else b"hello"
    response = HttpResponse(body, status=code, content_type="text/plain")
    response["X-App"] = "1"
    return response


class conformance_urls:
    urlpatterns: ClassVar[List[Any]] = [path("status/<int:code>", hello), re_path(r"^.*$", hello)]


def plain(request: Any) -> HttpResponse:
    return HttpResponse(b"plain")


@ratelimit("2/minute")
def one(request: Any) -> HttpResponse:
    return HttpResponse(b"one")


@ratelimit("2/minute")
def two(request: Any) -> HttpResponse:
    return HttpResponse(b"two")


@ratelimit("2/minute", name="shared")
def shared_a(request: Any) -> HttpResponse:
    return HttpResponse(b"a")


@ratelimit("2/minute", name="shared")
def shared_b(request: Any) -> HttpResponse:
    return HttpResponse(b"b")


@ratelimit("1/minute", methods=["POST"])
def form(request: Any) -> HttpResponse:
    return HttpResponse(request.method.encode())


@ratelimit("1/minute", methods=(name for name in ["POST"]))  # read once, at import
def form_once(request: Any) -> HttpResponse:
    return HttpResponse(request.method.encode())


@ratelimit("2/minute")
async def async_view(request: Any) -> HttpResponse:
    return HttpResponse(b"async")


def plan(request: RequestInfo) -> str:
    return "3/minute" if request.headers.get("X-Plan") == "pro" else "1/minute"


@ratelimit(plan, key_func=header_key("X-API-Key"))
def planned(request: Any) -> HttpResponse:
    return HttpResponse(b"planned")


@ratelimit("2/minute", methods=["POST"], deduct_when=lambda status: status in (401, 403))
def login(request: Any) -> HttpResponse:
    if request.POST.get("password") == "right":
        return HttpResponse(b"welcome")
    return HttpResponse(b"no", status=401)


@ratelimit("3/minute", name="stacked-outer")
@ratelimit("1/minute", name="stacked-inner")
def stacked(request: Any) -> HttpResponse:
    return HttpResponse(b"stacked")


@method_decorator(ratelimit("2/minute"), name="dispatch")
class Items(View):
    def get(self, request: Any) -> HttpResponse:
        return HttpResponse(b"items")

    def post(self, request: Any) -> HttpResponse:
        return HttpResponse(b"posted", status=201)


@method_decorator(ratelimit("2/minute"), name="dispatch")
class Things(View):
    """Same rate as ``Items``, both on the inherited ``View.dispatch``: their own buckets."""

    def get(self, request: Any) -> HttpResponse:
        return HttpResponse(b"things")


class Orders(View):
    """Only ``post`` has a limit of its own: GET falls under the default."""

    def get(self, request: Any) -> HttpResponse:
        return HttpResponse(b"orders")

    @method_decorator(ratelimit("1/minute"))
    def post(self, request: Any) -> HttpResponse:
        return HttpResponse(b"ordered", status=201)


@method_decorator(ratelimit("1/minute"), name="dispatch")
class AsyncItems(View):
    async def get(self, request: Any) -> HttpResponse:
        return HttpResponse(b"async items")


def failing_key(request: RequestInfo) -> Optional[str]:
    raise LookupError("the app's key function failed")


@ratelimit("1/minute", key_func=failing_key)
def broken(request: Any) -> HttpResponse:
    return HttpResponse(b"never")


def outcome(request: Any) -> HttpResponse:
    """What ``?do=`` asks for: an HTTP error raised, a crash, or a response."""
    do = request.GET.get("do", "403")
    if do == "403":
        raise PermissionDenied("no")
    if do == "404":
        raise Http404("none")
    if do == "400":
        raise SuspiciousOperation("odd")
    if do == "crash":
        raise RuntimeError("the view crashed")
    return HttpResponse(do.encode(), status=int(do))


@ratelimit("2/minute", deduct_when=lambda status: status == 401)
def guarded(request: Any) -> HttpResponse:
    return outcome(request)


@ratelimit("2/minute", deduct_when=lambda status: status == 401)
async def aguarded(request: Any) -> HttpResponse:
    return outcome(request)


@ratelimit("2/minute")
def charged(request: Any) -> HttpResponse:
    return outcome(request)


@ratelimit("2/minute")
async def acharged(request: Any) -> HttpResponse:
    return outcome(request)


@method_decorator(ratelimit("2/minute", deduct_when=lambda status: status == 401), name="dispatch")
class Guarded(View):
    def get(self, request: Any) -> HttpResponse:
        return outcome(request)


@method_decorator(
    [ratelimit("3/minute", name="stacked-cbv-outer"), ratelimit("1/minute")], name="dispatch"
)
class StackedItems(View):
    def get(self, request: Any) -> HttpResponse:
        return HttpResponse(b"stacked items")


def missing(request: Any) -> HttpResponse:
    raise Http404("no such item")


class urls:
    urlpatterns: ClassVar[List[Any]] = [
        path("guarded", guarded),
        path("aguarded", aguarded),
        path("charged", charged),
        path("acharged", acharged),
        path("guarded-cbv", Guarded.as_view()),
        path("missing", missing),
        path("stacked-cbv", StackedItems.as_view()),
        path("plain", plain),
        path("other", plain),
        path("health", plain),
        path("static/app.css", plain),
        path("one", one),
        path("two", two),
        path("shared-a", shared_a),
        path("shared-b", shared_b),
        path("form", form),
        path("form-once", form_once),
        path("async", async_view),
        path("planned", planned),
        path("login", login),
        path("stacked", stacked),
        path("items", Items.as_view()),
        path("things", Things.as_view()),
        path("orders", Orders.as_view()),
        path("async-items", AsyncItems.as_view()),
        path("broken", broken),
    ]


# -- plumbing -----------------------------------------------------------------------------


def rate_limited(rate_limit: Dict[str, Any], middleware: bool = True) -> Any:
    """The settings of one test: these URLs, the middleware (or none), ``rate_limit``."""
    return override_settings(
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=urls,
        MIDDLEWARE=MIDDLEWARE if middleware else [],
        RATE_LIMIT=rate_limit,
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def client(clock: ManualClock) -> Iterator[Client]:
    """The middleware with a ``10/minute`` default and exempt paths, on ``clock``."""
    config = {"default": "10/minute", "clock": clock, "exempt_paths": ["/health", "/static/*"]}
    with rate_limited(config):
        yield Client(REMOTE_ADDR="203.0.113.7")


def rl(response: Any) -> List[Tuple[str, str]]:
    """The rate-limit headers of a response, in order."""
    names = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")
    return [(k, v) for k, v in response.headers.items() if k in names]


def x(limit: int, remaining: int, reset_in: int) -> List[Tuple[str, str]]:
    return [
        ("X-RateLimit-Limit", str(limit)),
        ("X-RateLimit-Remaining", str(remaining)),
        ("X-RateLimit-Reset", str(int(T0) + reset_in)),
    ]


def statuses(client: Client, path: str, n: int, **kwargs: Any) -> List[int]:
    return [client.get(path, **kwargs).status_code for _ in range(n)]


# -- the conformance suite ----------------------------------------------------------------


class TestDjangoConformance(AdapterConformance):
    """The middleware in synchronous mode (Django's test Client is a WSGI-style handler)."""

    # async def key, cost, exempt and limiter functions are awaited (async_to_sync),
    # so one RATE_LIMIT serves WSGI and ASGI deployments alike.
    awaits = True
    takes_rate_strings = True

    def make_app(self, limiter: Any, **options: Any) -> Any:
        overridden = override_settings(
            ALLOWED_HOSTS=["*"],
            ROOT_URLCONF=conformance_urls,
            MIDDLEWARE=MIDDLEWARE,
            RATE_LIMIT={"default": limiter, **options},
        )
        overridden.enable()
        try:
            # Loads the middleware now: bad options fail here, as at start-up.
            app = overridden, self.make_client()
        except BaseException:
            overridden.disable()
            raise
        self.__dict__.setdefault("_enabled", []).append(overridden)
        return app

    def make_client(self) -> Any:
        client = Client()
        client.handler.load_middleware()
        return client

    def close_app(self, app: Any) -> None:
        # Each override_settings restores the settings of when it was enabled,
        # so nested ones must be disabled innermost first; the suite closes its
        # apps in the order they were made (the others would leak to the tests
        # that come next).
        enabled: List[Any] = self.__dict__.setdefault("_enabled", [])
        while app[0] in enabled:
            enabled.pop().disable()

    def request(
        self,
        app: Any,
        method: str = "GET",
        path: str = "/",
        headers: Optional[Dict[str, str]] = None,
        peer: Optional[str] = None,
    ) -> Reply:
        response = app[1].generic(
            method, path, headers=headers or {}, REMOTE_ADDR=peer or self.client_peer
        )
        return response.status_code, list(response.headers.items()), response.content


class TestDjangoAsyncConformance(TestDjangoConformance):
    """The same middleware in async mode: Django's ASGI handler (``AsyncClient``)."""

    def make_client(self) -> Any:
        return AsyncClient()

    def request(
        self,
        app: Any,
        method: str = "GET",
        path: str = "/",
        headers: Optional[Dict[str, str]] = None,
        peer: Optional[str] = None,
    ) -> Reply:
        # The scope is built here: AsyncClient.generic() turns extra keywords
        # into headers, and the peer must be the scope's "client".
        scope = {
            "method": method,
            "path": path,
            "query_string": "",
            "headers": [(b"host", b"testserver")]
            + [(k.lower().encode(), v.encode("latin-1")) for k, v in (headers or {}).items()],
            "client": [peer or self.client_peer, 0],
        }
        response = asyncio.run(app[1].request(**scope))
        return response.status_code, list(response.headers.items()), response.content


# -- the middleware and the decorator -------------------------------------------------------


def test_two_decorated_views_have_their_own_buckets(client: Client) -> None:
    assert statuses(client, "/one", 3) == [200, 200, 429]
    assert statuses(client, "/two", 3) == [200, 200, 429]


def test_the_same_name_shares_buckets(client: Client) -> None:
    assert statuses(client, "/shared-a", 1) == [200]
    assert statuses(client, "/shared-b", 2) == [200, 429]
    assert statuses(client, "/shared-a", 1) == [429]


def test_the_default_covers_the_other_views_with_one_set_of_buckets(client: Client) -> None:
    replies = [client.get(p) for p in ("/plain", "/other") * 5]
    assert [r.status_code for r in replies] == [200] * 10
    assert rl(replies[0]) == x(10, 9, 6)
    assert rl(replies[9]) == x(10, 0, 60)
    denied = client.get("/plain")
    assert (denied.status_code, denied.content) == (429, DENIED_BODY)
    assert rl(denied) == [*x(10, 0, 60), ("Retry-After", "6")]
    # A decorated view is not charged to the default: its own bucket only.
    one = client.get("/one")
    assert (one.status_code, rl(one)) == (200, x(2, 1, 30))


def test_the_third_request_of_a_2_per_minute_view_gets_the_exact_429(
    client: Client, clock: ManualClock
) -> None:
    replies = [client.get("/one") for _ in range(3)]
    assert [(r.status_code, r.content) for r in replies[:2]] == [(200, b"one")] * 2
    assert [rl(r) for r in replies[:2]] == [x(2, 1, 30), x(2, 0, 60)]
    denied = replies[2]
    assert (denied.status_code, denied.content) == (429, DENIED_BODY)
    assert list(denied.headers.items()) == [
        *x(2, 0, 60),
        ("Retry-After", "30"),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(DENIED_BODY))),
    ]
    assert json.loads(denied.content) == {
        "status": 429,
        "code": "rate_limited",
        "message": "too many requests",
    }
    # The other views keep the default, untouched by /one.
    other = client.get("/plain")
    assert (other.status_code, other.content, rl(other)) == (200, b"plain", x(10, 9, 6))
    head = client.head("/one")
    assert (head.status_code, head.content) == (429, b"")
    assert rl(head) == [*x(2, 0, 60), ("Retry-After", "30")]
    clock.advance(30)
    assert statuses(client, "/one", 2) == [200, 429]


def not_found_exchange(replies: List[Any]) -> None:
    """Four requests to paths of no view under a ``2/minute`` default."""
    assert [r.status_code for r in replies] == [404, 404, 429, 429]
    assert [rl(r) for r in replies[:2]] == [x(2, 1, 30), x(2, 0, 60)]
    assert replies[0]["Content-Type"] == "text/html; charset=utf-8"  # Django's own 404
    for denied in replies[2:]:
        assert denied.content == DENIED_BODY
        assert list(denied.headers.items()) == [
            *x(2, 0, 60),
            ("Retry-After", "30"),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(DENIED_BODY))),
        ]


def test_paths_of_no_view_count_against_the_default(clock: ManualClock) -> None:
    with rate_limited({"default": "2/minute", "clock": clock, "exempt_paths": ["/static/*"]}):
        client = Client()
        not_found_exchange([client.get(p) for p in ("/nope", "/wp-admin", "/nope", "/.env")])
        # The default's buckets are the views' buckets: scanning spent them.
        assert client.get("/plain").status_code == 429
        # Exempt paths stay exempt, found or not.
        gone = client.get("/static/gone.css")
        assert (gone.status_code, rl(gone)) == (404, [])
    with rate_limited({"clock": clock}):  # no default: nothing to count them against
        assert {r.status_code for r in (Client().get("/nope") for _ in range(3))} == {404}


def test_paths_of_no_view_count_against_the_default_under_asgi(clock: ManualClock) -> None:
    async def run() -> List[Any]:
        client = AsyncClient()
        return [await client.get(p) for p in ("/nope", "/wp-admin", "/nope", "/.env")]

    with rate_limited({"default": "2/minute", "clock": clock}):
        not_found_exchange(asyncio.run(run()))


def test_a_view_raising_http404_is_counted_once(client: Client) -> None:
    replies = [client.get("/missing") for _ in range(2)]
    assert [(r.status_code, rl(r)) for r in replies] == [(404, x(10, 9, 6)), (404, x(10, 8, 12))]


def test_exempt_paths_are_exact_or_prefixes(client: Client) -> None:
    for path_ in ("/health", "/static/app.css"):
        replies = [client.get(path_) for _ in range(12)]
        assert {r.status_code for r in replies} == {200}
        assert {tuple(rl(r)) for r in replies} == {()}
    assert rl(client.get("/plain")) == x(10, 9, 6)  # the exempt requests took nothing
    # A dot segment does not make a path exempt: it is read as the server would.
    assert rl(client.get("/static/../plain")) == x(10, 8, 12)


def test_methods_limits_only_those_methods(client: Client) -> None:
    assert [client.post("/form").status_code for _ in range(2)] == [200, 429]
    # GET is not limited by the decorator, nor by the default (the view has its own limit).
    gets = [client.get("/form") for _ in range(12)]
    assert {(r.status_code, r.content, tuple(rl(r))) for r in gets} == {(200, b"GET", ())}


def test_methods_given_as_a_one_shot_iterable_still_limit_those_methods(client: Client) -> None:
    assert [client.post("/form-once").status_code for _ in range(2)] == [200, 429]
    assert [client.get("/form-once").status_code for _ in range(2)] == [200, 200]


def test_class_based_view_with_method_decorator_on_dispatch(client: Client) -> None:
    replies = [client.get("/items"), client.post("/items"), client.get("/items")]
    assert [(r.status_code, r.content) for r in replies] == [
        (200, b"items"),
        (201, b"posted"),
        (429, DENIED_BODY),
    ]
    assert rl(replies[1]) == x(2, 0, 60)
    # Another class-based view with the same decorator has buckets of its own.
    assert statuses(client, "/things", 3) == [200, 200, 429]


def test_method_decorator_builds_the_call_once_per_method_and_class() -> None:
    # method_decorator hands the decorator a new partial of the bound method on
    # every request; what ratelimit derives from it is built once per class.
    limit = ratelimit("2/minute")

    class First(View):
        pass

    class Second(View):
        pass

    def per_request(cls: type) -> Any:
        bound = functools.wraps(View.dispatch)(functools.partial(View.dispatch.__get__(cls())))
        return limit(bound)

    a, b, c = per_request(First), per_request(First), per_request(Second)
    assert a.func is b.func  # the same call, with the view of each request
    assert a.args[0] is not b.args[0]
    assert a.func is not c.func  # another class: another call, with its own buckets


def test_stacked_method_decorators_on_dispatch(client: Client) -> None:
    first = client.get("/stacked-cbv")
    assert (first.status_code, rl(first)) == (200, x(3, 2, 20))  # the outer one's headers
    second = client.get("/stacked-cbv")
    assert (second.status_code, second.content) == (429, DENIED_BODY)
    assert rl(second) == [*x(1, 0, 60), ("Retry-After", "60")]


def test_class_based_view_with_a_decorated_method(client: Client) -> None:
    assert [client.post("/orders").status_code for _ in range(2)] == [201, 429]
    # GET has no limit of its own: the default applies.
    assert rl(client.get("/orders")) == x(10, 9, 6)


def test_async_class_based_view_with_method_decorator(client: Client) -> None:
    replies = [client.get("/async-items") for _ in range(2)]
    assert [(r.status_code, r.content) for r in replies] == [
        (200, b"async items"),
        (429, DENIED_BODY),
    ]
    assert rl(replies[0]) == x(1, 0, 60)


def test_async_view(client: Client) -> None:
    replies = [client.get("/async") for _ in range(3)]
    assert [(r.status_code, r.content) for r in replies] == [
        (200, b"async"),
        (200, b"async"),
        (429, DENIED_BODY),
    ]
    assert [rl(r) for r in replies] == [
        x(2, 1, 30),
        x(2, 0, 60),
        [*x(2, 0, 60), ("Retry-After", "30")],
    ]


def test_async_views_under_the_asgi_handler(clock: ManualClock) -> None:
    async def run() -> List[Any]:
        client = AsyncClient()
        paths = ["/async", "/async", "/async", "/plain", "/async-items", "/async-items"]
        return [await client.get(p) for p in paths]

    with rate_limited({"default": "10/minute", "clock": clock}):
        replies = asyncio.run(run())
    assert [r.status_code for r in replies] == [200, 200, 429, 200, 200, 429]
    assert rl(replies[2]) == [*x(2, 0, 60), ("Retry-After", "30")]
    assert rl(replies[3]) == x(10, 9, 6)


def test_a_plan_function_picks_the_rate_per_request(client: Client) -> None:
    free = {"X-API-Key": "f"}
    pro = {"X-API-Key": "p", "X-Plan": "pro"}
    assert statuses(client, "/planned", 2, headers=free) == [200, 429]
    replies = [client.get("/planned", headers=pro) for _ in range(4)]
    assert [r.status_code for r in replies] == [200, 200, 200, 429]
    assert rl(replies[0]) == x(3, 2, 20)


def test_deduct_when_counts_only_failed_logins(client: Client, clock: ManualClock) -> None:
    for _ in range(5):  # successes are free
        reply = client.post("/login", {"password": "right"})
        assert (reply.status_code, rl(reply)) == (200, x(2, 2, 0))
    failed = [client.post("/login", {"password": "wrong"}) for _ in range(2)]
    assert [(r.status_code, rl(r)) for r in failed] == [(401, x(2, 1, 30)), (401, x(2, 0, 60))]
    # Two failures spent the bucket: even the right password waits now.
    denied = client.post("/login", {"password": "right"})
    assert (denied.status_code, denied.content) == (429, DENIED_BODY)
    assert rl(denied) == [*x(2, 0, 60), ("Retry-After", "30")]
    assert client.get("/login").status_code == 401  # GET is not limited by it
    clock.advance(30)
    assert client.post("/login", {"password": "right"}).status_code == 200


@pytest.mark.parametrize("view", ["/guarded", "/aguarded", "/guarded-cbv"])
@pytest.mark.parametrize("raised", ["403", "404", "400"])
def test_http_errors_a_view_raises_are_settled_and_get_the_headers(
    client: Client, view: str, raised: str
) -> None:
    # deduct_when=status == 401: the charge taken on admission is given back.
    replies = [client.get(view, {"do": raised}) for _ in range(4)]
    assert [r.status_code for r in replies] == [int(raised)] * 4
    assert {tuple(rl(r)) for r in replies} == {tuple(x(2, 2, 0))}
    # The response is Django's own for the exception.
    assert replies[0]["Content-Type"] == "text/html; charset=utf-8"
    # A 401 is charged.
    unauthorized = [client.get(view, {"do": "401"}) for _ in range(3)]
    assert [(r.status_code, rl(r)) for r in unauthorized] == [
        (401, x(2, 1, 30)),
        (401, x(2, 0, 60)),
        (429, [*x(2, 0, 60), ("Retry-After", "30")]),
    ]


@pytest.mark.parametrize("view", ["/charged", "/acharged"])
def test_http_errors_count_against_a_plain_limit_with_headers(client: Client, view: str) -> None:
    replies = [client.get(view, {"do": "403"}) for _ in range(3)]
    assert [(r.status_code, rl(r)) for r in replies] == [
        (403, x(2, 1, 30)),
        (403, x(2, 0, 60)),
        (429, [*x(2, 0, 60), ("Retry-After", "30")]),
    ]


@pytest.mark.parametrize(
    ("view", "charged"),
    [("/guarded", False), ("/aguarded", False), ("/charged", True), ("/acharged", True)],
)
def test_a_crashing_view_settles_as_500_and_the_exception_propagates(
    clock: ManualClock, view: str, charged: bool
) -> None:
    with rate_limited({"default": "10/minute", "clock": clock}):
        # Django's own handling runs: the test client re-raises, a server answers 500.
        with pytest.raises(RuntimeError, match="the view crashed"):
            Client().get(view, {"do": "crash"})
        quiet = Client(raise_request_exception=False)
        assert quiet.get(view, {"do": "crash"}).status_code == 500
        # deduct_when(500) is false: given back; a plain limit keeps the charge.
        after = quiet.get(view, {"do": "200"})
        if charged:
            assert (after.status_code, after.content) == (429, DENIED_BODY)
        else:
            assert (after.status_code, rl(after)) == (200, x(2, 2, 0))


def test_stacked_decorators_all_apply(client: Client) -> None:
    first = client.get("/stacked")
    assert (first.status_code, rl(first)) == (200, x(3, 2, 20))  # the outer one's headers
    second = client.get("/stacked")
    # The inner 1/minute refuses, with its own headers (not the outer one's).
    assert (second.status_code, second.content) == (429, DENIED_BODY)
    assert rl(second) == [*x(1, 0, 60), ("Retry-After", "60")]


def test_the_decorator_works_without_the_middleware(clock: ManualClock) -> None:
    with rate_limited({"default": "1/minute", "clock": clock}, middleware=False):
        client = Client()
        assert statuses(client, "/one", 3) == [200, 200, 429]
        # No middleware: the default applies nowhere.
        assert {tuple(rl(r)) for r in (client.get("/plain") for _ in range(3))} == {()}


def test_a_changed_rate_limit_setting_rebuilds_everything(clock: ManualClock) -> None:
    with rate_limited({"default": "1/minute", "clock": clock}):
        assert statuses(Client(), "/plain", 2) == [200, 429]
        with rate_limited({"default": "3/minute", "clock": clock}):
            assert statuses(Client(), "/plain", 4) == [200, 200, 200, 429]
        # Back to the first value: a new integration, with a new memory store.
        assert statuses(Client(), "/plain", 2) == [200, 429]


def test_settings_switches_headers_off_allow_list_and_enabled(clock: ManualClock) -> None:
    base = {"default": "1/minute", "clock": clock}
    with rate_limited({**base, "header_style": None}):
        replies = [Client().get("/plain") for _ in range(2)]
        assert [(r.status_code, rl(r)) for r in replies] == [
            (200, []),
            (429, [("Retry-After", "60")]),
        ]
    with rate_limited({**base, "allow_list": ["203.0.113.0/24"]}):
        client = Client(REMOTE_ADDR="203.0.113.7")
        assert statuses(client, "/plain", 3) == [200] * 3
        assert statuses(client, "/one", 3) == [200] * 3  # decorated views too
        assert statuses(Client(REMOTE_ADDR="198.51.100.1"), "/plain", 2) == [200, 429]
    with rate_limited({**base, "enabled": False}):
        replies = [Client().get(p) for p in ("/plain", "/plain", "/one", "/one", "/one")]
        assert {(r.status_code, tuple(rl(r))) for r in replies} == {(200, ())}


def test_trusted_proxy_and_store_url_from_the_settings(clock: ManualClock) -> None:
    config = {
        "default": "1/minute",
        "clock": clock,
        "store": "memory://",
        "trusted_proxies": ["10.0.0.0/8"],
        "proxy_header": "x-forwarded-for",
    }
    with rate_limited(config):
        proxy = Client(REMOTE_ADDR="10.1.2.3")
        xff = {"X-Forwarded-For": "198.51.100.7"}
        assert statuses(proxy, "/plain", 2, headers=xff) == [200, 429]
        other = {"X-Forwarded-For": "198.51.100.8"}
        assert statuses(proxy, "/plain", 1, headers=other) == [200]


def test_errors_of_the_apps_callables_propagate(client: Client) -> None:
    with pytest.raises(LookupError, match="key function failed"):
        client.get("/broken")


def test_a_deduct_when_that_raises_gives_the_slot_back(tmp_path: Any) -> None:
    # The exception replaces the response the slot's release would have been put on.
    from limiter import Concurrency, RateLimiter, SQLiteStore

    def broken(status: int) -> bool:
        raise LookupError("deduct_when failed")

    clock = ManualClock(T0)
    store = SQLiteStore(str(tmp_path / "s.db"))
    slots = RateLimiter(Concurrency(1, lease=30), store=store, clock=clock)
    limit = ratelimit(slots, key_func=lambda r: "k", deduct_when=broken)
    sync_view = limit(lambda request: HttpResponse(b"ok"))

    async def async_view(request: Any) -> HttpResponse:
        return HttpResponse(b"ok")

    class slot_urls:
        urlpatterns: ClassVar[List[Any]] = [
            path("sync", sync_view),
            path("async", limit(async_view)),
            path("default", plain),
        ]

    config = {"default": slots, "deduct_when": broken, "key_func": lambda r: "k", "clock": clock}
    with rate_limited(config), override_settings(ROOT_URLCONF=slot_urls):
        for where in ("/sync", "/async", "/default"):
            with pytest.raises(LookupError, match="deduct_when failed"):
                Client().get(where)
            assert slots.peek("k").remaining == 1, where
        with pytest.raises(LookupError, match="deduct_when failed"):
            asyncio.run(AsyncClient().get("/default"))
        assert slots.peek("k").remaining == 1


class Timeout(BaseException):
    """Stands for gevent's ``Timeout``: a ``BaseException`` cutting a request short."""


def test_a_sync_request_cut_short_by_a_base_exception_gives_the_slot_back() -> None:
    # The async paths give the slot back when cancelled; a sync worker's request
    # cut short (gevent.Timeout) must too: its process goes on serving.
    from limiter import Concurrency, RateLimiter

    clock = ManualClock(T0)
    slots = RateLimiter(Concurrency(1, lease=30), clock=clock)

    def cut_short(request: Any) -> HttpResponse:
        raise Timeout

    class slot_urls:
        urlpatterns: ClassVar[List[Any]] = [
            path("view", ratelimit(slots, key_func=lambda r: "k")(cut_short)),
            path("default", cut_short),
        ]

    config = {"default": slots, "key_func": lambda r: "k", "clock": clock}
    with rate_limited(config), override_settings(ROOT_URLCONF=slot_urls):
        for where in ("/view", "/default"):
            with pytest.raises(Timeout):
                Client().get(where)
            assert slots.peek("k").remaining == 1, where


@pytest.mark.parametrize(
    ("rate_limit", "message"),
    [
        ([("default", "1/minute")], "settings.RATE_LIMIT must be a dict, got [("),
        ({"defualt": "1/minute"}, "unknown key 'defualt' (did you mean 'default'?)"),
        ({"key_fnc": None}, "unknown key 'key_fnc' (did you mean 'key_func'?)"),
        ({"default": "1/fortnight"}, "RATE_LIMIT['default'] = '1/fortnight' is invalid"),
        ({"default": 5}, "RATE_LIMIT['default'] = 5 is invalid"),
        ({"on_error": "ignore"}, "on_error must be 'allow' or 'deny', got 'ignore'"),
        ({"header_style": "fancy"}, "'fancy'"),
        ({"trusted_proxies": ["not-an-ip"]}, "not-an-ip"),
        ({"enabled": "yes"}, "enabled must be True or False, got 'yes'"),
        ({"exempt_paths": "/health"}, "RATE_LIMIT['exempt_paths'] must be a list"),
        ({"exempt_paths": ["health"]}, "invalid path 'health'"),
        ({"exempt_paths": ["/st*tic"]}, "invalid path '/st*tic'"),
        ({"clock": "now"}, "RATE_LIMIT['clock'] must be a limiter.Clock"),
        ({"store": "nosuch://x"}, "nosuch"),
    ],
)
def test_bad_settings_are_improperly_configured_at_start_up(rate_limit: Any, message: str) -> None:
    with rate_limited(rate_limit):
        with pytest.raises(ImproperlyConfigured) as error:
            RateLimitMiddleware(lambda request: HttpResponse())
        assert message in str(error.value)
        with pytest.raises(ImproperlyConfigured):  # Django builds it when it loads MIDDLEWARE
            Client().handler.load_middleware()


def test_a_store_url_as_the_whole_setting_never_shows_its_password() -> None:
    url = "redis://app:hunter2-secret@cache.internal:6379/0"
    settings_of = rate_limited(url)  # type: ignore[arg-type]
    with settings_of, pytest.raises(ImproperlyConfigured) as error:
        RateLimitMiddleware(lambda request: HttpResponse())
    message = str(error.value)
    assert "hunter2-secret" not in message
    assert message == (
        "settings.RATE_LIMIT must be a dict, got redis://app:***@cache.internal:6379/0 "
        '(a store URL goes under "store": {"store": "redis://..."})'
    )


def test_an_unnamed_limit_is_scoped_by_the_qualified_view_name() -> None:
    from limiter.integrations.django import _scope

    assert _scope(hello) == "test_django.hello"


def test_bad_decorator_arguments_fail_when_decorating() -> None:
    with pytest.raises(ValueError, match="fortnight"):
        ratelimit("1/fortnight")
    with pytest.raises(TypeError, match="methods"):
        ratelimit("1/minute", methods="POST")
    with pytest.raises(TypeError, match="name"):
        ratelimit("1/minute", name="")
    with pytest.raises(TypeError, match="HttpRequest"):
        ratelimit("1/minute")(lambda x: x)("not a request")


def test_importing_limiter_does_not_import_django() -> None:
    code = (
        "import sys, limiter, limiter.adapters, limiter.integrations.common\n"
        "from limiter import RateLimiter\n"
        "assert 'django' not in sys.modules, 'django was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- real servers on loopback --------------------------------------------------------------


def check_server(url: str, clock: ManualClock) -> None:
    """The same exchange against either server: default, a decorated view, HEAD, refill."""
    with httpx.Client(base_url=url) as http:
        replies = [http.get("/one") for _ in range(3)]
        assert [(r.status_code, r.content) for r in replies] == [
            (200, b"one"),
            (200, b"one"),
            (429, DENIED_BODY),
        ]
        denied = replies[2]
        # (in the server's order: waitress puts Retry-After first)
        assert sorted((k, v) for k, v in denied.headers.items() if k.startswith(("x-", "re"))) == [
            ("retry-after", "30"),
            ("x-ratelimit-limit", "2"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", str(int(T0) + 60)),
        ]
        assert denied.headers["content-type"] == "application/json"
        assert denied.headers["content-length"] == str(len(DENIED_BODY))
        head = http.head("/one")
        assert (head.status_code, head.content, head.headers["retry-after"]) == (429, b"", "30")
        plain = http.get("/plain")
        assert (plain.status_code, plain.content) == (200, b"plain")
        assert plain.headers["x-ratelimit-remaining"] == "0"  # the default is 1/minute
        assert http.get("/plain").status_code == 429
        login = [http.post("/login", data={"password": "wrong"}) for _ in range(3)]
        assert [r.status_code for r in login] == [401, 401, 429]
        assert [r.status_code for r in (http.get("/async"), http.get("/async"))] == [200, 200]
        assert http.get("/async").status_code == 429
        clock.advance(30)
        assert [http.get("/one").status_code for _ in range(2)] == [200, 429]


@pytest.mark.servers
def test_waitress_serves_the_wsgi_application(clock: ManualClock) -> None:
    pytest.importorskip("waitress")
    from django.core.wsgi import get_wsgi_application

    with rate_limited({"default": "1/minute", "clock": clock}):
        application = get_wsgi_application()  # loads the middleware: sync mode
        assert [m.__name__ for m in application._view_middleware] == ["process_view"]
        with waitress_running(application, threads=4) as url:
            check_server(url, clock)


@pytest.mark.servers
def test_uvicorn_serves_the_asgi_application(clock: ManualClock) -> None:
    from django.core.asgi import get_asgi_application

    with rate_limited({"default": "1/minute", "clock": clock}):
        application = get_asgi_application()  # loads the middleware: async mode
        # The middleware runs in async mode: its coroutine process_view, not one
        # adapted with sync_to_async.
        assert [m.__name__ for m in application._view_middleware] == ["_aprocess_view"]
        with uvicorn_running(application, proxy_headers=False) as url:
            check_server(url, clock)
