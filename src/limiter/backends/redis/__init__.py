"""Redis and Valkey stores: one Lua script call (EVALSHA) per check.

The stores are in ``_store`` (the I/O), what travels in ``_wire`` (arguments,
replies, keys and hash tags; ``bucket.lua`` is the other end), the client
settings checks in ``_config``, the sync fast path in ``_connection`` and the
asyncio auto-pipeline in ``_pipeline``.
"""

# Re-exported for the tests and operators' scripts (users import the stores from ``limiter``).
from limiter.backends._wire import SCRIPT as SCRIPT
from limiter.backends._wire import hash_tag as hash_tag
from limiter.backends._wire import redis_key as redis_key
from limiter.backends.redis._store import AsyncRedisStore as AsyncRedisStore
from limiter.backends.redis._store import RedisStore as RedisStore
from limiter.store import PoolFullError as PoolFullError
