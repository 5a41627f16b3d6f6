"""Read a Hive table through the metastore into one local Parquet file: for the demo and the tests.

    spark-submit read_table_job.py <warehouse_dir> <metastore_uri or ""> <database.table> <out.parquet>

Beside the rows it writes ``<out.parquet>.json`` with the table's location, as the metastore gives it.
"""

from __future__ import annotations

import json
import sys

import pyarrow.parquet as pq

from airflow_cdc_provider.spark.session import hive_session


def main(argv: list[str]) -> int:
    warehouse_dir, metastore_uri, table, out = argv[1:5]
    spark = hive_session(f"cdc-read {table}", warehouse_dir, metastore_uri or None)
    location = {row[0]: row[1] for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()}.get("Location")
    pq.write_table(spark.table(table).toArrow(), out)
    with open(f"{out}.json", "w") as meta:
        json.dump({"location": location}, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
