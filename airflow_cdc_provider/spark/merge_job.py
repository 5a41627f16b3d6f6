"""The merge, on Spark: the next version of the Hive table, written beside the current one, then switched to.

    spark-submit merge_job.py <URI of the merge job JSON>

One application merges every table of its job, one after the other, each committed on its own; one table's
failure is its result and does not stop the others. The application writes the results and nothing else:
the merge task records the commits in the ledgers from them. It reads the job, the capture files and the table,
and writes the result, through Hadoop's FileSystem by the URIs in the job: it needs nothing from the Airflow
worker's disk, so the driver may run on a cluster node (YARN or Kubernetes cluster deploy mode).

    new = origin LEFT ANTI JOIN deletes ON key <=> key
                 LEFT ANTI JOIN upserts ON key <=> key
          UNION ALL upserts

Keys are matched null-safely (``<=>``): a zero date in a key column is NULL in Hive, and is still one key.

The first load (and a fresh snapshot) is the same with no origin. Columns added at the source in the range
are appended to the table: the origin's rows get their fill (the renamed column's values, or the default the
server gave existing rows), and a column dropped at the source but kept by the ``evolve`` policy is NULL in
the upserts. Spark can neither MERGE INTO a Hive table
nor overwrite a table it reads, and it need not: each version is a directory of its own, ``<table>/vNNNNNN``,
holding the data and a version file with the watermark it reflects. One metastore operation, CREATE TABLE on
the first load and ALTER TABLE … SET LOCATION after, switches the table to it; that is the commit. A job killed
before it leaves the table on the previous version, whole; a directory it left half-written is never read and
is removed by a later run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
import time
from collections.abc import Iterator
from typing import Any

from airflow_cdc_provider.core.changelog import POSITION_COLUMNS, ChangelogCommit, version_day
from airflow_cdc_provider.core.history import (
    HISTORY_PARTITION,
    OPEN_END,
    HistoryCommit,
    days_served,
    history_columns,
    history_dirs_to_prune,
    next_days,
)
from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.core.ledger import VERSION_FILE, LedgerConflict, VersionInfo
from airflow_cdc_provider.core.merge import (
    LISTED_FILE,
    MergeJob,
    MergeResult,
    MergeSpec,
    TableMerge,
    history_partition_problem,
    layout_text,
    parse_version_dir,
    retention,
    version_dir_name,
    version_dir_problem,
    versions_to_remove,
)
from airflow_cdc_provider.core.modes import Action, Mode, Status
from airflow_cdc_provider.core.partition_commit import PartitionChange
from airflow_cdc_provider.core.partitioning import Partitioning, metastore_value
from airflow_cdc_provider.core.version_plan import VersionPlan, plan_version
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.spark import shards
from airflow_cdc_provider.spark.beside_tables import ensure_beside_table
from airflow_cdc_provider.spark.changelog import (
    changelog_root,
    changelog_rows,
    last_changes,
    net_changes,
    register,
    registered,
)
from airflow_cdc_provider.spark.files import HadoopFiles
from airflow_cdc_provider.spark.history import (
    initial_open,
    matching_keys,
    open_values,
    renamed_keys,
    scd2_step,
)
from airflow_cdc_provider.spark.names import column
from airflow_cdc_provider.spark.partition_commit import (
    commit_partitions,
    partition_location,
)
from airflow_cdc_provider.spark.partitioning import partition_value
from airflow_cdc_provider.spark.session import hive_session, prefer_installed_pyspark
from airflow_cdc_provider.spark.snapshots import day_partitions, ensure_table, sync_days
from airflow_cdc_provider.spark.targets import partitions_frame, target_of


def _describe(spark: Any, statement: str) -> dict[str, str]:
    return {row[0]: row[1] for row in spark.sql(statement).collect()}


def _database_location(spark: Any, database: str, found: dict[str, str]) -> str:
    """The location of the Hive database ``database``, created if missing; ``found``: the application's, by name."""
    if database not in found:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
        found[database] = _describe(spark, f"DESCRIBE DATABASE {quote_identifier(database)}")["Location"]
    return found[database]


def _current(spark: Any, spec: MergeSpec) -> tuple[str | None, VersionInfo | None, list[tuple[str, str]]]:
    """The table's location now, the version file found there, and the table's columns; Nones if no table. Of a
    shard: its partition's location, and the Hive table's columns but the shard columns (every shard's)."""
    if not spark.catalog.tableExists(f"{spec.database}.{spec.table}"):
        return None, None, []
    if spec.shard is not None:
        shards.check_partitioning(spark, spec)
        location = partition_location(spark, spec.database, spec.table, spec.shard.values)
        if location is None:
            return None, None, shards.table_columns(spark, spec)
        return location, _version_file(spark, spec, location), shards.table_columns(spark, spec)
    details = _describe(spark, f"DESCRIBE TABLE EXTENDED {spec.qualified_table}")
    location = details.get("Location", "")
    info = _version_file(spark, spec, location)
    held = info.partitioning.column if info.partitioning else None  # a partition column is no column of the source
    columns = [(f.name, f.dataType.simpleString()) for f in spark.table(f"{spec.database}.{spec.table}").schema
               if f.name != held]
    return location, info, columns


def _version_file(spark: Any, spec: MergeSpec, location: str) -> VersionInfo:
    text = HadoopFiles(spark, location).read_text(f"{location}/{VERSION_FILE}")
    if parse_version_dir(location) is None or text is None:
        raise LedgerConflict(
            f"The Hive table {spec.database}.{spec.table} exists but was not made by this pipeline (its location "
            f"{location} holds no {VERSION_FILE}). Give the table another `target:` name, or drop it."
        )
    return VersionInfo.from_text(text)


def _hive_frame(spark: Any, paths: list[str], columns: list[tuple[str, str]], spec: MergeSpec,
                keep: tuple[str, ...] = ()) -> Any:
    """Parquet files of the capture stages, as the Hive columns: lower-case names (Hive's), Hive types; with the
    columns ``keep`` the files have (replay's positions), as they are.

    A DATETIME holds the UTC instant of its digits in the capture files; for readers in another zone it becomes
    the instant its digits name there (the session is in UTC)."""
    from pyspark.sql.functions import to_utc_timestamp

    frame = spark.read.parquet(*paths)
    shifted = set(spec.datetime_columns) if spec.datetime_zone != "UTC" else set()

    def hive_column(name: str, hive: str) -> Any:
        value = column(name).cast(hive)
        return (to_utc_timestamp(value, spec.datetime_zone) if name.lower() in shifted else value).alias(name.lower())

    have = set(frame.columns)
    return frame.select([hive_column(name, hive) for name, hive in columns] + [column(k) for k in keep if k in have])


def _datetimes_in_gaps(spark: Any, spec: MergeSpec) -> int:
    """Upsert rows with a DATETIME whose digits do not exist in the readers' zone: a wall-clock time skipped by a
    daylight-saving change. Java's time rules move it forward by the gap; the count is reported, not hidden."""
    from functools import reduce

    from pyspark.sql.functions import from_utc_timestamp, to_utc_timestamp

    if spec.datetime_zone == "UTC" or not spec.datetime_columns:
        return 0
    raw = spark.read.parquet(*spec.upsert_files)
    names = {name.lower(): name for name in raw.columns}
    zone = spec.datetime_zone
    # There and back: a time that exists in the zone comes back with its own digits, a skipped one does not.
    moved = [from_utc_timestamp(to_utc_timestamp(value, zone), zone) != value
             for value in (column(names[c]).cast("timestamp") for c in spec.datetime_columns
                           if c in names)]
    return raw.where(reduce(lambda a, b: a | b, moved)).count() if moved else 0


class _Clock:
    """Seconds per phase, printed into the task log and returned in the result."""

    def __init__(self, label: str = "") -> None:
        self.last, self.label = time.perf_counter(), label
        self.phases: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = round(now - self.last, 3)
        self.last = now
        print(f"cdc-merge: {self.label}{phase} {self.phases[phase]:.1f} s", flush=True)


def _fills(spark: Any, spec: MergeSpec, plan: VersionPlan) -> tuple[Any, dict[str, list[str]]]:
    """The one-row frame of the plan's filled columns' constants (as ``__fill_<name>``), and each one's source
    columns. Without a fills file (a heal's added columns), the rows that predate them hold NULL there: the heal
    read again every row that holds a value in one (``core.diff.heal_digest``)."""
    sources = {added: list(of) for added, of in plan.filled}
    if not sources or not spec.fills_file:
        return None, sources
    types = dict(spec.hive_columns)
    frame = _hive_frame(spark, [spec.fills_file], [(added, types[added.lower()]) for added, _ in spec.fill_sources],
                        spec)
    frame = frame.select([column(name).alias(f"__fill_{name}") for name in sources])
    return frame, sources


def _upserts(spark: Any, spec: MergeSpec, columns: list[tuple[str, str]]) -> Any:
    """The upsert files' rows as ``columns``: a column the source no longer has (kept by ``evolve``) NULL."""
    from pyspark.sql.functions import lit

    upserts = _hive_frame(spark, list(spec.upsert_files), spec.hive_columns, spec)
    have = set(upserts.columns)
    return upserts.select([column(name) if name in have else lit(None).cast(hive).alias(name)
                           for name, hive in columns])


def _as_columns(old: Any, columns: list[tuple[str, str]], fills: tuple[Any, dict[str, list[str]]]) -> Any:
    """A version's rows as ``columns``: the columns added in the range get their fill (``_fills``), as the rows
    predate them; a column the version lacks is NULL."""
    from pyspark.sql.functions import broadcast, lit

    fill_row, sources = fills
    held = set(old.columns)
    if fill_row is not None:
        old = old.crossJoin(broadcast(fill_row))

    def origin_value(name: str, hive: str) -> Any:
        if name in sources:  # added in the range: the rows here predate it
            source = next((s for s in sources[name] if s in held), None)
            value = column(source) if source else column(f"__fill_{name}") if fill_row is not None else lit(None)
        elif name in held:
            value = column(name)
        else:
            value = lit(None)
        return value.cast(hive).alias(name)

    return old.select([origin_value(name, hive) for name, hive in columns])


def _merged(spark: Any, spec: MergeSpec, origin: Any, columns: list[tuple[str, str]]) -> Any:
    """origin ANTI JOIN deletes ANTI JOIN upserts UNION ALL upserts, as ``columns``, where ``origin`` holds the
    origin's rows as ``columns`` (``_as_columns``; of a partitioned table, those of the partitions rewritten);
    just the upserts without an origin."""
    key = spec.hive_key
    upserts = _upserts(spark, spec, columns)
    if origin is None:
        return upserts
    if spec.buckets and spec.replaced:  # read again from the source whole: the upserts hold what is there
        origin = origin.where(~_bucket(spec).isin(list(spec.replaced)))
    if spec.delete_file is not None:  # a snapshot's input has none
        key_columns = [(name, hive) for name, hive in spec.hive_columns if name in key]
        origin = _without_keys(origin, _hive_frame(spark, [spec.delete_file], key_columns, spec), key)
    return _without_keys(origin, upserts, key).unionByName(upserts)


def _bucket(spec: MergeSpec) -> Any:
    """Verify's bucket of each row's key (``core.verify``), over the table's rows."""
    from airflow_cdc_provider.spark.verify_job import bucket_of, key_text

    key_types = [(name, ctype) for name, ctype in spec.source_columns if name in spec.key]
    return bucket_of(key_text(key_types, spec.key, True, spec.datetime_zone), spec.buckets)


def _without_keys(rows: Any, keys: Any, key: list[str], how: str = "left_anti") -> Any:
    """The rows of ``rows`` whose key is none of ``keys``'s rows' keys (a left anti join), compared null-safely.

    A key part can be NULL in Hive: a zero date in a DATETIME, DATE or TIMESTAMP key column (docs/types.md).
    With ``=`` (or a join USING the names) NULL matches nothing, so a deleted or updated row with such a key
    would stay beside its new version. ``<=>`` (``eqNullSafe``) matches it; Spark still plans it as a hash or
    sort-merge join, on each part's value and its NULL flag. The other side's key columns are renamed first,
    to names holding a comma, which no column of a captured table can hold (``hive_column_problem``): the
    condition's names can then only mean one side each, whatever the table's own names are. ``how``
    ``left_semi`` keeps the rows whose key is among them instead."""
    return matching_keys(rows, renamed_keys(keys, key), key, how)


def merge(spark: Any, spec: MergeSpec, databases: dict[str, str]) -> TableMerge:
    """Merge one table and commit it; returns its result. ``databases``: the Hive databases' locations the
    application found so far, by name (each is looked up, or created, once per application)."""
    clock = _Clock(f"{spec.database}.{spec.table}: ")
    location, current, table_columns = _current(spark, spec)
    clock.lap("metastore read")
    if current is not None and location and _beside(spec) and not HadoopFiles(spark, location).exists(
            f"{location}/{LISTED_FILE}"):
        # A commit whose job died before the tables beside it listed the version: they list it now, before
        # anything else (whatever this run may be refused), by the same call that lists a version after its commit.
        _publish(spark, spec, current, location, table_columns)
    plan = plan_version(spec, current, tuple(table_columns))
    print(f"cdc-merge: {plan.action}: {plan.reason}", flush=True)
    if not plan.writes:
        return TableMerge(status=Status.UNCHANGED, reason=plan.reason, version=current.version if current else None,
                          location=location)
    layout = spec.partitioning
    fills = _fills(spark, spec, plan)
    columns = list(plan.columns)
    target = target_of(spark, spec, location, _database_location(spark, spec.database, databases),
                       current.rows if current is not None else None,
                       lambda has_partitions: _touched(spark, spec, layout, has_partitions) if layout else set())
    files = target.files
    existing = files.versions()
    target.check_origin(plan, existing)
    version = max([*existing, current.version if current else 0]) + 1
    path = _version_dir(files, version, spec)
    if files.exists(path):
        files.delete(path)  # a killed attempt's leftover; never the table's location, which is older
    written = target.write(plan, path, lambda old: _merged(
        spark, spec, _as_columns(old, columns, fills) if old is not None else None, columns))
    clock.lap("write")
    failpoint("merge.driver.written")

    logged = None
    recorded = None
    anew = plan.anew
    net = None
    if spec.changelog is not None or _scd2(spec):
        before = None if anew or current is None else _rows_before(
            spark, spec, current, location or "", None if plan.action is Action.LOAD else written.touched, columns,
            fills, plan.origin_version)
        # The version's net changes, from the version the table is at now to this one: kept while both the
        # changelog and the history are written from them.
        net, kept = _net(spark, spec, before, columns, first_load=True)
    if spec.changelog is not None:
        logged = _write_changes(spark, spec, files, version, net, columns, first_load=anew, current=current)
        clock.lap("changes")
    if _scd2(spec):
        recorded = _write_history(spark, spec, files, version, net, columns, fills, current, location,
                                  anew=anew, load=plan.action is Action.LOAD)
        clock.lap("history")
    if net is not None:
        for frame in (net, *kept):
            frame.unpersist()

    snapshot_days: tuple[tuple[str, int], ...] = ()
    dropped_days: tuple[str, ...] = ()
    if spec.history is not None and _snapshots(spec):
        # The days this version is the snapshot of, beside those older versions are; a table defined anew (other
        # column types, another layout) starts its days again.
        known = current is not None and current.as_of is not None and not plan.redefine
        served = days_served(spec.as_of, current.as_of if known and current else None, spec.datetime_zone)
        snapshot_days, dropped_days = next_days(current.snapshot_days if known and current else (), served, version,
                                                spec.history.settings.keep_days, spec.as_of, spec.datetime_zone)

    def described(partitions: tuple[tuple[str, str], ...]) -> VersionInfo:
        return VersionInfo(
            version=version, watermark=spec.end, as_of=spec.as_of, run=spec.plan.run,
            input_version=spec.plan.input_version, mode=spec.plan.mode, source=spec.source, rows=written.rows,
            source_columns=spec.source_columns, datetime_zone=spec.datetime_zone, partitioning=layout,
            partitions=partitions, changelog=logged, snapshot_days=snapshot_days, dropped_days=dropped_days,
            history=recorded)

    partitions = target.commit(plan, version, path, written, described)
    if _beside(spec):
        _publish(spark, spec, described(partitions), path, columns)
    clock.lap("commit")
    changes = written.changes
    rewritten = sum(1 for c in changes if c.location is not None)
    emptied = len(changes) - rewritten
    shape = (f", {layout_text(layout)}: {rewritten} partitions rewritten, {emptied} emptied, "
             f"{len(partitions) - len(changes)} untouched" if layout else "")
    print(f"cdc-merge: committed version {version} of {spec.database}.{spec.table} ({written.rows} rows{shape})",
          flush=True)

    in_gaps = _datetimes_in_gaps(spark, spec)
    if in_gaps:
        print(f"cdc-merge: {in_gaps} rows hold a DATETIME that does not exist in {spec.datetime_zone} (skipped by a "
              "daylight-saving change): moved forward by the gap", flush=True)
    # A version a kept day is the snapshot of stays, whatever its age.
    pinned = {number for _, number in snapshot_days}
    expired = versions_to_remove({**existing, version: True}, version, spec.keep_versions, plan.origin_version)
    removed = [number for number in expired if number not in pinned]
    if spec.changelog is not None:
        _remove_unlisted_changes(spark, spec, files, removed)
    if recorded is not None:
        _remove_history_versions(files, spec, expired, {*existing, version}, recorded)
    _remove_versions(files, spec, removed, existing, partitions)
    clock.lap("cleanup")
    return TableMerge(status=Status.COMMITTED, version=version, location=path, rows=written.rows,
                      origin=plan.origin_version, added_columns=tuple(name for name, _ in plan.added),
                      datetimes_in_gaps=in_gaps, reason=plan.reason, removed_versions=tuple(removed),
                      phases=clock.phases, partitions=len(partitions) if layout else None,
                      rewritten_partitions=rewritten, emptied_partitions=emptied, changelog=logged,
                      snapshot_days=tuple(day for day, number in snapshot_days if number == version),
                      history=recorded)


def _rows_before(spark: Any, spec: MergeSpec, current: VersionInfo, location: str, touched: set[str] | None,
                 columns: list[tuple[str, str]], fills: tuple[Any, dict[str, list[str]]],
                 origin_version: int | None) -> Any:
    """The rows of the version the table is at (``current``, as its version file describes it, at ``location``)
    that the run may change, as ``columns``: all of them (``touched`` None: a load); for a merge, of a partitioned
    table those of the partitions it rewrites. None when there are none to read.

    Read from that version, not from the merge's origin (``origin_version``): a re-run merging onto its input
    version again finds the table at its own earlier result, and the change from there to the new version is none.
    Columns added in the range get their fill only in the origin itself, which predates them."""
    if current.partitioning is None:
        locations = [location]
    else:
        locations = [where for value, where in current.partitions if touched is None or value in touched]
    if not locations:
        return None
    if current.partitioning is None:
        rows = spark.read.parquet(location)
    else:
        rows = partitions_frame(spark, spec, current.partitioning, locations)
    return _as_columns(rows, columns, fills if current.version == origin_version else (None, {}))


def _write_changes(spark: Any, spec: MergeSpec, files: HadoopFiles, version: int, net: Any,
                   columns: list[tuple[str, str]], first_load: bool, current: VersionInfo | None) -> ChangelogCommit:
    """Write the version's changes into its changelog directory (``core.changelog``); returns what its version
    file records of them. ``net``: the version's net changes (``_net``); ``first_load``: the version starts the
    table (or its changelog) anew; ``current``: the version the table is at."""
    from pyspark.sql import Observation
    from pyspark.sql.functions import count, lit

    assert spec.changelog is not None
    settings = spec.changelog.settings
    if settings.mode == "all" and spec.events_file and spec.plan.mode != Mode.SNAPSHOT and not (
            spec.reread_rows or spec.replaced):
        changes = _every_event(spark, spec, columns, current)
    else:
        if settings.mode == "all" and spec.plan.mode != Mode.SNAPSHOT:
            print("cdc-merge: rows read again from the source are no binlog events: this version's changelog holds "
                  "its net changes", flush=True)
        changes = net.where(lit(False)) if first_load and settings.snapshot == "none" else net
    committed_at = dt.datetime.now(dt.UTC)
    rows = changelog_rows(changes, columns, spec.end.file if spec.end else None, committed_at)
    root = changelog_root(files, files.root, spec.changelog)
    path = f"{root}/{version_dir_name(version)}"
    problem = version_dir_problem(path, spec.warehouse_dir, spec.changelog.table)
    if problem:
        raise LedgerConflict(f"The changes of {spec.database}.{spec.table} were not written: {problem}")
    if files.exists(path):
        files.delete(path)  # a killed attempt's: its version was never committed (a committed one is older)
    written = Observation("changes")
    rows.observe(written, count(lit(1)).alias("rows")).write.mode("errorifexists").parquet(path)
    failpoint("merge.changes.written")
    previous_as_of = current.as_of if current is not None else None
    return ChangelogCommit(table=spec.changelog.table, day=version_day(spec.as_of, previous_as_of, spec.datetime_zone),
                           day_column=settings.day_column, location=path, rows=int(written.get["rows"]),
                           committed_at=committed_at)


def _every_event(spark: Any, spec: MergeSpec, columns: list[tuple[str, str]], current: VersionInfo | None) -> Any:
    """The range's row events (``stages.events``) as changelog rows, in binlog order (``_change_ordinal``). Those
    at or before the position the table's version already reflects are left out: a re-run whose first attempt
    committed, or a version inside the range (a run killed between its commit and its ledger), holds them already.
    The ones kept are numbered from 1 again, as every version's are."""
    from pyspark.sql.functions import lit
    from pyspark.sql.functions import min as min_

    extra = ("_change_type", "_change_ordinal", *POSITION_COLUMNS)
    events = _hive_frame(spark, [spec.events_file or ""], spec.hive_columns, spec, extra)
    have = set(events.columns)
    events = events.select([column(name) if name in have else lit(None).cast(hive).alias(name)
                            for name, hive in columns] + [column(name) for name in extra])
    if current is not None and current.watermark is not None and spec.end is not None \
            and current.watermark.same_server(spec.end):
        seq, pos = current.watermark.coordinate
        at_seq, at_pos = column(POSITION_COLUMNS[0]), column(POSITION_COLUMNS[1])
        events = events.where((at_seq > seq) | ((at_seq == seq) & (at_pos > pos)))
        # Ordinals follow binlog order, so those kept are the last ones: n+1, n+2, … become 1, 2, …
        first = events.agg(min_("_change_ordinal")).first()[0]
        if first is not None and first > 1:
            events = events.withColumn("_change_ordinal", column("_change_ordinal") - (first - 1))
    return events


def _net(spark: Any, spec: MergeSpec, before: Any, columns: list[tuple[str, str]],
         first_load: bool) -> tuple[Any, tuple[Any, ...]]:
    """The version's net changes (``spark.changelog.net_changes``) from the capture files and ``before``,
    persisted (the changelog and the history are both written from them), and the frames kept for them: the
    caller unpersists both once it wrote what it needed."""
    key = spec.hive_key
    frames = [(_hive_frame(spark, [path], spec.hive_columns, spec, POSITION_COLUMNS), True)
              for path in spec.upsert_files]
    if spec.delete_file is not None:
        key_columns = [(name, hive) for name, hive in spec.hive_columns if name in key]
        frames.append((_hive_frame(spark, [spec.delete_file], key_columns, spec, POSITION_COLUMNS), False))
    last = last_changes(frames, columns)
    if before is None or spec.plan.mode == Mode.SNAPSHOT:
        return net_changes(before, last, key, columns, first_load=first_load).persist(), ()
    # Only the rows whose key changed, and every row of a repaired bucket: the others are as they were. Read from
    # the version once, kept, and counted, so that Spark joins them knowing how few they are (``net_changes``).
    keys = last.select([column(k) for k in key])
    looked_up = _without_keys(before, keys, key, "left_semi").persist()
    looked_up.count()
    gone = None
    if spec.buckets and spec.replaced:
        gone = _without_keys(before.where(_bucket(spec).isin(list(spec.replaced))), keys, key)
    # Kept until the net changes are: they are computed from it at their first use.
    net = net_changes(looked_up, last, key, columns, first_load=first_load, looked_up=True, gone=gone).persist()
    return net, (looked_up,)


def _add_changes(spark: Any, spec: MergeSpec, changes: ChangelogCommit, version: int, location: str,
                 columns: list[tuple[str, str]]) -> None:
    """Add the changelog partition of the committed ``version`` (at ``location``), checked to be that version's
    own changelog directory: a version file names it, and only that directory may become a partition."""
    assert spec.changelog is not None
    problem = version_dir_problem(changes.location, spec.warehouse_dir, changes.table)
    if problem is None and (parse_version_dir(changes.location) != version or changes.table != spec.changelog.table):
        problem = f"{changes.location} is not the changelog directory of version {version} in {spec.changelog.table}"
    if problem:
        raise LedgerConflict(f"The changelog partition of {spec.database}.{spec.table} was not added: {problem}.")
    versions = HadoopFiles(spark, location).parent(location)
    register(spark, spec.database, changes, changelog_root(HadoopFiles(spark, versions), versions, spec.changelog),
             columns, version)


def _snapshots(spec: MergeSpec) -> bool:
    return spec.history is not None and spec.history.snapshots is not None


def _sync_snapshots(spark: Any, spec: MergeSpec, version: int, location: str, partitions: tuple[tuple[str, str], ...],
                    days: tuple[tuple[str, int], ...], dropped: tuple[str, ...], columns: list[tuple[str, str]],
                    layout: Partitioning | None) -> None:
    """Make the snapshots table list the days the committed ``version`` (at ``location``, with ``partitions``) is
    the snapshot of, and no longer list the days ``dropped``: after the commit, and again by any later merge
    (both idempotent), so that a job killed in between leaves nothing undone for good."""
    assert spec.history is not None and spec.history.snapshots is not None
    settings = spec.history.settings
    versions = HadoopFiles(spark, location).parent(location)
    root = f"{HadoopFiles(spark, versions).parent(versions)}/{spec.history.snapshots}"
    ensure_table(spark, spec.database, spec.history.snapshots, columns, settings.day_column, layout, root)
    added = [partition for day, number in days if number == version
             for partition in day_partitions(settings.day_column, day, layout, location, partitions)]
    sync_days(spark, spec.database, spec.history.snapshots, settings.day_column, added, dropped, spec.warehouse_dir)
    if added or dropped:
        mine = sorted(day for day, number in days if number == version)
        print(f"cdc-merge: {spec.database}.{spec.history.snapshots}: the days {mine} are version {version}; dropped "
              f"{list(dropped)}", flush=True)


def _publish(spark: Any, spec: MergeSpec, info: VersionInfo, location: str, columns: list[tuple[str, str]]) -> None:
    """List the committed version ``info`` (at ``location``, with ``columns``) in the tables beside the table: its
    changelog partition, the history partitions it switches, the days it is the snapshot of; then mark it listed.
    Each step is idempotent: a merge that finds the version the table is at not marked (its job died after the
    commit) calls this again before anything else, and the mark saves the metastore calls after that."""
    files = HadoopFiles(spark, location)
    if spec.changelog is not None and info.changelog is not None:
        _add_changes(spark, spec, info.changelog, info.version, location, columns)
    if _scd2(spec) and info.history is not None:
        _switch_history(spark, spec, info.history, files_of=files, columns=columns)
    if _snapshots(spec):
        _sync_snapshots(spark, spec, info.version, location, info.partitions, info.snapshot_days, info.dropped_days,
                        columns, info.partitioning)
    files.write_text(f"{location}/{LISTED_FILE}", "", overwrite=True)


def _beside(spec: MergeSpec) -> bool:
    """Whether the table has tables beside it that list each version after its commit."""
    return spec.changelog is not None or spec.history is not None


def _scd2(spec: MergeSpec) -> bool:
    return spec.history is not None and spec.history.history is not None


def _write_history(spark: Any, spec: MergeSpec, files: HadoopFiles, version: int, net: Any,
                   columns: list[tuple[str, str]], fills: tuple[Any, dict[str, list[str]]],
                   current: VersionInfo | None, location: str | None, anew: bool, load: bool) -> HistoryCommit:
    """Write what the version does to the SCD2 history (``spark.history``) into the history table's directory
    ``vNNNNNN``: the open rows after it, and the closed rows of its day (those closed before on the same day with
    them); returns what its version file records. Switched after the commit (``_switch_history``).

    The history starts with the table's first version, or, turned on later, with the version the table is at
    (its rows open from that version's day); a fresh snapshot that changes a column's type starts it again."""
    from pyspark.sql import Observation
    from pyspark.sql.functions import count, lit

    assert spec.history is not None and spec.history.history is not None
    settings, table = spec.history.settings, spec.history.history
    zone = spec.datetime_zone
    day = version_day(spec.as_of, current.as_of if current is not None else None, zone)
    earlier = None if anew or current is None else current.history
    previous = dict(earlier.partitions) if earlier is not None else {}
    closed, step, kept = None, net, ()
    if anew or current is None:
        open_rows = initial_open(_upserts(spark, spec, columns), columns, settings, day, spec.as_of, version)
    else:
        if earlier is None:  # turned on now: the rows of the version the table is at are open from its day
            moment = current.as_of or spec.as_of
            rows = _rows_before(spark, spec, current, location or "", None, columns, (None, {}), None)
            held = initial_open(rows, columns, settings, version_day(moment, None, zone), moment, current.version)
        else:
            held = _history_rows(spark, spec, previous[OPEN_END], columns, fills)
        if load and earlier is not None:
            # A fresh snapshot brings the history level with the source whatever its open rows hold (verify
            # compares them with the table): its step's changes are from those rows, not from the table's version,
            # to the snapshot. They are the same changes while the history agrees with the table.
            step, kept = _net(spark, spec, open_values(held, columns), columns, first_load=False)
        open_rows, closed = scd2_step(held, step, spec.hive_key, columns, settings, day, spec.as_of, version)
    root = f"{files.parent(files.root)}/{table}"
    path = f"{root}/{version_dir_name(version)}"
    problem = version_dir_problem(path, spec.warehouse_dir, table)
    if problem:
        raise LedgerConflict(f"The history of {spec.database}.{spec.table} was not written: {problem}")
    if files.exists(path):
        files.delete(path)  # a killed attempt's: never switched (a switched one is of an older version)
    opened, shut = Observation("opened"), Observation("closed")
    open_dir = f"{path}/{HISTORY_PARTITION}={OPEN_END}"
    open_rows.observe(opened, count(lit(1)).alias("rows")).write.mode("errorifexists").parquet(open_dir)
    partitions, switched, closed_rows = {**previous, OPEN_END: open_dir}, [OPEN_END], 0
    if closed is not None:
        closed = closed.drop(HISTORY_PARTITION).observe(shut, count(lit(1)).alias("rows"))
        if day in previous:  # closed before on the same day: kept beside
            closed = closed.unionByName(_history_rows(spark, spec, previous[day], columns, (None, {})))
        closed_dir = f"{path}/{HISTORY_PARTITION}={day}"
        closed.write.mode("errorifexists").parquet(closed_dir)
        closed_rows = int(shut.get["rows"])
        if closed_rows or day in previous:
            partitions[day] = closed_dir
            switched.append(day)
        else:
            files.delete(closed_dir)
    if step is not net:
        for frame in (step, *kept):
            frame.unpersist()
    failpoint("merge.history.written")
    return HistoryCommit(table=table, day=day, partitions=tuple(sorted(partitions.items())),
                         switched=tuple(switched), opened=int(opened.get["rows"]), closed=closed_rows)


def _history_rows(spark: Any, spec: MergeSpec, location: str, columns: list[tuple[str, str]],
                  fills: tuple[Any, dict[str, list[str]]]) -> Any:
    """The rows of a history partition at ``location`` as the history's columns now: a column the table gained
    since they were written gets its fill (``fills``: open rows hold the table's values now) or NULL."""
    from pyspark.sql.functions import broadcast, lit
    from pyspark.sql.types import StructType

    assert spec.history is not None and spec.history.history is not None
    settings = spec.history.settings
    schema = StructType([f for f in spark.table(f"{spec.database}.{spec.history.history}").schema
                         if f.name != HISTORY_PARTITION])
    rows = spark.read.schema(schema).parquet(location)
    held = set(rows.columns)
    fill_row, sources = fills
    if fill_row is not None:
        rows = rows.crossJoin(broadcast(fill_row))

    def value(name: str, hive: str) -> Any:
        if name in held:
            found = column(name)
        elif name in sources:
            source = next((s for s in sources[name] if s in held), None)
            found = column(source) if source else column(f"__fill_{name}")
        else:
            found = lit(None)
        return found.cast(hive).alias(name)

    return rows.select([value(name, hive) for name, hive in history_columns(columns, settings)])


def _switch_history(spark: Any, spec: MergeSpec, commit: HistoryCommit, files_of: HadoopFiles,
                    columns: list[tuple[str, str]]) -> None:
    """Point the history table's partitions the commit switches (the open one, its day's) at their new
    directories, in one metastore transaction; the table made if missing. Idempotent: any later merge does it
    again until it is done. Each location is checked to be a directory of this table's history."""
    assert spec.history is not None and spec.history.history is not None
    table, settings = spec.history.history, spec.history.settings
    where = dict(commit.partitions)
    changes = []
    for value in commit.switched:
        location = where.get(value, "")
        problem = history_partition_problem(location, value, table, spec.warehouse_dir)
        if problem is None and commit.table != table:
            problem = f"{location} is not the directory of the partition {HISTORY_PARTITION}={value} of {table}"
        if problem:
            raise LedgerConflict(f"The history of {spec.database}.{spec.table} was not switched: {problem}.")
        changes.append(PartitionChange(values=((HISTORY_PARTITION, value),), location=location))
    versions = files_of.parent(where[OPEN_END].rstrip("/"))
    root = files_of.parent(versions)
    # A table defined anew (its column types changed) goes with the merge that started the history again.
    ensure_beside_table(spark, spec.database, table, history_columns(columns, settings),
                        [(HISTORY_PARTITION, "string")], root)
    commit_partitions(spark, spec.database, table, changes, spec.warehouse_dir, f"{versions}/_empty")


def _remove_history_versions(files: HadoopFiles, spec: MergeSpec, expired: list[int], versions: set[int],
                             recorded: HistoryCommit) -> None:
    """Prune the history's version directories that ``history_dirs_to_prune`` names (one listing of the history's
    directory), keeping any partition the history lists now or a kept version's commit listed: a day's closed rows
    stay where the version that last wrote them put them."""
    referenced = {location for _, location in recorded.partitions}
    for number in sorted(versions - set(expired)):
        text = files.read_text(f"{files.version_path(number)}/{VERSION_FILE}")
        kept = VersionInfo.from_text(text).history if text is not None else None
        referenced |= {location for _, location in kept.partitions} if kept is not None else set()
    found: dict[int, str] = {}
    for child in files.children(f"{files.parent(files.root)}/{recorded.table}"):
        held = parse_version_dir(child.rstrip("/").rsplit("/", 1)[-1])
        if held is not None:
            found[held] = child
    for pruned in history_dirs_to_prune(found, versions, expired):
        _prune(files, found[pruned], referenced)


def _remove_unlisted_changes(spark: Any, spec: MergeSpec, files: HadoopFiles, removed: list[int]) -> None:
    """Delete the changelog directories of the versions ``removed`` whose partition the changelog table does not
    list: attempts killed before their commit. A committed version's changes stay after its own files go."""
    assert spec.changelog is not None
    root = changelog_root(files, files.root, spec.changelog)
    for number in removed:
        path = f"{root}/{version_dir_name(number)}"
        if not files.exists(path):
            continue
        text = files.read_text(f"{files.version_path(number)}/{VERSION_FILE}")
        listed = VersionInfo.from_text(text).changelog if text is not None else None
        if listed is None or not registered(spark, spec.database, listed, number):
            files.delete(path)


def _touched(spark: Any, spec: MergeSpec, layout: Partitioning, table_has_partitions: bool) -> set[str]:
    """The partitions (metastore texts) a merge rewrites: those of its upserts, those its rows left (the
    extraction found them in the before images), and, for rows read again from the source and a diff's deletes,
    the partitions their keys are in now: no event says where those were, so the table's key and partition columns
    are read to know."""
    upserts = _hive_frame(spark, list(spec.upsert_files), spec.hive_columns, spec)
    texts = {metastore_value(row[0]) for row in upserts.select(partition_value(layout)).distinct().collect()}
    texts |= set(spec.left_partitions)
    if table_has_partitions and ((spec.buckets and spec.replaced) or spec.reread_rows):
        table = spark.table(spec.qualified_table)
        held = column(layout.column)
        found = []
        if spec.buckets and spec.replaced:  # a repair: every row of these buckets goes, wherever it is
            found.append(table.where(_bucket(spec).isin(list(spec.replaced))).select(held))
        if spec.reread_rows:
            keys = upserts.select([column(name) for name in spec.hive_key])
            if spec.delete_file is not None and spec.plan.mode in (Mode.DIFF, Mode.HEAL):
                # A diff's deletes are keys alone: the partition each row was in is looked up as well.
                key_columns = [(name, hive) for name, hive in spec.hive_columns if name in spec.hive_key]
                keys = keys.unionByName(_hive_frame(spark, [spec.delete_file], key_columns, spec)
                                        .select([column(name) for name in spec.hive_key]))
            found.append(_without_keys(table, keys, spec.hive_key, "left_semi").select(held))
        for frame in found:
            texts |= {metastore_value(row[0]) for row in frame.distinct().collect()}
    return texts


def _remove_versions(files: HadoopFiles, spec: MergeSpec, removed: list[int], existing: dict[int, bool],
                     partitions: tuple[tuple[str, str], ...]) -> None:
    """Delete the version directories ``removed``, but not a partition directory that the new version or a kept
    one still reads (their version files list their partitions): a partition untouched for many runs lives on
    in the directory of the version that last rewrote it."""
    if not removed:
        return
    referenced = {location for _, location in partitions}
    for number, complete in existing.items():
        if complete and number not in removed:
            text = files.read_text(f"{files.version_path(number)}/{VERSION_FILE}")
            if text is not None:
                referenced |= {location for _, location in VersionInfo.from_text(text).partitions}

    for number in removed:
        _prune(files, files.qualified(_version_dir(files, number, spec)), referenced)


def _prune(files: HadoopFiles, location: str, referenced: set[str]) -> None:
    """Delete ``location`` but the partition directories in it that ``referenced`` names (``retention``)."""
    what = retention(location, referenced)
    if what == "delete":
        files.delete(location)
    elif what == "descend":
        for child in files.children(location):
            _prune(files, child, referenced)


def _version_dir(files: HadoopFiles, number: int, spec: MergeSpec) -> str:
    """The version directory ``number`` of the table, refused unless it is one of the table's under the warehouse:
    the job writes and deletes nothing else, whatever the metastore's locations say."""
    path = files.version_path(number)
    # A shard's versions are in its partition's directory of the table's: escaped as Hive names it.
    own = spec.table if spec.shard is None else f"{spec.table}/{spec.shard.partition_dir}"
    problem = version_dir_problem(path, spec.warehouse_dir, own)
    if problem:
        raise LedgerConflict(f"The merge of {spec.database}.{spec.table} stopped before it wrote or deleted anything "
                             f"there: {problem}")
    return path


@contextlib.contextmanager
def _table_settings(spark: Any, spec: MergeSpec) -> Iterator[None]:
    """The table's own runtime SQL settings (its ``spark_conf:``) while it is merged; the application's after."""
    before = {}
    for key, value in spec.spark_conf:
        if not spark.conf.isModifiable(key):
            raise ValueError(f"The setting {key} of the table's `spark_conf:` cannot change while the application "
                             "runs (a static setting): set it under `spark: merge_conf:` instead.")
        before[key] = spark.conf.get(key, None)
        spark.conf.set(key, value)
        print(f"cdc-merge: {spec.database}.{spec.table} with {key}={spark.conf.get(key)} (the application's: "
              f"{before[key]})", flush=True)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def run(job: MergeJob) -> MergeResult:
    """Merge every table of ``job`` in one session; each table's result, a failure included, by
    ``MergeSpec.result_key``."""
    clock = _Clock()
    names = ", ".join(f"{t.database}.{t.table}" for t in job.tables)
    spark = hive_session(f"cdc-merge {names}"[:200], job.warehouse_dir, job.metastore_uri)
    clock.lap("session")
    results: dict[str, TableMerge] = {}
    databases: dict[str, str] = {}
    for spec in job.tables:
        started = time.perf_counter()
        try:
            with _table_settings(spark, spec):
                result = merge(spark, spec, databases)
        except Exception as exc:  # this table's failure; the others still merge and commit
            message = getattr(exc, "desc", None) or str(exc)  # a Spark AnalysisException keeps its text in desc
            print(f"cdc-merge: {spec.database}.{spec.table} failed: {type(exc).__name__}: {message}", flush=True)
            result = TableMerge(status=Status.FAILED, error=f"{type(exc).__name__}: {message}")
        results[spec.result_key] = result.model_copy(
            update={"seconds": round(time.perf_counter() - started, 3)})
    return MergeResult(tables=results, session_seconds=clock.phases["session"])


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} <URI of the merge job JSON>", file=sys.stderr)
        return 2
    prefer_installed_pyspark()
    from pyspark import SparkConf, SparkContext

    started = dt.datetime.now(dt.UTC)
    # The context first, for its Hadoop FileSystem: the job file may be on any filesystem the cluster reads.
    context = SparkContext.getOrCreate(SparkConf())
    files = HadoopFiles(context, "")
    text = files.read_text(argv[1])
    if text is None:
        print(f"cdc-merge: the merge job {argv[1]} does not exist", file=sys.stderr)
        return 2
    job = MergeJob.from_text(text)
    print(f"cdc-merge: read the job {argv[1]} ({len(job.tables)} tables)", flush=True)
    result = run(job).model_copy(
        update={"seconds": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 3)})
    files.write_text(job.result_file, result.to_text(), overwrite=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
