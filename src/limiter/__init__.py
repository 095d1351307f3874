"""limiter: token-bucket rate limiting with a pure core, pluggable stores and web adapters.

>>> from limiter import RateLimiter, ManualClock
>>> limiter = RateLimiter("2/second", clock=ManualClock())
>>> [limiter.allow("alice") for _ in range(3)]
[True, True, False]
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from limiter.backends.denycache import DenyCache
    from limiter.backends.memory import MemoryStore
    from limiter.backends.postgres import AsyncPostgresStore, PostgresStore
    from limiter.backends.redis import AsyncRedisStore, RedisStore
    from limiter.backends.sqlite import SQLiteStore
    from limiter.clock import Clock, ManualClock, SystemClock
    from limiter.core.bucket import step
    from limiter.core.concurrency import Concurrency
    from limiter.core.costs import Charge, Refund
    from limiter.core.limits import Limit
    from limiter.core.lockout import Lockout
    from limiter.core.many import step_all
    from limiter.core.quota import Quota
    from limiter.core.result import RateLimitResult
    from limiter.core.window import FixedWindow, SlidingWindow
    from limiter.events import DecisionEvent, Outcome, fan_out
    from limiter.http.headers import rate_limit_headers
    from limiter.http.keys import AllowList, ClientIP, client_ip, header_key
    from limiter.http.request import RequestInfo
    from limiter.http.responses import DENIED_BODY, Response, default_on_limited
    from limiter.http.rules import Rule
    from limiter.ratelimiter import RateLimiter
    from limiter.store import AsyncStore, PoolFullError, Store, StoreError
    from limiter.urls import redact_url, store_from_env, store_from_url
    from limiter.waiting import RateLimitExceeded

__all__ = [
    "DENIED_BODY",
    "AllowList",
    "AsyncPostgresStore",
    "AsyncRedisStore",
    "AsyncStore",
    "Charge",
    "ClientIP",
    "Clock",
    "Concurrency",
    "DecisionEvent",
    "DenyCache",
    "FixedWindow",
    "Limit",
    "Lockout",
    "ManualClock",
    "MemoryStore",
    "Outcome",
    "PoolFullError",
    "PostgresStore",
    "Quota",
    "RateLimitExceeded",
    "RateLimitResult",
    "RateLimiter",
    "RedisStore",
    "Refund",
    "RequestInfo",
    "Response",
    "Rule",
    "SQLiteStore",
    "SlidingWindow",
    "Store",
    "StoreError",
    "SystemClock",
    "client_ip",
    "default_on_limited",
    "fan_out",
    "header_key",
    "rate_limit_headers",
    "redact_url",
    "step",
    "step_all",
    "store_from_env",
    "store_from_url",
]

__version__ = "0.1.0"

# Every name loads on first use: ``import limiter`` must not need redis-py or open
# anything, and the pytest plugin (limiter.testing) imports this package in every
# pytest run wherever tokenlimiter is installed, so it must cost ~nothing.
_MODULES = {
    "limiter.backends.denycache": ("DenyCache",),
    "limiter.backends.memory": ("MemoryStore",),
    "limiter.backends.postgres": ("AsyncPostgresStore", "PostgresStore"),
    "limiter.backends.redis": ("AsyncRedisStore", "RedisStore"),
    "limiter.backends.sqlite": ("SQLiteStore",),
    "limiter.clock": ("Clock", "ManualClock", "SystemClock"),
    "limiter.core.bucket": ("step",),
    "limiter.core.concurrency": ("Concurrency",),
    "limiter.core.costs": ("Charge", "Refund"),
    "limiter.core.limits": ("Limit",),
    "limiter.core.lockout": ("Lockout",),
    "limiter.core.many": ("step_all",),
    "limiter.core.quota": ("Quota",),
    "limiter.core.result": ("RateLimitResult",),
    "limiter.core.window": ("FixedWindow", "SlidingWindow"),
    "limiter.events": ("DecisionEvent", "Outcome", "fan_out"),
    "limiter.http.headers": ("rate_limit_headers",),
    "limiter.http.keys": ("AllowList", "ClientIP", "client_ip", "header_key"),
    "limiter.http.request": ("RequestInfo",),
    "limiter.http.responses": ("DENIED_BODY", "Response", "default_on_limited"),
    "limiter.http.rules": ("Rule",),
    "limiter.ratelimiter": ("RateLimiter",),
    "limiter.store": ("AsyncStore", "PoolFullError", "Store", "StoreError"),
    "limiter.urls": ("redact_url", "store_from_env", "store_from_url"),
    "limiter.waiting": ("RateLimitExceeded",),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'limiter' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> "list[str]":
    # The lazy names are no module globals yet: list them for dir() and tab completion.
    return sorted(set(globals()) | set(__all__))
