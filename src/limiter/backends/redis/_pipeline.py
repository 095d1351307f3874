"""Auto-pipelining of one Lua script's calls on a ``redis.asyncio`` (or valkey-py) client.

A call made while nothing is in flight is sent at once in the caller's task;
calls made meanwhile queue and go out together when it ends, as one
non-transactional pipeline on one connection of the client's pool, sent once.
One call or batch is in flight at a time: measured against a batch per tick
in parallel, this sends fewer, fuller batches (64 tasks: one of 64 rather
than 63 + 1) and was 1.2-1.3x faster with 16 and 64 tasks.  Per-entry errors,
``NOSCRIPT`` and cancellation: docs/stores.md "Auto-pipelining (asyncio)".
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any, Callable, List, Optional, Set, Tuple

from limiter.backends.redis._connection import await_pool, plain_client, pool_wait


def _named(exc: BaseException, name: str) -> bool:
    # Matched by name so that this module needs neither redis-py nor valkey-py.
    return any(cls.__name__ == name for cls in type(exc).__mro__)


def _bulk(arg: Any) -> bytes:
    if arg.__class__ is not bytes:
        arg = str(arg).encode("ascii")  # numkeys above 32 is an int
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


class _Loop:
    """The pipeline's state in one event loop (a client is bound to one loop)."""

    __slots__ = ("busy", "loop", "queue", "tasks")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: True while a call or a batch is in flight (then calls queue).
        self.busy = False
        #: Calls waiting for the next batch: (packed EVALSHA, arguments, future).
        self.queue: List[Tuple[bytes, List[Any], asyncio.Future[Any]]] = []
        #: The batches' tasks, referenced until done (the loop holds tasks weakly).
        self.tasks: Set[asyncio.Task[None]] = set()


# One entry's outcome: (True, reply) or (False, exception).
_Outcome = Tuple[bool, Any]


class ScriptPipeline:
    """Sends calls of one script (``EVALSHA``) issued in one event-loop tick as one pipeline.

    ``pool``: the client's connection pool; ``script``: the Lua source (sent
    with ``EVAL`` after ``NOSCRIPT``); ``sha``: its SHA-1 in hex, as bytes.
    ``await run(args)`` returns the reply or raises the client's exception
    (never ``NOSCRIPT``).
    """

    def __init__(self, pool: Any, script: str, sha: bytes) -> None:
        self._pool = pool
        self._script = script.encode("utf-8")
        self._evalsha = b"$7\r\nEVALSHA\r\n" + _bulk(sha)
        self._eval = b"$4\r\nEVAL\r\n" + _bulk(self._script)
        # redis-py >= 5.3 warns when get_connection is given a command name;
        # valkey-py and older redis-py require one.
        parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
        self._checkout: Callable[[], Any] = pool.get_connection
        if parameter is not None and parameter.default is inspect.Parameter.empty:
            self._checkout = lambda: pool.get_connection("EVALSHA")
        self._state: Optional[_Loop] = None
        self._pool_wait = pool_wait(pool)  # the pool's connection_kwargs

    @classmethod
    def for_client(cls, client: Any, script: str, sha: bytes) -> Optional[ScriptPipeline]:
        """A pipeline on ``client``'s pool, or ``None`` when it has no pool this can use.

        ``None`` for a single-connection client, an instrumented one
        (``plain_client``) and anything without redis-py's asyncio pool.
        """
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

    def _pack(self, head: bytes, args: List[Any]) -> bytes:
        return b"".join([b"*%d\r\n" % (len(args) + 2), head, *map(_bulk, args)])

    async def run(self, args: List[Any]) -> Any:
        """The script's reply to ``EVALSHA sha *args``, alone or in a batch."""
        loop = asyncio.get_running_loop()
        state = self._state
        if state is None or state.loop is not loop:
            state = self._state = _Loop(loop)
        command = self._pack(self._evalsha, args)
        if not state.busy:
            # Nothing in flight: send at once, in the caller's task.
            state.busy = True
            try:
                ok, value = (await self._send([command], [args]))[0]
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
                    outcomes = await self._send([c for c, _, _ in queue], [a for _, a, _ in queue])
                except Exception as exc:  # a bug: _send returns failures as outcomes
                    outcomes = _failed(exc, len(queue))
                finally:
                    _resolve(queue, outcomes)
                # The callers just woken run first (their wake-ups were queued
                # before this task's): their next calls join the next batch.
                await asyncio.sleep(0)
        finally:
            state.busy = False
            queue, state.queue = state.queue, []
            _resolve(queue, None)  # only when this task was cancelled (the loop is closing)

    async def _send(self, commands: List[bytes], args: List[List[Any]]) -> List[_Outcome]:
        """Every command's outcome, on one connection of the pool (any error included)."""
        try:
            # A full pool (the client's other users hold every connection) is
            # no outage: wait for one; nothing was sent.
            connection = await await_pool(self._checkout, self._pool_wait)
        except Exception as exc:
            return _failed(exc, len(commands))
        try:
            outcomes = await _round_trip(connection, commands)
            again = [i for i, (ok, value) in enumerate(outcomes) if not ok and _noscript(value)]
            if again:
                # Flushed, restarted or failed over: EVAL runs and caches it again.
                retried = await _round_trip(
                    connection, [self._pack(self._eval, args[i]) for i in again]
                )
                for i, outcome in zip(again, retried):
                    outcomes[i] = outcome
            return outcomes
        finally:
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


def _noscript(exc: Any) -> bool:
    return _named(exc, "NoScriptError")


def _failed(exc: BaseException, n: int) -> List[_Outcome]:
    # One exception object per entry: each caller raises (and chains) its own.
    outcomes: List[_Outcome] = [(False, exc)]
    for _ in range(n - 1):
        outcomes.append((False, _copy(exc)))
    return outcomes


def _copy(exc: BaseException) -> BaseException:
    try:
        clone = type(exc)(*exc.args)
    except Exception:  # an exception class with another signature: share it
        return exc
    clone.__cause__ = exc.__cause__
    return clone


async def _round_trip(connection: Any, commands: List[bytes]) -> List[_Outcome]:
    """Send ``commands`` in one write and read one reply each.

    An error reply is that entry's outcome; any other failure is every
    unanswered entry's, and the connection is dropped (no reply left unread).
    """
    outcomes: List[_Outcome] = []
    try:
        await connection.send_packed_command(
            commands[0] if len(commands) == 1 else b"".join(commands)
        )
        for _ in commands:
            try:
                outcomes.append((True, await connection.read_response()))
            except Exception as exc:
                if not _named(exc, "ResponseError"):
                    raise
                outcomes.append((False, exc))
    except Exception as exc:
        outcomes.extend(_failed(exc, len(commands) - len(outcomes)))
        # Already broken, perhaps: the pool reconnects it at the next checkout.
        with contextlib.suppress(Exception):
            await connection.disconnect()
    return outcomes
