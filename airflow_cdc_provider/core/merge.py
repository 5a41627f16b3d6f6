"""What the Spark merge is asked to do (a merge spec per table, a merge job per application), and the names
of a table's version directories.

The merge operator writes the job as a JSON file in the run's work directory and hands the application its
URI: nothing secret is in it, and nothing but that URI is on the command line. Every file the job names is a URI
too (``file://`` on a shared disk), so that the driver can run on any node of the cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from typing import Annotated, Literal

from pydantic import Field, model_validator

from airflow_cdc_provider.core.changelog import ChangelogCommit, ChangelogSpec, changelog_table
from airflow_cdc_provider.core.contract import Columns, MergeInput, TablePlan
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.history import HISTORY_PARTITION, HistoryCommit, HistorySpec, history_columns
from airflow_cdc_provider.core.identifiers import quote_identifier, validate_hive_name, validate_identifier
from airflow_cdc_provider.core.ledger import VERSION_FILE, Committed, LedgerConflict, RunPlan, VersionInfo
from airflow_cdc_provider.core.lineage import TableLineage, table_lineage
from airflow_cdc_provider.core.model import Instant, Model
from airflow_cdc_provider.core.modes import Mode, Status
from airflow_cdc_provider.core.partitioning import Partitioning
from airflow_cdc_provider.core.shards import Shard
from airflow_cdc_provider.core.types import ColumnType, hive_type, is_hive_type
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import capture_dir_problem, location_problem, place, within
from airflow_cdc_provider.core.zones import zone_problem

_VERSION_DIR = re.compile(r"v(\d{6,})")


def version_dir_name(version: int) -> str:
    return f"v{version:06d}"


def parse_version_dir(name: str) -> int | None:
    """The version number of a directory named like ``v000012``, or None for any other name."""
    match = _VERSION_DIR.fullmatch(name.rstrip("/").rsplit("/", 1)[-1])
    return int(match[1]) if match else None


# What the Spark jobs are handed is checked again where they read it: whoever could change a job file between the
# task that wrote it and the application that reads it would otherwise choose the tables switched, the directories
# deleted and the text of the statements. The rules live on the models, so every reader applies them.


def version_dir_problem(path: str, warehouse_dir: str, table: str) -> str | None:
    """Why the merge may not write or delete ``path`` as a version directory of the Hive table ``table`` (its
    name without the database; of a shard, ``<table>/<its partition's directory>``), or None: it must be
    ``<table>/vNNNNNN`` under the warehouse."""
    problem = location_problem(path, "version directory")  # first: urlsplit drops tabs and newlines unseen
    if problem:
        return problem
    parts, own = place(path)[2].split("/"), table.split("/")
    if parse_version_dir(parts[-1]) is None or len(parts) < len(own) + 1 or parts[-1 - len(own):-1] != own:
        return f"{path} is not a version directory of the table {table} (<table>/vNNNNNN)."
    if not within(path, warehouse_dir):
        return (f"{path} is not under the warehouse {warehouse_dir}: the merge writes and deletes version "
                "directories there only. Keep the table's database in the warehouse (`hive: warehouse_dir:`).")
    return None


# In a partitioned version's directory: the empty directories of the partitions its run emptied, one per partition
# (``_empty/<column>=<value>``). Hive and Spark skip names starting with _ when they list the version's directory.
EMPTY_PARTITIONS = "_empty"
# In a version's directory, once the tables beside the table (its changelog, snapshots, history) list the version.
LISTED_FILE = "_cdc_listed"


class VersionRefused(CdcError):
    """A version whose rows cannot be read as the table's: no version file, or one naming other places than the
    table's own version directories. A retry would read the same file."""


def history_partition_problem(location: str, value: str, table: str, warehouse_dir: str) -> str | None:
    """Why ``location`` may not be read or listed as the partition ``end_date`` = ``value`` of the history table
    ``table``, or None: it must be ``<table>/vNNNNNN/end_date=<value>`` under the warehouse."""
    parent, _, leaf = location.rstrip("/").rpartition("/")
    problem = version_dir_problem(parent, warehouse_dir, table)
    if problem is None and leaf != f"{HISTORY_PARTITION}={value}":
        problem = f"{location} is not the directory of the partition {HISTORY_PARTITION}={value} of {table}"
    return problem


def partition_location_problem(partition: str, value: str, info: VersionInfo, location: str, warehouse_dir: str,
                               table: str) -> str | None:
    """Why ``partition``, the location of the partition ``value`` in the version file ``info`` found at
    ``location`` (a version directory of ``table``), may not be read as that partition's rows, or None.

    It must be a partition directory of the table's own versions, ``<table>/vNNNNNN/<column>=<value>``, or an
    emptied one, ``<table>/vNNNNNN/_empty/<column>=<value>``, of this version or an older one (a partition the
    run did not touch stays where an older run wrote it; none can be in a later one), under the warehouse."""
    column = info.partitioning.column if info.partitioning else ""
    what = f"location of the partition {column}={value}"
    problem = location_problem(partition, what)
    if problem:
        return problem
    versions, _, _ = location.rstrip("/").rpartition("/")  # the table's directory in the warehouse
    expected = (f"{versions}/vNNNNNN/{column}=… or {versions}/vNNNNNN/{EMPTY_PARTITIONS}/{column}=…, in version "
                f"{info.version} or an older one")
    home = place(versions)[2]
    parts = place(partition)[2][len(home) + 1:].split("/") if within(partition, versions) else []
    number = parse_version_dir(parts[0]) if parts else None
    leaf = parts[1:] if parts[1:2] != [EMPTY_PARTITIONS] else parts[2:]
    if (number is None or number > info.version or len(leaf) != 1 or not leaf[0].startswith(f"{column}=")
            or leaf[0] == f"{column}=" or not within(partition, warehouse_dir)):
        return (f"The {what} of version {info.version} of {table} is {partition}, which is not one of the table's "
                f"partition directories ({expected}).")
    return None


def version_locations(info: VersionInfo | None, location: str, warehouse_dir: str, table: str) -> tuple[str, ...]:
    """Where the rows of the version at ``location`` (a version directory of ``table``, the table's name without
    its database) are, given its version file ``info`` (None: there is none): the directory itself for an
    unpartitioned version; for a partitioned one, the location of every partition its version file lists (its
    directory holds only the partitions its run rewrote). VersionRefused unless each is one of the table's own
    directories in the warehouse: whoever could change a version file would otherwise choose what is read as the
    table (another table's files, or a later attempt's)."""
    problem = version_dir_problem(location, warehouse_dir, table)
    if problem is None and info is None:
        problem = f"{location} holds no {VERSION_FILE}: it is not a version this pipeline's merge wrote."
    if problem is None and info is not None and info.version != parse_version_dir(location):
        problem = f"its {VERSION_FILE} is of version {info.version}, not of the version its directory is named for."
    problems = [problem] if problem else []
    if info is not None and not problems and info.partitioning is None and info.partitions:
        problems.append(f"its {VERSION_FILE} lists {len(info.partitions)} partitions but no partitioning.")
    if info is not None and not problems:
        values, locations = [value for value, _ in info.partitions], [where for _, where in info.partitions]
        for twice, what in ((_repeated(values), "partition value"), (_repeated(locations), "partition location")):
            if twice:
                problems.append(f"its {VERSION_FILE} lists the {what} {twice!r} more than once.")
        problems += [p for value, where in info.partitions
                     if (p := partition_location_problem(where, value, info, location, warehouse_dir, table))]
    if problems:
        raise VersionRefused(
            f"The version at {location} is not read as the table {table}: " + " ".join(problems[:5])
            + (f" ({len(problems) - 5} more problems)" if len(problems) > 5 else "")
            + " Neither the merge nor the verify task writes such a version or job: find out what changed it, and "
            "load the table anew with a run triggered with fresh_snapshot=true.")
    if info is None or info.partitioning is None:
        return (location,)
    return tuple(where for _, where in info.partitions)


def _repeated(items: list[str]) -> str | None:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None

def versions_to_remove(versions: dict[int, bool], committed: int, keep: int,
                       merged_onto: int | None = None) -> list[int]:
    """Which version directories to delete once ``committed`` is the table's version.

    ``versions`` maps each directory's number to whether it holds a version file (a complete write). The
    newest ``keep`` versions up to ``committed`` stay, so a re-run can start again from its input version;
    an incomplete directory below ``committed`` is a killed attempt and goes. ``merged_onto``, the version this
    commit was merged onto, stays whatever its age: until the ledger records the run, the run's re-run merges
    onto it again, and attempts killed after writing or after committing each leave a newer number behind.
    """
    if keep < 2:
        raise ValueError(f"keep_versions must be at least 2 (a re-run merges onto its input version), got {keep}.")
    return sorted(v for v, complete in versions.items()
                  if v not in (committed, merged_onto)
                  and (v <= committed - keep or (v < committed and not complete)))


class PlainTarget(Model):
    """A Hive table that is its source's alone, each version written whole in a directory of its own; with the
    tables beside it the merge keeps: its changelog (``core.changelog``) and its daily snapshots and SCD2 history
    (``core.history``), None where there are none."""

    kind: Literal["plain"] = "plain"
    changelog: ChangelogSpec | None = None
    history: HistorySpec | None = None


class PartitionedTarget(Model):
    """A Hive table partitioned by its configuration's spec (``partition_by:``): a version rewrites the partitions
    its rows land in or left (``left_partitions``, ``MergeInput.left_partitions``) and points at the others where
    they are; with the tables beside it, as a plain table's."""

    kind: Literal["partitioned"] = "partitioned"
    partitioning: Partitioning
    left_partitions: tuple[str, ...] = ()
    changelog: ChangelogSpec | None = None
    history: HistorySpec | None = None


class ShardTarget(Model):
    """One shard of a Hive table partitioned by the shards (``core.shards``): the merge writes its rows only and
    points its partition at them. It keeps no table beside it."""

    kind: Literal["shard"] = "shard"
    shard: Shard


# Where a merge writes, one of three: a combination the configuration refuses (a partitioned shard, a shard with a
# changelog) cannot be written.
Target = Annotated[PlainTarget | PartitionedTarget | ShardTarget, Field(discriminator="kind")]


class MergeSpec(Model):
    """Everything the merge job needs for one table, in plain values."""

    database: str
    table: str
    source: str
    warehouse_dir: str
    metastore_uri: str | None
    plan: RunPlan
    end: Watermark | None  # None: read without the binlog (diff mode)
    as_of: Instant
    columns: tuple[tuple[str, str], ...]  # (name, Hive type), in the source table's order
    key: tuple[str, ...]
    # The run's directory of the table (``RunDir.root``): every capture file the merge reads is under it, so a job
    # file cannot make one table's merge read files another table, another run or anyone else wrote.
    capture_dir: str
    upsert_files: tuple[str, ...]
    delete_file: str | None  # None for a snapshot
    keep_versions: int = 3
    # The source's columns (name, MySQL type) at ``end``: recorded with the commit, where the next run starts.
    source_columns: tuple[tuple[str, str], ...] = ()
    fills_file: str | None = None  # what columns added in the range hold in the table's other rows (replay)
    fill_sources: tuple[tuple[str, tuple[str, ...]], ...] = ()  # each fills column and the columns it comes from
    # The zone the table's readers use, and the DATETIME columns (Hive names) written as the instant their digits
    # name in it; "UTC" writes them as the UTC instant of their digits.
    datetime_zone: str = "UTC"
    datetime_columns: tuple[str, ...] = ()
    # Verify's buckets of the key (``core.verify``) read again from the source: the origin's rows in them go, the
    # upserts hold what the source has there. ``buckets`` 0: none.
    buckets: int = 0
    replaced: tuple[int, ...] = ()
    # Runtime SQL settings (``spark.sql.*``, the table's ``spark_conf:``) the job sets while it merges this table.
    spark_conf: tuple[tuple[str, str], ...] = ()
    # Where the merge writes: the table whole, its partitions, or one shard's partition.
    target: Target = PlainTarget()
    # Whether the upserts hold rows read again from the source, whose partition before the run no event tells.
    reread_rows: bool = False
    # Every row event of the range as changelog rows (``stages.events``), for a changelog of ``mode: all``; None
    # for any other table and for a snapshot.
    events_file: str | None = None
    # The row digests of the version this spec makes (diff mode, ``stages.diff``): recorded with the commit, for the
    # next run to compare the source with; the job does not read it.
    digests: str | None = None
    # A table the run loads anew at a change of its columns no merge onto its version can follow (``Healed.reloaded``)
    # that keeps its key: it may not drop a column the Hive table holds, as ``schema_changes: evolve`` keeps dropped
    # ones with their values (``core.version_plan``). A table whose key changed is a new table, and is not held to it.
    keep_hive_columns: bool = False

    @model_validator(mode="after")
    def _valid(self) -> MergeSpec:
        for name, what in ((self.database, "Hive database name"), (self.table, "Hive table name")):
            if validate_hive_name(name, what) != name:
                raise ValueError(f"The {what} {name!r} must be in lower case, as the metastore keeps it.")
        for name, hive in self.columns:
            validate_identifier(name, "column name")
            if not is_hive_type(hive):
                raise ValueError(f"The column {name!r} has the type {hive!r}, which is not a Hive type the merge "
                                 "writes.")
        names = {name for name, _ in self.columns}
        for column, sources in self.fill_sources:
            for name in (column, *sources):
                validate_identifier(name, "column name")
        if not self.key or set(self.key) - names:
            raise ValueError(f"The key {list(self.key)} must be a non-empty subset of the columns.")
        if set(self.datetime_columns) - {name.lower() for name in names}:
            raise ValueError(f"The DATETIME columns {list(self.datetime_columns)} must be columns of the table.")
        problem = location_problem(self.warehouse_dir, "warehouse directory") or zone_problem(self.datetime_zone)
        if problem:
            raise ValueError(problem)
        problem = location_problem(self.capture_dir, "run directory") or capture_dir_problem(
            self.capture_dir, f"{self.database}.{self.table}", self.plan.run.key,
            self.shard.path if self.shard is not None else None)
        if problem:
            raise ValueError(problem)
        for file in (*self.upsert_files, self.delete_file, self.fills_file, self.events_file):
            problem = location_problem(file, "capture file") if file is not None else None
            if problem is None and file is not None and (not within(file, self.capture_dir)
                                                          or place(file) == place(self.capture_dir)):
                problem = (f"The capture file {file!r} of {self.database}.{self.table} is not under its run's "
                           f"directory {self.capture_dir}: a merge reads only the files its own run wrote there.")
            if problem:
                raise ValueError(problem)
        for key, _ in self.spark_conf:
            if not key.startswith("spark.sql."):
                raise ValueError(f"The table's setting {key!r} is not a runtime SQL setting (spark.sql.*).")
        versions_to_remove({}, 0, self.keep_versions)  # checks keep_versions
        if self.partitioning is not None and self.partitioning.column in {name.lower() for name in names}:
            raise ValueError(f"The partition column {self.partitioning.column!r} is a column of the table too.")
        return self

    # What the target says, for the steps that ask one thing of it.
    @property
    def partitioning(self) -> Partitioning | None:
        """A partitioned table's layout; None for a plain table and a shard (partitioned by the shards)."""
        return self.target.partitioning if isinstance(self.target, PartitionedTarget) else None

    @property
    def left_partitions(self) -> tuple[str, ...]:
        return self.target.left_partitions if isinstance(self.target, PartitionedTarget) else ()

    @property
    def shard(self) -> Shard | None:
        return self.target.shard if isinstance(self.target, ShardTarget) else None

    @property
    def changelog(self) -> ChangelogSpec | None:
        return None if isinstance(self.target, ShardTarget) else self.target.changelog

    @property
    def history(self) -> HistorySpec | None:
        return None if isinstance(self.target, ShardTarget) else self.target.history

    def committed(self, version: int, location: str, rows: int | None = None) -> Committed:
        """What the ledger records once the job committed this spec as ``version`` at ``location``, of ``rows``
        rows."""
        return Committed(version=version, location=location, watermark=self.end, as_of=self.as_of,
                         run=self.plan.run, mode=self.plan.mode, columns=self.source_columns or None,
                         partitioning=self.partitioning, digests=self.digests, rows=rows)

    @property
    def hive_columns(self) -> list[tuple[str, str]]:
        """(name, type) as the Hive table has them: Hive keeps column names in lower case."""
        return [(name.lower(), hive) for name, hive in self.columns]

    @property
    def hive_key(self) -> list[str]:
        return [name.lower() for name in self.key]

    @property
    def qualified_table(self) -> str:
        return f"{quote_identifier(self.database)}.{quote_identifier(self.table)}"

    @property
    def result_key(self) -> str:
        """Its result's key in the job's ``MergeResult``: the Hive table, and the shard (many share the table)."""
        table = f"{self.database}.{self.table}"
        return f"{table}#{self.shard.name}" if self.shard is not None else table


class MergeJob(Model):
    """One Spark application's work: the merge of each table in ``tables``, each committed on its own.

    The application writes one result per table to ``result_file`` (a ``MergeResult``); the merge task records
    the commits in the ledgers from it. One table's failure is its result, not the application's: the others
    still commit.
    """

    warehouse_dir: str
    metastore_uri: str | None
    tables: tuple[MergeSpec, ...]
    result_file: str

    @model_validator(mode="after")
    def _valid(self) -> MergeJob:
        problem = location_problem(self.result_file, "result file") or location_problem(
            self.warehouse_dir, "warehouse directory")
        if problem:
            raise ValueError(problem)
        for spec in self.tables:
            if (spec.warehouse_dir, spec.metastore_uri) != (self.warehouse_dir, self.metastore_uri):
                raise ValueError(f"The table {spec.database}.{spec.table} names another warehouse or metastore "
                                 f"({spec.warehouse_dir}, {spec.metastore_uri}) than its job's: one application "
                                 "has one.")
        return self


class TableMerge(Model):
    """What the merge job did to one table: ``committed`` a new version, found it ``unchanged`` (already past
    the run), or ``failed`` (``error``)."""

    status: Literal[Status.COMMITTED, Status.UNCHANGED, Status.FAILED]
    reason: str = ""
    version: int | None = None
    location: str | None = None
    rows: int | None = None
    origin: int | None = None  # the version merged onto; None for a load
    added_columns: tuple[str, ...] = ()
    datetimes_in_gaps: int = 0
    removed_versions: tuple[int, ...] = ()
    # A partitioned table's partitions after the commit, and those this commit rewrote (new ones included) and
    # emptied; the others were neither read nor written.
    partitions: int | None = None
    rewritten_partitions: int = 0
    emptied_partitions: int = 0
    # The version's changelog partition (``core.changelog``); None without a changelog.
    changelog: ChangelogCommit | None = None
    # The days whose daily snapshot the version is, and its commit to the SCD2 history (``core.history``).
    snapshot_days: tuple[str, ...] = ()
    history: HistoryCommit | None = None
    phases: dict[str, float] = {}
    error: str | None = None
    seconds: float = 0.0


class MergeResult(Model):
    """The merge job's result file: each table's ``TableMerge`` by ``MergeSpec.result_key`` (database.table, and the
    shard of a shard)."""

    tables: dict[str, TableMerge]
    session_seconds: float = 0.0
    seconds: float = 0.0


def merge_spec(table: TablePlan, merge_input: MergeInput, warehouse_dir: str, metastore_uri: str | None,
               keep_versions: int, datetime_zone: str = "UTC", uri: Callable[[str], str] = str) -> MergeSpec:
    """The merge spec of one table: its plan, what the snapshot or the replay made of it, and its target.

    ``datetime_zone`` is the zone the table's readers use (``hive.time_zone``); ``uri`` gives the URI Spark
    reads a capture file by (``WorkStore.uri``)."""
    if merge_input.source != table.source:
        raise ValueError(f"The merge input of {merge_input.source} was given for {table.source}.")
    plan = table.plan
    if merge_input.mode == Mode.HEAL:
        # Planned as the binlog's; its chain broke in the range, and the heal's diff brought it level: merged onto
        # the version the diff compared the source with, and recorded as healed.
        if table.mode != Mode.INCREMENTAL or merge_input.healed is None or merge_input.end is None:
            raise ValueError(f"{table.source} was planned as {table.mode}, but its merge input is a heal without "
                             "its binlog moment or its reason, or of a table not read from the binlog.")
        plan = plan.model_copy(update={"mode": Mode.HEAL, "reason": f"healed by a diff: {merge_input.healed.why}"})
    elif merge_input.mode == Mode.SNAPSHOT and merge_input.healed is not None and merge_input.healed.reloaded:
        # Planned as the binlog's; its chain broke at a change no merge onto the version can follow, and the heal
        # read it whole: loaded as a snapshot is, and recorded as one.
        if table.mode != Mode.INCREMENTAL or merge_input.end is None:
            raise ValueError(f"{table.source} was planned as {table.mode}, but its merge input is a load anew of a "
                             "table read from the binlog, or one without its binlog moment.")
        plan = plan.model_copy(update={"mode": Mode.SNAPSHOT, "reason": f"loaded anew: {merge_input.healed.why}"})
    elif merge_input.mode != table.mode:
        raise ValueError(f"{table.source} was planned as {table.mode}, but its merge input is a {merge_input.mode}.")
    database, name = table.table.hive_table.split(".", 1)
    run_dir = table.run_dir.root
    for file in (*merge_input.upsert_files, merge_input.delete_file, merge_input.fills_file, merge_input.events_file):
        if file is not None and not within(file, run_dir):
            raise ValueError(f"The merge input of {table.source} names {file}, which is not under the run's "
                             f"directory {run_dir}: a merge reads only the files its own run wrote there.")
    return MergeSpec(
        database=database, table=name, source=table.source, warehouse_dir=warehouse_dir,
        metastore_uri=metastore_uri, plan=plan, end=merge_input.end,
        # A re-run keeps the moment its first commit reflected; the range is the same.
        as_of=table.plan.as_of or merge_input.as_of,
        columns=tuple((name, hive_type(ctype)) for name, ctype in merge_input.columns), key=merge_input.key,
        capture_dir=uri(run_dir), upsert_files=tuple(uri(f) for f in merge_input.upsert_files),
        delete_file=uri(merge_input.delete_file) if merge_input.delete_file else None, keep_versions=keep_versions,
        source_columns=merge_input.source_columns, fills_file=uri(merge_input.fills_file) if merge_input.fills_file
        else None, fill_sources=merge_input.fill_sources, datetime_zone=datetime_zone,
        datetime_columns=tuple(name.lower() for name, ctype in merge_input.columns
                               if ColumnType.parse(ctype).base == "datetime"),
        buckets=merge_input.reread.buckets if merge_input.reread and merge_input.reread.which else 0,
        replaced=merge_input.reread.which if merge_input.reread else (),
        spark_conf=table.table.spark_conf, target=merge_target(table, merge_input, name),
        # A diff's rows come with no before image: where a partitioned table held them is looked up.
        reread_rows=merge_input.reread is not None or merge_input.mode in (Mode.DIFF, Mode.HEAL),
        events_file=uri(merge_input.events_file) if merge_input.events_file else None,
        digests=merge_input.digests_file,
        keep_hive_columns=merge_input.healed is not None and merge_input.healed.reloaded and not new_key(
            table.committed.columns if table.committed else None, merge_input.columns, merge_input.key),
    )


def new_key(version: Columns | None, now: Columns, key: Sequence[str]) -> bool:
    """Whether a key column of the source now (``now``, ``key``) is not one of the version's (``version``, the
    source's columns it was read with), or has another type: rows cannot be matched, it is a new table."""
    was = {name.lower(): ctype for name, ctype in version or ()}
    types = {name.lower(): ctype for name, ctype in now}
    return version is None or any(was.get(k.lower()) != types.get(k.lower()) for k in key)


def merge_target(table: TablePlan, merge_input: MergeInput, name: str) -> Target:
    """Where the merge of ``table`` writes (``name``: its Hive table's name), from its configuration."""
    captured = table.table
    changelog = (ChangelogSpec(table=changelog_table(name), settings=captured.changelog)
                 if captured.changelog is not None else None)
    history = HistorySpec.of(name, captured.history) if captured.history is not None else None
    if captured.shard is not None:
        if captured.partitioning or changelog or history:
            raise ValueError(f"{table.source} is a shard: its Hive table is partitioned by the shards, without a "
                             "changelog or a history.")
        return ShardTarget(shard=captured.shard)
    if captured.partitioning is not None:
        return PartitionedTarget(partitioning=captured.partitioning, left_partitions=merge_input.left_partitions,
                                 changelog=changelog, history=history)
    return PlainTarget(changelog=changelog, history=history)


def layout_text(partitioning: Partitioning | None) -> str:
    """A table's layout in words, for messages: ``not partitioned`` or ``partitioned by day(created_at)``."""
    if partitioning is None:
        return "not partitioned"
    zone = f" for readers in {partitioning.time_zone}" if partitioning.time_zone != "UTC" else ""
    return f"partitioned by {partitioning.spec.text}{zone}"


def layout_problem(hive_table: str, recorded: Partitioning | None, configured: Partitioning | None) -> str | None:
    """Why a table laid out as ``recorded`` cannot take a run laid out as ``configured`` without a fresh snapshot:
    its rows would be in partitions of two layouts. None when they are the same."""
    if recorded == configured:
        return None
    return (f"The Hive table {hive_table} is {layout_text(recorded)}, but its configuration now says "
            f"{layout_text(configured)}. Nothing was changed. A table changes its layout by a fresh snapshot: "
            "trigger a run with fresh_snapshot=true (or set `partition_by:` back).")


def check_layout(version_layout: Partitioning | None, spec: MergeSpec, load: bool) -> None:
    """Refuse to merge onto a version laid out otherwise than the table's configuration says. A snapshot (a load)
    writes the table anew in the configured layout."""
    problem = None if load else layout_problem(f"{spec.database}.{spec.table}", version_layout, spec.partitioning)
    if problem:
        raise LedgerConflict(problem)


Retention = Literal["keep", "delete", "descend"]


def retention(path: str, referenced: Collection[str]) -> Retention:
    """What becomes of ``path``, a directory (or file) in a version directory that goes: ``keep`` it when a kept
    version (or the metastore) names it as a partition's location, ``delete`` it when no such location is in it,
    and ``descend`` into it when one is: a partition rewritten long ago stays where the newer versions still
    read it, while the rest of its old version goes."""
    if any(place(path) == place(location) for location in referenced):
        return "keep"
    if any(within(location, path) for location in referenced):
        return "descend"
    return "delete"


def check_datetime_zone(version_zone: str, spec: MergeSpec) -> None:
    """Refuse to merge DATETIME values written for readers in one zone onto a version written for another:
    the table would hold both, and no reader could tell them apart."""
    if spec.datetime_columns and version_zone != spec.datetime_zone:
        raise LedgerConflict(
            f"The DATETIME columns of {spec.database}.{spec.table} were written for readers in {version_zone}, but "
            f"`hive: time_zone:` is now {spec.datetime_zone}. Nothing was changed. Set it back, or trigger a run "
            "with fresh_snapshot=true to write the whole table again for the new zone."
        )


def next_columns(table: list[tuple[str, str]], run: list[tuple[str, str]], filled: set[str],
                 table_name: str) -> list[tuple[str, str]]:
    """The Hive table's columns after an incremental merge: its own, then the run's new ones at the end.

    ``table`` and ``run`` are (Hive name, Hive type); ``filled`` the columns added in the run's range. A column
    the table keeps but the run lacks (dropped at the source, kept by ``schema_changes: evolve``) stays. A
    column whose Hive type differs, or a new one the range did not add, cannot be merged in place.
    """
    have = dict(table)
    fix = "Nothing was changed. Trigger a run with fresh_snapshot=true to reload it with the source's columns."
    for name, hive in run:
        if name in have and have[name] != hive:
            raise LedgerConflict(f"The column {name} of the Hive table {table_name} is {have[name]}, but this run "
                                 f"gives it as {hive}: Hive cannot change a column's type in place. {fix}")
    new = [(name, hive) for name, hive in run if name not in have]
    unexplained = [name for name, _ in new if name not in filled]
    if unexplained:
        raise LedgerConflict(f"The columns {unexplained} are not in the Hive table {table_name}, and this run did "
                             f"not see them added, so their values in the table's other rows are unknown. {fix}")
    return [*table, *new]


def written_lineage(spec: MergeSpec, source_columns: Sequence[tuple[str, str]], mysql: str,
                    hive: str) -> list[TableLineage]:
    """The Hive tables a commit of ``spec`` writes, each read from its source table (its MySQL columns
    ``source_columns``), in the namespaces ``mysql`` and ``hive``: the table, and its changelog table, which holds
    the same columns copied as they are and the columns of its changes."""
    layout = spec.partitioning
    written = [table_lineage(spec.source, source_columns, f"{spec.database}.{spec.table}", spec.hive_columns,
                             mysql, hive,
                             (layout.column, layout.hive_type, layout.source_column) if layout else None)]
    if spec.changelog is not None:
        written.append(table_lineage(spec.source, source_columns, f"{spec.database}.{spec.changelog.table}",
                                     spec.changelog.settings.fields(spec.hive_columns), mysql, hive))
    if spec.history is not None and spec.history.snapshots is not None:
        day = (spec.history.settings.day_column, "string")
        written.append(table_lineage(spec.source, source_columns, f"{spec.database}.{spec.history.snapshots}",
                                     (*spec.hive_columns, day), mysql, hive,
                                     (layout.column, layout.hive_type, layout.source_column) if layout else None))
    if spec.history is not None and spec.history.history is not None:
        written.append(table_lineage(spec.source, source_columns, f"{spec.database}.{spec.history.history}",
                                     (*history_columns(spec.hive_columns, spec.history.settings),
                                      (HISTORY_PARTITION, "string")), mysql, hive))
    return written
