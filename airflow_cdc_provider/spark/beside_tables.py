"""The tables a table's commits keep beside it (its changelog, daily snapshots and SCD2 history): made in the
metastore when missing, and kept to the table's columns."""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.spark.names import columns_ddl


def ensure_beside_table(spark: Any, database: str, table: str, columns: list[tuple[str, str]],
                        partition_columns: list[tuple[str, str]], root: str) -> bool:
    """Make the table if missing: ``columns`` (the table's, and the beside table's own), partitioned by
    ``partition_columns``, EXTERNAL at ``root``. An existing one gets the columns it lacks. A column whose type
    changed, or other partition columns, cannot be changed in place: the table is then defined anew (EXTERNAL: no
    file goes) and the caller's partitions start again from the version being committed. Returns whether it was
    (re)made."""
    name = f"{quote_identifier(database)}.{quote_identifier(table)}"
    if spark.catalog.tableExists(f"{database}.{table}"):
        schema = spark.table(f"{database}.{table}").schema
        held = {f.name: f.dataType.simpleString() for f in schema}
        held_partitions = [(f.name, f.dataType.simpleString()) for f in schema][-len(partition_columns):]
        if not any(n in held and held[n] != hive for n, hive in columns) and held_partitions == partition_columns:
            missing = [(n, hive) for n, hive in columns if n not in held]
            if missing:
                spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({columns_ddl(missing)})")
            return False
        print(f"cdc-merge: {database}.{table} is defined anew (the table's column types or partitioning changed); "
              "its partitions start again from this version", flush=True)
        spark.sql(f"DROP TABLE {name}")
    if "'" in root or "\\" in root:
        raise ValueError(f"The path {root!r} holds a quote or a backslash; choose a warehouse_dir without them.")
    spark.sql(f"CREATE TABLE {name} ({columns_ddl(columns)}) PARTITIONED BY ({columns_ddl(partition_columns)}) "
              f"STORED AS PARQUET LOCATION '{root}'")
    return True
