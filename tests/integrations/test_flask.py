"""``limiter.integrations.flask.RateLimit``: conformance, decorators, config, a real server.

Requests go through Flask's test client (the peer set with ``environ_base``),
except in the last test, which runs an app under waitress on 127.0.0.1 and
uses httpx.  Time moves through a ``ManualClock`` only, so header values are exact.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple

import httpx
import pytest
from flask import Blueprint, Flask, abort, request
from flask.testing import FlaskClient
from flask.views import MethodView

from helpers.servers import waitress_running
from limiter import DENIED_BODY, ManualClock, RequestInfo
from limiter.http.keys import header_key
from limiter.http.responses import UNAVAILABLE_BODY
from limiter.integrations.flask import EXTENSION, RateLimit
from limiter.store import StoreError
from limiter.testing import T0
from limiter.testing._adapter_suite import AdapterConformance

Reply = Tuple[int, Sequence[Tuple[str, str]], bytes]
PEER = "203.0.113.7"
JSON_TAIL = [("Content-Type", "application/json"), ("Content-Length", str(len(DENIED_BODY)))]


@pytest.fixture(autouse=True)
def _no_storage_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIMITER_STORAGE_URL", raising=False)


# -- the conformance suite --------------------------------------------------------------


def hello_app() -> Flask:
    """200 ``hello`` with ``X-App: 1``; ``/status/<code>`` answers that code."""
    app = Flask(__name__)
    app.testing = True  # exceptions leave the test client, as the suite expects

    @app.route("/", defaults={"path": ""}, methods=["GET", "POST"])
    @app.route("/<path:path>", methods=["GET", "POST"])
    def hello(path: str) -> Any:
        status = int(path[7:]) if path.startswith("status/") else 200
        return b"hello", status, {"Content-Type": "text/plain", "X-App": "1"}

    return app


def send(
    client: FlaskClient,
    method: str = "GET",
    path: str = "/",
    headers: Optional[Dict[str, str]] = None,
    peer: str = PEER,
) -> Reply:
    # Closed, as a WSGI server closes every response (a held slot is given back then).
    with client.open(
        path, method=method, headers=headers or {}, environ_base={"REMOTE_ADDR": peer}
    ) as response:
        return response.status_code, list(response.headers), response.get_data()


class TestFlaskConformance(AdapterConformance):
    takes_rate_strings = True

    def make_app(self, limiter: Any, **options: Any) -> FlaskClient:
        app = hello_app()
        RateLimit(app, default=limiter, **options)
        return app.test_client()

    def request(
        self,
        app: FlaskClient,
        method: str = "GET",
        path: str = "/",
        headers: Optional[Dict[str, str]] = None,
        peer: Optional[str] = None,
    ) -> Reply:
        return send(app, method, path, headers, peer or self.client_peer)


# -- helpers ----------------------------------------------------------------------------


def x_headers(limit: int, remaining: int, reset_in: float) -> List[Tuple[str, str]]:
    return [
        ("X-RateLimit-Limit", str(limit)),
        ("X-RateLimit-Remaining", str(remaining)),
        ("X-RateLimit-Reset", str(int(T0 + reset_in))),
    ]


def limit_headers(headers: Sequence[Tuple[str, str]]) -> List[Tuple[str, str]]:
    names = {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}
    names |= {"RateLimit-Policy", "RateLimit"}
    return [(k, v) for k, v in headers if k in names]


class Site:
    """A Flask app with ``RateLimit`` on a ManualClock at T0, and its test client."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        self.clock = ManualClock(T0)
        self.app = Flask(__name__)
        self.app.testing = True
        self.app.config.update(config or {})
        kwargs.setdefault("clock", self.clock)
        self.rl = RateLimit(**kwargs)
        self.client = self.app.test_client()

    def start(self) -> Site:
        """``init_app`` (after the views are defined, as in many apps)."""
        self.rl.init_app(self.app)
        return self

    def send(self, path: str = "/", method: str = "GET", **kwargs: Any) -> Reply:
        return send(self.client, method, path, **kwargs)

    def statuses(self, path: str, n: int, method: str = "GET", **kwargs: Any) -> List[int]:
        return [self.send(path, method, **kwargs)[0] for _ in range(n)]


def two_views(site: Site, **limit: Any) -> None:
    rl = site.rl

    @site.app.get("/a")
    @rl.limit("2/minute", **limit)
    def a() -> str:
        return "a"

    @site.app.get("/b")
    @rl.limit("2/minute", **limit)
    def b() -> str:
        return "b"

    @site.app.get("/other")
    def other() -> str:
        return "other"


# -- limit, exempt, default ---------------------------------------------------------


def test_the_third_request_of_a_2_per_minute_route_gets_the_exact_429() -> None:
    site = Site(default="3/minute")
    two_views(site)
    site.start()
    first, second, third = (site.send("/a") for _ in range(3))
    assert first == (
        200,
        [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Length", "1"),
            *x_headers(2, 1, 30),
        ],
        b"a",
    )
    assert (second[0], limit_headers(second[1])) == (200, x_headers(2, 0, 60))
    assert third == (429, [*x_headers(2, 0, 60), ("Retry-After", "30"), *JSON_TAIL], DENIED_BODY)
    # The other route keeps the default, untouched by /a.
    status, headers, body = site.send("/other")
    assert (status, body, limit_headers(headers)) == (200, b"other", x_headers(3, 2, 20))
    site.clock.advance(30)
    assert site.statuses("/a", 2) == [200, 429]


def test_two_limited_views_do_not_share_buckets_and_a_name_shares_them() -> None:
    site = Site()
    two_views(site)
    site.start()
    assert site.statuses("/a", 3) == [200, 200, 429]
    assert site.statuses("/b", 3) == [200, 200, 429]

    shared = Site()
    two_views(shared, name="pair")
    shared.start()
    assert shared.statuses("/a", 1) + shared.statuses("/b", 2) == [200, 200, 429]
    assert shared.statuses("/a", 1) == [429]


def test_the_default_covers_the_other_views_with_one_set_of_buckets() -> None:
    site = Site(default="3/minute")
    for path in ("/x", "/y"):
        site.app.add_url_rule(path, path, lambda: "ok")
    site.start()
    assert site.statuses("/x", 2) + site.statuses("/y", 2) == [200, 200, 200, 429]
    # No view matched (404): the default applies too, same buckets.
    assert site.send("/missing")[::2] == (429, DENIED_BODY)
    assert site.send("/missing", peer="198.51.100.1")[0] == 404


def test_a_404_is_limited_by_the_default_and_gets_its_headers() -> None:
    site = Site(default="2/minute").start()
    status, headers, _ = site.send("/missing")
    assert (status, limit_headers(headers)) == (404, x_headers(2, 1, 30))


def test_no_default_limits_only_the_limited_views() -> None:
    site = Site()
    two_views(site)
    site.start()
    for _ in range(5):
        status, headers, body = site.send("/other")
        assert (status, body, limit_headers(headers)) == (200, b"other", [])


def test_exempt_views_skip_the_default() -> None:
    site = Site(default="1/minute")
    rl = site.rl

    @site.app.get("/health")
    @rl.exempt
    def health() -> str:
        return "ok"

    @site.app.get("/")
    def index() -> str:
        return "index"

    site.start()
    for _ in range(3):
        status, headers, body = site.send("/health")
        assert (status, body, limit_headers(headers)) == (200, b"ok", [])
    assert site.statuses("/", 2) == [200, 429]


def test_an_exempt_view_keeps_its_own_limit() -> None:
    site = Site(default="10/minute")

    @site.app.get("/login")
    @site.rl.exempt
    @site.rl.limit("1/minute")
    def login() -> str:
        return "ok"

    site.start()
    assert site.statuses("/login", 2) == [200, 429]


def test_methods_limits_only_those_methods() -> None:
    site = Site(default="1/minute")

    @site.app.route("/login", methods=["GET", "POST"])
    @site.rl.limit("2/minute", methods=["post"])
    def login() -> str:
        return request.method

    site.start()
    # GET: neither this limit nor the default (the view has limits of its own).
    for _ in range(3):
        status, headers, body = site.send("/login")
        assert (status, body, limit_headers(headers)) == (200, b"GET", [])
    assert site.statuses("/login", 3, "POST") == [200, 200, 429]


def test_a_get_only_limit_covers_head_too() -> None:
    site = Site()

    @site.app.get("/report")
    @site.rl.limit("2/minute", methods=["GET"])
    def report() -> str:
        return "report"

    site.start()
    # Flask answers HEAD with the GET view: not a way around the limit.
    assert site.statuses("/report", 3, "HEAD") == [200, 200, 429]
    assert site.statuses("/report", 1) == [429]


def test_views_made_by_one_factory_function_do_not_share_unless_named() -> None:
    def make_view(site: Site, text: str, **limit: Any) -> Any:
        @site.rl.limit("2/minute", **limit)
        def view() -> str:  # the same __qualname__ for every view made here
            return text

        return view

    site = Site()
    bp = Blueprint("v1", __name__, url_prefix="/v1")
    site.app.add_url_rule("/x", "x", make_view(site, "x"))
    site.app.add_url_rule("/y", "y", make_view(site, "y"))
    bp.add_url_rule("/x", "x", make_view(site, "x"))  # endpoint "v1.x"
    site.app.register_blueprint(bp)
    site.start()
    assert site.statuses("/x", 3) == [200, 200, 429]
    assert site.statuses("/y", 3) == [200, 200, 429]
    assert site.statuses("/v1/x", 3) == [200, 200, 429]

    named = Site()
    named.app.add_url_rule("/x", "x", make_view(named, "x", name="xy"))
    named.app.add_url_rule("/y", "y", make_view(named, "y", name="xy"))
    named.start()
    assert named.statuses("/x", 1) + named.statuses("/y", 2) == [200, 200, 429]


def test_a_stacked_limits_refusal_refunds_an_outer_deduct_when_charge() -> None:
    site = Site()

    @site.app.get("/")
    @site.rl.limit("2/hour", deduct_when=lambda status: status == 401)
    @site.rl.limit("1/minute")
    def index() -> str:
        return "ok"

    site.start()
    replies = [site.send() for _ in range(2)]
    assert [(r[0], limit_headers(r[1])) for r in replies] == [
        (200, x_headers(2, 2, 0)),  # taken on admission, given back: 200 is not 401
        (429, [*x_headers(1, 0, 60), ("Retry-After", "60")]),  # the inner limit's
    ]
    site.clock.advance(60)
    # The 429 did not match either: the outer limit is still full (reset: now).
    assert limit_headers(site.send()[1]) == x_headers(2, 2, 60)


def test_stacked_limits_all_apply_the_outermost_first_and_its_headers_shown() -> None:
    site = Site()

    @site.app.get("/")
    @site.rl.limit("5/minute")
    @site.rl.limit("2/second")
    def index() -> str:
        return "ok"

    site.start()
    replies = [site.send() for _ in range(3)]
    assert [r[0] for r in replies] == [200, 200, 429]
    assert limit_headers(replies[0][1]) == x_headers(5, 4, 12)
    # The inner limit refused the third request; the outer one kept its charge.
    assert limit_headers(replies[2][1]) == [*x_headers(2, 0, 1), ("Retry-After", "1")]
    site.clock.advance(1)
    # 4 of 5 tokens taken, 1/12 back: 1 left, full again in 47 s.
    assert limit_headers(site.send()[1]) == x_headers(5, 1, 48)


def test_a_limit_with_its_own_key_and_cost() -> None:
    site = Site()

    @site.app.post("/upload")
    @site.rl.limit("10/minute", key_func=header_key("X-API-Key"), cost=4)
    def upload() -> str:
        return "ok"

    site.start()
    key_a, key_b = {"X-API-Key": "a"}, {"X-API-Key": "b"}
    assert site.statuses("/upload", 3, "POST", headers=key_a) == [200, 200, 429]
    assert site.statuses("/upload", 1, "POST", headers=key_b) == [200]


# -- blueprints and class-based views ---------------------------------------------------


def test_a_blueprint_view() -> None:
    site = Site(default="5/minute")
    bp = Blueprint("api", __name__, url_prefix="/api")

    @bp.get("/items")
    @site.rl.limit("2/minute")
    def items() -> str:
        return "items"

    @bp.get("/free")
    def free() -> str:
        return "free"

    site.app.register_blueprint(bp)
    site.start()
    assert site.statuses("/api/items", 3) == [200, 200, 429]
    assert limit_headers(site.send("/api/free")[1]) == x_headers(5, 4, 12)


def test_a_method_view_with_decorators() -> None:
    site = Site(default="5/minute")

    class Items(MethodView):
        decorators: ClassVar[List[Any]] = [site.rl.limit("2/minute")]

        def get(self) -> str:
            return "get"

        def post(self) -> str:
            return "post"

    class Users(MethodView):
        decorators: ClassVar[List[Any]] = [site.rl.limit("2/minute")]

        def get(self) -> str:
            return "users"

    site.app.add_url_rule("/items", view_func=Items.as_view("items"))
    site.app.add_url_rule("/users", view_func=Users.as_view("users"))
    site.start()
    # Both methods share the view's limit; the two class views do not share.
    assert site.statuses("/items", 1) + site.statuses("/items", 2, "POST") == [200, 200, 429]
    assert site.statuses("/users", 3) == [200, 200, 429]


def test_a_method_view_with_a_limited_method() -> None:
    site = Site(default="5/minute")

    class Items(MethodView):
        @site.rl.limit("2/minute")
        def get(self) -> str:
            return "get"

        def post(self) -> str:
            return "post"

        @site.rl.exempt
        def delete(self) -> str:
            return "delete"

    site.app.add_url_rule("/items", view_func=Items.as_view("items"))
    site.start()
    assert site.statuses("/items", 1) + site.statuses("/items", 2, "HEAD") == [200, 200, 429]
    assert limit_headers(site.send("/items", "POST")[1]) == x_headers(5, 4, 12)  # the default
    status, headers, _ = site.send("/items", "DELETE")
    assert (status, limit_headers(headers)) == (200, [])


def test_class_views_of_one_endpoint_name_in_two_blueprints_do_not_share() -> None:
    site = Site()
    v1 = Blueprint("v1", __name__, url_prefix="/v1")
    v2 = Blueprint("v2", __name__, url_prefix="/v2")

    class A(MethodView):
        decorators: ClassVar[List[Any]] = [site.rl.limit("2/minute")]

        def get(self) -> str:
            return "a"

    class B(MethodView):
        decorators: ClassVar[List[Any]] = [site.rl.limit("2/minute")]

        def get(self) -> str:
            return "b"

    v1.add_url_rule("/items", view_func=A.as_view("items"))
    v2.add_url_rule("/items", view_func=B.as_view("items"))
    site.app.register_blueprint(v1)
    site.app.register_blueprint(v2)
    site.start()
    assert site.statuses("/v1/items", 3) == [200, 200, 429]
    assert site.statuses("/v2/items", 3) == [200, 200, 429]


def test_a_subclass_inheriting_a_limited_method_has_its_own_buckets() -> None:
    site = Site()

    class Base(MethodView):
        @site.rl.limit("2/minute")
        def get(self) -> str:
            return type(self).__name__

    class Child(Base):
        pass

    site.app.add_url_rule("/base", view_func=Base.as_view("base"))
    site.app.add_url_rule("/child", view_func=Child.as_view("child"))
    site.start()
    assert site.statuses("/base", 3) == [200, 200, 429]
    assert site.statuses("/child", 1) + site.statuses("/child", 2, "HEAD") == [200, 200, 429]
    # One RouteLimit per serving class, built on its first request and kept.
    limit = Base.get.__limiter_limits__[0]  # type: ignore[attr-defined]
    here = f"{__name__}.test_a_subclass_inheriting_a_limited_method_has_its_own_buckets"
    assert sorted(limit.routes) == [f"{here}.<locals>.Base.get", f"{here}.<locals>.Child.get"]
    state = site.app.extensions[EXTENSION]
    assert state.views["child"]["GET"] == state.views["child"]["HEAD"]  # the same guard


def test_class_views_given_one_name_share_their_buckets() -> None:
    site = Site()

    class A(MethodView):
        decorators: ClassVar[List[Any]] = [site.rl.limit("2/minute", name="catalog")]

        def get(self) -> str:
            return "a"

    class Base(MethodView):
        @site.rl.limit("2/minute", name="catalog")
        def get(self) -> str:
            return "base"

    class Child(Base):
        pass

    site.app.add_url_rule("/a", view_func=A.as_view("a"))
    site.app.add_url_rule("/child", view_func=Child.as_view("child"))
    site.start()
    assert site.statuses("/a", 1) + site.statuses("/child", 2) == [200, 200, 429]
    assert site.statuses("/a", 1) == [429]


# -- plans, deduct_when -----------------------------------------------------------------


def test_a_limit_function_picks_the_plan_by_api_key() -> None:
    site = Site()
    paid = {"key-paid"}

    def plan(req: RequestInfo) -> str:
        return "3/minute" if req.headers.get("X-API-Key") in paid else "1/minute"

    @site.app.get("/data")
    @site.rl.limit(plan, key_func=header_key("X-API-Key"))
    def data() -> str:
        return "data"

    site.start()
    free_key, paid_key = {"X-API-Key": "key-free"}, {"X-API-Key": "key-paid"}
    assert site.statuses("/data", 2, headers=free_key) == [200, 429]
    replies = [site.send("/data", headers=paid_key) for _ in range(4)]
    assert [r[0] for r in replies] == [200, 200, 200, 429]
    assert limit_headers(replies[0][1]) == x_headers(3, 2, 20)


def test_deduct_when_counts_only_failed_logins() -> None:
    site = Site(default="100/minute")

    @site.app.post("/login")
    @site.rl.limit("2/minute", deduct_when=lambda status: status == 401)
    def login() -> str:
        if request.form.get("password") != "right":
            abort(401)
        return "welcome"

    site.start()

    def post(password: str) -> Reply:
        reply = site.client.post(
            "/login", data={"password": password}, environ_base={"REMOTE_ADDR": PEER}
        )
        return reply.status_code, limit_headers(list(reply.headers)), reply.get_data()

    for _ in range(3):  # successes are free: the bucket stays full
        assert post("right") == (200, x_headers(2, 2, 0), b"welcome")
    assert post("wrong")[:2] == (401, x_headers(2, 1, 30))
    assert post("wrong")[:2] == (401, x_headers(2, 0, 60))
    # Out of tokens: refused before the view runs, even with the right password.
    assert post("right") == (429, [*x_headers(2, 0, 60), ("Retry-After", "30")], DENIED_BODY)
    site.clock.advance(30)
    assert [post("right")[0] for _ in range(2)] == [200, 200]
    assert post("wrong")[0] == 401
    assert post("right")[0] == 429


def test_in_production_a_view_error_is_the_500_that_deduct_when_sees(
    caplog: pytest.LogCaptureFixture,
) -> None:
    site = Site()
    site.app.testing = False  # Flask answers 500 instead of raising

    @site.app.get("/boom")
    @site.rl.limit("2/minute", deduct_when=lambda status: status >= 500)
    def boom() -> str:
        raise RuntimeError("bug in the view")

    site.start()
    replies = [site.send("/boom") for _ in range(3)]
    assert [(r[0], limit_headers(r[1])) for r in replies] == [
        (500, x_headers(2, 1, 30)),
        (500, x_headers(2, 0, 60)),
        (429, [*x_headers(2, 0, 60), ("Retry-After", "30")]),
    ]
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [RuntimeError, RuntimeError]


def test_a_view_error_answered_500_refunds_a_charge_that_does_not_match() -> None:
    site = Site()
    site.app.testing = False  # Flask answers 500 and runs after_request for it

    @site.app.get("/boom")
    @site.rl.limit("2/minute", deduct_when=lambda status: status == 401)
    def boom() -> str:
        raise RuntimeError("bug in the view")

    site.start()
    replies = [site.send("/boom") for _ in range(3)]
    assert [(r[0], limit_headers(r[1])) for r in replies] == [(500, x_headers(2, 2, 0))] * 3


def test_a_propagated_view_error_keeps_its_deduct_when_charge() -> None:
    site = Site()  # testing: the exception leaves Flask, no after_request runs

    @site.app.get("/boom")
    @site.rl.limit("2/minute", deduct_when=lambda status: status == 401)
    def boom() -> str:
        raise RuntimeError("bug in the view")

    site.start()
    for _ in range(2):
        with pytest.raises(RuntimeError, match="bug in the view"):
            site.send("/boom")
    # Nothing settled the two charges: they were kept.
    assert site.send("/boom") == (
        429,
        [*x_headers(2, 0, 60), ("Retry-After", "30"), *JSON_TAIL],
        DENIED_BODY,
    )


def test_head_on_a_limited_view_gets_the_429_headers_and_no_body() -> None:
    site = Site()

    @site.app.get("/")
    @site.rl.limit("1/minute")
    def index() -> str:
        return "hello"

    site.start()
    assert site.send("/", "HEAD")[::2] == (200, b"")
    assert site.send("/", "HEAD") == (
        429,
        [*x_headers(1, 0, 60), ("Retry-After", "60"), *JSON_TAIL],
        b"",
    )


# -- options ----------------------------------------------------------------------------


def test_header_style_none_sends_no_headers_but_retry_after() -> None:
    site = Site(default="1/minute", header_style=None).start()
    status, headers, _ = site.send()
    assert (status, limit_headers(headers)) == (404, [])
    status, headers, body = site.send()
    assert (status, body, headers) == (429, DENIED_BODY, [("Retry-After", "60"), *JSON_TAIL])


def test_the_allow_list_is_never_limited() -> None:
    site = Site(default="1/minute", allow_list=["203.0.113.0/24"]).start()
    for _ in range(3):
        status, headers, _ = site.send()
        assert (status, limit_headers(headers)) == (404, [])
    assert site.statuses("/", 2, peer="198.51.100.1") == [404, 429]


def test_disabled_adds_no_hooks_and_limits_nothing() -> None:
    site = Site(default="1/minute", enabled=False).start()
    assert site.app.before_request_funcs == {} and site.app.after_request_funcs == {}
    for _ in range(3):
        status, headers, _ = site.send()
        assert (status, limit_headers(headers)) == (404, [])


def test_on_error_deny_answers_503_for_a_view_limit() -> None:
    class DownStore:
        def apply(self, *args: Any) -> None:
            raise StoreError("down")

        apply_many = apply

    site = Site(store=DownStore(), on_error="deny")

    @site.app.get("/")
    @site.rl.limit("1/minute")
    def index() -> str:
        return "never"

    site.start()
    assert site.send() == (
        503,
        [("Content-Type", "application/json"), ("Content-Length", str(len(UNAVAILABLE_BODY)))],
        UNAVAILABLE_BODY,
    )


def test_an_error_in_a_limits_key_func_propagates() -> None:
    site = Site()

    def broken(req: RequestInfo) -> str:
        raise LookupError("bug")

    @site.app.get("/")
    @site.rl.limit("1/minute", key_func=broken)
    def index() -> str:
        return "never"

    site.start()
    with pytest.raises(LookupError, match="bug"):
        site.send()


def test_an_after_request_hook_replacing_the_response_gives_the_slot_back_on_its_close() -> None:
    # A hook registered before init_app runs after the limiter's; the response it
    # returns instead is the one the server closes, so the slot goes back then.
    from flask import Response

    from limiter import Concurrency, MemoryStore, RateLimiter

    slots = RateLimiter(Concurrency(1, lease=30), store=MemoryStore(), clock=ManualClock(T0))
    app = Flask(__name__)

    @app.after_request
    def replace(response: Response) -> Response:
        return Response(b"replaced", response.status_code, response.headers)

    rl = RateLimit(app, key_func=lambda r: "k")

    @app.route("/")
    @rl.limit(slots)
    def index() -> str:
        return "ok"

    client = app.test_client()
    with client.get("/") as response:
        assert (response.status_code, response.get_data()) == (200, b"replaced")
        assert response.headers["X-RateLimit-Remaining"] == "0"
        assert slots.peek("k").remaining == 0  # held until the response is closed
    assert slots.peek("k").remaining == 1
    with client.get("/") as response:
        assert response.status_code == 200


# -- app.config and factories ---------------------------------------------------------


def test_ratelimit_default_from_config() -> None:
    site = Site({"RATELIMIT_DEFAULT": "2/minute"}).start()
    assert site.statuses("/", 3) == [404, 404, 429]


def test_ratelimit_storage_url_from_config(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'limits.db'}"
    config = {"RATELIMIT_DEFAULT": "2/minute", "RATELIMIT_STORAGE_URL": url}
    one, two = Site(config).start(), Site(config).start()
    # Two apps (say two processes) on one database share the buckets.
    assert one.statuses("/", 1) + two.statuses("/", 2) == [404, 404, 429]


def test_ratelimit_enabled_from_config() -> None:
    site = Site({"RATELIMIT_DEFAULT": "1/minute", "RATELIMIT_ENABLED": False}).start()
    assert site.statuses("/", 3) == [404, 404, 404]


DRAFT = [("RateLimit-Policy", '"1/minute";q=1;w=60'), ("RateLimit", '"1/minute";r=0;t=60')]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, x_headers(1, 0, 60)),
        (False, []),
        ("x", x_headers(1, 0, 60)),
        ("draft", DRAFT),
        ("both", [*x_headers(1, 0, 60), *DRAFT]),
        (None, []),
    ],
)
def test_ratelimit_headers_from_config(value: object, expected: List[Tuple[str, str]]) -> None:
    site = Site({"RATELIMIT_DEFAULT": "1/minute", "RATELIMIT_HEADERS": value}).start()
    assert limit_headers(site.send()[1]) == expected


def test_arguments_win_over_config(tmp_path: Path) -> None:
    config = {
        "RATELIMIT_DEFAULT": "1/minute",
        "RATELIMIT_STORAGE_URL": f"sqlite:///{tmp_path / 'unused.db'}",
        "RATELIMIT_ENABLED": False,
        "RATELIMIT_HEADERS": False,
    }
    site = Site(config, default="2/minute", store=None, enabled=True, header_style="x").start()
    status, headers, _ = site.send()
    assert (status, limit_headers(headers)) == (404, x_headers(2, 1, 30))
    assert site.statuses("/", 2) == [404, 429]
    assert not (tmp_path / "unused.db").exists()
    # default=None given: no default, whatever the config says.
    assert Site(config, default=None, enabled=True).start().statuses("/", 3) == [404] * 3


def test_one_ratelimit_serves_two_apps_of_a_factory() -> None:
    clock = ManualClock(T0)
    rl = RateLimit(default="1/minute", clock=clock)

    def create_app(limit: str) -> Flask:
        app = Flask(__name__)
        app.config["RATELIMIT_DEFAULT"] = limit  # the argument wins
        rl.init_app(app)

        @app.get("/login")
        @rl.limit("2/minute")
        def login() -> str:
            return "login"

        return app

    first, second = create_app("5/minute").test_client(), create_app("5/minute").test_client()
    assert [send(first, path="/login")[0] for _ in range(3)] == [200, 200, 429]
    assert [send(second, path="/login")[0] for _ in range(3)] == [200, 200, 429]  # its own store
    assert [send(first)[0] for _ in range(2)] == [404, 429]
    assert [send(second)[0] for _ in range(2)] == [404, 429]


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"RATELIMIT_DEFAULT": "5/minit"}, ValueError, "RATELIMIT_DEFAULT='5/minit'"),
        ({"RATELIMIT_DEFAULT": 5}, TypeError, "RATELIMIT_DEFAULT=5"),
        (
            {"RATELIMIT_STORAGE_URL": "memcached://:hunter2@x"},
            ValueError,
            r"^RATELIMIT_STORAGE_URL: unknown store URL scheme 'memcached://' in "
            r"'memcached://:\*\*\*@x'",  # the password is not shown
        ),
        ({"RATELIMIT_STORAGE_URL": 6379}, TypeError, "RATELIMIT_STORAGE_URL must"),
        (
            {"RATELIMIT_ENABLED": "no"},
            TypeError,
            "RATELIMIT_ENABLED must be True or False, got 'no'",
        ),
        ({"RATELIMIT_HEADERS": "yes"}, ValueError, "RATELIMIT_HEADERS must .* got 'yes'"),
        ({"RATELIMIT_HEADERS": 1}, TypeError, "RATELIMIT_HEADERS must .* got 1"),
        (
            {"RATELIMIT_STORAGE_URI": "redis://:hunter2@x"},  # flask-limiter's name
            ValueError,
            r"^unknown config key RATELIMIT_STORAGE_URI \(flask-limiter's RATELIMIT_STORAGE_URI "
            r"is RATELIMIT_STORAGE_URL here; RateLimit reads RATELIMIT_DEFAULT, "
            r"RATELIMIT_STORAGE_URL, RATELIMIT_ENABLED, RATELIMIT_HEADERS, RATELIMIT_ALGORITHM\)$",
        ),
    ],
)
def test_bad_config_fails_in_init_app(config: Dict[str, Any], error: type, match: str) -> None:
    site = Site(config)
    with pytest.raises(error, match=match):
        site.start()
    assert EXTENSION not in site.app.extensions


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"default": "5/minit"}, ValueError, "5/minit"),
        ({"default": 5}, TypeError, "rate must be"),
        ({"header_style": "fancy"}, ValueError, "fancy"),
        ({"on_error": "ignore"}, ValueError, "on_error"),
        ({"key_fn": str}, TypeError, "did you mean 'key_func'"),
        ({"store": "memcached://x"}, ValueError, "memcached"),
        ({"clock": 5}, TypeError, "clock"),
    ],
)
def test_bad_arguments_fail_at_construction(
    kwargs: Dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        RateLimit(**kwargs)


def test_bad_limit_arguments_fail_at_decoration() -> None:
    rl = RateLimit()
    with pytest.raises(ValueError, match="5/minit"):
        rl.limit("5/minit")
    with pytest.raises(TypeError, match="methods"):
        rl.limit("5/minute", methods="POST")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot await"):

        async def key(req: RequestInfo) -> str:
            return "k"

        rl.limit("5/minute", key_func=key)
    with pytest.raises(TypeError, match="view function"):
        rl.limit("5/minute")(42)  # type: ignore[type-var]


def test_an_app_is_set_up_once() -> None:
    app = Flask(__name__)
    RateLimit(app)
    with pytest.raises(ValueError, match="already rate-limited"):
        RateLimit(app)
    with pytest.raises(TypeError, match=r"flask\.Flask"):
        RateLimit().init_app("app")  # type: ignore[arg-type]


# -- cost and imports -------------------------------------------------------------------


def test_the_guards_of_an_endpoint_are_looked_up_once_per_method() -> None:
    class CountingDict(Dict[str, Any]):
        gets: ClassVar[List[str]] = []

        def get(self, key: str, default: Any = None) -> Any:
            self.gets.append(key)
            return super().get(key, default)

    site = Site(default="100/minute")
    two_views(site)
    site.app.view_functions = CountingDict(site.app.view_functions)
    site.start()
    for _ in range(3):
        site.send("/a")
        site.send("/other")
        site.send("/other", "HEAD")
    assert CountingDict.gets == ["a", "other", "other"]
    state = site.app.extensions[EXTENSION]
    assert {endpoint: sorted(m) for endpoint, m in state.views.items()} == {
        "a": ["GET"],
        "other": ["GET", "HEAD"],
    }


def test_import_limiter_does_not_import_flask() -> None:
    code = textwrap.dedent(
        """
        import sys
        import limiter, limiter.adapters, limiter.integrations.common, limiter.adapters.wsgi
        limiter.RateLimiter("1/second")
        assert "flask" not in sys.modules, "flask imported"
        import limiter.integrations.flask
        assert "flask" in sys.modules
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- a real server ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def waitress_url() -> Iterator[Tuple[str, ManualClock]]:
    clock = ManualClock(T0)
    app = Flask(__name__)
    rl = RateLimit(app, default="3/minute", clock=clock)

    @app.post("/login")
    @rl.limit("2/minute", deduct_when=lambda status: status == 401)
    def login() -> str:
        if request.headers.get("X-Password") != "right":
            abort(401)
        return "welcome"

    @app.get("/")
    def index() -> str:
        return "hello"

    with waitress_running(app) as url:
        yield url, clock


@pytest.mark.servers
def test_under_waitress_exact_statuses_headers_and_bodies(
    waitress_url: Tuple[str, ManualClock],
) -> None:
    url, clock = waitress_url
    with httpx.Client(base_url=url) as client:
        replies = [client.get("/") for _ in range(4)]
        assert [r.status_code for r in replies] == [200, 200, 200, 429]
        assert [r.headers["x-ratelimit-remaining"] for r in replies] == ["2", "1", "0", "0"]
        assert replies[0].text == "hello"
        denied = replies[3]
        assert denied.content == DENIED_BODY
        assert denied.headers["content-type"] == "application/json"
        assert (denied.headers["retry-after"], denied.headers["x-ratelimit-reset"]) == (
            "20",
            str(int(T0) + 60),
        )
        head = client.head("/")
        assert (head.status_code, head.content, head.headers["retry-after"]) == (429, b"", "20")
        # The login limit counts failures only.
        right, wrong = {"X-Password": "right"}, {"X-Password": "wrong"}
        assert [client.post("/login", headers=right).status_code for _ in range(3)] == [200] * 3
        failed = [client.post("/login", headers=wrong) for _ in range(2)]
        assert [(r.status_code, r.headers["x-ratelimit-remaining"]) for r in failed] == [
            (401, "1"),
            (401, "0"),
        ]
        assert client.post("/login", headers=right).status_code == 429
        clock.advance(20)
        assert client.get("/").status_code == 200
        assert client.post("/login", headers=right).status_code == 429  # 30 s per failure
