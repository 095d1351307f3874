"""Stores that keep bucket state: in memory, Redis (``limiter.backends.redis``), SQLite.

``DenyCache`` (``limiter.backends.denycache``) wraps a shared store so that
repeated denials are answered in this process; it loads on first use.
"""

from typing import TYPE_CHECKING

from limiter.backends.memory import MemoryStore

if TYPE_CHECKING:
    from limiter.backends.denycache import DenyCache

__all__ = ["DenyCache", "MemoryStore"]


def __getattr__(name: str) -> object:
    # Lazy: most processes never wrap a store.
    if name == "DenyCache":
        from limiter.backends.denycache import DenyCache

        return DenyCache
    raise AttributeError(f"module 'limiter.backends' has no attribute {name!r}")
