"""Example downstream DAG: runs each time a new version of one Hive table is committed, whichever DAG wrote it.

No chaining by hand: each commit of a table emits an event on its Hive table's asset
(``hive://<metastore host>:<port>/<database>/<table>``), and this DAG is scheduled on that asset. A run that
commits nothing to the table (no change in its range, a cleared run redoing nothing) emits no event, so this DAG
does not run for it. Each event's extra says which version was committed, the binlog watermark and the moment
(``as_of``) the version reflects, and the rows inserted, updated and deleted; several commits before this DAG
starts make one run that sees all their events.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_cdc_provider import load_config
from airflow_cdc_provider.task_groups import table_asset

# The first configuration CDC_CONFIG names (the example DAG takes several, one a server).
CONFIG_PATH = Path((os.environ.get("CDC_CONFIG") or str(Path(__file__).with_name("cdc_config.yaml")))
                   .split(os.pathsep)[0])
config = load_config(CONFIG_PATH)
# The first table the configuration names (shop.orders in cdc_config.yaml); write your own as "schema.table".
orders = table_asset(config, str(config.named_tables()[0].source))

with DAG(dag_id="shop_orders_refreshed", schedule=[orders], start_date=datetime(2026, 1, 1), catchup=False,
         tags=["cdc", "example"]):

    @task
    def report(triggering_asset_events: Any = None) -> list[dict]:
        """One line per commit this run follows; returned for a task of yours to go on from."""
        commits = []
        for event in triggering_asset_events[orders]:
            extra = event.extra
            print(f"{orders.uri}: version {extra['version']} ({extra['mode']}) as of {extra['as_of']}: "
                  f"+{extra['inserted']} ~{extra['updated']} -{extra['deleted']}, {extra['rows']} rows, "
                  f"written by {event.source_dag_id} run {event.source_run_id}")
            commits.append({**extra, "source_dag_id": event.source_dag_id, "source_run_id": event.source_run_id})
        return commits

    report()
