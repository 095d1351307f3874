"""What a limiter key may be: a rate passed where a key goes is refused."""

from __future__ import annotations

from limiter.core.parse import looks_like_rate

#: Keys longer than this many characters are stored as a SHA-256 digest, so a
#: 1 MB API key costs 71 bytes of key, not 1 MB.
MAX_KEY_LENGTH = 256


def refuse_rate_key(key: object) -> None:
    """Raise ``TypeError`` when ``key`` reads as a rate: a limit passed where a key goes.

    Only a key that parses as a rate is refused (``"5/minute"``,
    ``"10 per second"``); other keys with ``/`` or spaces (``"user/42"``) are valid.
    """
    if isinstance(key, str) and looks_like_rate(key):
        raise TypeError(
            f"key {key!r:.100} looks like a rate: pass the rate to RateLimiter({key!r:.100}) "
            "(or a framework integration's limit()) and use a client key here"
        )
