"""limiter: token-bucket rate limiting with a pure core, pluggable stores and web adapters.

>>> from limiter import RateLimiter, ManualClock
>>> limiter = RateLimiter("2/second", clock=ManualClock())
>>> [limiter.allow("alice") for _ in range(3)]
[True, True, False]
"""

from typing import TYPE_CHECKING

from .backends.memory import MemoryStore
from .bucket import Limit, RateLimitResult, step
from .clock import Clock, ManualClock, SystemClock
from .headers import rate_limit_headers
from .ratelimiter import RateLimiter, RateLimitExceeded
from .rules import Rule
from .store import AsyncStore, Store, StoreError

if TYPE_CHECKING:
    from .backends.redis import AsyncRedisStore, RedisStore
    from .backends.sqlite import SQLiteStore

__all__ = [
    "AsyncRedisStore",
    "AsyncStore",
    "Clock",
    "Limit",
    "ManualClock",
    "MemoryStore",
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
]

__version__ = "0.1.0"

# The shared stores load on first use: ``import limiter`` must not need redis-py
# or open anything, and most processes use the in-memory store only.
_LAZY = {
    "RedisStore": "limiter.backends.redis",
    "AsyncRedisStore": "limiter.backends.redis",
    "SQLiteStore": "limiter.backends.sqlite",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'limiter' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
