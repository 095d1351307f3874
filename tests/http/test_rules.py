"""Rule matching: paths, methods, validation, and name collisions between limiters."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

import pytest

from limiter import MemoryStore, RateLimiter
from limiter.http.rules import Rule, check_distinct_names, normal_path

LIM = RateLimiter("5/minute")


@pytest.mark.parametrize(
    "pattern, path, expected",
    [
        ("/login", "/login", True),
        ("/login", "/login/", False),
        ("/login", "/loginx", False),
        ("/api/*", "/api", True),
        ("/api/*", "/api/", True),
        ("/api/*", "/api/v1/items", True),
        ("/api/*", "/apiary", False),
        ("/users/{id}", "/users/42", True),
        ("/users/{id}", "/users/42/posts", False),
        ("/users/{id}", "/users/", False),
        ("/users/{id}/export", "/users/7/export", True),
        ("/a.b", "/aXb", False),  # literal dots
        ("/files/{name}/*", "/files/x/y/z", True),
        ("*", "/anything/at/all", True),
    ],
)
def test_paths(pattern: str, path: str, expected: bool) -> None:
    assert Rule(pattern, LIM).matches("GET", path) is expected


def test_methods() -> None:
    rule = Rule("/login", LIM, methods=["post"])
    assert rule.matches("POST", "/login") and rule.matches("post", "/login")
    assert not rule.matches("GET", "/login")
    assert Rule("/login", LIM).matches("DELETE", "/login")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(path="login"), "path must start with '/' or be '*', got 'login'"),
        (dict(path="/a*b"), "may only end"),
        (dict(path="/users/{id"), "parameters look like"),
        (dict(cost=-1), "cost must be a number of tokens >= 0, got -1"),
        (dict(cost=math.nan), "cost must be a number of tokens >= 0, got nan"),
    ],
)
def test_wrong_values_are_value_errors(kwargs: dict, message: str) -> None:
    args = dict(path="/x", limiter=LIM)
    args.update(kwargs)
    path, limiter = args.pop("path"), args.pop("limiter")
    with pytest.raises(ValueError, match=re.escape(message)):
        Rule(path, limiter, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(path=5), "path must be a str starting with '/' or '*', got 5"),
        (dict(methods="POST"), "methods must be None or a list of names like ['POST'], got 'POST'"),
        (dict(methods=[1]), "methods must be None or a list of names like ['POST'], got [1]"),
        (dict(methods=5), "methods must be None or a list of names like ['POST'], got 5"),
        (dict(cost="2"), "cost must be a number of tokens, got '2'"),
        (dict(cost=True), "cost must be a number of tokens, got True"),
        (dict(key_func="ip"), "key_func must be callable or None, got 'ip'"),
        (
            dict(limiter="5/minute"),
            "limiter must be a limiter.RateLimiter or a function of the request returning one,"
            " got '5/minute'",
        ),
    ],
)
def test_wrong_types_are_type_errors(kwargs: dict, message: str) -> None:
    args = dict(path="/x", limiter=LIM)
    args.update(kwargs)
    path, limiter = args.pop("path"), args.pop("limiter")
    with pytest.raises(TypeError, match=re.escape(message)):
        Rule(path, limiter, **args)  # type: ignore[arg-type]


def test_a_cost_may_be_any_real_number_and_is_kept_as_a_float() -> None:
    # One cost check for every type and size (limiter.core.costs.validate_cost):
    # a cost above any burst is inf, denied by the bucket, never an error.
    assert Rule("/x", LIM, cost=Decimal("2.5")).cost == 2.5
    assert Rule("/x", LIM, cost=Fraction(1, 4)).cost == 0.25
    assert Rule("/x", LIM, cost=10**400).cost == math.inf
    assert type(Rule("/x", LIM, cost=3).cost) is float


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("/api/items", "/api/items"),
        ("/", "/"),
        ("/.well-known/x", "/.well-known/x"),
        ("//private/x", "/private/x"),
        ("/x/../private/x", "/private/x"),
        ("/./private/./x", "/private/x"),
        ("/../../private", "/private"),
        ("/private/x/..", "/private/"),
        ("/private/.", "/private/"),
        ("/a//b/", "/a/b/"),
        ("/..", "/"),
        ("//", "/"),
    ],
)
def test_normal_path_resolves_dot_segments_and_merges_slashes(path: str, normal: str) -> None:
    assert normal_path(path) == normal


def test_limiters_that_would_collide_in_a_shared_store_are_refused() -> None:
    store = MemoryStore()
    a = RateLimiter("5/minute", store=store)
    b = RateLimiter("5/minute", store=store)
    with pytest.raises(ValueError, match="share the store"):
        check_distinct_names([a, b])
    check_distinct_names([a, RateLimiter("5/minute", store=store, name="login"), a])
    check_distinct_names([RateLimiter("5/minute"), RateLimiter("5/minute")])  # own stores
