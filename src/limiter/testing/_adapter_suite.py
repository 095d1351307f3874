"""``AdapterConformance``: the behaviour every web adapter must show.

Private: ``limiter.testing`` loads it (with pytest) on first use.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Type

import pytest

from limiter import DENIED_BODY, RequestInfo, Response
from limiter.clock import ManualClock
from limiter.core.concurrency import Concurrency
from limiter.core.result import RateLimitResult
from limiter.events import DecisionEvent
from limiter.http.keys import header_key
from limiter.http.responses import UNAVAILABLE_BODY
from limiter.http.rules import Rule
from limiter.ratelimiter import RateLimiter
from limiter.testing._adapter_doubles import (
    JSON_TYPE,
    RATE_LIMIT_HEADERS,
    AdapterBug,
    AdapterReply,
    BuggyStore,
    DownStore,
    fail,
)
from limiter.testing._shared import T0

RETRY_1 = ("Retry-After", "1")


class AdapterConformance:
    """Behaviour every web adapter must show.  Subclass; define ``make_app`` and ``request``.

    Limiters run on ``self.clock``, a ``ManualClock`` at ``T0``; the app is
    wrapped with ``make_app(limiter, **options)`` (``limiter`` may be a
    function of the request: pass it on as it is), requests go through
    ``request``, and ``close_app`` runs after each test.  ``client_peer``,
    ``proxy_peer``, ``fold_header_case``, ``awaits`` and
    ``takes_rate_strings`` adapt it to a driver: docs/testing.md
    "Testing an adapter".
    """

    client_peer = "203.0.113.7"
    proxy_peer = "10.0.0.1"
    fold_header_case = False
    awaits = False
    takes_rate_strings = False

    clock: ManualClock

    # -- hooks -------------------------------------------------------------

    def make_app(self, limiter: Any, **options: Any) -> Any:
        """The adapter under test with ``options``, around an app that answers
        every request ``200`` with the header ``X-App: 1`` and the body
        ``b"hello"`` (no body for ``HEAD``), except a path ``/status/<code>``:
        answered with that status code (same header and body)."""
        raise NotImplementedError("define make_app(limiter, **options) in your test class")

    def request(
        self,
        app: Any,
        method: str = "GET",
        path: str = "/",
        headers: Optional[Dict[str, str]] = None,
        peer: Optional[str] = None,
    ) -> Tuple[int, Sequence[Tuple[str, str]], bytes]:
        """Send one request through ``app`` from ``peer`` (``None``: ``client_peer``).

        Return ``(status, headers, body)``: the status code as an ``int``, the
        response headers as ``(name, value)`` pairs in the order received.
        """
        raise NotImplementedError("define request(app, method, path, headers, peer)")

    def close_app(self, app: Any) -> None:
        """Release what ``make_app`` acquired (a server, its thread)."""

    def expect_error(self, app: Any, error: Type[BaseException]) -> None:
        """Send a request whose handling raises ``error`` inside the adapter.

        By default ``request`` must raise it (no fail-open ``200``); a driver on
        a real server overrides this to check what its server did.
        """
        with pytest.raises(error):
            self.request(app)

    # -- plumbing ----------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _adapter_conformance_apps(self) -> Iterator[None]:
        self.clock = ManualClock(T0)
        self._apps: List[Any] = []
        try:
            yield
        finally:
            for app in self._apps:
                self.close_app(app)

    def limiter(self, rate: str = "3/second", **kwargs: Any) -> RateLimiter:
        """A ``RateLimiter`` on ``self.clock``."""
        return RateLimiter(rate, clock=self.clock, **kwargs)

    def app(self, limiter: Any, **options: Any) -> Any:
        """``make_app``, closed after the test."""
        app = self.make_app(limiter, **options)
        self._apps.append(app)
        return app

    def send(self, app: Any, *args: Any, **kwargs: Any) -> AdapterReply:
        """``request``'s answer as an ``AdapterReply`` (same arguments)."""
        status, got, body = self.request(app, *args, **kwargs)
        return AdapterReply(status, list(got), body)

    def named(self, headers: Iterable[Tuple[str, str]], *names: str) -> List[Tuple[str, str]]:
        """The pairs of ``headers`` called one of ``names`` (default: the rate-limit ones)."""
        wanted = names or RATE_LIMIT_HEADERS
        if self.fold_header_case:
            folded = {n.lower() for n in wanted}
            return [(k.lower(), v) for k, v in headers if k.lower() in folded]
        return [(k, v) for k, v in headers if k in wanted]

    def statuses(self, app: Any, n: int, *args: Any, **kwargs: Any) -> List[int]:
        """The statuses of ``n`` requests in a row (``send``'s arguments)."""
        return [self.send(app, *args, **kwargs).status for _ in range(n)]

    def passes_untouched(self, app: Any, **kwargs: Any) -> None:
        """Three requests answered by the app, without rate-limit headers."""
        for _ in range(3):
            status, headers, body = self.send(app, **kwargs)
            assert (status, body, self.named(headers)) == (200, b"hello", [])

    def assert_header(self, headers: Iterable[Tuple[str, str]], name: str, value: str) -> None:
        """``headers`` hold ``name`` once, as ``value``."""
        assert self.named(headers, name) == self.expected((name, value))

    def expected(self, *pairs: Tuple[str, str]) -> List[Tuple[str, str]]:
        if self.fold_header_case:
            return [(k.lower(), v) for k, v in pairs]
        return list(pairs)

    def x_headers(
        self, limit: int, remaining: int, reset_in: int, *more: Tuple[str, str]
    ) -> List[Tuple[str, str]]:
        """The ``X-RateLimit-*`` headers (the bucket is full again ``reset_in`` s after T0),
        then ``more``."""
        return self.expected(
            ("X-RateLimit-Limit", str(limit)),
            ("X-RateLimit-Remaining", str(remaining)),
            ("X-RateLimit-Reset", str(int(T0) + reset_in)),
            *more,
        )

    # -- the contract ------------------------------------------------------

    def test_admits_exactly_burst_then_429_with_the_exact_response(self) -> None:
        app = self.app(self.limiter("3/second"))
        for remaining in (2, 1, 0):
            status, headers, body = self.send(app)
            assert (status, body) == (200, b"hello")
            assert self.named(headers) == self.x_headers(3, remaining, 1)
        status, headers, body = self.send(app)
        assert (status, body) == (429, DENIED_BODY)
        length = ("Content-Length", str(len(DENIED_BODY)))
        assert self.named(headers, *RATE_LIMIT_HEADERS, *JSON_TYPE[:1], "Content-Length") == (
            self.x_headers(3, 0, 1, RETRY_1, JSON_TYPE, length)
        )
        assert self.named(headers, "X-App") == []  # the app never saw it

    def test_headers_on_success_keep_the_apps_own(self) -> None:
        status, headers, body = self.send(self.app(self.limiter("3/second")))
        assert (status, body) == (200, b"hello")
        self.assert_header(headers, "X-App", "1")
        assert self.named(headers) == self.x_headers(3, 2, 1)

    def test_head_429_has_the_headers_and_no_body(self) -> None:
        app = self.app(self.limiter("1/second"))
        assert self.send(app, "HEAD")[0] == 200
        status, headers, body = self.send(app, "HEAD")
        assert (status, body) == (429, b"")
        assert self.named(headers) == self.x_headers(1, 0, 1, RETRY_1)

    def test_time_refills_the_bucket(self) -> None:
        app = self.app(self.limiter("2/second"))
        assert self.statuses(app, 3) == [200, 200, 429]
        self.clock.advance(0.5)  # one token
        assert self.statuses(app, 2) == [200, 429]

    def test_draft_headers(self) -> None:
        app = self.app(self.limiter("2/second"), header_style="draft")
        assert self.named(self.send(app).headers) == self.expected(
            ("RateLimit-Policy", '"2/second";q=2;w=1'), ("RateLimit", '"2/second";r=1;t=1')
        )
        self.send(app)
        status, headers, _ = self.send(app)
        assert status == 429
        assert self.named(headers) == self.expected(
            ("RateLimit-Policy", '"2/second";q=2;w=1'),
            ("RateLimit", '"2/second";r=0;t=1'),
            RETRY_1,
        )

    def test_both_header_styles(self) -> None:
        app = self.app(self.limiter("2/second"), header_style="both")
        assert self.named(self.send(app).headers) == [
            *self.x_headers(2, 1, 1),
            *self.expected(
                ("RateLimit-Policy", '"2/second";q=2;w=1'), ("RateLimit", '"2/second";r=1;t=1')
            ),
        ]

    def test_exempt_requests_pass_without_headers_and_are_not_counted(self) -> None:
        app = self.app(self.limiter("1/second"), exempt=lambda r: r.path == "/health")
        self.passes_untouched(app, path="/health")
        assert self.send(app).status == 200  # the bucket is still full
        assert self.send(app, path="/health").status == 200
        assert self.send(app).status == 429

    def test_fixed_cost(self) -> None:
        app = self.app(self.limiter("10/second"), cost=4)
        replies = [self.send(app) for _ in range(3)]
        assert [r.status for r in replies] == [200, 200, 429]
        self.assert_header(replies[1].headers, "X-RateLimit-Remaining", "2")

    def test_cost_callable_sees_the_request(self) -> None:
        app = self.app(self.limiter("10/second"), cost=lambda r: 10 if r.method == "POST" else 1)
        assert self.send(app, "POST").status == 200
        assert self.send(app).status == 429

    def test_a_cost_above_the_burst_is_denied_without_retry_after_and_takes_nothing(
        self,
    ) -> None:
        app = self.app(self.limiter("10/second"), cost=lambda r: int(r.headers.get("X-Items") or 1))
        status, headers, body = self.send(app, "POST", headers={"X-Items": "9" * 400})
        assert (status, body) == (429, DENIED_BODY)
        assert self.named(headers) == self.x_headers(10, 10, 0)  # can never pass
        status, headers, _ = self.send(app)
        assert (status, self.named(headers)) == (200, self.x_headers(10, 9, 1))

    def test_key_func_with_the_client_address_as_fallback(self) -> None:
        app = self.app(self.limiter("1/second"), key_func=header_key("X-API-Key"))
        assert self.statuses(app, 2, headers={"X-API-Key": "a"}) == [200, 429]
        assert self.send(app, headers={"X-API-Key": "b"}).status == 200
        assert self.statuses(app, 2) == [200, 429]  # no key: the address

    def test_rules_use_their_own_limiter_and_key(self) -> None:
        default = self.limiter("10/second", name="default")
        login = self.limiter("2/second", name="login")
        api = self.limiter("1/second", name="api")
        rules = [
            Rule("/login", login, methods=["POST"]),
            Rule("/api/*", api, key_func=header_key("X-API-Key")),
        ]
        app = self.app(default, rules=rules)
        replies = [self.send(app, "POST", "/login") for _ in range(3)]
        assert [r.status for r in replies] == [200, 200, 429]
        self.assert_header(replies[2].headers, "X-RateLimit-Limit", "2")
        # GET is not the rule's method: the default limiter, untouched so far.
        assert self.named(self.send(app, "GET", "/login").headers) == self.x_headers(10, 9, 1)
        key1, key2 = {"X-API-Key": "k1"}, {"X-API-Key": "k2"}
        assert self.statuses(app, 2, path="/api/items", headers=key1) == [200, 429]
        assert self.send(app, path="/api", headers=key2).status == 200  # another key
        assert self.named(self.send(app, path="/apiary").headers) == self.x_headers(10, 8, 1)

    def test_rule_cost(self) -> None:
        default = self.limiter("10/second", name="default")
        export = self.limiter("10/second", name="export")
        app = self.app(default, rules=[Rule("/export", export, cost=4)])
        for left in ("6", "2"):
            headers = self.send(app, path="/export").headers
            self.assert_header(headers, "X-RateLimit-Remaining", left)
        assert self.send(app, path="/export").status == 429
        assert self.send(app, path="/other").status == 200

    def test_on_limited_builds_the_response(self) -> None:
        def on_limited(
            request: RequestInfo, result: RateLimitResult, headers: List[Tuple[str, str]]
        ) -> Response:
            body = b"slow down " + request.path.encode()
            extra = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
            return Response(429, [*headers, *extra], body)

        app = self.app(self.limiter("1/second"), on_limited=on_limited)
        self.send(app)
        status, headers, body = self.send(app, path="/x")
        assert (status, body) == (429, b"slow down /x")
        assert self.named(headers, *RATE_LIMIT_HEADERS, "Content-Type") == self.x_headers(
            1, 0, 1, RETRY_1, ("Content-Type", "text/plain")
        )

    def test_store_down_with_on_error_allow_lets_the_app_answer_without_headers(
        self,
    ) -> None:
        app = self.app(self.limiter("1/second", store=DownStore()), on_error="allow")
        for _ in range(3):
            status, headers, body = self.send(app)
            assert (status, body) == (200, b"hello")
            assert self.named(headers) == []
            self.assert_header(headers, "X-App", "1")

    def test_store_down_with_on_error_deny_is_a_503(self) -> None:
        app = self.app(self.limiter("1/second", store=DownStore()), on_error="deny")
        status, headers, body = self.send(app)
        assert (status, body) == (503, UNAVAILABLE_BODY)
        assert self.named(headers, *RATE_LIMIT_HEADERS, "Content-Type", "X-App") == (
            self.expected(JSON_TYPE)
        )

    @pytest.mark.parametrize("option", ["key_func", "cost", "exempt"])
    @pytest.mark.parametrize("on_error", ["allow", "deny"])
    def test_an_error_in_the_apps_callable_propagates(self, option: str, on_error: str) -> None:
        app = self.app(self.limiter("1/second"), on_error=on_error, **{option: fail})
        self.expect_error(app, AdapterBug)

    @pytest.mark.parametrize("on_error", ["allow", "deny"])
    def test_an_error_in_on_limited_propagates(self, on_error: str) -> None:
        app = self.app(self.limiter("1/second"), on_error=on_error, on_limited=fail)
        assert self.send(app).status == 200  # on_limited runs for limited requests only
        self.expect_error(app, AdapterBug)

    @pytest.mark.parametrize("on_error", ["allow", "deny"])
    def test_a_store_bug_that_is_no_store_error_propagates(self, on_error: str) -> None:
        app = self.app(self.limiter(store=BuggyStore()), on_error=on_error)
        self.expect_error(app, AdapterBug)

    def test_proxy_header_keys_each_forwarded_client(self) -> None:
        limiter = self.limiter("1/second")
        app = self.app(limiter, trusted_proxies=[self.proxy_peer], proxy_header="x-forwarded-for")
        proxy = self.proxy_peer
        # The proxy appends X-Forwarded-For; the client adds a Forwarded of its
        # own, and a fake X-Forwarded-For entry: neither changes the key.
        spoofed = {"X-Forwarded-For": "6.6.6.6, 198.51.100.4", "Forwarded": "for=1.1.1.1"}
        assert self.send(app, headers=spoofed, peer=proxy).status == 200
        plain = {"X-Forwarded-For": "198.51.100.4"}
        assert self.send(app, headers=plain, peer=proxy).status == 429
        other = {"X-Forwarded-For": "198.51.100.5"}
        assert self.send(app, headers=other, peer=proxy).status == 200  # its own bucket
        assert limiter.peek("ip:198.51.100.4").remaining == 0
        for untouched in (proxy, "1.1.1.1", "6.6.6.6"):
            assert limiter.peek(f"ip:{untouched}").remaining == 1, untouched

    # -- switches, allow lists, per-request limiters, deduct_when ---------------

    def test_header_style_none_sends_only_retry_after_on_the_429(self) -> None:
        app = self.app(self.limiter("1/second"), header_style=None)
        status, headers, body = self.send(app)
        assert (status, body, self.named(headers)) == (200, b"hello", [])
        status, headers, body = self.send(app)
        assert (status, body) == (429, DENIED_BODY)
        assert self.named(headers) == self.expected(RETRY_1)

    def test_disabled_passes_everything_untouched(self) -> None:
        limiter = self.limiter("1/second")
        self.passes_untouched(self.app(limiter, enabled=False))
        assert limiter.peek(f"ip:{self.client_peer}").remaining == 1  # nothing was taken

    def test_allow_listed_clients_are_never_limited_nor_charged(self) -> None:
        limiter = self.limiter("1/second")
        network = self.client_peer.rsplit(".", 1)[0] + ".0/24"
        self.passes_untouched(self.app(limiter, allow_list=[network]))
        assert limiter.peek(f"ip:{self.client_peer}").remaining == 1

    def test_the_allow_list_trusts_a_forwarding_header_only_from_a_trusted_proxy(self) -> None:
        limiter = self.limiter("1/second")
        proxy = self.proxy_peer
        app = self.app(
            limiter,
            allow_list=["198.51.100.0/24"],
            trusted_proxies=[proxy],
            proxy_header="x-forwarded-for",
        )
        listed = {"X-Forwarded-For": "198.51.100.9"}
        assert self.statuses(app, 3, headers=listed, peer=proxy) == [200] * 3
        spoofed = {"X-Forwarded-For": "198.51.100.9, 6.6.6.6"}  # the proxy appended 6.6.6.6
        assert self.statuses(app, 2, headers=spoofed, peer=proxy) == [200, 429]
        if self.client_peer != proxy:  # a client that reaches the app directly
            assert self.statuses(app, 2, headers=listed) == [200, 429]

    def test_a_limiter_function_picks_the_limiter_per_request(self) -> None:
        free = self.limiter("1/second", name="free")
        paid = self.limiter("3/second", name="paid")
        app = self.app(lambda request: paid if request.headers.get("X-Plan") == "paid" else free)
        plan = {"X-Plan": "paid"}
        assert self.statuses(app, 2) == [200, 429]
        replies = [self.send(app, headers=plan) for _ in range(4)]
        assert [r.status for r in replies] == [200, 200, 200, 429]
        assert self.named(replies[0].headers) == self.x_headers(3, 2, 1)

    def test_a_limiter_function_returning_no_limiter_is_a_type_error(self) -> None:
        self.expect_error(self.app(lambda request: 42), TypeError)
        if not self.takes_rate_strings:
            self.expect_error(self.app(lambda request: "5/minute"), TypeError)
            return
        app = self.app(lambda request: "2/second")  # a plan by its rate
        assert self.statuses(app, 3) == [200, 200, 429]

    def test_deduct_when_charges_only_the_matching_statuses(self) -> None:
        app = self.app(self.limiter("2/second"), deduct_when=lambda status: status == 401)
        for _ in range(4):  # not charged: the bucket stays full
            status, headers, body = self.send(app, path="/status/200")
            assert (status, body, self.named(headers)) == (200, b"hello", self.x_headers(2, 2, 0))
        replies = [self.send(app, path="/status/401") for _ in range(2)]
        assert [r.status for r in replies] == [401, 401]
        assert [self.named(r.headers) for r in replies] == [
            self.x_headers(2, 1, 1),
            self.x_headers(2, 0, 1),
        ]
        status, headers, body = self.send(app, path="/status/200")  # cannot pay: refused
        assert (status, body) == (429, DENIED_BODY)
        assert self.named(headers) == self.x_headers(2, 0, 1, RETRY_1)
        self.clock.advance(0.5)
        assert self.send(app, path="/status/200").status == 200
        assert self.send(app, path="/status/200").status == 200  # still not charged
        assert self.send(app, path="/status/401").status == 401
        assert self.send(app, path="/status/200").status == 429

    def test_a_rule_deduct_when_applies_to_its_route_only(self) -> None:
        default = self.limiter("10/second", name="default")
        login = self.limiter("1/second", name="login")
        failed = Rule("/login", login, deduct_when=lambda status: status >= 400)
        app = self.app(default, rules=[failed])
        # /login answers 200 here: successes are free.
        assert self.statuses(app, 3, path="/login") == [200] * 3
        assert login.peek(f"ip:{self.client_peer}").remaining == 1
        assert self.named(self.send(app, path="/x").headers) == self.x_headers(10, 9, 1)

    def test_async_callables_are_awaited_or_refused_up_front(self) -> None:
        free = self.limiter("1/second", name="free")
        paid = self.limiter("2/second", name="paid")

        async def key_func(request: RequestInfo) -> Optional[str]:
            return request.headers.get("X-Key")

        async def cost(request: RequestInfo) -> float:
            return 2 if request.method == "POST" else 1

        async def exempt(request: RequestInfo) -> bool:
            return request.path == "/health"

        async def pick(request: RequestInfo) -> RateLimiter:
            return paid if request.headers.get("X-Key") == "p" else free

        if not self.awaits:  # a synchronous adapter refuses each when it is built
            for option, func in (("key_func", key_func), ("cost", cost), ("exempt", exempt)):
                with pytest.raises(TypeError, match="cannot await"):
                    self.app(free, **{option: func})
            with pytest.raises(TypeError, match="cannot await"):
                self.app(pick)
            return
        app = self.app(pick, key_func=key_func, cost=cost, exempt=exempt)
        assert self.statuses(app, 3, path="/health") == [200] * 3
        assert self.statuses(app, 2, headers={"X-Key": "f"}) == [200, 429]
        assert self.statuses(app, 2, "POST", headers={"X-Key": "p"}) == [200, 429]
        assert paid.peek("p").remaining == 0

    # -- shadow mode --------------------------------------------------------------

    def test_shadow_mode_refuses_nothing_and_reports_shadow_denials(self) -> None:
        events: List[DecisionEvent] = []
        app = self.app(self.limiter("2/second", on_decision=events.append), mode="shadow")
        replies = [self.send(app) for _ in range(4)]
        assert [(r.status, r.body) for r in replies] == [(200, b"hello")] * 4
        assert [e.outcome for e in events] == ["allowed"] * 2 + ["shadow_denied"] * 2
        assert self.named(replies[3].headers) == self.x_headers(2, 0, 1)  # no Retry-After

    def test_a_rule_in_shadow_mode_beside_an_enforced_default(self) -> None:
        events: List[DecisionEvent] = []
        default = self.limiter("1/second", name="default")
        trial = self.limiter("1/second", name="trial", on_decision=events.append)
        app = self.app(default, rules=[Rule("/new/*", trial, mode="shadow")])
        assert self.statuses(app, 3, path="/new/x") == [200] * 3
        assert [e.outcome for e in events] == ["allowed", "shadow_denied", "shadow_denied"]
        assert self.statuses(app, 2, path="/other") == [200, 429]

    # -- slots (Concurrency policies): held for the whole response -----------

    def test_a_slot_is_held_for_the_response_and_given_back_after_it(self) -> None:
        slots = RateLimiter(Concurrency(1, lease=30), clock=self.clock)
        app = self.app(slots, header_style="draft")
        for _ in range(3):  # one slot, three requests in a row: each gives it back
            reply = self.send(app)
            assert reply.status == 200
            assert self.named(reply.headers) == self.expected(
                ("RateLimit-Policy", '"default";q=1;qu="concurrent-requests"'),
                ("RateLimit", '"default";r=0'),  # free slots while this one is held
            )
        assert slots.peek(f"ip:{self.client_peer}").remaining == 1

    def test_no_free_slot_is_a_429_whose_retry_after_is_the_lease_at_most(self) -> None:
        slots = RateLimiter(
            {"rate": "10/second", "inflight": Concurrency(1, lease=30)}, clock=self.clock
        )
        app = self.app(slots)
        holder = slots.slot(f"ip:{self.client_peer}")
        assert holder.take().allowed
        refused = self.send(app)
        assert refused.status == 429
        self.assert_header(refused.headers, "Retry-After", "30")
        rate = slots.peek(f"ip:{self.client_peer}").results[0]
        assert rate.remaining == 9  # all or nothing: the refused request took no token
        assert holder.give()
        assert self.send(app).status == 200
        assert slots.peek(f"ip:{self.client_peer}").results[1].remaining == 1
