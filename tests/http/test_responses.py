"""The 429 bodies: the seed's JSON and ``on_limited="problem"``'s RFC 9457 problem details.

Each problem body is validated against a JSON schema written here from RFC 9457
(section 3: ``type``, ``title``, ``status``, ``detail``, ``instance``) and the
problem types of draft-ietf-httpapi-ratelimit-headers (section 5: their type
URIs and the ``violated-policies`` member); one test per problem type, and a
real server (uvicorn, waitress) answering a real 429 with it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import http_sfv
import httpx
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.servers import uvicorn_running, waitress_running
from limiter import (
    DENIED_BODY,
    FixedWindow,
    Limit,
    Lockout,
    ManualClock,
    Quota,
    RateLimiter,
    SlidingWindow,
    default_on_limited,
    rate_limit_headers,
)
from limiter.adapters.asgi import RateLimitMiddleware as ASGIMiddleware
from limiter.adapters.wsgi import RateLimitMiddleware as WSGIMiddleware
from limiter.http.options import Options
from limiter.http.request import RequestInfo
from limiter.http.responses import PROBLEM_TYPES, problem_body, problem_on_limited
from limiter.testing._adapter_doubles import DownStore

TYPES = "https://iana.org/assignments/http-problem-types#"

#: RFC 9457 section 3 (the members and their JSON types; "type" and "instance"
#: are URI references, "status" the response's status code) with the draft's
#: extension member; the problem types of the draft, each with its
#: registered status (429, or 503 for temporary-reduced-capacity).
PROBLEM_SCHEMA: Dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "type": {"type": "string", "pattern": r"^[a-z][a-z0-9+.-]*:[^\s]*$"},
        "title": {"type": "string", "minLength": 1},
        "status": {"type": "integer", "minimum": 100, "maximum": 599},
        "detail": {"type": "string", "minLength": 1},
        "instance": {"type": "string"},
        "violated-policies": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
        },
    },
    "required": ["type", "title", "status", "detail", "violated-policies"],
    "oneOf": [
        {
            "properties": {
                "type": {"const": TYPES + "quota-exceeded"},
                "title": {"const": "Quota Exceeded"},
                "status": {"const": 429},
            }
        },
        {
            "properties": {
                "type": {"const": TYPES + "abnormal-usage-detected"},
                "title": {"const": "Abnormal Usage Detected"},
                "status": {"const": 429},
            }
        },
        {
            "properties": {
                "type": {"const": TYPES + "temporary-reduced-capacity"},
                "title": {"const": "Temporary Reduced Capacity"},
                "status": {"const": 503},
            }
        },
    ],
}
VALIDATOR = jsonschema.Draft202012Validator(PROBLEM_SCHEMA)


def test_the_schema_is_a_valid_schema_and_refuses_what_it_must() -> None:
    jsonschema.Draft202012Validator.check_schema(PROBLEM_SCHEMA)
    good = {
        "type": TYPES + "quota-exceeded",
        "title": "Quota Exceeded",
        "status": 429,
        "detail": "d",
        "violated-policies": ["daily"],
    }
    VALIDATOR.validate(good)
    for bad in (
        {**good, "status": "429"},
        {**good, "status": 503},
        {**good, "violated-policies": "daily"},
        {**good, "violated-policies": []},
        {**good, "type": "quota-exceeded"},
        {k: v for k, v in good.items() if k != "detail"},
    ):
        assert not VALIDATOR.is_valid(bad), bad


def problem(body: bytes) -> Dict[str, Any]:
    """``body`` parsed as JSON and validated against the schema."""
    document = json.loads(body)
    VALIDATOR.validate(document)
    return document


def request_info() -> RequestInfo:
    return RequestInfo("GET", "/", {}, "203.0.113.7")


# -- one test per problem type ---------------------------------------------------------


def test_quota_exceeded_names_the_refusing_limits_and_the_wait() -> None:
    clock = ManualClock(start=1_700_000_000)
    limiter = RateLimiter("10/second;1000/day", clock=clock)
    for _ in range(10):
        limiter.check("k")
    denied = limiter.check("k")
    headers = rate_limit_headers(denied, now=clock.now(), style="draft")
    response = problem_on_limited(request_info(), denied, headers)
    assert response.status == 429
    assert response.headers == [
        *headers,
        ("Content-Type", "application/problem+json"),
        ("Content-Length", str(len(response.body))),
    ]
    assert response.body == (
        b'{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",'
        b'"title":"Quota Exceeded","status":429,'
        b'"detail":"Quota exceeded: \\"10/second\\"; retry in 1 s.",'
        b'"violated-policies":["10/second"]}'
    )
    assert problem(response.body)["violated-policies"] == ["10/second"]  # not "1000/day"


def test_quota_exceeded_lists_every_refusing_named_limit() -> None:
    clock = ManualClock(start=1_700_000_000)
    limiter = RateLimiter({"requests": "2/minute", "tokens": "100/minute"}, clock=clock)
    limiter.check("k", cost={"requests": 2, "tokens": 100})
    denied = limiter.check("k", cost={"requests": 1, "tokens": 1})
    document = problem(problem_body(denied))
    assert document["violated-policies"] == ["requests", "tokens"]
    assert document["detail"] == 'Quota exceeded: "requests", "tokens"; retry in 30 s.'


def test_quota_exceeded_for_a_cost_that_can_never_pass_says_so() -> None:
    denied = RateLimiter(Limit(1, 5, "api")).check("k", 6)
    assert denied.retry_after == math.inf
    document = problem(problem_body(denied))
    assert document["type"] == TYPES + "quota-exceeded"
    assert document["detail"] == (
        'Quota exceeded: "api"; this request costs more than the quota holds and can never pass.'
    )


def test_abnormal_usage_detected_for_a_lockout() -> None:
    clock = ManualClock(start=1_700_000_000)
    limiter = RateLimiter(
        "1/second", clock=clock, lockout=Lockout(breaches=2, within=60, duration=900)
    )
    limiter.check("k")
    first = limiter.check("k")  # one breach: a plain refusal
    assert problem(problem_body(first))["type"] == TYPES + "quota-exceeded"
    clock.advance(0.5)
    locked = limiter.check("k")  # the second breach locks the key out
    assert locked.locked_out
    document = problem(problem_body(locked))
    assert document == {
        "type": TYPES + "abnormal-usage-detected",
        "title": "Abnormal Usage Detected",
        "status": 429,
        "detail": 'Locked out by "lockout" after repeated refusals; retry in 900 s.',
        "violated-policies": ["1/second", "lockout"],
    }
    clock.advance(10)  # the bucket is full again; the lockout alone refuses
    later = limiter.check("k")
    assert problem(problem_body(later))["violated-policies"] == ["lockout"]
    assert dict(rate_limit_headers(later, now=clock.now()))["Retry-After"] == "890"


def test_temporary_reduced_capacity_is_never_sent() -> None:
    # The type is for a server whose capacity, hence its quotas, is temporarily
    # lower (draft section 5.2). Nothing in the library lowers a quota; the one
    # 503 it sends (a failing store under on_error="deny") exceeds no policy,
    # so it keeps its own body (docs/headers.md, "Problem details").
    limiter = RateLimiter("1/second", store=DownStore())
    app = WSGIMiddleware(hello, limiter, on_limited="problem", on_error="deny")
    status, headers, body = call_wsgi(app)
    assert status == "503 Service Unavailable"
    assert ("Content-Type", "application/json") in headers
    assert b"temporary-reduced-capacity" not in body
    # The schema knows the type: the draft's own example, with RFC 9457's
    # status and detail, validates.
    VALIDATOR.validate(
        {
            "type": TYPES + "temporary-reduced-capacity",
            "title": "Temporary Reduced Capacity",
            "status": 503,
            "detail": "Request cannot be satisfied due to temporary server capacity constraints",
            "violated-policies": ["hourly"],
        }
    )
    assert set(PROBLEM_TYPES) == {"quota-exceeded", "abnormal-usage-detected"}


# -- every refusal's body ---------------------------------------------------------------

NAMES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=10)
NAMES = NAMES.filter(lambda n: '"' not in n and "\\" not in n and n != "lockout")


@st.composite
def limiters(draw: st.DrawFn) -> Tuple[RateLimiter, ManualClock]:
    """One to three policies of any kind, maybe a lockout."""
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    kinds = [
        lambda n: Limit(draw(st.floats(0.01, 100)), draw(st.integers(1, 20)), n),
        lambda n: FixedWindow(draw(st.integers(1, 20)), draw(st.sampled_from([1, 2, 60])), name=n),
        lambda n: SlidingWindow(draw(st.integers(1, 20)), draw(st.sampled_from([1, 60])), name=n),
        lambda n: Quota(draw(st.integers(1, 20)), "hour", name=n),
    ]
    policies = [draw(st.sampled_from(kinds))(name) for name in names]
    lockout = draw(st.none() | st.just(Lockout(breaches=2, within=60, duration=300)))
    clock = ManualClock(1_700_000_000)
    return RateLimiter(policies, clock=clock, lockout=lockout), clock


@settings(max_examples=150, deadline=None)
@given(
    made=limiters(),
    ops=st.lists(st.tuples(st.floats(0, 5), st.integers(0, 4) | st.just(10**6)), max_size=15),
)
def test_every_refusal_gets_a_valid_problem_body_naming_its_policies(
    made: Tuple[RateLimiter, ManualClock], ops: Sequence[Tuple[float, int]]
) -> None:
    limiter, clock = made
    for wait, cost in ops:
        clock.advance(wait)
        res = limiter.check("k", cost)
        if res.allowed:
            continue
        headers = rate_limit_headers(res, now=clock.now(), style="both")
        response = problem_on_limited(request_info(), res, headers)
        document = problem(response.body)
        assert document["type"] == TYPES + (
            "abnormal-usage-detected" if res.locked_out else "quota-exceeded"
        )
        assert response.headers[-2:] == [
            ("Content-Type", "application/problem+json"),
            ("Content-Length", str(len(response.body))),
        ]
        names = [item.value for item in sf_list(dict(headers)["RateLimit-Policy"])]
        assert set(document["violated-policies"]) <= set(names)
        refusing = [p.policy for p in res.results or (res,) if not p.allowed]
        assert document["violated-policies"] == refusing
        retry = dict(headers).get("Retry-After")
        assert (f"retry in {retry} s." in document["detail"]) == (retry is not None)


def sf_list(value: str) -> http_sfv.List:
    parsed = http_sfv.List()
    parsed.parse(value.encode("ascii"))
    return parsed


# -- the option -----------------------------------------------------------------------


def test_on_limited_problem_is_the_option_value_and_other_strings_are_refused() -> None:
    assert Options({"on_limited": "problem"}).on_limited is problem_on_limited
    assert Options({}).on_limited is default_on_limited
    with pytest.raises(ValueError, match="on_limited must be a function, None or 'problem'"):
        Options({"on_limited": "problems"})
    with pytest.raises(TypeError, match="on_limited must be callable or None, got 1"):
        Options({"on_limited": 1})


def test_quota_units_are_checked_when_the_middleware_is_built() -> None:
    limiter = RateLimiter({"requests": "10/second", "upload": "1000000/minute"})
    WSGIMiddleware(hello, limiter, quota_units={"upload": "content-bytes"})
    with pytest.raises(ValueError, match="quota_units names no limit of this limiter: 'uplaod'"):
        WSGIMiddleware(hello, limiter, quota_units={"uplaod": "content-bytes"})
    with pytest.raises(ValueError, match=r"quota_units\['upload'\] must be one of"):
        WSGIMiddleware(hello, limiter, quota_units={"upload": "bytes"})
    # A limiter function's limits are known per request only: not checked.
    WSGIMiddleware(hello, lambda request: limiter, quota_units={"uplaod": "content-bytes"})


def test_the_seed_body_is_unchanged_by_default() -> None:
    status, headers, body = call_wsgi(WSGIMiddleware(hello, RateLimiter("1/minute")), times=2)
    assert (status, body) == ("429 Too Many Requests", DENIED_BODY)
    assert ("Content-Type", "application/json") in headers


# -- real servers -----------------------------------------------------------------------


def hello(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


def call_wsgi(app: Any, times: int = 1) -> Tuple[str, List[Tuple[str, str]], bytes]:
    """The last of ``times`` in-process GETs of ``/`` from one client."""
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "203.0.113.7"}
    seen: Dict[str, Any] = {}
    body = b""
    for _ in range(times):

        def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
            seen.update(status=status, headers=headers)

        body = b"".join(app(dict(environ), start_response))
    return seen["status"], seen["headers"], body


async def asgi_hello(scope: Dict[str, Any], receive: Any, send: Any) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": b"hello"})


def limiter_for_servers(clock: ManualClock) -> RateLimiter:
    return RateLimiter(
        {"requests": "2/second", "upload": "1000/minute"},
        clock=clock,
        lockout=Lockout(breaches=2, within=60, duration=30),
    )


OPTIONS: Dict[str, Any] = dict(
    on_limited="problem", header_style="both", quota_units={"upload": "content-bytes"}
)


@pytest.fixture(params=["uvicorn", "waitress"])
def server(request: Any) -> Iterator[Tuple[str, ManualClock]]:
    clock = ManualClock(1_700_000_000)
    if request.param == "uvicorn":
        app = ASGIMiddleware(asgi_hello, limiter_for_servers(clock), **OPTIONS)
        with uvicorn_running(app) as url:
            yield url, clock
        return
    wsgi = WSGIMiddleware(hello, limiter_for_servers(clock), **OPTIONS)
    with waitress_running(wsgi) as url:
        yield url, clock


@pytest.mark.servers
def test_a_real_429_carries_the_problem_body_and_its_content_type(
    server: Tuple[str, ManualClock],
) -> None:
    url, clock = server
    with httpx.Client(base_url=url) as client:
        responses = [client.get("/") for _ in range(3)]
        assert [r.status_code for r in responses] == [200, 200, 429]
        first, denied = responses[0], responses[2]
        assert first.text == "hello"
        assert first.headers["ratelimit-policy"] == (
            '"requests";q=2;w=1, "upload";q=1000;qu="content-bytes";w=60'
        )
        assert denied.headers["content-type"] == "application/problem+json"
        assert int(denied.headers["content-length"]) == len(denied.content)
        assert denied.headers["retry-after"] == "1"
        assert denied.headers["ratelimit-policy"] == first.headers["ratelimit-policy"]
        assert problem(denied.content) == {
            "type": TYPES + "quota-exceeded",
            "title": "Quota Exceeded",
            "status": 429,
            "detail": 'Quota exceeded: "requests"; retry in 1 s.',
            "violated-policies": ["requests"],
        }
        locked = client.get("/")  # the second breach within a minute: locked out
        assert locked.status_code == 429
        assert locked.headers["retry-after"] == "30"
        assert problem(locked.content)["type"] == TYPES + "abnormal-usage-detected"
        head = client.head("/")
        assert (head.status_code, head.content) == (429, b"")
        assert head.headers["content-type"] == "application/problem+json"
        clock.advance(30)
        assert client.get("/").status_code == 200
