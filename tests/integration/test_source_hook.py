"""The source hook against real MariaDB servers: good settings, each wrong setting, each missing privilege."""

from __future__ import annotations

import json
import os
import time

import pytest

from airflow_cdc_provider.core.errors import (
    CaptureNotPossible,
    CdcError,
    NoUsableKey,
    TableNotFound,
    WatermarkNotReadable,
)
from airflow_cdc_provider.core.flavor import Flavor
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.resume import Unreadable, UnreadableKind, read_position
from airflow_cdc_provider.core.types import UnsupportedColumnName
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.hooks.mysql_source import DIFF_WAY_ON, MySqlSourceHook

ORDERS = TableName("shop", "orders")
CUSTOMERS = TableName("shop", "customers")


def test_detects_mariadb(mariadb, capture_conn):
    flavor = MySqlSourceHook(capture_conn).flavor
    assert flavor.flavor is Flavor.MARIADB
    assert flavor.version >= (10, 5, 0)


def test_least_privilege_user_can_capture(capture_conn):
    hook = MySqlSourceHook(capture_conn)
    assert hook.capture_problems([ORDERS, CUSTOMERS]) == []
    # SELECT on *.* (the tests' capture user: their schemas come and go) reads the mysql schema too: warned.
    (warning,) = hook.check_capture([ORDERS, CUSTOMERS]).warnings
    assert "holds SELECT on *.*, which reads every schema, the mysql schema's password hashes included" in warning


def test_session_reads_times_in_utc(mariadb, capture_conn):
    mariadb.execute("SET GLOBAL time_zone = '+05:00'")
    try:
        with MySqlSourceHook(capture_conn).cursor() as cursor:
            cursor.execute("SELECT @@session.time_zone")
            assert cursor.fetchone()[0] == "+00:00"
    finally:
        mariadb.execute("SET GLOBAL time_zone = SYSTEM")


@pytest.mark.parametrize(
    ("overrides", "setting", "value"),
    [
        ({"log_bin": False}, "log_bin", "OFF"),
        ({"binlog_format": "STATEMENT"}, "binlog_format", "STATEMENT"),
        ({"binlog_format": "MIXED"}, "binlog_format", "MIXED"),
        ({"binlog_row_image": "MINIMAL"}, "binlog_row_image", "MINIMAL"),
        ({"binlog_row_image": "NOBLOB"}, "binlog_row_image", "NOBLOB"),
        ({"binlog_row_metadata": "MINIMAL"}, "binlog_row_metadata", "MINIMAL"),
        ({"binlog_row_metadata": "NO_LOG"}, "binlog_row_metadata", "NO_LOG"),
    ],
)
def test_wrong_server_setting_is_refused_naming_setting_value_and_fix(start_server, make_user, overrides, setting, value):
    server = start_server(**overrides)
    conn_id = make_user(server=server)
    with pytest.raises(CaptureNotPossible) as err:
        MySqlSourceHook(conn_id).check_capture()
    assert len(err.value.problems) == 1, err.value.problems
    (problem,) = err.value.problems
    assert f"The server setting {setting} is '{value}'" in problem
    assert "Fix:" in problem
    assert str(err.value).endswith(DIFF_WAY_ON), "and the way on without the binlog"


@pytest.mark.parametrize(
    ("privileges", "missing"),
    [
        (("SELECT", "REPLICATION CLIENT"), "REPLICATION SLAVE"),
        (("SELECT", "REPLICATION SLAVE"), "REPLICATION CLIENT"),
    ],
)
def test_user_without_a_replication_privilege_is_refused(make_user, privileges, missing):
    conn_id = make_user(privileges)
    with pytest.raises(CaptureNotPossible) as err:
        MySqlSourceHook(conn_id).check_capture([ORDERS])
    assert len(err.value.problems) == 1
    assert f"lacks the privilege {missing}" in err.value.problems[0]
    # Without the binlog the replication privileges are not needed: the way on without it is offered.
    assert DIFF_WAY_ON in str(err.value)
    assert MySqlSourceHook(conn_id).check_capture([ORDERS], binlog=False).unreadable == {}


def test_a_table_the_user_may_not_read_is_told_apart_and_the_others_can_be_captured(mariadb, make_user):
    conn_id = make_user(("REPLICATION SLAVE", "REPLICATION CLIENT"))
    user = json.loads(os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"])["login"]
    mariadb.execute(f"GRANT SELECT ON `shop`.`customers` TO '{user}'@'%'")
    found = MySqlSourceHook(conn_id).check_capture([ORDERS, CUSTOMERS])
    assert found.unreadable == {ORDERS: f"The user '{user}'@'%' lacks SELECT on shop.orders, needed to read the "
                                        f"table. Fix: GRANT SELECT ON `shop`.`orders` TO '{user}'@'%';"}


def test_select_on_the_schema_only_is_enough(mariadb, make_user):
    conn_id = make_user(("REPLICATION SLAVE", "REPLICATION CLIENT"))
    user = json.loads(os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"])["login"]
    mariadb.execute(f"GRANT SELECT ON `shop`.* TO '{user}'@'%'")
    assert MySqlSourceHook(conn_id).check_capture([ORDERS, CUSTOMERS]).warnings == []
    # More than capture needs is allowed, and each excess is warned with the statement that takes it back.
    mariadb.execute(f"GRANT INSERT, UPDATE ON `shop`.* TO '{user}'@'%'", f"GRANT PROCESS ON *.* TO '{user}'@'%'")
    warnings = MySqlSourceHook(conn_id).check_capture([ORDERS, CUSTOMERS]).warnings
    assert sorted(warnings) == sorted([
        f"The capture user '{user}'@'%' holds PROCESS on *.*, which capture does not need: it never writes to the "
        f"source nor administers it. Least privilege: REVOKE PROCESS ON *.* FROM '{user}'@'%';",
        f"The capture user '{user}'@'%' holds INSERT, UPDATE on `shop`.*, which capture does not need: it never "
        f"writes to the source nor administers it. Least privilege: REVOKE INSERT, UPDATE ON `shop`.* FROM "
        f"'{user}'@'%';"]), warnings


def test_watermark_moves_with_writes_and_across_rotation(mariadb, capture_conn):
    hook = MySqlSourceHook(capture_conn)
    before = hook.current_watermark()
    assert before.server_id == 1 and before.gtid and before.server_uuid is None
    assert Watermark.from_text(before.to_text()) == before
    mariadb.execute("INSERT INTO shop.customers (email, name) VALUES ('w1@example.com', 'w1')")
    after_write = hook.current_watermark()
    assert after_write.file == before.file and after_write > before
    assert after_write.gtid != before.gtid
    mariadb.execute("FLUSH BINARY LOGS")
    after_rotation = hook.current_watermark()
    assert after_rotation.sequence == before.sequence + 1
    assert before < after_write < after_rotation
    assert after_rotation.position < after_write.position  # a new file starts low: order is by file first


def test_gtid_is_the_state_at_the_watermark(mariadb, capture_conn):
    hook = MySqlSourceHook(capture_conn)
    watermark = hook.current_watermark()
    assert watermark.gtid == mariadb.execute("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]


def test_lists_binlogs_and_tells_readable_watermarks(mariadb, capture_conn):
    hook = MySqlSourceHook(capture_conn)

    def where(watermark):
        return read_position(watermark, hook.binlog_facts([watermark]))

    old = hook.current_watermark()
    assert old.file in [f.name for f in hook.binlogs()]
    assert where(old) == old
    mariadb.execute("FLUSH BINARY LOGS")
    current = hook.current_watermark()
    purge_binlogs_to(mariadb, current.file)
    assert [f.name for f in hook.binlogs()] == [current.file]
    facts = hook.binlog_facts()
    assert facts.current.file == current.file and [f.name for f in facts.files] == [current.file]
    assert {name for name, _ in facts.retention} == {"binlog_expire_logs_seconds", "expire_logs_days"}
    purged = where(old)
    assert isinstance(purged, Unreadable) and purged.kind is UnreadableKind.PURGED
    with pytest.raises(WatermarkNotReadable) as err:
        raise purged.error()
    message = str(err.value)
    assert old.file in message and "purged" in message
    assert "binlog_expire_logs_seconds=" in message and "expire_logs_days=" in message
    assert where(current) == current
    past_end = Watermark(current.file, current.position + 10_000_000, current.server_id)
    assert where(past_end).kind is UnreadableKind.PAST_END and "past the end" in where(past_end).message
    other_server = Watermark(current.file, current.position, server_id=99)
    assert where(other_server).kind is UnreadableKind.SERVER and "server id 99" in where(other_server).message


def purge_binlogs_to(server, file):
    # MariaDB keeps a binlog until its XA checkpoint is written, which happens shortly after a rotation.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        warnings = server.execute(f"PURGE BINARY LOGS TO '{file}'", "SHOW WARNINGS")
        if server.execute("SHOW BINARY LOGS")[0][0] == file:
            return
        time.sleep(0.2)
    raise AssertionError(f"binlogs before {file} were not purged: {warnings}")


@pytest.fixture(scope="module")
def key_tables(mariadb):
    mariadb.execute(
        "CREATE DATABASE IF NOT EXISTS keys_db",
        "CREATE TABLE keys_db.pk (a INT NOT NULL, b VARCHAR(10) NOT NULL, u INT NOT NULL, PRIMARY KEY (b, a),"
        " UNIQUE KEY uk (u))",
        "CREATE TABLE keys_db.uk (id INT NULL, code CHAR(3) NOT NULL, region INT NOT NULL, x INT NOT NULL,"
        " UNIQUE KEY uk_id (id), UNIQUE KEY uk_code_region (code, region), UNIQUE KEY uk_x_code (x, code))",
        "CREATE TABLE keys_db.nullable_uk (id INT NULL, UNIQUE KEY uk_id (id))",
        "CREATE TABLE keys_db.nokey (id INT NOT NULL, KEY ix (id))",
    )
    yield
    mariadb.execute("DROP DATABASE keys_db")


@pytest.mark.usefixtures("key_tables")
def test_table_keys(capture_conn):
    hook = MySqlSourceHook(capture_conn)
    assert hook.table_key(TableName("keys_db", "pk")).columns == ("b", "a")
    key = hook.table_key(TableName("keys_db", "uk"))
    assert (key.index_name, key.columns) == ("uk_code_region", ("code", "region"))
    # No unique key on NOT NULL columns: the whole row is the identity.
    assert hook.table_key(TableName("keys_db", "nullable_uk")).is_whole_row
    assert hook.table_key(TableName("keys_db", "nokey")).columns == ()
    with pytest.raises(NoUsableKey, match="names id, which allow NULL"):
        hook.table_key(TableName("keys_db", "nullable_uk"), ["id"])
    with pytest.raises(TableNotFound, match="keys_db.missing"):
        hook.table_key(TableName("keys_db", "missing"))


@pytest.mark.usefixtures("key_tables")
def test_tables_the_user_cannot_see_are_not_found(make_user):
    conn_id = make_user(("SELECT",), on="shop.*")
    with pytest.raises(TableNotFound):
        MySqlSourceHook(conn_id).table_key(TableName("keys_db", "pk"))


@pytest.mark.usefixtures("key_tables")
def test_many_tables_described_at_once_as_one_by_one(mariadb, capture_conn):
    mariadb.execute("CREATE TABLE IF NOT EXISTS keys_db.doc (id INT PRIMARY KEY, body JSON, at DATETIME(3))",
                    "CREATE TABLE IF NOT EXISTS keys_db.comma (id INT PRIMARY KEY, `a,b` INT)",
                    "CREATE OR REPLACE VIEW keys_db.v AS SELECT 1 AS one")
    hook = MySqlSourceHook(capture_conn)
    assert [str(t) for t in hook.base_tables(["keys_db"])] == [
        "keys_db.comma", "keys_db.doc", "keys_db.nokey", "keys_db.nullable_uk", "keys_db.pk", "keys_db.uk"], "views left out"
    names = [*hook.base_tables(["keys_db"]), TableName("keys_db", "missing")]
    described = hook.raw_headers(names)
    for name in names:
        try:
            expected = hook.raw_header(name)
        except CdcError as exc:
            assert type(described[name]) is type(exc) and str(described[name]) == str(exc)
        else:
            assert described[name] == expected
    assert described[TableName("keys_db", "doc")].columns[1] == ("body", "json")
    # A name Hive cannot hold stops the table at the check, before anything is read, naming the column.
    refused = described[TableName("keys_db", "comma")]
    assert isinstance(refused, UnsupportedColumnName) and "'a,b' holds a comma" in str(refused)
