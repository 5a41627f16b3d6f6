"""``column_type_of`` against a real MariaDB: for every column type, the type rebuilt from the binlog's table map
lands in Hive as the information_schema type does, with the details the value rules use (ENUM and SET members,
BIT width, BINARY length, decimal precision and scale, fractional seconds, signedness) the same.

Two known differences, which the binlog cannot tell apart (see ``core.binlog_columns``):

- MariaDB's INET4, INET6 and UUID are ``binary(4)``/``binary(16)`` in the binlog: Hive type binary, where
  information_schema's type gives string. They are the only columns whose Hive types may differ.
- MariaDB's JSON is a LONGTEXT; information_schema says ``longtext`` too, so it is compared as is.
"""

from __future__ import annotations

import types

import pytest
from airflow_cdc_testing.server import ThrowawayServer
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from airflow_cdc_provider.core.binlog_columns import column_type_of
from airflow_cdc_provider.core.types import GEOMETRIES, ColumnType, hive_type
from tests.conftest import CONFORMANCE_SQL
from tests.integration.fidelity_helpers import DDL
from tests.servers import start_server

BINARY_STANDINS = {"inet4": "binary(4)", "inet6": "binary(16)", "uuid": "binary(16)"}

# Beyond the fidelity table's and the conformance table's columns: binary-charset strings, odd fsp, member
# quoting, every TEXT and BLOB size, lengths in multi-byte character sets, two-byte ENUM and SET indexes.
EXTRA_COLUMNS = [
    ("cb", "CHAR(5) CHARACTER SET binary"), ("vcb", "VARCHAR(20) CHARACTER SET binary"), ("b255", "BINARY(255)"),
    ("t3", "TIME(3)"), ("dt1", "DATETIME(1)"), ("ts3", "TIMESTAMP(3) NULL"), ("ts0", "TIMESTAMP NULL"),
    ("enq", "ENUM('x''y','back\\\\slash','','a\"b')"), ("stq", "SET('it''s','','s p')"),
    # Members in latin1 are ASCII here: the library decodes members as UTF-8 and makes '' of one it cannot.
    ("el", "ENUM('a','b') CHARACTER SET latin1"), ("sl", "SET('a','b') CHARACTER SET latin1"),
    ("e300", "ENUM(" + ",".join(f"'m{i}'" for i in range(300)) + ")"),
    ("s9", "SET(" + ",".join(f"'m{i}'" for i in range(9)) + ")"),
    ("tt", "TINYTEXT"), ("mt", "MEDIUMTEXT"), ("lt", "LONGTEXT"), ("tb", "TINYBLOB"), ("mb", "MEDIUMBLOB"),
    ("c255", "CHAR(255)"), ("c3", "CHAR(3) CHARACTER SET utf8mb3"), ("cl", "CHAR(7) CHARACTER SET latin1"),
    ("cu", "CHAR(4) CHARACTER SET ucs2"), ("vs", "VARCHAR(10) CHARACTER SET sjis"),
    ("v16", "VARCHAR(300) CHARACTER SET utf16"), ("v0", "VARCHAR(0)"),
    ("d1", "DECIMAL(1,0)"), ("dn", "NUMERIC"), ("d650", "DECIMAL(65,0)"), ("d3030", "DECIMAL(30,30)"),
    ("f103", "FLOAT(10,3)"), ("dp", "DOUBLE PRECISION UNSIGNED"), ("bit2", "BIT(2)"), ("bit8", "BIT(8)"),
    ("mls", "MULTILINESTRING"), ("mpo", "MULTIPOLYGON"), ("j2", "JSON"), ("i11z", "INT(11) ZEROFILL"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("mariadb-binlog-columns"))
    yield server
    server.stop()


def write_events(server: ThrowawayServer, schemas: set[str]) -> list[tuple[str, str, list]]:
    """(schema, table, columns) of each WriteRowsEvent of the tables in ``schemas``, from the whole binlog."""
    reader = BinLogStreamReader(
        connection_settings={"unix_socket": str(server.socket_path), "user": "root", "passwd": ""},
        server_id=99, blocking=False, only_events=[WriteRowsEvent], is_mariadb=False,
    )
    try:
        return [(e.schema, e.table, list(e.columns)) for e in reader if e.schema in schemas]
    finally:
        reader.close()


def information_schema_types(server: ThrowawayServer, schema: str) -> dict[tuple[str, str], str]:
    rows = server.execute(
        "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
        f"WHERE TABLE_SCHEMA = '{schema}' ORDER BY TABLE_NAME, ORDINAL_POSITION"
    )
    return {(table, column): column_type for table, column, column_type in rows}


def details(column_type: str) -> dict:
    """What the value rules (and the Hive type) read of a COLUMN_TYPE, by the base type's kind."""
    t = ColumnType.parse(column_type)
    base = "geometry" if t.base in GEOMETRIES else t.base
    found: dict = {"base": base}
    if base in ("enum", "set"):
        found["members"] = t.members()
    elif base == "bit":
        found["bits"] = t.bits
    elif base in ("binary", "varbinary", "char", "varchar"):
        found["length"] = (t.numbers() or [1 if base in ("binary", "char") else None])[0]
    elif base == "decimal":
        found["precision, scale"] = t.decimal
    elif base in ("time", "datetime", "timestamp"):
        found["fsp"] = (t.numbers() or [0])[0]
    elif base in ("tinyint", "smallint", "mediumint", "int", "bigint", "float", "double"):
        found["unsigned"] = t.unsigned
    return found


def mismatches(schema: str, table: str, columns: list, expected: dict[tuple[str, str], str]) -> list[str]:
    """Each column whose rebuilt type disagrees with information_schema's (``expected``), with both types."""
    problems = []
    if [c.name for c in columns] != [name for (t, name) in expected if t == table]:
        problems.append(f"{schema}.{table}: binlog columns {[c.name for c in columns]} are not information_schema's")
    for column in columns:
        info = expected[(table, column.name)]
        got = column_type_of(column)
        base = ColumnType.parse(info).base
        if base in BINARY_STANDINS:
            # Bytes in the binlog, indistinguishable from BINARY(n): the one allowed Hive difference.
            ok = got == BINARY_STANDINS[base] and hive_type(got) != hive_type(info)
        else:
            ok = hive_type(got) == hive_type(info) and details(got) == details(info)
        if not ok:
            problems.append(f"{schema}.{table}.{column.name}: information_schema {info!r} (Hive {hive_type(info)}, "
                            f"{details(info)}), binlog {got!r} (Hive {hive_type(got)}, {details(got)})")
    return problems


def test_every_column_type_matches_information_schema(server):
    extra = ", ".join(f"`{name}` {ctype}" for name, ctype in EXTRA_COLUMNS)
    server.execute(
        "CREATE DATABASE bc", DDL.format(name="bc.t"), f"CREATE TABLE bc.extra (id INT PRIMARY KEY, {extra})",
        "INSERT INTO bc.t (id) VALUES (1)", "INSERT INTO bc.extra (id) VALUES (1)", "CREATE DATABASE bc_flink",
    )
    server.run_script(CONFORMANCE_SQL, database="bc_flink")  # creates full_types and inserts its one row
    expected = {"bc": information_schema_types(server, "bc"), "bc_flink": information_schema_types(server, "bc_flink")}

    events = write_events(server, set(expected))

    assert sorted((s, t) for s, t, _ in events) == [("bc", "extra"), ("bc", "t"), ("bc_flink", "full_types")]
    problems = [p for schema, table, columns in events for p in mismatches(schema, table, columns, expected[schema])]
    assert not problems, "column_type_of disagrees with information_schema:\n" + "\n".join(problems)


def test_events_before_an_alter_keep_the_old_types(server):
    """The point of column_type_of: an event written before ALTER TABLE has the columns the table had then."""
    server.execute(
        "CREATE DATABASE bc_alter",
        "CREATE TABLE bc_alter.t (id INT PRIMARY KEY, v INT, s SET('a','b'), c CHAR(2), t TIME, b BINARY(4))",
        "INSERT INTO bc_alter.t (id) VALUES (1)",
    )
    before = information_schema_types(server, "bc_alter")
    server.execute(
        "ALTER TABLE bc_alter.t MODIFY v BIGINT UNSIGNED, MODIFY s SET('c','a','b'), DROP COLUMN c, "
        "MODIFY t TIME(4), MODIFY b BINARY(8), ADD COLUMN n DECIMAL(5,2)",
        "INSERT INTO bc_alter.t (id) VALUES (2)",
    )
    after = information_schema_types(server, "bc_alter")
    assert before != after

    events = write_events(server, {"bc_alter"})

    assert len(events) == 2
    problems = mismatches(*events[0], before) + mismatches(*events[1], after)
    assert not problems, "column_type_of disagrees with information_schema:\n" + "\n".join(problems)


def test_an_unmapped_type_code_names_the_column():
    with pytest.raises(ValueError, match=r"'vec'.*type code 242"):
        column_type_of(types.SimpleNamespace(name="vec", type=242))  # MySQL 9's VECTOR
    with pytest.raises(ValueError, match=r"'c'.*type code 254.*character set"):
        column_type_of(types.SimpleNamespace(name="c", type=254, max_length=4, character_set_name=None))
