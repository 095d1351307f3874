"""Stores that keep bucket state: in memory, Redis (``limiter.backends.redis``), SQLite."""

from .memory import MemoryStore

__all__ = ["MemoryStore"]
