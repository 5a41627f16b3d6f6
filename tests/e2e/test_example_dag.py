"""The DAGs in dags/: they import, and the example DAG runs for real in Airflow against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import DAGS, SAMPLE_SCHEMA, conn_env
from tests.servers import start_server


def test_every_dag_file_imports_without_errors():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    files = {Path(dag.fileloc).name for dag in bag.dags.values()}
    assert files == {p.name for p in DAGS.glob("*.py")}
    assert "mysql_binlog_to_hive" in bag.dag_ids
    dag = bag.dags["mysql_binlog_to_hive"]
    assert {t.task_id for t in dag.tasks} == {f"source.{t}" for t in ("check", "plan", "snapshot", "extract",
                                                                      "replay", "heal", "merge", "table", "verify",
                                                                      "summary")}


def run_dag(dag_id: str, config: dict, tmp_path: Path, env: dict[str, str]) -> tuple[int, str, dict]:
    """``airflow dags test`` in a subprocess, as a user would; returns its exit code, its output and the XComs."""
    config_path = tmp_path / "cdc.yaml"
    config_path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), "dags", "test", dag_id],
        env={**os.environ, **env, "CDC_CONFIG": str(config_path)},
        capture_output=True,
        text=True,
        # Against a hang, not a measure: on two cores beside the rest of the suite a first run (two snapshots, a
        # merge and the rolling verify's application, each Spark in local[1]) has taken over five minutes.
        timeout=900,
    )
    return result.returncode, result.stdout + result.stderr, latest_xcoms(dag_id)


def latest_xcoms(dag_id: str, key: str = "return_value") -> dict:
    """The XComs of the DAG's latest run by task id; a mapped task's as a list, by map index."""
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).first()
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run.run_id,
                                               XComModel.key == key).order_by(XComModel.map_index).all()
        found: dict = {}
        for row in rows:
            if row.map_index >= 0:
                found.setdefault(row.task_id, []).append(_value(row.value))
            else:
                found[row.task_id] = _value(row.value)
        return found


def asset_events(uri: str) -> list[dict]:
    """The events Airflow recorded for the asset ``uri``, oldest first: their extra, and the run that made each."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .filter(AssetModel.uri == uri).order_by(AssetEvent.id).all())
        return [{**(row.extra or {}), "run_id": row.source_run_id, "task_id": row.source_task_id} for row in rows]


def outcomes(dag_id: str = "mysql_binlog_to_hive", group: str = "source") -> dict[str, dict]:
    """Each table's outcome of the DAG's latest run (the merge task's ``outcomes`` XCom), by source table."""
    return {o["source"]: o for o in latest_xcoms(dag_id, key="outcomes")[f"{group}.merge"]}


def _value(stored):
    if not isinstance(stored, str):
        return stored
    try:
        return json.loads(stored)
    except ValueError:  # a plain string XCom
        return stored


@pytest.fixture
def tls_source(tmp_path, make_user):
    """A server of this test's own that takes only TLS connections, the sample schema loaded, and a capture user
    whose connection verifies the server's certificate (the ``ssl`` extra): (server, connection id)."""
    server = start_server(tmp_path / "tls-server", tls=True)
    try:
        server.run_script(SAMPLE_SCHEMA)
        yield server, make_user(server=server)
    finally:
        server.stop()


@pytest.mark.usefixtures("airflow_home")
def test_example_dag_loads_each_table_in_a_real_cli_run(tls_source, tmp_path):
    # Through TLS: the server refuses a connection without it, and the connection checks its certificate.
    server, capture_conn = tls_source
    assert json.loads(os.environ[conn_env(capture_conn)])["extra"]["ssl_mode"] == "VERIFY_IDENTITY"
    config = {"mysql_conn_id": capture_conn, "spark_conn_id": "spark_cli", "work_dir": str(tmp_path / "work"),
              "hive": {"warehouse_dir": str(tmp_path / "warehouse")},
              "tables": [{"source": "shop.orders"}, {"source": "shop.customers"}]}
    spark = {"AIRFLOW_CONN_SPARK_CLI": json.dumps({"conn_type": "spark", "host": "local[1]"})}
    code, output, xcoms = run_dag("mysql_binlog_to_hive", config, tmp_path, spark)
    assert code == 0, output[-5000:]
    check = xcoms["source.check"]
    assert check["flavor"] == "MariaDB" and check["watermark"]["file"].startswith("binlog.")
    keys = {t["source"]: t["key"] for t in check["tables"]}
    assert keys == {"shop.orders": ["order_no", "line_no"], "shop.customers": ["id"]}
    for source, outcome in outcomes().items():
        assert (outcome["mode"], outcome["status"], outcome["version"]) == ("snapshot", "committed", 1), source
    assert sorted((t["source"], t["released"]) for task in xcoms["source.table"] for t in task) == [
        ("shop.customers", True), ("shop.orders", True)]
    assert [len(task) for task in xcoms["source.table"]] == [1, 1], "a task per table"
    # The rolling verify, on by default: the first slice of each new version, clean, in the run's summary.
    assert sorted(xcoms["source.summary"]) == ["shop.customers", "shop.orders"]
    assert all(line.endswith("; verify (slice 1 of 24): clean") for line in xcoms["source.summary"].values()), \
        xcoms["source.summary"]
    password = json.loads(os.environ[conn_env(capture_conn)])["password"]
    assert password not in output


@pytest.mark.usefixtures("airflow_home")
def test_a_missing_spark_connection_fails_the_merge_with_the_fix(mariadb, capture_conn, tmp_path):
    config = {"mysql_conn_id": capture_conn, "spark_conn_id": "spark_nowhere", "work_dir": str(tmp_path / "work"),
              "hive": {"warehouse_dir": str(tmp_path / "warehouse")}, "tables": ["shop.customers"], "retries": 0}
    code, output, _ = run_dag("mysql_binlog_to_hive", config, tmp_path, {})
    assert code != 0
    assert "The Spark connection 'spark_nowhere' does not exist. Create it with conn_type `spark`" in output
    assert "--master yarn" not in output
    assert not (tmp_path / "warehouse" / "ods.db").exists()


@pytest.mark.usefixtures("airflow_home")
def test_the_factory_reused_in_another_dag_nested_in_a_group_runs_with_a_task_after_it(mariadb, capture_conn,
                                                                                       tmp_path):
    config = {"mysql_conn_id": capture_conn, "spark_conn_id": "spark_reuse", "work_dir": str(tmp_path / "work"),
              "hive": {"warehouse_dir": str(tmp_path / "warehouse")}, "tables": ["shop.customers"]}
    spark = {"AIRFLOW_CONN_SPARK_REUSE": json.dumps({"conn_type": "spark", "host": "local[1]"})}
    code, output, xcoms = run_dag("shop_orders_daily", config, tmp_path, spark)
    assert code == 0, output[-5000:]
    assert xcoms["report"] == "ods.orders_daily: committed, version 1, 5 rows"
    assert (tmp_path / "warehouse" / "ods.db" / "orders_daily" / "v000001").is_dir()
    # Inside the DAG's own group, each task's id carries both groups: none is built by hand.
    assert {"warehouse.orders.check", "warehouse.orders.plan", "warehouse.orders.merge"} <= set(xcoms)
