"""Redis and Valkey store URLs (``redis://``, ``rediss://``, ``redis+unix://``,
``redis+sentinel://``, ``redis+cluster://``, the same with ``valkey``): every URL error
is raised before ``_clients`` imports a client library.  See docs/stores.md."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple
from urllib.parse import unquote

from limiter.backends._url import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_SOCKET_TIMEOUT,
    DENY_CACHE_PARAMS,
    FALLBACK_PARAMS,
    StoreURL,
    fallback_store,
    is_number,
    set_given,
)
from limiter.backends.redis._clients import Library, RedisSettings, redis_client
from limiter.backends.redis._store import AsyncRedisStore, RedisStore

_DEFAULT_PORT = 6379
_DEFAULT_SENTINEL_PORT = 26379

_REDIS_PARAMS = (
    "prefix",
    "server_time",
    "socket_timeout",
    "connect_timeout",
    "socket_connect_timeout",  # redis-py's name for connect_timeout
    "pipelining",  # AsyncRedisStore's (asyncio=True only)
    *FALLBACK_PARAMS,
    *DENY_CACHE_PARAMS,
)
_TLS_PARAMS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
_SENTINEL_PARAMS = ("sentinel_username", "sentinel_password")
# Keyword options that go to the store itself (the rest go to the client).
_REDIS_STORE_OPTIONS = ("prefix", "server_time", "pipelining", "probe_clock", *FALLBACK_PARAMS)


def redis_store(parsed: StoreURL, asyncio: bool, options: Dict[str, Any]) -> Any:
    """A ``RedisStore`` (or ``AsyncRedisStore``) for a redis or valkey scheme."""
    scheme = parsed.scheme
    base, _, kind = scheme.partition("+")
    tls = base in ("rediss", "valkeys")
    package = base[:-1] if tls else base
    parsed.check_query(_redis_params(kind, tls))
    settings = _redis_query(parsed, tls)
    _redis_options(settings, kind, options)
    if not asyncio and "pipelining" in settings.store_kwargs:
        raise ValueError(
            f"pipelining={settings.store_kwargs['pipelining']!r:.100}: only an asyncio store "
            "pipelines (store_from_url(..., asyncio=True)); a RedisStore sends each check on "
            "its own"
        )
    # Every URL error is raised here, before a client library is imported.
    _redis_target(parsed, kind, settings, options)
    client = redis_client(Library(package, asyncio, scheme), kind, settings)

    store_class = AsyncRedisStore if asyncio else RedisStore
    return store_class(client, **settings.store_kwargs)


def _redis_params(kind: str, tls: bool) -> Tuple[str, ...]:
    """The query parameters a Redis scheme of this kind (and TLS or not) takes."""
    known: Tuple[str, ...] = _REDIS_PARAMS
    if kind in ("", "unix", "sentinel"):
        known += ("db",)
    if kind == "sentinel":
        known += _SENTINEL_PARAMS
    if tls:
        known += _TLS_PARAMS
    return known


def _redis_query(parsed: StoreURL, tls: bool) -> RedisSettings:
    """The store and client keyword arguments the URL's query (and user information) says."""
    store_kwargs: Dict[str, Any] = {}
    client_kwargs: Dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        "health_check_interval": 0,
    }
    set_given(store_kwargs, "prefix", parsed.query.get("prefix"))
    parsed.flags(("server_time", "pipelining"), store_kwargs)
    parsed.fallback_options(store_kwargs)
    set_given(client_kwargs, "socket_timeout", parsed.seconds("socket_timeout"))
    if "connect_timeout" in parsed.query and "socket_connect_timeout" in parsed.query:
        parsed.fail("give connect_timeout or socket_connect_timeout, not both")
    for name in ("connect_timeout", "socket_connect_timeout"):
        set_given(client_kwargs, "socket_connect_timeout", parsed.seconds(name))
    db = parsed.integer("db", 0)  # read before the TLS options: its error is reported first
    if tls:
        _tls_query(parsed, client_kwargs)
    return RedisSettings(
        store_kwargs=store_kwargs,
        client_kwargs=client_kwargs,
        db=db,
        username=parsed.username,
        password=parsed.password,
        sentinel_username=parsed.query.get("sentinel_username"),
        sentinel_password=parsed.query.get("sentinel_password"),
    )


def _tls_query(parsed: StoreURL, client_kwargs: Dict[str, Any]) -> None:
    """Put the TLS client arguments of a rediss:// or valkeys:// query into ``client_kwargs``."""
    client_kwargs["ssl"] = True
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        if name in parsed.query:
            client_kwargs[name] = parsed.query[name]
    reqs = parsed.query.get("ssl_cert_reqs")
    if reqs is not None:
        if reqs.lower() not in ("none", "optional", "required"):
            parsed.fail(f"ssl_cert_reqs must be none, optional or required, got {reqs!r}")
        client_kwargs["ssl_cert_reqs"] = reqs.lower()
    set_given(client_kwargs, "ssl_check_hostname", parsed.flag("ssl_check_hostname"))


def _redis_options(settings: RedisSettings, kind: str, options: Dict[str, Any]) -> None:
    """Apply the caller's keyword options to ``settings``, over what the URL says."""
    for name, value in options.items():
        if name in _REDIS_STORE_OPTIONS:
            settings.store_kwargs[name] = fallback_store(value) if name == "fallback" else value
        elif name in ("db", "username", "password"):
            setattr(settings, name, value)
        elif name == "sentinel_kwargs" and kind == "sentinel":
            if not isinstance(value, dict):
                raise TypeError(f"sentinel_kwargs must be a dict, got {value!r:.100}")
            settings.sentinel_extra = dict(value)
        else:
            name = "socket_connect_timeout" if name == "connect_timeout" else name
            settings.client_kwargs[name] = value


def _redis_target(
    parsed: StoreURL, kind: str, settings: RedisSettings, options: Dict[str, Any]
) -> None:
    """Set where to connect in ``settings``, from the URL's host and path; raises every URL
    error left."""
    scheme = parsed.scheme
    where, db = settings.where, settings.db
    if kind == "":
        where["host"], where["port"] = _one_host(parsed, "localhost")
        path_db = _path_db(parsed)
        if path_db is not None and db is not None and "db" not in options:
            parsed.fail("give the database number in the path or as ?db=, not both")
        db = path_db if db is None else db
    elif kind == "unix":
        if parsed.netloc:
            parsed.fail(
                f"{scheme}:// takes a socket path, no host: write {scheme}:///path/to/redis.sock"
            )
        where["unix_socket_path"] = unquote(parsed.path)
        if not where["unix_socket_path"]:
            parsed.fail(f"the socket path is missing ({scheme}:///path/to/redis.sock)")
    elif kind == "sentinel":
        settings.hosts = parsed.hosts(_DEFAULT_SENTINEL_PORT)
        settings.service = unquote(parsed.path[1:])
        if not settings.service or "/" in settings.service:
            parsed.fail(
                f"the path must be the service name: {scheme}://host:26379[,host:port]/mymaster"
                " (the database number goes in ?db=N)"
            )
    else:  # cluster
        settings.hosts = parsed.hosts(_DEFAULT_PORT)
        if parsed.path not in ("", "/", "/0"):
            parsed.fail(f"a cluster has only database 0: write {scheme}://host:port[,host:port]")
        if db not in (None, 0):
            raise ValueError(f"db must be 0 on a cluster, got {db!r}")
    if db is not None and kind != "cluster":
        where["db"] = db


def _one_host(parsed: StoreURL, default_host: str) -> Tuple[str, int]:
    if not parsed.netloc:
        return default_host, _DEFAULT_PORT
    if "," in parsed.netloc:
        parsed.fail(
            f"{parsed.scheme}:// takes one host; several hosts are for "
            "redis+sentinel:// and redis+cluster://"
        )
    return parsed.host(parsed.netloc, _DEFAULT_PORT)


def _path_db(parsed: StoreURL) -> Optional[int]:
    path = parsed.path
    if path in ("", "/"):
        return None
    if not is_number(path[1:]):
        parsed.fail(f"the path must be the database number (/0, /1, ...), got {unquote(path)!r}")
    return int(path[1:])
