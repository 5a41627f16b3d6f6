"""The Spark session of the provider's jobs: Hive support on the configured metastore, in UTC."""

from __future__ import annotations

import os
from typing import Any


def metastore_conf(warehouse_dir: str, metastore_uri: str | None) -> dict[str, str]:
    """Spark settings for the Hive metastore: the thrift one at ``metastore_uri``, else an embedded Derby one.

    The embedded metastore lives at ``<warehouse_dir>/metastore_db``, by absolute path: a relative one would
    land in whatever directory the job started in. Derby admits one JVM at a time.
    """
    warehouse = os.path.abspath(warehouse_dir) if "://" not in warehouse_dir else warehouse_dir
    conf = {"spark.sql.catalogImplementation": "hive", "spark.sql.warehouse.dir": warehouse}
    if metastore_uri:
        conf["spark.hadoop.hive.metastore.uris"] = metastore_uri
    else:
        conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = (
            f"jdbc:derby:;databaseName={os.path.join(warehouse, 'metastore_db')};create=true")
    return conf


def hive_session(app_name: str, warehouse_dir: str, metastore_uri: str | None) -> Any:
    """The session, on the Spark context already started if there is one (the merge job starts it to read its
    job file)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    settings = metastore_conf(warehouse_dir, metastore_uri)
    for key, value in settings.items():
        builder = builder.config(key, value)
    context = SparkContext._active_spark_context
    if context is not None:
        # A started context no longer takes spark.hadoop.* from a builder: the Hive client reads them from the
        # context's Hadoop configuration.
        hadoop = context._jsc.hadoopConfiguration()
        for key, value in settings.items():
            if key.startswith("spark.hadoop."):
                hadoop.set(key.removeprefix("spark.hadoop."), value)
    # DATETIME values are written as UTC instants and read back in UTC, so they keep their wall clock.
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    # MySQL's calendar is the proleptic Gregorian one, as Arrow's and Spark's own: dates before 1582 are
    # neither rebased nor refused, in the capture files read and in the table's files written.
    for mode in ("datetimeRebaseModeInRead", "datetimeRebaseModeInWrite", "int96RebaseModeInRead",
                 "int96RebaseModeInWrite"):
        builder = builder.config(f"spark.sql.parquet.{mode}", "CORRECTED")
    return builder.enableHiveSupport().getOrCreate()
