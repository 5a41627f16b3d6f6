"""One version of a partitioned Hive table, committed for readers in one metastore call: what is asked, what is
checked before anything is touched, and what was done.

A commit names each partition it changes by its partition values (the metastore's texts, ``metastore_value``;
the NULL partition as ``__HIVE_DEFAULT_PARTITION__``) and gives its new location: a rewritten partition's new
directory, a new partition's directory, or none for a partition the run emptied. The Spark side
(``spark.partition_commit``) adds the new partitions over empty directories, then switches every changed
partition in one ``alter_partitions`` call, which the metastore runs in one transaction.
"""

from __future__ import annotations

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.model import Model
from airflow_cdc_provider.core.workdir import location_problem, within

# The value the metastore keeps for a NULL (or empty) partition value; Spark and Trino read it as NULL.
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"


class PartitionCommitRefused(CdcError, ValueError):
    """A commit of partitions was refused before anything was touched: it names what is wrong and what to do."""


class PartitionChange(Model):
    """One partition a commit changes: its values, column by column in the table's order, and its new location,
    or None when the run emptied it (it is then pointed at an empty directory of its own)."""

    values: tuple[tuple[str, str], ...]
    location: str | None = None


class PartitionSwitch(Model):
    """A partition as the commit left it: its location before (None: it did not exist) and after."""

    values: tuple[tuple[str, str], ...]
    before: str | None
    after: str
    emptied: bool = False


class PartitionCommit(Model):
    """What one commit did: the partitions it added (over an empty directory first), and every partition it
    switched, in the one ``alter_partitions`` call."""

    database: str
    table: str
    added: tuple[tuple[tuple[str, str], ...], ...]
    switched: tuple[PartitionSwitch, ...]


def partition_name(values: tuple[tuple[str, str], ...]) -> str:
    """``dt=2026-11-25`` for messages (not escaped: never a path)."""
    return "/".join(f"{column}={value}" for column, value in values)


def commit_problems(changes: tuple[PartitionChange, ...], partition_columns: tuple[str, ...],
                    warehouse_dir: str, empty_root: str, table: str) -> list[str]:
    """Why the commit of ``changes`` to ``table`` (partitioned by ``partition_columns``) cannot go ahead: each
    problem with the value and what to do; empty if none. Nothing is touched before this is empty."""
    problems = []
    if not partition_columns:
        problems.append(f"The table {table} is not partitioned: a partition commit needs a partitioned table.")
    if not changes:
        problems.append(f"The commit to {table} names no partition: give at least one partition to change.")
    for what, location in [("empty-directory root", empty_root)] + [
            (f"location of the partition {partition_name(c.values)}", c.location) for c in changes
            if c.location is not None]:
        problem = location_problem(location, what)
        if problem is None and not within(location, warehouse_dir):
            problem = (f"The {what} {location} is not under the warehouse {warehouse_dir}: the job writes and "
                       "points partitions only there. Keep the table's partitions in the warehouse.")
        if problem:
            problems.append(problem)
    seen: set[tuple[tuple[str, str], ...]] = set()
    for change in changes:
        columns = tuple(column for column, _ in change.values)
        if columns != partition_columns:
            problems.append(f"The partition {partition_name(change.values)} of {table} names the columns "
                            f"{list(columns)}; the table is partitioned by {list(partition_columns)}, in that order.")
        for column, value in change.values:
            if not value:
                problems.append(f"The partition {partition_name(change.values)} of {table} has an empty value for "
                                f"{column}: write {DEFAULT_PARTITION} for the NULL partition.")
        if change.values in seen:
            problems.append(f"The partition {partition_name(change.values)} of {table} is named twice: give each "
                            "partition once.")
        seen.add(change.values)
    return problems
