"""The type map and the value rules of both ways in, on values as PyMySQL and the binlog reader give them."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import struct
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.types import (
    ColumnType,
    UnsupportedColumnName,
    UnsupportedType,
    arrow_table,
    arrow_type,
    check_columns,
    hive_type,
    json_checked_columns,
)
from airflow_cdc_provider.core.values import (
    binlog_normaliser,
    canonical_json,
    inet6_text,
    snapshot_normaliser,
    snapshot_select,
    standard_wkb,
)


@pytest.mark.parametrize(("column_type", "hive"), [
    ("tinyint(4)", "tinyint"), ("tinyint(1)", "tinyint"), ("tinyint(3) unsigned", "smallint"),
    ("smallint(5) unsigned zerofill", "int"), ("mediumint(8) unsigned", "int"), ("int(11)", "int"),
    ("int(10) unsigned", "bigint"), ("bigint(20)", "bigint"), ("bigint(20) unsigned", "decimal(20,0)"),
    ("decimal(8,4) unsigned zerofill", "decimal(8,4)"), ("decimal(38,10)", "decimal(38,10)"),
    ("decimal(65,1)", "string"), ("decimal", "decimal(10,0)"), ("float unsigned zerofill", "float"),
    ("double", "double"), ("bit(1)", "boolean"), ("bit(64)", "binary"), ("enum('red','white')", "string"),
    ("set('a','b')", "string"), ("json", "string"), ("binary(16)", "binary"), ("longblob", "binary"),
    ("multipolygon", "binary"), ("geomcollection", "binary"), ("time", "bigint"), ("time(3)", "bigint"),
    ("year(4)", "smallint"), ("date", "date"), ("datetime(6)", "timestamp"), ("timestamp(3)", "timestamp"),
    ("varchar(0)", "string"), ("char(3)", "string"), ("longtext", "string"), ("inet6", "string"),
    ("inet4", "string"), ("uuid", "string"),
])
def test_every_type_has_its_hive_type(column_type, hive):
    assert hive_type(column_type) == hive


def test_a_type_without_mapping_is_named_with_its_column():
    with pytest.raises(UnsupportedType, match=r"shop.t has columns whose type has no Hive mapping: v vector\(3\)"):
        check_columns("shop.t", [("id", "int(11)"), ("v", "vector(3)")])
    check_columns("shop.t", [("id", "int(11)"), ("j", "json")])


def test_a_column_name_hive_cannot_hold_is_named_with_its_character():
    with pytest.raises(UnsupportedColumnName) as err:
        check_columns("shop.t", [("id", "int(11)"), ("a,b", "int"), ("v", "vector(3)")])
    assert "shop.t" in str(err.value) and "'a,b' holds a comma (',')" in str(err.value)
    assert "Rename the column at the source" in str(err.value)
    assert not isinstance(err.value, UnsupportedType) and isinstance(err.value, CdcError)  # no retry repeats it
    # Anything else MySQL allows in a name is carried.
    check_columns("shop.t", [("x`) AS STRING)||(SELECT 1)||CAST((`", "int"), ("a.b", "int"), ("sp ace", "int"),
                             ("q'uote", "int"), ('dq"uote', "int"), ("co:lon;semi", "int"), ("pct%s", "int")])


def test_column_type_parts():
    assert ColumnType.parse("SET('a','it''s','c d')").members() == ["a", "it's", "c d"]
    assert ColumnType.parse("decimal(65,30) unsigned") == ColumnType("decimal", "65,30", True)
    assert ColumnType.parse("decimal(65,30)").decimal == (65, 30)
    assert ColumnType.parse("bit").bits == 1


def test_mariadb_json_columns_are_found_by_their_check():
    clauses = ["json_valid(`doc`)", "json_valid(`we``ird`)", "`price` > 0", "json_valid(`a`) and `b` > 1"]
    assert json_checked_columns(clauses) == {"doc", "we`ird"}


def test_float_is_selected_widened_so_the_stored_float_survives():
    assert snapshot_select("f", "float unsigned") == "CAST(`f` AS DOUBLE)"
    assert snapshot_select("d", "double") == "`d`"
    # The text protocol's "1.23457" and the binlog's widened float differ as float32; the widened cast does not.
    stored = 1.2345678806304932
    as_float32 = pa.array([stored, 1.23457], pa.float32()).to_pylist()
    assert as_float32[0] == stored and as_float32[1] != stored


def _both(column_type, snapshot_value, binlog_value):
    snap, binl = snapshot_normaliser(column_type), binlog_normaliser(column_type)
    return (snap(snapshot_value) if snap else snapshot_value), (binl(binlog_value) if binl else binlog_value)


@pytest.mark.parametrize(("column_type", "snapshot_value", "binlog_value", "landed"), [
    ("bit(1)", b"\x01", "1", True),
    ("bit(1)", b"\x00", "0", False),
    ("bit(9)", b"\x01\x55", "101010101", b"\x01\x55"),
    ("set('a','b','c d')", "a,c d", {"c d", "a"}, "a,c d"),
    ("set('a','b')", "", set(), ""),
    ("binary(4)", b"\x00\x01\x00\x00", b"\x00\x01", b"\x00\x01\x00\x00"),
    ("binary(3)", b"\x00\x00\x00", "", b"\x00\x00\x00"),
    ("date", "0000-00-00", None, None),
    ("date", "2020-02-00", None, None),
    ("datetime(6)", "2020-00-15 10:00:00.000000", None, None),
    ("timestamp", "0000-00-00 00:00:00", dt.datetime(1970, 1, 1), None),
    ("timestamp(6)", dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(1970, 1, 1, 0, 0, 1),
     dt.datetime(1970, 1, 1, 0, 0, 1)),
    ("year(4)", 0, 1900, None),
    ("year(4)", 1901, 1901, 1901),
    ("decimal(65,30)", Decimal("0E-30"), Decimal("0E-30"), "0.000000000000000000000000000000"),
    ("decimal(65,1)", Decimal("34567892.1"), Decimal("34567892.1"), "34567892.1"),
    ("json", '{"b": 1, "a": [1, 2.50, "é"]}', '{"b": 1, "a": [1, 2.50, "é"]}', '{"a":[1,2.5,"é"],"b":1}'),
    ("inet4", "10.0.0.1", b"\n\x00\x00\x01", "10.0.0.1"),
    ("inet4", "0.0.0.0", "", "0.0.0.0"),
    ("inet6", "::ffff:1.2.3.4", bytes(10) + b"\xff\xff\x01\x02\x03\x04", "::ffff:1.2.3.4"),
    ("uuid", "123e4567-e89b-12d3-a456-426655440000", bytes.fromhex("123e4567e89b12d3a45642665544"),
     "123e4567-e89b-12d3-a456-426655440000"),
])
def test_both_ways_land_the_same_value(column_type, snapshot_value, binlog_value, landed):
    assert _both(column_type, snapshot_value, binlog_value) == (landed, landed)


def test_mysql_binary_json_as_the_reader_decodes_it_matches_the_servers_text():
    # MySQL prints {"a": [1, 2.5, "x"], "bé": {"k": null, "t": true}}; the reader gives bytes and a Decimal.
    decoded = {b"b\xc3\xa9": {b"t": True, b"k": None}, b"a": [1, Decimal("2.5"), b"x"]}
    text = '{"a": [1, 2.5, "x"], "bé": {"k": null, "t": true}}'
    assert canonical_json(decoded) == canonical_json(text) == '{"a":[1,2.5,"x"],"bé":{"k":null,"t":true}}'
    assert canonical_json([dt.datetime(2015, 1, 15, 23, 24, 25)]) == '["2015-01-15 23:24:25.000000"]'
    assert canonical_json(dt.timedelta(hours=-30, seconds=-1)) == '"-30:00:01.000000"'
    assert json.loads(canonical_json('"\\u0000\\n"')) == "\x00\n"


def test_json_that_is_not_json_names_the_text():
    with pytest.raises(ValueError, match="not JSON.*'{oops'"):
        canonical_json("{oops")


@pytest.mark.parametrize("address", ["::", "::1", "::1.2.3.4", "::ffff:1.2.3.4", "2001:db8::1", "fe80::1:0:0:1",
                                     "1::8", "1:0:0:2::3", "1:2:3:4:5:6:7:8", "1:0:2:3:4:5:6:7"])
def test_inet6_text_as_mariadb_prints_it(address):
    assert inet6_text(ipaddress.IPv6Address(address).packed) == address


def test_geometry_lands_as_wkb_and_keeps_a_nonzero_srid_as_ewkb():
    wkb = b"\x01" + struct.pack("<Idd", 1, 1.0, 2.0)  # POINT(1 2), little-endian
    assert standard_wkb(struct.pack("<I", 0) + wkb) == wkb
    ewkb = standard_wkb(struct.pack("<I", 4326) + wkb)
    assert ewkb[:1] == b"\x01" and struct.unpack("<II", ewkb[1:9]) == (0x20000001, 4326) and ewkb[9:] == wkb[5:]
    with pytest.raises(ValueError, match="too short"):
        standard_wkb(b"\x00\x00")


def test_normalised_values_fit_their_arrow_types():
    columns = [("bit(1)", True), ("bit(64)", b"\xff" * 8), ("decimal(65,30)", "1.5"), ("year(4)", None),
               ("bigint(20) unsigned", 18446744073709551615), ("time", dt.timedelta(hours=-838, minutes=-59)),
               ("timestamp(6)", dt.datetime(2038, 1, 19, 3, 14, 7, 999999))]
    schema = pa.schema([pa.field(f"c{i}", arrow_type(t)) for i, (t, _) in enumerate(columns)])
    table = arrow_table([[v for _, v in columns]], schema)
    assert table.to_pylist()[0]["c4"] == Decimal("18446744073709551615")
    assert table.to_pylist()[0]["c5"] == dt.timedelta(hours=-838, minutes=-59)


def test_a_value_that_does_not_fit_its_arrow_type_is_a_failure_of_the_table_naming_the_column():
    # Bytes in a string column (what the binlog reader once handed over for a ucs2 or macce column) must not
    # fail the task, and with it every table of the run.
    schema = pa.schema([pa.field("id", pa.int32()), pa.field("macce_text", arrow_type("text"))])
    with pytest.raises(CdcError, match="column macce_text does not fit its type string") as caught:
        arrow_table([[1, b"S\xe6N\x00"]], schema)
    assert type(caught.value).__name__ == "ValueOfAnotherType"


@pytest.mark.parametrize(("read", "true"), [
    (dt.timedelta(microseconds=-999999), dt.timedelta(microseconds=-1)),  # -00:00:00.000001
    (dt.timedelta(seconds=-1.5), dt.timedelta(seconds=-1.5)),
    (dt.timedelta(hours=-1, microseconds=-250000), dt.timedelta(hours=-1, microseconds=-750000)),
    (dt.timedelta(seconds=-5), dt.timedelta(seconds=-5)),  # whole seconds are read right
    (dt.timedelta(seconds=3, microseconds=1), dt.timedelta(seconds=3, microseconds=1)),
])
def test_negative_time_with_a_fraction_is_read_back_right(read, true):
    assert binlog_normaliser("time(6)")(read) == true
    assert binlog_normaliser("time") is None
