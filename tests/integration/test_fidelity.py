"""Type fidelity against a real server, real Spark and a real metastore: every value lands as docs/types.md says,
the same by the snapshot and by the binlog, in any time zone of server and worker."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from tests.conftest import CONFORMANCE_SQL
from tests.integration.fidelity_helpers import (
    CASES,
    COLUMNS,
    DDL,
    PROMISED,
    differences,
    insert_cases,
    oracle_rows,
    update_to_cases,
)
from tests.integration.merge_helpers import Table
from tests.servers import start_server

pytestmark = pytest.mark.spark


@pytest.fixture
def worker_zone():
    """Set this process's (the worker's) time zone; Spark's JVMs inherit it. Restored afterwards."""
    before = os.environ.get("TZ")

    def set_zone(zone: str) -> None:
        os.environ["TZ"] = zone
        time.tzset()

    yield set_zone
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.fixture
def new_york_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("mariadb-ny"), environment={"TZ": "America/New_York"})
    yield server
    server.stop()


def _all_types_table(server) -> TableName:
    table = TableName(f"fidelity_{os.urandom(3).hex()}", "all_types")
    server.execute(f"CREATE DATABASE {table.schema}", DDL.format(name=table.quoted))
    return table


def _load_both_ways(server, conn_id: str, tmp_path: Path) -> tuple[TableName, dict, Table]:
    """Cases 1…n by the snapshot; the same cases inserted (101…) and updated into place (201…) by the binlog."""
    table = _all_types_table(server)
    insert_cases(server, table.quoted, 1)
    server.execute(*[f"INSERT INTO {table.quoted} (id) VALUES ({201 + n})" for n in range(len(CASES))])
    hook = MySqlSourceHook(conn_id)
    target = Table(hook, hook.raw_header(table), tmp_path, target="ods.all_types")
    assert target.merge(target.prepare()[1])["status"] == "committed"
    insert_cases(server, table.quoted, 101)
    update_to_cases(server, table.quoted, 201)
    run, spec = target.prepare()
    assert target.merge(spec)["status"] == "committed"
    rows, _ = target.read()
    return table, rows, target


def _assert_lands_as_documented(server, target: Table, rows: dict) -> None:
    names = [name for name, _ in COLUMNS]
    for n in range(1, len(CASES) + 1):
        snapshot_row, inserted, updated = rows[(n,)], rows[(100 + n,)], rows[(200 + n,)]
        for name in names:
            assert inserted[name] == snapshot_row[name] and type(inserted[name]) is type(snapshot_row[name]), (
                f"case {n} column {name}: snapshot {snapshot_row[name]!r:.100}, binlog insert {inserted[name]!r:.100}")
            assert updated[name] == snapshot_row[name] and type(updated[name]) is type(snapshot_row[name]), (
                f"case {n} column {name}: snapshot {snapshot_row[name]!r:.100}, binlog update {updated[name]!r:.100}")
    assert differences(oracle_rows(server, target.header), rows) == []
    for n, promised in PROMISED.items():
        for ident in (n, 100 + n, 200 + n):
            got = {name: rows[(ident,)][name] for name in promised}
            assert got == promised, f"row {ident}"
    assert all(value is None for name, value in rows[(4,)].items() if name != "id")


def test_every_type_lands_the_same_by_snapshot_and_by_binlog(mariadb, make_user, tmp_path):
    _, rows, target = _load_both_ways(mariadb, make_user(), tmp_path)
    _assert_lands_as_documented(mariadb, target, rows)


def test_server_and_worker_in_other_zones_land_the_same_values(new_york_server, make_user, worker_zone, tmp_path):
    ((system_zone, session_zone),) = new_york_server.execute("SELECT @@system_time_zone, @@time_zone")
    assert system_zone in ("EST", "EDT") and session_zone == "SYSTEM"
    worker_zone("Asia/Kolkata")
    assert time.strftime("%z") == "+0530"
    _, rows, target = _load_both_ways(new_york_server, make_user(server=new_york_server), tmp_path)
    # The promised values are the UTC ones: the same literals give the same Hive values in any zone.
    _assert_lands_as_documented(new_york_server, target, rows)


# A new value for every column of the conformance table, each set by an UPDATE of its own.
CONFORMANCE_UPDATES = {
    "tiny_c": "-128", "tiny_un_c": "0", "tiny_un_z_c": "7", "small_c": "-32768", "small_un_c": "0",
    "small_un_z_c": "9", "medium_c": "-8388608", "medium_un_c": "0", "medium_un_z_c": "1",
    "int_c": "-2147483648", "int_un_c": "0", "int_un_z_c": "5", "int11_c": "-1",
    "big_c": "-9223372036854775808", "big_un_c": "0", "big_un_z_c": "12345678901234567890",
    "varchar_c": "'Bye wörld'", "char_c": "'xy'", "real_c": "-0.5", "float_c": "1.0E-7", "float_un_c": "3.14159",
    "float_un_z_c": "2.5", "double_c": "-1.0E100", "double_un_c": "0", "double_un_z_c": "1.5",
    "decimal_c": "-1234.5678", "decimal_un_c": "0.0001", "decimal_un_z_c": "1", "numeric_c": "-999999",
    "big_decimal_c": "-1234567890123456789012345678901234567890123456789012345678901234.5",
    "bit1_c": "b'1'", "tiny1_c": "0", "boolean_c": "FALSE", "date_c": "'2000-02-29'", "time_c": "'-12:00:01'",
    "datetime3_c": "'2000-01-01 00:00:00.999'", "datetime6_c": "'2000-01-01 00:00:00.000001'",
    "timestamp_c": "FROM_UNIXTIME(946684800)", "file_uuid": "UNHEX('00112233445566778899AABBCCDDEEFF')",
    "bit_c": "b'1'", "text_c": "'more\\ntext'", "tiny_blob_c": "x'ff'", "blob_c": "x'00'",
    "medium_blob_c": "x'0102'", "long_blob_c": "x''", "year_c": "1999", "enum_c": "'white'", "set_c": "'b'",
    "json_c": "'{\"key2\": [1, {\"x\": 2.0}]}'", "point_c": "ST_GeomFromText('POINT(2 3)')",
    "geometry_c": "ST_GeomFromText('LINESTRING(0 0, 1 1)')", "linestring_c": "ST_GeomFromText('LINESTRING(0 0, 5 5)')",
    "polygon_c": "ST_GeomFromText('POLYGON((0 0, 3 0, 3 3, 0 0))')",
    "multipoint_c": "ST_GeomFromText('MULTIPOINT((3 3),(4 4),(5 5))')",
    "multiline_c": "ST_GeomFromText('MULTILINESTRING((0 0, 1 1),(2 2, 3 3))')",
    "multipolygon_c": "ST_GeomFromText('MULTIPOLYGON(((0 0, 1 0, 1 1, 0 0)))')",
    "geometrycollection_c": "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1))')", "varchar_len0_c": "NULL",
}


def test_conformance_table_initial_load_then_every_column_through_the_binlog(mariadb, make_user, tmp_path):
    database = f"column_type_test_{os.urandom(3).hex()}"
    mariadb.execute(f"CREATE DATABASE {database}")
    mariadb.run_script(CONFORMANCE_SQL, database=database)
    table = TableName(database, "full_types")
    hook = MySqlSourceHook(make_user())
    header = hook.raw_header(table)
    assert set(CONFORMANCE_UPDATES) == {name for name, _ in header.columns} - {"id"}, "every column is updated"
    target = Table(hook, header, tmp_path, target="ods.full_types")

    def run_and_compare(step: str) -> None:
        assert target.merge(target.prepare()[1])["status"] == "committed"
        rows, _ = target.read()
        assert differences(oracle_rows(mariadb, header), rows) == [], step

    run_and_compare("initial load")
    for name, value in CONFORMANCE_UPDATES.items():
        mariadb.execute(f"UPDATE {table.quoted} SET `{name}` = {value} WHERE id = 1")
    mariadb.execute(f"INSERT INTO {table.quoted} (id, tiny_c, json_c) VALUES (2, 1, '[1, 2]')")
    run_and_compare("every column updated, a row inserted")
    mariadb.execute(f"UPDATE {table.quoted} SET " + ", ".join(f"`{n}` = NULL" for n in CONFORMANCE_UPDATES)
                    + " WHERE id = 1", f"DELETE FROM {table.quoted} WHERE id = 2")
    run_and_compare("every column set to NULL, a row deleted")
