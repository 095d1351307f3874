"""Stores from URLs: ``store_from_url("redis://cache:6379/0?prefix=app:")``.

One string configures a store, so an application can take its storage from
its settings or from the environment (``LIMITER_STORAGE_URL``, see
``store_from_env``) without building client objects by hand.  See
docs/stores.md for the schemes and their query parameters.

Clients built here fail fast: ``DEFAULT_SOCKET_TIMEOUT`` and
``DEFAULT_CONNECT_TIMEOUT`` (0.25 s, a hundred times a LAN round trip: see
docs/stores.md), no retries (``Retry(NoBackoff(), 0)``, also for a cluster's
own retry policy and for the Sentinel connections) and no health-check
pings.  The store's breaker (``fallback=...``) is what retries, at its own
pace.

Nothing here opens a connection: the first check does (``RedisStore.ping()``
checks the server at start-up).  ``SQLiteStore`` opens its file, as always.
The client libraries are imported only for the scheme that needs them, and
user names and passwords go to the client in a credential provider, so they
are in no ``repr``, message or log (messages show ``redact_url(url)``).

This module is the scheme registry (``SUPPORTED_SCHEMES``, ``_open``): each
backend parses its own part of a URL in its own module (``_memory_url``,
``_sqlite_url``, ``redis._url``), with the syntax they share
(``limiter.backends._url``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, Tuple

from limiter.backends._url import (
    StoreURL,
    deny_cache_options,
    scheme_of,
)
from limiter.backends._url import redact_url as redact_url  # documented here

if TYPE_CHECKING:
    pass

#: The environment variable ``store_from_env`` reads.
STORAGE_URL_ENV = "LIMITER_STORAGE_URL"


def __getattr__(name: str) -> object:
    # Lazy: only a redis+cluster:// store needs it.
    if name == "LazyCluster":
        from limiter.backends.redis._clients import LazyCluster

        return LazyCluster
    raise AttributeError(f"module 'limiter.urls' has no attribute {name!r}")


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


def _open(url: StoreURL, asyncio: bool, options: Dict[str, Any]) -> Any:
    """The store of ``url`` (from ``_parse``), built by its scheme's backend.

    ``options`` override the query (see ``store_from_url``).
    """
    if url.scheme == "memory":
        from limiter.backends._memory_url import memory_store

        return memory_store(url, options)
    if url.scheme == "sqlite":
        from limiter.backends._sqlite_url import sqlite_store

        return sqlite_store(url, options)
    from limiter.backends.redis._url import redis_store

    return redis_store(url, asyncio, options)


def store_from_url(url: str, *, asyncio: bool = False, **options: Any) -> Any:
    """The store a URL describes, ready to use (no connection is opened yet).

    Returns a ``MemoryStore``, ``SQLiteStore``, ``RedisStore`` or (with
    ``asyncio=True`` and a Redis scheme) ``AsyncRedisStore``, or one of the
    shared ones in a ``DenyCache`` (``deny_cache=N``): typed ``Any``, since
    which one depends on the string.

    ``url``: ``memory://``, ``sqlite:///relative/path.db``,
    ``sqlite:////absolute/path.db``, ``redis://[user:password@]host[:port][/db]``,
    ``rediss://`` (TLS), ``redis+unix:///path/to/socket``,
    ``redis+sentinel://host[:port][,host:port]/service``,
    ``redis+cluster://host[:port][,host:port]``, or the same with ``valkey``
    (valkey-py) for ``redis``.  User names and passwords are percent-decoded.
    Query parameters: ``prefix``, ``server_time``, ``pipelining`` (with
    ``asyncio=True``: ``AsyncRedisStore``'s), ``socket_timeout`` and
    ``connect_timeout`` (seconds), ``fallback=memory``, ``probe_after``,
    ``max_probe_after``; ``db`` (unix, sentinel); ``max_keys`` (memory);
    ``timeout``, ``purge_every`` (sqlite); ``ssl_*`` (TLS);
    ``sentinel_username``, ``sentinel_password``; ``deny_cache=N`` and
    ``deny_cache_max_stale`` (Redis, Valkey and sqlite: the store wrapped in a
    ``DenyCache`` of ``N`` entries, see ``limiter.backends.denycache``).
    See docs/stores.md.

    ``asyncio=True``: an ``AsyncRedisStore`` over an asyncio client for the
    Redis schemes; memory and sqlite stores serve both.  ``options``
    override the URL: the store's own arguments (``prefix``, ``fallback``,
    ``max_keys``...) go to the store, ``connect_timeout`` is the client's
    ``socket_connect_timeout``, and any other goes to the client constructor
    (``max_connections=...``, ``retry=...``).

    ``ValueError`` for a malformed URL, an unknown scheme or query parameter;
    ``ModuleNotFoundError`` naming the extra to install when the client
    library is missing; what the store's constructor raises (``OSError`` for
    an SQLite path that cannot work).  Messages show the URL with its password
    replaced by ``***``.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, got {redact_url(url)}")
    if not isinstance(asyncio, bool):
        raise TypeError(f"asyncio must be True or False, got {asyncio!r:.100}")
    parsed = _parse(url.strip())
    if parsed.scheme == "memory":
        return _open(parsed, asyncio, options)
    deny_cache = deny_cache_options(parsed, options)  # takes its options out of ``options``
    store = _open(parsed, asyncio, options)
    if deny_cache is None:
        return store
    from limiter.backends.denycache import DenyCache

    return DenyCache(store, **deny_cache)


def store_from_env(*, asyncio: bool = False, **options: Any) -> Any:
    """The store ``LIMITER_STORAGE_URL`` describes (see ``store_from_url``), or ``None``.

    ``None`` when the variable is unset or blank.  A value that is not a valid
    store URL is a ``ValueError`` naming the variable (password redacted).
    """
    url = os.environ.get(STORAGE_URL_ENV, "").strip()
    if not url:
        return None
    try:
        return store_from_url(url, asyncio=asyncio, **options)
    except ValueError as exc:
        raise ValueError(f"{STORAGE_URL_ENV}: {exc}") from exc


def resolve_store(store: Any = None, *, asyncio: bool = False) -> Any:
    """The store to use, by precedence: ``store`` > ``LIMITER_STORAGE_URL`` > a new ``MemoryStore``.

    ``store`` may be a store object (returned as is) or a URL string.  For the
    integrations and the command line, where "no store given" means "use the
    environment's".
    """
    if isinstance(store, str):
        return store_from_url(store, asyncio=asyncio)
    if store is not None:
        return store
    from_env = store_from_env(asyncio=asyncio)
    if from_env is not None:
        return from_env
    from limiter.backends.memory import MemoryStore

    return MemoryStore()
