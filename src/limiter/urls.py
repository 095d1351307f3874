"""Stores from URLs: ``store_from_url("redis://cache:6379/0?prefix=app:")``; Redis and
PostgreSQL parse their own part.  docs/stores.md "Choosing a store by URL".
"""

from __future__ import annotations

import os
from typing import Any, Dict, Tuple
from urllib.parse import unquote

from limiter.backends._url import (
    DENY_CACHE_PARAMS,
    FALLBACK_PARAMS,
    StoreURL,
    deny_cache_options,
    scheme_of,
    set_given,
    store_options,
)
from limiter.backends._url import redact_url as redact_url  # documented here

#: The environment variable ``store_from_env`` reads.
STORAGE_URL_ENV = "LIMITER_STORAGE_URL"


_REDIS_KINDS = ("", "+unix", "+sentinel", "+cluster")
#: Every scheme ``store_from_url`` takes, as written in a URL.
SUPPORTED_SCHEMES: Tuple[str, ...] = (
    "memory",
    "sqlite",
    *(f"redis{kind}" for kind in _REDIS_KINDS),
    "rediss",
    "rediss+cluster",
    *(f"valkey{kind}" for kind in _REDIS_KINDS),
    "valkeys",
    "valkeys+cluster",
    "postgresql",
    "postgres",
)
_SCHEME_LIST = ", ".join(f"{scheme}://" for scheme in SUPPORTED_SCHEMES)


def _parse(url: str) -> StoreURL:
    """``url`` taken apart; ``ValueError`` for a missing or unknown scheme (naming the known)."""
    scheme = scheme_of(url)
    if not scheme.replace("+", "").isalnum():
        raise ValueError(
            f"not a store URL: {redact_url(url)!r} (expected scheme://...); "
            f"supported schemes: {_SCHEME_LIST}"
        )
    if scheme not in SUPPORTED_SCHEMES:
        raise ValueError(
            f"unknown store URL scheme {scheme + '://'!r} in {redact_url(url)!r}; "
            f"supported schemes: {_SCHEME_LIST}"
        )
    return StoreURL(url, scheme)


def _memory_store(parsed: StoreURL, options: Dict[str, Any]) -> Any:
    """``memory://[?max_keys=N]``: a ``MemoryStore``; ``options`` override its query."""
    parsed.no_userinfo()
    if parsed.netloc or parsed.path not in ("", "/"):
        parsed.fail("memory:// takes no host or path (write memory:// or memory://?max_keys=N)")
    parsed.check_query(("max_keys",))
    kwargs: Dict[str, Any] = {}
    if "max_keys" in parsed.query:
        kwargs["max_keys"] = parsed.integer("max_keys", 1, none=True)
    store_options(options, ("max_keys",), "a memory://", kwargs)
    from limiter.backends.memory import MemoryStore

    return MemoryStore(**kwargs)


_SQLITE_PARAMS = ("timeout", "purge_every", *FALLBACK_PARAMS, *DENY_CACHE_PARAMS)


def _sqlite_store(parsed: StoreURL, options: Dict[str, Any]) -> Any:
    """``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``: an ``SQLiteStore``;
    ``options`` override its query."""
    parsed.no_userinfo()
    if parsed.netloc:
        parsed.fail(
            "sqlite:// takes no host: write sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    path = unquote(parsed.path[1:])
    if not path:
        parsed.fail("the database path is missing (sqlite:///relative/path.db)")
    parsed.check_query(_SQLITE_PARAMS)
    kwargs: Dict[str, Any] = {}
    set_given(kwargs, "timeout", parsed.seconds("timeout", zero=True))
    set_given(kwargs, "purge_every", parsed.integer("purge_every", 1))
    parsed.fallback_options(kwargs)
    store_options(options, (*_SQLITE_PARAMS, "probe_clock"), "an sqlite://", kwargs)
    from limiter.backends.sqlite import SQLiteStore

    return SQLiteStore(path, **kwargs)


def store_from_url(url: str, *, asyncio: bool = False, **options: Any) -> Any:
    """The store a URL describes, ready to use (no connection opened yet; typed ``Any``).

    ``url``: ``memory://``, ``sqlite:///path.db``, ``redis://[user:password@]host[:port][/db]``,
    ``rediss://``, ``redis+unix://``, ``redis+sentinel://``, ``redis+cluster://``,
    the same with ``valkey``, ``postgresql://`` or ``postgres://``; ``deny_cache=N``
    wraps it in a ``DenyCache``.  ``asyncio=True``: the asyncio store of a Redis or
    PostgreSQL scheme.  ``options`` override the URL (the store's arguments, else the
    client constructor's; ``connect_timeout`` is ``socket_connect_timeout``).
    ``ValueError`` for a malformed URL, unknown scheme or parameter;
    ``ModuleNotFoundError`` naming the extra to install.  Messages redact the URL.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, got {redact_url(url)}")
    if not isinstance(asyncio, bool):
        raise TypeError(f"asyncio must be True or False, got {asyncio!r:.100}")
    parsed = _parse(url.strip())
    if parsed.scheme == "memory":
        return _memory_store(parsed, options)
    deny_cache = deny_cache_options(parsed, options)  # takes its options out of ``options``
    if parsed.scheme == "sqlite":
        store = _sqlite_store(parsed, options)
    elif parsed.scheme in ("postgresql", "postgres"):
        from limiter.backends.postgres._url import postgres_store

        store = postgres_store(parsed, asyncio, options)
    else:
        from limiter.backends.redis._url import redis_store

        store = redis_store(parsed, asyncio, options)
    if deny_cache is None:
        return store
    from limiter.backends.denycache import DenyCache

    return DenyCache(store, **deny_cache)


def store_from_env(*, asyncio: bool = False, **options: Any) -> Any:
    """The store ``LIMITER_STORAGE_URL`` describes, or ``None`` when unset or blank;
    an invalid URL is a ``ValueError`` naming the variable."""
    url = os.environ.get(STORAGE_URL_ENV, "").strip()
    if not url:
        return None
    try:
        return store_from_url(url, asyncio=asyncio, **options)
    except ValueError as exc:
        raise ValueError(f"{STORAGE_URL_ENV}: {exc}") from exc


def resolve_store(store: Any = None, *, asyncio: bool = False) -> Any:
    """The store to use: ``store`` (an object as is, or a URL) > ``LIMITER_STORAGE_URL``
    > a new ``MemoryStore``."""
    if isinstance(store, str):
        return store_from_url(store, asyncio=asyncio)
    if store is not None:
        return store
    from_env = store_from_env(asyncio=asyncio)
    if from_env is not None:
        return from_env
    from limiter.backends.memory import MemoryStore

    return MemoryStore()
