"""A version's changes on Spark (``core.changelog``): computed beside the merge, written before its commit, added
to the changelog table after it."""

from __future__ import annotations

import datetime as dt
import re
from functools import reduce
from typing import Any

from airflow_cdc_provider.core.changelog import (
    CHANGE_COLUMNS,
    DELETE,
    INSERT,
    POSITION_COLUMNS,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
    VERSION_COLUMN,
    ChangelogCommit,
    ChangelogSpec,
)
from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.core.watermark import split_binlog_file
from airflow_cdc_provider.spark.beside_tables import ensure_beside_table
from airflow_cdc_provider.spark.files import HadoopFiles
from airflow_cdc_provider.spark.names import column

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_UPSERT = "cdc,upsert"  # in a key's last change: True for an upsert, False for a delete
_HAD = "cdc,had"  # in the rows before: always True, so that a row of the full join without one has NULL


def last_changes(frames: list[tuple[Any, bool]], columns: list[tuple[str, str]]) -> Any:
    """Each changed key's last change in the range, as ``columns`` plus ``cdc,upsert`` and the positions: the
    upsert files' rows (``True``) and the delete file's keys (``False``, their other columns NULL). ``frames``:
    each capture file read as Hive columns, with whatever position columns it has, and whether it holds upserts.
    Replay writes each key once, in one file or the other; a snapshot's or a re-read's rows have no position."""
    from pyspark.sql.functions import lit

    out = []
    for frame, upsert in frames:
        have = set(frame.columns)
        out.append(frame.select(
            [column(name) if name in have else lit(None).cast(hive).alias(name) for name, hive in columns]
            + [lit(upsert).alias(_UPSERT)]
            + [(column(p) if p in have else lit(None)).cast("bigint").alias(p) for p in POSITION_COLUMNS]))
    return reduce(lambda a, b: a.unionByName(b), out)


def net_changes(before: Any | None, last: Any, key: list[str], columns: list[tuple[str, str]],
                first_load: bool, looked_up: bool = False, gone: Any | None = None) -> Any:
    """The rows of the changelog (``columns``, ``_change_type``, positions) that take the table from ``before``
    to what ``last`` makes of it: a key in both whose row differs is an ``update_preimage`` and an
    ``update_postimage``, a key only before (or deleted) a ``delete``, a key only after an ``insert``; a key
    whose row is the same, or inserted then deleted, none. ``before``: the rows the keys of ``last`` (and any
    others that go, such as a repaired bucket's) have in the version the table is at; None for a first load,
    whose every row is an insert (``first_load`` False: none at all).

    One join, its rows exploded into one or two images each: every row is read once. ``looked_up``: ``before``
    holds only rows whose key ``last`` has (a merge looked them up in its version), so ``last``'s left outer join
    with them pairs every row; given persisted and counted, Spark knows how few they are and broadcasts them,
    where a full outer join shuffles both sides (twice the changes' cost on a table of a million rows at 1%).
    Otherwise (a load compared with the version before: both sides are whole tables) a full outer join.
    ``gone``: rows of the version that go without a change of their own (a repaired bucket's), each a
    ``delete``."""
    from pyspark.sql.functions import array, coalesce, explode, lit, struct, when

    names = [name for name, _ in columns]
    positions = [column(p) for p in POSITION_COLUMNS]
    if before is None:
        rows = last.where(column(_UPSERT)) if first_load else last.where(lit(False))
        return rows.select([column(n) for n in names] + [lit(INSERT).alias("_change_type")] + positions)
    at = {name: i for i, name in enumerate(names)}
    # Both sides renamed to names holding a comma, which no column of the table can hold: each side's names
    # then mean that side only, whatever the table's own names are.
    was = before.select([column(n).alias(f"cdc,b,{i}") for i, n in enumerate(names)] + [lit(True).alias(_HAD)])
    now = last.select([column(n).alias(f"cdc,a,{i}") for i, n in enumerate(names)] + [column(_UPSERT)] + positions)
    match = reduce(lambda x, y: x & y, [column(f"cdc,b,{at[k]}").eqNullSafe(column(f"cdc,a,{at[k]}")) for k in key])
    joined = now.join(was, match, "left_outer") if looked_up else was.join(now, match, "full_outer")
    if gone is not None:
        joined = joined.unionByName(
            gone.select([column(n).alias(f"cdc,b,{i}") for i, n in enumerate(names)] + [lit(True).alias(_HAD)]),
            allowMissingColumns=True)
    had = column(_HAD).isNotNull()
    upsert = coalesce(column(_UPSERT), lit(False))
    same = reduce(lambda x, y: x & y,
                  [column(f"cdc,b,{i}").eqNullSafe(column(f"cdc,a,{i}")) for i in range(len(names))])
    kind = when(had & upsert & ~same, "update").when(had & ~upsert, DELETE).when(~had & upsert, INSERT)
    joined = joined.select("*", kind.alias("cdc,kind")).where(column("cdc,kind").isNotNull())
    is_update = column("cdc,kind") == "update"

    def image(side: str, change: Any) -> Any:
        return struct(change.alias("_change_type"), *[column(f"cdc,{side},{i}").alias(n) for i, n in enumerate(names)])

    pre = image("b", when(is_update, lit(UPDATE_PREIMAGE)).otherwise(lit(DELETE)))
    post = image("a", when(is_update, lit(UPDATE_POSTIMAGE)).otherwise(lit(INSERT)))
    images = when(is_update, array(pre, post)).when(column("cdc,kind") == INSERT, array(post)).otherwise(array(pre))
    exploded = joined.select(explode(images).alias("cdc,image"), *positions)
    image_of = column("cdc,image")
    return exploded.select([image_of.getField(n).alias(n) for n in names] + [image_of.getField("_change_type")
                                                                             .alias("_change_type")] + positions)


def changelog_rows(changes: Any, columns: list[tuple[str, str]], binlog_file: str | None,
                   committed_at: dt.datetime) -> Any:
    """``net_changes``'s rows as the changelog table's files hold them: the table's columns, then
    ``CHANGE_COLUMNS``; the binlog file named from its sequence number as the range's end names its own (none for
    changes found without the binlog, ``binlog_file`` None)."""
    from pyspark.sql.functions import concat, lit, lpad, when

    base, _ = split_binlog_file(binlog_file) if binlog_file else ("", 0)
    width = len(binlog_file.rsplit(".", 1)[1]) if binlog_file else 0
    seq = column(POSITION_COLUMNS[0]) if binlog_file else lit(None)
    values = {
        "_change_type": column("_change_type"),
        # Net changes are one per key, in no order among themselves; every event has its place in binlog order.
        "_change_ordinal": column("_change_ordinal") if "_change_ordinal" in changes.columns else lit(None),
        "_commit_timestamp": lit(committed_at),
        "_source_file": when(seq.isNotNull(), concat(lit(f"{base}."), lpad(seq.cast("string"), width, "0"))),
        "_source_position": column(POSITION_COLUMNS[1]),
        "_source_row": column(POSITION_COLUMNS[2]),
    }
    return changes.select([column(name).cast(hive).alias(name) for name, hive in columns]
                          + [values[name].cast(hive).alias(name) for name, hive in CHANGE_COLUMNS])


def changelog_root(files: HadoopFiles, table_root: str, spec: ChangelogSpec) -> str:
    """The changelog table's directory: beside the table's own, in the database's."""
    return f"{files.parent(table_root)}/{spec.table}"


def register(spark: Any, database: str, commit: ChangelogCommit, root: str, columns: list[tuple[str, str]],
             version: int) -> None:
    """Add a version's changelog partition to the changelog table (made if missing, given the table's columns
    it lacks): idempotent, so any merge after a commit whose job died before it can add it again.

    A column whose type the table no longer has (a fresh snapshot redefined it) cannot be changed in place: the
    changelog table is then defined again, from this version on. It is EXTERNAL (it has a LOCATION): the older
    partitions' files stay where they are."""
    if not _DAY.fullmatch(commit.day):
        raise ValueError(f"The changelog day {commit.day!r} of version {version} is not YYYY-MM-DD.")
    table = f"{quote_identifier(database)}.{quote_identifier(commit.table)}"
    day = quote_identifier(commit.day_column)
    ensure_beside_table(spark, database, commit.table, [*columns, *CHANGE_COLUMNS],
                        [(commit.day_column, "string"), (VERSION_COLUMN, "bigint")], literal(root))
    spark.sql(f"ALTER TABLE {table} ADD IF NOT EXISTS PARTITION ({day} = '{commit.day}', "
              f"{quote_identifier(VERSION_COLUMN)} = {int(version)}) LOCATION '{literal(commit.location)}'")


def registered(spark: Any, database: str, commit: ChangelogCommit, version: int) -> bool:
    """Whether the changelog table lists the version's partition."""
    if not spark.catalog.tableExists(f"{database}.{commit.table}") or not _DAY.fullmatch(commit.day):
        return False
    table = f"{quote_identifier(database)}.{quote_identifier(commit.table)}"
    found = spark.sql(f"SHOW PARTITIONS {table} PARTITION ({quote_identifier(commit.day_column)} = '{commit.day}', "
                      f"{quote_identifier(VERSION_COLUMN)} = {int(version)})").collect()
    return bool(found)


def literal(text: str) -> str:
    if "'" in text or "\\" in text:
        raise ValueError(f"The path {text!r} holds a quote or a backslash; choose a warehouse_dir without them.")
    return text
