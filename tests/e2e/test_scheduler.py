"""The chain under a real scheduler (api-server, dag-processor, scheduler with the LocalExecutor): runs made by
the timetable, and a finished run cleared through the REST API as the UI's Clear does."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pytest

from tests.e2e.deployment import AirflowDeployment
from tests.e2e.test_pipeline import Pipeline

DAG_ID = "cdc_every_minute"
DAG_FILE = '''
import os
from datetime import datetime, timezone
from pathlib import Path

import yaml
from airflow.sdk import DAG

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.task_groups import cdc_params, cdc_source_group

config = CdcConfig.from_dict(yaml.safe_load(Path(os.environ["CDC_CONFIG"]).read_text()))
with DAG("cdc_every_minute", schedule="*/1 * * * *", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         catchup=False, max_active_runs=1, params=cdc_params()):
    cdc_source_group(config, group_id="source")
'''


@pytest.fixture
def scheduled(mariadb, capture_conn, tmp_path) -> Iterator[tuple[AirflowDeployment, Pipeline]]:
    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders", "customers"], retries=1)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "cdc_every_minute.py").write_text(DAG_FILE)
    env = {"CDC_CONFIG": str(pipeline.config_path),
           **{k: v for k, v in pipeline.env.items() if k.startswith("AIRFLOW_CONN_")}}
    deployment = AirflowDeployment.start(tmp_path / "airflow", dags, env=env)
    try:
        yield deployment, pipeline
    finally:
        deployment.stop()


def finished_runs(airflow: AirflowDeployment) -> list[dict]:
    return [r for r in airflow.api.runs(DAG_ID) if r["state"] in ("success", "failed")]


def test_scheduled_runs_follow_the_source_and_a_cleared_run_leaves_the_table(scheduled):
    airflow, pipeline = scheduled
    airflow.api.wait_for_dag(DAG_ID, timeout=120)
    airflow.api.unpause(DAG_ID)

    # The timetable's first run loads both tables.
    first = airflow.api.wait_for_run(DAG_ID, _next_run(airflow, []), timeout=600)
    assert first["state"] == "success" and first["run_type"] == "scheduled", airflow.log_tails()
    for table in ("orders", "customers"):
        pipeline.assert_equal(table)

    # Cleared after the source changed (as the UI's Clear does): the run redoes nothing it committed. Its plan
    # says so, and its merge leaves every table as it is, whatever the source holds now.
    pipeline.sql("UPDATE {s}.orders SET amount = amount + 100 WHERE order_no = 1001",
                 "DELETE FROM {s}.customers WHERE id = 2")
    changed_at = dt.datetime.now(dt.timezone.utc)
    airflow.api.clear_run(DAG_ID, first["dag_run_id"])
    again = airflow.api.wait_for_run(DAG_ID, first["dag_run_id"], timeout=600)
    assert again["state"] == "success", airflow.log_tails()
    assert "already committed by this run" in airflow.api.task_log(DAG_ID, first["dag_run_id"], "source.plan", 2)
    outcomes = airflow.api.xcom(DAG_ID, first["dag_run_id"], "source.merge", key="outcomes")
    assert sorted((o["hive_table"], o["status"]) for o in outcomes) == [("ods.customers", "nothing"),
                                                                          ("ods.orders", "nothing")]

    # The next run the timetable makes picks the changes up.
    done = [r["dag_run_id"] for r in finished_runs(airflow)]
    later = airflow.api.wait_for_run(DAG_ID, _next_run(airflow, done, after=changed_at), timeout=600)
    assert later["state"] == "success" and later["run_type"] == "scheduled", airflow.log_tails()
    for table in ("orders", "customers"):
        pipeline.assert_equal(table)
    assert pipeline.ledger("orders").holder() is None and pipeline.ledger("customers").holder() is None


def _next_run(airflow: AirflowDeployment, known: list[str], after: dt.datetime | None = None,
              timeout: float = 240) -> str:
    """The id of the first scheduled run not in ``known`` (whose interval ends after ``after``), once the
    scheduler has made it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run in airflow.api.runs(DAG_ID):
            end = dt.datetime.fromisoformat(run["data_interval_end"].replace("Z", "+00:00"))
            if run["dag_run_id"] not in known and run["run_type"] == "scheduled" and (after is None or end > after):
                return run["dag_run_id"]
        time.sleep(1)
    raise AssertionError(f"no new scheduled run of {DAG_ID} within {timeout} s\n{airflow.log_tails()}")
