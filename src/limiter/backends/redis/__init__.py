"""Redis and Valkey stores: one Lua script call (EVALSHA) per check.

The stores are in ``_store`` (the I/O), what travels in ``_wire`` (arguments,
replies, keys and hash tags; ``bucket.lua`` is the other end), the client
settings checks in ``_config``, the sync fast path in ``_connection`` and the
asyncio auto-pipeline in ``_pipeline``.
"""

from limiter.backends.redis._store import AsyncRedisStore, PoolFullError, RedisStore
from limiter.backends.redis._wire import SCRIPT, hash_tag, redis_key

__all__ = ["SCRIPT", "AsyncRedisStore", "PoolFullError", "RedisStore", "hash_tag", "redis_key"]
