"""The LLM gateway recipe of docs/gateway.md, served by uvicorn and hit over HTTP.

The page's ``# gateway.py`` block runs as printed in a fresh namespace per
test; its Starlette app is served by uvicorn in a thread of this process on
a free loopback port (``test_servers.uvicorn_running``), so the test moves
the block's ``ManualClock`` itself.  Every outcome is exact: the number of
calls admitted, the budget that refused, the tokens left after settlement,
``Retry-After`` to the second.  Each test runs twice: as printed (the
default ``MemoryStore``), and with the page's limiter rebuilt on a
``RedisStore`` (a throwaway redis-server), where the outcomes are the same.
Redis expires a key when its bucket is full again in real time (``PX``),
while the limiter's clock stands still: state read back later (``peek``)
is one that stays for seconds at least; a short-lived one is read from the
response headers, built from the store's own answer.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import httpx
import pytest

from helpers.servers import uvicorn_running

pytestmark = pytest.mark.servers

DOC = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"
START = datetime(2024, 1, 31, tzinfo=timezone.utc).timestamp()  # the block's clock
FEBRUARY = datetime(2024, 2, 1, tzinfo=timezone.utc).timestamp()
ALICE = {"Authorization": "Bearer sk-alice"}
BOB = {"X-API-Key": "sk-bob"}
# 2,000 characters of 400 words: 500 + 4,000 tokens estimated, 400 + 2,000 used.
ASK = {"prompt": "word " * 400, "max_tokens": 4_000}
ESTIMATE, USED = 4_500, 2_400


def gateway_source() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.S | re.M)
    found = [block for block in blocks if block.startswith("# gateway.py\n")]
    assert len(found) == 1, "docs/gateway.md has one '# gateway.py' block"
    return found[0]


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def gateway(request: pytest.FixtureRequest) -> Iterator[Any]:
    namespace: dict = {"__name__": "gateway"}
    exec(compile(gateway_source(), f"{DOC.name}[gateway.py]", "exec"), namespace)
    assert namespace["clock"].now() == START
    if request.param == "redis":
        pytest.importorskip("redis", reason="redis-py is not installed: pip install -e '.[dev]'")
        from helpers.redis_servers import unique_prefix
        from limiter import RateLimiter, RedisStore

        server = request.getfixturevalue("server")  # skips without redis-server
        page = namespace["limiter"]
        # The page's limits and lockout on a shared store; the app reads the
        # module global, so it uses this one.
        namespace["limiter"] = RateLimiter(
            {limit.name: limit for limit in page.limits},
            lockout=page.lockout,
            clock=page.clock,
            store=RedisStore(server.client(), prefix=unique_prefix()),
        )
    with uvicorn_running(namespace["app"]) as url, httpx.Client(base_url=url) as client:

        def post(headers: Any = ALICE, json: Any = ASK, **kwargs: Any) -> httpx.Response:
            return client.post("/v1/completions", headers=headers, json=json, **kwargs)

        yield SimpleNamespace(
            post=post,
            client=client,
            clock=namespace["clock"],
            limiter=namespace["limiter"],
            namespace=namespace,
        )


def remaining(gw: Any, account: str) -> list:
    """What each budget (requests, tokens, tokens-month) of ``account`` has left."""
    return [r.remaining for r in gw.limiter.peek("acct:" + account).results]


BODY_429 = {"status": 429, "code": "rate_limited", "message": "too many requests"}


def test_the_tokens_budget_refuses_after_exactly_36_calls(gateway):
    responses = [gateway.post() for _ in range(37)]
    assert [r.status_code for r in responses] == [200] * 36 + [429]
    assert {r.json()["usage"]["total_tokens"] for r in responses[:36]} == {USED}
    # Each admitted call held 4,500 tokens and kept 2,400: its headers say so.
    assert [r.headers["RateLimit"] for r in responses[:2]] == [
        '"requests";r=59;t=1, "tokens";r=87600;t=1, "tokens-month";r=1997600;t=86400',
        '"requests";r=58;t=1, "tokens";r=85200;t=1, "tokens-month";r=1995200;t=86400',
    ]
    denied = responses[36]
    assert denied.json() == {**BODY_429, "policy": "tokens"}
    assert denied.headers["content-type"] == "application/json"
    # 3,600 tokens left of the 4,500 needed: 0.6 s at 1,500 a second.
    assert denied.headers["Retry-After"] == "1"
    assert denied.headers["RateLimit-Policy"] == (
        '"requests";q=60;w=60, "tokens";q=90000;w=60, "tokens-month";q=2000000;w=2678400'
    )
    assert denied.headers["RateLimit"] == (
        '"requests";r=24;t=1, "tokens";r=3600;t=1, "tokens-month";r=1913600'
    )
    # Settled: exactly the usage is charged; the refused call took nothing.
    assert remaining(gateway, "alice") == [24, 90_000 - 36 * USED, 2_000_000 - 36 * USED]
    assert remaining(gateway, "bob") == [60, 90_000, 2_000_000]
    gateway.clock.advance(0.6)
    assert gateway.post().status_code == 200


def test_settlement_leaves_exactly_the_real_usage_charged(gateway):
    calls = [
        # (prompt, max_tokens, estimated, used): refunded, charged, exact
        ("word " * 400, 4_000, 4_500, 2_400),
        ("a " * 2_000, 100, 1_100, 2_050),
        ("a " * 8, 8, 12, 12),
    ]
    used = 0
    for number, (prompt, max_tokens, estimated, real) in enumerate(calls, 1):
        assert max_tokens + -(-len(prompt) // 4) == estimated
        response = gateway.post(BOB, {"prompt": prompt, "max_tokens": max_tokens})
        assert response.status_code == 200
        assert response.json()["usage"]["total_tokens"] == real
        used += real
        assert response.headers["RateLimit"] == (
            f'"requests";r={60 - number};t=1, "tokens";r={90_000 - used};t=1, '
            f'"tokens-month";r={2_000_000 - used};t=86400'
        )
    assert remaining(gateway, "bob") == [57, 90_000 - used, 2_000_000 - used]


def test_a_usage_beyond_the_bucket_puts_it_into_debt(gateway):
    # 200,000 characters of 100,000 words: 50,000 + 8,192 estimated, 104,096 used.
    huge = {"prompt": "a " * 100_000, "max_tokens": 8_192}
    response = gateway.post(json=huge)
    assert response.status_code == 200
    assert response.json()["usage"]["total_tokens"] == 104_096
    # 58,192 held, 45,904 charged after: 14,096 owed (t: 9.4 s until a token is back).
    assert response.headers["RateLimit"] == (
        '"requests";r=59;t=1, "tokens";r=0;t=10, "tokens-month";r=1895904;t=86400'
    )
    assert remaining(gateway, "alice")[1:] == [0, 2_000_000 - 104_096]
    tiny = {"prompt": "hi", "max_tokens": 1}  # 2 tokens estimated
    denied = gateway.post(json=tiny)
    assert denied.status_code == 429
    assert denied.json()["policy"] == "tokens"
    # 14,096 tokens owed, then 2: 9.4 s at 1,500 a second.
    assert denied.headers["Retry-After"] == "10"
    gateway.clock.advance(14_098 / 1_500)
    assert gateway.post(json=tiny).status_code == 200


def test_the_monthly_quota_refuses_until_the_first_of_next_month(gateway):
    # 200,000 characters of 40,000 words: 58,192 tokens estimated, 44,096 used.
    big = {"prompt": "word " * 40_000, "max_tokens": 8_192}
    statuses = []
    for minute in range(46):  # a minute apart: the minute's budgets are full each time
        if minute:
            gateway.clock.advance(60)
        statuses.append(gateway.post(json=big).status_code)
    assert statuses == [200] * 45 + [429]
    assert remaining(gateway, "alice")[2] == 2_000_000 - 45 * 44_096  # 15,680: too few
    denied = gateway.post(json=big)
    assert denied.json() == {**BODY_429, "policy": "tokens-month"}
    seconds = FEBRUARY - gateway.clock.now()
    assert seconds == 86_400 - 45 * 60
    assert denied.headers["Retry-After"] == str(int(seconds))
    assert gateway.post(BOB, big).status_code == 200  # bob's month is his own
    gateway.clock.set(FEBRUARY - 1)
    assert gateway.post(json=big).json()["policy"] == "tokens-month"
    gateway.clock.set(FEBRUARY)
    allowed = gateway.post(json=big)
    assert allowed.status_code == 200
    assert allowed.headers["RateLimit-Policy"].endswith('"tokens-month";q=2000000;w=2505600')
    assert remaining(gateway, "alice")[2] == 2_000_000 - 44_096


def test_an_abusive_key_is_locked_out_and_another_is_not(gateway):
    tiny = {"prompt": "hi", "max_tokens": 1}
    assert [gateway.post(json=tiny).status_code for _ in range(60)] == [200] * 60
    denials = [gateway.post(json=tiny) for _ in range(10)]
    assert [r.status_code for r in denials] == [429] * 10
    assert [r.json()["policy"] for r in denials] == ["requests"] * 9 + ["lockout"]
    assert [r.headers["Retry-After"] for r in denials] == ["1"] * 9 + ["900"]
    assert gateway.post(BOB, tiny).status_code == 200
    gateway.clock.advance(60)  # every budget is full again...
    locked = gateway.post(json=tiny)
    assert locked.status_code == 429  # ...and the key is still locked out
    assert locked.json() == {**BODY_429, "policy": "lockout"}
    assert locked.headers["Retry-After"] == "840"
    peeked = gateway.limiter.peek("acct:alice")
    assert peeked.locked_out
    assert [r.remaining for r in peeked.results[:3]] == [60, 90_000, 2_000_000 - 60]
    assert gateway.post(BOB, tiny).status_code == 200
    gateway.clock.advance(839)
    assert gateway.post(json=tiny).headers["Retry-After"] == "1"
    gateway.clock.advance(1)
    free = gateway.post(json=tiny)  # the lockout is over: the key starts afresh
    assert free.status_code == 200
    # On Redis too: PX runs in real time while this clock is manual, but a key
    # lives at least the clock tolerance (1 s), not the 0.67 ms of one token.
    assert free.headers["RateLimit"] == (
        '"requests";r=59;t=1, "tokens";r=89999;t=1, "tokens-month";r=1999939;t=85500'
    )


def test_unknown_keys_and_bad_bodies_cost_nothing(gateway):
    for headers in [{}, {"Authorization": "Bearer sk-nobody"}, {"Authorization": "Bearer"},
                    {"Authorization": "Basic sk-alice"}, {"X-API-Key": ""}]:  # fmt: skip
        response = gateway.post(headers)
        assert response.status_code == 401, headers
        assert response.json()["code"] == "unauthorized"
    bad_bodies = [
        {"prompt": "hi"},
        {"max_tokens": 5},
        {"prompt": 5, "max_tokens": 5},
        {"prompt": "hi", "max_tokens": 0},
        {"prompt": "hi", "max_tokens": 8_193},
        {"prompt": "hi", "max_tokens": True},
        {"prompt": "hi", "max_tokens": "5"},
        {"prompt": "hi", "max_tokens": 5.0},
        {"prompt": "x" * 200_001, "max_tokens": 5},
        ["hi", 5],
    ]
    for body in bad_bodies:
        assert gateway.post(json=body).status_code == 400, body
    assert gateway.post(json=None, content=b"{not json").status_code == 400
    # None of it reached a bucket: no budget used, no breach counted.
    assert remaining(gateway, "alice") == [60, 90_000, 2_000_000]
    assert gateway.limiter.peek("acct:nobody").results[0].remaining == 60
    assert gateway.post(json={"prompt": "x" * 200_000, "max_tokens": 8_192}).status_code == 200


def test_a_model_failure_gives_the_estimate_back(gateway):
    assert [gateway.post().status_code for _ in range(10)] == [200] * 10

    async def broken_model(prompt, max_tokens):
        raise RuntimeError("the model is down")

    gateway.namespace["run_model"] = broken_model
    assert gateway.post().status_code == 500
    # The request counts; its tokens do not.
    assert remaining(gateway, "alice") == [49, 90_000 - 10 * USED, 2_000_000 - 10 * USED]
