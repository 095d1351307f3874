"""Redis and Valkey stores: one Lua script call (EVALSHA) per check.

Works with any client that has redis-py's ``evalsha``/``eval``/``delete``:
``redis.Redis``, ``redis.cluster.RedisCluster``, a Sentinel master client,
valkey-py, and their asyncio twins (``AsyncRedisStore``).  This module never
imports a client library itself, so ``import limiter`` works without one.

Keys
----
A bucket's Redis key is a pure function of its store key, so ``apply``,
``apply_many`` and ``reset`` always agree on it, and it always carries a
cluster hash tag so a script never spans two slots:

* a key with a hash tag of its own (Redis Cluster's rule: the text between the
  first ``{`` and the next ``}``, if not empty) becomes
  ``prefix + "{" + tag + "}" + key``;
* any other key is its own tag: ``prefix + "{" + escaped(key) + "}"``, where
  ``%`` and ``}`` are escaped as ``%25`` and ``%7D``.

The mapping is one-to-one for any string (braces, newlines, unicode, lone
surrogates, 10 kB).  Keys of one ``apply_many`` call must share a tag on a
cluster (``"{alice}:burst"``, ``"{alice}:daily"``), or it raises ``ValueError``
before any I/O; a single server takes any keys.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import logging
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from limiter.backends._failover import Failover
from limiter.backends.redis._connection import (
    Connections,
    PoolFullError,
    await_pool,
    pool_full,
    pool_wait,
    wait_for_pool,
)
from limiter.core.costs import Charge, Cost, Refund, validate_cost, validate_costs
from limiter.core.limits import CLOCK_TOLERANCE, TIME_EPSILON, Limit
from limiter.core.lockout import Lockout
from limiter.core.quota import Quota
from limiter.core.result import RateLimitResult, combine
from limiter.store import StoreError

__all__ = ["SCRIPT", "AsyncRedisStore", "PoolFullError", "RedisStore", "hash_tag", "redis_key"]

_log = logging.getLogger("limiter.stores")


def _load_script() -> str:
    """``bucket.lua`` (beside this file), with ``limiter.core.bucket``'s constants in place.

    Its placeholders ``EPSILON`` and ``TOLERANCE`` become the reprs of
    ``TIME_EPSILON`` and ``CLOCK_TOLERANCE``, so the script uses the very
    values ``step`` does.
    """
    from importlib.resources import files  # Python >= 3.9

    text = files(__package__).joinpath("bucket.lua").read_text(encoding="utf-8")
    for placeholder, value in (("EPSILON", TIME_EPSILON), ("TOLERANCE", CLOCK_TOLERANCE)):
        if placeholder not in text:
            raise RuntimeError(
                f"limiter/backends/redis/bucket.lua lacks its {placeholder} placeholder"
            )
        text = text.replace(placeholder, repr(value))
    return text


#: The Lua script run by EVALSHA for every check (``bucket.lua``, which says
#: which function of ``limiter.core.bucket`` each of its parts mirrors).
SCRIPT = _load_script()

#: SHA-1 of ``SCRIPT``, the name EVALSHA calls it by.
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode("utf-8")).hexdigest()

# Passed as bytes, which clients send as they are (str and int are encoded per call).
_SHA = SCRIPT_SHA.encode("ascii")
_NUMKEYS = [str(n).encode("ascii") for n in range(33)]


def _limit_arg(limit: Limit) -> bytes:
    # " rate burst": the script derives interval, window and slack as Limit does.
    # A Lockout is " l<within>/<duration> <breaches>" (see bucket.lua).
    if not isinstance(limit, (Limit, Quota, Lockout)):
        raise ValueError(f"limit must be a limiter.Limit, got {limit!r:.100}")
    if isinstance(limit, Lockout):
        return f" l{limit.within!r}/{limit.duration!r} {limit.burst}".encode("ascii")
    return f" {limit.rate!r} {limit.burst}".encode("ascii")


def hash_tag(key: str) -> Optional[str]:
    """The cluster hash tag marked in ``key`` (Redis's rule), or ``None``.

    The tag is the text between the first ``{`` and the next ``}``; an empty
    one (``"{}"``) does not count.
    """
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1 : end]


def _slot_tag(key: str) -> str:
    tag = hash_tag(key)
    if tag is not None:
        return tag
    if "}" in key or "%" in key:
        return key.replace("%", "%25").replace("}", "%7D")
    return key


def redis_key(key: str, prefix: str = "limiter:") -> str:
    """The Redis key that holds ``key``'s bucket (see the module docstring)."""
    tag = hash_tag(key)
    if tag is not None:
        return prefix + "{" + tag + "}" + key
    if "}" in key or "%" in key:
        key = key.replace("%", "%25").replace("}", "%7D")
    return prefix + "{" + key + "}"


def _cost_arg(cost: Any) -> str:
    # Validated here (limiter.core.bucket.validate_cost, as step does) so a bad cost
    # never costs a round trip nor touches state.  The script reads the exact
    # double step uses; above 2**53, more than any burst, every cost is denied
    # alike (retry_after = inf), so 2**54 stands for all of them: the script
    # never has to read a huge number or "inf".
    if cost.__class__ is int and cost == 1:  # the usual cost, formatted once
        return "1.0"
    if cost.__class__ is Refund:  # "-t": settled as step does (the debt stops at 0)
        return repr(float(cost))
    if cost.__class__ is Charge:
        # "!t", settled.  Sent exactly up to 2**54: between 2**53 and 2 * burst a
        # charge still takes its own amount.  From 2 * burst up every charge
        # takes max_debt (a quota's 2 * count) alike, so 2**54 stands for them.
        value = float(cost)
        return "!" + (repr(value) if value <= _MAX_CHARGE else _MAX_COST_ARG)
    value = validate_cost(cost)
    if value > _MAX_COST:
        return _MAX_COST_ARG
    return repr(value)


def _costs_arg(cost: Cost, count: int) -> str:
    # Several limits: one cost for all, or "c1,c2,...,cn" (validate_costs: a
    # wrong length is a ValueError before any I/O).
    if cost.__class__ is tuple or cost.__class__ is list:
        return ",".join([_cost_arg(c) for c in validate_costs(cost, count)])  # type: ignore[union-attr]
    return _cost_arg(cost)


_MAX_COST = float(2**53)  # the largest burst a Limit accepts
_MAX_CHARGE = float(2**54)  # twice that: a charge's bound for every limit
_MAX_COST_ARG = repr(float(2**54))


def _numkeys(rkeys: List[bytes]) -> Any:
    n = len(rkeys)
    return _NUMKEYS[n] if n < len(_NUMKEYS) else n


def _is_noscript(exc: BaseException) -> bool:
    # redis-py and valkey-py both name it NoScriptError; match by name so this
    # module needs neither installed.
    return any(cls.__name__ == "NoScriptError" for cls in type(exc).__mro__)


def _is_cluster(client: Any) -> bool:
    return callable(getattr(client, "keyslot", None)) and callable(
        getattr(client, "get_nodes", None)
    )


# ping(): a peek at a key no caller uses (a peek writes nothing to a missing key).
_PING_KEY = "\x00limiter.ping\x00"
_PING_LIMIT = Limit(1, 1)


# -- client configuration: how long can a check wait? -------------------------

_MISSING: Any = object()
_ADVICE = (
    "give the client socket_timeout and socket_connect_timeout (e.g. 0.1 s) and no retries "
    "with backoff (redis-py and valkey-py: retry=Retry(NoBackoff(), 0)); see docs/stores.md"
)


def _config_problems(client: Any) -> List[str]:
    """What lets a check through ``client`` wait longer than the client's own timeouts.

    Reads what redis-py and valkey-py expose without any I/O: the connection
    pool's keyword arguments (the client's own, its Sentinels' and, on a
    cluster, those of every node it knows), a blocking pool's wait, and a
    cluster client's retry policy.  What it cannot read is not reported.
    """
    problems: List[str] = []

    def add(found: List[str]) -> None:
        problems.extend(problem for problem in found if problem not in problems)

    if _is_cluster(client):
        what = "the cluster client"
        add(_retry_problems(getattr(client, "retry", None), what))
        manager = getattr(client, "nodes_manager", None)
        for kwargs in (
            getattr(client, "connection_kwargs", None),
            getattr(manager, "connection_kwargs", None),
        ):
            add(_kwargs_problems(kwargs, None, what))
        for node in client.get_nodes():
            pool = getattr(getattr(node, "redis_connection", None), "connection_pool", None)
            if pool is not None:  # redis-py's sync cluster: one client per node
                add(_pool_problems(pool, what))
            else:  # the asyncio cluster: the node holds the connection arguments
                kwargs = getattr(node, "connection_kwargs", None)
                add(_kwargs_problems(kwargs, getattr(node, "connection_class", None), what))
    else:
        pool = getattr(client, "connection_pool", None)
        add(_pool_problems(pool, "the client"))
        manager = getattr(pool, "sentinel_manager", None)  # a Sentinel master's pool
        for sentinel in getattr(manager, "sentinels", None) or ():
            pool = getattr(sentinel, "connection_pool", None)
            add(_pool_problems(pool, "each Sentinel client (sentinel_kwargs)"))
    return problems


def _pool_problems(pool: Any, what: str) -> List[str]:
    if pool is None:
        return []
    found = _kwargs_problems(
        getattr(pool, "connection_kwargs", None), getattr(pool, "connection_class", None), what
    )
    blocking = any(cls.__name__ == "BlockingConnectionPool" for cls in type(pool).__mro__)
    if blocking and getattr(pool, "timeout", 0) is None:
        found.append(f"{what}'s BlockingConnectionPool waits for ever for a free connection")
    return found


def _kwargs_problems(kwargs: Any, connection_class: Any, what: str) -> List[str]:
    """Problems in one set of connection keyword arguments (redis-py's and valkey-py's rules)."""
    if not isinstance(kwargs, dict):
        return []
    found: List[str] = []
    timeout = kwargs.get("socket_timeout", _MISSING)
    if timeout is _MISSING:
        timeout = _default(connection_class, "socket_timeout")
    connect = kwargs.get("socket_connect_timeout", _MISSING)
    if connect is _MISSING:
        connect = _default(connection_class, "socket_connect_timeout")
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


# Fields after ``results`` (such as ``policy``) are taken from the limit, so
# results match limiter.core.bucket.step's field for field.
_EXTRA_FIELDS = RateLimitResult._fields[7:]


def _result(
    limit: Limit, allowed: bool, remaining: int, reset_after: float, retry_after: float
) -> RateLimitResult:
    values: List[Any] = [
        allowed,
        limit.burst,
        remaining,
        reset_after,
        retry_after,
        limit.window,
        (),
    ]
    if _EXTRA_FIELDS:
        values.append(getattr(limit, "name", "default"))
        values.append(limit.kind)
    return tuple.__new__(RateLimitResult, values)


class _RedisBase:
    """What the sync and asyncio stores share: keys, arguments, replies, fallback."""

    _kind = "RedisStore"
    _asyncio = False

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "limiter:",
        server_time: bool = True,
        fallback: Optional[Any] = None,
        probe_after: float = 0.5,
        max_probe_after: float = 30.0,
        probe_clock: Optional[Any] = None,
    ) -> None:
        if not callable(getattr(client, "evalsha", None)):
            raise TypeError(f"client must be a redis-py or valkey-py client, got {client!r:.100}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {prefix!r:.100}")
        self.client = client
        self.prefix = prefix
        self.server_time = bool(server_time)
        self.fallback: Any = fallback
        self._cluster = _is_cluster(client)
        self._limit_args: Dict[Limit, bytes] = {}
        self._conns = self._connections(client)
        # How long a check waits for a connection of a full pool (PoolFullError).
        self._pool_wait = pool_wait(client)
        # Every operation but ping goes through it: Redis, or the fallback.
        self._failover = Failover(
            self._kind, fallback, probe_after, max_probe_after, probe_clock, asyncio=self._asyncio
        )
        try:
            problems = _config_problems(client)
        except Exception:  # a client we cannot read: say nothing rather than fail
            problems = []
        if problems:
            _log.warning(
                "%s: a check may wait much longer than the client's timeouts while Redis is "
                "down or hangs: %s; %s",
                self._kind,
                "; ".join(problems),
                _ADVICE,
            )

    def _connections(self, client: Any) -> Optional[Connections]:
        """The store's own connections for the fast path, or ``None``: the client's path."""
        return None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.client!r}, prefix={self.prefix!r}, "
            f"server_time={self.server_time!r}, fallback={self.fallback!r})"
        )

    @property
    def using_fallback(self) -> bool:
        """True while the server is considered down and the fallback answers."""
        return self._failover.using_fallback

    def _key(self, key: str) -> bytes:
        if not isinstance(key, str):
            raise ValueError(f"key must be a str, got {key!r:.100}")
        # surrogatepass: any Python str is a valid key, as in MemoryStore.
        return redis_key(key, self.prefix).encode("utf-8", "surrogatepass")

    def _many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: Cost, now: Optional[float]
    ) -> Tuple[List[bytes], List[bytes]]:
        """The keys and argument of an ``apply_many`` call, or its error before any I/O."""
        rkeys = self._keys(keys, limits)
        if len(limits) == 1:  # the one-limit form of the script, as step_all allows it
            if isinstance(limits[0], Lockout):
                raise ValueError("a Lockout needs at least one limit before it")
            if cost.__class__ is tuple or cost.__class__ is list:
                cost = validate_costs(cost, 1)[0]  # type: ignore[index]
        return rkeys, self._args(limits, cost, now)

    def _keys(self, keys: Sequence[str], limits: Sequence[Limit]) -> List[bytes]:
        if len(keys) != len(limits) or not keys:
            raise ValueError(f"need one key per limit and at least one limit, got {len(limits)}")
        if self._cluster and len(keys) > 1:
            tags = {_slot_tag(k) for k in keys if isinstance(k, str)}
            if len(tags) > 1:
                raise ValueError(
                    "on Redis Cluster, the keys of one apply_many call must share a hash tag "
                    f"(e.g. '{{user}}:a', '{{user}}:b'), got {list(keys)!r:.200}"
                )
        return [self._key(k) for k in keys]

    def _args(self, limits: Sequence[Limit], cost: Cost, now: Optional[float]) -> List[bytes]:
        # One argument, "now cost rate burst [rate burst ...]": see CONTRIBUTING.md "Hot paths".
        # With several limits, cost may be "c1,c2,...,cn" (one per limit).
        # The limits first: a Quota (never cached) may fix now (see _quota_arg).
        cache = self._limit_args
        if len(limits) == 1:
            limit = limits[0]
            packed = cache.get(limit)
            if packed is None:
                now, packed = self._uncached(limit, now)
            return [(self._now_arg(now) + " " + _cost_arg(cost)).encode("ascii") + packed]
        parts = [b""]
        for limit in limits:
            packed = cache.get(limit)
            if packed is None:
                now, packed = self._uncached(limit, now)
            parts.append(packed)
        parts[0] = (self._now_arg(now) + " " + _costs_arg(cost, len(limits))).encode("ascii")
        return [b"".join(parts)]

    def _uncached(self, limit: Limit, now: Optional[float]) -> Tuple[Optional[float], bytes]:
        """``(now, text)`` of a limit not in the cache: a quota's (never cached), or cached now."""
        if limit.__class__ is Quota:  # type: ignore[comparison-overlap]
            return self._quota_arg(limit, now)
        return now, self._cache_limit(limit)

    def _quota_arg(self, quota: Quota, now: Optional[float]) -> Tuple[float, bytes]:
        # " q<end> <count>": the script cannot do time-zone arithmetic, so it is
        # given the end of the current window, found here from the same now it
        # is sent (+ TIME_EPSILON, as step_quota does).  That needs the client's
        # clock: with now=None a quota call reads time.time() even when the
        # store uses the server's TIME, for every limit of the call (one now).
        value = float(self._now_arg(time.time() if now is None else now))
        end = quota.bounds(value + TIME_EPSILON)[1]
        return value, f" q{end!r} {quota.burst}".encode("ascii")

    def _cache_limit(self, limit: Limit) -> bytes:
        packed = _limit_arg(limit)
        cache = self._limit_args
        if len(cache) > 1024:
            cache.clear()
        cache[limit] = packed
        return packed

    def _now_arg(self, now: Optional[float]) -> str:
        if now is None:
            return "" if self.server_time else repr(time.time())
        try:
            value = float(now)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"now must be a finite number of seconds, got {now!r:.100}") from None
        if value - value != 0.0:
            raise ValueError(f"now must be a finite number of seconds, got {now!r}")
        return repr(value)

    def _results(self, reply: Any, limits: Sequence[Limit]) -> List[RateLimitResult]:
        try:
            fields = reply.split()
            if len(fields) != 4 * len(limits):
                raise ValueError(f"{len(fields)} fields for {len(limits)} limits")
            return [
                _result(
                    limit,
                    int(fields[4 * i]) == 1,
                    int(float(fields[4 * i + 1])),
                    float(fields[4 * i + 2]),
                    float(fields[4 * i + 3]),
                )
                for i, limit in enumerate(limits)
            ]
        except (AttributeError, TypeError, ValueError) as exc:
            raise self._bad_reply(reply) from exc

    def _result(self, reply: Any, limit: Limit) -> RateLimitResult:
        # _results for one limit, without the list.
        try:
            allowed, remaining, reset_after, retry_after = reply.split()
            return _result(
                limit,
                int(allowed) == 1,
                int(float(remaining)),
                float(reset_after),
                float(retry_after),
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise self._bad_reply(reply) from exc

    def _bad_reply(self, reply: Any) -> StoreError:
        return StoreError(f"{self._kind}: unexpected script reply {reply!r:.200}")

    def _error(self, exc: BaseException) -> StoreError:
        return StoreError(f"{self._kind}: {type(exc).__name__}: {exc}")


class RedisStore(_RedisBase):
    """Bucket state in Redis or Valkey, for many processes and hosts.  Implements ``Store``.

    ``client``: a ``redis.Redis``, ``redis.cluster.RedisCluster``, Sentinel
    master client (``sentinel.master_for(...)``) or valkey-py equivalent.  A
    check waits as long as the client lets it, so make it fail fast:
    ``socket_timeout`` and ``socket_connect_timeout`` (e.g. 0.1 s) and no
    retries (``retry=Retry(NoBackoff(), 0)``: redis-py >= 6 retries with
    backoff by default, for seconds per check).  With those, a check raises
    ``StoreError`` within about ``socket_connect_timeout`` (per address the
    host name resolves to) when the server cannot be reached, and about
    ``socket_timeout`` when it stops answering; each retry repeats that wait.
    A client without a socket timeout, with retries that back off or more
    than one retry, or with a blocking pool that waits for ever, is reported
    once at construction (a WARNING on the ``limiter.stores`` logger, saying
    what to set); what the client does not expose (a cluster's topology
    refresh, Sentinel discovery, DNS) is not checked: see docs/stores.md.
    ``prefix``: prepended to every Redis key (default ``"limiter:"``).
    ``server_time``: when the caller passes ``now=None``, read the server's
    ``TIME`` (True, the default: app servers with skewed clocks agree) or
    ``time.time()`` (False).  A ``now`` given by the caller (an injected clock)
    is always used as is.
    ``fallback``: a store (e.g. ``MemoryStore()``) that answers while Redis
    fails, instead of raising ``StoreError``; Redis is probed again after
    ``probe_after`` seconds, doubling up to ``max_probe_after``, on
    ``probe_clock`` (anything with ``now()``; default ``time.monotonic``).

    Each check is exactly one round trip (EVALSHA); after ``SCRIPT FLUSH``, a
    restart or a failover the script is sent again with EVAL, transparently.
    With a plain ``redis.Redis`` or ``valkey.Valkey`` client (a plain
    ``ConnectionPool``), checks skip the client's per-command machinery: the
    store sends the pre-packed EVALSHA on connections of its own, made with
    the client's connection class and settings (so authentication, TLS, the
    RESP version, timeouts and the retry policy for connecting stay the client's; a
    check is sent once, never again after a timeout), at most
    one per thread checking at the same moment, never shared by two threads,
    never the parent's after a fork, and not counted in the client's
    ``max_connections`` nor closed by ``client.close()``: ``close()`` closes
    them (the store stays usable and connects again).  A connection that
    failed is disconnected before reuse; one the server closed while idle is
    reconnected before use, so the check goes through.  Cluster, Sentinel,
    blocking-pool, single-connection and client-side-caching clients, and a
    client whose ``execute_command`` (or ``evalsha``/``eval``) is overridden,
    wrapped or replaced (a tracer: OpenTelemetry, ddtrace, sentry-sdk), keep
    the client's own path: see ``limiter.backends.redis._connection.plain_client``.
    Every failure is a ``StoreError`` wrapping the client's exception.  A
    reply the script cannot have given (malformed: a proxy in between, or
    another script under its SHA-1) is a ``StoreError`` like any other
    failure: it counts as an outage, and the fallback, when there is one,
    answers that check and the following ones until a probe succeeds.  The
    first failure after start, and the first after each recovery, is logged
    at ERROR on the ``limiter.stores`` logger with its cause; ``ping()``
    checks the server at start-up.
    """

    def ping(self) -> None:
        """Check that the server answers and runs the check script, or raise ``StoreError``.

        One script call, a peek (cost 0) at a reserved key that writes
        nothing: it needs what every check needs (a connection, permission to
        run EVALSHA/EVAL, the server's ``TIME``).  It never answers from the
        fallback.  Call it at start-up to stop on a Redis that cannot work.
        """
        rkeys, args = [self._key(_PING_KEY)], self._args((_PING_LIMIT,), 0, None)
        self._failover.run(lambda: self._result(self._eval(rkeys, args), _PING_LIMIT))

    def apply(self, key: str, limit: Limit, cost: float, now: Optional[float]) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``; ``now`` in seconds or ``None`` (store time)."""
        rkeys, args = [self._key(key)], self._args((limit,), cost, now)
        result: RateLimitResult = self._failover.run(
            lambda: self._result(self._eval(rkeys, args), limit),
            lambda: self.fallback.apply(key, limit, cost, now),
        )
        return result

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """Charge ``cost`` to every ``keys[i]`` under ``limits[i]``, or to none (one script call).

        ``cost``: one for every limit, or a list or tuple of one per limit.  A
        ``Lockout`` may come last (``limiter.core.bucket.step_all``).  On a cluster
        the keys must share a hash tag (``ValueError`` otherwise).
        """
        rkeys, args = self._many(keys, limits, cost, now)
        result: RateLimitResult = self._failover.run(
            lambda: combine(self._results(self._eval(rkeys, args), limits)),
            lambda: self.fallback.apply_many(keys, limits, cost, now),
        )
        return result

    def reset(self, key: str) -> None:
        """Forget ``key`` (one DEL).  With a fallback, it forgets the key too.

        The DEL is always tried, even while the fallback answers checks: an
        operator's reset must not succeed silently and leave the shared bucket
        as it was.  If Redis fails, ``StoreError`` (the fallback is reset).
        """
        rkey = self._key(key)
        if self.fallback is not None:
            self.fallback.reset(key)

        def delete() -> None:
            try:
                self.client.delete(rkey)
            except Exception as exc:
                raise self._error(exc) from exc

        self._failover.run(delete)

    def close(self) -> None:
        """Disconnect the store's own connections (the fast path's); safe to call again.

        The client, which is the caller's, stays open (``client.close()``
        closes it).  The store remains usable: its next check connects again.
        A check in flight in another thread finishes, then its connection is
        disconnected.  Nothing to do for a client that keeps its own path.
        """
        conns = self._conns
        if conns is not None:
            conns.close()

    def _connections(self, client: Any) -> Optional[Connections]:
        # A cluster routes each key to its node (MOVED/ASK, topology refresh):
        # it keeps the client's own path, as do clients for_client turns down.
        if self._cluster:
            return None
        return Connections.for_client(client, SCRIPT, _SHA)

    def _eval(self, rkeys: List[bytes], args: List[bytes]) -> Any:
        """The script's reply; any failure of the client is a ``StoreError``."""
        conns = self._conns
        if conns is not None:
            numkeys = _NUMKEYS[len(rkeys)] if len(rkeys) < 33 else b"%d" % len(rkeys)
            try:
                try:
                    return conns.execute(conns.evalsha(numkeys, rkeys, args))
                except Exception as exc:
                    if not _is_noscript(exc):
                        raise
                    # Flushed, restarted or failed over: EVAL runs and caches it again.
                    return conns.execute(conns.eval(numkeys, rkeys, args))
            except Exception as exc:
                raise self._error(exc) from exc
        client = self.client
        numkeys = _numkeys(rkeys)
        try:
            try:
                return client.evalsha(_SHA, numkeys, *rkeys, *args)
            except Exception as exc:
                if _is_noscript(exc):
                    # Flushed, restarted or failed over: EVAL runs and caches it again.
                    return client.eval(SCRIPT, numkeys, *rkeys, *args)
                if pool_full(exc) is None:
                    raise
                # A full pool is no outage: wait for a connection (nothing was sent).
                return wait_for_pool(
                    lambda: self._eval_client(numkeys, rkeys, args), self._pool_wait
                )
        except PoolFullError:
            raise
        except Exception as exc:
            raise self._error(exc) from exc

    def _eval_client(self, numkeys: Any, rkeys: List[bytes], args: List[bytes]) -> Any:
        try:
            return self.client.evalsha(_SHA, numkeys, *rkeys, *args)
        except Exception as exc:
            if not _is_noscript(exc):
                raise
            return self.client.eval(SCRIPT, numkeys, *rkeys, *args)


class AsyncRedisStore(_RedisBase):
    """``RedisStore`` for ``redis.asyncio`` clients (and valkey-py's).  Implements ``AsyncStore``.

    Same arguments and behaviour as ``RedisStore``; ``fallback`` may be sync
    or async (its ``aapply`` is used when it has one).  A client is bound to
    the event loop it first runs in.  ``aping()`` is ``RedisStore.ping()``.

    ``pipelining`` (default True): a check issued while none is in flight is
    sent at once (no added latency); checks issued while one is in flight
    wait for it, then go out together as one non-transactional pipeline on
    one connection of the client's pool (one round trip for all of them).
    So one check or pipeline is in flight per store and event loop, and a
    check may wait for the one ahead of it: against a server that stops
    answering, up to twice the client's ``socket_timeout`` (seconds) rather
    than once.  Each check still gets its own
    result or its own ``StoreError`` (an error reply fails that check only; a
    lost connection fails every check of its batch not yet answered), and
    the fallback, the probing and the ``NOSCRIPT`` recovery work per check as
    without it.  A pipelined check is sent once: the client's retry policy
    applies to connecting, never to resending a check that may have reached
    the server; a check cancelled before its batch goes out is not sent.  A
    Redis Cluster client, a single-connection client
    (``single_connection_client=True``), a client whose ``execute_command``
    (or ``evalsha``/``eval``) is overridden, wrapped or replaced (a tracer,
    which must see every check: the same test as ``RedisStore``'s fast
    path), and clients without redis-py's asyncio connection pool always send
    each check on its own, through the client, as ``pipelining=False`` does.
    """

    _kind = "AsyncRedisStore"
    _asyncio = True

    def __init__(self, client: Any, *, pipelining: bool = True, **options: Any) -> None:
        super().__init__(client, **options)
        if not isinstance(pipelining, bool):
            raise TypeError(f"pipelining must be True or False, got {pipelining!r:.100}")
        self.pipelining = pipelining
        # A cluster routes each key to its node (MOVED/ASK, topology refresh):
        # its checks keep the client's own per-call path.
        self._pipeline: Any = None  # a _pipeline.ScriptPipeline
        if pipelining and not self._cluster:
            from limiter.backends.redis._pipeline import ScriptPipeline

            self._pipeline = ScriptPipeline.for_client(client, SCRIPT, _SHA)

    async def aping(self) -> None:
        """Check that the server answers and runs the script, or raise ``StoreError``.

        See ``RedisStore.ping``.
        """
        rkeys, args = [self._key(_PING_KEY)], self._args((_PING_LIMIT,), 0, None)
        await self._failover.arun(lambda: self._aresult(rkeys, args, _PING_LIMIT))

    async def aapply(
        self, key: str, limit: Limit, cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``; ``now`` in seconds or ``None`` (store time)."""
        rkeys, args = [self._key(key)], self._args((limit,), cost, now)
        fallback = self._failover.afallback
        return await self._failover.arun(
            lambda: self._aresult(rkeys, args, limit),
            lambda: fallback.aapply(key, limit, cost, now),
        )

    async def aapply_many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """Charge every bucket or none (see ``RedisStore.apply_many``)."""
        rkeys, args = self._many(keys, limits, cost, now)
        fallback = self._failover.afallback
        return await self._failover.arun(
            lambda: self._aresults(rkeys, args, limits),
            lambda: fallback.aapply_many(keys, limits, cost, now),
        )

    async def areset(self, key: str) -> None:
        """``reset`` for asyncio (the DEL is always tried; see there)."""
        rkey = self._key(key)
        fallback = self._failover.afallback
        if fallback is not None:
            await fallback.areset(key)

        async def delete() -> None:
            try:
                await self.client.delete(rkey)
            except Exception as exc:
                raise self._error(exc) from exc

        await self._failover.arun(delete)

    async def _aresult(
        self, rkeys: List[bytes], args: List[bytes], limit: Limit
    ) -> RateLimitResult:
        return self._result(await self._eval(rkeys, args), limit)

    async def _aresults(
        self, rkeys: List[bytes], args: List[bytes], limits: Sequence[Limit]
    ) -> RateLimitResult:
        return combine(self._results(await self._eval(rkeys, args), limits))

    async def _eval(self, rkeys: List[bytes], args: List[bytes]) -> Any:
        """``RedisStore._eval`` awaited (pipelined when the store pipelines)."""
        numkeys = _numkeys(rkeys)
        pipeline = self._pipeline
        if pipeline is not None:
            try:
                return await pipeline.run([numkeys, *rkeys, *args])
            except PoolFullError:
                raise
            except Exception as exc:
                raise self._error(exc) from exc
        client = self.client
        try:
            if self._cluster and getattr(client, "_initialize", False) is True:
                # redis-py's asyncio cluster client (7, 8), cold or after it
                # closed itself: commands sent while it initializes meet MOVED,
                # and every reinitialize_steps-th MOVED closes every connection,
                # in-flight checks' included ("Connection lost"), which starts
                # it again.  Checks wait for the one initialization instead.
                await client.initialize()
            try:
                return await client.evalsha(_SHA, numkeys, *rkeys, *args)
            except Exception as exc:
                if _is_noscript(exc):
                    return await client.eval(SCRIPT, numkeys, *rkeys, *args)
                if pool_full(exc) is None:
                    raise
                # A full pool is no outage: wait for a connection (nothing was sent).
                return await await_pool(
                    lambda: self._eval_client(numkeys, rkeys, args), self._pool_wait
                )
        except PoolFullError:
            raise
        except Exception as exc:
            raise self._error(exc) from exc

    async def _eval_client(self, numkeys: Any, rkeys: List[bytes], args: List[bytes]) -> Any:
        try:
            return await self.client.evalsha(_SHA, numkeys, *rkeys, *args)
        except Exception as exc:
            if not _is_noscript(exc):
                raise
            return await self.client.eval(SCRIPT, numkeys, *rkeys, *args)
