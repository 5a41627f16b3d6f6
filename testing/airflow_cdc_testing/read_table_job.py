"""Read Hive tables through the metastore into local Parquet files: for the demo and the tests.

    spark-submit read_table_job.py [--time-zone ZONE] <warehouse_dir> <metastore_uri or ""> <database.table>
        <out.parquet> [...]

Beside each file it writes ``<out.parquet>.json`` with the table's location, as the metastore gives it. With
``--time-zone``, the session is in that zone, as a reader's there, and each timestamp column is written as the
text that reader sees (``yyyy-MM-dd HH:mm:ss.SSSSSS``).
"""

from __future__ import annotations

import json
import sys

import pyarrow.parquet as pq
from pyspark.sql.functions import date_format
from pyspark.sql.types import TimestampType

from airflow_cdc_provider.spark.names import column
from airflow_cdc_provider.spark.session import hive_session


def main(argv: list[str]) -> int:
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
