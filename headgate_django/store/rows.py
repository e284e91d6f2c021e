"""Convert between Python values and raw SQL parameters/results through the model fields,
so hand-written SQL stores and reads exactly what the ORM would."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.models import Job

_Converter = Callable[[Any, Any, BaseDatabaseWrapper], Any]


def job_field(name: str) -> Any:
    return Job._meta.get_field(name)


def prep(conn: BaseDatabaseWrapper, name: str, value: Any) -> Any:
    """A Python value as the database parameter for column ``name``."""
    return job_field(name).get_db_prep_save(value, connection=conn)


class RowReader:
    """Applies the converters of ``columns`` to rows of a raw query (cached per connection)."""

    _cache: dict[tuple[str, tuple[str, ...]], RowReader] = {}

    def __init__(self, conn: BaseDatabaseWrapper, columns: Sequence[str]) -> None:
        self.conn = conn
        self.columns = tuple(columns)
        self._plan: list[tuple[int, Any, list[_Converter]]] = []
        for index, name in enumerate(self.columns):
            field = job_field(name)
            col = field.get_col(Job._meta.db_table)
            converters = conn.ops.get_db_converters(col) + field.get_db_converters(conn)
            if converters:
                self._plan.append((index, col, converters))

    @classmethod
    def get(cls, conn: BaseDatabaseWrapper, columns: Sequence[str]) -> RowReader:
        key = (conn.alias + ":" + conn.vendor, tuple(columns))
        reader = cls._cache.get(key)
        if reader is None:
            reader = cls._cache[key] = cls(conn, columns)
        return reader

    def convert(self, row: Sequence[Any]) -> list[Any]:
        """The row's values, converted, in the order of ``columns``."""
        values = list(row)
        for index, col, converters in self._plan:
            value = values[index]
            for converter in converters:
                value = converter(value, col, self.conn)
            values[index] = value
        return values

    def read(self, row: Sequence[Any]) -> dict[str, Any]:
        """The row as ``{column: converted value}``."""
        return dict(zip(self.columns, self.convert(row), strict=True))
