"""Stores that keep bucket state: in memory, SQLite, Redis (``redis/``), and the DenyCache.

Internal: users import the stores from ``limiter``.
"""
