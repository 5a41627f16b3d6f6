"""Row events that hold part of a row, on both servers: a session that logs binlog_row_image=MINIMAL or NOBLOB
(the server's own setting stays FULL, which the check asks for), and on MySQL a session that logs JSON changes as
diffs (binlog_row_value_options=PARTIAL_JSON). The table they touch stops with the setting and its fix, never
guessed; its changes of the same range in FULL sessions, and the other tables, go on."""

from __future__ import annotations

import os

import pytest
from airflow_cdc_testing.server import Product

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import PartialRowImage, extract, in_one_directory


@pytest.fixture(params=["mariadb", "mysql"])
def server(request):
    return request.getfixturevalue(request.param)


def _session(server, *statements: str) -> None:
    """``statements`` in one session of their own, as an application's would run."""
    server.execute(*statements)


def test_a_partial_row_image_stops_its_table_alone_with_the_setting_and_its_fix(server, make_user, tmp_path):
    schema = f"partial_{os.urandom(3).hex()}"
    mysql = server.product is Product.MYSQL
    doc = "JSON" if mysql else "LONGTEXT"
    server.execute(
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.minimal (id INT PRIMARY KEY, a INT NOT NULL, note VARCHAR(20) DEFAULT 'dflt')",
        f"CREATE TABLE {schema}.noblob (id INT PRIMARY KEY, a INT NOT NULL, body TEXT)",
        f"CREATE TABLE {schema}.docs (id INT PRIMARY KEY, doc {doc})",
        f"CREATE TABLE {schema}.full (id INT PRIMARY KEY, a INT NOT NULL)",
        f"INSERT INTO {schema}.minimal VALUES (1, 1, 'one'), (2, 2, 'two')",
        f"INSERT INTO {schema}.noblob VALUES (1, 1, 'long text')",
        f"INSERT INTO {schema}.docs VALUES (1, '{{\"a\": 1, \"b\": [1, 2, 3]}}')",
        f"INSERT INTO {schema}.full VALUES (1, 1)")
    hook = MySqlSourceHook(make_user(server=server))
    tables = {name: TableName(schema, name) for name in ("minimal", "noblob", "docs", "full")}
    headers = {name: hook.raw_header(table) for name, table in tables.items()}
    start = hook.current_watermark()
    _session(server, "SET SESSION binlog_row_image = 'MINIMAL'",
             f"UPDATE {schema}.minimal SET a = 10 WHERE id = 1", f"INSERT INTO {schema}.minimal (id, a) VALUES (3, 3)",
             f"INSERT INTO {schema}.full VALUES (2, 2)")  # a table whose whole row is written even so
    _session(server, "SET SESSION binlog_row_image = 'NOBLOB'", f"UPDATE {schema}.noblob SET a = 5 WHERE id = 1")
    if mysql:
        _session(server, "SET SESSION binlog_row_value_options = 'PARTIAL_JSON'",
                 f"UPDATE {schema}.docs SET doc = JSON_SET(doc, '$.a', 2) WHERE id = 1")
    else:  # MariaDB has no partial JSON: a MINIMAL delete instead
        _session(server, "SET SESSION binlog_row_image = 'MINIMAL'", f"DELETE FROM {schema}.docs WHERE id = 1")
    server.execute(f"UPDATE {schema}.full SET a = 20 WHERE id = 1")
    result = extract(hook, in_one_directory(list(headers.values()), tmp_path / "raw"), start,
                     hook.current_watermark())

    assert sorted(result.failed) == [f"{schema}.{t}" for t in ("docs", "minimal", "noblob")]
    for name, missing in (("minimal", "leaves the column(s) a, note out of its before image"),
                          ("noblob", "leaves the column(s) body out of its before image")):
        error = result.failed[f"{schema}.{name}"]
        assert isinstance(error, PartialRowImage)
        assert missing in str(error) and "binlog_row_image=MINIMAL or NOBLOB" in str(error), str(error)
        assert "SET PERSIST binlog_row_image = 'FULL'" in str(error)
    docs = str(result.failed[f"{schema}.docs"])
    if mysql:
        assert "holds the change of the JSON column(s) doc as a diff" in docs and "PARTIAL_JSON" in docs, docs
    else:
        assert "leaves the column(s) doc out of its image" in docs, docs
    # The table the same sessions wrote whole goes on, with both changes.
    assert result.counts[f"{schema}.full"] == {"I": 1, "U": 1, "D": 0}
