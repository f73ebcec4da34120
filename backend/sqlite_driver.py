"""SQLite through aiosqlite with one trip to the connection's thread per statement.

SQLAlchemy's aiosqlite adapter makes four: open a cursor, execute, fetch the rows, close the
cursor, each a wake-up of the event loop by aiosqlite's thread. A pass placing a hundred jobs
runs hundreds of statements while it holds the controller's lock, and other work on the loop
ran in every gap. Here a statement's cursor is opened, run, read and closed in one call on
that thread; what SQLAlchemy asks of the cursor afterwards (its description, rowcount and
last row id) is kept from it. Server-side cursors (streamed results) are the adapter's own.
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util.concurrency import await_

# (description, rowcount, lastrowid, rows) of a statement run on the connection's thread.
_Outcome = tuple[Any, int, int | None, list[Any]]


def _run(connection: sqlite3.Connection, operation: str, parameters: Any, many: bool) -> _Outcome:
    cursor = connection.cursor()
    try:
        if many:
            cursor.executemany(operation, parameters)
        elif parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        rows = cursor.fetchall() if cursor.description else []
        return cursor.description, cursor.rowcount, cursor.lastrowid, rows
    finally:
        cursor.close()


class OneTripCursor(AsyncAdapt_aiosqlite_cursor):
    """A cursor whose every statement is one call on the connection's thread."""

    __slots__ = ("_outcome",)

    def __init__(self, adapt_connection: AsyncAdapt_aiosqlite_connection) -> None:
        # No aiosqlite cursor is opened here: opening one is a trip to its thread of its own.
        self._adapt_connection = adapt_connection
        self._connection = adapt_connection._connection
        self._cursor = None  # type: ignore[assignment]
        self._soft_closed_memoized = {}  # type: ignore[assignment]
        self._rows = collections.deque()
        self._outcome: _Outcome = (None, -1, None, [])

    @property
    def description(self) -> Any:
        return self._outcome[0]

    @property
    def rowcount(self) -> int:
        return self._outcome[1]

    @property
    def lastrowid(self) -> int:
        return self._outcome[2]  # type: ignore[return-value]

    async def _async_soft_close(self) -> None:
        return None  # nothing is open: the rows were read with the statement

    def close(self) -> None:
        self._rows.clear()

    async def _statement(self, operation: Any, parameters: Any, many: bool) -> None:
        async with self._adapt_connection._execute_mutex:
            connection: aiosqlite.Connection = self._connection  # type: ignore[assignment]
            # aiosqlite's own: queue a call for the connection's thread and await its result.
            on_its_thread: Callable[..., Awaitable[_Outcome]] = connection._execute
            outcome = await on_its_thread(_run, connection._conn, operation, parameters, many)
            self._outcome = outcome
            self._rows = collections.deque(outcome[3])

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        try:
            return await_(self._statement(operation, parameters, False))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    def executemany(self, operation: Any, seq_of_parameters: Any) -> Any:
        try:
            return await_(self._statement(operation, seq_of_parameters, True))
        except Exception as error:
            self._adapt_connection._handle_exception(error)


class OneTripConnection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ()
    _cursor_cls = OneTripCursor  # type: ignore[assignment]


class OneTripDBAPI(AsyncAdapt_aiosqlite_dbapi):
    """aiosqlite as SQLAlchemy's adapter presents it, with OneTripConnection's cursors."""

    def connect(self, *arg: Any, **kw: Any) -> OneTripConnection:
        adapted = super().connect(*arg, **kw)
        return OneTripConnection(self, adapted._connection)


def dbapi() -> OneTripDBAPI:
    """The `module` to give create_async_engine for a sqlite+aiosqlite URL."""
    return OneTripDBAPI(aiosqlite, sqlite3)
