"""The extraction's own decoder of row images (``core.row_images``) against the binlog reader's, on a real server:
the raw files of one range, extracted with the decoder (in the pass, and in decoder processes beside it) and with
the reader alone, are the same bytes, for every
value of the all-types fixture (inserted, updated to, deleted), the conformance table, and edge values of each
type the decoder plans."""

from __future__ import annotations

import filecmp
import os

import pytest

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages import extract as extraction
from tests.conftest import CONFORMANCE_SQL
from tests.integration.fidelity_helpers import CASES, COLUMNS

# The fixture's columns of the types the decoder plans (every one but BIT, ENUM, SET, JSON and geometry): a table
# whose events it decodes all of. The whole fixture's table has the others too: the reader decodes its events.
PLANNED = [(n, t) for n, t in COLUMNS if t.split("(")[0].split()[0] not in ("BIT", "ENUM", "SET", "JSON", "GEOMETRY", "POINT", "LINESTRING", "POLYGON", "MULTIPOINT",
            "GEOMETRYCOLLECTION")]
# Edge values beyond the fixture: each decimal layout (leftover digits of 1 to 8 on either side, whole groups,
# negatives), odd fractional seconds, multi-byte null bitmaps, every length prefix, text in other character sets.
EDGES = [
    ("d1", "DECIMAL(1,0)", ["-9", "0", "7"]), ("d5_5", "DECIMAL(5,5)", ["-0.00001", "0.99999"]),
    ("d18_9", "DECIMAL(18,9)", ["-123456789.123456789", "0.000000001"]),
    ("d19_1", "DECIMAL(19,1)", ["-999999999999999999.9", "100000000000000000.5"]),
    ("d30_4", "DECIMAL(30,4)", ["-12345678901234567890123456.7891", "1.0001"]),
    ("d65_30", "DECIMAL(65,30)", ["-12345678901234567890123456789012345.123456789012345678901234567891",
                                  "0.000000000000000000000000000001"]),
    ("t1", "TIME(1)", ["'-00:00:00.1'", "'838:59:58.9'"]), ("t3", "TIME(3)", ["'-12:00:00.123'", "'00:00:01.999'"]),
    ("t5", "TIME(5)", ["'-01:02:03.45678'", "'01:02:03.00001'"]),
    ("dt1", "DATETIME(1)", ["'2001-02-03 04:05:06.7'", "'0000-00-00 00:00:00.0'"]),
    ("dt5", "DATETIME(5)", ["'1000-01-01 00:00:00.00001'", "'2024-02-29 23:59:59.99999'"]),
    ("ts3", "TIMESTAMP(3) NULL", ["FROM_UNIXTIME(1.001)", "'0000-00-00 00:00:00'"]),
    ("i24u", "MEDIUMINT UNSIGNED", ["16777215", "8388608"]), ("i24", "MEDIUMINT", ["-1", "-8388608"]),
    ("vb300", "VARBINARY(300)", ["REPEAT(x'ff', 300)", "x'00'"]),
    ("v300", "VARCHAR(300) CHARACTER SET utf8mb4", ["REPEAT('é', 300)", "'x'"]),
    ("ch", "CHAR(10) CHARACTER SET latin1", ["x'8081fe'", "'a '"]),
    ("sj", "VARCHAR(10) CHARACTER SET sjis", ["'日本'", "''"]), ("u2", "VARCHAR(10) CHARACTER SET ucs2", ["'Ωx'", "''"]),
    ("tb", "TINYBLOB", ["x'00'", "''"]), ("mt", "MEDIUMTEXT", ["REPEAT('ab', 40000)", "''"]),
    ("lt", "LONGTEXT CHARACTER SET latin1", ["'ÿ'", "''"]),
    ("yr", "YEAR", ["0", "1901"]), ("dd", "DATE", ["'2020-00-01'", "'0000-00-00'"]),
]


@pytest.fixture
def hook(capture_conn):
    return MySqlSourceHook(capture_conn)


def _header(server, table: TableName) -> RawHeader:
    columns = server.execute(
        f"SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{table.schema}' "
        f"AND TABLE_NAME = '{table.table}' ORDER BY ORDINAL_POSITION")
    return RawHeader(str(table), tuple((n, t) for n, t in columns), ("id",))


def _changes(server, table: TableName, cases: list[dict[str, str]]) -> None:
    """Each case inserted (ids from 1), then again as an all-NULL row (ids from 101) updated to it; two rows
    deleted, and one key changed."""
    statements = ["SET SESSION sql_mode = ''"]
    for n, case in enumerate(cases, 1):
        names = ", ".join(["id", *(f"`{c}`" for c in case)])
        statements.append(f"INSERT INTO {table.quoted} ({names}) VALUES ({', '.join([str(n), *case.values()])})")
    statements.append(f"INSERT INTO {table.quoted} (id) SELECT id + 100 FROM {table.quoted}")
    for n, case in enumerate(cases, 101):
        if case:
            sets = ", ".join(f"`{c}` = {v}" for c, v in case.items())
            statements.append(f"UPDATE {table.quoted} SET {sets} WHERE id = {n}")
    statements += [f"DELETE FROM {table.quoted} WHERE id IN (1, 3)",
                   f"UPDATE {table.quoted} SET id = id + 1000 WHERE id = 2"]
    server.execute(*statements)


def test_decoded_images_are_the_readers(mariadb, hook, tmp_path, monkeypatch):
    schema = f"images_{os.urandom(3).hex()}"
    tables = [TableName(schema, name) for name in ("planned", "fixture", "edges", "full_types")]
    planned, fixture, edges, conformance = tables
    ddl = lambda columns: ", ".join(f"`{n}` {t}" for n, t, *_ in columns)  # noqa: E731
    mariadb.execute(
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {planned.quoted} (id INT NOT NULL PRIMARY KEY, {ddl(PLANNED)})",
        f"CREATE TABLE {fixture.quoted} (id INT NOT NULL PRIMARY KEY, {ddl(COLUMNS)})",
        f"CREATE TABLE {edges.quoted} (id INT NOT NULL PRIMARY KEY, {ddl(EDGES)})")
    mariadb.run_script(CONFORMANCE_SQL, database=schema)  # creates full_types and inserts its one row
    start = hook.current_watermark()
    mariadb.execute(f"UPDATE {conformance.quoted} SET id = id + 1", f"DELETE FROM {conformance.quoted}")
    _changes(mariadb, planned, [{c: v for c, v in case.items() if c in dict(PLANNED)} for case in CASES])
    _changes(mariadb, fixture, CASES)
    statements = ["SET SESSION sql_mode = ''"]
    for n in range(2):  # each edge value, then a row with every other column NULL (a null bitmap of 4 bytes)
        statements.append(f"INSERT INTO {edges.quoted} (id, {', '.join(f'`{c}`' for c, *_ in EDGES)}) VALUES "
                          f"({n + 1}, {', '.join(values[n] for _, _, values in EDGES)})")
        statements.append(f"INSERT INTO {edges.quoted} (id, {', '.join(f'`{c}`' for c, *_ in EDGES[n::2])}) "
                          f"VALUES ({n + 11}, {', '.join(values[n] for _, _, values in EDGES[n::2])})")
    statements.append(f"UPDATE {edges.quoted} SET id = id + 100, yr = 2000")
    mariadb.execute(*statements)
    high = hook.current_watermark()
    headers = [_header(mariadb, t) for t in tables]

    planned_decoders: list[object] = []
    plan = extraction.plan_decoder

    def noting(columns):
        decoder = plan(columns)
        planned_decoders.append(decoder)
        return decoder

    monkeypatch.setattr(extraction, "plan_decoder", noting)
    decoded = extraction.extract(hook, extraction.in_one_directory(headers, tmp_path / "decoded"), start, high).check()
    beside = extraction.extract(hook, extraction.in_one_directory(headers, tmp_path / "beside"), start, high, decoders=2).check()
    monkeypatch.setattr(extraction, "plan_decoder", lambda columns: None)
    read = extraction.extract(hook, extraction.in_one_directory(headers, tmp_path / "read"), start, high).check()

    # The decoder took the tables of planned types; the reader the others (ENUM, SET, JSON, BIT, geometry).
    # (in each of the two passes with the decoder).
    assert sum(d is not None for d in planned_decoders) == 2 * 2, planned_decoders
    assert decoded.counts == read.counts and decoded.counts[str(planned)] == {"I": 10, "U": 5, "D": 3}
    for table in map(str, tables):
        assert len(decoded.files[table]) == len(read.files[table]) >= 1
        for ours, theirs, processes in zip(decoded.files[table], read.files[table], beside.files[table]):
            assert filecmp.cmp(ours, theirs, shallow=False), f"{table}: {ours} differs from {theirs}"
            assert filecmp.cmp(ours, processes, shallow=False), f"{table}: decoded in processes, {processes} differs"
