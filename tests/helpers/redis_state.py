"""What a Redis store wrote, read back by the tests."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from limiter.backends._wire import ttl_ms
from limiter.core.state import Leases, State, from_row, keep_until

if TYPE_CHECKING:
    import redis


def parse_state(raw: bytes) -> State:
    """A stored value as ``limiter.core.state`` builds it (a sliding window: three numbers).

    Leases (``"c"``, then holders, expiries and until) are a ``Leases``.
    """
    if raw.startswith(b"c"):
        return Leases(float(text) for text in raw[1:].split())
    numbers = [float(text) for text in raw.split()]
    assert len(numbers) in (2, 3), raw
    return from_row(*numbers)


def read_state(client: redis.Redis, rkey: str) -> Optional[State]:
    """The state ``rkey`` holds (``None``: no key)."""
    raw = client.get(rkey)
    return None if raw is None else parse_state(raw)


def read_state_of(client: redis.Redis, store: Any) -> Callable[[str], Optional[State]]:
    """``read_state`` of ``store``'s key for a key (its prefix applied)."""
    from limiter.backends.redis import redis_key

    return lambda key: read_state(client, redis_key(key, store.prefix))


def _elapsed_ms(since: Optional[float]) -> int:
    """The ms a TTL may have run since ``since`` (``time.monotonic()``; ``None``: a minute)."""
    return 60_000 if since is None else math.ceil((time.monotonic() - since) * 1000) + 2


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
    elapsed_ms = _elapsed_ms(since)
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


def check_stored_until(
    client: redis.Redis, rkey: str, state: Optional[State], now: float, since: Optional[float]
) -> Optional[State]:
    """``check_stored`` for any policy but a bucket: its PX is the time from ``now`` to its end.

    A quota's, a window's, a lockout's or leases' key lives until ``keep_until``
    (a sliding window's state is three numbers, leases ``"c"`` and theirs); it is
    made persistent too.
    """
    raw, ttl = client.pipeline().get(rkey).pttl(rkey).persist(rkey).execute()[:2]
    elapsed_ms = _elapsed_ms(since)
    if raw is None:
        # Never written, or expired already: its end was within the time elapsed.
        assert state is None or ttl_ms(keep_until(state) - now) <= elapsed_ms
        return None
    stored = parse_state(raw)
    assert stored == state
    if ttl != -1:  # written by this step
        expected_ttl = ttl_ms(keep_until(stored) - now)
        assert expected_ttl - elapsed_ms <= ttl <= expected_ttl
    return stored
