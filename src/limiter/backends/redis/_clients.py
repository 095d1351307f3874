"""The Redis and Valkey clients a store URL asks for, fail-fast, and ``LazyCluster``.

The client library is imported here only, when a store is built; credentials go
in a credential provider (in no ``repr`` or log); retries are
``Retry(NoBackoff(), 0)`` everywhere (the store's breaker retries).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple


def import_module(module: str, scheme: str) -> Any:
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


class Library:
    """Where redis-py or valkey-py (sync or asyncio) keeps what a URL needs."""

    def __init__(self, package: str, asyncio: bool, scheme: str) -> None:
        self.package = package
        self.asyncio = asyncio
        self.scheme = scheme
        self.root = import_module(package, scheme)
        self.prefix = "Valkey" if package == "valkey" else "Redis"  # of its classes' names

    def get(self, module: str, name: str) -> Any:
        asyncio = self.asyncio and module not in ("backoff", "credentials")  # shared by both
        base = f"{self.package}.asyncio" if asyncio else self.package
        return getattr(import_module(f"{base}.{module}" if module else base, self.scheme), name)

    def no_retry(self) -> Any:
        """``Retry(NoBackoff(), 0)`` of this library (and of its asyncio flavour)."""
        return self.get("retry", "Retry")(self.get("backoff", "NoBackoff")(), 0)

    def credentials(self, username: Optional[str], password: Optional[str]) -> Dict[str, Any]:
        """The ``credential_provider`` argument for a user name or password (none: ``{}``)."""
        if username is None and password is None:
            return {}
        provider = self.get("credentials", "UsernamePasswordCredentialProvider")
        # AUTH needs a password: a user without one (an ACL "nopass" user) sends "".
        password = "" if password is None and username else password
        return {"credential_provider": provider(username, password)}

    def cluster_retries_are_legacy(self) -> bool:
        """Whether the cluster client retries ``cluster_error_retry_attempts`` times
        (redis-py 4-5, valkey-py 6) rather than by its ``retry`` (redis-py >= 6)."""
        if self.package != "redis":
            return True
        major = str(getattr(self.root, "__version__", "6")).partition(".")[0]
        return major.isdigit() and int(major) < 6


class LazyCluster:
    """A sync cluster client built (and so connected) on first use, so a store can
    start while its cluster is down.  Thread-safe."""

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


@dataclass
class RedisSettings:
    """What a Redis URL says (then with the caller's options over): arguments, credentials,
    and where the client connects."""

    store_kwargs: Dict[str, Any]
    client_kwargs: Dict[str, Any]
    db: Any
    username: Optional[str]
    password: Optional[str]
    sentinel_username: Optional[str]
    sentinel_password: Optional[str]
    sentinel_extra: Dict[str, Any] = field(default_factory=dict)
    where: Dict[str, Any] = field(default_factory=dict)  # host/port or unix_socket_path, db
    hosts: List[Tuple[str, int]] = field(default_factory=list)  # Sentinels or startup nodes
    service: str = ""  # the Sentinel service name


def redis_client(library: Library, kind: str, settings: RedisSettings) -> Any:
    """The client: plain or unix socket, through a Sentinel, or a cluster's."""
    client_kwargs = settings.client_kwargs
    client_kwargs.setdefault("retry", library.no_retry())
    client_kwargs.update(library.credentials(settings.username, settings.password))
    if kind in ("", "unix"):
        return library.get("", library.prefix)(**settings.where, **client_kwargs)
    if kind == "sentinel":
        return sentinel_client(library, settings)
    return cluster_client(library, client_kwargs, settings.hosts)


def sentinel_client(library: Library, settings: RedisSettings) -> Any:
    """The master client of the settings' service, found through its Sentinels."""
    client_kwargs = settings.client_kwargs
    sentinel_kwargs = {
        name: client_kwargs[name]
        for name in ("socket_timeout", "socket_connect_timeout", "health_check_interval")
    }
    sentinel_kwargs["retry"] = library.no_retry()
    sentinel_kwargs.update(
        library.credentials(settings.sentinel_username, settings.sentinel_password)
    )
    sentinel_kwargs.update(settings.sentinel_extra)
    sentinel = library.get("sentinel", "Sentinel")(settings.hosts, sentinel_kwargs=sentinel_kwargs)
    return sentinel.master_for(settings.service, **settings.where, **client_kwargs)


def cluster_client(
    library: Library, client_kwargs: Dict[str, Any], hosts: List[Tuple[str, int]]
) -> Any:
    """A cluster client: asyncio's as is (it connects later), a sync one in a ``LazyCluster``."""
    if library.cluster_retries_are_legacy():
        client_kwargs.setdefault("cluster_error_retry_attempts", 0)
    node_class = library.get("cluster", "ClusterNode")
    cluster_class = library.get("cluster", library.prefix + "Cluster")

    def build() -> Any:
        startup = [node_class(host, port) for host, port in hosts]
        return cluster_class(startup_nodes=startup, **client_kwargs)

    if library.asyncio:
        return build()  # the asyncio client connects on its first command
    shown = ",".join(f"{host}:{port}" for host, port in hosts)
    return LazyCluster(build, f"{cluster_class.__name__} at {shown}")
