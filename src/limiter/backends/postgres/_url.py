"""PostgreSQL store URLs: ``postgresql://user:password@host:port/dbname?table=...``.

``postgres://`` is the same.  The store's parameters come out of the query;
libpq's go through, with fail-fast timeouts added.  URL errors are raised
before psycopg is imported.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List
from urllib.parse import quote

from limiter.backends._url import (
    DEFAULT_SOCKET_TIMEOUT,
    DENY_CACHE_PARAMS,
    FALLBACK_PARAMS,
    StoreURL,
    is_number,
    store_options,
)
from limiter.backends.postgres._sql import seconds

#: PostgreSQL's port.
DEFAULT_PORT = 5432
#: Seconds to wait for a new connection: libpq's shortest useful connect_timeout.
DEFAULT_CONNECT_TIMEOUT = 2
#: Seconds a check may run on the server (its statement_timeout), and may wait for
#: a pooled connection: the Redis URLs' socket timeout.
DEFAULT_STATEMENT_TIMEOUT = DEFAULT_SOCKET_TIMEOUT

_FLAGS = ("server_time", "create", "unlogged", "synchronous_commit")
_STORE_PARAMS = ("table", "prefix", *_FLAGS, "max_connections", "pool_timeout", *FALLBACK_PARAMS)
#: The keyword timeouts and their bounds (statement_timeout 0: none).
_TIMEOUTS = {"connect_timeout": "> 0", "statement_timeout": ">= 0"}
#: libpq's parameters a URL may carry on (TLS, routing, naming).
_LIBPQ_PARAMS = (
    *("sslmode", "sslrootcert", "sslcert", "sslkey", "channel_binding", "target_session_attrs"),
    *("application_name", "options", "host", "port", "keepalives", "keepalives_idle"),
)
#: ``options`` that set statement_timeout (``-c statement_timeout=``, ``--statement-timeout=``).
_SETS_STATEMENT_TIMEOUT = re.compile(r"statement[_-]timeout\s*=", re.IGNORECASE)
_KNOWN = (*_STORE_PARAMS, *_TIMEOUTS, *_LIBPQ_PARAMS, *DENY_CACHE_PARAMS)
# Keyword options that go to the store (the others: a TypeError).
_STORE_OPTIONS = (*_STORE_PARAMS, "probe_clock")


def postgres_store(parsed: StoreURL, asyncio: bool, options: Dict[str, Any]) -> Any:
    """A ``PostgresStore`` (or ``AsyncPostgresStore``) for a postgresql:// or postgres:// URL."""
    parsed.check_query(_KNOWN)
    if not parsed.netloc and "host" not in parsed.query:
        parsed.fail("a host is missing (postgresql://user:password@host:5432/dbname)")
    _check_hosts(parsed)
    kwargs = _store_kwargs(parsed)
    timeouts = {
        name: seconds(options.pop(name), name, bound)
        for name, bound in _TIMEOUTS.items()
        if name in options
    }
    store_options(options, (*_STORE_OPTIONS, *_TIMEOUTS), f"a {parsed.scheme}://", kwargs)
    conninfo = connection_string(parsed, timeouts)
    from limiter.backends.postgres._store import AsyncPostgresStore, PostgresStore

    store_class = AsyncPostgresStore if asyncio else PostgresStore
    return store_class(conninfo, **kwargs)


def _check_hosts(parsed: StoreURL) -> None:
    """``ValueError`` for a malformed host or port, which libpq would report at each connect."""
    if parsed.netloc and "host" not in parsed.query:  # a query's host= replaces the URL's
        parsed.hosts(DEFAULT_PORT)
    for port in parsed.query.get("port", "").split(","):
        if port and not (is_number(port) and 0 < int(port) < 65536):
            parsed.fail(f"port must be a number from 1 to 65535, got {port!r}")


def _store_kwargs(parsed: StoreURL) -> Dict[str, Any]:
    kwargs: Dict[str, Any] = {"pool_timeout": DEFAULT_STATEMENT_TIMEOUT}
    for name in ("table", "prefix"):
        if name in parsed.query:
            kwargs[name] = parsed.query[name]
    parsed.flags(_FLAGS, kwargs)
    size = parsed.integer("max_connections", 1)
    if size is not None:
        kwargs["max_connections"] = size
    wait = parsed.seconds("pool_timeout")
    if wait is not None:
        kwargs["pool_timeout"] = wait
    parsed.fallback_options(kwargs)
    return kwargs


def connection_string(parsed: StoreURL, timeouts: Dict[str, Any]) -> str:
    """The URL libpq gets: the store's parameters out, the fail-fast timeouts in.

    ``connect_timeout`` (whole seconds, >= 2) and ``statement_timeout``
    (seconds; 0: none) come from ``timeouts``, else the query, else the
    defaults (none added after the URL's own ``options`` setting one).
    """
    connect = timeouts.get("connect_timeout", parsed.seconds("connect_timeout"))
    statement = timeouts.get("statement_timeout", parsed.seconds("statement_timeout", zero=True))
    connect = DEFAULT_CONNECT_TIMEOUT if connect is None else max(2, math.ceil(connect))
    options = parsed.query.get("options", "")
    if statement is None and _SETS_STATEMENT_TIMEOUT.search(options) is None:
        statement = DEFAULT_STATEMENT_TIMEOUT
    pairs: List[str] = [
        f"{name}={quote(value, safe='')}"
        for name, value in parsed.query.items()
        if name in _LIBPQ_PARAMS and name != "options"
    ]
    pairs.append(f"connect_timeout={connect}")
    if statement:
        options = f"{options} -c statement_timeout={math.ceil(statement * 1000)}".strip()
    if options:
        pairs.append("options=" + quote(options, safe=""))
    return _head(parsed) + "?" + "&".join(pairs)


def _head(parsed: StoreURL) -> str:
    """The URL up to its query, the user information percent-encoded anew.

    The parser takes it up to the last ``@``; libpq stops at the first, and
    rejects a ``%`` that starts no escape, echoing the password in the error.
    """
    userinfo = ""
    if parsed.username is not None or parsed.password is not None:
        userinfo = quote(parsed.username or "", safe="")
        if parsed.password is not None:
            userinfo += ":" + quote(parsed.password, safe="")
        userinfo += "@"
    return f"{parsed.scheme}://{userinfo}{parsed.netloc}{parsed.path}"
