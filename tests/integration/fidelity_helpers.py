"""An all-types fixture, and an oracle: what Hive must hold for each value, asked of the server itself.

The oracle does not go through the capture code. It selects each column through a server function that gives
the documented Hive form, or one the test can turn into it by an independent rule: ``ST_AsBinary`` for WKB,
``UNIX_TIMESTAMP`` for the instant of a TIMESTAMP, ``TIME_TO_SEC`` for a TIME's duration, ``HEX`` for BIT,
``CAST(… AS CHAR)`` for wide decimals, dates and MariaDB's INET/UUID.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from decimal import Decimal
from typing import Any

import numpy as np

from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.types import GEOMETRIES, ColumnType

COLUMNS = [
    ("i8", "TINYINT"), ("u8", "TINYINT UNSIGNED"), ("b1", "TINYINT(1)"), ("bo", "BOOLEAN"), ("i16", "SMALLINT"),
    ("u16", "SMALLINT UNSIGNED ZEROFILL"), ("i24", "MEDIUMINT"), ("u24", "MEDIUMINT UNSIGNED"), ("i32", "INT"),
    ("u32", "INT UNSIGNED"), ("i64", "BIGINT"), ("u64", "BIGINT UNSIGNED"), ("d10", "DECIMAL(10,2)"),
    ("d38", "DECIMAL(38,10)"), ("d65", "DECIMAL(65,30)"), ("du", "DECIMAL(8,4) UNSIGNED ZEROFILL"),
    ("f", "FLOAT"), ("fu", "FLOAT UNSIGNED"), ("db", "DOUBLE"), ("bit1", "BIT(1)"), ("bit9", "BIT(9)"),
    ("bit64", "BIT(64)"), ("en", "ENUM('red','white','it''s')"), ("st", "SET('a','b','c d')"), ("js", "JSON"),
    ("bn", "BINARY(4)"), ("vb", "VARBINARY(10)"), ("bl", "BLOB"), ("lb", "LONGBLOB"), ("tm", "TIME"),
    ("tm6", "TIME(6)"), ("yr", "YEAR"), ("d", "DATE"), ("dt0", "DATETIME"), ("dt3", "DATETIME(3)"),
    ("dt6", "DATETIME(6)"), ("ts0", "TIMESTAMP NULL"), ("ts6", "TIMESTAMP(6) NULL"), ("g", "GEOMETRY"),
    ("pt", "POINT"), ("ls", "LINESTRING"), ("poly", "POLYGON"), ("mp", "MULTIPOINT"), ("gc", "GEOMETRYCOLLECTION"),
    ("s", "VARCHAR(100)"), ("c", "CHAR(5)"), ("tx", "TEXT"), ("mb4", "VARCHAR(20) CHARACTER SET utf8mb4"),
    ("l1", "VARCHAR(20) CHARACTER SET latin1"), ("ip4", "INET4"), ("ip6", "INET6"), ("uu", "UUID"),
]

DDL = "CREATE TABLE {name} (id INT NOT NULL PRIMARY KEY, " + ", ".join(f"`{n}` {t}" for n, t in COLUMNS) + ")"
# The columns of types only MariaDB has, and the fixture on MySQL without them.
MARIADB_ONLY = frozenset(name for name, ctype in COLUMNS if ctype in ("INET4", "INET6", "UUID"))
MYSQL_COLUMNS = [(name, ctype) for name, ctype in COLUMNS if name not in MARIADB_ONLY]
MYSQL_DDL = ("CREATE TABLE {name} (id INT NOT NULL PRIMARY KEY, "
             + ", ".join(f"`{n}` {t}" for n, t in MYSQL_COLUMNS) + ")")

# Each case is one row: column → SQL expression, the others NULL. Inserted with sql_mode='' (zero dates) in the
# session's own time zone, the server's: TIMESTAMPs come from FROM_UNIXTIME, an instant whatever that zone is.
CASES: list[dict[str, str]] = [
    {  # the largest values
        "i8": "127", "u8": "255", "b1": "1", "bo": "TRUE", "i16": "32767", "u16": "65535", "i24": "8388607",
        "u24": "16777215", "i32": "2147483647", "u32": "4294967295", "i64": "9223372036854775807",
        "u64": "18446744073709551615", "d10": "99999999.99", "d38": "9999999999999999999999999999.9999999999",
        "d65": "99999999999999999999999999999999999.999999999999999999999999999999", "du": "9999.9999",
        "f": "3.4028234e38", "fu": "1.17549435e-38", "db": "1.7976931348623157e308", "bit1": "b'1'",
        "bit9": "b'111111111'", "bit64": "x'FFFFFFFFFFFFFFFF'", "en": "'it''s'", "st": "'c d,b,a'",
        "js": """'{"b": [1, 2.50, "x", -0.5e-3], "a": {"z": null, "é": true, "q": "\\\\"\\\\n"}}'""",
        "bn": "x'01'", "vb": "x'00ff'", "bl": "x'000a0d27225c'", "lb": "REPEAT(x'00ff', 40000)",
        "tm": "'838:59:59'", "tm6": "'838:59:59.000000'", "yr": "2155", "d": "'9999-12-31'",
        "dt0": "'9999-12-31 23:59:59'", "dt3": "'2020-07-17 18:00:22.123'", "dt6": "'9999-12-31 23:59:59.999999'",
        "ts0": "FROM_UNIXTIME(2147483647)", "ts6": "FROM_UNIXTIME(2147483647.999999)",
        "g": "ST_GeomFromText('POLYGON((1 1, 2 1, 2 2, 1 2, 1 1))')", "pt": "ST_GeomFromText('POINT(1 1)')",
        "ls": "ST_GeomFromText('LINESTRING(3 0, 3 3, 3 5)')",
        "poly": "ST_GeomFromText('POLYGON((0 0, 10 0, 10 10, 0 10, 0 0), (5 5, 7 5, 7 7, 5 7, 5 5))')",
        "mp": "ST_GeomFromText('MULTIPOINT((1 1),(2 2))')",
        "gc": "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(10 10), LINESTRING(15 15, 20 20))')",
        "s": "'a\\0b''c\"\\nd\\\\'", "c": "'abcde'", "tx": "'tab\\there\\r\\n'", "mb4": "'😀𝄞 emoji'",
        "l1": "'café'", "ip4": "'255.255.255.255'", "ip6": "'::ffff:1.2.3.4'",
        "uu": "'ffffffff-ffff-1fff-ffff-ffffffffffff'",
    },
    {  # the smallest values, negatives, empties
        "i8": "-128", "u8": "0", "b1": "-128", "bo": "2", "i16": "-32768", "u16": "0", "i24": "-8388608",
        "u24": "0", "i32": "-2147483648", "u32": "0", "i64": "-9223372036854775808", "u64": "0",
        "d10": "-99999999.99", "d38": "-0.0000000001", "d65": "-0.000000000000000000000000000001", "du": "0",
        "f": "-1.23456789", "fu": "0", "db": "-4.9e-324", "bit1": "b'0'", "bit9": "b'000000001'",
        "bit64": "x'0000000000000000'", "en": "'red'", "st": "''", "js": "'[]'", "bn": "x'00000000'",
        "vb": "x''", "bl": "x''", "lb": "x''", "tm": "'-838:59:59'", "tm6": "'-00:00:00.000001'", "yr": "1901",
        "d": "'0001-01-01'", "dt0": "'1000-01-01 00:00:00'", "dt3": "'1582-10-10 12:00:00.001'",
        "dt6": "'1969-12-31 23:59:59.999999'", "ts0": "FROM_UNIXTIME(1)", "ts6": "FROM_UNIXTIME(1.000001)",
        "g": "ST_GeomFromText('POINT(1 2)', 4326)", "pt": "ST_GeomFromText('POINT(-0.5 1e-300)')",
        "s": "''", "c": "''", "tx": "''", "mb4": "''", "l1": "''", "ip4": "'0.0.0.0'", "ip6": "'::'",
        "uu": "'00000000-0000-0000-0000-000000000000'",
    },
    {  # zero values, and values non-strict mode turns into zero values
        "d": "'0000-00-00'", "dt0": "'0000-00-00 00:00:00'", "dt3": "'2020-00-15 10:00:00'",
        "dt6": "'2020-02-00 00:00:00'", "ts0": "'0000-00-00 00:00:00'", "yr": "0", "tm": "'00:00:00'",
        "en": "'nope'", "js": "'null'", "ip6": "'::1.2.3.4'", "bit64": "b'1'",
    },
    {},  # every column NULL
    {  # ordinary values; instants around a daylight-saving change in the server's zone
        "i32": "42", "d10": "19.99", "f": "0.1", "db": "0.1", "en": "'white'", "st": "'b'", "js": "'\"text\"'",
        "tm": "'12:34:56'", "tm6": "'-25:00:00.5'", "yr": "2024", "d": "'2024-02-29'",
        "dt0": "'2024-03-10 02:30:00'", "dt6": "'2024-11-03 01:30:00.000001'",
        "ts0": "FROM_UNIXTIME(1710052200)", "ts6": "FROM_UNIXTIME(1730619000.25)",
        "s": "'line1\\nline2'", "mb4": "'日本語 and 🎉'", "ip6": "'2001:db8::1'",
        "uu": "'123e4567-e89b-12d3-a456-426655440000'",
    },
]

# A key of (id, DATETIME, DATE, TIME) holding zero dates, as Debezium's datetime key fixture has it: the zero dates
# land as NULL (docs/types.md), and each row must still be one row in Hive. Rows 1 to 3 of id 1 differ only in
# which key part is the zero date.
ZERO_DATE_KEY_DDL = ("CREATE TABLE {name} (id INT NOT NULL, dtval DATETIME NOT NULL, dval DATE NOT NULL, "
                     "tval TIME NOT NULL, note VARCHAR(20) NULL, PRIMARY KEY (id, dtval, dval, tval))")
ZERO_DATE_KEY_ROWS = ("(1, '0000-00-00 00:00:00', '0000-00-00', '00:00:00', 'a'), "
                      "(1, '2020-01-01 00:00:00', '0000-00-00', '00:00:00', 'b'), "
                      "(1, '0000-00-00 00:00:00', '2020-01-01', '00:00:00', 'c'), "
                      "(2, '0000-00-00 00:00:00', '0000-00-00', '01:00:00', 'd'), "
                      "(3, '2021-05-05 10:00:00', '2021-05-05', '10:00:00', NULL)")
ZERO_KEY = "id = 1 AND dtval = '0000-00-00 00:00:00' AND dval = '0000-00-00' AND tval = '00:00:00'"
# Through the binlog: the all-zero row deleted and inserted again, then updated; a row whose key moves (its TIME);
# a row updated; a new one.
ZERO_DATE_KEY_CHANGES = (
    f"DELETE FROM {{name}} WHERE {ZERO_KEY}",
    "INSERT INTO {name} VALUES (1, '0000-00-00 00:00:00', '0000-00-00', '00:00:00', 'again')",
    f"UPDATE {{name}} SET note = 'updated' WHERE {ZERO_KEY}",
    "UPDATE {name} SET tval = '02:00:00', note = 'moved' WHERE id = 2",
    "UPDATE {name} SET note = 'b2' WHERE id = 1 AND dval = '0000-00-00' AND dtval = '2020-01-01 00:00:00'",
    "INSERT INTO {name} VALUES (4, '0000-00-00 00:00:00', '0000-00-00', '00:00:00', NULL)",
)


def zero_date_statements(name: str, *statements: str) -> list[str]:
    """``statements`` on the table ``name``, in a session that lets zero dates be written (the SQL mode
    without NO_ZERO_DATE, NO_ZERO_IN_DATE and strict mode): for ``server.execute``."""
    return ["SET SESSION sql_mode = ''", *(s.format(name=name) for s in statements)]


# What the type map promises for some of the values above, spelt out (docs/types.md).
PROMISED = {
    1: {"u64": Decimal("18446744073709551615"), "u32": 4294967295, "b1": 1, "bit1": True, "bit9": b"\x01\xff",
        "d65": "99999999999999999999999999999999999.999999999999999999999999999999",
        "tm": 3020399000000, "yr": 2155, "dt6": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        "ts0": dt.datetime(2038, 1, 19, 3, 14, 7), "ts6": dt.datetime(2038, 1, 19, 3, 14, 7, 999999),
        "js": '{"a":{"q":"\\"\\n","z":null,"é":true},"b":[1,2.5,"x",-0.0005]}',
        "pt": b"\x01\x01\x00\x00\x00" + struct.pack("<dd", 1, 1), "s": "a\x00b'c\"\nd\\", "mb4": "😀𝄞 emoji",
        "st": "a,b,c d", "bn": b"\x01\x00\x00\x00", "ip6": "::ffff:1.2.3.4",
        "dt3": dt.datetime(2020, 7, 17, 18, 0, 22, 123000)},
    2: {"b1": -128, "bo": 2, "bit1": False, "tm": -3020399000000, "tm6": -1, "d": dt.date(1, 1, 1),
        "d65": "-0.000000000000000000000000000001", "ts0": dt.datetime(1970, 1, 1, 0, 0, 1),
        "dt6": dt.datetime(1969, 12, 31, 23, 59, 59, 999999), "vb": b"", "st": "", "js": "[]",
        "dt3": dt.datetime(1582, 10, 10, 12, 0, 0, 1000), "ip6": "::", "bn": b"\x00\x00\x00\x00"},
    3: {"d": None, "dt0": None, "dt3": None, "dt6": None, "ts0": None, "yr": None, "tm": 0, "en": "", "js": "null",
        "ip6": "::1.2.3.4", "bit64": b"\x00\x00\x00\x00\x00\x00\x00\x01"},
    5: {"tm6": -90000500000, "dt0": dt.datetime(2024, 3, 10, 2, 30), "ts0": dt.datetime(2024, 3, 10, 6, 30),
        "ts6": dt.datetime(2024, 11, 3, 7, 30, 0, 250000), "f": float(np.float32(0.1)), "db": 0.1},
}


def insert_cases(server, table: str, first_id: int, without: frozenset[str] = frozenset()) -> list[int]:
    """Insert every case, ids from ``first_id``, but the values of the columns ``without`` (those a server lacks);
    returns the ids."""
    conn = server.root_connection(init_command="SET SESSION sql_mode = ''")
    try:
        with conn.cursor() as cursor:
            for n, case in enumerate(CASES):
                case = {c: v for c, v in case.items() if c not in without}
                names = ", ".join(["id", *(f"`{c}`" for c in case)])
                values = ", ".join([str(first_id + n), *case.values()])
                cursor.execute(f"INSERT INTO {table} ({names}) VALUES ({values})")
    finally:
        conn.close()
    return list(range(first_id, first_id + len(CASES)))


def update_to_cases(server, table: str, first_id: int, without: frozenset[str] = frozenset()) -> list[int]:
    """Insert an all-NULL row per case first, then (in a later call) UPDATE it to the case: the after image (but
    the columns ``without``)."""
    conn = server.root_connection(init_command="SET SESSION sql_mode = ''")
    try:
        with conn.cursor() as cursor:
            for n, case in enumerate(CASES):
                case = {c: v for c, v in case.items() if c not in without}
                if case:
                    sets = ", ".join(f"`{c}` = {v}" for c, v in case.items())
                    cursor.execute(f"UPDATE {table} SET {sets} WHERE id = {first_id + n}")
    finally:
        conn.close()
    return list(range(first_id, first_id + len(CASES)))


def _oracle_select(name: str, column_type: str, mariadb: bool = True) -> str:
    t, q = ColumnType.parse(column_type), f"`{name}`"
    if t.base == "float":
        return f"CAST({q} AS DOUBLE)"
    if t.base == "bit":
        return f"HEX({q})"
    if t.base in GEOMETRIES:
        # MySQL gives a geographic SRS's coordinates (SRID 4326) latitude first unless told; stored (and in the
        # copy, as in PostGIS's EWKB) they are longitude first, as MariaDB has them.
        binary = f"ST_AsBinary({q})" if mariadb else f"ST_AsBinary({q}, 'axis-order=long-lat')"
        return f"CONCAT(ST_SRID({q}), ':', HEX({binary}))"
    if t.base == "time":
        return f"CAST({q} AS CHAR)"  # MySQL's TIME_TO_SEC drops the fraction of a second
    if t.base == "timestamp":
        return f"UNIX_TIMESTAMP({q})"
    if t.base in ("date", "datetime", "inet4", "inet6", "uuid") or (t.base == "decimal" and t.decimal[0] > 38):
        return f"CAST({q} AS CHAR)"
    return q


def _oracle_value(column_type: str, value: Any) -> Any:
    """The server's answer (from ``_oracle_select``) in the form the Hive table must hold."""
    if value is None:
        return None
    t = ColumnType.parse(column_type)
    base = t.base
    if base == "float":
        return float(np.float32(value))
    if base == "bit":
        number = int(value, 16)
        return number != 0 if t.bits == 1 else number.to_bytes((t.bits + 7) // 8, "big")
    if base in GEOMETRIES:
        srid, wkb = value.split(":")
        wkb = bytes.fromhex(wkb)
        if int(srid):  # EWKB: the SRID flag on the type, the SRID after it (little-endian, as the server writes)
            kind = struct.unpack("<I", wkb[1:5])[0]
            return wkb[:1] + struct.pack("<II", kind | 0x20000000, int(srid)) + wkb[5:]
        return wkb
    if base == "time":  # [-]H:MM:SS[.ffffff]
        sign = -1 if value.startswith("-") else 1
        hours, minutes, seconds = value.lstrip("-").split(":")
        return sign * int((int(hours) * 3600 + int(minutes) * 60 + Decimal(seconds)) * 1_000_000)
    if base == "timestamp":
        return None if Decimal(value) == 0 else dt.datetime(1970, 1, 1) + dt.timedelta(
            microseconds=int(Decimal(value) * 1_000_000))
    if base in ("date", "datetime"):
        day = value[:10]
        if day[:4] == "0000" or day[5:7] == "00" or day[8:10] == "00":
            return None
        return dt.date.fromisoformat(day) if base == "date" else dt.datetime.fromisoformat(value)
    if base == "year":
        return None if value == 0 else value
    if base == "json":
        return json.dumps(json.loads(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if base == "bigint" and t.unsigned:
        return Decimal(value)
    return value


def oracle_rows(server, header: RawHeader) -> dict[tuple, dict]:
    """The table as Hive must hold it, by key, with Hive's lower-case names."""
    from airflow_cdc_testing.server import Product

    mariadb = server.product is not Product.MYSQL
    exprs = ", ".join(_oracle_select(name, ctype, mariadb) for name, ctype in header.columns)
    conn = server.root_connection()
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT {exprs} FROM {header.table}")
            rows = cursor.fetchall()
    finally:
        conn.close()
    result = {}
    for row in rows:
        values = {name.lower(): _oracle_value(ctype, v) for (name, ctype), v in zip(header.columns, row)}
        result[tuple(values[k.lower()] for k in header.key)] = values
    return result


def differences(expected: dict[tuple, dict], actual: dict[tuple, dict]) -> list[str]:
    """Every (row, column) whose values differ, spelt out; an empty list when the tables are equal."""
    problems = [f"row {k}: missing" for k in expected if k not in actual]
    problems += [f"row {k}: not expected" for k in actual if k not in expected]
    for key in expected.keys() & actual.keys():
        for column, value in expected[key].items():
            got = actual[key].get(column)
            if got != value or type(got) is not type(value):
                problems.append(f"row {key} column {column}: expected {value!r:.120}, got {got!r:.120}")
    return sorted(problems)
