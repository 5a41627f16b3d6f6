"""Daily snapshot partitions on Spark (``core.history``): each day's partition is a version's own directory, or
for a partitioned table one partition per partition of that version, at its own directory. No row is copied."""

from __future__ import annotations

import re
from typing import Any

from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.core.merge import EMPTY_PARTITIONS
from airflow_cdc_provider.core.partitioning import Partitioning
from airflow_cdc_provider.spark.beside_tables import ensure_beside_table
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
    partition column), as ``ensure_beside_table`` does; a table made anew starts its days again. Returns whether
    it was (re)made."""
    partition_columns = [(day_column, "string")] + ([(layout.column, layout.hive_type)] if layout else [])
    return ensure_beside_table(spark, database, table, columns, partition_columns, root)


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
