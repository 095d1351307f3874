"""Redis and Valkey stores: one Lua script call (EVALSHA) per check.

The store is ``limiter.backends.redis._store``; the connection checks are in
``connection`` and the asyncio auto-pipeline in ``pipeline``.
"""

from limiter.backends.redis._store import (
    SCRIPT,
    AsyncRedisStore,
    PoolFullError,
    RedisStore,
    hash_tag,
    redis_key,
)

__all__ = ["SCRIPT", "AsyncRedisStore", "PoolFullError", "RedisStore", "hash_tag", "redis_key"]
