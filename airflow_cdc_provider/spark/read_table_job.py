"""Read Hive tables through the metastore into local Parquet files: for the demo and the tests.

    spark-submit read_table_job.py <warehouse_dir> <metastore_uri or ""> <database.table> <out.parquet> [...]

Beside each file it writes ``<out.parquet>.json`` with the table's location, as the metastore gives it.
"""

from __future__ import annotations

import json
import sys

import pyarrow.parquet as pq

from airflow_cdc_provider.spark.session import hive_session


def main(argv: list[str]) -> int:
    warehouse_dir, metastore_uri, pairs = argv[1], argv[2], argv[3:]
    spark = hive_session("cdc-read", warehouse_dir, metastore_uri or None)
    for table, out in zip(pairs[::2], pairs[1::2]):
        details = {row[0]: row[1] for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()}
        pq.write_table(spark.table(table).toArrow(), out)
        with open(f"{out}.json", "w") as meta:
            json.dump({"location": details.get("Location")}, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
