"""Healing a table whose binlog chain broke: it is brought level by a diff against its committed version, and the
binlog goes on from the diff's moment.

A chain breaks where the table's rows may have changed without row events that say how (``stages.extract``'s
``ChainBroken``: a TRUNCATE, a table dropped and created again, the RENAME swap that ends an online schema change,
a statement or event the capture does not understand), or where the binlog from its watermark is gone (purged).
The binlog cannot bring the copy level from there, but the source itself can: the diff of ``stages.diff``
compares the source with the rows' digests of the version the ledger names, and ships only the rows that differ.

A table read from the binlog keeps no digests (diff mode does), so a Spark job computes them from the version's
files (``spark/digests_job.py``), with the texts verify writes; the server computes the same for its rows
(``core.diff.heal_digest``). Then, per table, in one read-only transaction with a consistent snapshot, the diff
finds the rows that differ and reads them in full. The new version is the version plus those changes: the
source as of the snapshot. Its watermark is the binlog position the snapshot reflects (MariaDB says it exactly:
``binlog_snapshot_position``; on MySQL the position taken just before the snapshot, as a snapshot's is), and the
next run reads the binlog from there: a change between the two positions is replayed onto a row that already
has it, which is harmless (rows are matched by key, images are whole).

Columns the source gained or lost since the version go to the table's ``schema_changes`` policy first. The digests
cover the version's columns that are still at the source, and a row that holds a value in a column added since
differs (``heal_digest``): an online schema change that added a nullable column ships only the rows written
during it.

A table whose change no merge onto the version can follow (``core.schema.reload_reason``: a column whose Hive type
changed, such as ``INT`` widened to ``BIGINT``; another key, as when the table was dropped and created again with a
``BIGINT`` key) is loaded anew instead: read whole as a snapshot is (``stages.snapshot``), with the watermark taken
before the read, and committed as the next version with the source's columns (the merge defines the Hive table
again, and its changelog and history start again). No Spark application is needed for it.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from airflow_cdc_provider.core import diff
from airflow_cdc_provider.core.batches import DEFAULT_READ_BUFFER
from airflow_cdc_provider.core.config import HiveConfig
from airflow_cdc_provider.core.contract import BrokenChain, Captured, Healed, MergeInput, TableFailure, TablePlan
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import Committed
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.schema import SchemaChange, check_changes, retyped_columns
from airflow_cdc_provider.core.version_digests import DigestsJob, DigestsJobs
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.stages.diff import DiffResult, diff_table
from airflow_cdc_provider.stages.snapshot import snapshot
from airflow_cdc_provider.stages.snapshot_run import SnapshotSettings, SnapshotSource, snapshot_progress, taken_at
from airflow_cdc_provider.stages.task_log import TaskLog
from airflow_cdc_provider.stages.version_digests import digests_file_from_spark
from airflow_cdc_provider.storage import WorkStore

DIGESTS_FILE = "version-digests.parquet"  # the version's digests, as the diff reads them


class HealNotPossible(CdcError):
    """A table whose chain broke cannot be healed by a diff: it stops, as it would without a heal."""


class HealSource(SnapshotSource, Protocol):
    """What a heal asks of the source (``MySqlSourceHook``): the table's columns and key now, binlog positions, and a
    table's read whole."""

    def raw_header(self, table: TableName, declared: Sequence[str] | None = None) -> RawHeader: ...
    def current_watermark(self) -> Watermark: ...
    def watermark_at(self, file: str, position: int) -> Watermark: ...


@dataclass(frozen=True)
class HealTarget:
    """A table to heal: its plan (the version the ledger names), why its chain broke, and the source's table now.

    ``compared`` are the version's columns still at the source, as the version typed them: what both sides'
    digests are computed over. ``added`` are the columns the source gained since the version."""

    table: TablePlan
    why: str
    header: RawHeader
    committed: Committed
    compared: tuple[tuple[str, str], ...]
    added: tuple[str, ...]
    reload: str | None = None  # why it is loaded anew rather than compared (``core.schema.retyped_columns``)
    said: bool = False  # ``why`` says that already: the pass met the change (``BrokenChain.reload``)

    @property
    def reloaded_because(self) -> str:
        """Why the table was loaded anew, as its outcome says it: the break, and the change where it does not."""
        return self.why if self.said else f"{self.why} {self.reload}."

    @property
    def source(self) -> str:
        return self.table.source


def target(table: TablePlan, why: str, source: HealSource, said: bool = False) -> HealTarget:
    """What healing ``table`` compares, from the source's table as it is now; ``HealNotPossible`` (or the policy's
    ``CdcError``) when it cannot be healed. ``said``: ``why`` names a change only a load anew follows."""
    committed = table.committed
    if committed is None or committed.columns is None:
        raise HealNotPossible(f"{table.source} has no committed version with its columns recorded to compare the "
                              "source with. Trigger a run with fresh_snapshot=true.")
    declared = table.table.key if table.table.key_declared else None
    header = source.raw_header(table.table.name, declared)
    before, after = tuple(committed.columns), tuple(header.columns)
    if before != after:
        # The same rule as a change met in the binlog: the policy takes it on, or the table stops, named.
        check_changes([SchemaChange(table=table.source, at="the heal's read of the source", ddl=None,
                                    before=before, after=after)], table.table.schema_changes, header.key)
    reload = retyped_columns(before, after, table.table.key, header.key)
    if reload is not None and table.table.shard is not None:
        # One Hive table holds every shard's rows, and one type a column: a shard's load cannot change it.
        raise HealNotPossible(
            f"{reload}. {table.source} is a shard of {table.table.hive_table}, whose columns every shard shares: a "
            "shard cannot be loaded anew with other types. Change the column in every shard at the source, then drop "
            f"the Hive table {table.table.hive_table} (it is EXTERNAL: its files stay) and trigger a run with "
            "fresh_snapshot=true.")
    now = {name.lower() for name, _ in after}
    was = {name.lower() for name, _ in before}
    compared = tuple((name, ctype) for name, ctype in before if name.lower() in now)
    added = tuple(name for name, _ in after if name.lower() not in was)
    return HealTarget(table=table, why=why, header=header, committed=committed, compared=compared, added=added,
                      reload=reload, said=said)


def heal_broken(broken: Sequence[tuple[TablePlan, BrokenChain]], source: HealSource, mariadb: bool, store: WorkStore,
                hive: HiveConfig, settings: SnapshotSettings, submit: Callable[[str], None], log: TaskLog) -> Captured:
    """Heal each of ``broken`` (a table's plan, and where and why its chain broke): one Spark application, which
    ``submit`` runs given the URI of its jobs file, computes the digests of every table's committed version; then
    each table is compared with the source by a diff. A table no merge onto its version can follow is loaded anew
    instead, read whole as ``settings`` say. A table that cannot be healed fails, named; the others go on.

    Returns a merge input per table healed (mode ``heal``) or loaded anew (mode ``snapshot``), and the tables that
    failed."""
    failed: list[TableFailure] = []
    targets: list[HealTarget] = []
    inputs: list[MergeInput] = []
    for table, chain in broken:
        why = chain.why
        try:
            aim = target(table, why, source, said=chain.reload)
        except CdcError as exc:
            log.error("%s: its chain broke (%s), and it cannot be healed: %s", table.source, why, exc)
            failed.append(TableFailure(source=table.source, stage="heal", error=str(exc)))
            continue
        if aim.reload is None:
            log.warning("%s: its chain broke (%s); it is brought level by a diff against version %s",
                        table.source, why, aim.committed.version)
            targets.append(aim)
            continue
        log.warning("%s: its chain broke (%s); %s. It is loaded anew: read whole, and committed as the version after "
                    "%s with the source's columns", table.source, why, aim.reload, aim.committed.version)
        try:
            inputs.append(reload(source, aim, store, settings, log))
        except CdcError as exc:
            log.error("%s cannot be loaded anew: %s", table.source, exc)
            failed.append(TableFailure(source=table.source, stage="heal", error=str(exc)))
    if not targets:
        return Captured(inputs=tuple(inputs), failed=tuple(failed))
    jobs = [DigestsJob(warehouse_dir=hive.warehouse_dir, metastore_uri=hive.metastore_uri,
                       table=t.table.table.hive_table, columns=t.compared, key=t.header.key, mariadb=mariadb,
                       time_zone=hive.time_zone, location=t.committed.location,
                       out=store.uri(t.table.run_dir.heal_version_digests), shard=t.table.table.shard)
            for t in targets]
    job_file = targets[0].table.run_dir.heal_digests_jobs
    store.write(job_file, DigestsJobs(jobs=tuple(jobs)))
    started = time.monotonic()
    submit(store.uri(job_file))
    spark_seconds = time.monotonic() - started  # one application for every table: each is counted it
    for heal in targets:
        run_dir = heal.table.run_dir
        # The job ended well: its part files (and its reason, where it refused the version), not Hadoop's checksums.
        written = [run_dir.heal_version_digests_part(name)
                   for name in store.file_names(run_dir.heal_version_digests) if not name.endswith(".crc")]
        with store.fetched(written) as parts, store.staging(run_dir.heal) as local:
            try:
                digests = local / DIGESTS_FILE
                # Of the version's columns the digests cover: the key columns as the version typed them.
                version = RawHeader(heal.header.table, heal.compared, heal.header.key)
                rows = digests_file_from_spark(parts, version, digests)
                result = heal_table(source, heal, digests, local, mariadb, settings.read_buffer)
            except CdcError as exc:
                log.error("%s cannot be healed: %s", heal.source, exc)
                failed.append(TableFailure(source=heal.source, stage="heal", error=str(exc)))
                continue
            found = result.found
            log.info("%s healed by a diff with version %d (%d rows): %d rows changed or new, %d gone; %d rows' "
                     "digests compared; %d bytes sent by the server; as of %s, binlog %s", heal.source,
                     heal.committed.version, rows, found.upserts, found.deletes, found.compared_rows,
                     found.bytes_sent, found.as_of.isoformat(), result.watermark)
            result.seconds += spark_seconds
            inputs.append(merge_input(heal, result, functools.partial(store.location_of, staging_dir=local,
                                                                      location=run_dir.heal)))
    return Captured(inputs=tuple(inputs), failed=tuple(failed))


@dataclass
class HealResult:
    """One table's heal: its diff and the binlog position the new version reflects."""

    found: DiffResult
    watermark: Watermark
    seconds: float


def heal_table(source: HealSource, heal: HealTarget, digests_file: str | os.PathLike[str],
               out_dir: str | os.PathLike[str], mariadb: bool, read_buffer: int = DEFAULT_READ_BUFFER) -> HealResult:
    """Find the rows of ``heal``'s table that differ from its version (whose digests are ``digests_file``) and
    write them into ``out_dir`` as a diff does; with the binlog position the diff's snapshot reflects."""
    started = time.monotonic()
    before = source.current_watermark()  # no later than the snapshot: what MySQL's heal goes on from
    header, current = heal.header, dict(heal.header.columns)
    # The version's columns with the source's types now: the server spells a value by its type as it is.
    compared = [(name, current[name]) for name, _ in _named_as(heal.compared, header.columns)]
    digest_sql = diff.heal_digest(compared, _named(heal.added, header.columns), mariadb)
    found = diff_table(source, header, digests_file, out_dir, read_buffer, digest_sql=digest_sql, binlog=True,
                       keep_digests=False)
    watermark = source.watermark_at(*found.binlog) if found.binlog is not None else before
    return HealResult(found=found, watermark=watermark, seconds=time.monotonic() - started)


def reload(source: HealSource, heal: HealTarget, store: WorkStore, settings: SnapshotSettings,
           log: TaskLog) -> MergeInput:
    """The merge's input for a table loaded anew: the source's rows now, read as a first load reads them (the
    watermark taken before the read; a retry resumes after the last chunk read), to replace the version whole."""
    started = time.monotonic()
    table, header = heal.table, heal.header
    target_dir = table.run_dir.reload
    with store.staging(target_dir) as local:
        result = snapshot(source, header, local, settings.chunk_rows,
                          snapshot_progress(source, header, settings, log), settings.read_buffer,
                          key_declared=table.table.key_declared, readers=settings.readers)
    files = tuple(store.location_of(f, local, target_dir) for f in result.files)
    log.info("%s loaded anew: %d rows in %d chunks, watermark %s", table.source, result.rows, result.chunks,
             result.watermark)
    healed = Healed(why=heal.reloaded_because, upserts=result.rows, rows=result.rows, reloaded=True)
    return MergeInput(source=table.source, mode=Mode.SNAPSHOT, upsert_files=files, columns=header.columns,
                      key=header.identity, end=result.watermark, as_of=taken_at(result),
                      source_columns=header.columns, upserts=result.rows, changes={"I": result.rows},
                      start=heal.committed.watermark, seconds={"heal": round(time.monotonic() - started, 3)},
                      healed=healed)


def merge_input(heal: HealTarget, result: HealResult, located: Callable[[str], str]) -> MergeInput:
    """The merge's input for a healed table: the diff's changes onto the version it compared with, reaching the
    binlog position the diff's snapshot reflects."""
    found, header = result.found, heal.header
    healed = Healed(why=heal.why, upserts=found.upserts, deletes=found.deletes, compared_rows=found.compared_rows,
                    bytes_sent=found.bytes_sent, rows=found.rows)
    return MergeInput(source=heal.source, mode=Mode.HEAL, upsert_files=(located(found.upsert_file),),
                      delete_file=located(found.delete_file), columns=header.columns, key=header.identity,
                      end=result.watermark, as_of=found.as_of, source_columns=header.columns,
                      upserts=found.upserts, deletes=found.deletes, changes=found.changes,
                      start=heal.committed.watermark, seconds={"heal": round(result.seconds, 3)}, healed=healed,
                      # The columns added since the version: NULL in the rows the heal did not read again.
                      fill_sources=tuple((name, ()) for name in heal.added))


def _named_as(columns: Sequence[tuple[str, str]], now: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """``columns`` with the names the source spells now (a name's case may change)."""
    spelt = {name.lower(): name for name, _ in now}
    return [(spelt[name.lower()], ctype) for name, ctype in columns]


def _named(names: Sequence[str], now: Sequence[tuple[str, str]]) -> list[str]:
    spelt = {name.lower(): name for name, _ in now}
    return [spelt[name.lower()] for name in names]
