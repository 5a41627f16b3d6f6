"""Example DAG: keep the Hive copies of the MySQL tables selected in $CDC_CONFIG up to date from the binlog.

One task group for each source server, built by the provider's factory: the tables named or matched by a
pattern, the binlog read once for all of them, one Spark application for those that changed. Each run
brings every table to the end of the run's data interval (scheduled and backfill runs) or to the moment it
runs (manual runs). Trigger it with ``fresh_snapshot`` set to reload every table from a new snapshot.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_cdc_provider import cdc_params, cdc_source_group, load_config

# One configuration a server; several, separated by the path separator (``:``), give a group each, side by side
# (their tables' Hive tables may be shared as shards: docs/sources.md, Shards).
CONFIG_PATHS = [Path(p) for p in (os.environ.get("CDC_CONFIG") or str(Path(__file__).with_name("cdc_config.yaml")))
                .split(os.pathsep) if p]
configs = [load_config(path) for path in CONFIG_PATHS]

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
    for n, config in enumerate(configs):
        cdc_source_group(config, group_id="source" if n == 0 else f"source_{n + 1}")
