"""``core.mysql_json`` against a live MySQL 9.7: documents of every kind are written to a JSON column, the binary
values read back from the binlog's row events, and each decoded text compared with what the server prints for the
same row (``CAST(doc AS CHAR)``): equal once parsed, and equal character for character.

python-mysql-replication reads the row events; its JSON decoding is swapped, for this test only, for one that
returns the value's raw bytes.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import WriteRowsEvent

from airflow_cdc_provider.core.mysql_json import json_text

NUMBERS = [0, -1, 1, 32767, -32768, 32768, -32769, 65535, 65536, 2147483647, -2147483648, 2147483648, -2147483649,
           4294967295, 4294967296, 9223372036854775807, -9223372036854775808, 18446744073709551615,
           1e300, -0.0, 0.0, 0.1, 1.5, -2.25e-10, 5e-324, 1.7976931348623157e308, 1e15, 1e14, 1e-5, 123456789.125]

# Each document by the SQL expression that makes it, evaluated on a row of the helper table h (whose columns give
# TIMESTAMP, BLOB, BIT, BINARY and YEAR values, which have no CAST of their own).
EXPRESSIONS: dict[str, str] = {
    "nested": "JSON_OBJECT('a', JSON_ARRAY(1, JSON_OBJECT('b', JSON_ARRAY()), JSON_OBJECT(), JSON_ARRAY(JSON_ARRAY("
              "JSON_ARRAY('deep', NULL, TRUE, FALSE)))), 'keys of other lengths', JSON_OBJECT('z', 1, 'yy', 2, 'x', 3),"
              " '', '')",
    "numbers": f"CAST('{json.dumps(NUMBERS)}' AS JSON)",
    "unsigned": "JSON_ARRAY(CAST(1 AS UNSIGNED), CAST(65535 AS UNSIGNED), CAST(70000 AS UNSIGNED), "
                "CAST(4294967295 AS UNSIGNED), CAST(18446744073709551615 AS UNSIGNED))",
    "doubles": "JSON_ARRAY(1e300, -0.0e0, 0.1, 1.0e0, 1.2345678901234567e-300, 123456789012345678e0, 1e15, 1e16, "
               "1e-5, -1e-7, 1e-14, 1e-15, 1e-16, 1234567890123456.8e0, 0.30000000000000004e0)",
    "strings": "JSON_OBJECT('ключ', 'значение', 'emoji 😀', '中文 é', 'escapes', CONCAT('\"', '\\\\', CHAR(10), "
               "CHAR(9), CHAR(13), CHAR(8), CHAR(12), CHAR(0), CHAR(31), CHAR(127), '/ end'), 'empty', '')",
    "bare string": "CAST('\"a bare string, é\"' AS JSON)",
    "bare number": "CAST('42' AS JSON)",
    "bare negative int32": "CAST('-70000' AS JSON)",
    "bare double": "CAST('3.25' AS JSON)",
    "bare uint64": "CAST('18446744073709551615' AS JSON)",
    "bare true": "CAST('true' AS JSON)",
    "bare false": "CAST('false' AS JSON)",
    "bare null": "CAST('null' AS JSON)",
    "opaque object": "JSON_OBJECT('dt', CAST('2024-02-29 10:11:12.123456' AS DATETIME(6)), "
                     "'d', CAST('2024-02-29' AS DATE), 't', CAST('-838:59:59.000000' AS TIME(6)), "
                     "'dec', CAST(-12.50 AS DECIMAL(10,2)), 'ts', ts, 'dt0', CAST('2024-01-01 00:00:00' AS DATETIME), "
                     "'bin', CAST(x'00ff' AS BINARY), 'blob', b, 'bit', bt, 'binary3', bn, 'y', y, "
                     "'t+', CAST('100:02:03.000045' AS TIME(6)), 't-', CAST('-00:00:01.5' AS TIME(1)))",
    "opaque time": "CAST(CAST('12:00' AS TIME) AS JSON)",
    "opaque date": "CAST(CAST('2024-02-29' AS DATE) AS JSON)",
    "opaque datetime": "CAST(CAST('0001-01-01 00:00:00.000001' AS DATETIME(6)) AS JSON)",
    "opaque timestamp": "CAST(ts AS JSON)",
    "opaque decimal": "CAST(CAST(-12.5 AS DECIMAL(4,1)) AS JSON)",
    "opaque blob": "CAST(b AS JSON)",
    "decimals": "JSON_ARRAY(CAST(1.5 AS DECIMAL(30,20)), CAST(0 AS DECIMAL(5,0)), CAST(0.05 AS DECIMAL(5,3)), "
                "CAST(-0.001 AS DECIMAL(10,2)), CAST(123 AS DECIMAL(3,0)), CAST(-1 AS DECIMAL(1,0)), "
                "CAST(0.5 AS DECIMAL(1,1)), "
                "CAST(-123456789012345678901234567890.123456789012345678901234567890 AS DECIMAL(65,30)), "
                "CAST(99999999999999999999999999999999999.999999999999999999999999999999 AS DECIMAL(65,30)))",
    "long base64": "JSON_ARRAY(CAST(REPEAT('a', 200) AS BINARY), CAST('' AS BINARY), CAST(REPEAT('b', 57) AS BINARY))",
    # Large documents (> 64 KB): stored in the large format, with 32-bit integers inlined in their entries.
    "large array": "JSON_ARRAY(CAST(70000 AS UNSIGNED), CAST(5 AS UNSIGNED), -70000, 7, NULL, TRUE, "
                   "CAST(4294967295 AS UNSIGNED), REPEAT('x', 70000), JSON_OBJECT('k', -2147483648), "
                   "CAST('2024-02-29' AS DATE), CAST(2.5 AS DECIMAL(3,1)), 1e300)",
    "large object": "(SELECT JSON_OBJECTAGG(CONCAT('key', LPAD(n, 5, '0')), "
                    "CASE n % 4 WHEN 0 THEN n * 100000 WHEN 1 THEN CONCAT('value ', n) WHEN 2 THEN n / 7e0 "
                    "ELSE JSON_ARRAY(n, -n, JSON_OBJECT('n', n)) END) FROM numbers)",
    "large nested": "JSON_OBJECT('inner', JSON_ARRAY(REPEAT('é', 40000)), 'small', JSON_OBJECT('a', 1))",
}
LARGE = {"large array", "large object", "large nested"}

# The texts where the exact form is the point: how MySQL prints opaque dates, times and DECIMALs, and doubles.
EXACT = {
    "opaque object": '{"d": "2024-02-29", "t": "-838:59:59.000000", "y": 2024, "dt": "2024-02-29 10:11:12.123456", '
                     '"t+": "100:02:03.000045", "t-": "-00:00:01.500000", "ts": "2024-05-06 07:08:09.123000", '
                     '"bin": "base64:type15:AP8=", "bit": "base64:type16:FQ==", "dec": -12.50, '
                     '"dt0": "2024-01-01 00:00:00.000000", "blob": "base64:type252:AQI=", '
                     '"binary3": "base64:type254:YQAA"}',
    "opaque time": '"12:00:00.000000"',
    "opaque date": '"2024-02-29"',
    "opaque datetime": '"0001-01-01 00:00:00.000001"',
    "opaque timestamp": '"2024-05-06 07:08:09.123000"',
    "opaque decimal": "-12.5",
    "opaque blob": '"base64:type252:AQI="',
    "decimals": "[1.50000000000000000000, 0, 0.050, 0.00, 123, -1, 0.5, "
                "-123456789012345678901234567890.123456789012345678901234567890, "
                "99999999999999999999999999999999999.999999999999999999999999999999]",
    "doubles": "[1e300, -0.0, 0.1, 1.0, 1.2345678901234568e-300, 1.2345678901234568e17, 1e15, 1e16, 0.00001, "
               "-0.0000001, 0.00000000000001, 0.000000000000001, 1e-16, 1234567890123456.8, 0.30000000000000004]",
}


@pytest.fixture
def raw_json_values(monkeypatch):
    """python-mysql-replication hands over a JSON value's bytes (after the length prefix) instead of decoding them."""
    def read_binary_json(self, size, is_partial):
        length = self.read_uint_by_size(size)
        return self.read(length)

    monkeypatch.setattr(BinLogPacketWrapper, "read_binary_json", read_binary_json)


def test_every_kind_of_document_decodes_as_mysql_prints_it(mysql, raw_json_values):
    schema = f"json_{os.urandom(4).hex()}"
    names = list(EXPRESSIONS)
    server = mysql
    server.execute(
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, doc JSON)",
        f"CREATE TABLE {schema}.h (ts TIMESTAMP(3) NULL, b BLOB, bt BIT(5), bn BINARY(3), y YEAR)",
        f"INSERT INTO {schema}.h VALUES ('2024-05-06 07:08:09.123', x'0102', b'10101', x'61', 2024)",
    )
    # In the schema: the large object's expression reads its table `numbers` unqualified.
    server.execute(
        f"CREATE TABLE {schema}.numbers (n INT PRIMARY KEY)",
        "SET SESSION cte_max_recursion_depth = 5000",
        f"INSERT INTO {schema}.numbers WITH RECURSIVE s (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 4999)"
        " SELECT n FROM s",
        *[f"INSERT INTO {schema}.t SELECT {i}, {EXPRESSIONS[name]} FROM {schema}.h" for i, name in enumerate(names)],
        database=schema,
    )
    printed = dict(server.execute(f"SELECT id, CAST(doc AS CHAR) FROM {schema}.t"))
    assert len(printed) == len(names)

    reader = BinLogStreamReader(
        connection_settings={"unix_socket": str(server.socket_path), "user": "root", "passwd": ""},
        server_id=random.randrange(1000, 2**31), blocking=False, only_events=[WriteRowsEvent],
        only_schemas=[schema],
    )
    try:
        raw = {row["values"]["id"]: row["values"]["doc"] for event in reader if event.table == "t"
               for row in event.rows}
    finally:
        reader.close()
    assert set(raw) == set(printed)

    for i, name in enumerate(names):
        data, text = raw[i], printed[i]
        assert isinstance(data, bytes), (name, data)
        ours = json_text(data)
        assert json.loads(ours) == json.loads(text), name
        # Character for character too: the same printer's rules.
        assert ours == text, name
        if name in LARGE:
            assert data[0] in (0x01, 0x03) and len(data) > 65535, (name, data[0], len(data))
        if name in EXACT:
            assert text == EXACT[name], name
    # The kinds of value the documents were made to hold are those the binlog holds: bare scalars of each type,
    # and opaque values of each field type (the type byte after 0x0f).
    first_bytes = {names[i]: raw[i][:2] for i in raw}
    assert first_bytes["bare string"][:1] == b"\x0c" and first_bytes["bare double"][:1] == b"\x0b"
    assert first_bytes["bare uint64"][:1] == b"\x0a" and first_bytes["bare true"] == b"\x04\x01"
    assert first_bytes["opaque time"] == b"\x0f\x0b" and first_bytes["opaque date"] == b"\x0f\x0a"
    assert first_bytes["opaque datetime"] == b"\x0f\x0c" and first_bytes["opaque timestamp"] == b"\x0f\x07"
    assert first_bytes["opaque decimal"] == b"\x0f\xf6" and first_bytes["opaque blob"] == b"\x0f\xfc"
    # The large array's 32-bit integers are inlined in their entries (type byte, then the value), as only the large
    # format does: a uint32, then (after a uint16) an int32.
    large_array = raw[names.index("large array")]
    assert large_array[9:14] == b"\x08" + (70000).to_bytes(4, "little")
    assert large_array[19:24] == b"\x07" + (-70000).to_bytes(4, "little", signed=True)
    # The numbers, parsed, are Python's own (ints as ints, floats as floats).
    assert json.loads(json_text(raw[names.index("numbers")])) == NUMBERS
