"""Where a table's versions go and how one becomes the table: one strategy per table, chosen once (``target_of``).

- ``PlainTable``: each version a directory of the table's, written whole from its origin version; the commit points
  the table at it (CREATE TABLE, or ALTER TABLE … SET LOCATION, then the columns added in place).
- ``PartitionedTable``: a version rewrites the partitions its rows land in or left and points at the others where
  they are; the commit switches those partitions in one metastore call, then the table's location.
- ``ShardPartition``: one shard's versions, in its partition's directory of the table every shard shares; the
  commit points that partition at the new version, and no other shard's.

Each writes a version (``write``) from the merge's rows, given as a function of the origin's rows it reads, and
commits it (``commit``), writing the version file where its commit needs it: before the switch, or, for a
partitioned table, once its partitions are known.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.core.ledger import VERSION_FILE, LedgerConflict, VersionInfo
from airflow_cdc_provider.core.merge import EMPTY_PARTITIONS, MergeSpec, parse_version_dir, version_dir_name
from airflow_cdc_provider.core.partition_commit import PartitionChange
from airflow_cdc_provider.core.partitioning import Partitioning
from airflow_cdc_provider.core.version_plan import Switch, VersionPlan
from airflow_cdc_provider.core.workdir import within
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.spark import shards
from airflow_cdc_provider.spark.files import HadoopFiles
from airflow_cdc_provider.spark.names import column, columns_ddl, path_literal
from airflow_cdc_provider.spark.partition_commit import (
    commit_partitions,
    partition_dir,
    partition_value_of_dir,
    partitions_of,
)
from airflow_cdc_provider.spark.partitioning import partition_value
from airflow_cdc_provider.spark.table_commit import switch_definition


def describe(spark: Any, statement: str) -> dict[str, str]:
    """What a DESCRIBE statement says, by its first column (``Location`` …)."""
    return {row[0]: row[1] for row in spark.sql(statement).collect()}


# The merge's rows: the origin's rows read by the target (None when there is no origin) in, the version's out.
Merged = Callable[[Any], Any]
# A version's description, given every partition it has (none for a table not partitioned).
Described = Callable[[tuple[tuple[str, str], ...]], VersionInfo]
Partitions = tuple[tuple[str, str], ...]
# A table defined again is defined under its name and this first (``PlainTable._create``); Hive's names are at most
# 128 characters.
STAGED_SUFFIX, HIVE_NAME_LIMIT = "__cdc_staged", 128


@dataclass
class Written:
    """What a version's write leaves for its commit and for the tables beside it."""

    rows: int | None  # the version's rows: counted as they were written, and, partitioned, the partitions kept
    touched: set[str] = field(default_factory=set)  # the partitions rewritten, as the metastore writes them
    changes: list[PartitionChange] = field(default_factory=list)  # the partitions to switch and to empty
    before: dict[str, str] = field(default_factory=dict)  # the table's partitions before, and their locations


def _count(frame: Any, name: str) -> tuple[Any, Any]:
    """``frame`` counting its rows as they go by (an Observation): a Spark job less than reading them back."""
    from pyspark.sql import Observation
    from pyspark.sql.functions import count, lit

    seen = Observation(name)
    return frame.observe(seen, count(lit(1)).alias("rows")), seen


def partitions_frame(spark: Any, spec: MergeSpec, layout: Partitioning, locations: list[str]) -> Any:
    """The rows of the partitions at ``locations`` (as the metastore listed them for this merge), in the table's
    columns without the partition column. Read by location, not through a partition filter: the files read are
    exactly those listed, and a run touching hundreds of partitions does not send the metastore a filter of
    hundreds of values (the embedded metastore fails on one). A column the table gained after a partition was
    written is NULL there, as Hive reads it."""
    from pyspark.sql.types import StructType

    schema = StructType([field for field in spark.table(spec.qualified_table).schema if field.name != layout.column])
    return spark.read.schema(schema).parquet(*locations)


class PlainTable:
    """A Hive table that is its source's alone, each version a directory of its own written whole."""

    def __init__(self, spark: Any, spec: MergeSpec, location: str | None, table_root: str) -> None:
        self.spark, self.spec, self.location = spark, spec, location
        self.root = self._root(table_root)  # the directory of the table's (the shard's) versions
        self.files = HadoopFiles(spark, self.root)

    def _root(self, table_root: str) -> str:
        return table_root if self.location is None else HadoopFiles(self.spark, self.location).parent(self.location)

    def check_origin(self, plan: VersionPlan, existing: dict[int, bool]) -> None:
        """A merge reads its origin version whole: refused when that version was removed meanwhile."""
        if plan.merges and (plan.origin_version is None or not existing.get(plan.origin_version)):
            raise LedgerConflict(
                f"Version {plan.origin_version} of {self.spec.database}.{self.spec.table}, which this run merges "
                "onto, is no longer there (removed after keep_versions runs). Trigger a run with fresh_snapshot=true.")

    def write(self, plan: VersionPlan, path: str, merged: Merged) -> Written:
        old = (self.spark.read.parquet(self.files.version_path(plan.origin_version))
               if plan.merges and plan.origin_version is not None else None)
        frame, written = _count(merged(old), "written")
        frame.write.mode("errorifexists").parquet(path)
        return Written(rows=int(written.get["rows"]))

    def commit(self, plan: VersionPlan, version: int, path: str, written: Written, described: Described) -> Partitions:
        """Point the table at the version at ``path``: the commit. A job killed before it leaves the table on the
        previous version, whole."""
        self.files.write_text(f"{path}/{VERSION_FILE}", described(()).to_text())
        if plan.switch is Switch.CREATE:
            self._create(plan, path)
        else:
            self._point(plan, path)
        return ()

    def _create(self, plan: VersionPlan, path: str, partitioned_by: str = "",
                partitions: Callable[[str], Partitions] = lambda table: ()) -> Partitions:
        """Define the table at the version at ``path`` (and ``partitions(its name)`` its partitions); returns them.

        A load with other columns or another layout (``plan.redefine``) changes a plain table's columns and location
        in one metastore call where the metastore takes the change of types (``spark.table_commit``). Otherwise
        (Hive cannot change a column's type in place) it defines the table whole under a name of its own first,
        partitions and all, then drops the table and renames that one to it: a reader finds the old version, or no
        table for the instant between the two statements, never a table without its rows. The table is EXTERNAL
        (it has a LOCATION), so dropping it leaves every version's files, and renaming it moves none. A job killed
        after the drop leaves the staged table alone: its retry renames it to the table first
        (``finish_redefinition``), and goes on from the version it holds; killed before, its retry drops the staged
        one and does it again."""
        spec, staged = self.spec, self._staged()
        self._drop_staged(staged)
        if plan.redefine and not partitioned_by and self.spark.catalog.tableExists(f"{spec.database}.{spec.table}"):
            # A plain table: its columns and location in one metastore call, when the metastore takes the change.
            refused = switch_definition(self.spark, spec.database, spec.table, list(plan.columns), path)
            if refused is None:
                print(f"cdc-merge: {spec.database}.{spec.table}: its columns and location switched in one metastore "
                      "call", flush=True)
                return partitions(spec.table)
            print(f"cdc-merge: {spec.database}.{spec.table}: the metastore does not take the change of columns in "
                  f"place ({refused[:300]}): the table is defined again", flush=True)
        if not plan.redefine or staged is None:
            if plan.redefine:
                self.spark.sql(f"DROP TABLE IF EXISTS {spec.qualified_table}")
            self._define(spec.qualified_table, plan, path, partitioned_by)
            return partitions(spec.table)
        self._define(f"{quote_identifier(spec.database)}.{quote_identifier(staged)}", plan, path, partitioned_by)
        made = partitions(staged)
        self.spark.sql(f"DROP TABLE IF EXISTS {spec.qualified_table}")
        failpoint("merge.driver.redefined")
        self.spark.sql(f"ALTER TABLE {quote_identifier(spec.database)}.{quote_identifier(staged)} RENAME TO "
                       f"{spec.qualified_table}")
        return made

    def _define(self, name: str, plan: VersionPlan, path: str, partitioned_by: str) -> None:
        self.spark.sql(f"CREATE TABLE {name} ({columns_ddl(list(plan.columns))}){partitioned_by} "
                       f"STORED AS PARQUET LOCATION '{path_literal(path)}'")

    def _staged(self) -> str | None:
        return staged_name(self.spec.table)

    def _drop_staged(self, staged: str | None) -> None:
        """Drop what a killed job left under the staged name: a table whose location is among this table's
        versions. A table of that name anywhere else is not this pipeline's, and stops the merge."""
        spec = self.spec
        if staged is None or not self.spark.catalog.tableExists(f"{spec.database}.{staged}"):
            return
        name = f"{quote_identifier(spec.database)}.{quote_identifier(staged)}"
        location = describe(self.spark, f"DESCRIBE TABLE EXTENDED {name}").get("Location", "")
        if not within(location, self.root):
            raise LedgerConflict(
                f"The Hive table {spec.database}.{staged} exists and is not one of {spec.database}.{spec.table}'s "
                f"versions (its location is {location}): the merge defines the table again under that name first. "
                "Nothing was changed. Rename or drop that table.")
        self.spark.sql(f"DROP TABLE {name}")

    def _point(self, plan: VersionPlan, path: str) -> None:
        spec = self.spec
        self.spark.sql(f"ALTER TABLE {spec.qualified_table} SET LOCATION '{path_literal(path)}'")
        failpoint("merge.driver.switched")
        if plan.added:
            # After the switch: until the ADD, readers see the columns they knew, over the new rows. A job killed
            # in between is not recorded as committed; its retry merges again and adds them.
            added = list(plan.added)
            self.spark.sql(f"ALTER TABLE {spec.qualified_table} ADD COLUMNS ({columns_ddl(added)})")
            print(f"cdc-merge: added the columns {added}", flush=True)


def staged_name(table: str) -> str | None:
    """The name a table is defined under before it replaces the table (``PlainTable._create``); None when Hive's
    limit on a name's length leaves no room for it (then the table is dropped and created, a moment apart)."""
    name = f"{table}{STAGED_SUFFIX}"
    return name if len(name) <= HIVE_NAME_LIMIT else None


def finish_redefinition(spark: Any, spec: MergeSpec) -> bool:
    """Complete a definition anew that a killed job left between its two statements (``PlainTable._create``): no
    table, and the table defined whole under its staged name, at a version of this source's (its version file says
    so). The staged table is renamed to the table, as the job would have; the merge then finds the version it
    committed, as after any killed commit. True when it did."""
    staged = staged_name(spec.table)
    if spec.shard is not None or staged is None or spark.catalog.tableExists(
            f"{spec.database}.{spec.table}") or not spark.catalog.tableExists(f"{spec.database}.{staged}"):
        return False
    name = f"{quote_identifier(spec.database)}.{quote_identifier(staged)}"
    location = describe(spark, f"DESCRIBE TABLE EXTENDED {name}").get("Location", "")
    text = HadoopFiles(spark, location).read_text(f"{location}/{VERSION_FILE}") if location else None
    if parse_version_dir(location) is None or text is None or VersionInfo.from_text(text).source != spec.source:
        return False  # not a version of this table's: left as it is (the merge's own definition refuses it)
    spark.sql(f"ALTER TABLE {name} RENAME TO {spec.qualified_table}")
    print(f"cdc-merge: {spec.database}.{spec.table} was defined again by a job killed before its rename: renamed "
          "from its staged name", flush=True)
    return True


class PartitionedTable(PlainTable):
    """A Hive table partitioned by its configuration's spec: a version rewrites the partitions its rows land in
    or left, and the others stay where they are (each version file lists every partition's directory)."""

    def __init__(self, spark: Any, spec: MergeSpec, location: str | None, table_root: str, layout: Partitioning,
                 current_rows: int | None, touched_of: Callable[[bool], set[str]]) -> None:
        super().__init__(spark, spec, location, table_root)
        self.layout, self.current_rows, self.touched_of = layout, current_rows, touched_of

    def check_origin(self, plan: VersionPlan, existing: dict[int, bool]) -> None:
        """Nothing to check: the partitions a merge reads are those the metastore lists now."""

    def write(self, plan: VersionPlan, path: str, merged: Merged) -> Written:
        spark, spec, layout = self.spark, self.spec, self.layout
        before = partitions_of(spark, spec.database, spec.table) if self.location is not None and not plan.redefine \
            else {}
        # The partitions this run rewrites: those its rows land in and those they left; a load rewrites them all.
        touched = self.touched_of(bool(before)) if plan.merges else set()
        # A load replaces every partition. Columns added in the range have their fill (a default, a renamed
        # column's values) in every row, so every partition is rewritten too: a partition left alone would show
        # them as NULL.
        if plan.every_partition:
            touched |= set(before)
        read = sorted(touched & set(before)) if plan.merges else []
        old, rows_before = None, None
        if read:
            old, rows_before = _count(partitions_frame(spark, spec, layout, [before[v] for v in read]), "rows before")
        frame = merged(old).select([column(name) for name, _ in plan.columns] + [partition_value(layout)])
        frame, written = _count(frame, "written")
        frame.write.partitionBy(layout.column).mode("errorifexists").parquet(path)
        rows: int | None = int(written.get["rows"])
        changes = self._changes(path, touched, before, check_within=plan.merges)
        if plan.merges:
            read_rows = int(rows_before.get["rows"]) if rows_before is not None else 0
            rows = self.current_rows - read_rows + (rows or 0) if self.current_rows is not None else None
        return Written(rows=rows, touched=touched, changes=changes, before=before)

    def commit(self, plan: VersionPlan, version: int, path: str, written: Written, described: Described) -> Partitions:
        """The partitions switched in one metastore call, the version file written with every partition's
        directory, then the table pointed at the version. A job killed between the two leaves readers the new rows
        and the ledger the old watermark: the run's re-run, or the next run, applies the range again onto them,
        which changes nothing twice."""
        if plan.switch is Switch.CREATE:
            def switched(table: str) -> Partitions:
                made = self._switch(path, written.changes, {}, table)
                self.files.write_text(f"{path}/{VERSION_FILE}", described(made).to_text())
                return made

            partitions = self._create(plan, path, f" PARTITIONED BY "
                                      f"({columns_ddl([(self.layout.column, self.layout.hive_type)])})", switched)
        else:
            partitions = self._switch(path, written.changes, written.before)
            self.files.write_text(f"{path}/{VERSION_FILE}", described(partitions).to_text())
            self._point(plan, path)
        return partitions

    def _changes(self, path: str, touched: set[str], before: dict[str, str],
                 check_within: bool) -> list[PartitionChange]:
        """Each partition the write at ``path`` gives a new directory, and each partition of ``touched`` the table
        has now that got no rows (emptied). A merge writes rows only into the partitions it read or its upserts
        name (``check_within``): anything else would stand beside an untouched partition's rows, so it stops
        here."""
        files, layout = self.files, self.layout
        written = {}
        for child in files.children(path):
            name = child.rstrip("/").rsplit("/", 1)[-1]
            if "=" in name and not name.startswith(("_", ".")) and files.is_directory(child):
                held, value = partition_value_of_dir(self.spark, name)
                if held == layout.column:
                    written[value] = child
        stray = sorted(set(written) - touched) if check_within else []
        if stray:
            raise RuntimeError(f"The merge wrote rows into the partitions {stray}, which it did not read: nothing was "
                               "committed. This is a bug; the table is as it was.")
        emptied = sorted((touched & set(before)) - set(written))
        return ([PartitionChange(values=((layout.column, value),), location=written[value])
                 for value in sorted(written)]
                + [PartitionChange(values=((layout.column, value),)) for value in emptied])

    def _switch(self, path: str, changes: list[PartitionChange], before: dict[str, str],
                table: str | None = None) -> Partitions:
        """Switch ``changes`` in one metastore call (on ``table``, the table's name by default); returns every
        partition of the table and its location after it. The empty directories of emptied (and, until the switch,
        new) partitions are in the version's ``_empty``."""
        after = dict(before)
        if changes:
            spec = self.spec
            done = commit_partitions(self.spark, spec.database, table or spec.table, changes, spec.warehouse_dir,
                                     f"{path}/_empty")
            for switch in done.switched:
                after[switch.values[0][1]] = switch.after
        return tuple(sorted(after.items()))


class ShardPartition(PlainTable):
    """One shard of a Hive table partitioned by the shards (``core.shards``): its versions are in its partition's
    directory of the table's, and the merge writes its rows only."""

    def _root(self, table_root: str) -> str:
        spark, spec = self.spark, self.spec
        shard = spec.shard
        assert shard is not None
        self.table_root = table_root
        if self.location is not None:
            return HadoopFiles(spark, self.location).parent(self.location)
        if spark.catalog.tableExists(f"{spec.database}.{spec.table}"):
            self.table_root = describe(spark, f"DESCRIBE TABLE EXTENDED {spec.qualified_table}")["Location"]
        if partition_dir(spark._jvm, shard.values) != shard.partition_dir:
            raise ValueError(f"The partition directory of {shard.name} is "
                             f"{partition_dir(spark._jvm, shard.values)!r} to Spark, "
                             f"{shard.partition_dir!r} to core.shards: they must agree.")
        return f"{self.table_root.rstrip('/')}/{shard.partition_dir}"

    def commit(self, plan: VersionPlan, version: int, path: str, written: Written, described: Described) -> Partitions:
        """The table made and given the shard's columns first (other shards' rows read them as NULL), then the
        shard's partition pointed at the new version: one metastore call, which no other shard's touches."""
        spec = self.spec
        assert spec.shard is not None
        self.files.write_text(f"{path}/{VERSION_FILE}", described(()).to_text())
        shards.ensure_table(self.spark, spec, list(plan.columns), self.table_root)
        commit_partitions(self.spark, spec.database, spec.table,
                          [PartitionChange(values=spec.shard.values, location=path)], spec.warehouse_dir,
                          empty_root=f"{self.root}/{EMPTY_PARTITIONS}/{version_dir_name(version)}")
        failpoint("merge.driver.switched")
        return ()


Target = PlainTable | PartitionedTable | ShardPartition


def target_of(spark: Any, spec: MergeSpec, location: str | None, database_root: str, current_rows: int | None,
              touched_of: Callable[[bool], set[str]]) -> Target:
    """The strategy for ``spec``'s table, whose location is ``location`` now (None: no table, or no partition of
    the shard's yet), in the Hive database at ``database_root``. ``touched_of(has partitions)`` gives the
    partitions a merge of a partitioned table rewrites."""
    table_root = f"{database_root.rstrip('/')}/{spec.table}"
    if spec.shard is not None:
        return ShardPartition(spark, spec, location, table_root)
    if spec.partitioning is not None:
        return PartitionedTable(spark, spec, location, table_root, spec.partitioning, current_rows, touched_of)
    return PlainTable(spark, spec, location, table_root)
