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

from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.core.ledger import VERSION_FILE, LedgerConflict, VersionInfo
from airflow_cdc_provider.core.merge import (
    LISTED_FILE,
    MergeJob,
    MergeResult,
    MergeSpec,
    TableMerge,
    layout_text,
    parse_version_dir,
    version_dir_problem,
    versions_to_remove,
)
from airflow_cdc_provider.core.modes import Status
from airflow_cdc_provider.core.version_plan import plan_version
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.spark import shards
from airflow_cdc_provider.spark.files import HadoopFiles, prune
from airflow_cdc_provider.spark.merge_rows import as_columns, datetimes_in_gaps, fills_of, merged, touched_partitions
from airflow_cdc_provider.spark.participants import Step, has_beside, participants_of, publish
from airflow_cdc_provider.spark.partition_commit import (
    partition_location,
)
from airflow_cdc_provider.spark.session import hive_session, prefer_installed_pyspark
from airflow_cdc_provider.spark.targets import describe, finish_redefinition, target_of


def _database_location(spark: Any, database: str, found: dict[str, str]) -> str:
    """The location of the Hive database ``database``, created if missing; ``found``: the application's, by name."""
    if database not in found:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
        found[database] = describe(spark, f"DESCRIBE DATABASE {quote_identifier(database)}")["Location"]
    return found[database]


def _current(spark: Any, spec: MergeSpec) -> tuple[str | None, VersionInfo | None, list[tuple[str, str]]]:
    """The table's location now, the version file found there, and the table's columns; Nones if no table. Of a
    shard: its partition's location, and the Hive table's columns but the shard columns (every shard's)."""
    if not spark.catalog.tableExists(f"{spec.database}.{spec.table}") and not finish_redefinition(spark, spec):
        return None, None, []
    if spec.shard is not None:
        shards.check_partitioning(spark, spec)
        location = partition_location(spark, spec.database, spec.table, spec.shard.values)
        if location is None:
            return None, None, shards.table_columns(spark, spec)
        return location, _version_file(spark, spec, location), shards.table_columns(spark, spec)
    details = describe(spark, f"DESCRIBE TABLE EXTENDED {spec.qualified_table}")
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


def merge(spark: Any, spec: MergeSpec, databases: dict[str, str]) -> TableMerge:
    """Merge one table and commit it; returns its result. ``databases``: the Hive databases' locations the
    application found so far, by name (each is looked up, or created, once per application)."""
    clock = _Clock(f"{spec.database}.{spec.table}: ")
    location, current, table_columns = _current(spark, spec)
    clock.lap("metastore read")
    if current is not None and location and has_beside(spec) and not HadoopFiles(spark, location).exists(
            f"{location}/{LISTED_FILE}"):
        # A commit whose job died before the tables beside it listed the version: they list it now, before
        # anything else (whatever this run may be refused), by the same call that lists a version after its commit.
        publish(spark, spec, current, location, table_columns)
    plan = plan_version(spec, current, tuple(table_columns))
    print(f"cdc-merge: {plan.action}: {plan.reason}", flush=True)
    if not plan.writes:
        return TableMerge(status=Status.UNCHANGED, reason=plan.reason, version=current.version if current else None,
                          location=location)
    layout = spec.partitioning
    fills = fills_of(spark, spec, plan)
    columns = list(plan.columns)
    target = target_of(spark, spec, location, _database_location(spark, spec.database, databases),
                       current.rows if current is not None else None,
                       lambda partitioned: touched_partitions(spark, spec, layout, partitioned) if layout else set())
    files = target.files
    existing = files.versions()
    target.check_origin(plan, existing)
    version = max([*existing, current.version if current else 0]) + 1
    path = _version_dir(files, version, spec)
    if files.exists(path):
        files.delete(path)  # a killed attempt's leftover; never the table's location, which is older
    written = target.write(plan, path, lambda old: merged(
        spark, spec, as_columns(old, columns, fills) if old is not None else None, columns))
    clock.lap("write")
    failpoint("merge.driver.written")

    # The tables beside it write their part of the version before the commit, and list it after.
    step = Step(spark, spec, plan, files, existing, version, columns, fills, current, location, written.touched)
    beside = participants_of(spec)
    parts: dict[str, Any] = {}
    for participant in beside:
        parts.update(participant.write(step))
        if participant.phase:
            clock.lap(participant.phase)
    step.release()

    def described(partitions: tuple[tuple[str, str], ...]) -> VersionInfo:
        return VersionInfo(
            version=version, watermark=spec.end, as_of=spec.as_of, run=spec.plan.run,
            input_version=spec.plan.input_version, mode=spec.plan.mode, source=spec.source, rows=written.rows,
            source_columns=spec.source_columns, datetime_zone=spec.datetime_zone, partitioning=layout,
            partitions=partitions, **parts)

    partitions = target.commit(plan, version, path, written, described)
    info = described(partitions)
    if has_beside(spec):
        publish(spark, spec, info, path, columns)
    clock.lap("commit")
    changes = written.changes
    rewritten = sum(1 for c in changes if c.location is not None)
    emptied = len(changes) - rewritten
    shape = (f", {layout_text(layout)}: {rewritten} partitions rewritten, {emptied} emptied, "
             f"{len(partitions) - len(changes)} untouched" if layout else "")
    print(f"cdc-merge: committed version {version} of {spec.database}.{spec.table} ({written.rows} rows{shape})",
          flush=True)

    in_gaps = datetimes_in_gaps(spark, spec)
    if in_gaps:
        print(f"cdc-merge: {in_gaps} rows hold a DATETIME that does not exist in {spec.datetime_zone} (skipped by a "
              "daylight-saving change): moved forward by the gap", flush=True)
    # A version a kept day is the snapshot of stays, whatever its age.
    pinned = {number for _, number in info.snapshot_days}
    expired = versions_to_remove({**existing, version: True}, version, spec.keep_versions, plan.origin_version)
    removed = [number for number in expired if number not in pinned]
    for participant in beside:
        participant.prune(step, info, expired, removed)
    _remove_versions(files, spec, removed, existing, partitions)
    clock.lap("cleanup")
    return TableMerge(status=Status.COMMITTED, version=version, location=path, rows=written.rows,
                      origin=plan.origin_version, added_columns=tuple(name for name, _ in plan.added),
                      datetimes_in_gaps=in_gaps, reason=plan.reason, removed_versions=tuple(removed),
                      phases=clock.phases, partitions=len(partitions) if layout else None,
                      rewritten_partitions=rewritten, emptied_partitions=emptied, changelog=info.changelog,
                      snapshot_days=tuple(day for day, number in info.snapshot_days if number == version),
                      history=info.history)


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
        prune(files, files.qualified(_version_dir(files, number, spec)), referenced)


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
