"""Example DAG: keep the Hive copies of the MySQL tables selected in $CDC_CONFIG up to date from the binlog.

One task group for the whole source server, built by the provider's factory: the tables named or matched by
a pattern, the binlog read once for all of them, one Spark application for those that changed. Each run
brings every table to the end of the run's data interval (scheduled and backfill runs) or to the moment it
runs (manual runs). Trigger it with ``fresh_snapshot`` set to reload every table from a new snapshot.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

import yaml
from airflow.sdk import DAG

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.task_groups import cdc_params, cdc_source_group

CONFIG_PATH = Path(os.environ.get("CDC_CONFIG") or Path(__file__).with_name("cdc_config.yaml"))
config = CdcConfig.from_dict(yaml.safe_load(CONFIG_PATH.read_text()), origin=str(CONFIG_PATH))

with DAG(
    dag_id="mysql_binlog_to_hive",
    description="MySQL binlog → Hive, every table of one server",
    schedule=timedelta(hours=1),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    params=cdc_params(),
    tags=["cdc", "mysql", "hive"],
):
    cdc_source_group(config, group_id="source")
