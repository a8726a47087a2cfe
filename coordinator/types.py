"""Column types of declared schemas (state, sinks), and what they are in Arrow and in SQL.

A declared type is a Python type (``str``, ``int`` (64-bit), ``float``, ``bool``,
``datetime.datetime`` (a timestamp: an instant, in microseconds), ``list[int]``) or a Spark DDL name;
it is kept as the DDL name, which every layer maps to its own type (``spark_jobs.records.spark_types``
to Spark's). No Spark here.
"""

from __future__ import annotations

import datetime
import types as _pytypes
from typing import get_args, get_origin

import pyarrow as pa
import sqlalchemy as sa

#: (column, DDL type) pairs, in order
Schema = tuple[tuple[str, str], ...]

_PYTHON = {str: "string", int: "long", float: "double", bool: "boolean", datetime.datetime: "timestamp"}
_ARROW = {"string": pa.string(), "long": pa.int64(), "int": pa.int32(), "double": pa.float64(),
          "boolean": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC")}
_SQL = {"string": sa.Text, "long": sa.BigInteger, "int": sa.Integer, "double": sa.Float(53),
        "boolean": sa.Boolean, "timestamp": sa.DateTime(timezone=True)}
#: the DDL names of the scalar types a column may be declared as (``array<...>`` of any of them too)
SCALARS = tuple(_ARROW)


def ddl(t: type | str | _pytypes.GenericAlias) -> str:
    """The DDL name of a declared type (ValueError naming it when it is none we know)."""
    if isinstance(t, str):
        name = t.strip().lower().replace(" ", "")
        if name in _ARROW or (name.startswith("array<") and ddl(name[6:-1])):
            return name
    elif t in _PYTHON:
        return _PYTHON[t]
    elif get_origin(t) is list and len(get_args(t)) == 1:
        return f"array<{ddl(get_args(t)[0])}>"
    raise ValueError(f"unsupported column type {t!r}: use str, int, float, bool, datetime, list[...] "
                     f"or one of {', '.join(sorted(_ARROW))}")


def arrow_type(name: str) -> pa.DataType:
    if name.startswith("array<"):
        return pa.list_(arrow_type(name[6:-1]))
    return _ARROW[name]


def arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([pa.field(c, arrow_type(t)) for c, t in schema])


def sql_type(name: str, where: str):
    if name not in _SQL:
        raise ValueError(f"{where}: a column of type {name} cannot go to a SQL table")
    return _SQL[name]
