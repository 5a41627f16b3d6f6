#!/bin/sh
# Runs one of the stack's JVM services from the jars pip pyspark ships, in the project's own image (the Spark
# master, the Spark worker, the Hive metastore): `spark-service.sh <class> <arguments>...`.
#
# SPARK_HOME is pyspark's folder, found with the image's python3: the interpreter the Airflow tasks run, and the one
# the worker's executors start their Python workers with, so the driver and the executors share Python 3.11 and
# the packages (pyarrow, pydantic, this provider). Set here, spark-class does not go looking for it.
# SPARK_CONF_DIR is an empty folder of this process's own: nothing of a spark-env.sh or spark-defaults.conf leaks in.
# SERVICE_JAVA_OPTS, when set, reaches the JVM through that folder's java-opts file: spark-class gives a class that
# is not one of Spark's daemons (the metastore) no *_OPTS variable, but it reads java-opts for every class.
set -eu
if [ "$#" -eq 0 ]; then
  echo "usage: $0 <main class> [arguments...]" >&2
  exit 2
fi
SPARK_HOME=$(python3 -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
SPARK_CONF_DIR=$(mktemp -d "${TMPDIR:-/tmp}/spark-conf.XXXXXX")
export SPARK_HOME SPARK_CONF_DIR
if [ -n "${SERVICE_JAVA_OPTS:-}" ]; then
  printf '%s\n' "$SERVICE_JAVA_OPTS" > "$SPARK_CONF_DIR/java-opts"
fi
exec "$SPARK_HOME/bin/spark-class" "$@"
