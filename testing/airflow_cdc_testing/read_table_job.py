"""Read Hive tables through the metastore into local Parquet files: for the demo and the tests.

    spark-submit read_table_job.py [--time-zone ZONE] <warehouse_dir> <metastore_uri or ""> <database.table>
        <out.parquet> [...]
    python -m airflow_cdc_testing.read_table_job --serve

Beside each file it writes ``<out.parquet>.json`` with the table's location, as the metastore gives it. With
``--time-zone``, the session is in that zone, as a reader's there, and each timestamp column is written as the
text that reader sees (``yyyy-MM-dd HH:mm:ss.SSSSSS``).

``--serve`` reads one request a line on stdin (the arguments above, as a JSON list) and answers each on stdout, all
in one driver JVM: each read has a Spark context of its own, stopped after it, and the embedded metastore's Derby
shut down, so that the jobs between two reads open it as before (Derby admits one JVM at a time). A read then costs
about 3 s instead of a new driver's 12 to 25 (its JVM, its classes, its compiler's warm-up).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql.functions import date_format
from pyspark.sql.types import TimestampType

from airflow_cdc_provider.spark.names import column
from airflow_cdc_provider.spark.session import hive_session, metastore_conf


def main(argv: list[str]) -> int:
    spark = read(argv)
    return 0 if spark is not None else 1


def read(argv: list[str]) -> Any:
    """Read the tables ``argv`` names; returns the session, still running."""
    zone = None
    if argv[1] == "--time-zone":
        zone, argv = argv[2], argv[:1] + argv[3:]
    warehouse_dir, metastore_uri, pairs = argv[1], argv[2], argv[3:]
    spark = hive_session("cdc-read", warehouse_dir, metastore_uri or None)
    if zone:
        spark.conf.set("spark.sql.session.timeZone", zone)
    for table, out in zip(pairs[::2], pairs[1::2]):
        details = {row[0]: row[1] for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()}
        frame = spark.table(table)
        if zone:
            frame = frame.select([date_format(column(f.name), "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(f.name)
                                  if isinstance(f.dataType, TimestampType) else column(f.name)
                                  for f in frame.schema])
        pq.write_table(frame.toArrow(), out)
        with open(f"{out}.json", "w") as meta:
            json.dump({"location": details.get("Location")}, meta)
    return spark


# SQLSTATEs of Derby's answer to a shutdown: done (08006), or the database was not booted in this JVM (XJ004).
_SHUT_DOWN = {"08006", "XJ004"}


def _release(spark: Any, argv: list[str]) -> None:
    """Stop the session's context and, for an embedded metastore, shut its Derby database down in this JVM."""
    jvm = spark._jvm
    spark.stop()
    args = argv[3:] if argv[1] == "--time-zone" else argv[1:]
    if args[1]:
        return  # a metastore service: nothing of it is held here
    url = metastore_conf(args[0], None)["spark.hadoop.javax.jdo.option.ConnectionURL"]
    from py4j.protocol import Py4JJavaError

    try:
        jvm.java.sql.DriverManager.getConnection(url.replace(";create=true", "") + ";shutdown=true")
    except Py4JJavaError as error:
        if error.java_exception.getSQLState() not in _SHUT_DOWN:
            raise


def serve() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the JVM and Spark print to stdout too: only the answers go to the requester
    for line in sys.stdin:
        argv = ["read_table_job", *json.loads(line)]
        spark = None
        try:
            spark = read(argv)
            answer: dict[str, str] = {}
        except Exception:
            answer = {"error": traceback.format_exc()}
        finally:
            if spark is None:
                from pyspark.sql import SparkSession

                spark = SparkSession.getActiveSession()
            if spark is not None:
                try:
                    _release(spark, argv)
                except Exception:
                    answer = {"error": traceback.format_exc()}
        answers.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        sys.exit(main(sys.argv))
