"""The Hive table of shards (``core.shards``), as a shard's merge sees it: partitioned by the shard columns, each
shard's partition pointed at the shard's own versions.

What is the table's alone (its being, its columns) is made by whichever shard's merge needs it first, and may race
with another group's: each step is checked again after a refusal, and goes on when the other made what it wanted.
"""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.core.ledger import LedgerConflict
from airflow_cdc_provider.core.merge import MergeSpec
from airflow_cdc_provider.core.shards import SHARD_PARTITION_TYPE, Shard
from airflow_cdc_provider.spark.names import columns_ddl, path_literal
from airflow_cdc_provider.spark.partition_commit import partition_columns


def _shard(spec: MergeSpec) -> Shard:
    if spec.shard is None:
        raise ValueError(f"{spec.source} is no shard.")
    return spec.shard


def check_partitioning(spark: Any, spec: MergeSpec) -> None:
    """Refuse a Hive table that exists but is not partitioned by the shard's columns: another table of the same
    name, or shards whose groups disagree on naming their servers."""
    shard = _shard(spec)
    have = partition_columns(spark, spec.database, spec.table)
    if have != shard.columns:
        raise LedgerConflict(
            f"The Hive table {spec.database}.{spec.table} is partitioned by {list(have) or 'nothing'}, but "
            f"{spec.source} is a shard of it, partitioned by {list(shard.columns)}. Every group writing its shards "
            "into one Hive table names its server (`shards: {server: name}`), or none does; a table of another kind "
            "needs another `target:`.")


def table_columns(spark: Any, spec: MergeSpec) -> list[tuple[str, str]]:
    """The Hive table's columns but the shard columns: every shard's, as the table holds them."""
    held = set(_shard(spec).columns)
    return [(f.name, f.dataType.simpleString()) for f in spark.table(f"{spec.database}.{spec.table}").schema
            if f.name not in held]


def ensure_table(spark: Any, spec: MergeSpec, columns: list[tuple[str, str]], root: str) -> None:
    """The Hive table made, at ``root``, if no shard's merge made it yet, and given every column of ``columns`` it
    lacks (after the others: a shard's rows lack the columns only other shards have, and read as NULL there).
    A column both have with two types is refused: Hive holds one type a column, and the shards' rows would not
    read."""
    name = f"{spec.database}.{spec.table}"
    shard = _shard(spec)
    if not spark.catalog.tableExists(name):
        partitioned = columns_ddl([(c, SHARD_PARTITION_TYPE) for c in shard.columns])
        try:
            spark.sql(f"CREATE TABLE {spec.qualified_table} ({columns_ddl(columns)}) PARTITIONED BY ({partitioned}) "
                      f"STORED AS PARQUET LOCATION '{path_literal(root)}'")
        except Exception:
            if not spark.catalog.tableExists(name):  # not another group's run making it meanwhile
                raise
    check_partitioning(spark, spec)
    for attempt in range(3):
        have = dict(table_columns(spark, spec))
        clash = [(c, t, have[c]) for c, t in columns if c in have and have[c] != t]
        if clash:
            raise LedgerConflict(
                f"The Hive table {name} holds the column(s) " + ", ".join(f"{c} as {h}" for c, _, h in clash) +
                f", but the shard {spec.source} has them as " + ", ".join(t for _, t, _ in clash) +
                ": Hive holds one type a column, for every shard. Give the shards the same column types at the "
                "source. Nothing was changed.")
        missing = [(c, t) for c, t in columns if c not in have]
        if not missing:
            return
        try:
            spark.sql(f"ALTER TABLE {spec.qualified_table} ADD COLUMNS ({columns_ddl(missing)})")
            print(f"cdc-merge: added the columns {missing} to {name}", flush=True)
            return
        except Exception:
            if attempt == 2:  # another group's run adding the same columns meanwhile is seen on the next look
                raise
            spark.catalog.refreshTable(name)
