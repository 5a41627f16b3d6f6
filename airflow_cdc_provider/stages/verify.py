"""The verify stage: a table's committed version against the source, the server's half and the Spark
application's at once (``verify_tables``); the repairs a verify leaves for a later run; and verify's reads of
capture files: the keys a range of the binlog changed, spelt as the checksum spells them (``core.checksum``), to
tell rows written while verify ran from real differences."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow.parquet as pq
import pymysql

from airflow_cdc_provider.core.checksum import key_text, kind_of
from airflow_cdc_provider.core.config import VerifyConfig
from airflow_cdc_provider.core.contract import TableOutcome, TablePlan, TableVerification, VerifySlice
from airflow_cdc_provider.core.errors import CdcError, StatementTimedOut
from airflow_cdc_provider.core.flavor import ServerFlavor
from airflow_cdc_provider.core.history import history_table
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import Committed, Ledger
from airflow_cdc_provider.core.merge import VersionRefused
from airflow_cdc_provider.core.modes import VerifyStatus
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.resume import BinlogFacts, Unreadable, read_position
from airflow_cdc_provider.core.types import ColumnType
from airflow_cdc_provider.core.verify import (
    BucketSum,
    Count,
    RepairRequest,
    Replaced,
    SourceSums,
    VerifyJob,
    VerifyJobs,
    VerifyResult,
    judged,
    key_slice,
    refused,
    slice_buckets,
    sums_of,
    verifiable,
)
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import DELETE_FILE, UPSERT_FILE, TableDir
from airflow_cdc_provider.stages.extract import BinlogSource, TableRange, extract
from airflow_cdc_provider.stages.replay import replay
from airflow_cdc_provider.stages.task_log import TaskLog
from airflow_cdc_provider.storage import WorkStore


def key_texts(files: Iterable[str | os.PathLike[str] | None], header: RawHeader) -> set[str]:
    """The key texts (``core.checksum``) of every row of upsert or delete files of ``header``'s table."""
    types = dict(header.columns)
    found: set[str] = set()
    for path in files:
        if path is None:
            continue
        table = pq.read_table(path, columns=list(header.key))
        key_types = [types[k] for k in header.key]
        for row in table.to_pylist():
            found.add(key_text([row[k] for k in header.key], key_types))
    return found


def changed_keys(source: BinlogSource, header: RawHeader, start: Watermark, end: Watermark,
                 work: str | os.PathLike[str], charsets: Callable[[str], dict[str, str]] | None = None) -> set[str]:
    """The key texts of ``header``'s rows that the binlog changed in (start, end]: read and replayed as a run
    would, into ``work`` (a scratch directory); ``charsets`` as ``extract`` takes it. Raises ``CdcError`` when
    the range cannot tell (a schema change in it)."""
    work = Path(work)
    result = extract(source, [TableRange(header, work / "raw", header)], start, end, charsets=charsets)
    if header.table in result.failed:
        raise result.failed[header.table]
    if result.schema_changes.get(header.table):
        raise CdcError(f"{header.table} changed its columns while it was verified; it is verified in a later run.")
    replayed = replay(result.files[header.table], work / UPSERT_FILE, work / DELETE_FILE)
    return key_texts((replayed.upsert_file, replayed.delete_file), header)


class VerifySource(BinlogSource, Protocol):
    """What verify asks of the source (``MySqlSourceHook``): the sums and rows of buckets, and binlog positions."""

    @property
    def flavor(self) -> ServerFlavor: ...

    def estimated_rows(self, table: TableName | str) -> int: ...

    def integer_key_bounds(self, header: RawHeader) -> tuple[int, int] | None: ...

    def bucket_sums(self, header: RawHeader, buckets: int, range_rows: int = ...,
                    part: VerifySlice | None = None) -> dict[int, BucketSum]: ...

    def bucket_rows(self, header: RawHeader, buckets: int, which: Sequence[int], part: VerifySlice | None = None
                    ) -> Any: ...

    def current_watermark(self) -> Watermark: ...

    def binlog_facts(self, watermarks: Sequence[Watermark] = ()) -> BinlogFacts: ...

    def column_charsets(self, table: TableName | str) -> dict[str, str]: ...


@dataclass(frozen=True)
class CopyPlace:
    """Where the Spark half finds the copies: the warehouse, its metastore, and the zone of DATETIME digits."""

    warehouse_dir: str
    metastore_uri: str | None
    time_zone: str = "UTC"


@dataclass
class _Check:
    """One table under verify: its version, the job of its Spark half, and the server's half once summed."""

    table: TablePlan
    committed: Committed
    header: RawHeader
    job: VerifyJob
    sums: dict[int, BucketSum] | None = None
    seconds: float = 0.0
    refusal: TableVerification | None = None  # the server refused its sums: why it is not verified


def _refused(checked: TableVerification, error: Exception) -> TableVerification | None:
    """``checked`` not verified because the server refused one of its statements (``core.verify.refused``); None
    for an error that is not the table's (the connection's, ours): it fails the task."""
    if isinstance(error, StatementTimedOut):
        return refused(checked, str(error))
    if isinstance(error, pymysql.err.MySQLError) and error.args and isinstance(error.args[0], int):
        return refused(checked, str(error.args[-1]), error.args[0])
    return None


def _unverified(table: TablePlan, committed: Committed, **fields: Any) -> TableVerification:
    """What is known of a table's check before its verdict."""
    return TableVerification(source=table.source, hive_table=table.table.hive_table, version=committed.version,
                             watermark=committed.watermark, status=VerifyStatus.NOT_VERIFIED, **fields)


def pending_repair(store: WorkStore, table: TableDir) -> RepairRequest | None:
    """The buckets the table's last verify found different and no run has read again yet, or None."""
    return store.read(table.repair, RepairRequest)


def settle_repair(store: WorkStore, table: TableDir, replaced: Replaced) -> None:
    """A commit read the table whole, or buckets of it, again: the pending repair goes once nothing of it is left."""
    pending = pending_repair(store, table)
    if pending is not None and replaced.covers(pending):
        store.delete(table.repair)



def verify_tables(hook: VerifySource, counted: Sequence[Count], outcomes: Mapping[str, TableOutcome],
                  store: WorkStore, settings: VerifyConfig, copies: CopyPlace, submit: Callable[[str], None],
                  log: TaskLog) -> list[TableVerification]:
    """Verify each counted table's committed version against the source: the server sums its buckets while the
    Spark application ``submit`` runs (given the URI of the jobs file) sums the copy's, then the buckets that
    differ are listed on both sides and the keys the binlog changed meanwhile left out (``core.verify.judged``).
    Returns each table's verification, in ``counted``'s order; a table that cannot be verified says why."""
    mariadb = hook.flavor.is_mariadb
    found: dict[str, TableVerification] = {}
    checks: list[_Check] = []
    tables = [count.table for count in counted]
    for count in counted:
        table, part = count.table, count.slice
        committed = verifiable(table, Ledger(table.table_dir, store).committed())
        if isinstance(committed, TableVerification):  # why it cannot be verified
            found[table.source] = committed
            continue
        header = RawHeader(table.source, table.table.columns, table.table.key)
        try:
            # The server's estimate can lag far behind a table just loaded; the merge counted the version's rows.
            rows = max(hook.estimated_rows(table.source), outcomes[table.source].rows or 0)
            if part is not None:
                part = _key_slice(hook, header, part)
        except Exception as exc:
            refusal = _refused(_unverified(table, committed, slice=part), exc)
            if refusal is None:
                raise
            found[table.source] = refusal
            continue
        buckets = slice_buckets(rows, settings.bucket_rows, part)
        job = VerifyJob(warehouse_dir=copies.warehouse_dir, metastore_uri=copies.metastore_uri,
                        table=table.table.hive_table, columns=header.columns, key=header.key, mariadb=mariadb,
                        buckets=buckets, result_file=store.uri(table.run_dir.verify_result),
                        location=committed.location, time_zone=copies.time_zone,
                        source_file=store.uri(table.run_dir.verify_source_sums),
                        detail_limit=settings.detail_buckets, shard=table.table.shard, slice=part)
        checks.append(_Check(table, committed, header, job))
    if not checks:
        return [found[t.source] for t in tables]
    job_file = checks[0].table.run_dir.verify_jobs
    for check in checks:
        store.delete(check.job.result_file)
        store.delete(check.table.run_dir.verify_source_sums)
    store.write(job_file, VerifyJobs(jobs=tuple(check.job for check in checks)))
    # The two halves at once: the Spark application sums the copies while the server sums the sources, one
    # table after the other; the application waits for each table's sums file to compare.
    submitted: list[BaseException] = []

    def run_spark() -> None:
        try:
            submit(store.uri(job_file))
        except BaseException as exc:  # raised below, in the task's thread
            submitted.append(exc)

    spark = threading.Thread(target=run_spark, name="cdc-verify-spark")
    spark.start()
    failed: BaseException | None = None
    for check in checks:
        if failed is None:
            started = time.monotonic()
            try:
                check.sums = hook.bucket_sums(check.header, check.job.buckets, part=check.job.slice)
            except Exception as exc:  # one table's refusal leaves the others to sum
                check.refusal = _refused(_unverified(check.table, check.committed, buckets=check.job.buckets,
                                                     slice=check.job.slice), exc)
                if check.refusal is None:
                    failed = exc
            except BaseException as exc:
                failed = exc
            check.seconds = time.monotonic() - started
        if check.sums is None:  # the application gives up on this table rather than wait
            store.write(check.table.run_dir.verify_source_sums, SourceSums(error="the server's sums failed"))
            continue
        store.write(check.table.run_dir.verify_source_sums, SourceSums(sums=sums_of(check.sums)))
        log.info("%s: %d buckets summed at the source (%d rows)%s in %.1f s", check.table.source,
                      len(check.sums), sum(s.rows for s in check.sums.values()),
                      f", {check.job.slice} of its {check.job.buckets}" if check.job.slice else "",
                      check.seconds)
    spark.join()
    if failed is not None:
        raise failed
    if submitted:
        raise submitted[0]
    results = {}
    for check in checks:
        written = store.read(check.job.result_file, VerifyResult)
        if written is None:  # a retry of the task submits the job again
            raise RuntimeError(f"The verify application ended without writing {check.job.result_file}; see "
                               "its log above.")
        results[check.table.source] = written
    refused = [result.refused for result in results.values() if result.refused]
    if refused:  # a version file the merge did not write: the task fails, without retries (they would read it)
        raise VersionRefused(" ".join(refused))
    for check in checks:
        result = results[check.table.source]
        found[check.table.source] = (check.refusal or _compare(hook, check, result)).model_copy(
            update={"history_buckets": result.history_differing or ()})
    return [found[t.source] for t in tables]


def _key_slice(hook: VerifySource, header: RawHeader, part: VerifySlice) -> VerifySlice:
    """The slice as a range of a one-column integer key's values when it can be one (two index lookups): the
    server then reads only that range. Not for a BIGINT UNSIGNED key, held in Hive as a decimal."""
    ctype = dict(header.columns)[header.key[0]] if len(header.key) == 1 else ""
    if not ctype or kind_of(ctype) != "int" or (ColumnType.parse(ctype).base == "bigint"
                                                and ColumnType.parse(ctype).unsigned):
        return part
    bounds = hook.integer_key_bounds(header)
    return key_slice(part.index, part.of, *bounds) if bounds is not None else part


def _compare(hook: VerifySource, check: _Check, result: VerifyResult) -> TableVerification:
    committed, job = check.committed, check.job
    checked = _unverified(check.table, committed, buckets=job.buckets, slice=job.slice,
                          rows=sum(s.rows for s in (check.sums or {}).values()),
                          seconds={"source": round(check.seconds, 3), "spark": result.seconds})
    differing = list(result.differing)
    if not differing:
        return checked.model_copy(update={"status": VerifyStatus.CLEAN})
    if committed.watermark is None:
        # Asked before anything else of the server: a table captured by diffs may be read by a user with SELECT
        # alone, and the binlog's position needs more.
        return checked.model_copy(update={"reason": (
            f"{len(differing)} buckets differ, and the version was read without the binlog (capture: diff): "
            "writes in flight cannot be told from differences. The next diff-mode run compares the whole "
            "table with its rows' digests.")})
    try:
        return _differing(hook, check, result, checked, differing, committed.watermark)
    except Exception as exc:
        refusal = _refused(checked, exc)
        if refusal is None:
            raise
        return refusal


def _differing(hook: VerifySource, check: _Check, result: VerifyResult, checked: TableVerification,
               differing: list[int], watermark: Watermark) -> TableVerification:
    """The verdict on a table read from the binlog whose buckets differ: their rows listed on both sides, less the
    keys the binlog changed since the version's ``watermark``."""
    header, job = check.header, check.job
    listed = differing[: job.detail_limit]
    started = time.monotonic()
    served = hook.bucket_rows(header, job.buckets, listed, job.slice)
    end = hook.current_watermark()
    copied = {key: digest for rows in result.rows.values() for key, digest in rows}
    start = read_position(watermark, hook.binlog_facts([watermark]))
    if isinstance(start, Unreadable):
        return checked.model_copy(update={"reason": (
            f"{len(differing)} buckets differ, and the binlog from the version's watermark cannot be read to "
            f"tell writes in flight from differences: {start.message}")})
    try:
        with tempfile.TemporaryDirectory(prefix="cdc-verify-") as work:
            changed = changed_keys(hook, header, start, end, work, charsets=hook.column_charsets)
    except CdcError as exc:
        return checked.model_copy(update={"reason": str(exc)})
    seconds = {**checked.seconds, "detail": round(time.monotonic() - started, 3)}
    return judged(checked.model_copy(update={"status": VerifyStatus.CLEAN, "seconds": seconds}), differing,
                  job.detail_limit, served, copied, changed)


def tell(found: TableVerification, log: TaskLog) -> None:
    """One table's verification in the task's log."""
    what = f"{found.source} → {found.hive_table} version {found.version}" + (
        f" ({found.slice}, rolling verify)" if found.slice else "")
    if found.history_buckets:
        log.error("The open rows of %s differ from %s in %d buckets: %s", history_table(found.hive_table),
                       what, len(found.history_buckets), list(found.history_buckets)[:20])
    if found.status == VerifyStatus.CLEAN:
        log.info("%s is equal to the source: %d rows in %d buckets (%d keys written meanwhile left out)",
                      what, found.rows, found.buckets, found.in_flight)
    elif found.status == VerifyStatus.NOT_VERIFIED:
        log.warning("%s was not verified: %s", what, found.reason)
    else:
        log.error("%s differs from the source in %d keys (%d buckets)%s: %s", what, found.differences,
                       len(found.differing_buckets), f"; {found.reason}" if found.reason else "",
                       ", ".join(f"{k.key} ({k.kind})" for k in found.keys))
