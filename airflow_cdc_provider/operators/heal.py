"""The heal task: the tables whose binlog chain broke in the run's range (``Extraction.broken``) brought level by a
diff against their committed versions (``stages.heal``), for the merge to commit."""

from __future__ import annotations

import functools
import time
from typing import Any

from airflow_cdc_provider.core.config import HiveConfig, RunConfig, SourceConfig, SparkConfig, WorkConfig
from airflow_cdc_provider.core.contract import Captured, Extraction, MergeInput, SourcePlan, TableFailure, TablePlan
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.version_digests import DigestsJob, DigestsJobs
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.lease import HoldsTableLeases
from airflow_cdc_provider.operators.source import ReadsSource
from airflow_cdc_provider.operators.spark_submit import CdcSparkSubmitOperator
from airflow_cdc_provider.spark import DIGESTS_JOB
from airflow_cdc_provider.stages.heal import DIGESTS_FILE, HealTarget, heal_table, merge_input, target
from airflow_cdc_provider.stages.version_digests import digests_file_from_spark


class CdcHealOperator(HoldsTableLeases, ReadsSource, CdcSparkSubmitOperator):
    """Heal each table whose chain broke in the run's range: one Spark application computes the row digests of
    each one's committed version (``spark/digests_job.py``), then each is compared with the source by a diff, in
    one transaction with a consistent snapshot, and its changing rows read (``stages.heal``). A table that cannot
    be healed (its key changed, its policy refuses a change of columns) fails, named; the others go on. When no
    chain broke, it does nothing and starts no Spark application.

    Returns (XCom) a ``Captured``: a merge input per healed table (mode ``heal``), the tables that failed.

    :param plan: the plan task's ``SourcePlan`` (templated).
    :param extraction: the extract task's ``Extraction`` (templated; None when that task failed).
    :param source: the configuration's ``source:`` (``SourceConfig``): the connection and its time limits, and the
        rows a diff's read holds before writing them (``read_buffer_mb``, ``core.batches``).
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
        tables = [(plan.table(b.source), b.why) for b in broken]
        with self._leased(context, [table for table, _ in tables], plan.run):
            return self._heal(context, tables).to_xcom()

    def _heal(self, context: Any, broken: list[tuple[TablePlan, str]]) -> Captured:
        hook = self._source_hook()
        mariadb = hook.flavor.is_mariadb
        store = work_store(broken[0][0].table_dir.work_dir, self.work.conn_id)
        failed: list[TableFailure] = []
        targets: list[HealTarget] = []
        for table, why in broken:
            self.log.warning("%s: its chain broke (%s); it is brought level by a diff against version %s",
                             table.source, why, table.committed.version if table.committed else None)
            try:
                targets.append(target(table, why, hook))
            except CdcError as exc:
                self.log.error("%s cannot be healed: %s", table.source, exc)
                failed.append(TableFailure(source=table.source, stage="heal", error=str(exc)))
        if not targets:
            return Captured(failed=tuple(failed))
        jobs = [DigestsJob(warehouse_dir=self.hive.warehouse_dir, metastore_uri=self.hive.metastore_uri,
                           table=t.table.table.hive_table, columns=t.compared, key=t.header.key, mariadb=mariadb,
                           time_zone=self.hive.time_zone, location=t.committed.location,
                           out=store.uri(t.table.run_dir.heal_version_digests), shard=t.table.table.shard)
                for t in targets]
        self._require_spark_connection()
        job_file = targets[0].table.run_dir.heal_digests_jobs
        store.write(job_file, DigestsJobs(jobs=tuple(jobs)))
        started = time.monotonic()
        self._spark_submit(context, store.uri(job_file))
        spark_seconds = time.monotonic() - started  # one application for every table: each is counted it
        inputs: list[MergeInput] = []
        for heal in targets:
            run_dir = heal.table.run_dir
            # The job ended well: its part files (and its reason, where it refused the version), not Hadoop's
            # checksums.
            written = [run_dir.heal_version_digests_part(name)
                       for name in store.file_names(run_dir.heal_version_digests) if not name.endswith(".crc")]
            with store.fetched(written) as parts, store.staging(run_dir.heal) as local:
                try:
                    digests = local / DIGESTS_FILE
                    # Of the version's columns the digests cover: the key columns as the version typed them.
                    version = RawHeader(heal.header.table, heal.compared, heal.header.key)
                    rows = digests_file_from_spark(parts, version, digests)
                    result = heal_table(hook, heal, digests, local, mariadb, self.source.read_buffer)
                except CdcError as exc:
                    self.log.error("%s cannot be healed: %s", heal.source, exc)
                    failed.append(TableFailure(source=heal.source, stage="heal", error=str(exc)))
                    continue
                found = result.found
                self.log.info("%s healed by a diff with version %d (%d rows): %d rows changed or new, %d gone; %d "
                              "rows' digests compared; %d bytes sent by the server; as of %s, binlog %s",
                              heal.source, heal.committed.version, rows, found.upserts, found.deletes,
                              found.compared_rows, found.bytes_sent, found.as_of.isoformat(), result.watermark)
                result.seconds += spark_seconds
                inputs.append(merge_input(heal, result, functools.partial(store.location_of, staging_dir=local,
                                                                          location=run_dir.heal)))
        return Captured(inputs=tuple(inputs), failed=tuple(failed))
