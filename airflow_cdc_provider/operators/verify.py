"""The verify task: each table's committed Hive version checked against the source, bucket by bucket, while the
source keeps being written (``core.verify``, ``docs/verify.md``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow_cdc_provider.compat import AirflowFailException
from airflow_cdc_provider.core.config import HiveConfig, SourceConfig, SparkConfig, VerifyConfig, WorkConfig
from airflow_cdc_provider.core.contract import (
    VERIFICATION_KEY,
    SourcePlan,
    TableOutcome,
    Verification,
)
from airflow_cdc_provider.core.verify import (
    VerifyMark,
    VerifyState,
    count_runs,
    difference_message,
    repair_request,
)
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.params import parse_flag
from airflow_cdc_provider.operators.source import ReadsSource
from airflow_cdc_provider.operators.spark_submit import CdcSparkSubmitOperator
from airflow_cdc_provider.spark import VERIFY_JOB
from airflow_cdc_provider.stages.verify import CopyPlace, tell, verify_tables
from airflow_cdc_provider.storage import WorkStore


class CdcVerifyOperator(ReadsSource, CdcSparkSubmitOperator):
    """Verify the committed Hive version of each table of the run against the source, when it is due.

    A table is checked whole every ``verify.every`` runs, or in a run triggered with the ``verify`` parameter;
    in the other runs the rolling verify checks its next slice of ``verify.slices`` (``core.contract.VerifySlice``),
    whether the run changed it or not. For each, the server sums the buckets (of the slice) in SQL (one pass over
    the table, a range of keys at a time); one Spark application sums the same buckets of the version's files and
    lists the rows of the buckets whose sums differ; the server lists the same buckets' rows (their key texts and
    hashes, no more); the keys the binlog changed from the version's watermark to then are left out: the copy has
    not had those changes yet. What remains is a real difference.

    The result (``core.contract.Verification``) goes to the log, to XCom (the return value, and the key
    ``verification``), and to a report per table in the work directory (``<table>/verify/``), with the buckets a
    repair reads again (``verify.repair``: in the next run). With ``on_difference: fail`` a difference fails the
    task too (no retry: it would find the same).

    :param plan: the plan task's ``SourcePlan`` (templated).
    :param outcomes: every table's ``TableOutcome`` of the merge (templated: the merge's ``outcomes`` XCom).
    :param verify: the ``verify:`` settings.
    :param force: verify every table of the run now (templated: the ``verify`` trigger parameter).
    :param source: the configuration's ``source:`` (``SourceConfig``): the connection and its time limits.
    :param work: the configuration's ``work:`` (``WorkConfig``): the connection of an object-store work dir.
    :param spark: the configuration's ``spark:`` (``SparkConfig``; the application has its verify settings).
    :param hive: the configuration's ``hive:`` (``HiveConfig``): the warehouse, the metastore, and the zone whose
        digits a DATETIME's instant holds.
    """

    template_fields = (*CdcSparkSubmitOperator.template_fields, "plan", "outcomes", "force")

    def __init__(self, *, plan: Any, outcomes: Any, verify: VerifyConfig, source: SourceConfig, work: WorkConfig,
                 spark: SparkConfig, hive: HiveConfig, force: Any = False, **kwargs: Any) -> None:
        kwargs.setdefault("name", "cdc-verify")
        kwargs.setdefault("conf", spark.verify_settings())
        super().__init__(application=VERIFY_JOB, spark=spark, hive=hive, **kwargs)
        self.plan, self.outcomes, self.verify, self.force = plan, outcomes, verify, force
        self.source, self.work = source, work

    @final_on_cdc_error
    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]  # the verification XCom
        plan = SourcePlan.model_validate(self.plan)
        outcomes = {o.source: o for o in (TableOutcome.model_validate(v) for v in self.outcomes or ())}
        store = work_store(plan.tables[0].table_dir.work_dir, self.work.conn_id) if plan.tables else WorkStore()
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
            self._require_spark_connection()
            verification = Verification(tables=tuple(verify_tables(
                self._source_hook(), checked, outcomes, store, self.verify,
                CopyPlace(self.hive.warehouse_dir, self.hive.metastore_uri, self.hive.time_zone),
                lambda jobs: self._spark_submit(context, jobs), self.log)))
        else:
            self.log.info("No table is due for verify in this run (whole every %s runs, or with the verify "
                          "parameter; no rolling verify: verify.slices is 0).", self.verify.every or "no")
            verification = Verification()
        run_key, now = plan.run.key, dt.datetime.now(dt.UTC)
        marks = {}
        for table, found in zip(due, verification.tables):
            store.write(table.table_dir.verify_report(run_key), found)
            repair = repair_request(found, run_key)
            if repair is not None:
                store.write(table.table_dir.repair, repair)
            marks[table.source] = VerifyMark.of(found, plan.run, now)
            tell(found, self.log)
        # Only now that each due table's check has completed is it counted as verified: a task that failed
        # before (its Spark application, the server) leaves the counts, and its retry verifies the same tables.
        for count in counted:
            store.write(count.table.table_dir.verify_state, count.state_after(marks.get(count.table.source)))
        if not due:
            return verification.to_xcom()
        value = verification.to_xcom()
        context["ti"].xcom_push(key=VERIFICATION_KEY, value=value)
        different = verification.different
        if different and self.verify.on_difference == "fail":
            raise AirflowFailException(difference_message(different))
        return value

