"""A version of a partitioned Hive table committed atomically for readers, through Spark's external catalog.

Spark SQL's ``ALTER TABLE … PARTITION … SET LOCATION`` switches one partition per statement: N partitions would
be N metastore commits, and a reader between two of them would see a mix of versions. Spark's
``ExternalCatalog.alterPartitions`` passes its whole list to the metastore's ``alter_partitions`` in one call,
which the metastore runs in one transaction; Spark and Hive readers fetch a query's partitions in one call, so
they see the partitions before or after it, never a mix. So:

(a) the partitions that do not exist yet are added, each pointing at an empty directory of its own: a reader
    sees no rows in them;
(b) every changed partition (rewritten, new, emptied) is pointed at its new location in ONE ``alterPartitions``
    call. An emptied partition points at an empty directory of its own: Spark writes nothing for a partition
    without rows, and its old directory would keep showing the old ones.

A process killed between (a) and (b) leaves the old rows readable, and the added partitions empty. Nothing here
runs SQL: names and values go to the catalog as values, never into a statement. Every directory it creates, and
every location it points a partition at, is under the warehouse.

The Scala API is the same in Spark 3.5 (Scala 2.12) and 4.x (Scala 2.13) except for two details handled below:
``CatalogStorageFormat`` has 6 fields in 3.5 and 7 in 4.x (a copy is built from its own ``copy$default$N``), and
the catalog takes ``scala.collection.Seq`` in 3.5 and ``scala.collection.immutable.Seq`` in 4.x (``PythonUtils.toSeq``
gives each version's own).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from airflow_cdc_provider.core.identifiers import backticked
from airflow_cdc_provider.core.partition_commit import (
    PartitionChange,
    PartitionCommit,
    PartitionCommitRefused,
    PartitionSwitch,
    commit_problems,
    partition_name,
)
from airflow_cdc_provider.core.workdir import within
from airflow_cdc_provider.failpoints import failpoint

Values = tuple[tuple[str, str], ...]

# A partition's statistics in the metastore that describe its files and rows, which a new location makes wrong.
STATISTICS = ("numFiles", "totalSize", "numRows", "rawDataSize", "COLUMN_STATS_ACCURATE")


class _Catalog:
    """The JVM objects of one commit: the external catalog, and the conversions py4j needs for Scala's types."""

    def __init__(self, spark: Any) -> None:
        self.jvm = spark._jvm
        self.conf = spark._jsc.hadoopConfiguration()
        self.external = spark._jsparkSession.sharedState().externalCatalog()

    def seq(self, items: Iterable[Any]) -> Any:
        array = self.jvm.java.util.ArrayList()
        for item in items:
            array.add(item)
        return self.jvm.org.apache.spark.api.python.PythonUtils.toSeq(array)

    def spec(self, values: Values) -> Any:
        mapping = self.jvm.java.util.LinkedHashMap()
        for column, value in values:
            mapping.put(column, value)
        return self.jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(mapping)

    def strings(self, seq: Any) -> tuple[str, ...]:
        return tuple(str(seq.apply(i)) for i in range(seq.length()))

    def path(self, location: str) -> Any:
        return self.jvm.org.apache.hadoop.fs.Path(location)

    def qualified(self, location: str) -> Any:
        """The location with its filesystem (``file:/…``, ``hdfs://…``), a Hadoop ``Path``: as the metastore
        keeps it."""
        path = self.path(location)
        return path.getFileSystem(self.conf).makeQualified(path)

    def exists(self, location: str) -> bool:
        path = self.path(location)
        return bool(path.getFileSystem(self.conf).exists(path))

    def empty_directory(self, location: str) -> None:
        """Make ``location`` an empty directory; refused if it holds anything (its files would show as rows)."""
        path = self.path(location)
        fs = path.getFileSystem(self.conf)
        if fs.exists(path):
            if not fs.getFileStatus(path).isDirectory() or len(fs.listStatus(path)) > 0:
                raise PartitionCommitRefused(
                    f"{location} is to be an empty partition directory but is not empty: its files would show as "
                    "rows. Give an empty-directory root that holds nothing yet.")
        elif not fs.mkdirs(path):
            raise OSError(f"Could not create the empty partition directory {location}.")

    def partition_dir(self, values: Values) -> str:
        """``dt=2026-11-25``, escaped as Hive names a partition's directory."""
        utils = self.jvm.org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils
        return "/".join(str(utils.getPartitionPathString(column, value)) for column, value in values)

    def relocated(self, partition: Any, location: str) -> Any:
        """``partition.copy(storage = partition.storage.copy(locationUri = Some(location)))``, through py4j.

        py4j cannot name arguments, so every argument of Scala's ``copy`` is given: each field's current value
        from ``copy$default$N``, the first (``locationUri``) replaced. The number of fields is read from the
        class, as it differs between Spark versions.
        """
        storage = partition.storage()
        fields = [getattr(storage, f"copy$default${n}")() for n in range(1, copy_arity(storage) + 1)]
        fields[0] = self.jvm.scala.Option.apply(self.qualified(location).toUri())
        parts = [getattr(partition, f"copy$default${n}")() for n in range(1, copy_arity(partition) + 1)]
        # CatalogTablePartition(spec, storage, parameters, createTime, lastAccessTime, stats)
        if not parts[1].equals(storage):
            raise RuntimeError("This Spark's CatalogTablePartition does not hold its storage second; the partition "
                               "commit does not know this version of Spark.")
        parts[1] = storage.copy(*fields)
        # The metastore keeps a partition's statistics across a change of location, and recomputes its file
        # count and size from the new directory only when those differ from the old ones: without them, it
        # lists the new directory (within the transaction). Spark's own statistics (stats) go too: they counted
        # the old rows.
        parameters = parts[2]
        for key in STATISTICS:
            parameters = getattr(parameters, "$minus")(key)
        parts[2] = parameters
        parts[5] = self.jvm.scala.Option.empty()
        return partition.copy(*parts)


def copy_arity(obj: Any) -> int:
    """The number of fields of a Scala case class's ``copy`` (each has a ``copy$default$N``)."""
    counts = {int(m.getParameterCount()) for m in obj.getClass().getMethods() if m.getName() == "copy"}
    if len(counts) != 1:
        raise RuntimeError(f"{obj.getClass().getName()} has {len(counts)} copy methods; expected one.")
    return counts.pop()


def commit_partitions(spark: Any, database: str, table: str, changes: Iterable[PartitionChange],
                      warehouse_dir: str, empty_root: str) -> PartitionCommit:
    """Point every partition of ``changes`` at its new location in one metastore transaction; returns what it did.

    ``empty_root`` is a directory under the warehouse for this commit's empty directories (created here): a new
    partition waits there, in ``<empty_root>/<partition>``, until the switch, and an emptied partition (a change
    without a location) stays there. The locations given must exist already (the run wrote them).
    """
    changes = tuple(changes)
    catalog = _Catalog(spark)
    raw_table = catalog.external.getTable(database, table)
    columns = catalog.strings(raw_table.partitionColumnNames())
    where = f"{database}.{table}"
    problems = commit_problems(changes, columns, warehouse_dir, empty_root, where)
    existing: dict[Values, Any] = {}
    if not problems:
        for change in changes:
            found = catalog.external.getPartitionOption(database, table, catalog.spec(change.values))
            if found.isDefined():
                existing[change.values] = found.get()
            if change.location is not None and not catalog.exists(change.location):
                problems.append(f"The new location {change.location} of the partition "
                                f"{partition_name(change.values)} of {where} does not exist: write the partition "
                                "before committing it.")
    if problems:
        raise PartitionCommitRefused(f"The commit to {where} changed nothing: " + " ".join(problems))

    empty = {change.values: f"{empty_root.rstrip('/')}/{catalog.partition_dir(change.values)}"
             for change in changes if change.location is None or change.values not in existing}
    for location in empty.values():
        if not within(location, warehouse_dir):  # an escaped value cannot leave the root, but a check costs nothing
            raise PartitionCommitRefused(f"The empty partition directory {location} is not under the warehouse "
                                         f"{warehouse_dir}.")
        catalog.empty_directory(location)

    # (a) New partitions, over empty directories: readers see them, without rows.
    added = [change.values for change in changes if change.values not in existing]
    if added:
        # The table's own storage (its input and output formats, its serde), as ALTER TABLE ADD PARTITION does.
        blank = catalog.jvm.org.apache.spark.sql.catalyst.catalog.CatalogTablePartition
        template = raw_table.storage()
        new = []
        for values in added:
            fields = [getattr(template, f"copy$default${n}")() for n in range(1, copy_arity(template) + 1)]
            fields[0] = catalog.jvm.scala.Option.apply(catalog.qualified(empty[values]).toUri())
            no_parameters = catalog.jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(
                catalog.jvm.java.util.HashMap())
            # CatalogTablePartition(spec, storage, parameters, createTime, lastAccessTime = -1, stats = None)
            new.append(blank(catalog.spec(values), template.copy(*fields), no_parameters, int(time.time() * 1000),
                             -1, catalog.jvm.scala.Option.empty()))
        catalog.external.createPartitions(database, table, catalog.seq(new), False)
        for values in added:
            existing[values] = catalog.external.getPartition(database, table, catalog.spec(values))
    failpoint("partition_commit.added")

    # (b) Every changed partition switched in one call: one alter_partitions, one metastore transaction.
    switched = []
    relocated = []
    for change in changes:
        target = change.location if change.location is not None else empty[change.values]
        partition = existing[change.values]
        before = None if change.values in added else _location(partition)
        relocated.append(catalog.relocated(partition, target))
        switched.append(PartitionSwitch(values=change.values, before=before,
                                        after=str(catalog.qualified(target).toString()),
                                        emptied=change.location is None))
    catalog.external.alterPartitions(database, table, catalog.seq(relocated))
    # This session's cached view of the table (its file listing) would still show the old partitions.
    spark.catalog.refreshTable(".".join(backticked(name) for name in (database, table)))
    return PartitionCommit(database=database, table=table, added=tuple(added), switched=tuple(switched))


def add_partitions(spark: Any, database: str, table: str, partitions: Iterable[tuple[Values, str]],
                   warehouse_dir: str) -> int:
    """Add the partitions not there yet, each at its location (an existing directory under the warehouse), in
    one ``add_partitions`` call, which the metastore runs in one transaction: a reader sees all of them or none.
    Those there already are left as they are, so that a commit a killed job did not finish can be done again.
    Returns how many were added."""
    catalog = _Catalog(spark)
    where = f"{database}.{table}"
    raw_table = catalog.external.getTable(database, table)
    columns = catalog.strings(raw_table.partitionColumnNames())
    missing = []
    for values, location in partitions:
        if tuple(column for column, _ in values) != columns or not within(location, warehouse_dir):
            raise PartitionCommitRefused(f"The partition {partition_name(values)} at {location} was not added to "
                                         f"{where}: it must name the columns {list(columns)} and be under the "
                                         f"warehouse {warehouse_dir}.")
        if not catalog.external.getPartitionOption(database, table, catalog.spec(values)).isDefined():
            missing.append((values, location))
    if missing:
        blank = catalog.jvm.org.apache.spark.sql.catalyst.catalog.CatalogTablePartition
        template = raw_table.storage()
        no_parameters = catalog.jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(catalog.jvm.java.util.HashMap())
        new = []
        for values, location in missing:
            fields = [getattr(template, f"copy$default${n}")() for n in range(1, copy_arity(template) + 1)]
            fields[0] = catalog.jvm.scala.Option.apply(catalog.qualified(location).toUri())
            new.append(blank(catalog.spec(values), template.copy(*fields), no_parameters, int(time.time() * 1000),
                             -1, catalog.jvm.scala.Option.empty()))
        catalog.external.createPartitions(database, table, catalog.seq(new), True)
        spark.catalog.refreshTable(".".join(backticked(name) for name in (database, table)))
    return len(missing)


def drop_partitions(spark: Any, database: str, table: str, partitions: Iterable[Values]) -> None:
    """Drop the partitions from the metastore (their files stay: a table's versions own them), in one call;
    those gone already are passed over."""
    catalog = _Catalog(spark)
    specs = [catalog.spec(values) for values in partitions]
    if specs:
        # dropPartitions(db, table, specs, ignoreIfNotExists, purge, retainData)
        catalog.external.dropPartitions(database, table, catalog.seq(specs), True, False, True)
        spark.catalog.refreshTable(".".join(backticked(name) for name in (database, table)))


def partition_values(spark: Any, database: str, table: str) -> list[Values]:
    """Every partition of a table, as its values column by column, in one metastore call."""
    catalog = _Catalog(spark)
    columns = catalog.strings(catalog.external.getTable(database, table).partitionColumnNames())
    partitions = catalog.external.listPartitions(database, table, catalog.jvm.scala.Option.empty())
    found = []
    for n in range(partitions.length()):
        spec = partitions.apply(n).spec()
        found.append(tuple((column, str(spec.apply(column))) for column in columns))
    return found


def _location(partition: Any) -> str | None:
    uri = partition.storage().locationUri()
    return str(uri.get().toString()) if uri.isDefined() else None


def partitions_of(spark: Any, database: str, table: str) -> dict[str, str]:
    """Each partition of a table partitioned by one column: its value as the metastore writes it, and its location
    (as the metastore keeps it), in one metastore call."""
    catalog = _Catalog(spark)
    found = {}
    partitions = catalog.external.listPartitions(database, table, catalog.jvm.scala.Option.empty())
    for n in range(partitions.length()):
        partition = partitions.apply(n)
        spec = partition.spec()
        values = [str(spec.apply(key)) for key in catalog.strings(spec.keys().toSeq())]
        if len(values) != 1:
            raise PartitionCommitRefused(f"The table {database}.{table} has a partition of {len(values)} columns; "
                                         "a table of this pipeline is partitioned by one.")
        found[values[0]] = _location(partition) or ""
    return found


def partition_value_of_dir(spark: Any, name: str) -> tuple[str, str]:
    """(column, value) of a partition directory's name, ``dt=2026-11-25``, unescaped as Spark wrote it."""
    utils = spark._jvm.org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils
    column, _, value = name.partition("=")
    return str(utils.unescapePathName(column)), str(utils.unescapePathName(value))


def partition_columns(spark: Any, database: str, table: str) -> tuple[str, ...]:
    """The table's partition columns, in order (none for an unpartitioned table)."""
    catalog = _Catalog(spark)
    return catalog.strings(catalog.external.getTable(database, table).partitionColumnNames())


def partition_location(spark: Any, database: str, table: str, values: Values) -> str | None:
    """The location of the partition ``values`` (as the metastore keeps it), or None when it does not exist."""
    catalog = _Catalog(spark)
    found = catalog.external.getPartitionOption(database, table, catalog.spec(values))
    return _location(found.get()) if found.isDefined() else None


def partition_dir(jvm: Any, values: Values) -> str:
    """The directory Hive names the partition ``values`` by, ``a=x/b=y``, escaped (``jvm``: a session's)."""
    utils = jvm.org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils
    return "/".join(str(utils.getPartitionPathString(column, value)) for column, value in values)
