"""Reusing the provider in a DAG of your own: one table, once a day, and a task of yours after it.

The task group is the example DAG's chain over one table, nested here in a group of the DAG's own; it feeds a
downstream report that reads what the merge committed (the group's ``outcomes``).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import yaml
from airflow.sdk import DAG, TaskGroup, task

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.task_groups import cdc_params, cdc_table_group

# The first configuration CDC_CONFIG names (the example DAG takes several, one a server).
CONFIG_PATH = Path((os.environ.get("CDC_CONFIG") or str(Path(__file__).with_name("cdc_config.yaml")))
                   .split(os.pathsep)[0])
base = yaml.safe_load(CONFIG_PATH.read_text())
config = CdcConfig.from_dict({**base, "tables": [{"source": "shop.orders", "target": "orders_daily"}]},
                             origin=str(CONFIG_PATH))

with DAG(dag_id="shop_orders_daily", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False,
         max_active_runs=1, params=cdc_params(), tags=["cdc", "example"]):
    with TaskGroup("warehouse"):
        orders = cdc_table_group(config.tables[0], config, group_id="orders")

    @task
    def report(outcomes: list[dict]) -> str:
        (merged,) = outcomes
        line = f"{merged['hive_table']}: {merged['status']}, version {merged['version']}, {merged['rows']} rows"
        print(line)
        return line

    report(orders.outcomes)
