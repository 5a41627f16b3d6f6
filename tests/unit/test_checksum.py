"""The Python halves of the row texts, against what MariaDB 10.11 printed for the same values."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pytest

from airflow_cdc_provider.core.checksum import (
    hive_text,
    json_normalized,
    kind_of,
    mariadb_double_text,
    source_row_text,
    source_text,
    spark_text,
    stored_geometry,
)
from airflow_cdc_provider.core.values import canonical_json, standard_wkb

# (Python's repr, CAST(double AS CHAR) on MariaDB 10.11)
DOUBLES = [
    ("0.1", "0.1"), ("1.0", "1"), ("100000000000000.0", "100000000000000"), ("1000000000000000.0", "1e15"),
    ("1e-12", "0.000000000001"), ("1e-15", "0.000000000000001"), ("1e-16", "1e-16"), ("5e-324", "5e-324"),
    ("1.5000000000000002e-08", "0.000000015000000000000002"), ("1.0000000000000001e+23", "1.0000000000000001e23"),
    ("9007199254740992.0", "9.007199254740992e15"), ("1234567890123456.8", "1234567890123456.8"),
    ("1.2345678901234566e+16", "1.2345678901234566e16"), ("-2.5e-05", "-0.000025"), ("-0.0", "0"),
    ("1.7976931348623157e+308", "1.7976931348623157e308"), ("-949.1082763671875", "-949.1082763671875"),
    ("0.10000000149011612", "0.10000000149011612"), ("666666666666666.6", "666666666666666.6"),
]


@pytest.mark.parametrize(("value", "printed"), DOUBLES)
def test_doubles_print_as_mariadb_prints_them(value, printed):
    assert mariadb_double_text(float(value)) == printed


# (the JSON as written, JSON_NORMALIZE of it on MariaDB 10.11)
NORMALIZED = [
    ('{"b":1,"a":2,"aa":3,"B":4,"é":5,"z":6}', '{"B":4.0E0,"a":2.0E0,"aa":3.0E0,"b":1.0E0,"z":6.0E0,"é":5.0E0}'),
    ("[1, -1, 0, 12345678901234567890, 1.5, -0.5e-3]", "[1.0E0,-1.0E0,0.0E0,1.234567890123456789E19,1.5E0,-5.0E-4]"),
    ('{"a":[{"c":1,"b":2}]}', '{"a":[{"b":2.0E0,"c":1.0E0}]}'),
    ("123", "1.23E2"), ("100", "1.0E2"), ("0.1", "1.0E-1"), ("1e-7", "1.0E-7"), ("-0.0", "0.0E0"),
    ("123456789012345678", "1.23456789012345678E17"), ("null", "null"), ("[]", "[]"), ("{}", "{}"),
    ("[true,false]", "[true,false]"),
]


@pytest.mark.parametrize(("written", "normalized"), NORMALIZED)
def test_json_from_the_copy_prints_as_json_normalize(written, normalized):
    # The copy holds canonical JSON (core.values), not what was written: the two must lead to the same text.
    assert json_normalized(canonical_json(written)) == normalized


def test_a_geometry_goes_back_to_the_servers_stored_form():
    wkb = b"\x01\x01\x00\x00\x00" + struct.pack("<dd", 1, 2)
    for srid in (0, 4326):
        stored = struct.pack("<I", srid) + wkb
        assert stored_geometry(standard_wkb(stored)) == stored


def test_hive_values_give_the_servers_texts():
    assert hive_text(Decimal("-0.000"), "decimal(12,3)") == "0.000"
    assert hive_text(Decimal("1.500"), "decimal(12,3)") == "1.500"
    assert hive_text(b"\x01\xff", "bit(9)") == "01FF"
    assert hive_text(True, "bit(1)") == "1"
    assert hive_text(dt.date(1, 1, 1), "date") == "0001-01-01"
    assert hive_text(dt.datetime(9, 3, 1, 10, 0, 0, 500000), "datetime(6)") == "0009-03-01 10:00:00.500000"
    aware = dt.datetime(2024, 3, 1, 11, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert hive_text(aware, "timestamp(6)") == "2024-03-01 10:00:00.000000"
    assert hive_text(-90000500000, "time(6)") == "-90000500000"
    assert hive_text(None, "int") is None
    assert hive_text('{"a":1}', "json", mariadb=False) is None


def test_each_type_has_a_text_on_both_sides():
    for ctype in ("tinyint(1)", "bigint unsigned", "decimal(65,30)", "float", "double", "bit(1)", "bit(64)",
                  "enum('a')", "set('a')", "json", "binary(4)", "blob", "point", "date", "datetime(3)",
                  "timestamp", "time(6)", "year", "inet6", "uuid", "varchar(10)"):
        assert source_text("c", ctype, mariadb=True), ctype
        assert spark_text("C", ctype, mariadb=True), ctype
    assert kind_of("decimal(65,30)") == "decimal_text" and kind_of("decimal(38,10)") == "decimal"
    assert source_text("c", "json", mariadb=False) is None and spark_text("c", "json", mariadb=False) is None
    row = source_row_text([("id", "int"), ("js", "json")], mariadb=False)
    assert row == "CONCAT_WS('#', CAST(`id` + 0 AS CHAR), CONCAT(ISNULL(`id`), ISNULL(`js`)))"
    # The flag of the text: a zero date or year has a NULL text in the copy.
    zero = source_row_text([("d", "date"), ("y", "year")], mariadb=True)
    assert "CONCAT((`d` IS NULL OR (YEAR(`d`) = 0 OR MONTH(`d`) = 0 OR DAYOFMONTH(`d`) = 0)), (`y` IS NULL OR `y` + 0 = 0))" in zero


def test_a_range_of_keys_is_an_index_range_for_composite_keys():
    from airflow_cdc_provider.core.verify import BucketSum, differing_buckets, key_range, row_differences

    assert key_range(["id"], (5,), (9,)) == ("((`id` > %s)) AND ((`id` <= %s))", [5, 9])
    sql, args = key_range(["a", "b"], (1, 2), None)
    assert sql == "((`a` > %s) OR (`a` = %s AND `b` > %s))" and args == [1, 1, 2]
    sql, args = key_range(["a", "b"], None, (3, 4))
    assert sql == "((`a` < %s) OR (`a` = %s AND `b` <= %s))" and args == [3, 3, 4]
    assert key_range(["id"], None, None) == ("", [])
    assert differing_buckets({0: BucketSum(2, 1), 1: BucketSum(1, 5)}, {0: BucketSum(2, 1)}) == [1]
    assert differing_buckets({0: BucketSum(2, 1)}, {0: BucketSum(2, 3)}) == [0]
    assert BucketSum(1, 3).plus(BucketSum(2, 2**64 - 1)) == BucketSum(3, 2**64 - 4)
    found = row_differences({"1": "a", "2": "b", "3": "c"}, {"1": "a", "2": "x", "4": "d", "5": "e"}, changed={"5"})
    assert [(d.key, d.kind) for d in found] == [("2", "different"), ("3", "missing"), ("4", "extra")]


def test_a_datetime_is_spelt_in_the_readers_zone_and_a_timestamp_in_utc():
    zoned = spark_text("at", "datetime(6)", mariadb=True, time_zone="Asia/Shanghai")
    assert zoned == "date_format(from_utc_timestamp(`at`, 'Asia/Shanghai'), 'yyyy-MM-dd HH:mm:ss.SSSSSS')"
    assert spark_text("at", "datetime(6)", mariadb=True) == "date_format(`at`, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"
    assert spark_text("at", "timestamp", mariadb=True, time_zone="Asia/Shanghai") == spark_text(
        "at", "timestamp", mariadb=True)


def test_verify_jobs_go_to_the_spark_application_and_back_as_they_were():
    from airflow_cdc_provider.core.verify import BucketSum, VerifyJob, VerifyJobs, sums_of

    sums = {0: BucketSum(3, 7), 4: BucketSum(1, 2**64 - 1)}
    job = VerifyJob("/w", "thrift://m:9083", "ods.t", (("id", "int"), ("at", "datetime")), ("id",), True, 5,
                    "file:///r.json", location="/w/ods.db/t/v3", time_zone="Europe/Paris", source=sums_of(sums),
                    detail_limit=7)
    (back,) = VerifyJobs.from_text(VerifyJobs(jobs=(job,)).to_text()).jobs
    assert back.source_sums() == sums
    assert back == job
    assert (back.columns, back.key, back.location, back.time_zone, back.detail_limit) == (
        job.columns, job.key, job.location, job.time_zone, 7)
