"""The check's one statement on libpq's level, for ``PostgresStore``.

psycopg's own ``execute`` costs the client more than the server's whole
check, so the prepared statement goes straight through ``pgconn`` (psycopg's
documented libpq wrapper).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, List, Optional

from limiter.backends.postgres._sql import Statement

#: libpq's codes: a result with rows, a command done, and the SQLSTATE field.
_TUPLES_OK = 2
_COMMAND_OK = 1
_SQLSTATE = 67
#: The parameters' formats: the keys' bytes as binary (bytea), argv as text.
_FORMATS = [1, 0]  # lists: psycopg 3.2's C wrapper refuses tuples


def execute_prepared(conn: Any, statement: Statement, params: List[bytes]) -> bytes:
    """``statement``'s one value, run on ``conn``'s libpq connection; failures raise psycopg's.

    Prepared when missing (SQLSTATE 26000), never with ``prepare_threshold=None`` (a pooler).
    """
    pgconn = conn.pgconn
    if conn.prepare_threshold is None:
        result = pgconn.exec_params(statement.text, params, None, _FORMATS)
    else:
        result = pgconn.exec_prepared(statement.name, params, _FORMATS)
        if result.status != _TUPLES_OK and result.error_field(_SQLSTATE) == b"26000":
            result = pgconn.prepare(statement.name, statement.text)  # its error, if it fails
            if result.status == _COMMAND_OK:
                result = pgconn.exec_prepared(statement.name, params, _FORMATS)
    if result.status != _TUPLES_OK:
        from psycopg.errors import error_from_result

        raise error_from_result(result, encoding=conn.info.encoding)
    return result.get_value(0, 0)  # type: ignore[no-any-return]


def connection_class(asyncio: bool, remember: Callable[[Optional[BaseException]], None]) -> Any:
    """A psycopg connection class (``AsyncConnection`` with ``asyncio``) whose ``connect``
    tells ``remember`` how each attempt ended: the exception, or ``None``.

    For a pool's ``connection_class``: psycopg_pool only logs why it could not
    connect, and a caller's ``PoolTimeout`` says nothing of it.
    """
    import psycopg

    @contextlib.contextmanager
    def reported() -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            remember(exc)
            raise
        remember(None)

    if asyncio:

        class AsyncConnection(psycopg.AsyncConnection):
            @classmethod
            async def connect(cls, *args: Any, **kwargs: Any) -> Any:
                with reported():
                    return await super().connect(*args, **kwargs)

        return AsyncConnection

    class Connection(psycopg.Connection):
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            with reported():
                return super().connect(*args, **kwargs)

    return Connection
