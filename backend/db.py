"""Database engine, sessions and the declarative base shared by every model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic_core import from_json
from sqlalchemy import DateTime, MetaData, event, text
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.types import TypeDecorator

from backend import sqlite_driver

# Stable constraint names, so that migrations can drop and alter them on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


T = TypeVar("T")

# Values in one `IN (...)` list: far below either database's limit on bound parameters.
IN_LIST_PAGE = 500


def in_pages(values: Sequence[T]) -> Iterator[Sequence[T]]:
    """The values a page at a time, for a query per `IN (...)` list."""
    for first in range(0, len(values), IN_LIST_PAGE):
        yield values[first : first + IN_LIST_PAGE]


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    SQLite keeps no zone, so values come back naive; this type stores UTC and hands back
    aware datetimes either way, so comparisons never mix naive and aware values.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass an aware UTC datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


# Connections kept open between uses. With SQLAlchemy's default (5), a burst of requests beside
# the controller opened and closed overflow connections all the time: 746 while a thousand jobs
# were submitted, each a new aiosqlite thread and its pragmas (on PostgreSQL a new session that
# prepares its statements again).
POOL_SIZE = 20


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An engine with the per-backend settings the server relies on."""
    # JSON columns (a job's spec, each task's TF_CONFIG) read with pydantic-core's parser:
    # the same values as the standard library's, decoded faster, and a
    # placement pass decodes tens of thousands of them.
    kwargs.setdefault("json_deserializer", from_json)
    kwargs.setdefault("pool_size", POOL_SIZE)
    if url.startswith("sqlite+aiosqlite"):
        kwargs.setdefault("module", sqlite_driver.dbapi())  # a statement is one trip
    if url.startswith("sqlite"):
        # One file, many readers: WAL lets the API read while ingest writes, and
        # busy_timeout makes a briefly locked database wait instead of failing.
        engine = create_async_engine(url, connect_args={"timeout": 30}, **kwargs)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(url, pool_pre_ping=True, **kwargs)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


class PublishingSession(Session):
    """The sync session behind the server's AsyncSessions (backend.app): listeners publish
    what its transactions commit (backend.streams.publishing) and tell the cluster board
    (backend.jobs.cluster_changes), when its info holds a broker or a board. Defined here, on
    the floor both stand on."""


def session_factory(
    engine: AsyncEngine,
    *,
    sync_session_class: type[Session] = Session,
    info: dict[str, Any] | None = None,
) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(
        engine,
        expire_on_commit=False,
        autoflush=False,
        sync_session_class=sync_session_class,
        info=info or {},
    )


async def session_scope(factory: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """Yield a session that rolls back whatever its user did not commit."""
    async with factory() as session:
        try:
            yield session
        finally:
            await session.rollback()


async def ping(*, session: AsyncSession) -> str:
    """Ask the database a trivial question (it raises when the database does not answer);
    the name of its dialect: sqlite or postgresql."""
    await session.execute(text("SELECT 1"))
    return session.get_bind().dialect.name


async def to_the_end(call: Awaitable[T]) -> T:
    """Await a database call to its end even when the awaiting task is cancelled meanwhile,
    then pass the cancellation on.

    Websocket handlers are cancelled when their client goes away, and anyio cancels again on
    every pass of the loop: a query cut off that way makes SQLAlchemy close its connection
    twice over, and aiosqlite can then wait forever on a worker thread that has already
    stopped, so that the event loop never finishes shutting down.
    """
    task = asyncio.ensure_future(call)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})  # unlike awaiting the task, never cancels it
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled
    return task.result()
