"""Declared column types (``coordinator.types``: DDL names) as Spark's."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from coordinator.types import Schema

_SPARK: dict[str, DataType] = {"string": StringType(), "long": LongType(), "int": IntegerType(),
                               "double": DoubleType(), "boolean": BooleanType(), "timestamp": TimestampType()}


def spark_type(name: str) -> DataType:
    if name.startswith("array<"):
        return ArrayType(spark_type(name[6:-1]), containsNull=False)
    return _SPARK[name]


def spark_schema(schema: Schema, nullable: bool = False) -> StructType:
    return StructType([StructField(c, spark_type(t), nullable) for c, t in schema])
