"""Auto-pipelining of one Lua script's calls on a ``redis.asyncio`` (or valkey-py) client:
docs/stores.md "Auto-pipelining (asyncio)".  One call or batch in flight per lane at a
time (fewer, fuller batches: measured 1.2-1.3x faster); on a Cluster, a lane per node."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any, Awaitable, Callable, Dict, List, Optional, Set, Tuple

from limiter.backends.redis._connection import (
    await_pool,
    bulk,
    named,
    plain_client,
    pool_wait,
)


class _Loop:
    """One lane's state in one event loop (a client is bound to one loop); on a
    Cluster, the loop's root state holds one lane per node."""

    __slots__ = ("busy", "lanes", "loop", "node", "queue", "tasks")

    def __init__(self, loop: asyncio.AbstractEventLoop, node: Any = None) -> None:
        self.loop = loop
        self.busy = False
        #: Calls waiting for the next batch: (packed EVALSHA, arguments, future).
        self.queue: List[Tuple[bytes, List[Any], asyncio.Future[Any]]] = []
        # Referenced until done: the loop holds tasks weakly.
        self.tasks: Set[asyncio.Task[None]] = set()
        #: Cluster: the node this lane sends to, and (root state) the lanes by node name.
        self.node = node
        self.lanes: Dict[str, _Loop] = {}


# One entry's outcome: (True, reply) or (False, exception).
_Outcome = Tuple[bool, Any]


class _Batches:
    """What the single-server and Cluster pipelines share: packing, queueing, batching
    and a batch's trip; a subclass picks a lane's connection (the Cluster one, the lane)."""

    def __init__(self, script: str, sha: bytes) -> None:
        self._evalsha = b"$7\r\nEVALSHA\r\n" + bulk(sha)
        self._eval = b"$4\r\nEVAL\r\n" + bulk(script.encode("utf-8"))
        self._state: Optional[_Loop] = None

    def _lane(self, loop: asyncio.AbstractEventLoop, args: List[Any]) -> _Loop:
        """The lane of a call in ``loop``: the loop's root state (single server)."""
        state = self._state
        if state is None or state.loop is not loop:
            state = self._state = _Loop(loop)
        return state

    # A subclass's: a connection to ``node`` (``None``: the single server), and its release.
    _connect: Callable[[Any], Awaitable[Any]]
    _release: Callable[[Any, Any], Awaitable[None]]

    async def _exchange(self, node: Any, connection: Any, commands: List[bytes]) -> List[_Outcome]:
        """Send ``commands`` in one write and read one reply each; an error reply is that
        entry's outcome, any other failure every unanswered entry's (connection dropped)."""
        outcomes: List[_Outcome] = []
        try:
            await connection.send_packed_command(b"".join(commands))  # one: the same bytes
            for _ in commands:
                try:
                    outcomes.append((True, await connection.read_response()))
                except Exception as exc:
                    if not named(exc, "ResponseError"):
                        raise
                    outcomes.append((False, exc))
        except Exception as exc:
            outcomes.extend(_failed(exc, len(commands) - len(outcomes)))
            # Already broken, perhaps: the pool reconnects it at the next checkout.
            with contextlib.suppress(Exception):
                await connection.disconnect()
        return outcomes

    async def _trip(
        self, node: Any, commands: List[bytes], args: Optional[List[List[Any]]] = None
    ) -> List[_Outcome]:
        """``commands``' outcomes (any error included: never raising), in one write on one
        connection to ``node``; with ``args``, a ``NOSCRIPT`` reply is sent again as ``EVAL``
        on that connection."""
        try:
            # A full pool (the client's other users hold every connection) is
            # no outage: _connect waits for one; nothing was sent.
            connection = await self._connect(node)
        except Exception as exc:
            return _failed(exc, len(commands))
        try:
            outcomes = await self._exchange(node, connection, commands)
            again = [i for i, (ok, exc) in enumerate(outcomes) if not ok and named(exc, _NOSCRIPT)]
            if args is not None and again:
                evals = [self._pack(self._eval, args[i]) for i in again]
                for i, outcome in zip(again, await self._exchange(node, connection, evals)):
                    outcomes[i] = outcome
            return outcomes
        finally:
            await self._release(node, connection)

    def _pack(self, head: bytes, args: List[Any]) -> bytes:
        return b"".join([b"*%d\r\n" % (len(args) + 2), head, *map(bulk, args)])

    async def run(self, args: List[Any]) -> Any:
        """The script's reply to ``EVALSHA sha *args``, alone or in a batch."""
        loop = asyncio.get_running_loop()
        state = self._lane(loop, args)
        command = self._pack(self._evalsha, args)
        if not state.busy:
            # Nothing in flight: send at once, in the caller's task.
            state.busy = True
            try:
                ok, value = (await self._trip(state.node, [command], [args]))[0]
            finally:
                if state.queue:  # queued behind this call: they go next, together
                    task = loop.create_task(self._batches(state))
                    state.tasks.add(task)
                    task.add_done_callback(state.tasks.discard)
                else:
                    state.busy = False
            if ok:
                return value
            raise value
        future: asyncio.Future[Any] = loop.create_future()
        state.queue.append((command, args, future))
        return await future

    async def _batches(self, state: _Loop) -> None:
        """Send what queued, as one batch, until nothing queues while a batch is in flight."""
        try:
            while state.queue:
                queue, state.queue = state.queue, []
                # A caller cancelled while queued is not sent (as without
                # pipelining, a check never written charges nothing).
                queue = [entry for entry in queue if not entry[2].done()]
                if not queue:
                    continue
                outcomes: Optional[List[_Outcome]] = None
                try:
                    outcomes = await self._trip(
                        state.node, [c for c, _, _ in queue], [a for _, a, _ in queue]
                    )
                except Exception as exc:  # a bug: _trip returns failures as outcomes
                    outcomes = _failed(exc, len(queue))
                finally:
                    _resolve(queue, outcomes)
                # The callers just woken run first: their next calls join the next batch.
                await asyncio.sleep(0)
        finally:
            state.busy = False
            queue, state.queue = state.queue, []
            _resolve(queue, None)  # only when this task was cancelled (the loop is closing)


class ScriptPipeline(_Batches):
    """Sends calls of one script (``EVALSHA``) issued in one event-loop tick as one pipeline
    on ``pool``; ``await run(args)`` returns the reply or raises the client's exception
    (never ``NOSCRIPT``)."""

    def __init__(self, pool: Any, script: str, sha: bytes) -> None:
        super().__init__(script, sha)
        self._pool = pool
        # redis-py >= 5.3 warns when get_connection is given a command name;
        # valkey-py and older redis-py require one.
        parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
        self._checkout: Callable[[], Any] = pool.get_connection
        if parameter is not None and parameter.default is inspect.Parameter.empty:
            self._checkout = lambda: pool.get_connection("EVALSHA")
        self._pool_wait = pool_wait(pool)  # the pool's connection_kwargs

    @classmethod
    def for_client(cls, client: Any, script: str, sha: bytes) -> Optional[ScriptPipeline]:
        """A pipeline on ``client``'s pool, or ``None`` (a single-connection client, an
        instrumented one, or no redis-py asyncio pool)."""
        if getattr(client, "connection", None) is not None:
            return None
        if not plain_client(client, asyncio=True):  # instrumented: it keeps seeing calls
            return None
        pool = getattr(client, "connection_pool", None)
        # get_connection may be wrapped by a deprecation decorator (a plain
        # function returning the coroutine): the connection's methods tell
        # an asyncio pool from a sync one.
        if not all(callable(getattr(pool, name, None)) for name in ("get_connection", "release")):
            return None
        connection_class = getattr(pool, "connection_class", None)
        if not all(
            inspect.iscoroutinefunction(getattr(connection_class, name, None))
            for name in ("send_packed_command", "read_response")
        ):
            return None
        return cls(pool, script, sha)

    async def _connect(self, node: Any) -> Any:
        return await await_pool(self._checkout, self._pool_wait)

    async def _release(self, node: Any, connection: Any) -> None:
        await self._pool.release(connection)


def _resolve(
    queue: List[Tuple[bytes, List[Any], asyncio.Future[Any]]], outcomes: Optional[List[_Outcome]]
) -> None:
    for i, (_, _, future) in enumerate(queue):
        if future.done():  # the caller was cancelled
            continue
        if outcomes is None:  # the batch's task was cancelled (the loop is closing)
            future.cancel()
        elif outcomes[i][0]:
            future.set_result(outcomes[i][1])
        else:
            future.set_exception(outcomes[i][1])


def _failed(exc: BaseException, n: int) -> List[_Outcome]:
    # One exception object per entry: each caller raises (and chains) its own.
    return [(False, exc)] + [(False, _copy(exc)) for _ in range(n - 1)]


def _copy(exc: BaseException) -> BaseException:
    try:
        clone = type(exc)(*exc.args)
    except Exception:  # an exception class with another signature: share it
        return exc
    clone.__cause__ = exc.__cause__
    return clone


# Replies that say the command did not run on that node, so that it may be sent
# again elsewhere; any other reply (an error included) or a failure is final.
_NOSCRIPT, _MOVED, _ASK = "NoScriptError", "MovedError", "AskError"
_WAIT = ("TryAgainError", "ClusterDownError")
# Redirects one call follows, and the first pause after TRYAGAIN or CLUSTERDOWN
# (doubling each time: 10 ms to 160 ms, 0.31 s in all).
_ROUNDS = 5
_PAUSE = 0.01
_ASKING = b"*1\r\n$6\r\nASKING\r\n"


def _redirect(exc: Any) -> Optional[str]:
    """The kind of reply ``exc`` is, when the command did not run (``None``: it is final)."""
    for name in (_NOSCRIPT, _MOVED, _ASK, *_WAIT):  # MovedError before AskError: it subclasses it
        if named(exc, name):
            return name
    return None


class _Redirected(Exception):
    """A batch's outcome for a command that did not run on ``node``: its caller sends it again."""

    def __init__(self, kind: str, reply: Any, node: Any) -> None:
        super().__init__(kind)
        self.kind, self.reply, self.node = kind, reply, node


class ClusterPipeline(_Batches):
    """``ScriptPipeline`` for a Cluster client: a lane per node owning the call's slot; a
    command that did not run (``_redirect``) is sent again by its caller, up to ``_ROUNDS``
    times.  A failed connection fails every unanswered command on it (never resent)."""

    def __init__(self, client: Any, script: str, sha: bytes) -> None:
        super().__init__(script, sha)
        self._client = client
        self._nodes = client.nodes_manager
        self._pool_wait = pool_wait(client)
        # redis-py >= 8 asks for a refresh and runs it when due (paced);
        # valkey-py and older redis-py refresh whenever _initialize is set.
        self._due: Optional[Callable[[], bool]] = getattr(client, "_initialize_due", None)
        self._ask_refresh: Optional[Callable[..., None]] = getattr(client, "_request_refresh", None)
        # redis-py >= 8 patches the slot table with move_slot(exc); older
        # clients apply the MOVED kept in _moved_exception at the next lookup.
        move = getattr(self._nodes, "move_slot", None)
        self._move_slot = move if inspect.iscoroutinefunction(move) else None
        self._remap: Optional[Callable[[str, int], Tuple[str, int]]] = getattr(
            self._nodes, "remap_host_port", None
        )

    @classmethod
    def for_client(cls, client: Any, script: str, sha: bytes) -> Optional[ClusterPipeline]:
        """A pipeline on Cluster ``client``, or ``None`` (instrumented, or another client)."""
        if not plain_client(client, asyncio=True):  # instrumented: it keeps seeing calls
            return None
        nodes = getattr(client, "nodes_manager", None)
        if not callable(getattr(nodes, "get_node_from_slot", None)):
            return None
        if not all(callable(getattr(client, name, None)) for name in ("keyslot", "get_node")):
            return None
        return cls(client, script, sha)

    async def run(self, args: List[Any]) -> Any:
        await self._refresh()
        try:
            return await super().run(args)
        except _Redirected as redirected:
            return await self._follow(redirected, args)

    async def _refresh(self) -> None:
        """Run the topology refresh the client asked for (a cold client: its first)."""
        client = self._client
        if getattr(client, "_initialize", False) is True and (self._due is None or self._due()):
            await client.initialize()

    def _refresh_later(self, node: Any) -> None:
        if self._ask_refresh is not None:
            self._ask_refresh(last_failed_node_name=node.name)
        else:
            self._client._initialize = True

    def _lane(self, loop: asyncio.AbstractEventLoop, args: List[Any]) -> _Loop:
        root = super()._lane(loop, args)
        # The node owning the slot of the first key (args: numkeys, keys..., argv...).
        node = self._nodes.get_node_from_slot(self._client.keyslot(args[1]))
        lane = root.lanes.get(node.name)
        if lane is None:
            lane = root.lanes[node.name] = _Loop(loop, node)
        else:
            lane.node = node  # a refresh may have replaced the node object
        return lane

    async def _trip(
        self, node: Any, commands: List[bytes], args: Optional[List[List[Any]]] = None
    ) -> List[_Outcome]:
        """Every command's outcome, ``_Redirected`` for those that did not run on ``node``."""
        outcomes = await super()._trip(node, commands, args)
        for i, (ok, value) in enumerate(outcomes):
            kind = None if ok else _redirect(value)
            if kind is not None:
                outcomes[i] = (False, _Redirected(kind, value, node))
        return outcomes

    async def _follow(self, redirected: _Redirected, args: List[Any]) -> Any:
        """The reply to a command that did not run, sent again where it belongs (caller's task)."""
        for attempt in range(_ROUNDS):
            kind, node = redirected.kind, redirected.node
            if kind == _MOVED:
                await self._moved(redirected.reply, node)
            elif kind in _WAIT:
                if kind == "ClusterDownError":
                    self._refresh_later(node)
                await asyncio.sleep(_PAUSE * 2**attempt)
            await self._refresh()
            try:
                if kind == _MOVED or kind in _WAIT:
                    # Through the lane of the slot's owner: batched with the rest.
                    return await super().run(args)
                return await self._direct(redirected, args)
            except _Redirected as again:
                redirected = again
        raise redirected.reply

    async def _direct(self, redirected: _Redirected, args: List[Any]) -> Any:
        """After ``ASK`` (or ``NOSCRIPT`` after one): ``ASKING`` and the command, one trip."""
        if redirected.kind == _NOSCRIPT:
            target, head = redirected.node, self._eval
        else:
            target, head = self._target(redirected.reply, redirected.node), self._evalsha
        packed = self._pack(head, args)
        ok, value = (await self._trip(target, [_ASKING, packed]))[1]
        if ok:
            return value
        raise value  # final, or _Redirected

    def _target(self, exc: Any, node: Any) -> Any:
        """The node an ``ASK`` reply from ``node`` points to."""
        host, port = exc.host or node.host, int(exc.port)
        if self._remap is not None:
            host, port = self._remap(host, port)
        target = self._client.get_node(host=host, port=port)
        if target is None:
            raise exc  # a node the client does not know: not sent
        return target

    async def _moved(self, exc: Any, node: Any) -> None:
        """Let the client update its slot table from a ``MOVED`` reply."""
        if not exc.host:  # "MOVED 3999 :6381": the node that replied left its host out
            exc.host = node.host
        if self._move_slot is not None:
            await self._move_slot(exc)
        elif hasattr(self._nodes, "_moved_exception"):
            # Applied by the next lookup, which is this one (so that the MOVED
            # replies of several slots in one batch are all applied).
            self._nodes._moved_exception = exc
            self._nodes.get_node_from_slot(exc.slot_id)
        else:
            self._refresh_later(node)

    async def _connect(self, node: Any) -> Any:
        return await await_pool(lambda: _acquired(node), self._pool_wait)

    async def _release(self, node: Any, connection: Any) -> None:
        release = getattr(node, "release", None)
        if release is not None:
            release(connection)
        else:  # valkey-py and older redis-py
            node._free.append(connection)

    async def _exchange(self, node: Any, connection: Any, commands: List[bytes]) -> List[_Outcome]:
        settle = getattr(node, "disconnect_if_needed", None)  # redis-py >= 8
        if settle is not None:
            await settle(connection)
        outcomes = await super()._exchange(node, connection, commands)
        if not all(ok or named(value, "ResponseError") for ok, value in outcomes):
            # The node may be down or failed over: the slots are read again.
            self._refresh_later(node)
        return outcomes


async def _acquired(node: Any) -> Any:
    return node.acquire_connection()
