"""Daily snapshot partitions on Spark (``core.history``): each day's partition is a version's own directory, or
for a partitioned table one partition per partition of that version, at its own directory. No row is copied."""

from __future__ import annotations

import re
from typing import Any

from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.core.merge import EMPTY_PARTITIONS
from airflow_cdc_provider.core.partitioning import Partitioning
from airflow_cdc_provider.spark.names import columns_ddl
from airflow_cdc_provider.spark.partition_commit import Values, add_partitions

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def day_partitions(day_column: str, day: str, layout: Partitioning | None, location: str,
                   partitions: tuple[tuple[str, str], ...]) -> list[tuple[Values, str]]:
    """The partitions of the snapshots table that make day ``day`` the version at ``location`` (its directory)
    with ``partitions`` (a partitioned version's partitions and their locations): one, or one per partition that
    holds rows (an emptied partition is left out: it has none)."""
    if not _DAY.fullmatch(day):
        raise ValueError(f"The snapshot day {day!r} is not YYYY-MM-DD.")
    if layout is None:
        return [(((day_column, day),), location)]
    return [(((day_column, day), (layout.column, value)), where) for value, where in partitions
            if f"/{EMPTY_PARTITIONS}/" not in where]


def ensure_table(spark: Any, database: str, table: str, columns: list[tuple[str, str]], day_column: str,
                 layout: Partitioning | None, root: str) -> bool:
    """Make the snapshots table if missing, with the table's columns, partitioned by the day (and the table's own
    partition column); add the columns it lacks. A column whose type changed, or another partitioning, cannot be
    changed in place: the table is then defined anew (EXTERNAL: no file goes) and its days start again. Returns
    whether it was (re)made."""
    name = f"{quote_identifier(database)}.{quote_identifier(table)}"
    partition_columns = [(day_column, "string")] + ([(layout.column, layout.hive_type)] if layout else [])
    if spark.catalog.tableExists(f"{database}.{table}"):
        schema = spark.table(f"{database}.{table}").schema
        held = {f.name: f.dataType.simpleString() for f in schema}
        wanted_partitions = [name for name, _ in partition_columns]
        held_partitions = [f.name for f in schema][-len(wanted_partitions):]
        changed = any(n in held and held[n] != hive for n, hive in columns) or held_partitions != wanted_partitions
        if not changed:
            missing = [(n, hive) for n, hive in columns if n not in held]
            if missing:
                spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({columns_ddl(missing)})")
            return False
        print(f"cdc-merge: {database}.{table} is defined anew (the table's columns or partitioning changed); its "
              "days start again", flush=True)
        spark.sql(f"DROP TABLE {name}")
    if "'" in root or "\\" in root:
        raise ValueError(f"The path {root!r} holds a quote or a backslash; choose a warehouse_dir without them.")
    spark.sql(f"CREATE TABLE {name} ({columns_ddl(columns)}) PARTITIONED BY ({columns_ddl(partition_columns)}) "
              f"STORED AS PARQUET LOCATION '{root}'")
    return True


def sync_days(spark: Any, database: str, table: str, day_column: str, added: list[tuple[Values, str]],
              dropped: tuple[str, ...], warehouse_dir: str) -> None:
    """Add a version's day partitions (one metastore transaction) and drop the days past the retention:
    both idempotent, so that a commit whose job died before this is completed by the next merge."""
    add_partitions(spark, database, table, added, warehouse_dir)
    name = f"{quote_identifier(database)}.{quote_identifier(table)}"
    for day in dropped:
        if not _DAY.fullmatch(day):
            raise ValueError(f"The snapshot day {day!r} is not YYYY-MM-DD.")
        # A partial spec drops every partition of the day, as one statement per day.
        spark.sql(f"ALTER TABLE {name} DROP IF EXISTS PARTITION ({quote_identifier(day_column)} = '{day}')")
