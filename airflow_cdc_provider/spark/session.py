"""The Spark session of the provider's jobs: Hive support on the configured metastore, in UTC."""

from __future__ import annotations

import os
import re
import sys
from typing import Any

_PY4J_ZIP = re.compile(r"py4j-(?P<version>[^/\\]+)-src\.zip$")


def own_zips_dropped(path: list[str], pyspark_dir: str | None, py4j_version: str | None) -> list[str]:
    """``path`` (a ``sys.path``) less the zips of pyspark and py4j that spark-submit puts first on it, where those
    zips are the installed pyspark's own (inside ``pyspark_dir``, the installed package: pip's pyspark, which is its
    own SPARK_HOME) and, for py4j's, the installed py4j is of the zip's version (``py4j_version``).

    The code is the same files either way; but a zip's modules have no cached bytecode, and every application
    compiled pyspark's again: importing what the jobs use took 2.1 s of CPU from the zip, 0.45 s installed. A
    Spark installed apart (a cluster's SPARK_HOME) keeps its zips first, as spark-submit means."""
    if pyspark_dir is None:
        return path
    inside = os.path.realpath(pyspark_dir) + os.sep

    def own(entry: str) -> bool:
        if not os.path.realpath(entry).startswith(inside):
            return False
        if entry.endswith("pyspark.zip"):
            return True
        py4j = _PY4J_ZIP.search(entry)
        return py4j is not None and py4j.group("version") == py4j_version

    return [entry for entry in path if not own(entry)]


def prefer_installed_pyspark() -> None:
    """Import pyspark and py4j from their installed packages when spark-submit's zips are those packages' own
    (``own_zips_dropped``): called by each job before it first imports pyspark."""
    if "pyspark" in sys.modules:
        return
    installed = next((os.path.join(entry, "pyspark") for entry in sys.path
                      if not entry.endswith(".zip") and os.path.isfile(os.path.join(entry, "pyspark", "__init__.py"))),
                     None)
    from importlib.metadata import PackageNotFoundError, version

    try:
        py4j_version: str | None = version("py4j")
    except PackageNotFoundError:  # none installed: its zip stays
        py4j_version = None
    sys.path[:] = own_zips_dropped(sys.path, installed, py4j_version)


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
