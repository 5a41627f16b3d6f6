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
from airflow_cdc_provider.core.contract import Captured, Healed, MergeInput, TableFailure, TablePlan
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import Committed
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.schema import SchemaChange, check_changes
from airflow_cdc_provider.core.version_digests import DigestsJob, DigestsJobs
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.stages.diff import DiffResult, DiffSource, diff_table
from airflow_cdc_provider.stages.task_log import TaskLog
from airflow_cdc_provider.stages.version_digests import digests_file_from_spark
from airflow_cdc_provider.storage import WorkStore

DIGESTS_FILE = "version-digests.parquet"  # the version's digests, as the diff reads them


class HealNotPossible(CdcError):
    """A table whose chain broke cannot be healed by a diff: it stops, as it would without a heal."""


class HealSource(DiffSource, Protocol):
    """What a heal asks of the source (``MySqlSourceHook``): the table's columns and key now, and binlog positions."""

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

    @property
    def source(self) -> str:
        return self.table.source


def target(table: TablePlan, why: str, source: HealSource) -> HealTarget:
    """What healing ``table`` compares, from the source's table as it is now; ``HealNotPossible`` (or the policy's
    ``CdcError``) when it cannot be healed."""
    committed = table.committed
    if committed is None or committed.columns is None:
        raise HealNotPossible(f"{table.source} has no committed version with its columns recorded to compare the "
                              "source with. Trigger a run with fresh_snapshot=true.")
    declared = table.table.key if table.table.key_declared else None
    header = source.raw_header(table.table.name, declared)
    if tuple(k.lower() for k in header.key) != tuple(k.lower() for k in table.table.key):
        raise HealNotPossible(
            f"The key of {table.source} is ({', '.join(header.key)}) at the source now, and was "
            f"({', '.join(table.table.key)}): rows cannot be matched across the break by a key that changed. Trigger "
            "a run with fresh_snapshot=true to reload the table.")
    before, after = tuple(committed.columns), tuple(header.columns)
    if before != after:
        # The same rule as a change met in the binlog: the policy takes it on, or the table stops, named.
        check_changes([SchemaChange(table=table.source, at="the heal's read of the source", ddl=None,
                                    before=before, after=after)], table.table.schema_changes, header.key)
    now = {name.lower() for name, _ in after}
    was = {name.lower() for name, _ in before}
    compared = tuple((name, ctype) for name, ctype in before if name.lower() in now)
    added = tuple(name for name, _ in after if name.lower() not in was)
    return HealTarget(table=table, why=why, header=header, committed=committed, compared=compared, added=added)


def heal_broken(broken: Sequence[tuple[TablePlan, str]], source: HealSource, mariadb: bool, store: WorkStore,
                hive: HiveConfig, read_buffer: int, submit: Callable[[str], None], log: TaskLog) -> Captured:
    """Heal each of ``broken`` (a table's plan, and why its chain broke): one Spark application, which ``submit``
    runs given the URI of its jobs file, computes the digests of every table's committed version; then each table
    is compared with the source by a diff. A table that cannot be healed fails, named; the others go on.

    Returns a merge input per table healed (mode ``heal``), and the tables that failed."""
    failed: list[TableFailure] = []
    targets: list[HealTarget] = []
    for table, why in broken:
        log.warning("%s: its chain broke (%s); it is brought level by a diff against version %s",
                    table.source, why, table.committed.version if table.committed else None)
        try:
            targets.append(target(table, why, source))
        except CdcError as exc:
            log.error("%s cannot be healed: %s", table.source, exc)
            failed.append(TableFailure(source=table.source, stage="heal", error=str(exc)))
    if not targets:
        return Captured(failed=tuple(failed))
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
    inputs: list[MergeInput] = []
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
                result = heal_table(source, heal, digests, local, mariadb, read_buffer)
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
