"""The task group factory: the whole chain for one table, for the example DAG and for users' own DAGs.

    check → plan ─┬─ snapshot ─────────────┬─ merge → finish
                  └─ extract → replay ─────┘

``plan`` takes the table's lock and branches: the first run (or one asked for a fresh snapshot) loads a
snapshot; later runs read the binlog from the committed watermark. ``merge`` writes the next version of the
Hive table on Spark and commits it with its watermark in one metastore switch. ``finish`` releases the lock.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Param, TaskGroup

from airflow_cdc_provider.core.config import CdcConfig, TableConfig
from airflow_cdc_provider.operators.capture import MySqlBinlogExtractOperator, MySqlSnapshotOperator, RawReplayOperator
from airflow_cdc_provider.operators.check import CaptureCheckOperator
from airflow_cdc_provider.operators.merge import CdcFinishOperator, SparkMergeOperator
from airflow_cdc_provider.operators.plan import CdcPlanOperator

FRESH_SNAPSHOT_PARAM = "fresh_snapshot"


def cdc_params() -> dict[str, Param]:
    """The trigger-form parameters the task groups read; pass them to your DAG's ``params``."""
    return {FRESH_SNAPSHOT_PARAM: Param(False, type="boolean", title="Fresh snapshot",
                                        description="Reload every table from a new snapshot instead of the binlog.")}


def cdc_table_group(table: TableConfig, config: CdcConfig, group_id: str | None = None,
                    **task_kwargs: Any) -> TaskGroup:
    """Build the task group that brings ``table`` up to date in Hive. Call it inside a DAG context.

    ``task_kwargs`` go to every task (``pool``, ``queue``…). The DAG should carry ``cdc_params()``.
    """
    gid = group_id or table.group_id
    source, hive_table = str(table.source), table.hive_table(config.hive)
    retry = {"retries": config.retries, "retry_delay": timedelta(minutes=1), **task_kwargs}
    with TaskGroup(group_id=gid, tooltip=f"{source} → Hive {hive_table}") as group:
        check = CaptureCheckOperator(task_id="check", table=source, mysql_conn_id=config.mysql_conn_id, **retry)
        # No retry: the plan fails only on a decision (another run holds the table) that a retry would repeat.
        plan = CdcPlanOperator(
            task_id="plan", source=source, hive_table=hive_table, work_dir=config.work_dir,
            snapshot_task_ids=[f"{gid}.snapshot"], incremental_task_ids=[f"{gid}.extract", f"{gid}.replay"],
            fresh_snapshot=f"{{{{ params.get('{FRESH_SNAPSHOT_PARAM}', False) }}}}", **{**retry, "retries": 0},
        )
        snapshot = MySqlSnapshotOperator(task_id="snapshot", table=source, work_dir=plan.output["run_dir"],
                                         mysql_conn_id=config.mysql_conn_id, **retry)
        extract = MySqlBinlogExtractOperator(
            task_id="extract", table=source, start_watermark=plan.output["start"], end_watermark=plan.output["end"],
            stop_before=plan.output["stop_before"], start_columns=plan.output["start_columns"],
            work_dir=plan.output["run_dir"], schema_changes=config.policy(table), mysql_conn_id=config.mysql_conn_id,
            **retry,
        )
        replay = RawReplayOperator(task_id="replay", extraction=extract.output, work_dir=plan.output["run_dir"], **retry)
        merge = SparkMergeOperator(
            task_id="merge", conn_id=config.spark_conn_id, hive_table=hive_table,
            warehouse_dir=config.hive.warehouse_dir, metastore_uri=config.hive.metastore_uri,
            plan_task_id=f"{gid}.plan", snapshot_task_id=f"{gid}.snapshot", extract_task_id=f"{gid}.extract",
            replay_task_id=f"{gid}.replay", keep_versions=config.keep_versions,
            trigger_rule="none_failed_min_one_success", **retry,
        )
        finish = CdcFinishOperator(task_id="finish", plan_task_id=f"{gid}.plan", keep_runs=config.keep_versions,
                                   trigger_rule="none_failed", **retry)
        check >> plan >> [snapshot, extract]
        extract >> replay
        [snapshot, replay] >> merge >> finish
    return group
