"""A failover on MySQL 9.7 (GTIDs on), followed by GTID: a primary and a replica replicating by auto-position, the
primary writing tagged GTIDs (``uuid:etl:N``) beside untagged ones, then the replica promoted.

What it proves, with two servers:

1. A watermark taken on the primary (its GTID set holding tagged GTIDs) is found on the promoted replica by its GTID
   set (``MySqlSourceHook.binlog_facts``): in the replica's binlog, across its rotations, at the first transaction
   the watermark lacks, with the watermark's own GTID set there. An extraction from there to the replica's end reads
   exactly the changes made after the watermark, on the primary before the failover and on the replica after it:
   each once (the counts of row events), none missing (the snapshot at the watermark with the replayed changes is
   the replica's table). A watermark taken when the replica had caught up is found at the replica's own first
   transaction.
2. A watermark holding transactions the replica never got (written on the primary after the replica stopped
   replicating) is refused on the promoted replica: the search says the position diverged, naming exactly the
   transactions it lacks (as MySQL's GTID_SUBTRACT tells them), and ``core.resume`` makes that an unreadable
   watermark with the way on, rather than reading on without them.
3. On MySQL the hook asks MySQL's own statements and variables (SHOW BINARY LOG STATUS, SHOW BINLOG EVENTS,
   server_uuid, gtid_mode): every statement of the capture user on the new primary is recorded, none failed and
   none names a MariaDB-only function or variable.
"""

from __future__ import annotations

import json
import os

import pymysql.cursors
import pytest
from airflow_cdc_testing.server import Product, ThrowawayServer

from airflow_cdc_provider.core.errors import WatermarkNotReadable
from airflow_cdc_provider.core.gtid import GtidPositionLost, MySqlGtidSet, canonical_gtid
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.resume import UnreadableKind, read_position
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import extract, in_one_directory
from airflow_cdc_provider.stages.replay import replay
from airflow_cdc_provider.stages.snapshot import snapshot
from tests.conftest import conn_env
from tests.integration.capture_helpers import apply_changes, read_rows, source_rows
from tests.servers import start_server

ITEMS = TableName("failover", "items")
# What MariaDB has and MySQL has not: called on MySQL, each would fail or mean nothing.
MARIADB_ONLY = ("binlog_gtid_pos", "gtid_binlog_pos", "gtid_current_pos", "gtid_slave_pos", "gtid_binlog_state",
                "master_gtid_wait", "binlog_snapshot_", "show master status")


def write(server: ThrowawayServer, *statements: str, tag: str | None = None) -> None:
    """Each statement its own transaction (autocommit), as root; with ``tag``, each GTID tagged with it (MySQL
    8.4+: ``uuid:tag:N``, numbered apart from the untagged ``uuid:N``)."""
    conn = server.root_connection()
    try:
        with conn.cursor() as cursor:
            if tag:
                cursor.execute(f"SET gtid_next = 'AUTOMATIC:{tag}'")
            for statement in statements:
                cursor.execute(statement)
    finally:
        conn.close()


def replicate(replica: ThrowawayServer, primary: ThrowawayServer) -> None:
    """Make ``replica`` follow ``primary`` by auto-position, through a replication user made on the primary."""
    primary.execute("CREATE USER 'repl'@'%' IDENTIFIED BY 'repl-pw'", "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'")
    # caching_sha2_password without TLS: the replica asks for the primary's public key to send the password.
    replica.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT={primary.port}, "
                    "SOURCE_USER='repl', SOURCE_PASSWORD='repl-pw', SOURCE_AUTO_POSITION=1, "
                    "GET_SOURCE_PUBLIC_KEY=1", "START REPLICA")


def gtid_executed(server: ThrowawayServer) -> str:
    return server.execute("SELECT @@GLOBAL.gtid_executed")[0][0]


def replica_status(replica: ThrowawayServer) -> dict:
    conn = replica.root_connection(cursorclass=pymysql.cursors.DictCursor)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SHOW REPLICA STATUS")
            return cursor.fetchone() or {}
    finally:
        conn.close()


def caught_up(replica: ThrowawayServer, primary: ThrowawayServer) -> str:
    """Wait until the replica has applied everything the primary has now; that GTID set."""
    executed = gtid_executed(primary)
    ((waited,),) = replica.execute(f"SELECT WAIT_FOR_EXECUTED_GTID_SET('{executed}', 60)")
    if waited != 0:
        status = replica_status(replica)
        pytest.fail(f"The replica did not catch up with {executed}: IO {status.get('Last_IO_Error')!r}, "
                    f"SQL {status.get('Last_SQL_Error')!r}")
    return executed


def gtid_event_at(server: ThrowawayServer, at: Watermark) -> str:
    """The GTID of the transaction that begins at ``at`` in the server's binlog."""
    rows = server.execute(f"SHOW BINLOG EVENTS IN '{at.file}' FROM {at.position} LIMIT 1")
    assert rows and rows[0][2].startswith("Gtid"), rows
    return rows[0][5]


def capture_user_statements(server: ThrowawayServer) -> list[str]:
    """What the capture user's sessions ran on ``server`` since its statements were recorded, lowercased (a
    command such as the binlog dump by its name); fails when one of them failed."""
    rows = server.execute("SELECT EVENT_NAME, SQL_TEXT, MYSQL_ERRNO FROM "
                          "performance_schema.events_statements_history_long ORDER BY THREAD_ID, EVENT_ID")
    assert [row for row in rows if row[2]] == [], "no statement of the capture user failed"
    texts = [str(text or name.rpartition("/")[2]).lower() for name, text, _ in rows]
    assert texts, "the capture user's statements are recorded"
    assert [t for t in texts if any(word in t for word in MARIADB_ONLY)] == []
    return texts


def extracted(hook: MySqlSourceHook, header, start: Watermark, out) -> tuple[dict, object]:
    """The row events from ``start`` to the server's end: their counts, and their replay."""
    result = extract(hook, in_one_directory([header], out / "raw"), start, hook.current_watermark()).check()
    replayed = replay(result.files[header.table], out / "upsert.parquet", out / "delete.parquet")
    return result.counts[header.table], replayed


def test_a_mysql_failover_is_followed_by_tagged_gtids_and_lost_transactions_are_refused(
        tmp_path, make_user, monkeypatch):
    primary = start_server(tmp_path / "primary", {"server_id": 11}, product=Product.MYSQL)
    replica = start_server(tmp_path / "replica", {"server_id": 12}, product=Product.MYSQL)
    try:
        replicate(replica, primary)
        (primary_uuid,), (replica_uuid,) = (s.execute("SELECT @@GLOBAL.server_uuid")[0] for s in (primary, replica))
        assert primary_uuid != replica_uuid, "each server names its own GTIDs"
        conn_id = make_user(server=primary)  # the capture user reaches the replica by replication

        write(primary, "CREATE DATABASE failover",
              f"CREATE TABLE {ITEMS.quoted} (id INT NOT NULL PRIMARY KEY, label VARCHAR(40) NOT NULL, n INT NOT NULL)",
              f"INSERT INTO {ITEMS.quoted} VALUES " + ", ".join(f"({i}, 'row {i}', 0)" for i in range(1, 21)))
        caught_up(replica, primary)
        # A rotation on the replica (not logged, so no GTID of its own): the watermark's place is then in its
        # second file, which the search must choose by its Previous_gtids.
        replica.execute("FLUSH BINARY LOGS")
        write(primary, *(f"UPDATE {ITEMS.quoted} SET n = n + 1 WHERE id = {i}" for i in (1, 2, 3)),
              f"DELETE FROM {ITEMS.quoted} WHERE id = 4", tag="etl")

        # The watermark: the snapshot's, taken before its read, with nothing written meanwhile.
        hook = MySqlSourceHook(conn_id)
        header = hook.raw_header(ITEMS)
        snap = snapshot(hook, header, tmp_path / "snapshot", chunk_rows=8)
        at_snapshot = snap.watermark
        assert (at_snapshot.server_id, at_snapshot.server_uuid) == (11, primary_uuid)
        assert at_snapshot.gtid == canonical_gtid(gtid_executed(primary), mariadb=False)
        assert f"{primary_uuid}:etl:1-4" in at_snapshot.gtid.split(","), at_snapshot.gtid
        # MySQL reads the watermark's spelling (a tag's GTIDs apart from the untagged ones) as the set it has.
        assert primary.execute(f"SELECT GTID_SUBSET('{at_snapshot.gtid}', @@GLOBAL.gtid_executed) "
                               f"AND GTID_SUBSET(@@GLOBAL.gtid_executed, '{at_snapshot.gtid}')") == [(1,)]
        # The GTID set the hook works out at a binlog position (Previous_gtids and the events before it) is the
        # one the server reported there.
        assert hook.watermark_at(at_snapshot.file, at_snapshot.position) == at_snapshot

        # After the watermark, on the primary: 2 inserts, 2 updates, 1 delete, under two tags and none.
        write(primary, f"INSERT INTO {ITEMS.quoted} VALUES (21, 'row 21', 0)",
              f"INSERT INTO {ITEMS.quoted} VALUES (22, 'row 22', 0)")
        (first_after,) = MySqlGtidSet.parse(gtid_executed(primary)).without(MySqlGtidSet.parse(at_snapshot.gtid)
                                                                            ).sources
        caught_up(replica, primary)
        replica.execute("FLUSH BINARY LOGS")  # the extraction crosses a rotation
        write(primary, f"UPDATE {ITEMS.quoted} SET n = n + 1 WHERE id = 5", f"DELETE FROM {ITEMS.quoted} WHERE id = 6",
              tag="etl")
        write(primary, f"UPDATE {ITEMS.quoted} SET label = 'other' WHERE id = 21", tag="other")
        # A switchover point: the replica has everything the primary has.
        caught_up(replica, primary)
        at_switchover = hook.current_watermark()
        assert at_switchover.gtid == canonical_gtid(gtid_executed(replica), mariadb=False)

        # The replica stops replicating; the primary goes on with transactions the replica never gets.
        replica.execute("STOP REPLICA")
        replica_had = gtid_executed(replica)
        write(primary, f"UPDATE {ITEMS.quoted} SET n = n + 100 WHERE id = 7", tag="etl")
        write(primary, f"INSERT INTO {ITEMS.quoted} VALUES (100, 'lost', 0)")
        with_lost = hook.current_watermark()
        ((lost,),) = primary.execute(f"SELECT GTID_SUBTRACT('{gtid_executed(primary)}', '{replica_had}')")
        assert [s for s, _ in MySqlGtidSet.parse(lost).sources] == [primary_uuid, f"{primary_uuid}:etl"], lost

        # The failover: the primary gone, the replica promoted, the connection pointed at it (as a DBA moves a DNS
        # name), and writes go on there: 1 insert, 1 update, 1 delete, one of them tagged on the new primary.
        primary.stop()
        replica.execute("STOP REPLICA", "RESET REPLICA ALL")
        user = json.loads(os.environ[conn_env(conn_id)])["login"]
        # Every statement of the capture user on the new primary is recorded (only its threads: root's are not).
        replica.execute("UPDATE performance_schema.setup_actors SET ENABLED = 'NO', HISTORY = 'NO'",
                        "INSERT INTO performance_schema.setup_actors (HOST, USER, ROLE, ENABLED, HISTORY) "
                        f"VALUES ('%', '{user}', '%', 'YES', 'YES')",
                        "UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' "
                        "WHERE NAME = 'events_statements_history_long'",
                        "TRUNCATE performance_schema.events_statements_history_long")
        monkeypatch.setenv(conn_env(conn_id), json.dumps({**json.loads(os.environ[conn_env(conn_id)]),
                                                          "port": replica.port}))
        write(replica, f"INSERT INTO {ITEMS.quoted} VALUES (30, 'row 30', 0)",
              f"UPDATE {ITEMS.quoted} SET n = n + 1 WHERE id = 8")
        write(replica, f"DELETE FROM {ITEMS.quoted} WHERE id = 9", tag="etl")
        promoted = MySqlSourceHook(conn_id)
        facts = promoted.binlog_facts([at_snapshot, at_switchover, with_lost])
        assert (facts.current.server_id, facts.current.server_uuid) == (12, replica_uuid)
        assert [f.name for f in facts.files] == ["binlog.000001", "binlog.000002", "binlog.000003"]

        # 1. The snapshot's watermark: in the replica's second file, at the first transaction the primary wrote
        # after it, where the replica's GTID set is the watermark's.
        after_snapshot = read_position(at_snapshot, facts)
        assert isinstance(after_snapshot, Watermark), after_snapshot
        assert (after_snapshot.file, after_snapshot.server_id, after_snapshot.server_uuid) == (
            "binlog.000002", 12, replica_uuid)
        assert after_snapshot.gtid == at_snapshot.gtid
        source, ((number, _), *_) = first_after
        assert gtid_event_at(replica, after_snapshot) == f"SET @@SESSION.GTID_NEXT= '{source}:{number}'"
        # The watermark taken when the replica had caught up: at the new primary's first transaction of its own.
        after_switchover = read_position(at_switchover, facts)
        assert isinstance(after_switchover, Watermark) and after_switchover.gtid == at_switchover.gtid, after_switchover
        assert gtid_event_at(replica, after_switchover) == f"SET @@SESSION.GTID_NEXT= '{replica_uuid}:1'"

        # 2. The watermark holding the lost transactions: refused, naming exactly them, with the way on.
        search = facts.found[with_lost]
        assert isinstance(search, GtidPositionLost) and search.kind == "diverged", search
        assert f"has not got the transactions {canonical_gtid(lost, mariadb=False)} of the position " in str(search)
        unreadable = read_position(with_lost, facts)
        assert not isinstance(unreadable, Watermark) and unreadable.kind is UnreadableKind.DIVERGED
        with pytest.raises(WatermarkNotReadable) as refused:
            raise unreadable.error()
        for part in ("taken on server id 11", "this server is id 12", "they were lost when it took over",
                     "fresh_snapshot=true", "on_server_change: snapshot"):
            assert part in str(refused.value), (part, str(refused.value))

        # 3. The search asked MySQL's own statements, each of which succeeded; no MariaDB function or variable.
        texts = capture_user_statements(replica)
        assert any(t.startswith("show binary log status") for t in texts), texts
        assert any(t.startswith("show binlog events") for t in texts), texts

        # 1, read: from each place, exactly the changes after its watermark, each once, on either server. The first
        # read crosses into the replica's third file, which begins with a Previous_gtids event holding tagged GTIDs
        # (MySQL 8.3+ encodes such a set in a format of its own).
        counts, replayed = extracted(promoted, header, after_snapshot, tmp_path / "after-snapshot")
        assert counts == {"I": 3, "U": 3, "D": 2}
        copy = apply_changes(header, read_rows(snap.files), read_rows([replayed.upsert_file]),
                             read_rows([replayed.delete_file]))
        assert copy == source_rows(replica, header)
        assert (100,) not in copy, "the lost insert is nowhere on the new primary"
        counts, _ = extracted(promoted, header, after_switchover, tmp_path / "after-switchover")
        assert counts == {"I": 1, "U": 1, "D": 1}
        assert "binlog dump" in capture_user_statements(replica), "the extractions' reads, without a failure either"
    finally:
        primary.stop()
        replica.stop()


def test_a_replica_that_does_not_log_what_it_replicates_is_refused_and_one_that_does_is_captured(
        tmp_path, make_user):
    from airflow_cdc_provider.core.errors import CaptureNotPossible

    primary = start_server(tmp_path / "primary", {"server_id": 21}, product=Product.MYSQL)
    replica = start_server(tmp_path / "replica", {"server_id": 22, "log_replica_updates": "OFF"},
                           product=Product.MYSQL)
    try:
        replicate(replica, primary)
        write(primary, "CREATE DATABASE failover",
              f"CREATE TABLE {ITEMS.quoted} (id INT NOT NULL PRIMARY KEY, label VARCHAR(40) NOT NULL, n INT NOT NULL)")
        caught_up(replica, primary)
        # Its binlog has none of what it replicated: a copy read from it would miss every change.
        hook = MySqlSourceHook(make_user(server=replica))
        with pytest.raises(CaptureNotPossible) as refused:
            hook.check_capture([ITEMS])
        assert "The server is a replica, and its setting log_replica_updates is 'OFF'" in str(refused.value)
        assert "Fix: add log_replica_updates=ON to my.cnf under [mysqld] and restart the replica" in str(refused.value)
        # Logging them (MySQL's default), the replica is a source like any other: its binlog holds the changes.
        replica.settings["log_replica_updates"] = "ON"
        replica.restart()
        assert hook.check_capture([ITEMS]) is not None
        start = hook.current_watermark()
        write(primary, f"INSERT INTO {ITEMS.quoted} VALUES (1, 'one', 1), (2, 'two', 2)",
              f"UPDATE {ITEMS.quoted} SET n = 3 WHERE id = 1")
        caught_up(replica, primary)
        header = hook.raw_header(ITEMS)
        result = extract(hook, in_one_directory([header], tmp_path / "raw"), start, hook.current_watermark()).check()
        assert result.counts[str(ITEMS)] == {"I": 2, "U": 1, "D": 0}
    finally:
        replica.stop()
        primary.stop()
