"""The heal task: the tables whose binlog chain broke in the run's range (``Extraction.broken``) brought level by a
diff against their committed versions (``stages.heal``), for the merge to commit."""

from __future__ import annotations

import functools
from typing import Any

from airflow_cdc_provider.core.config import HiveConfig, RunConfig, SourceConfig, SparkConfig, WorkConfig
from airflow_cdc_provider.core.contract import Captured, Extraction, SourcePlan
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.lease import HoldsTableLeases
from airflow_cdc_provider.operators.source import ReadsSource
from airflow_cdc_provider.operators.spark_submit import CdcSparkSubmitOperator
from airflow_cdc_provider.spark import DIGESTS_JOB
from airflow_cdc_provider.stages.heal import heal_broken
from airflow_cdc_provider.stages.snapshot_run import snapshot_settings


class CdcHealOperator(HoldsTableLeases, ReadsSource, CdcSparkSubmitOperator):
    """Heal each table whose chain broke in the run's range: one Spark application computes the row digests of
    each one's committed version (``spark/digests_job.py``), then each is compared with the source by a diff, in
    one transaction with a consistent snapshot, and its changing rows read (``stages.heal``). A table whose
    change no merge onto its version can follow (a column whose Hive type changed, another key) is loaded anew:
    read whole, as a first load is. A table that cannot be healed (its policy refuses a change of columns) fails,
    named; the others go on. When no chain broke, it does nothing and starts no Spark application; nor when every
    broken table is loaded anew.

    Returns (XCom) a ``Captured``: a merge input per healed table (mode ``heal``) or loaded anew (mode
    ``snapshot``), the tables that failed.

    :param plan: the plan task's ``SourcePlan`` (templated).
    :param extraction: the extract task's ``Extraction`` (templated; None when that task failed).
    :param source: the configuration's ``source:`` (``SourceConfig``): the connection and its time limits, the
        rows a diff's read holds before writing them (``read_buffer_mb``, ``core.batches``), and how a table loaded
        anew is read (as the snapshot task reads).
    :param work: the configuration's ``work:`` (``WorkConfig``): the connection of an object-store work dir.
    :param run: the configuration's ``run:`` (``RunConfig``): how long the run's table locks count as alive
        unrenewed (``operators.lease``).
    :param spark: the configuration's ``spark:`` (``SparkConfig``; the digests application has its verify settings).
    :param hive: the configuration's ``hive:`` (``HiveConfig``): the warehouse, the metastore, and the zone whose
        digits a DATETIME's instant holds.
    """

    template_fields = (*CdcSparkSubmitOperator.template_fields, "plan", "extraction")

    def __init__(self, *, plan: Any, extraction: Any, source: SourceConfig, work: WorkConfig, run: RunConfig,
                 spark: SparkConfig, hive: HiveConfig, **kwargs: Any) -> None:
        kwargs.setdefault("name", "cdc-heal")
        kwargs.setdefault("conf", spark.verify_settings())
        super().__init__(application=DIGESTS_JOB, spark=spark, hive=hive, **kwargs)
        self.plan, self.extraction, self.source, self.work, self.run = plan, extraction, source, work, run

    @final_on_cdc_error
    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]  # a Captured
        plan = SourcePlan.model_validate(self.plan)
        broken = Extraction.model_validate(self.extraction).broken if self.extraction is not None else ()
        if not broken:
            self.log.info("No table's binlog chain broke in this run: nothing to heal.")
            return Captured().to_xcom()
        tables = [(plan.table(b.source), b) for b in broken]
        with self._leased(context, [table for table, _ in tables], plan.run):
            hook = self._source_hook()
            store = work_store(tables[0][0].table_dir.work_dir, self.work.conn_id)
            return heal_broken(tables, hook, hook.flavor.is_mariadb, store, self.hive, snapshot_settings(self.source),
                               functools.partial(self._submit, context), self.log).to_xcom()

    def _submit(self, context: Any, jobs: str) -> None:
        self._require_spark_connection()
        self._spark_submit(context, jobs)
