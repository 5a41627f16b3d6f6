"""Faults of the source and of the runs: a failover to a replica, lost transactions, a server restarted, kills.

Real `airflow dags test` runs of the example DAG against real MariaDB servers (a primary and a replica with
GTID replication where the point is a failover), real Spark, the embedded metastore.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.testing.server import ThrowawayServer
from tests.conftest import conn_env
from tests.e2e.test_pipeline import Pipeline
from tests.e2e.writers import Writers


def replicate(replica: ThrowawayServer, primary: ThrowawayServer) -> None:
    """Make ``replica`` follow ``primary`` by GTID from where its own binlog stands, as a DBA does."""
    replica.execute("STOP SLAVE", "SET GLOBAL gtid_slave_pos = @@GLOBAL.gtid_binlog_pos",
                    f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, MASTER_USER='repl', "
                    "MASTER_PASSWORD='repl-pw', MASTER_USE_GTID=slave_pos", "START SLAVE")


def caught_up(replica: ThrowawayServer, primary: ThrowawayServer) -> None:
    position = primary.execute("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    assert replica.execute(f"SELECT MASTER_GTID_WAIT('{position}', 60)")[0][0] == 0, "the replica did not catch up"


def promote(replica: ThrowawayServer) -> None:
    replica.execute("STOP SLAVE", "RESET SLAVE ALL")


def point_at(pipeline: Pipeline, server: ThrowawayServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the capture connection at ``server``, as a DBA moves a DNS name or a virtual IP."""
    settings = {**json.loads(pipeline.env[conn_env(pipeline.conn_id)]), "port": server.port}
    monkeypatch.setenv(conn_env(pipeline.conn_id), json.dumps(settings))
    pipeline.env[conn_env(pipeline.conn_id)] = json.dumps(settings)
    pipeline.server, pipeline.hook = server, MySqlSourceHook(pipeline.conn_id)


@pytest.mark.usefixtures("airflow_home")
def test_a_failover_to_a_replica_is_followed_by_gtid_and_lost_transactions_are_refused(
        tmp_path, make_user, monkeypatch):
    primary = ThrowawayServer.start(tmp_path / "primary", {"server_id": 11})
    replica = ThrowawayServer.start(tmp_path / "replica", {"server_id": 12, "log_slave_updates": True})
    try:
        primary.execute("CREATE USER 'repl'@'%' IDENTIFIED BY 'repl-pw'", "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'")
        replicate(replica, primary)
        conn_id = make_user(server=primary)  # the capture user reaches the replica by replication
        pipeline = Pipeline(primary, conn_id, tmp_path, ["orders", "customers"])
        with Writers(primary, pipeline.schema, threads=2, pause=0.005) as writers:
            # Runs capture from the primary while the application writes.
            writers.wait_for(50)
            for hour in (0, 1):
                code, output = pipeline.run(f"2026-11-01T0{hour}:00:00+00:00")
                assert code == 0, output[-8000:]
            committed = pipeline.ledger("orders").committed().watermark
            assert committed.server_id == 11 and committed.gtid

            # A switchover: writes held, the replica caught up, the primary stopped, the replica promoted and the
            # connection pointed at it. The writes go on there.
            writers.hold()
            caught_up(replica, primary)
            primary.stop()
            promote(replica)
            point_at(pipeline, replica, monkeypatch)
            writers.resume(replica)
            writers.wait_for(writers.commits + 50)

            # A file and position alone mean nothing here: a watermark without a GTID is refused, naming both
            # servers and the way on.
            kind, message = pipeline.hook.read_positions([replace(committed, gtid=None)])[0]
            assert kind == "server"
            for part in ("taken on server id 11", "this server is id 12", "no GTID position", "fresh_snapshot=true",
                         "on_server_change: snapshot"):
                assert part in message, (part, message)

            # The next run reads the new primary's binlog from the GTID position of the old one's watermark.
            code, output = pipeline.run("2026-11-01T02:00:00+00:00")
            assert code == 0, output[-8000:]
            assert "was taken on another server (server id 11); its GTID position is at" in output, output[-8000:]
            assert pipeline.ledger("orders").committed().watermark.server_id == 12

            # The old primary comes back as a replica of the new one, and falls behind (its replication stops).
            primary.settings["log_slave_updates"] = True
            primary.restart()
            replicate(primary, replica)
            writers.hold()
            caught_up(primary, replica)
            primary.execute("STOP SLAVE")
            writers.resume(replica)
            writers.wait_for(writers.commits + 50)
        # After the writers stop, one more run brings Hive level with the source: no change was lost.
        code, output = pipeline.run("2026-11-01T03:00:00+00:00")
        assert code == 0, output[-8000:]
        for table in pipeline.tables:
            pipeline.assert_equal(table)
            assert pipeline.ledger(table).holder() is None
        level, _ = pipeline.hive("orders")
        version = pipeline.ledger("orders").committed().version

        # The new primary dies; the old one, behind it, is promoted. Hive holds changes it never had: the run is
        # refused, naming what is missing, and changes nothing.
        replica.stop()
        promote(primary)
        point_at(pipeline, primary, monkeypatch)
        pipeline.sql("INSERT INTO {s}.orders (order_no, line_no, customer_id, amount) VALUES (7, 1, 1, 7.00)")
        code, output = pipeline.run("2026-11-01T04:00:00+00:00")
        assert code != 0
        for part in ("this server is id 11", "This server has not got the transactions 0-12-",
                     "they were lost when it took over", "on_server_change: snapshot"):
            assert part in output, (part, output[-8000:])
        assert pipeline.hive("orders")[0] == level and pipeline.ledger("orders").committed().version == version

        # Asked for, such a run takes a fresh snapshot instead, and says so.
        pipeline.config["on_server_change"] = "snapshot"
        pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
        code, output = pipeline.run("2026-11-01T05:00:00+00:00")
        assert code == 0, output[-8000:]
        assert "this run takes a fresh snapshot (on_server_change: snapshot)" in output
        for table in pipeline.tables:
            outcome = pipeline.outcome(table)
            assert (outcome["mode"], outcome["status"]) == ("snapshot", "committed"), outcome
            assert any("lost when it took over" in w for w in outcome["warnings"]), outcome
            pipeline.assert_equal(table)
    finally:
        primary.stop()
        replica.stop()


# Each place a run can be killed (``airflow_cdc_provider.failpoints``), in the order a run passes them, with
# what the killed run had already made visible in Hive.
KILLS = [
    ("plan.locked", "nothing"),
    ("snapshot.chunk", "nothing"),
    ("extract.file", "nothing"),
    ("replay.write", "nothing"),
    ("merge.driver.written", "nothing"),
    ("merge.driver.switched", "the new version, without the added column"),
    ("merge.task.committed", "the new version"),
    ("table.finish", "the new version"),
]


def _changes(cell: int) -> list[str]:
    """A cell's source changes: inserts, an update, a key change, a delete of an earlier cell's row."""
    n = 3000 + 10 * cell
    return [
        "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount, note) VALUES "
        f"({n}, 1, 1, {cell}.50, 'cell {cell}'), ({n}, 2, 2, 1.00, NULL)",
        "UPDATE {s}.orders SET amount = amount + 1 WHERE order_no = 1001",
        f"UPDATE {{s}}.orders SET line_no = 3 WHERE order_no = {n} AND line_no = 2",
        f"DELETE FROM {{s}}.orders WHERE order_no = {n - 10} AND line_no = 1",
        f"UPDATE {{s}}.customers SET city = 'cell {cell}' WHERE id = 1",
    ]


@pytest.mark.usefixtures("airflow_home")
def test_a_run_killed_at_each_step_loses_nothing_and_its_rerun_completes(mariadb, capture_conn, tmp_path):
    from airflow_cdc_provider.core.merge import parse_version_dir

    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders", "customers"])
    assert pipeline.run("2026-11-02T00:00:00+00:00")[0] == 0
    results = {}
    for cell, (point, visible) in enumerate(KILLS, start=1):
        pipeline.sql(*_changes(cell))
        if point == "merge.driver.switched":  # the run adds a column: the kill falls before ADD COLUMNS
            pipeline.sql("ALTER TABLE {s}.orders ADD COLUMN channel VARCHAR(20) NULL",
                         f"UPDATE {{s}}.orders SET channel = 'web' WHERE order_no = {3000 + 10 * cell}")
        conf = ['{"fresh_snapshot": true}'] if point == "snapshot.chunk" else []
        date = f"2026-11-02T{cell:02d}:00:00+00:00"
        before = {table: pipeline.hive(table)[0] for table in pipeline.tables}
        code, output = pipeline.run(date, *conf, env={"CDC_FAILPOINT": point})
        assert code != 0 and f"failpoint {point}: killing process" in output, (point, output[-8000:])
        after = {table: pipeline.hive(table)[0] for table in pipeline.tables}
        if visible == "nothing":
            assert after == before, f"{point}: the killed run changed Hive"
        else:
            assert after != before, f"{point}: the killed run had committed, yet Hive is as it was"

        # The run again (a clear in the UI; under a scheduler, the task's retry does the same) completes.
        code, output = pipeline.run(date, *conf)
        assert code == 0, (point, output[-8000:])
        for table in pipeline.tables:
            pipeline.assert_equal(table)
            assert pipeline.ledger(table).holder() is None, point
        results[point] = "the re-run completed; Hive equals the source; no lock held"

    # Nothing piles up: each table keeps its newest run directories and Hive versions, complete or not.
    hive, _ = pipeline.hive("orders")
    assert any(row.get("channel") == "web" for row in hive.values())
    for table in pipeline.tables:
        runs = tmp_path / "work" / f"ods.{table}" / "runs"
        assert len(list(runs.iterdir())) <= 3, sorted(p.name for p in runs.iterdir())
        _, location = pipeline.hive(table)
        root = Path(location.removeprefix("file:")).parent
        versions = [p.name for p in root.iterdir() if parse_version_dir(p.name) is not None]
        assert len(versions) <= 3, versions
    print(json.dumps(results, indent=1))
