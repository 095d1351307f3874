"""``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``: an ``SQLiteStore``."""

from __future__ import annotations

from typing import Any, Dict
from urllib.parse import unquote

from limiter.backends._url import DENY_CACHE_PARAMS, FALLBACK_PARAMS, StoreURL, store_options
from limiter.backends.sqlite import SQLiteStore

SQLITE_PARAMS = ("timeout", "purge_every", *FALLBACK_PARAMS, *DENY_CACHE_PARAMS)
# Keyword options the store takes.
SQLITE_STORE_OPTIONS = (*SQLITE_PARAMS, "probe_clock")


def sqlite_store(parsed: StoreURL, options: Dict[str, Any]) -> SQLiteStore:
    """The ``SQLiteStore`` of an ``sqlite://`` URL; ``options`` override its query."""
    parsed.no_userinfo()
    if parsed.netloc:
        parsed.fail(
            "sqlite:// takes no host: write sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    path = unquote(parsed.path[1:])
    if not path:
        parsed.fail("the database path is missing (sqlite:///relative/path.db)")
    parsed.check_query(SQLITE_PARAMS)
    kwargs: Dict[str, Any] = {}
    timeout = parsed.seconds("timeout", zero=True)
    if timeout is not None:
        kwargs["timeout"] = timeout
    purge_every = parsed.integer("purge_every", 1)
    if purge_every is not None:
        kwargs["purge_every"] = purge_every
    parsed.fallback_options(kwargs)
    store_options(options, SQLITE_STORE_OPTIONS, "an sqlite://", kwargs)
    return SQLiteStore(path, **kwargs)
