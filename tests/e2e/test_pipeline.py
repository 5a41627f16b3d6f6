"""The example DAG end to end: real `airflow dags test` runs, a real MariaDB, real Spark, a real metastore.

After every run the Hive table equals the source, row for row and value for value.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from airflow_cdc_testing.cluster import MetastoreService
from airflow_cdc_testing.hive import read_hive_tables

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import Ledger, RunRef
from airflow_cdc_provider.core.partitioning import PartitionSpec
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.storage import WorkStore
from tests.conftest import ROOT
from tests.e2e.dag_run import run_dag
from tests.e2e.test_example_dag import asset_events, latest_xcoms, outcomes
from tests.integration.capture_helpers import compressed_binlog, source_rows
from tests.integration.hive_helpers import hive_rows, plain

DAG_ID = "mysql_binlog_to_hive"
SCHEMA_DDL = [
    "CREATE TABLE {s}.customers (id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, email VARCHAR(190) NOT NULL,"
    " name VARCHAR(100) NOT NULL, city VARCHAR(100) NULL, created_at DATETIME(3) NOT NULL, UNIQUE KEY (email))",
    "CREATE TABLE {s}.orders (order_no BIGINT NOT NULL, line_no SMALLINT NOT NULL, customer_id INT UNSIGNED NOT NULL,"
    " amount DECIMAL(12,2) NOT NULL, note TEXT NULL, updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
    " ON UPDATE CURRENT_TIMESTAMP(6), PRIMARY KEY (order_no, line_no))",
    "INSERT INTO {s}.customers (email, name, city, created_at) VALUES ('ada@example.com', 'Ada', 'London',"
    " '2026-01-02 03:04:05.678'), ('alan@example.com', 'Alan', NULL, '2026-01-03 00:00:00')",
    "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount, note) VALUES (1001, 1, 1, 19.99, 'first'),"
    " (1001, 2, 1, 5.00, 'gift \"wrap\"'), (1002, 1, 2, 120.50, NULL), (1003, 1, 2, 7.25, 'line one\\nline two')",
]


class Pipeline:
    """The example DAG on its own schema, warehouse and work directory; runs it and reads Hive back."""

    def __init__(self, server, conn_id: str, tmp_path: Path, tables: list[str], retries: int = 0,
                 metastore: MetastoreService | None = None):
        self.server, self.conn_id, self.tmp = server, conn_id, tmp_path
        suffix = os.urandom(3).hex()
        self.schema = f"e2e_{suffix}"
        server.execute(f"CREATE DATABASE {self.schema}", *(s.format(s=self.schema) for s in SCHEMA_DDL))
        self.tables = tables
        # The embedded metastore (Derby in the warehouse, one per test), or the worker's metastore service, shared
        # by the tests that name it: then a database of the test's own. A Spark application on the service starts
        # in about 4 s of CPU less than one that opens an embedded metastore (tests/conftest.py, metastore_service).
        self.database = f"ods_{suffix}" if metastore else "ods"
        self.config = {
            "mysql_conn_id": conn_id, "spark_conn_id": "spark_e2e", "work_dir": str(tmp_path / "work"),
            "hive": {"database": self.database, "warehouse_dir": str(tmp_path / "warehouse"),
                     "metastore_uri": metastore.uri if metastore else None},
            "tables": [{"source": f"{self.schema}.{t}", "target": t} for t in tables], "retries": retries,
            # The rolling verify (on by default) starts a Spark application in every run: left to the tests that
            # are about it (test_verify, and test_example_dag's runs of the example configuration as it ships).
            "verify": {"slices": 0},
        }
        self.config_path = tmp_path / "cdc.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config))
        self.env = {**os.environ, "CDC_CONFIG": str(self.config_path),
                    "AIRFLOW_CONN_SPARK_E2E": json.dumps({"conn_type": "spark", "host": "local[2]"})}
        self.hook = MySqlSourceHook(conn_id)

    def configure(self, hive: dict | None = None, spark: dict | None = None) -> None:
        """Change the Hive settings and the Spark connection of the runs to come."""
        self.config["hive"].update(hive or {})
        self.config_path.write_text(yaml.safe_dump(self.config))
        if spark:
            self.env["AIRFLOW_CONN_SPARK_E2E"] = json.dumps({"conn_type": "spark", **spark})

    def command(self, logical_date: str, *conf: str) -> list[str]:
        return [sys.executable, "-m", "tests.e2e.dag_run", DAG_ID, logical_date, *conf]

    def run(self, logical_date: str, *conf: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        return run_dag(DAG_ID, logical_date, *conf, env={**self.env, **(env or {})}, cwd=ROOT)

    def start(self, logical_date: str, new_session: bool = False) -> subprocess.Popen:
        """The run in the background. ``new_session``: in a process group of its own, so that one killpg reaches
        whatever it has started by then, a spark-submit begun a moment before included (a lost machine)."""
        return subprocess.Popen(self.command(logical_date), env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=new_session)

    def source(self, table: str) -> dict:
        return plain(source_rows(self.server, self.hook.raw_header(TableName(self.schema, table))))

    def hive(self, table: str) -> tuple[dict, str]:
        return self.hive_tables([table])[table]

    def hive_tables(self, tables: list[str] | None = None) -> dict[str, tuple[dict, str]]:
        """Each table (the pipeline's, by default) as Hive holds it, with its location: one Spark read for all."""
        hive, tables = self.config["hive"], list(tables or self.tables)
        names = {t: f"{hive['database']}.{t}" for t in tables}
        read = read_hive_tables(hive["warehouse_dir"], hive["metastore_uri"], list(names.values()))
        found = {}
        for table, name in names.items():
            rows, location = read[name]
            header = self.hook.raw_header(TableName(self.schema, table))
            spec = next((e.get("partition_by") for e in self.config["tables"] if e["target"] == table), None)
            if spec:  # the partition column is the table's, not the source's
                rows = rows.drop_columns([PartitionSpec.parse(spec).resolve(header.columns).column])
            found[table] = hive_rows(rows, header.key), location
        return found

    def hive_types(self, tables: list[str]) -> dict[str, dict[str, str]]:
        """Each table's columns as Hive types them, read back: by name, the Arrow type a Spark read gives."""
        hive = self.config["hive"]
        read = read_hive_tables(hive["warehouse_dir"], hive["metastore_uri"], [f"{hive['database']}.{t}" for t in tables])
        return {table: {field.name: str(field.type) for field in read[f"{hive['database']}.{table}"][0].schema}
                for table in tables}

    def warehouse_files(self) -> dict[str, tuple[int, int]]:
        """Every file of the warehouse, the embedded metastore's Derby in it included, with its size and time of last
        change: equal before and after a run, Hive is as it was, known without a Spark read of it."""
        root = Path(self.config["hive"]["warehouse_dir"])
        return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
                if p.is_file()}

    def ledger(self, table: str) -> Ledger:
        return Ledger(TableDir(work_dir=str(self.tmp / "work"), hive_table=f"{self.database}.{table}"), WorkStore())

    def assert_equal(self, table: str) -> tuple[dict, str]:
        return self.assert_all_equal([table])[table]

    def assert_all_equal(self, tables: list[str] | None = None) -> dict[str, tuple[dict, str]]:
        """Each table (the pipeline's, by default) equals its source; read from Hive in one Spark application."""
        found = self.hive_tables(tables)
        for table, (hive, _) in found.items():
            assert hive == self.source(table), f"{self.database}.{table} differs from {self.schema}.{table}"
        return found

    def sql(self, *statements: str) -> None:
        self.server.execute(*(s.format(s=self.schema) for s in statements))

    def outcome(self, table: str) -> dict:
        """The latest run's outcome for ``table``."""
        return outcomes(DAG_ID)[f"{self.schema}.{table}"]

    def extraction(self, table: str, xcoms: dict | None = None) -> dict:
        """The latest run's extraction of ``table``."""
        parts = (xcoms or latest_xcoms(DAG_ID))["source.extract"]["tables"]
        return next(p for p in parts if p["source"] == f"{self.schema}.{table}")


ROUNDS = [
    [  # inserts, updates, a delete
        "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount, note) VALUES (1004, 1, 1, 3.10, 'new'),"
        " (1004, 2, 1, 4.20, NULL)",
        "UPDATE {s}.orders SET amount = amount + 1, note = CONCAT(IFNULL(note, ''), ' ✓') WHERE order_no = 1001",
        "DELETE FROM {s}.orders WHERE order_no = 1002",
        "INSERT INTO {s}.customers (email, name, city, created_at) VALUES ('grace@example.com', 'Grace', 'NYC', NOW(3))",
        "UPDATE {s}.customers SET city = 'Manchester' WHERE id = 2",
    ],
    [  # key changes, and a delete followed by a re-insert of the same key
        "UPDATE {s}.orders SET line_no = 9 WHERE order_no = 1004 AND line_no = 2",
        "UPDATE {s}.orders SET order_no = 2001 WHERE order_no = 1003",
        "DELETE FROM {s}.orders WHERE order_no = 1001 AND line_no = 1",
        "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount, note) VALUES (1001, 1, 2, 99.99, 'again')",
        "UPDATE {s}.customers SET id = 10 WHERE id = 1",
        "DELETE FROM {s}.customers WHERE email = 'alan@example.com'",
        "INSERT INTO {s}.customers (id, email, name, city, created_at) VALUES (2, 'alan@example.com', 'Alan T',"
        " 'Wilmslow', '2026-02-03 04:05:06.007')",
    ],
    [  # many rows in one transaction, then most of them gone again, and a row changed twice
        "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount, note) SELECT 5000 + seq, 1, 2, seq / 100,"
        " CONCAT('bulk ', seq) FROM {s}.seq_1_to_500",
        "DELETE FROM {s}.orders WHERE order_no > 5010 AND order_no < 5400",
        "UPDATE {s}.orders SET note = 'first change' WHERE order_no = 2001",
        "UPDATE {s}.orders SET note = 'second change' WHERE order_no = 2001",
        "DELETE FROM {s}.customers WHERE id = 10",
    ],
]


@pytest.mark.usefixtures("airflow_home")
def test_initial_load_then_runs_keep_hive_equal_to_the_source_a_rerun_repeats_and_reloads_recover(
        mariadb, capture_conn, tmp_path):
    from tests.integration.test_source_hook import purge_binlogs_to

    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders", "customers"])
    # Spark settings of the configuration reach the merge application: its own, and one table's over it.
    pipeline.config["spark"] = {"merge_conf": {"spark.sql.shuffle.partitions": 3}}
    pipeline.config["tables"][0]["spark_conf"] = {"spark.sql.shuffle.partitions": 2}
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    # A Spark configuration directory holding a file, as most installations have: on the driver's class path, where
    # a JVM writing a class-data archive refuses to start. The merge starts without one, and says why.
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.ui.showConsoleProgress false\n")
    code, output = pipeline.run("2026-03-01T00:00:00+00:00", env={"SPARK_CONF_DIR": str(conf_dir)})
    assert code == 0, output[-8000:]
    assert f"no class-data archive: the driver's class path has the directory {conf_dir}, which holds" in output
    assert "--conf spark.sql.shuffle.partitions=3" in output
    assert "cdc-merge: ods.orders with spark.sql.shuffle.partitions=2 (the application's: 3)" in output
    first = pipeline.outcome("orders")
    assert (first["status"], first["version"], first["mode"]) == ("committed", 1, "snapshot")
    pipeline.assert_all_equal()

    for n, statements in enumerate(ROUNDS, start=1):
        # From the second round on, the binlog is compressed (log_bin_compress): the same runs, the same tables.
        with compressed_binlog(mariadb) if n > 1 else contextlib.nullcontext():
            pipeline.sql(*statements)
        code, output = pipeline.run(f"2026-03-01T0{n}:00:00+00:00")
        assert code == 0, output[-8000:]
        outcome = pipeline.outcome("orders")
        assert (outcome["version"], outcome["mode"]) == (n + 1, "incremental")
        pipeline.assert_all_equal()
        if n == 1:  # the run's summary: a line per table, in the log and as the last task's XCom
            summary = latest_xcoms(DAG_ID)["source.summary"]
            line = summary[f"{pipeline.schema}.orders"]
            assert line.startswith(f"{pipeline.schema}.orders → ods.orders: committed incremental ")
            assert ", +2 ~2 -1, version 2, lag " in line and " merge " in line and "extract " in line, line
            assert line in output
            # Each commit announced on the Hive table's asset (other tests' runs write ods.orders too).
            events = [e for e in asset_events("hive://embedded/ods/orders")
                      if e["source"] == f"{pipeline.schema}.orders"]
            assert [e["version"] for e in events] == [1, 2] and events[-1]["task_id"] == "source.table"
            assert (events[-1]["inserted"], events[-1]["updated"], events[-1]["deleted"]) == (2, 2, 1)
            assert events[-1]["as_of"] and events[-1]["watermark"]["file"]
    password = json.loads(os.environ[f"AIRFLOW_CONN_{capture_conn.upper()}"])["password"]
    assert password not in output

    # Clearing and re-running the last run, which committed: it leaves the table as that run made it; changes
    # made since are left for the next run.
    warehouse = pipeline.warehouse_files()
    pipeline.sql("UPDATE {s}.orders SET amount = 0 WHERE order_no = 2001")
    code, output = pipeline.run(f"2026-03-01T0{len(ROUNDS)}:00:00+00:00")
    assert code == 0, output[-8000:]
    assert "already committed by this run: version 4" in output
    assert pipeline.outcome("orders")["status"] == "nothing"
    assert pipeline.warehouse_files() == warehouse
    code, output = pipeline.run("2026-03-01T09:00:00+00:00")
    assert code == 0, output[-8000:]
    _, location = pipeline.assert_equal("orders")

    # Old versions are removed after keep_versions (3) runs.
    versions = sorted(p.name for p in (tmp_path / "warehouse" / "ods.db" / "orders").iterdir())
    assert len(versions) == 3 and versions[-1] == Path(location).name

    # The fresh_snapshot_tables parameter reloads the tables it names: all of their rows, as a new version; the
    # others go on from the binlog in the same run.
    pipeline.sql("INSERT INTO {s}.customers (email, name, city, created_at) VALUES ('joan@example.com', 'Joan',"
                 " 'Leeds', NOW(3))", "UPDATE {s}.customers SET city = 'Bath' WHERE id = 2",
                 "UPDATE {s}.orders SET amount = amount + 2 WHERE order_no = 2001")
    version = pipeline.ledger("customers").committed().version
    code, output = pipeline.run("2026-03-01T10:00:00+00:00",
                                json.dumps({"fresh_snapshot_tables": [f"{pipeline.schema}.customers"]}))
    assert code == 0, output[-8000:]
    outcome = pipeline.outcome("customers")
    assert (outcome["mode"], outcome["upserts"], outcome["version"]) == (
        "snapshot", len(pipeline.source("customers")), version + 1)
    assert pipeline.outcome("orders")["mode"] == "incremental"
    pipeline.assert_all_equal()

    # A purged binlog. With `on_purged_binlog: fail` each table fails naming the missing file, the retention and the
    # way on; nothing changes.
    pipeline.config["on_purged_binlog"] = "fail"
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    pipeline.sql("INSERT INTO {s}.orders (order_no, line_no, customer_id, amount) VALUES (6001, 1, 2, 6.00)",
                 "UPDATE {s}.orders SET amount = amount + 1 WHERE order_no = 2001",
                 "DELETE FROM {s}.orders WHERE order_no = 1001 AND line_no = 2",
                 "UPDATE {s}.customers SET city = 'Wells' WHERE id = 2")
    mariadb.execute("FLUSH BINARY LOGS")
    purge_binlogs_to(mariadb, pipeline.hook.current_watermark().file)
    version, warehouse = pipeline.ledger("orders").committed().version, pipeline.warehouse_files()
    code, output = pipeline.run("2026-03-01T11:00:00+00:00")
    assert code != 0
    watermark = pipeline.ledger("orders").committed().watermark
    for part in (f"The binlog file {watermark.file}", "is no longer on the server", "retention setting is",
                 "fresh_snapshot=true", "on_purged_binlog: heal"):
        assert part in output, (part, output[-6000:])
    assert pipeline.warehouse_files() == warehouse and pipeline.ledger("orders").committed().version == version

    # By default (`on_purged_binlog: heal`) the same kind of run brings each such table level by a diff against its
    # version, says so, and the binlog goes on from the diff's moment: the next run reads it from there.
    del pipeline.config["on_purged_binlog"]
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    pipeline.sql("UPDATE {s}.orders SET note = 'before the heal' WHERE order_no = 2001")
    code, output = pipeline.run("2026-03-01T12:00:00+00:00")
    assert code == 0, output[-8000:]
    for table in ("orders", "customers"):
        outcome = pipeline.outcome(table)
        assert (outcome["mode"], outcome["status"]) == ("heal", "committed"), outcome
        healed = outcome["healed"]
        assert "is no longer on the server" in healed["why"] and healed["bytes_sent"] > 0, outcome
        assert f"healed by a diff ({healed['upserts']} rows read" in output, output[-6000:]
    orders = pipeline.outcome("orders")
    # What changed since version: an insert, an update (twice, one row), a delete. A row re-read, not every row.
    assert (orders["healed"]["upserts"], orders["healed"]["deletes"]) == (2, 1), orders
    pipeline.assert_all_equal()
    pipeline.sql("UPDATE {s}.orders SET note = 'after the heal' WHERE order_no = 2001")
    code, output = pipeline.run("2026-03-01T13:00:00+00:00")
    assert code == 0, output[-8000:]
    assert [pipeline.outcome(t)["mode"] for t in ("orders", "customers")] == ["incremental", "incremental"]
    assert pipeline.outcome("orders")["changes"] == {"I": 0, "U": 1, "D": 0}, pipeline.outcome("orders")
    pipeline.assert_all_equal()


def _group(pgid: int) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if os.getpgid(process.pid) == pgid:
                found.append(process)
    return found


@pytest.mark.usefixtures("airflow_home")
def test_a_concurrent_run_is_refused_and_a_killed_runs_lock_is_taken_over_at_once_on_its_host(
        mysql, make_user, tmp_path):
    # On MySQL: what a kill leaves does not depend on the server, and the main test above runs on MariaDB.
    pipeline = Pipeline(mysql, make_user(server=mysql), tmp_path, ["orders"])
    assert pipeline.run("2026-06-01T00:00:00+00:00")[0] == 0
    pipeline.sql(*ROUNDS[0][:3])

    # A second run of the table while a first one is in its merge is refused, and changes nothing.
    first = pipeline.start("2026-06-01T01:00:00+00:00")
    holder = RunRef(DAG_ID, "manual__2026-06-01T01:00:00+00:00")
    runs_dir = tmp_path / "work" / "ods.orders" / "runs"
    merging = runs_dir / holder.key / "merge-job-1.json"  # the first run is in its merge
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and first.poll() is None and not merging.exists():
        time.sleep(0.05)
    assert first.poll() is None, first.stdout.read()[-8000:]
    assert pipeline.ledger("orders").holder() == holder
    run_dirs = sorted(p.name for p in runs_dir.iterdir())
    ledger_files = sorted(p.name for p in (runs_dir.parent / "ledger" / "runs").iterdir())

    code, output = pipeline.run("2026-06-01T02:00:00+00:00")
    assert code != 0
    assert "The table is being updated by run 'manual__2026-06-01T01:00:00+00:00'" in output
    assert "this run changed nothing" in output
    assert sorted(p.name for p in runs_dir.iterdir()) == run_dirs
    assert sorted(p.name for p in (runs_dir.parent / "ledger" / "runs").iterdir()) == ledger_files
    assert pipeline.ledger("orders").holder() == holder

    output, _ = first.communicate(timeout=600)
    assert first.returncode == 0, output[-8000:]
    pipeline.assert_equal("orders")
    assert pipeline.ledger("orders").holder() is None
    pipeline.sql(*ROUNDS[1][:4])

    # Killed in its merge, as a lost worker would be: its DAG run stays "running" in Airflow for good.
    dead = pipeline.start("2026-06-01T03:00:00+00:00", new_session=True)
    holder = RunRef(DAG_ID, "manual__2026-06-01T03:00:00+00:00")
    merging = runs_dir / holder.key / "merge-job-1.json"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and dead.poll() is None and not merging.exists():
        time.sleep(0.05)
    assert dead.poll() is None, dead.stdout.read()[-8000:]
    # The whole group: a spark-submit the merge started after the job file was written dies with it. One left
    # running would rightly keep the lock alive (its merge may still commit).
    os.killpg(dead.pid, signal.SIGKILL)
    dead.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(p.status() != psutil.STATUS_ZOMBIE for p in _group(dead.pid)):
        time.sleep(0.1)
    lock = pipeline.ledger("orders").lock()
    assert lock.run == holder and lock.lease_until is not None and lock.owner.task.startswith("source.merge")

    # Its process is gone, and the lock says it was on this host: the next run takes the lock over at once, long
    # before its lease ends, and says why. (A live holder, or one on another host, is refused: test_lease.)
    code, output = pipeline.run("2026-06-01T04:00:00+00:00")
    assert code == 0, output[-8000:]
    owner = lock.owner
    assert (f"Took over the lock left by {holder}: its process {owner.pid} on {owner.host} (task {owner.task}) is "
            "gone: no process has that id") in output, output[-8000:]
    assert dt.datetime.now(dt.UTC) < lock.lease_until
    pipeline.assert_equal("orders")
    assert pipeline.ledger("orders").holder() is None
