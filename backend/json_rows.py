"""Many rows read as one: a query's rows aggregated into a single JSON array of arrays.

Python's sqlite3 lets go of the interpreter lock around every row it steps and must take it
back for the next. While the event loop's thread is busy (agents' frames), each retake can
wait up to a switch interval, so a page of fifty jobs and their five hundred tasks waited five
hundred times. Aggregated in SQL, the same page is one row: one wait at most.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic_core import from_json
from sqlalchemy import JSON, ColumnElement, String
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from backend.db import UTCDateTime


class JsonRows(FunctionElement[str]):
    """Every row's columns as one JSON array (one element per row, each an array of the
    columns in order); `decode` reads it back as dicts keyed as given. JSON columns are
    embedded as values and UTC timestamps as ISO text; row order is not kept."""

    name = "json_rows"
    type = String()
    inherit_cache = True  # the SQL depends on the columns alone; the keys only on decoding

    def __init__(self, columns: Mapping[str, ColumnElement[Any]]) -> None:
        super().__init__(*columns.values())
        self.keys = tuple(columns)
        self._timestamps = frozenset(
            key for key, column in columns.items() if isinstance(column.type, UTCDateTime)
        )

    def decode(self, value: str | bytes | list[list[Any]]) -> list[dict[str, Any]]:
        """The rows, each a dict of the keys given, timestamps as aware UTC datetimes."""
        # SQLite hands back the text; asyncpg's codec for json has parsed it already.
        values = from_json(value) if isinstance(value, str | bytes) else value
        rows = [dict(zip(self.keys, row, strict=True)) for row in values]
        for key in self._timestamps:
            for row in rows:
                if row[key] is not None:
                    row[key] = datetime.fromisoformat(row[key]).replace(tzinfo=UTC)
        return rows


@compiles(JsonRows, "sqlite")
def _on_sqlite(element: JsonRows, compiler: SQLCompiler, **kw: Any) -> str:
    values = []
    for column in element.clauses:
        sql = compiler.process(column, **kw)
        # A JSON column is text there: json() embeds its value rather than a string of it.
        values.append(f"json({sql})" if isinstance(column.type, JSON) else sql)
    return f"json_group_array(json_array({', '.join(values)}))"


@compiles(JsonRows, "postgresql")
def _on_postgresql(element: JsonRows, compiler: SQLCompiler, **kw: Any) -> str:
    values = []
    for column in element.clauses:
        sql = compiler.process(column, **kw)
        # In the session's zone otherwise; naive UTC reads back the same as on SQLite.
        is_timestamp = isinstance(column.type, UTCDateTime)
        values.append(f"({sql} AT TIME ZONE 'UTC')" if is_timestamp else sql)
    # json_agg of no rows is NULL, not an empty array.
    return f"coalesce(json_agg(json_build_array({', '.join(values)})), '[]'::json)"
