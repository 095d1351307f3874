"""What a Redis store wrote, read back by the tests."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Optional

from limiter.backends.redis._wire import ttl_ms

if TYPE_CHECKING:
    import redis


def check_stored(
    client: redis.Redis, rkey: str, state: Optional[complex], since: Optional[float] = None
) -> Optional[complex]:
    """Assert that ``rkey`` holds ``state`` bit for bit, and return what it holds.

    The key's TTL must be the time until the bucket is full; the key is then
    made persistent, so that the next step of the test does not depend on how
    fast it runs (TTLs run in real time, the test's clock does not).  Should
    the server have expired a nearly full bucket already, the test goes on
    from that, as Redis does.  ``since`` is ``time.monotonic()`` read before
    the step: the TTL ran for at most the time elapsed since (a busy machine
    may take long; without ``since``, up to a minute is allowed).
    """
    raw, ttl = client.pipeline().get(rkey).pttl(rkey).persist(rkey).execute()[:2]
    elapsed_ms = 60_000 if since is None else math.ceil((time.monotonic() - since) * 1000) + 2
    if raw is None:  # expired: the bucket was full again within the time elapsed
        assert state is None or ttl_ms(state.real) <= elapsed_ms
        return None
    debt, updated_at = raw.split()
    stored = complex(float(debt), float(updated_at))
    assert stored == state
    if ttl != -1:  # written by this step (-1: kept from before, made persistent)
        expected_ttl = ttl_ms(stored.real)  # PX's bounds
        assert expected_ttl - elapsed_ms <= ttl <= expected_ttl  # less what elapsed since
    return stored
