"""The Python worker daemon of a local-mode run (``spark.python.daemon.module``, set by
``spark_jobs.python_path.daemon_confs``): PySpark's own daemon, with the installed pyspark ahead of Spark's
zip on the path (``spark_jobs.python_path``), so that every worker it forks imports pyspark's bytecode
instead of compiling it.

Local mode only: there the workers run the driver's interpreter, where this project is installed. A cluster's
executors start PySpark's default daemon, which needs nothing of this project before a task arrives.
"""

import spark_jobs.python_path  # noqa: F401 - first: before pyspark is imported

from pyspark.daemon import manager

if __name__ == "__main__":
    manager()
