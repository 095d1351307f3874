"""limiter: token-bucket rate limiting with a pure core, pluggable stores and web adapters.

>>> from limiter import RateLimiter, ManualClock
>>> limiter = RateLimiter("2/second", clock=ManualClock())
>>> [limiter.allow("alice") for _ in range(3)]
[True, True, False]
"""

from .backends.memory import MemoryStore
from .bucket import Limit, RateLimitResult, step
from .clock import Clock, ManualClock, SystemClock
from .headers import rate_limit_headers
from .ratelimiter import RateLimiter, RateLimitExceeded
from .rules import Rule
from .store import AsyncStore, Store, StoreError

__all__ = [
    "AsyncStore",
    "Clock",
    "Limit",
    "ManualClock",
    "MemoryStore",
    "RateLimitExceeded",
    "RateLimitResult",
    "RateLimiter",
    "Rule",
    "Store",
    "StoreError",
    "SystemClock",
    "rate_limit_headers",
    "step",
]

__version__ = "0.1.0"
