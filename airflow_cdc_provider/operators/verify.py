"""The verify task: each table's committed Hive version checked against the source, bucket by bucket, while the
source keeps being written (``core.verify``, ``docs/verify.md``)."""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from airflow_cdc_provider.compat import AirflowFailException
from airflow_cdc_provider.core.checksum import kind_of
from airflow_cdc_provider.core.config import VerifyConfig
from airflow_cdc_provider.core.contract import (
    SourcePlan,
    TableOutcome,
    TablePlan,
    TableVerification,
    Verification,
    VerifySlice,
)
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.history import history_table
from airflow_cdc_provider.core.ledger import Committed, Ledger
from airflow_cdc_provider.core.merge import VersionRefused
from airflow_cdc_provider.core.modes import VerifyStatus
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.resume import Unreadable, read_position
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
    VerifyState,
    count_runs,
    difference_message,
    judged,
    key_slice,
    repair_request,
    slice_buckets,
    sums_of,
    verifiable,
)
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.params import parse_flag
from airflow_cdc_provider.operators.source import DEFAULT_READ_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT, ReadsSource
from airflow_cdc_provider.operators.spark_submit import CdcSparkSubmitOperator
from airflow_cdc_provider.spark import VERIFY_JOB
from airflow_cdc_provider.stages.verify import changed_keys
from airflow_cdc_provider.storage import WorkStore

VERIFICATION_KEY = "verification"


@dataclass
class _Check:
    """One table under verify: its version, the job of its Spark half, and the server's half once summed."""

    table: TablePlan
    committed: Committed
    header: RawHeader
    job: VerifyJob
    sums: dict[int, BucketSum] | None = None
    seconds: float = 0.0


def pending_repair(store: WorkStore, table: TableDir) -> RepairRequest | None:
    """The buckets the table's last verify found different and no run has read again yet, or None."""
    return store.read(table.repair, RepairRequest)


def settle_repair(store: WorkStore, table: TableDir, replaced: Replaced) -> None:
    """A commit read the table whole, or buckets of it, again: the pending repair goes once nothing of it is left."""
    pending = pending_repair(store, table)
    if pending is not None and replaced.covers(pending):
        store.delete(table.repair)


class CdcVerifyOperator(ReadsSource, CdcSparkSubmitOperator):
    """Verify the committed Hive version of each table of the run against the source, when it is due.

    A table is checked whole every ``verify.every`` runs, or in a run triggered with the ``verify`` parameter;
    in the other runs the rolling verify checks its next slice of ``verify.slices`` (``core.contract.VerifySlice``),
    whether the run changed it or not. For each, the server sums the buckets (of the slice) in SQL (one pass over
    the table, a range of keys at a time); one Spark application sums the same buckets of the version's files and
    lists the rows of the buckets whose sums differ; the server lists the same buckets' rows (their key texts and
    MD5s, no more); the keys the binlog changed from the version's watermark to then are left out: the copy has
    not had those changes yet. What remains is a real difference.

    The result (``core.contract.Verification``) goes to the log, to XCom (the return value, and the key
    ``verification``), and to a report per table in the work directory (``<table>/verify/``), with the buckets a
    repair reads again (``verify.repair``: in the next run). With ``on_difference: fail`` a difference fails the
    task too (no retry: it would find the same).

    :param plan: the plan task's ``SourcePlan`` (templated).
    :param outcomes: every table's ``TableOutcome`` of the merge (templated: the merge's ``outcomes`` XCom).
    :param verify: the ``verify:`` settings.
    :param force: verify every table of the run now (templated: the ``verify`` trigger parameter).
    :param time_zone: ``hive.time_zone``: the zone whose digits a DATETIME's instant holds.
    :param statement_timeout_seconds: the longest a statement may run on the source before the server stops it
        (``source: statement_timeout_seconds``).
    :param read_timeout_seconds: the longest the source may stay silent (``source: read_timeout_seconds``).
    """

    template_fields = (*CdcSparkSubmitOperator.template_fields, "plan", "outcomes", "force")

    def __init__(self, *, plan: Any, outcomes: Any, verify: VerifyConfig, warehouse_dir: str,
                 metastore_uri: str | None, force: Any = False, time_zone: str = "UTC",
                 mysql_conn_id: str = MySqlSourceHook.default_conn_name, work_conn_id: str | None = None,
                 statement_timeout_seconds: int = DEFAULT_STATEMENT_TIMEOUT,
                 read_timeout_seconds: int = DEFAULT_READ_TIMEOUT, **kwargs: Any) -> None:
        kwargs.setdefault("name", "cdc-verify")
        super().__init__(application=VERIFY_JOB, warehouse_dir=warehouse_dir, metastore_uri=metastore_uri, **kwargs)
        self.statement_timeout_seconds, self.read_timeout_seconds = statement_timeout_seconds, read_timeout_seconds
        self.plan, self.outcomes, self.verify, self.force = plan, outcomes, verify, force
        self.time_zone, self.mysql_conn_id, self.work_conn_id = time_zone, mysql_conn_id, work_conn_id

    @final_on_cdc_error
    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]  # the verification XCom
        plan = SourcePlan.model_validate(self.plan)
        outcomes = {o.source: o for o in (TableOutcome.model_validate(v) for v in self.outcomes or ())}
        store = work_store(plan.tables[0].table_dir.work_dir, self.work_conn_id) if plan.tables else WorkStore()
        counted = count_runs(plan, outcomes, parse_flag(self.force, "verify"), self.verify.every,
                             lambda t: store.read(t.table_dir.verify_state, VerifyState) or VerifyState(),
                             self.verify.slices, self.verify.tables_per_run)
        checked = [count for count in counted if count.checked]
        due = [count.table for count in checked]
        if self.verify.slices > 1 and len(checked) < len(counted):
            self.log.info("The rolling verify checks %d of the run's %d tables (verify.tables_per_run: %d, those "
                          "waiting longest); the others come in later runs.", len(checked), len(counted),
                          self.verify.tables_per_run)
        if due:
            verification = Verification(tables=tuple(self._verify(context, checked, outcomes, store)))
        else:
            self.log.info("No table is due for verify in this run (whole every %s runs, or with the verify "
                          "parameter; no rolling verify: verify.slices is 0).", self.verify.every or "no")
            verification = Verification()
        run_key = plan.run.key
        for table, found in zip(due, verification.tables):
            store.write(table.table_dir.verify_report(run_key), found)
            repair = repair_request(found, run_key)
            if repair is not None:
                store.write(table.table_dir.repair, repair)
            self._log(found)
        # Only now that each due table's check has completed is it counted as verified: a task that failed
        # before (its Spark application, the server) leaves the counts, and its retry verifies the same tables.
        for count in counted:
            store.write(count.table.table_dir.verify_state, count.state_after())
        if not due:
            return verification.to_xcom()
        value = verification.to_xcom()
        context["ti"].xcom_push(key=VERIFICATION_KEY, value=value)
        different = verification.different
        if different and self.verify.on_difference == "fail":
            raise AirflowFailException(difference_message(different))
        return value

    def _verify(self, context: Any, counted: list[Count], outcomes: dict[str, TableOutcome],
                store: WorkStore) -> list[TableVerification]:
        hook = self._source_hook()
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
            # The server's estimate can lag far behind a table just loaded; the merge counted the version's rows.
            rows = max(hook.estimated_rows(table.source), outcomes[table.source].rows or 0)
            if part is not None:
                part = self._key_slice(hook, header, part)
            buckets = slice_buckets(rows, self.verify.bucket_rows, part)
            job = VerifyJob(warehouse_dir=self.warehouse_dir, metastore_uri=self.metastore_uri,
                            table=table.table.hive_table, columns=header.columns, key=header.key, mariadb=mariadb,
                            buckets=buckets, result_file=store.uri(table.run_dir.verify_result),
                            location=committed.location, time_zone=self.time_zone,
                            source_file=store.uri(table.run_dir.verify_source_sums),
                            detail_limit=self.verify.detail_buckets, shard=table.table.shard, slice=part)
            checks.append(_Check(table, committed, header, job))
        if not checks:
            return [found[t.source] for t in tables]
        self._require_spark_connection()
        job_file = checks[0].table.run_dir.verify_jobs
        for check in checks:
            store.delete(check.job.result_file)
            store.delete(check.table.run_dir.verify_source_sums)
        store.write(job_file, VerifyJobs(jobs=tuple(check.job for check in checks)))
        # The two halves at once: the Spark application sums the copies while the server sums the sources, one
        # table after the other; the application waits for each table's sums file to compare.
        submitted: list[BaseException] = []

        def submit() -> None:
            try:
                self._spark_submit(context, store.uri(job_file))
            except BaseException as exc:  # raised below, in the task's thread
                submitted.append(exc)

        spark = threading.Thread(target=submit, name="cdc-verify-spark")
        spark.start()
        failed: BaseException | None = None
        for check in checks:
            if failed is None:
                started = time.monotonic()
                try:
                    check.sums = hook.bucket_sums(check.header, check.job.buckets, part=check.job.slice)
                except BaseException as exc:
                    failed = exc
                check.seconds = time.monotonic() - started
            if check.sums is None:  # the application gives up on this table rather than wait
                store.write(check.table.run_dir.verify_source_sums, SourceSums(error="the server's sums failed"))
                continue
            store.write(check.table.run_dir.verify_source_sums, SourceSums(sums=sums_of(check.sums)))
            self.log.info("%s: %d buckets summed at the source (%d rows)%s in %.1f s", check.table.source,
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
            found[check.table.source] = self._compare(hook, check, results[check.table.source]).model_copy(
                update={"history_buckets": results[check.table.source].history_differing or ()})
        return [found[t.source] for t in tables]

    @staticmethod
    def _key_slice(hook: MySqlSourceHook, header: RawHeader, part: VerifySlice) -> VerifySlice:
        """The slice as a range of a one-column integer key's values when it can be one (two index lookups): the
        server then reads only that range. Not for a BIGINT UNSIGNED key, held in Hive as a decimal."""
        ctype = dict(header.columns)[header.key[0]] if len(header.key) == 1 else ""
        if not ctype or kind_of(ctype) != "int" or (ColumnType.parse(ctype).base == "bigint"
                                                    and ColumnType.parse(ctype).unsigned):
            return part
        bounds = hook.integer_key_bounds(header)
        return key_slice(part.index, part.of, *bounds) if bounds is not None else part

    def _compare(self, hook: MySqlSourceHook, check: _Check, result: VerifyResult) -> TableVerification:
        table, committed, header, job = check.table, check.committed, check.header, check.job
        base = {"source": table.source, "hive_table": table.table.hive_table, "version": committed.version,
                "watermark": committed.watermark, "buckets": job.buckets, "slice": job.slice,
                "rows": sum(s.rows for s in (check.sums or {}).values())}
        seconds = {"source": round(check.seconds, 3), "spark": result.seconds}
        differing = list(result.differing)
        if not differing:
            return TableVerification(**base, status=VerifyStatus.CLEAN, seconds=seconds)
        listed = differing[: job.detail_limit]
        started = time.monotonic()
        served = hook.bucket_rows(header, job.buckets, listed, job.slice)
        end = hook.current_watermark()
        copied = {key: md5 for rows in result.rows.values() for key, md5 in rows}
        if committed.watermark is None:
            return TableVerification(**base, status=VerifyStatus.NOT_VERIFIED, seconds=seconds, reason=(
                f"{len(differing)} buckets differ, and the version was read without the binlog (capture: diff): "
                "writes in flight cannot be told from differences. The next diff-mode run compares the whole "
                "table with its rows' digests."))
        start = read_position(committed.watermark, hook.binlog_facts([committed.watermark]))
        if isinstance(start, Unreadable):
            return TableVerification(**base, status=VerifyStatus.NOT_VERIFIED, seconds=seconds, reason=(
                f"{len(differing)} buckets differ, and the binlog from the version's watermark cannot be read to "
                f"tell writes in flight from differences: {start.message}"))
        try:
            with tempfile.TemporaryDirectory(prefix="cdc-verify-") as work:
                changed = changed_keys(hook, header, start, end, work, charsets=hook.column_charsets)
        except CdcError as exc:
            return TableVerification(**base, status=VerifyStatus.NOT_VERIFIED, reason=str(exc), seconds=seconds)
        seconds["detail"] = round(time.monotonic() - started, 3)
        return judged(TableVerification(**base, status=VerifyStatus.CLEAN, seconds=seconds), differing,
                      job.detail_limit, served, copied, changed)

    def _log(self, found: TableVerification) -> None:
        what = f"{found.source} → {found.hive_table} version {found.version}" + (
            f" ({found.slice}, rolling verify)" if found.slice else "")
        if found.history_buckets:
            self.log.error("The open rows of %s differ from %s in %d buckets: %s", history_table(found.hive_table),
                           what, len(found.history_buckets), list(found.history_buckets)[:20])
        if found.status == VerifyStatus.CLEAN:
            self.log.info("%s is equal to the source: %d rows in %d buckets (%d keys written meanwhile left out)",
                          what, found.rows, found.buckets, found.in_flight)
        elif found.status == VerifyStatus.NOT_VERIFIED:
            self.log.warning("%s was not verified: %s", what, found.reason)
        else:
            self.log.error("%s differs from the source in %d keys (%d buckets)%s: %s", what, found.differences,
                           len(found.differing_buckets), f"; {found.reason}" if found.reason else "",
                           ", ".join(f"{k.key} ({k.kind})" for k in found.keys))
