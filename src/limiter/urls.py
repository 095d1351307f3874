"""Stores from URLs: ``store_from_url("redis://cache:6379/0?prefix=app:")``.

One string configures a store, so an application can take its storage from
its settings or from the environment (``LIMITER_STORAGE_URL``, see
``store_from_env``) without building client objects by hand.  See
docs/stores.md for the schemes and their query parameters.

Clients built here fail fast: ``DEFAULT_SOCKET_TIMEOUT`` and
``DEFAULT_CONNECT_TIMEOUT`` (0.25 s), no retries (``Retry(NoBackoff(), 0)``,
also for a cluster's own retry policy and for the Sentinel connections) and
no health-check pings.  The store's breaker (``fallback=...``) is what
retries, at its own pace.  Why 0.25 s: a check is one round trip of well
under a millisecond on a LAN, so a timeout only ever bounds a failure; 0.25 s
is a hundred times the normal answer, enough for a busy server, a garbage
collection pause or a TLS handshake to a cloud Redis, and short enough that a
request held by a dead Redis still gets its answer quickly.

Nothing here opens a connection: the first check does (``RedisStore.ping()``
checks the server at start-up).  ``SQLiteStore`` opens its file, as always.
The client libraries are imported only for the scheme that needs them, and
user names and passwords go to the client in a credential provider, so they
are in no ``repr``, message or log (messages show ``redact_url(url)``).
"""

from __future__ import annotations

import importlib
import math
import os
import re
import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple
from urllib.parse import unquote

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_SOCKET_TIMEOUT",
    "STORAGE_URL_ENV",
    "SUPPORTED_SCHEMES",
    "LazyCluster",
    "redact_url",
    "resolve_store",
    "store_from_env",
    "store_from_url",
]

#: Seconds a check waits for Redis to answer (``socket_timeout``).
DEFAULT_SOCKET_TIMEOUT = 0.25
#: Seconds a check waits for a new connection (``socket_connect_timeout``).
DEFAULT_CONNECT_TIMEOUT = 0.25
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
)
_SCHEME_LIST = ", ".join(f"{scheme}://" for scheme in SUPPORTED_SCHEMES)

_DEFAULT_PORT = 6379
_DEFAULT_SENTINEL_PORT = 26379

# Query parameters, by what reads them.
_FALLBACK_PARAMS = ("fallback", "probe_after", "max_probe_after")
# A DenyCache around a shared store (``deny_cache=N`` entries; see _deny_cache).
_DENY_CACHE_PARAMS = ("deny_cache", "deny_cache_max_stale")
_REDIS_PARAMS = (
    "prefix",
    "server_time",
    "socket_timeout",
    "connect_timeout",
    "socket_connect_timeout",  # redis-py's name for connect_timeout
    "pipelining",  # AsyncRedisStore's (asyncio=True only)
    *_FALLBACK_PARAMS,
    *_DENY_CACHE_PARAMS,
)
_TLS_PARAMS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
_SENTINEL_PARAMS = ("sentinel_username", "sentinel_password")
_MEMORY_PARAMS = ("max_keys",)
_SQLITE_PARAMS = ("timeout", "purge_every", *_FALLBACK_PARAMS, *_DENY_CACHE_PARAMS)
# Keyword options that go to the store itself (the rest go to the client).
_REDIS_STORE_OPTIONS = ("prefix", "server_time", "pipelining", "probe_clock", *_FALLBACK_PARAMS)
_SQLITE_STORE_OPTIONS = (*_SQLITE_PARAMS, "probe_clock")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


# -- redaction ---------------------------------------------------------------


def _split_userinfo(url: str) -> Tuple[str, Optional[str], str]:
    """``(scheme + "://", userinfo or None, the rest)``: the split both parsing and redaction use.

    The user information is what precedes the last ``@`` before the query, so a
    password with an unencoded ``@``, ``:`` or ``/`` still ends up whole in it.
    A URL whose text after ``://`` starts with ``/`` has none (``sqlite:///a@b.db``).
    """
    scheme_end = url.find("://")
    head_start = 0 if scheme_end < 0 else scheme_end + 3
    head, rest = url[:head_start], url[head_start:]
    if rest.startswith("/"):
        return head, None, rest
    query = rest.find("?")
    before_query = rest if query < 0 else rest[:query]
    at = before_query.rfind("@")
    if at < 0 and query >= 0:
        # "user:pa?ss@host": an unencoded "?" in a password.  A real query has
        # a "=" or "&" before any "@" it contains ("prefix=a@b").
        after = rest[query + 1 :]
        marker = after.find("@")
        if marker >= 0 and "=" not in after[:marker] and "&" not in after[:marker]:
            at = query + 1 + marker
    if at < 0:
        return head, None, rest
    return head, rest[:at], rest[at + 1 :]


def redact_url(url: str) -> str:
    """``url`` with its password and secret query values replaced by ``***``.

    A query value is secret when its name has ``password``, ``token`` or
    ``secret`` in it (``sentinel_password=``, ``auth_token=``).

    Safe to log or show: ``redact_url("redis://app:s3cret@cache:6379/0")`` is
    ``"redis://app:***@cache:6379/0"``.  Every message of this module shows
    URLs this way.  Anything that is not a string is returned as its ``repr``,
    cut to 100 characters.
    """
    if not isinstance(url, str):
        return f"{url!r:.100}"
    head, userinfo, rest = _split_userinfo(url)
    if userinfo is None and _may_hide_a_password(rest):
        # "user:pa?ss=1@host": parsed as a query, but it may be an unencoded
        # password.  A display string can afford to hide too much; the query
        # after the host still has its own secrets hidden below.
        head += rest[: rest.index(":") + 1] + "***@"
        rest = rest[rest.rindex("@") + 1 :]
    elif userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        if colon:
            userinfo = user + ":***"
        head += userinfo + "@"
    # Every "?name=" or "&name=" counts, not only those after the first "?": an
    # unencoded "?" in a password would otherwise hide the real query's start.
    for match in reversed(list(_QUERY_FIELD.finditer(rest))):
        if _secret(unquote(match.group(1))):
            end = rest.find("&", match.end())
            rest = rest[: match.end()] + "***" + (rest[end:] if end >= 0 else "")
    return head + rest


#: "?name=" or "&name=": a query field's name, up to its "=".
_QUERY_FIELD = re.compile(r"[?&]([^?&=]*)=")


def _secret(name: str) -> bool:
    """A query parameter whose value is hidden: its name has password, token or secret in it."""
    name = name.lower()
    return "password" in name or "token" in name or "secret" in name


def _may_hide_a_password(rest: str) -> bool:
    """An ``@`` after the ``?`` and a ``:`` before it: maybe ``user:pa?ss@host``."""
    query = rest.find("?")
    return query >= 0 and "@" in rest[query:] and ":" in rest[:query]


# -- parsing -----------------------------------------------------------------


class _Parsed:
    """A store URL taken apart: nothing decided yet but the syntax."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.shown = redact_url(url)
        scheme_end = url.find("://")
        scheme = url[:scheme_end].lower() if scheme_end > 0 else ""
        if scheme_end <= 0 or not scheme.replace("+", "").isalnum():
            raise ValueError(
                f"not a store URL: {self.shown!r} (expected scheme://...); "
                f"supported schemes: {_SCHEME_LIST}"
            )
        if scheme not in SUPPORTED_SCHEMES:
            raise ValueError(
                f"unknown store URL scheme {scheme + '://'!r} in {self.shown!r}; "
                f"supported schemes: {_SCHEME_LIST}"
            )
        self.scheme = scheme
        _, userinfo, rest = _split_userinfo(url)
        self.username: Optional[str] = None
        self.password: Optional[str] = None
        if userinfo is not None:
            user, colon, password = userinfo.partition(":")
            self.username = unquote(user) or None
            self.password = unquote(password) if colon else None
        rest, _, query = rest.partition("?")
        if "#" in rest or "#" in query:
            self.fail("'#' must be percent-encoded (%23) in a store URL")
        slash = rest.find("/")
        self.netloc = rest if slash < 0 else rest[:slash]
        self.path = "" if slash < 0 else rest[slash:]
        self.query: Dict[str, str] = {}
        for field in query.split("&") if query else ():
            if not field:
                continue
            raw_name, eq, raw_value = field.partition("=")
            name = unquote(raw_name)
            if not eq:
                self.fail(f"query parameter {name!r} has no value (write {name}=...)")
            if name in self.query:
                self.fail(f"query parameter {name!r} is given twice")
            self.query[name] = unquote(raw_value)

    def fail(self, problem: str) -> None:
        raise ValueError(f"bad store URL {self.shown!r}: {problem}")

    def check_query(self, known: Tuple[str, ...]) -> None:
        for name in self.query:
            if name not in known:
                shown_query = self.shown.partition("?")[2]
                shown_names = {field.partition("=")[0] for field in shown_query.split("&")}
                if name not in shown_names:  # hidden by redact_url: maybe part of a password
                    self.fail(
                        f"unknown query parameter for {self.scheme}:// (not shown: it may be "
                        "part of a password; percent-encode '?', '@' and '&' in passwords); "
                        f"known: {', '.join(known)}"
                    )
                self.fail(
                    f"unknown query parameter {name!r} for {self.scheme}://; "
                    f"known: {', '.join(known)}"
                )

    def no_userinfo(self) -> None:
        if self.username is not None or self.password is not None:
            self.fail(f"{self.scheme}:// takes no user name or password")

    def hosts(self, default_port: int) -> List[Tuple[str, int]]:
        found = []
        for item in self.netloc.split(","):
            found.append(self._host(item, default_port))
        return found

    def _host(self, item: str, default_port: int) -> Tuple[str, int]:
        if item.startswith("["):  # [IPv6]:port
            end = item.find("]")
            if end < 0:
                self.fail(f"unclosed '[' in the host {item!r}")
            host, port_text = item[1:end], item[end + 1 :]
            if port_text and not port_text.startswith(":"):
                self.fail(f"expected ':port' after the address in {item!r}")
            port_text = port_text[1:]
        else:
            host, _, port_text = item.partition(":")
        host = unquote(host)
        if not host:
            self.fail("a host name is missing" + (" (in a list of hosts)" if item else ""))
        if not port_text:
            return host, default_port
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            self.fail(f"the port of {host!r} must be a number from 1 to 65535, got {port_text!r}")
        return host, int(port_text)

    # Query values -----------------------------------------------------------

    def seconds(self, name: str, *, zero: bool = False) -> Optional[float]:
        text = self.query.get(name)
        if text is None:
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
            bound = ">= 0" if zero else "> 0"
            self.fail(f"{name} must be a finite number of seconds {bound}, got {text!r}")
        return value

    def integer(self, name: str, minimum: int, *, none: bool = False) -> Any:
        text = self.query.get(name)
        if text is None:
            return None
        if none and text.lower() == "none":
            return None
        if not text.isdigit() or int(text) < minimum:
            also = " or none" if none else ""
            self.fail(f"{name} must be an integer >= {minimum}{also}, got {text!r}")
        return int(text)

    def flag(self, name: str) -> Optional[bool]:
        text = self.query.get(name)
        if text is None:
            return None
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        self.fail(f"{name} must be true or false (or 1/0, yes/no, on/off), got {text!r}")
        return None  # unreachable

    def fallback_options(self, into: Dict[str, Any]) -> None:
        fallback = self.query.get("fallback")
        if fallback is not None:
            into["fallback"] = _fallback(fallback, self)
        for name in ("probe_after", "max_probe_after"):
            value = self.seconds(name)
            if value is not None:
                into[name] = value


def _fallback(value: Any, parsed: Optional[_Parsed] = None) -> Any:
    """The store a ``fallback`` query value or string option names (only ``memory``)."""
    if isinstance(value, str):
        if value.lower() != "memory":
            problem = f"fallback must be 'memory' (a MemoryStore in this process), got {value!r}"
            if parsed is not None:
                parsed.fail(problem)
            raise ValueError(problem)
        from limiter.backends.memory import MemoryStore

        return MemoryStore()
    return value


# -- the client libraries ----------------------------------------------------


def _import(module: str, scheme: str) -> Any:
    """Import ``module`` of redis-py or valkey-py, saying which extra installs it."""
    package = module.partition(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.partition(".")[0] != package:
            raise  # something else is missing: not ours to explain
        name = "redis-py" if package == "redis" else "valkey-py"
        raise ModuleNotFoundError(
            f"{scheme}:// needs {name} (the {package!r} package): "
            f'pip install "tokenlimiter[{package}]"',
            name=package,
        ) from exc


class _Library:
    """Where redis-py or valkey-py (sync or asyncio) keeps what a URL needs."""

    def __init__(self, package: str, asyncio: bool, scheme: str) -> None:
        self.package = package
        self.asyncio = asyncio
        self.scheme = scheme
        self.root = _import(package, scheme)

    def get(self, module: str, name: str) -> Any:
        base = f"{self.package}.asyncio" if self.asyncio and module != "backoff" else self.package
        return getattr(_import(f"{base}.{module}" if module else base, self.scheme), name)

    @property
    def client_class(self) -> Any:
        return self.get("", "Valkey" if self.package == "valkey" else "Redis")

    @property
    def cluster_class(self) -> Any:
        return self.get("cluster", "ValkeyCluster" if self.package == "valkey" else "RedisCluster")

    def no_retry(self) -> Any:
        """``Retry(NoBackoff(), 0)`` of this library (and of its asyncio flavour)."""
        return self.get("retry", "Retry")(self.get("backoff", "NoBackoff")(), 0)

    def credentials(self, username: Optional[str], password: Optional[str]) -> Any:
        module = _import(f"{self.package}.credentials", self.scheme)
        provider = module.UsernamePasswordCredentialProvider
        # AUTH needs a password: a user without one (an ACL "nopass" user) sends "".
        return provider(username, "" if password is None and username else password)

    def cluster_retries_are_legacy(self) -> bool:
        """Whether the cluster client retries ``cluster_error_retry_attempts`` times.

        redis-py 6 made its ``retry`` the one policy of a cluster client (the
        old argument now warns); redis-py 4-5 and valkey-py 6 retry
        ``cluster_error_retry_attempts`` times (default 3), whatever ``retry``.
        """
        if self.package != "redis":
            return True
        major = str(getattr(self.root, "__version__", "6")).partition(".")[0]
        return major.isdigit() and int(major) < 6


# -- building stores ---------------------------------------------------------


class LazyCluster:
    """A cluster client (``RedisCluster``/``ValkeyCluster``) built on first use.

    The synchronous cluster clients connect in their constructor;
    ``store_from_url`` opens no connection, so a ``redis+cluster://`` store
    whose cluster is down at start-up still starts (and answers from its
    ``fallback``, or raises ``StoreError`` per check): each call that finds no
    client tries to build it again.  ``connect()`` returns the real client,
    building it now; ``close()`` closes it.  Thread-safe.
    """

    def __init__(self, factory: Callable[[], Any], description: str) -> None:
        self._factory = factory
        self._description = description
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "connected" if self._client is not None else "not connected yet"
        return f"<LazyCluster {self._description} ({state})>"

    def connect(self) -> Any:
        """The cluster client, built (and so connected) now if it is not yet."""
        client = self._client
        if client is None:
            with self._lock:
                client = self._client
                if client is None:
                    client = self._client = self._factory()
        return client

    def close(self) -> None:
        """Close the cluster client's connections, if it was built."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # What RedisStore calls.  keyslot and get_nodes make it a cluster to the
    # store (keys of one apply_many call must share a slot).
    def evalsha(self, *args: Any) -> Any:
        return self.connect().evalsha(*args)

    def eval(self, *args: Any) -> Any:
        return self.connect().eval(*args)

    def delete(self, *names: Any) -> Any:
        return self.connect().delete(*names)

    def keyslot(self, key: Any) -> int:
        slot: int = self.connect().keyslot(key)
        return slot

    def get_nodes(self) -> List[Any]:
        """The nodes of the cluster client once built; none before (no I/O)."""
        client = self._client
        return [] if client is None else list(client.get_nodes())


def _memory(parsed: _Parsed, options: Dict[str, Any]) -> Any:
    from limiter.backends.memory import MemoryStore

    parsed.no_userinfo()
    if parsed.netloc or parsed.path not in ("", "/"):
        parsed.fail("memory:// takes no host or path (write memory:// or memory://?max_keys=N)")
    parsed.check_query(_MEMORY_PARAMS)
    kwargs: Dict[str, Any] = {}
    if "max_keys" in parsed.query:
        kwargs["max_keys"] = parsed.integer("max_keys", 1, none=True)
    for name, value in options.items():
        if name not in _MEMORY_PARAMS:
            raise TypeError(
                f"store_from_url() got an unexpected keyword argument {name!r} for a memory:// "
                f"store; it takes: {', '.join(_MEMORY_PARAMS)}"
            )
        kwargs[name] = value
    return MemoryStore(**kwargs)


def _sqlite(parsed: _Parsed, options: Dict[str, Any]) -> Any:
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
    timeout = parsed.seconds("timeout", zero=True)
    if timeout is not None:
        kwargs["timeout"] = timeout
    purge_every = parsed.integer("purge_every", 1)
    if purge_every is not None:
        kwargs["purge_every"] = purge_every
    parsed.fallback_options(kwargs)
    for name, value in options.items():
        if name not in _SQLITE_STORE_OPTIONS:
            raise TypeError(
                f"store_from_url() got an unexpected keyword argument {name!r} for an sqlite:// "
                f"store; it takes: {', '.join(_SQLITE_STORE_OPTIONS)}"
            )
        kwargs[name] = _fallback(value) if name == "fallback" else value
    from limiter.backends.sqlite import SQLiteStore

    return SQLiteStore(path, **kwargs)


class _RedisSettings(NamedTuple):
    """What a Redis URL's query and user information say (then with the caller's options over)."""

    store_kwargs: Dict[str, Any]
    client_kwargs: Dict[str, Any]
    db: Any
    username: Optional[str]
    password: Optional[str]
    sentinel_username: Optional[str]
    sentinel_password: Optional[str]
    sentinel_extra: Dict[str, Any]


class _RedisTarget(NamedTuple):
    """Where a Redis client connects, as the URL's host and path say."""

    where: Dict[str, Any]  # host/port or unix_socket_path, and db: client arguments
    hosts: List[Tuple[str, int]]  # the Sentinels or the cluster's startup nodes
    service: str  # the Sentinel service name


def _redis(parsed: _Parsed, asyncio: bool, options: Dict[str, Any]) -> Any:
    """A ``RedisStore`` (or ``AsyncRedisStore``) for a redis or valkey scheme."""
    scheme = parsed.scheme
    base, _, kind = scheme.partition("+")
    tls = base in ("rediss", "valkeys")
    package = base[:-1] if tls else base
    parsed.check_query(_redis_params(kind, tls))
    settings = _redis_options(_redis_query(parsed, tls), kind, options)
    if not asyncio and "pipelining" in settings.store_kwargs:
        raise ValueError(
            f"pipelining={settings.store_kwargs['pipelining']!r:.100}: only an asyncio store "
            "pipelines (store_from_url(..., asyncio=True)); a RedisStore sends each check on "
            "its own"
        )
    # Every URL error is raised here, before a client library is imported.
    target = _redis_target(parsed, kind, settings.db, options)
    client = _redis_client(_Library(package, asyncio, scheme), kind, settings, target)

    from limiter.backends.redis import AsyncRedisStore, RedisStore

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


def _redis_query(parsed: _Parsed, tls: bool) -> _RedisSettings:
    """The store and client keyword arguments the URL's query (and user information) says."""
    store_kwargs: Dict[str, Any] = {}
    client_kwargs: Dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        "health_check_interval": 0,
    }
    if "prefix" in parsed.query:
        store_kwargs["prefix"] = parsed.query["prefix"]
    server_time = parsed.flag("server_time")
    if server_time is not None:
        store_kwargs["server_time"] = server_time
    pipelining = parsed.flag("pipelining")
    if pipelining is not None:
        store_kwargs["pipelining"] = pipelining
    parsed.fallback_options(store_kwargs)
    timeout = parsed.seconds("socket_timeout")
    if timeout is not None:
        client_kwargs["socket_timeout"] = timeout
    if "connect_timeout" in parsed.query and "socket_connect_timeout" in parsed.query:
        parsed.fail("give connect_timeout or socket_connect_timeout, not both")
    for name in ("connect_timeout", "socket_connect_timeout"):
        timeout = parsed.seconds(name)
        if timeout is not None:
            client_kwargs["socket_connect_timeout"] = timeout
    db = parsed.integer("db", 0)
    if tls:
        _tls_query(parsed, client_kwargs)
    return _RedisSettings(
        store_kwargs=store_kwargs,
        client_kwargs=client_kwargs,
        db=db,
        username=parsed.username,
        password=parsed.password,
        sentinel_username=parsed.query.get("sentinel_username"),
        sentinel_password=parsed.query.get("sentinel_password"),
        sentinel_extra={},
    )


def _tls_query(parsed: _Parsed, client_kwargs: Dict[str, Any]) -> None:
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
    check_hostname = parsed.flag("ssl_check_hostname")
    if check_hostname is not None:
        client_kwargs["ssl_check_hostname"] = check_hostname


def _redis_options(settings: _RedisSettings, kind: str, options: Dict[str, Any]) -> _RedisSettings:
    """``settings`` with the caller's keyword options applied over what the URL says."""
    db, username, password = settings.db, settings.username, settings.password
    sentinel_extra = settings.sentinel_extra
    for name, value in options.items():
        if name in _REDIS_STORE_OPTIONS:
            settings.store_kwargs[name] = _fallback(value) if name == "fallback" else value
        elif name == "connect_timeout":
            settings.client_kwargs["socket_connect_timeout"] = value
        elif name == "db":
            db = value
        elif name == "username":
            username = value
        elif name == "password":
            password = value
        elif name == "sentinel_kwargs" and kind == "sentinel":
            if not isinstance(value, dict):
                raise TypeError(f"sentinel_kwargs must be a dict, got {value!r:.100}")
            sentinel_extra = dict(value)
        else:
            settings.client_kwargs[name] = value
    return settings._replace(
        db=db, username=username, password=password, sentinel_extra=sentinel_extra
    )


def _redis_target(parsed: _Parsed, kind: str, db: Any, options: Dict[str, Any]) -> _RedisTarget:
    """Where to connect, from the URL's host and path; raises every URL error left."""
    scheme = parsed.scheme
    where: Dict[str, Any] = {}
    hosts: List[Tuple[str, int]] = []
    service = ""
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
        hosts = parsed.hosts(_DEFAULT_SENTINEL_PORT)
        service = unquote(parsed.path[1:])
        if not service or "/" in service:
            parsed.fail(
                f"the path must be the service name: {scheme}://host:26379[,host:port]/mymaster"
                " (the database number goes in ?db=N)"
            )
    else:  # cluster
        hosts = parsed.hosts(_DEFAULT_PORT)
        if parsed.path not in ("", "/", "/0"):
            parsed.fail(f"a cluster has only database 0: write {scheme}://host:port[,host:port]")
        if db not in (None, 0):
            raise ValueError(f"db must be 0 on a cluster, got {db!r}")
    if db is not None and kind != "cluster":
        where["db"] = db
    return _RedisTarget(where=where, hosts=hosts, service=service)


def _redis_client(
    library: _Library, kind: str, settings: _RedisSettings, target: _RedisTarget
) -> Any:
    """The client: plain or unix socket, through a Sentinel, or a cluster's."""
    client_kwargs = settings.client_kwargs
    client_kwargs.setdefault("retry", library.no_retry())
    if settings.username is not None or settings.password is not None:
        client_kwargs["credential_provider"] = library.credentials(
            settings.username, settings.password
        )
    if kind in ("", "unix"):
        return library.client_class(**target.where, **client_kwargs)
    if kind == "sentinel":
        return _sentinel_client(library, settings, target)
    return _cluster_client(library, client_kwargs, target.hosts)


def _sentinel_client(library: _Library, settings: _RedisSettings, target: _RedisTarget) -> Any:
    """The master client of the target's service, found through its Sentinels."""
    client_kwargs = settings.client_kwargs
    sentinel_kwargs = {
        name: client_kwargs[name]
        for name in ("socket_timeout", "socket_connect_timeout", "health_check_interval")
    }
    sentinel_kwargs["retry"] = library.no_retry()
    if settings.sentinel_username is not None or settings.sentinel_password is not None:
        sentinel_kwargs["credential_provider"] = library.credentials(
            settings.sentinel_username, settings.sentinel_password
        )
    sentinel_kwargs.update(settings.sentinel_extra)
    sentinel = library.get("sentinel", "Sentinel")(target.hosts, sentinel_kwargs=sentinel_kwargs)
    return sentinel.master_for(target.service, **target.where, **client_kwargs)


def _cluster_client(
    library: _Library, client_kwargs: Dict[str, Any], hosts: List[Tuple[str, int]]
) -> Any:
    """A cluster client: asyncio's as is (it connects later), a sync one in a ``LazyCluster``."""
    if library.cluster_retries_are_legacy():
        client_kwargs.setdefault("cluster_error_retry_attempts", 0)
    node_class = library.get("cluster", "ClusterNode")
    cluster_class = library.cluster_class

    def build() -> Any:
        startup = [node_class(host, port) for host, port in hosts]
        return cluster_class(startup_nodes=startup, **client_kwargs)

    if library.asyncio:
        return build()  # the asyncio client connects on its first command
    shown = ",".join(f"{host}:{port}" for host, port in hosts)
    return LazyCluster(build, f"{cluster_class.__name__} at {shown}")


def _one_host(parsed: _Parsed, default_host: str) -> Tuple[str, int]:
    if not parsed.netloc:
        return default_host, _DEFAULT_PORT
    if "," in parsed.netloc:
        parsed.fail(
            f"{parsed.scheme}:// takes one host; several hosts are for "
            "redis+sentinel:// and redis+cluster://"
        )
    return parsed._host(parsed.netloc, _DEFAULT_PORT)


def _path_db(parsed: _Parsed) -> Optional[int]:
    path = parsed.path
    if path in ("", "/"):
        return None
    if not path[1:].isdigit():
        parsed.fail(f"the path must be the database number (/0, /1, ...), got {unquote(path)!r}")
    return int(path[1:])


# -- the public functions ----------------------------------------------------


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
    parsed = _Parsed(url.strip())
    if parsed.scheme == "memory":
        return _memory(parsed, options)
    deny_cache = _deny_cache(parsed, options)  # takes its options out of ``options``
    store = (
        _sqlite(parsed, options) if parsed.scheme == "sqlite" else _redis(parsed, asyncio, options)
    )
    if deny_cache is None:
        return store
    from limiter.backends.denycache import DenyCache

    return DenyCache(store, **deny_cache)


def _deny_cache(parsed: _Parsed, options: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """``DenyCache``'s arguments from ``deny_cache`` and ``deny_cache_max_stale``, or ``None``.

    ``deny_cache=N`` (an integer >= 1) wraps the store in a ``DenyCache`` of
    ``N`` entries; ``deny_cache_max_stale`` (seconds > 0, or ``none``) is its
    ``max_stale`` and needs ``deny_cache``.  The keyword options of the same
    names override the query (``deny_cache=None``: no cache) and are removed
    from ``options``, so they never reach the client.
    """
    kwargs: Dict[str, Any] = {}
    if "deny_cache" in parsed.query:
        kwargs["max_keys"] = parsed.integer("deny_cache", 1)
    stale = parsed.query.get("deny_cache_max_stale")
    if stale is not None:
        if stale.lower() == "none":
            kwargs["max_stale"] = None
        else:
            kwargs["max_stale"] = parsed.seconds("deny_cache_max_stale")
    if "deny_cache" in options:
        kwargs["max_keys"] = options.pop("deny_cache")
    if "deny_cache_max_stale" in options:
        kwargs["max_stale"] = options.pop("deny_cache_max_stale")
    if kwargs.get("max_keys") is None:
        if "max_stale" in kwargs and "deny_cache" not in parsed.query:
            parsed.fail("deny_cache_max_stale needs deny_cache=N (the entries to keep)")
        return None
    return kwargs


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
