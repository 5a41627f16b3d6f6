"""The merge task (a SparkSubmitOperator running the provider's merge job for every changed table of a run),
and the per-table task that reports each table's outcome and releases its lock."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetAlias, BaseOperator

from airflow_cdc_provider.compat import AirflowFailException, max_map_length
from airflow_cdc_provider.core.assets import beside_events, event_extra, hive_asset_uri
from airflow_cdc_provider.core.config import HiveConfig, RunConfig, SourceConfig, SparkConfig, WorkConfig
from airflow_cdc_provider.core.contract import (
    OUTCOMES_KEY,
    Captured,
    Extraction,
    MergeInput,
    SourcePlan,
    TableOutcome,
)
from airflow_cdc_provider.core.ledger import RunRef
from airflow_cdc_provider.core.lineage import TableLineage, hive_namespace, mysql_namespace
from airflow_cdc_provider.core.merge import MergeSpec, written_lineage
from airflow_cdc_provider.core.modes import Mode, Status
from airflow_cdc_provider.core.outcomes import (
    table_task_batches,
)
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.lease import HoldsTableLeases
from airflow_cdc_provider.operators.spark_submit import CdcSparkSubmitOperator
from airflow_cdc_provider.spark import MERGE_JOB
from airflow_cdc_provider.stages.merge_run import MergeSettings, finish_table, merge_run
from airflow_cdc_provider.storage import WorkStore


class SparkMergeOperator(HoldsTableLeases, CdcSparkSubmitOperator):
    """Merge every table of the run that has changes into the next version of its Hive table, and commit each.

    One Spark application (or ``applications``, each taking a batch of tables) runs
    ``airflow_cdc_provider/spark/merge_job.py``; ``--master`` and the rest come from the Spark connection. The
    job's only argument is the URI of a merge job file in the work directory (no secret in it). Each table is
    committed on its own by one metastore switch; the job writes its result beside the job file and this task
    records each commit in the table's ledger from it (the job never touches a ledger).
    A table with no change in the range starts no Spark work: its watermark advances on the version it has.
    When no table has changes, no application starts at all.

    A table the check stopped (``SourcePlan.stopped``) gets a failed outcome with the check's reason.

    Returns (XCom) the ``TableOutcome`` of each table it committed or failed, as a list of lists, one per table
    task downstream: a table each, or a few each when there are more than Airflow's ``[core] max_map_length``;
    pushes every table's outcome (idle and untouched ones too) under the XCom key
    ``outcomes``. It releases the locks of the idle tables itself. The task fails only when an application
    failed as a whole (its retry redoes what did not commit).

    :param plan: the plan task's ``SourcePlan`` (templated).
    :param snapshot: the snapshot task's ``Captured`` (templated; None when that task failed).
    :param extraction: the extract task's ``Extraction`` (templated; None when that task failed).
    :param replay: the replay task's ``Captured`` (templated; None when that task failed).
    :param heal: the heal task's ``Captured`` (templated; None when that task failed or the DAG has none).
    :param source: the configuration's ``source:`` (``SourceConfig``): its connection's host and port name the
        source tables in the lineage reported to OpenLineage (``get_openlineage_facets_on_complete``).
    :param work: the configuration's ``work:`` (``WorkConfig``): the connection of an object-store work dir.
    :param run: the configuration's ``run:`` (``RunConfig``): how long the run's table locks count as alive
        unrenewed (``operators.lease``).
    :param spark: the configuration's ``spark:`` (``SparkConfig``): the connection, the merge's settings, the
        applications the run's tables are dealt into (one after the other), the class-data archive that cuts
        seconds off every merge.
    :param hive: the configuration's ``hive:`` (``HiveConfig``): the warehouse, the metastore, the versions of
        each table kept on disk (``keep_versions``), and the readers' zone (DATETIME values are written so that
        they read back with the source's digits there).
    """

    template_fields = (*CdcSparkSubmitOperator.template_fields, "plan", "snapshot", "extraction", "replay", "heal")

    def __init__(self, *, plan: Any, snapshot: Any, extraction: Any, replay: Any, source: SourceConfig,
                 work: WorkConfig, run: RunConfig, spark: SparkConfig, hive: HiveConfig, heal: Any = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("name", "cdc-merge")
        kwargs.setdefault("conf", spark.merge_settings())
        super().__init__(application=MERGE_JOB, spark=spark, hive=hive, **kwargs)
        self.plan, self.snapshot, self.extraction, self.replay = plan, snapshot, extraction, replay
        self.heal, self.source, self.work, self.run = heal, source, work, run
        self._committed: list[tuple[MergeInput, MergeSpec]] = []  # what this attempt committed: its lineage

    @final_on_cdc_error
    def execute(self, context: Any) -> list[list[dict[str, Any]]]:  # type: ignore[override]  # the outcomes
        if self.plan is None:
            # Failed, not skipped: a skipped merge would leave the run looking successful.
            raise AirflowFailException("The plan task did not finish (see its log, or the check's): nothing was "
                                       "merged.")
        plan = SourcePlan.model_validate(self.plan)
        with self._leased(context, [t for t in plan.tables if t.mode != Mode.NOTHING], plan.run):
            return self._merge(context, plan)

    def _merge(self, context: Any, plan: SourcePlan) -> list[list[dict[str, Any]]]:
        # A capture task that failed as a whole left no value: its tables are failed, the others go on.
        snapshot, replay, heal = (Captured.model_validate(v) if v is not None else None
                                  for v in (self.snapshot, self.replay, self.heal))
        extraction = Extraction.model_validate(self.extraction) if self.extraction is not None else None
        store = work_store(plan.tables[0].table_dir.work_dir, self.work.conn_id) if plan.tables else WorkStore()
        done = merge_run(plan, (snapshot, extraction, replay, heal), store, self.settings,
                         lambda job: self._spark_submit(context, job), self.log, ready=self._require_spark_connection)
        self._committed = done.committed
        context["ti"].xcom_push(key=OUTCOMES_KEY, value=[o.to_xcom() for o in done.outcomes])
        # One task per table the run wrote or failed (a few tables per task past Airflow's max_map_length); idle
        # and untouched tables cost no task.
        written = [o.to_xcom() for o in done.outcomes if o.status not in (Status.IDLE, Status.NOTHING)]
        return table_task_batches(written, max_map_length())

    @property
    def settings(self) -> MergeSettings:
        return MergeSettings(warehouse_dir=self.hive.warehouse_dir, metastore_uri=self.hive.metastore_uri,
                             keep_versions=self.hive.keep_versions, time_zone=self.hive.time_zone,
                             applications=self.spark.merge_applications)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The OpenLineage provider's question, once the task succeeded: each table this attempt committed, read
        from its MySQL table and written to its Hive table, with both schemas and each column's source column."""
        from airflow_cdc_provider.operators.lineage import operator_lineage

        lineage: list[TableLineage] = []
        if self._committed:
            mysql = mysql_namespace(*MySqlSourceHook(self.source.mysql_conn_id).address)
            hive = hive_namespace(self.hive.metastore_uri)
            lineage = [written for merge_input, spec in self._committed
                       for written in written_lineage(spec, merge_input.source_columns or merge_input.columns,
                                                      mysql, hive)]
        return operator_lineage(lineage)




class CdcTableOperator(BaseOperator):
    """The outcome of the tables the run wrote or failed (one mapped task per table, or per few tables past Airflow's
    ``max_map_length``): each logged, its lock released, the files of its older runs removed. A table that failed
    fails this task, naming the table and why, once the task's other tables are done; its lock stays with the run
    until the run has ended, and a re-run redoes just what did not commit.

    :param outcomes: the tables' ``TableOutcome``s (templated; mapped over the merge task's output).
    :param work_dir: the base directory of run files and ledgers.
    :param keep_runs: run directories kept per table, newest first (a re-run needs its own).
    :param work_conn_id: the connection of an object-store ``work_dir`` (see ``hooks.work_store``).
    :param asset_alias: an ``AssetAlias`` name among the task's ``outlets``: a committed table's asset
        (``core.assets``) gets an event through it, whose extra says the version, watermark, as_of and changes.
    :param metastore_uri: the metastore of the Hive tables (their asset URIs name it).
    """

    template_fields = ("outcomes",)

    def __init__(self, *, outcomes: Any, work_dir: str, keep_runs: int = 3, work_conn_id: str | None = None,
                 asset_alias: str | None = None, metastore_uri: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outcomes, self.work_dir, self.keep_runs = outcomes, work_dir, keep_runs
        self.work_conn_id, self.asset_alias, self.metastore_uri = work_conn_id, asset_alias, metastore_uri

    def execute(self, context: Any) -> list[dict[str, Any]]:
        outcomes = [TableOutcome.model_validate(o) for o in self.outcomes]
        run = context["dag_run"]
        store = work_store(self.work_dir, self.work_conn_id)
        finished = []
        for outcome in outcomes:
            if outcome.status == Status.FAILED:
                continue
            failpoint("table.finish")
            released, removed = finish_table(TableDir(work_dir=self.work_dir, hive_table=outcome.hive_table,
                                                      shard=outcome.shard.path if outcome.shard else None),
                                             RunRef(dag_id=run.dag_id, run_id=run.run_id), self.keep_runs, store)
            self.log.info("%s → %s: %s. %s", outcome.source, outcome.hive_table, outcome.status, outcome.reason)
            self.log.info("Lock released: %s; removed %d old run directories", released, len(removed))
            if outcome.status == Status.COMMITTED and self.asset_alias:  # a new version: downstream DAGs may go on
                uri = hive_asset_uri(self.metastore_uri, outcome.hive_table)
                context["outlet_events"][AssetAlias(self.asset_alias)].add(Asset(uri=uri), extra=event_extra(outcome))
                self.log.info("Asset event for %s: version %s", uri, outcome.version)
                for beside, extra in beside_events(outcome):  # its changelog, snapshots and history tables
                    uri = hive_asset_uri(self.metastore_uri, beside)
                    context["outlet_events"][AssetAlias(self.asset_alias)].add(Asset(uri=uri), extra=extra)
                    self.log.info("Asset event for %s: version %s", uri, outcome.version)
            finished.append({**outcome.to_xcom(), "released": released})
        failed = [o for o in outcomes if o.status == Status.FAILED]
        if failed:
            raise AirflowFailException("; ".join(f"{o.source} → {o.hive_table} failed in this run: {o.error}"
                                                 for o in failed))
        return finished
