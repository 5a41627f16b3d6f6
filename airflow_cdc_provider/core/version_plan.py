"""What the merge will do to one table, decided before Spark reads a row: ``plan_version``.

The merge job finds the table as the metastore has it (its version file, its columns), and hands that here. What
comes back says every choice the job then carries out: whether it loads the table, merges onto a version or leaves
it; the new version's columns, those added in place and whether the table is defined again; whether the tables
beside it start again; which partitions a partitioned table rewrites whole; and how the commit points readers at
the new version. Each refusal (a layout or a zone the version was not written for, a column Hive cannot change in
place) is raised here, before anything is written.
"""

from __future__ import annotations

from enum import StrEnum

from airflow_cdc_provider.core.ledger import LedgerConflict, Origin, VersionInfo, choose_origin
from airflow_cdc_provider.core.merge import MergeSpec, check_datetime_zone, check_layout, next_columns
from airflow_cdc_provider.core.model import Model
from airflow_cdc_provider.core.modes import Action, Mode

Columns = tuple[tuple[str, str], ...]  # (Hive name, Hive type)


class Switch(StrEnum):
    """How the commit points readers at the new version."""

    CREATE = "create"  # no table yet, or one defined again: CREATE TABLE ... LOCATION
    ALTER = "alter"  # ALTER TABLE ... SET LOCATION (a partitioned table's partitions switched first)
    SHARD = "shard"  # the shard's partition of the shared table pointed at it: no other shard's is touched


class VersionPlan(Model):
    """What the merge does to one table (``plan_version``)."""

    action: Action
    reason: str
    origin_version: int | None = None  # the version merged onto (``Action.MERGE``)
    columns: Columns = ()  # the new version's, in the table's order
    added: Columns = ()  # columns added in place, after the switch (ALTER TABLE ... ADD COLUMNS)
    redefine: bool = False  # the table dropped and created again: a load with other columns or another layout
    # The changelog and the SCD2 history start again: a first version, or one whose columns' types changed.
    anew: bool = False
    # Columns added in the range, and the columns each takes its values from in rows that predate it (a rename's
    # old name); their constants are in the fills file, or (a heal) the rows hold NULL there.
    filled: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # A partitioned table: every partition it has is rewritten (a load, or columns filled in every row), not only
    # those the run's rows land in or leave.
    every_partition: bool = False
    switch: Switch = Switch.ALTER

    @property
    def writes(self) -> bool:
        return self.action is not Action.SKIP

    @property
    def merges(self) -> bool:
        return self.action is Action.MERGE


def filled_columns(spec: MergeSpec) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The columns added in the run's range whose older rows get a value (lower-cased, as Hive names them), and
    each one's source columns. A replay's come with a fills file; a heal's have none, its diff having read again
    every row that holds a value in one (``core.diff.heal_digest``); any other merge fills nothing."""
    if not spec.fill_sources or (not spec.fills_file and spec.plan.mode != Mode.HEAL):
        return ()
    return tuple((added.lower(), tuple(s.lower() for s in sources)) for added, sources in spec.fill_sources)


def check_kept_columns(table: str, table_columns: Columns, columns: Columns) -> None:
    """Refuse to load anew (``MergeSpec.keep_hive_columns``) a Hive table that holds columns the source no longer has
    (``schema_changes: evolve`` keeps dropped and renamed ones, with their values): the table defined again with
    the source's columns would lose them, and no run may drop what the policy promised to keep."""
    now = {name for name, _ in columns}
    kept = [name for name, _ in table_columns if name not in now]
    if kept:
        raise LedgerConflict(
            f"The Hive table {table} keeps the columns {kept}, which the source no longer has (`schema_changes: "
            "evolve`), and the table must be loaded anew (see the reason above): that would drop them and their "
            "values. Nothing was changed. Copy what you need of them, then trigger a run with fresh_snapshot=true to "
            "reload the table with the source's columns.")


def plan_version(spec: MergeSpec, current: VersionInfo | None, table_columns: Columns) -> VersionPlan:
    """What the merge of ``spec`` does, given the version the table (or the shard's partition) is at now
    (``current``, None if none) and the Hive table's columns (a partition column left out)."""
    origin: Origin = choose_origin(current, spec.plan, spec.end)
    if origin.action is Action.SKIP:
        return VersionPlan(action=origin.action, reason=origin.reason)
    load = origin.action is Action.LOAD
    if current is not None:
        if not load:
            check_datetime_zone(current.datetime_zone, spec)
        check_layout(current.partitioning, spec, load=load)
    filled = filled_columns(spec)
    table = f"{spec.database}.{spec.table}"
    if spec.keep_hive_columns and current is not None:
        check_kept_columns(table, table_columns, tuple(spec.hive_columns))
    columns = tuple(spec.hive_columns) if load else tuple(
        next_columns(list(table_columns), spec.hive_columns, {name for name, _ in filled}, table))
    # A shard's load defines its own rows anew, never the table: the other shards' rows are in it.
    redefine = spec.shard is None and current is not None and load and (
        tuple(table_columns) != columns or current.partitioning != spec.partitioning)
    added = tuple(c for c in columns if current is not None and not redefine and c not in table_columns)
    switch = Switch.SHARD if spec.shard is not None else Switch.CREATE if current is None or redefine else Switch.ALTER
    return VersionPlan(
        action=origin.action, reason=origin.reason, origin_version=origin.version, columns=columns, added=added,
        redefine=redefine,
        # A fresh snapshot that changes a column's type starts the changelog and the history again; one that only
        # lays the table out anew is compared with the version before, as any other.
        anew=current is None or (redefine and tuple(table_columns) != columns),
        filled=filled, every_partition=spec.partitioning is not None and (load or bool(filled)), switch=switch)
