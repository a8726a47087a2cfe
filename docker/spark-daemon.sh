#!/usr/bin/env bash
# Run a Spark standalone daemon in the foreground, from the pyspark package's Spark:
#   spark-daemon.sh org.apache.spark.deploy.master.Master --host spark-master ...
#   spark-daemon.sh org.apache.spark.deploy.worker.Worker ... spark://spark-master:7077
set -euo pipefail
SPARK_HOME="$(python -c 'from pyspark.find_spark_home import _find_spark_home; print(_find_spark_home())')"
export SPARK_HOME
exec "${SPARK_HOME}/bin/spark-class" "$@"
