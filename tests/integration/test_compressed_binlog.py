"""Compressed binlogs, MariaDB's (``log_bin_compress=ON``: each event compressed) and MySQL's
(``binlog_transaction_compression=ON``: each transaction one zstd payload event): the pass reads the same changes
from compressed events as from plain ones, with the pass decoding alone and with decoder processes, across binlog
rotations; a compressed TRUNCATE stops its table.

The same statements run twice, on two schemas, the binlog compressed the second time: the raw records (without
their binlog coordinates, which differ) must be the same, every type of the all-types table included."""

from __future__ import annotations

import contextlib
import filecmp
import os
from pathlib import Path

import pytest
from airflow_cdc_testing.server import Product

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.records import parse_record
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import extract, in_one_directory
from tests.integration.capture_helpers import compressed_binlog
from tests.integration.fidelity_helpers import DDL, MARIADB_ONLY, MYSQL_DDL, insert_cases, update_to_cases


def _mysql(server) -> bool:
    return server.product is Product.MYSQL


def _workload(mariadb, schema: str) -> list[TableName]:
    types, wide, gone = TableName(schema, "types"), TableName(schema, "wide"), TableName(schema, "gone")
    mariadb.execute(
        f"CREATE DATABASE {schema}",
        (MYSQL_DDL if _mysql(mariadb) else DDL).format(name=types.quoted),
        f"CREATE TABLE {wide.quoted} (id INT NOT NULL PRIMARY KEY, name VARCHAR(60) NULL, amount DECIMAL(14,3) NULL, "
        "note TEXT NULL)",
        f"CREATE TABLE {gone.quoted} (id INT NOT NULL PRIMARY KEY, v INT NULL)")
    return [types, wide, gone]


def _changes(mariadb, tables: list[TableName]) -> None:
    types, wide, gone = tables
    mysql = _mysql(mariadb)
    insert_cases(mariadb, types.quoted, 1, MARIADB_ONLY if mysql else frozenset())
    update_to_cases(mariadb, types.quoted, 1, MARIADB_ONLY if mysql else frozenset())
    # A CTE of 6,000 numbers (MySQL has no sequence tables; both servers recurse 1,000 times unless told).
    fill = ("WITH RECURSIVE n (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM n WHERE seq < 6000) "
            "SELECT seq, CONCAT('row ', seq, REPEAT('x', seq MOD 40)), seq / 7, IF(seq MOD 3 = 0, NULL, "
            "REPEAT('é', seq MOD 90)) FROM n")
    mariadb.execute(
        "SET SESSION cte_max_recursion_depth = 10000" if mysql else "SET SESSION max_recursive_iterations = 10000",
        # A transaction of many row events, each compressed on its own.
        f"INSERT INTO {wide.quoted} {fill}",
        f"INSERT INTO {gone.quoted} VALUES (1, 1), (2, 2)",
        "FLUSH BINARY LOGS",
        f"UPDATE {wide.quoted} SET amount = amount + 1, name = CONCAT(name, '+') WHERE id MOD 5 = 0",
        f"DELETE FROM {wide.quoted} WHERE id MOD 97 = 0",
        f"UPDATE {wide.quoted} SET id = id + 100000 WHERE id = 10",
        f"ALTER TABLE {wide.quoted} ADD COLUMN extra VARCHAR(10) NULL DEFAULT 'x'",
        f"UPDATE {wide.quoted} SET extra = 'y' WHERE id < 50",
        # A comment before it: the statement is still a TRUNCATE.
        f"-- the nightly clean-up\nTRUNCATE TABLE {gone.quoted}",
        f"INSERT INTO {gone.quoted} VALUES (3, 3)",
        "FLUSH BINARY LOGS")


def _records(result, table: TableName) -> list[tuple]:
    return [(r.op, r.uid, r.values) for path in result.files[str(table)]
            for r in (parse_record(line, path) for line in Path(path).read_text().splitlines()[1:])]


@pytest.mark.parametrize("product", ["mariadb", "mysql"])
def test_compressed_events_give_the_raw_records_plain_ones_give(product, request, make_user, tmp_path):
    mariadb = request.getfixturevalue(product)  # (either server)
    hook = MySqlSourceHook(make_user(server=mariadb))
    suffix = os.urandom(3).hex()
    results = {}
    for compressed in (False, True):
        schema = f"compress_{int(compressed)}_{suffix}"
        tables = _workload(mariadb, schema)
        headers = [hook.raw_header(t) for t in tables]
        start = hook.current_watermark()
        with compressed_binlog(mariadb) if compressed else contextlib.nullcontext():
            _changes(mariadb, tables)
        high = hook.current_watermark()
        definitions = [hook.raw_header(t) for t in tables]
        runs = {}
        for decoders in ((0, 2) if compressed else (0,)):
            runs[decoders] = extract(hook, in_one_directory(headers, tmp_path / f"{schema}-{decoders}", definitions=definitions), start, high, defaults=hook.added_column_defaults, charsets=hook.column_charsets, decoders=decoders)
        results[compressed] = (tables, runs)
        if compressed:  # the events were compressed indeed
            files = [row[0] for row in mariadb.execute("SHOW BINARY LOGS") if row[0] >= start.file]
            kinds = {row[2] for name in files for row in mariadb.execute(f"SHOW BINLOG EVENTS IN '{name}'")}
            if product == "mysql":
                assert "Transaction_payload" in kinds, kinds  # (its events are listed after it as well)
            else:
                assert {"Query_compressed", "Write_rows_compressed_v1", "Update_rows_compressed_v1",
                        "Delete_rows_compressed_v1"} <= kinds, kinds
    (plain_tables, plain), (packed_tables, packed) = results[False], results[True]
    for decoders in (0, 2):
        assert set(packed[decoders].failed) == {str(packed_tables[2])}, packed[decoders].failed
        assert "TRUNCATE" in str(packed[decoders].failed[str(packed_tables[2])])
    assert set(plain[0].failed) == {str(plain_tables[2])}
    for ours, theirs in zip(plain_tables[:2], packed_tables[:2]):
        assert _records(plain[0], ours) == _records(packed[0], theirs), f"{theirs} differs from {ours}"
        assert packed[0].counts[str(theirs)] == plain[0].counts[str(ours)]
        for a, b in zip(packed[0].files[str(theirs)], packed[2].files[str(theirs)], strict=True):
            assert filecmp.cmp(a, b, shallow=False), f"{b} differs from {a}: decoder processes"
    assert packed[0].counts[str(packed_tables[1])]["I"] >= 6000
    assert len(packed[0].schema_changes[str(packed_tables[1])]) == 1, "the added column, from a compressed ALTER"
