"""Where the platform runs it: the merge submitted to a Spark standalone cluster, the tables in a Hive
metastore service, read by a reader while they change. Real runs of the example DAG; the cluster and the metastore are started from pip pyspark's
jars (``airflow_cdc_testing.cluster``)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml
from airflow_cdc_testing.hive import read_hive_tables, spark_env, spark_submit_command

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import Ledger
from airflow_cdc_provider.core.shards import Shard
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.storage import WorkStore
from tests.e2e.test_pipeline import DAG_ID, ROUNDS, Pipeline
from tests.integration.hive_helpers import hive_rows


def wait_for_dag_run(proc, logical_date: str, timeout: float = 600) -> None:
    """Until the run of ``logical_date`` exists: its process has synced the DAG files into the metadata DB (their
    DAGs, assets and aliases) and made its run. Two processes syncing the same new DAG objects at once collide, so
    the wait never ends without the run: on a loaded machine the sync took more than two minutes, and a second
    process started then failed on the first one's asset alias. A process that ended instead is left to the
    caller, which shows its output."""
    from airflow.models.dagrun import DagRun
    from airflow.sdk import timezone
    from airflow.utils.session import create_session

    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        with create_session() as session:
            if session.query(DagRun).filter(DagRun.dag_id == DAG_ID,
                                            DagRun.logical_date == timezone.parse(logical_date)).first():
                return
        assert time.monotonic() < deadline, f"no run of {logical_date} within {timeout} s"
        time.sleep(0.5)


def on_the_platform(name: str, mariadb, conn_id: str, tmp_path, metastore, cluster, database: str | None = None
                    ) -> Pipeline:
    (tmp_path / name).mkdir()
    pipeline = Pipeline(mariadb, conn_id, tmp_path / name, ["orders", "customers"])
    host, port = cluster.master_url.rsplit(":", 1)
    pipeline.configure(hive={"database": database or f"ods_{name}", "warehouse_dir": str(metastore.warehouse_dir),
                             "metastore_uri": metastore.uri},
                       spark={"host": host, "port": int(port)})
    return pipeline


def as_shards(pipeline: Pipeline, server: str) -> None:
    """The pipeline's orders a shard of the shared Hive table ``orders`` (its server named ``server``), its
    customers a table of its own."""
    # Customers first: the sample DAG that follows the first named table's asset then follows one of each source's
    # own, and the two runs' first syncs of the DAGs do not write one asset's reference at once.
    pipeline.config["tables"] = [
        {"source": f"{pipeline.schema}.customers", "target": f"customers_{server}"},
        {"source": f"{pipeline.schema}.orders", "target": "orders", "shards": {"server": server}}]
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))


@pytest.mark.usefixtures("airflow_home")
def test_two_sources_merge_at_the_same_moment_on_a_cluster_through_a_metastore_service(
        mariadb, capture_conn, tmp_path, metastore_service, spark_cluster):
    """Two servers' groups (two sources, each with its own work directory), whose orders are shards of one Hive
    table: their runs commit at the same moment, both shards and both tables of their own, and neither loses the
    other's commit."""
    before = {app["id"] for app in spark_cluster.state().get("completedapps", [])}
    first, second = (on_the_platform(name, mariadb, capture_conn, tmp_path, metastore_service, spark_cluster,
                                     "ods_shared") for name in ("a", "b"))
    for pipeline, server in ((first, "a"), (second, "b")):
        as_shards(pipeline, server)
    key = ["_source_server", "_source_schema", "_source_table",
           *first.hook.raw_header(TableName(first.schema, "orders")).key]
    for logical_date, changes in (("2026-07-01T00:00:00+00:00", None), ("2026-07-01T01:00:00+00:00", ROUNDS[1])):
        for pipeline in (first, second):
            if changes:
                pipeline.sql(*changes)
        # Both runs at once (runs of one DAG, so each its own logical date): their merges reach the metastore at
        # the same moment, and both commit: the first one's creates the shared table while the other's may too.
        running = [first.start(logical_date)]
        wait_for_dag_run(running[0], logical_date)  # two syncs of the same new DAG objects would collide
        running.append(second.start(logical_date.replace(":00:00+", ":30:00+")))
        for proc in running:
            output, _ = proc.communicate(timeout=900)
            assert proc.returncode == 0, output[-8000:]
        # Read back through the metastore service, the shared table and both of their own in one application.
        read = read_hive_tables(str(metastore_service.warehouse_dir), metastore_service.uri,
                                ["ods_shared.orders", "ods_shared.customers_a", "ods_shared.customers_b"])
        rows, shared = read["ods_shared.orders"]
        expected = {(server, p.schema, "orders", *k): {**row, "_source_server": server, "_source_schema": p.schema,
                                                         "_source_table": "orders"}
                    for p, server in ((first, "a"), (second, "b")) for k, row in p.source("orders").items()}
        assert hive_rows(rows, key) == expected, "both shards, whole"
        for pipeline, server in ((first, "a"), (second, "b")):
            rows, location = read[f"ods_shared.customers_{server}"]
            own = pipeline.hook.raw_header(TableName(pipeline.schema, "customers")).key
            assert hive_rows(rows, own) == pipeline.source("customers"), f"customers_{server} differs"
            for where in (location, shared):
                assert where.startswith("file:" + str(metastore_service.warehouse_dir)) or \
                    where.startswith(str(metastore_service.warehouse_dir)), where
            work = str(pipeline.tmp / "work")
            shard = Shard(server=server, source_schema=pipeline.schema, source_table="orders")
            for table, ledger in ((f"ods_shared.customers_{server}", TableDir(work_dir=work, hive_table=(
                    f"ods_shared.customers_{server}"))), ("ods_shared.orders", TableDir(
                    work_dir=work, hive_table="ods_shared.orders", shard=shard.path))):
                committed = Ledger(ledger, WorkStore()).committed()
                assert committed.version == (1 if changes is None else 2), table
                assert (committed.location == location if ledger.shard is None else
                        f"/{shard.partition_dir}/v00000{committed.version}" in committed.location), committed

    # The job names every file by URI (the driver may run on any node that reaches them), and the job is handed
    # over by its URI too: nothing in it is a path on the Airflow worker's disk.
    for pipeline in (first, second):
        for job_file in (pipeline.tmp / "work").glob("*/runs/*/merge-job-*.json"):
            job = json.loads(job_file.read_text())
            named = [job["result_file"]] + [f for t in job["tables"] for f in
                                            [*t["upsert_files"], t["delete_file"], t["fills_file"]] if f]
            assert named and all(f.startswith("file:///") for f in named), named

    # Every merge ran as an application of the cluster, one per run of each source.
    apps = [app for app in spark_cluster.state().get("completedapps", []) if app["id"] not in before]
    merges = [app for app in apps if app["name"].startswith("cdc-merge")]
    assert len(merges) == 4 and {app["state"] for app in merges} == {"FINISHED"}, apps


READER = '''
import json, sys, time, os
from airflow_cdc_provider.spark.session import hive_session

warehouse, uri, tables, out, stop = sys.argv[1:6]
spark = hive_session("cdc-reader", warehouse, uri)
with open(out, "a") as lines:
    while not os.path.exists(stop):
        for table in tables.split(","):
            try:
                spark.sql(f"REFRESH TABLE {table}")  # a reader that wants the newest version asks for it
                count, low, high, files = spark.sql(
                    "SELECT count(*), min(round), max(round), collect_set(version) FROM (SELECT round, "
                    f"regexp_extract(input_file_name(), '/(v[0-9]+)/', 1) AS version FROM {table})").first()
                lines.write(json.dumps({"table": table, "rows": count, "low": low, "high": high,
                                        "versions": sorted(files), "at": time.time()}) + "\\n")
            except Exception as exc:
                lines.write(json.dumps({"table": table, "error": f"{type(exc).__name__}: {exc}"[:3000]}) + "\\n")
            lines.flush()
        time.sleep(0.2)
'''


@pytest.mark.usefixtures("airflow_home")
def test_a_reader_through_the_metastore_sees_one_version_or_the_next_never_a_mix(
        mariadb, capture_conn, tmp_path, metastore_service):
    (tmp_path / "r").mkdir()
    # stamps as one version directory; pstamps partitioned in six ranges of its key, all rewritten by each run
    # and switched in one metastore call.
    pipeline = Pipeline(mariadb, capture_conn, tmp_path / "r", ["stamps", "pstamps"])
    pipeline.config["tables"][1]["partition_by"] = "truncate(id, 500)"
    pipeline.configure(hive={"database": "ods_r", "warehouse_dir": str(metastore_service.warehouse_dir),
                             "metastore_uri": metastore_service.uri})
    # The work directory as a file:// URI, as a shared disk is named. Versions are kept longer than the test
    # lasts: a reader slower than keep_versions merges would lose its files, which is retention, not a mix.
    pipeline.config.update(work_dir=(tmp_path / "r" / "work").as_uri(), keep_versions=10)
    pipeline.configure()
    # Every run changes every row: a read that mixed two versions would see two rounds, or another count.
    for table in pipeline.tables:
        pipeline.sql(f"CREATE TABLE {{s}}.{table} (id INT PRIMARY KEY, round INT NOT NULL, pad VARCHAR(40))",
                     f"INSERT INTO {{s}}.{table} SELECT seq - 1, 0, REPEAT('x', 40) FROM {{s}}.seq_1_to_3000")
    code, output = pipeline.run("2026-08-01T00:00:00+00:00")
    assert code == 0, output[-8000:]

    reader_file, results, stop = tmp_path / "reader.py", tmp_path / "reads.jsonl", tmp_path / "stop"
    reader_file.write_text(READER)
    reader = subprocess.Popen(
        spark_submit_command(str(reader_file), str(metastore_service.warehouse_dir), metastore_service.uri,
                             "ods_r.stamps,ods_r.pstamps", str(results), str(stop), work_dir=str(tmp_path),
                             master="local[1]"),
        env=spark_env(), cwd=tmp_path, stdout=open(tmp_path / "reader.log", "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and (not results.exists() or not results.read_text().strip()):
            assert reader.poll() is None, (tmp_path / "reader.log").read_text()[-5000:]
            time.sleep(1)
        for hour in ("01", "02", "03"):
            pipeline.sql("UPDATE {s}.stamps SET round = round + 1", "UPDATE {s}.pstamps SET round = round + 1")
            code, output = pipeline.run(f"2026-08-01T{hour}:00:00+00:00")
            assert code == 0, output[-8000:]
        # Until the reader has read the last version too (instead of a fixed wait).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(
                f'"table": "ods_r.{t}", "rows": 3000, "low": 3, "high": 3' in results.read_text()
                for t in pipeline.tables):
            assert reader.poll() is None, (tmp_path / "reader.log").read_text()[-5000:]
            time.sleep(0.2)
    finally:
        stop.touch()
        reader.wait(timeout=120)
    output = (tmp_path / "reader.log").read_text()
    reads = [json.loads(line) for line in results.read_text().splitlines()]
    errors = [r for r in reads if "error" in r]
    assert not errors, errors[:3]
    # One round in every read: a mix of two versions would show two (a partitioned read, two version
    # directories too), or another count.
    mixed = [r for r in reads if r["rows"] != 3000 or r["low"] != r["high"] or len(r["versions"]) != 1]
    assert not mixed, mixed[:3]
    for table in pipeline.tables:
        seen = sorted({r["low"] for r in reads if r["table"] == f"ods_r.{table}"})
        assert seen[0] <= 1 and seen[-1] == 3 and len(seen) >= 3, f"the reader saw too few versions of {table} " \
            f"change: {seen}\n{reads}\n{output[-3000:]}"
    pipeline.assert_all_equal()
    committed = pipeline.outcome("pstamps")
    assert (committed["partitions"], committed["rewritten_partitions"], committed["emptied_partitions"]) == (6, 6, 0)
