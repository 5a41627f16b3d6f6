"""Keep the Hive copies of the MySQL tables listed in cdc.yaml (beside this file) up to date, every hour."""

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_cdc_provider import cdc_params, cdc_source_group, load_config

config = load_config(Path(__file__).with_name("cdc.yaml"))

with DAG(
    dag_id="mysql_to_hive",
    schedule=timedelta(hours=1),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # each run takes up where the one before it ended
    params=cdc_params(),  # the trigger form: fresh_snapshot, verify, repair, reread
) as dag:
    cdc_source_group(config, group_id="shop")

if __name__ == "__main__":
    dag.test()  # `python mysql_to_hive.py`: one run, here, with no scheduler
