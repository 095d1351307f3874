"""Redis and Valkey stores: one Lua script call (EVALSHA) per check.  Imports no client
library, so ``import limiter`` works without one; what is sent and read is ``_wire``'s."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from limiter.backends._failover import Failover
from limiter.backends._shell import AsyncStoreShell, StoreShell
from limiter.backends._wire import (
    SCRIPT,
    SCRIPT_SHA,
    Argv,
    decode_result,
    encode_key,
    encode_keys,
)
from limiter.backends.redis._config import is_cluster, warn_of_problems
from limiter.backends.redis._connection import (
    Connections,
    await_pool,
    named,
    pool_wait,
    wait_for_pool,
)
from limiter.core.costs import Cost
from limiter.core.limits import Limit
from limiter.store import PoolFullError, StoreError

# Passed as bytes, which clients send as they are (str and int are encoded per call).
_SHA = SCRIPT_SHA.encode("ascii")
_NUMKEYS = [b"%d" % n for n in range(33)]


def _numkeys(rkeys: List[bytes]) -> bytes:
    n = len(rkeys)
    return _NUMKEYS[n] if n < 33 else b"%d" % n


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
        self._argv = Argv(bool(server_time))
        self._args = self._argv.args
        # The sync fast path; a cluster routes each key to its node (MOVED/ASK): only the
        # client can.
        self._conns: Optional[Connections] = None
        if not (self._asyncio or self._cluster):
            self._conns = Connections.for_client(client, SCRIPT, _SHA)
        self._pool_wait = pool_wait(client)
        self._failover = Failover(
            self._kind, fallback, probe_after, max_probe_after, probe_clock, asyncio=self._asyncio
        )
        warn_of_problems(client, self._kind)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.client!r}, prefix={self.prefix!r}, "
            f"server_time={self._argv.server_time!r}, fallback={self.fallback!r})"
        )

    def _key(self, key: str) -> bytes:
        """``key``'s Redis key as sent (the CLI and the bench ask for it)."""
        return encode_key(key, self.prefix)

    def _one(
        self, key: str, limit: Limit, cost: Cost, now: Optional[float]
    ) -> Tuple[List[bytes], List[bytes]]:
        return [encode_key(key, self.prefix)], self._args((limit,), cost, now)

    def _many(
        self, keys: Sequence[str], limits: Sequence[Limit], cost: Cost, now: Optional[float]
    ) -> Tuple[List[bytes], List[bytes]]:
        rkeys = encode_keys(keys, len(limits), self.prefix, self._cluster)
        return rkeys, self._argv.many(limits, cost, now)

    def _error(self, exc: BaseException) -> StoreError:
        return StoreError(f"{self._kind}: {type(exc).__name__}: {exc}")


class RedisStore(_RedisBase, StoreShell):
    """Bucket state in Redis or Valkey, one EVALSHA per check.  Implements ``Store``.

    ``client``: a ``redis.Redis``, ``RedisCluster``, Sentinel master client or
    valkey-py equivalent, ideally with short timeouts and no retries.  ``prefix``:
    prepended to every key.  ``server_time``: with ``now=None``, the server's
    ``TIME`` (True) or ``time.time()``.  ``fallback``: a store answering while Redis
    fails, probed again after ``probe_after`` s doubling to ``max_probe_after`` on
    ``probe_clock``.  Failures are ``StoreError`` (a full pool ``PoolFullError``);
    ``TypeError`` for a client without ``evalsha`` or a non-str prefix.
    docs/stores.md "Redis and Valkey".
    """

    def ping(self) -> None:
        """Check that the server answers and runs the script, or raise ``StoreError``
        (a peek writing nothing; never the fallback's).  Call it at start-up."""
        rkeys, args = self._one(_PING_KEY, _PING_LIMIT, 0, None)
        self._failover.run(lambda: decode_result(self._send(rkeys, args), _PING_LIMIT, self._kind))

    def _delete(self, target: bytes) -> None:
        try:
            self.client.delete(target)
        except Exception as exc:
            raise self._error(exc) from exc

    def close(self) -> None:
        """Disconnect the store's own (fast-path) connections; idempotent, and the store
        stays usable.  The client stays open."""
        conns = self._conns
        if conns is not None:
            conns.close()

    def _send(self, rkeys: List[bytes], args: List[bytes]) -> Any:
        """The script's reply; any failure of the client is a ``StoreError``."""
        conns = self._conns
        numkeys = _numkeys(rkeys)
        try:
            if conns is None:
                # A full pool is no outage: wait for a connection (nothing was sent).
                return wait_for_pool(
                    lambda: self._eval_client(numkeys, rkeys, args), self._pool_wait
                )
            try:
                return conns.execute(conns.evalsha(numkeys, rkeys, args))
            except Exception as exc:
                if not named(exc, "NoScriptError"):
                    raise
                # Flushed, restarted or failed over: EVAL runs and caches it again.
                return conns.execute(conns.eval(numkeys, rkeys, args))
        except PoolFullError:
            raise
        except Exception as exc:
            raise self._error(exc) from exc

    def _eval_client(self, numkeys: bytes, rkeys: List[bytes], args: List[bytes]) -> Any:
        try:
            return self.client.evalsha(_SHA, numkeys, *rkeys, *args)
        except Exception as exc:
            if not named(exc, "NoScriptError"):
                raise
            return self.client.eval(SCRIPT, numkeys, *rkeys, *args)


class AsyncRedisStore(_RedisBase, AsyncStoreShell):
    """``RedisStore`` for ``redis.asyncio`` clients (and valkey-py's).  Implements ``AsyncStore``.

    ``fallback`` may be sync or async.  ``pipelining`` (bool, default True): checks
    issued while one is in flight go out as one pipeline (one per master on a
    Cluster), each with its own result or error; a check may then wait up to twice
    ``socket_timeout``.  docs/stores.md "Auto-pipelining (asyncio)".
    """

    _kind = "AsyncRedisStore"
    _asyncio = True

    def __init__(self, client: Any, *, pipelining: bool = True, **options: Any) -> None:
        super().__init__(client, **options)
        if not isinstance(pipelining, bool):
            raise TypeError(f"pipelining must be True or False, got {pipelining!r:.100}")
        self.pipelining = pipelining
        self._pipeline: Any = None  # a _pipeline.ScriptPipeline or ClusterPipeline
        if pipelining:
            from limiter.backends.redis._pipeline import ClusterPipeline, ScriptPipeline

            # A Cluster client: a pipeline per node, routed by the client's slot table.
            kind = ClusterPipeline if self._cluster else ScriptPipeline
            self._pipeline = kind.for_client(client, SCRIPT, _SHA)

    async def aping(self) -> None:
        """``RedisStore.ping`` for asyncio."""
        rkeys, args = self._one(_PING_KEY, _PING_LIMIT, 0, None)
        await self._failover.arun(lambda: self._aresult(rkeys, args, _PING_LIMIT))

    async def _delete(self, target: bytes) -> None:
        try:
            await self.client.delete(target)
        except Exception as exc:
            raise self._error(exc) from exc

    async def _send(self, rkeys: List[bytes], args: List[bytes]) -> Any:
        """``RedisStore._send`` awaited (pipelined when the store pipelines)."""
        numkeys = _numkeys(rkeys)
        pipeline = self._pipeline
        client = self.client
        try:
            if pipeline is not None:
                return await pipeline.run([numkeys, *rkeys, *args])
            if self._cluster and getattr(client, "_initialize", False) is True:
                # redis-py's asyncio cluster client: commands sent while it
                # initializes meet MOVED, and enough MOVED close every connection.
                await client.initialize()
            # A full pool is no outage: wait for a connection (nothing was sent).
            return await await_pool(
                lambda: self._eval_client(numkeys, rkeys, args), self._pool_wait
            )
        except PoolFullError:
            raise
        except Exception as exc:
            raise self._error(exc) from exc

    async def _eval_client(self, numkeys: bytes, rkeys: List[bytes], args: List[bytes]) -> Any:
        try:
            return await self.client.evalsha(_SHA, numkeys, *rkeys, *args)
        except Exception as exc:
            if not named(exc, "NoScriptError"):
                raise
            return await self.client.eval(SCRIPT, numkeys, *rkeys, *args)
