"""What lets a check through a Redis client wait longer than the client's own timeouts
(``RedisStore`` logs it once, at construction)."""

from __future__ import annotations

import copy
import inspect
import logging
from typing import Any, List

from limiter.backends.redis._connection import named


def is_cluster(client: Any) -> bool:
    return callable(getattr(client, "keyslot", None)) and callable(
        getattr(client, "get_nodes", None)
    )


_MISSING: Any = object()
ADVICE = (
    "give the client socket_timeout and socket_connect_timeout (e.g. 0.1 s) and no retries "
    "with backoff (redis-py and valkey-py: retry=Retry(NoBackoff(), 0)); see docs/stores.md"
)


def config_problems(client: Any) -> List[str]:
    """What lets a check through ``client`` wait longer than the client's own timeouts, as
    its pools (its Sentinels' and its cluster nodes' too) say without any I/O; what it
    cannot read is not reported."""
    found: List[str] = []
    if is_cluster(client):
        what = "the cluster client"
        found += _retry_problems(getattr(client, "retry", None), what)
        manager = getattr(client, "nodes_manager", None)
        for kwargs in (
            getattr(client, "connection_kwargs", None),
            getattr(manager, "connection_kwargs", None),
        ):
            found += _kwargs_problems(kwargs, None, what)
        for node in client.get_nodes():
            # redis-py's sync cluster: a client (and pool) per node; the asyncio one: the
            # node holds the connection arguments, as a pool does.
            pool = getattr(getattr(node, "redis_connection", None), "connection_pool", None)
            found += _pool_problems(node if pool is None else pool, what)
    else:
        pool = getattr(client, "connection_pool", None)
        found += _pool_problems(pool, "the client")
        manager = getattr(pool, "sentinel_manager", None)  # a Sentinel master's pool
        for sentinel in getattr(manager, "sentinels", None) or ():
            pool = getattr(sentinel, "connection_pool", None)
            found += _pool_problems(pool, "each Sentinel client (sentinel_kwargs)")
    return list(dict.fromkeys(found))  # each once, in order


def _pool_problems(pool: Any, what: str) -> List[str]:
    """Problems in a pool's (or an asyncio cluster node's) connection arguments and wait."""
    if pool is None:
        return []
    found = _kwargs_problems(
        getattr(pool, "connection_kwargs", None), getattr(pool, "connection_class", None), what
    )
    if named(pool, "BlockingConnectionPool") and getattr(pool, "timeout", 0) is None:
        found.append(f"{what}'s BlockingConnectionPool waits for ever for a free connection")
    return found


def _kwargs_problems(kwargs: Any, connection_class: Any, what: str) -> List[str]:
    """Problems in one set of connection keyword arguments (redis-py's and valkey-py's rules)."""
    if not isinstance(kwargs, dict):
        return []
    found: List[str] = []

    def given(name: str) -> Any:
        return kwargs[name] if name in kwargs else _default(connection_class, name)

    timeout, connect = given("socket_timeout"), given("socket_connect_timeout")
    if connect is None:  # both libraries connect with socket_timeout then
        connect = timeout
    if timeout is None:
        found.append(
            f"{what} has no socket_timeout (a server that accepts and never answers "
            "blocks a check for ever)"
        )
    if connect is None:
        found.append(
            f"{what} has no socket_connect_timeout (an unreachable host blocks a check "
            "for as long as the system tries to connect)"
        )
    # A retry object is used as given; without one (or with only retry_on_timeout
    # or retry_on_error) the client retries at most once, without backoff.
    found.extend(_retry_problems(kwargs.get("retry"), what))
    return found


def _default(connection_class: Any, name: str) -> Any:
    """The default of ``name`` in the connection class's ``__init__`` (or a base's)."""
    for cls in getattr(connection_class, "__mro__", ()):
        init = vars(cls).get("__init__")
        if init is None:
            continue
        try:
            parameter = inspect.signature(init).parameters.get(name)
        except (TypeError, ValueError):
            continue
        if parameter is not None and parameter.default is not inspect.Parameter.empty:
            return parameter.default
    return _MISSING


def _retry_problems(retry: Any, what: str) -> List[str]:
    if retry is None:
        return []
    get_retries = getattr(retry, "get_retries", None)
    retries = get_retries() if callable(get_retries) else getattr(retry, "_retries", None)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries == 0:
        return []
    if retries < 0:
        return [f"{what} retries for ever"]
    if _backs_off(getattr(retry, "_backoff", None)):
        return [
            f"{what} retries {retries} times with backoff (redis-py >= 6 does by default: "
            "seconds per check while Redis is down)"
        ]
    if retries > 1:
        return [f"{what} retries {retries} times (each retry waits for the timeouts again)"]
    return []


def _backs_off(backoff: Any) -> bool:
    """Whether a redis-py/valkey-py backoff ever sleeps (computed on a copy: some keep state)."""
    if not callable(getattr(backoff, "compute", None)):
        return False
    try:
        probe = copy.deepcopy(backoff)
        reset = getattr(probe, "reset", None)
        if callable(reset):
            reset()
        return any(probe.compute(failures) > 0 for failures in range(1, 6))
    except Exception:  # an exotic backoff: say nothing rather than guess
        return False


def warn_of_problems(client: Any, kind: str) -> None:
    """Log ``config_problems(client)`` once as a WARNING on ``limiter.stores`` (none: nothing)."""
    try:
        problems = config_problems(client)
    except Exception:  # a client we cannot read: say nothing rather than fail
        problems = []
    if problems:
        logging.getLogger("limiter.stores").warning(
            "%s: a check may wait much longer than the client's timeouts while Redis is "
            "down or hangs: %s; %s",
            kind,
            "; ".join(problems),
            ADVICE,
        )
