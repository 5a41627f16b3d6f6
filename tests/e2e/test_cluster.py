"""Where the platform runs it: the merge submitted to a Spark standalone cluster, the tables in a Hive
metastore service. Real runs of the example DAG; the cluster and the metastore are started from pip pyspark's
jars (``airflow_cdc_provider.testing.cluster``)."""

from __future__ import annotations

import time

import pytest

from airflow_cdc_provider.core.ledger import Ledger
from tests.e2e.test_pipeline import DAG_ID, ROUNDS, Pipeline


def wait_for_dag_row(proc, timeout: float = 120) -> None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with create_session() as session:
            if session.get(DagModel, DAG_ID) is not None:
                return
        time.sleep(0.5)


def on_the_platform(name: str, mariadb, conn_id: str, tmp_path, metastore, cluster) -> Pipeline:
    (tmp_path / name).mkdir()
    pipeline = Pipeline(mariadb, conn_id, tmp_path / name, ["orders", "customers"])
    host, port = cluster.master_url.rsplit(":", 1)
    pipeline.configure(hive={"database": f"ods_{name}", "warehouse_dir": str(metastore.warehouse_dir),
                             "metastore_uri": metastore.uri},
                       spark={"host": host, "port": int(port)})
    return pipeline


@pytest.mark.usefixtures("airflow_home")
def test_two_sources_merge_at_the_same_moment_on_a_cluster_through_a_metastore_service(
        mariadb, capture_conn, tmp_path, metastore_service, spark_cluster):
    before = {app["id"] for app in spark_cluster.state().get("completedapps", [])}
    first, second = (on_the_platform(name, mariadb, capture_conn, tmp_path, metastore_service, spark_cluster)
                     for name in ("a", "b"))
    for logical_date, changes in (("2026-07-01T00:00:00+00:00", None), ("2026-07-01T01:00:00+00:00", ROUNDS[1])):
        for pipeline in (first, second):
            if changes:
                pipeline.sql(*changes)
        # Both runs at once (runs of one DAG, so each its own logical date): their merges reach the metastore at
        # the same moment, and both commit.
        running = [first.start(logical_date)]
        wait_for_dag_row(running[0])  # two first syncs of the DAG into a new metadata DB would collide
        running.append(second.start(logical_date.replace(":00:00+", ":30:00+")))
        for proc in running:
            output, _ = proc.communicate(timeout=900)
            assert proc.returncode == 0, output[-8000:]
        for pipeline in (first, second):
            for table in ("orders", "customers"):
                _, location = pipeline.assert_equal(table)  # read back through the metastore service
                assert location.startswith("file:" + str(metastore_service.warehouse_dir)) or \
                    location.startswith(str(metastore_service.warehouse_dir)), location
                database = pipeline.config["hive"]["database"]
                committed = Ledger(pipeline.tmp / "work" / f"{database}.{table}" / "ledger").committed()
                assert committed.version == (1 if changes is None else 2) and committed.location == location

    # Every merge ran as an application of the cluster, one per run of each source.
    apps = [app for app in spark_cluster.state().get("completedapps", []) if app["id"] not in before]
    merges = [app for app in apps if app["name"].startswith("cdc-merge")]
    assert len(merges) == 4 and {app["state"] for app in merges} == {"FINISHED"}, apps
