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
    from limiter.backends.redis import AsyncRedisStore, RedisStore
    from limiter.backends.sqlite import SQLiteStore
    from limiter.clock import Clock, ManualClock, SystemClock
    from limiter.core.bucket import step
    from limiter.core.costs import Charge
    from limiter.core.limits import Limit
    from limiter.core.lockout import Lockout
    from limiter.core.quota import Quota
    from limiter.core.result import RateLimitResult
    from limiter.http.headers import rate_limit_headers
    from limiter.http.rules import Rule
    from limiter.ratelimiter import RateLimiter, RateLimitExceeded
    from limiter.store import AsyncStore, Store, StoreError
    from limiter.urls import store_from_env, store_from_url

__all__ = [
    "AsyncRedisStore",
    "AsyncStore",
    "Charge",
    "Clock",
    "DenyCache",
    "Limit",
    "Lockout",
    "ManualClock",
    "MemoryStore",
    "Quota",
    "RateLimitExceeded",
    "RateLimitResult",
    "RateLimiter",
    "RedisStore",
    "Rule",
    "SQLiteStore",
    "Store",
    "StoreError",
    "SystemClock",
    "rate_limit_headers",
    "step",
    "store_from_env",
    "store_from_url",
]

__version__ = "0.1.0"

# The shared stores and store_from_url load on first use: ``import limiter`` must not need redis-py
# or open anything, and most processes use the in-memory store only.
_LAZY = {
    # Every name loads on first use, the core too: the pytest plugin (limiter.testing) imports
    # this package in every pytest run wherever tokenlimiter is installed, so it must cost ~nothing.
    "Charge": "limiter.core.costs",
    "Limit": "limiter.core.limits",
    "Lockout": "limiter.core.lockout",
    "Quota": "limiter.core.quota",
    "RateLimitResult": "limiter.core.result",
    "step": "limiter.core.bucket",
    "Clock": "limiter.clock",
    "ManualClock": "limiter.clock",
    "SystemClock": "limiter.clock",
    "rate_limit_headers": "limiter.http.headers",
    "RateLimiter": "limiter.ratelimiter",
    "RateLimitExceeded": "limiter.ratelimiter",
    "Rule": "limiter.http.rules",
    "AsyncStore": "limiter.store",
    "Store": "limiter.store",
    "StoreError": "limiter.store",
    "MemoryStore": "limiter.backends.memory",
    "DenyCache": "limiter.backends.denycache",
    "RedisStore": "limiter.backends.redis",
    "AsyncRedisStore": "limiter.backends.redis",
    "SQLiteStore": "limiter.backends.sqlite",
    "store_from_url": "limiter.urls",
    "store_from_env": "limiter.urls",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'limiter' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> "list[str]":
    # The lazy names are no module globals yet: list them for dir() and tab completion.
    return sorted(set(globals()) | set(__all__))
