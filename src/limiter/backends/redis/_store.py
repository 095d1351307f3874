"""Redis and Valkey stores: one Lua script call (EVALSHA) per check.

Works with any client that has redis-py's ``evalsha``/``eval``/``delete``:
``redis.Redis``, ``redis.cluster.RedisCluster``, a Sentinel master client,
valkey-py, and their asyncio twins (``AsyncRedisStore``).  This module never
imports a client library itself, so ``import limiter`` works without one.
It does the I/O; what is sent and read (arguments, replies, keys and their
hash tags) is ``_wire``'s.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from limiter.backends._failover import Failover
from limiter.backends.redis._config import is_cluster, warn_of_problems
from limiter.backends.redis._connection import (
    Connections,
    PoolFullError,
    await_pool,
    pool_full,
    pool_wait,
    wait_for_pool,
)
from limiter.backends.redis._wire import (
    SCRIPT,
    SCRIPT_SHA,
    Argv,
    decode_result,
    decode_results,
    encode_key,
    encode_keys,
)
from limiter.core.costs import Cost
from limiter.core.limits import Limit
from limiter.core.result import RateLimitResult, combine
from limiter.store import StoreError

# Passed as bytes, which clients send as they are (str and int are encoded per call).
_SHA = SCRIPT_SHA.encode("ascii")
_NUMKEYS = [str(n).encode("ascii") for n in range(33)]


def _numkeys(rkeys: List[bytes]) -> Any:
    n = len(rkeys)
    return _NUMKEYS[n] if n < len(_NUMKEYS) else n


def _is_noscript(exc: BaseException) -> bool:
    # redis-py and valkey-py both name it NoScriptError; match by name so this
    # module needs neither installed.
    return any(cls.__name__ == "NoScriptError" for cls in type(exc).__mro__)


# ping(): a peek at a key no caller uses (a peek writes nothing to a missing key).
_PING_KEY = "\x00limiter.ping\x00"
_PING_LIMIT = Limit(1, 1)


class _RedisBase:
    """What the sync and asyncio stores share: options, keys, arguments, fallback."""

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
        self.fallback: Any = fallback
        self._cluster = is_cluster(client)
        # [argv] of a call (policies, cost, now): see _wire.Argv.
        self._argv = Argv(bool(server_time))
        self._args = self._argv.args
        self._conns = self._connections(client)
        # How long a check waits for a connection of a full pool (PoolFullError).
        self._pool_wait = pool_wait(client)
        # Every operation but ping goes through it: Redis, or the fallback.
        self._failover = Failover(
            self._kind, fallback, probe_after, max_probe_after, probe_clock, asyncio=self._asyncio
        )
        warn_of_problems(client, self._kind)

    def _connections(self, client: Any) -> Optional[Connections]:
        """The store's own connections for the fast path, or ``None``: the client's path."""
        return None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.client!r}, prefix={self.prefix!r}, "
            f"server_time={self.server_time!r}, fallback={self.fallback!r})"
        )

    @property
    def server_time(self) -> bool:
        """With ``now=None``, read the server's ``TIME`` (True) or ``time.time()`` (False)."""
        return self._argv.server_time

    @server_time.setter
    def server_time(self, value: bool) -> None:
        self._argv.server_time = bool(value)

    @property
    def using_fallback(self) -> bool:
        """True while the server is considered down and the fallback answers."""
        return self._failover.using_fallback

    def _key(self, key: str) -> bytes:
        """``key``'s Redis key as sent (the CLI and the bench ask for it)."""
        return encode_key(key, self.prefix)

    def _many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: Cost, now: Optional[float]
    ) -> Tuple[List[bytes], List[bytes]]:
        """The keys and argument of an ``apply_many`` call, or its error before any I/O."""
        rkeys = encode_keys(keys, len(limits), self.prefix, self._cluster)
        return rkeys, self._argv.many(limits, cost, now)

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
        rkeys, args = [encode_key(_PING_KEY, self.prefix)], self._args((_PING_LIMIT,), 0, None)
        self._failover.run(lambda: decode_result(self._eval(rkeys, args), _PING_LIMIT, self._kind))

    def apply(self, key: str, limit: Limit, cost: float, now: Optional[float]) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``; ``now`` in seconds or ``None`` (store time)."""
        rkeys, args = [encode_key(key, self.prefix)], self._args((limit,), cost, now)
        result: RateLimitResult = self._failover.run(
            lambda: decode_result(self._eval(rkeys, args), limit, self._kind),
            lambda: self.fallback.apply(key, limit, cost, now),
        )
        return result

    def apply_many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: Cost, now: Optional[float]
    ) -> RateLimitResult:
        """Charge ``cost`` to every ``keys[i]`` under ``limits[i]``, or to none (one script call).

        ``cost``: one for every limit, or a list or tuple of one per limit.  A
        ``Lockout`` may come last (``limiter.core.many.step_all``).  On a cluster
        the keys must share a hash tag (``ValueError`` otherwise).
        """
        rkeys, args = self._many(keys, limits, cost, now)
        result: RateLimitResult = self._failover.run(
            lambda: combine(decode_results(self._eval(rkeys, args), limits, self._kind)),
            lambda: self.fallback.apply_many(keys, limits, cost, now),
        )
        return result

    def reset(self, key: str) -> None:
        """Forget ``key`` (one DEL).  With a fallback, it forgets the key too.

        The DEL is always tried, even while the fallback answers checks: an
        operator's reset must not succeed silently and leave the shared bucket
        as it was.  If Redis fails, ``StoreError`` (the fallback is reset).
        """
        rkey = encode_key(key, self.prefix)
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
        rkeys, args = [encode_key(_PING_KEY, self.prefix)], self._args((_PING_LIMIT,), 0, None)
        await self._failover.arun(lambda: self._aresult(rkeys, args, _PING_LIMIT))

    async def aapply(
        self, key: str, limit: Limit, cost: float, now: Optional[float]
    ) -> RateLimitResult:
        """Take ``cost`` tokens from ``key``; ``now`` in seconds or ``None`` (store time)."""
        rkeys, args = [encode_key(key, self.prefix)], self._args((limit,), cost, now)
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
        rkey = encode_key(key, self.prefix)
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
        return decode_result(await self._eval(rkeys, args), limit, self._kind)

    async def _aresults(
        self, rkeys: List[bytes], args: List[bytes], limits: Sequence[Limit]
    ) -> RateLimitResult:
        return combine(decode_results(await self._eval(rkeys, args), limits, self._kind))

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
