"""Rule matching: paths, methods, validation, and name collisions between limiters."""

from __future__ import annotations

import pytest

from limiter import MemoryStore, RateLimiter
from limiter.rules import Rule, check_distinct_names

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
    "kwargs, match",
    [
        (dict(path="login"), "must start with '/'"),
        (dict(path="/a*b"), "may only end"),
        (dict(path="/users/{id"), "parameters look like"),
        (dict(methods="POST"), "list of names"),
        (dict(cost=-1), "cost must be"),
        (dict(cost="2"), "cost must be"),
        (dict(key_func="ip"), "key_func must be callable"),
        (dict(limiter="5/minute"), "must be a RateLimiter"),
    ],
)
def test_validation(kwargs: dict, match: str) -> None:
    args = dict(path="/x", limiter=LIM)
    args.update(kwargs)
    path, limiter = args.pop("path"), args.pop("limiter")
    with pytest.raises(ValueError, match=match):
        Rule(path, limiter, **args)  # type: ignore[arg-type]


def test_limiters_that_would_collide_in_a_shared_store_are_refused() -> None:
    store = MemoryStore()
    a = RateLimiter("5/minute", store=store)
    b = RateLimiter("5/minute", store=store)
    with pytest.raises(ValueError, match="share the store"):
        check_distinct_names([a, b])
    check_distinct_names([a, RateLimiter("5/minute", store=store, name="login"), a])
    check_distinct_names([RateLimiter("5/minute"), RateLimiter("5/minute")])  # own stores
