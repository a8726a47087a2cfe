"""Spark operators of the reference jobs, one module per job."""

from __future__ import annotations

from spark_jobs.operators.base import SparkOperators
from spark_jobs.operators.connected_components import ConnectedComponentsOperators
from spark_jobs.operators.wordcount import WordcountOperators

OPERATORS: dict[str, SparkOperators] = {
    "wordcount": WordcountOperators(),
    "connected_components": ConnectedComponentsOperators(),
}
