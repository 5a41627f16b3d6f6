"""Faults of the source and of the runs: a failover to a replica, lost transactions, a server restarted, kills.

Real `airflow dags test` runs of the example DAG against real MariaDB servers (a primary and a replica with
GTID replication where the point is a failover), real Spark, the embedded metastore.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from airflow_cdc_testing.server import ThrowawayServer

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.resume import UnreadableKind, read_position
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from tests.conftest import conn_env
from tests.e2e.test_pipeline import DAG_ID, Pipeline
from tests.e2e.writers import Writers
from tests.servers import start_server


def replicate(replica: ThrowawayServer, primary: ThrowawayServer) -> None:
    """Make ``replica`` follow ``primary`` by GTID from where its own binlog stands, as a DBA does."""
    replica.execute("STOP SLAVE", "SET GLOBAL gtid_slave_pos = @@GLOBAL.gtid_binlog_pos",
                    f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, MASTER_USER='repl', "
                    "MASTER_PASSWORD='repl-pw', MASTER_USE_GTID=slave_pos", "START SLAVE")


def caught_up(replica: ThrowawayServer, primary: ThrowawayServer) -> None:
    position = primary.execute("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    assert replica.execute(f"SELECT MASTER_GTID_WAIT('{position}', 300)")[0][0] == 0, "the replica did not catch up"


def promote(replica: ThrowawayServer) -> None:
    replica.execute("STOP SLAVE", "RESET SLAVE ALL")


def point_at(pipeline: Pipeline, server: ThrowawayServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the capture connection at ``server``, as a DBA moves a DNS name or a virtual IP."""
    settings = {**json.loads(pipeline.env[conn_env(pipeline.conn_id)]), "port": server.port}
    monkeypatch.setenv(conn_env(pipeline.conn_id), json.dumps(settings))
    pipeline.env[conn_env(pipeline.conn_id)] = json.dumps(settings)
    pipeline.server, pipeline.hook = server, MySqlSourceHook(pipeline.conn_id)


def _task_windows(dag_id: str) -> dict[str, tuple[float, float]]:
    """The latest run's tasks: (start, end) as epoch seconds, by task id."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).first()
        return {ti.task_id: (ti.start_date.timestamp(), ti.end_date.timestamp())
                for ti in session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id,
                                                             TaskInstance.run_id == run.run_id)
                if ti.start_date and ti.end_date and ti.map_index < 1}


@pytest.mark.usefixtures("airflow_home")
def test_under_four_writers_a_failover_is_followed_by_gtid_and_lost_transactions_are_refused(
        tmp_path, make_user, monkeypatch):
    primary = start_server(tmp_path / "primary", {"server_id": 11})
    replica = start_server(tmp_path / "replica", {"server_id": 12, "log_slave_updates": True})
    try:
        primary.execute("CREATE USER 'repl'@'%' IDENTIFIED BY 'repl-pw'", "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'")
        replicate(replica, primary)
        conn_id = make_user(server=primary)  # the capture user reaches the replica by replication
        pipeline = Pipeline(primary, conn_id, tmp_path, ["orders", "customers"])
        pipeline.sql("INSERT INTO {s}.orders (order_no, line_no, customer_id, amount, note) SELECT seq, 1, 1, "
                     "seq / 100, CONCAT('preloaded ', seq) FROM {s}.seq_100000_to_140000")
        user = json.loads(pipeline.env[conn_env(conn_id)])["login"]
        primary.track_binlog_dumps()
        load: dict = {}
        with Writers(primary, pipeline.schema, threads=4, pause=0.02) as writers:
            # Runs capture from the primary while four threads write (up to two hundred commits a second: the
            # pause holds them there, so that the suite's CPU goes to the runs, the failover and the checks rather
            # than to the load). What the capture costs the source is reported: the writers' rate alone and during
            # the snapshot and the extraction, and the bytes the server sent the capture user.
            alone_from = time.time()
            time.sleep(2)  # a hundred commits a second and more: enough for a rate
            load["writers_alone_per_s"] = round(writers.rate(alone_from, time.time()))
            for hour, task in ((0, "source.snapshot"), (1, "source.extract")):
                sent, began = primary.bytes_sent(user), time.monotonic()
                code, output = pipeline.run(f"2026-11-01T0{hour}:00:00+00:00")
                assert code == 0, output[-8000:]
                start, end = _task_windows(DAG_ID)[task]
                load[task] = {"run_s": round(time.monotonic() - began, 1), "task_s": round(end - start, 1),
                              "writers_per_s_during_task": round(writers.rate(start, end)),
                              "bytes_sent_to_capture": primary.bytes_sent(user) - sent}
            assert writers.commits > 1000 and sum(writers.key_changes.values()) > 0, load
            print("load:", json.dumps(load))
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
            without_gtid = committed.model_copy(update={"gtid": None})
            found = read_position(without_gtid, pipeline.hook.binlog_facts([without_gtid]))
            assert found.kind is UnreadableKind.SERVER
            message = found.message
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
        pipeline.assert_all_equal()
        for table in pipeline.tables:
            assert pipeline.ledger(table).holder() is None
        version, warehouse = pipeline.ledger("orders").committed().version, pipeline.warehouse_files()

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
        assert pipeline.warehouse_files() == warehouse and pipeline.ledger("orders").committed().version == version

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
        pipeline.assert_all_equal()
    finally:
        primary.stop()
        replica.stop()


# Each place a run can be killed (``airflow_cdc_provider.failpoints``), in two chains of attempts of one run
# each: every attempt is killed at a later place than the one before, and goes on from what that one left (as a
# retry killed again would). A chain's last attempt has no failpoint and completes. With each place, what the
# killed attempt had made visible in Hive. A driver killed with a version's files written and not marked complete
# leaves what one killed in the middle of writing them does: a directory its retry must replace, never read.
KILL_CHAINS = [
    ('{"fresh_snapshot": true}', [("plan.locked", "nothing"), ("snapshot.chunk", "nothing"),
                                  ("table.finish", "the new version")]),
    (None, [("extract.decode", "nothing"), ("extract.file", "nothing"), ("replay.write", "nothing"), ("merge.driver.written", "nothing"),
            ("merge.driver.switched", "the new version, without the added column"),
            # orders' new partition added (empty), none switched yet: its readers see the version before.
            ("partition_commit.added", "customers' new version; orders as it was"),
            ("merge.task.committed", "the new version")]),
    # Killed in a heal (orders', in its diff), then after the commit and before the ledger; completed by the next
    # run, which heals orders again and logs customers' events numbered from 1. (The heal's Spark driver killed:
    # tests/integration/test_version_digests.py.)
    (None, [("diff.compared", "nothing"), ("merge.task.committed", "the new version")]),
]
# The chains completed by the next run (a new one), not by the killed run's re-run.
COMPLETED_BY_THE_NEXT_RUN = {3}
# The places before the merge task: a run killed there has not started Spark.
BEFORE_THE_MERGE = {"plan.locked", "snapshot.chunk", "extract.decode", "extract.file", "replay.write"}
# What the completing attempt says after the kill before it.
SAID_AFTER = {"merge.task.committed": "a re-run: onto version", "table.finish": "already committed by this run"}


def _check_every_event_changelog(pipeline: Pipeline, since: tuple[int, dict], now: dict) -> None:
    """The row events of each version of customers after ``since`` (a version and its rows) are numbered 1, 2, …
    in binlog order in its changelog (an update's two images share one), and applied in order to the rows of that
    version they give the rows Hive holds now (``now``)."""
    from airflow_cdc_testing.hive import read_hive_tables

    from tests.integration.hive_helpers import apply_changes, changes_by_version

    hive = pipeline.config["hive"]
    name = f"{hive['database']}.customers_changelog"
    changelog, _ = read_hive_tables(hive["warehouse_dir"], hive["metastore_uri"], [name])[name]
    header = pipeline.hook.raw_header(TableName(pipeline.schema, "customers"))
    columns, key = [n.lower() for n, _ in header.columns], tuple(k.lower() for k in header.key)
    first, state = since
    versions = {v: changes for v, changes in changes_by_version(changelog).items() if v > first}
    assert len([v for v, changes in versions.items() if changes]) == 2, sorted(versions)  # the killed run's, the next
    for version, changes in sorted(versions.items()):
        ordinals = sorted({c["_change_ordinal"] for c in changes})
        assert ordinals == list(range(1, len(ordinals) + 1)), (version, ordinals)
        state = apply_changes(state, changes, key, columns, every_event=True)
    assert state == now, "the changelog of customers does not give its rows"


def _changes(chain: int) -> list[str]:
    """A chain's source changes: inserts, an update, a key change, a delete of an earlier chain's row."""
    n = 3000 + 10 * chain
    return [
        "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount, note) VALUES "
        f"({n}, 1, 1, {chain}.50, 'chain {chain}'), ({n}, 2, 2, 1.00, NULL)",
        "UPDATE {s}.orders SET amount = amount + 1 WHERE order_no = 1001",
        f"UPDATE {{s}}.orders SET line_no = 3 WHERE order_no = {n} AND line_no = 2",
        f"DELETE FROM {{s}}.orders WHERE order_no = {n - 10} AND line_no = 1",
        f"UPDATE {{s}}.customers SET city = 'chain {chain}' WHERE id = 1",
    ]


@pytest.mark.usefixtures("airflow_home")
def test_a_run_killed_at_each_step_loses_nothing_and_its_rerun_completes(mariadb, capture_conn, tmp_path):
    from airflow_cdc_provider.core.ledger import VERSION_FILE
    from airflow_cdc_provider.core.merge import parse_version_dir

    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders", "customers"])
    # orders partitioned in ranges of ten orders: each chain's new order is a new partition.
    pipeline.config["tables"][0]["partition_by"] = "truncate(order_no, 10)"
    # Snapshots in key ranges on two connections, a row per chunk: the kill at snapshot.chunk cuts a parallel read.
    # The binlog passes decode in two processes beside them: extract.decode kills one of those.
    pipeline.config["source"] = {"snapshot_readers": 2, "snapshot_chunk_rows": 1, "binlog_decoders": 2}
    # customers keep a changelog of every row event: a version's events are numbered from 1 whatever was killed.
    pipeline.config["tables"][1]["changelog"] = {"mode": "all"}
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    code, output = pipeline.run("2026-11-02T00:00:00+00:00")
    assert code == 0, output[-8000:]
    said = f"Snapshot of {pipeline.schema}.orders: read in 3 key ranges on 2 connections at once"
    assert said in output, output[-8000:]
    killed, level = [], None
    for chain, (conf, kills) in enumerate(KILL_CHAINS, start=1):
        pipeline.sql(*_changes(chain))
        if chain == 2:  # the run adds a column: its driver is killed between the switch and ADD COLUMNS
            pipeline.sql("ALTER TABLE {s}.orders ADD COLUMN channel VARCHAR(20) NULL",
                         "UPDATE {s}.orders SET channel = 'web' WHERE order_no = 3020")
        if chain == 3:  # orders swapped for a copy less a row (its chain breaks): the run heals it by a diff
            pipeline.sql("CREATE TABLE {s}.orders_copy LIKE {s}.orders",
                         "INSERT INTO {s}.orders_copy SELECT * FROM {s}.orders WHERE order_no <> 1002",
                         "RENAME TABLE {s}.orders TO {s}.orders_old, {s}.orders_copy TO {s}.orders",
                         "DROP TABLE {s}.orders_old")
        date, args = f"2026-11-02T0{chain}:00:00+00:00", [conf] if conf else []
        # Hive as the chain before left it (the source changes above leave it as it was).
        before = {table: rows for table, (rows, _) in (level or pipeline.hive_tables()).items()}
        if chain in COMPLETED_BY_THE_NEXT_RUN:
            since = pipeline.ledger("customers").committed().version, before["customers"]
        for point, visible in kills:
            warehouse = pipeline.warehouse_files()
            code, output = pipeline.run(date, *args, env={"CDC_FAILPOINT": point})
            assert code != 0 and f"failpoint {point}: killing process" in output, (point, output[-8000:])
            if point in BEFORE_THE_MERGE:
                # Not a file of the warehouse or of its metastore (Derby, in it) changed, nor one was added: Hive
                # is as it was, known without a Spark read of it.
                assert pipeline.warehouse_files() == warehouse, point
                killed.append(point)
                continue
            after = {table: rows for table, (rows, _) in pipeline.hive_tables().items()}
            if visible == "nothing":
                assert after == before, f"{point}: the killed attempt changed Hive"
            elif visible.startswith("customers"):  # orders (partitioned) is merged after customers
                assert after["customers"] != before["customers"] and after["orders"] == before["orders"], point
            else:
                assert after != before, f"{point}: the killed attempt had committed, yet Hive is as it was"
            killed.append(point)
        if chain in COMPLETED_BY_THE_NEXT_RUN:
            # Not its re-run but the next run completes: its range starts where the ledger says the table is, so
            # it holds the events of the version the killed run committed too.
            pipeline.sql("UPDATE {s}.customers SET city = 'after the kill' WHERE id = 2",
                         "INSERT INTO {s}.customers (email, name, city, created_at) VALUES "
                         "('kim@example.com', 'Kim', 'Oslo', NOW(3))")
            date = date.replace(":00:00+", ":30:00+")
        # The run again (a clear in the UI; under a scheduler, the task's retry does the same work) completes.
        code, output = pipeline.run(date, *args)
        assert code == 0, (kills[-1][0], output[-8000:])
        if chain == 3:
            assert pipeline.outcome("orders")["mode"] == "heal", pipeline.outcome("orders")
        if kills[-1][0] in SAID_AFTER and chain not in COMPLETED_BY_THE_NEXT_RUN:
            assert SAID_AFTER[kills[-1][0]] in output, output[-8000:]
        level = pipeline.assert_all_equal()
        for table in pipeline.tables:
            assert pipeline.ledger(table).holder() is None

    assert [point for _, kills in KILL_CHAINS for point, _ in kills] == killed
    _check_every_event_changelog(pipeline, since, level["customers"][0])
    hive, _ = level["orders"]
    assert any(row.get("channel") == "web" for row in hive.values()), "the column added after the kill"
    # Nothing piles up: each table keeps its newest Hive versions, complete or not, and run directories (a
    # completing attempt that finds its run committed leaves the removal of older ones to the next run: one
    # more). The version a run merged onto stays until the ledger has recorded the run, so that the run's own
    # re-run can merge onto it again however many of its attempts were killed: the next run removes it (one more).
    for table in pipeline.tables:
        runs = tmp_path / "work" / f"ods.{table}" / "runs"
        assert len(list(runs.iterdir())) <= 3 + 1, sorted(p.name for p in runs.iterdir())
        _, location = level[table]
        root = Path(location.removeprefix("file:")).parent
        # A partitioned table's old version directory stays as long as a partition the newer versions read is in
        # it, holding that partition only (its version file goes).
        versions = [p.name for p in root.iterdir() if parse_version_dir(p.name) is not None
                    and (p / VERSION_FILE).exists()]
        assert len(versions) <= 3 + 1, versions
