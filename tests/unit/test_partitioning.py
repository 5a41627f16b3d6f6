"""Partition specs (``core.partitioning``): the text parsed or refused with its reason, bound to a table's columns,
and the partition value of a row over the values the capture stages give, edge cases first."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from airflow_cdc_provider.core.model import Model
from airflow_cdc_provider.core.partitioning import (
    NULL_PARTITION,
    BadPartitionSpec,
    Partitioning,
    PartitionSpec,
    Transform,
    metastore_value,
    table_partitioning,
)

COLUMNS = [("id", "bigint"), ("created_at", "datetime(6)"), ("paid_at", "timestamp(3)"), ("born", "date"),
           ("region", "varchar(32)"), ("kind", "enum('a','bb')"), ("small", "tinyint"), ("big_u", "bigint unsigned"),
           ("price", "decimal(12,2)"), ("ratio", "double"), ("doc", "json"), ("note", "text"),
           ("long_name", "varchar(255)"), ("made", "year"), ("took", "time(6)"), ("raw", "varbinary(16)"),
           ("Order Date", "date")]


def resolved(text: str, zone: str = "UTC") -> Partitioning:
    return PartitionSpec.parse(text).resolve(COLUMNS, zone)


@pytest.mark.parametrize(("text", "transform", "source", "argument", "column"), [
    ("region", Transform.IDENTITY, "region", None, "region_part"),
    ("year(created_at)", Transform.YEAR, "created_at", None, "dt"),
    ("month(created_at)", Transform.MONTH, "created_at", None, "dt"),
    ("day(created_at)", Transform.DAY, "created_at", None, "dt"),
    ("hour(created_at)", Transform.HOUR, "created_at", None, "dt"),
    ("truncate(id, 1000000)", Transform.TRUNCATE, "id", 1000000, "id_trunc"),
    ("bucket(id, 64)", Transform.BUCKET, "id", 64, "id_bucket"),
    ("  DAY ( created_at )  as  ds ", Transform.DAY, "created_at", None, "ds"),
    ("bucket(`Order Date`, 8) AS od", Transform.BUCKET, "Order Date", 8, "od"),
    ("`we``ird` AS w", Transform.IDENTITY, "we`ird", None, "w"),
    ("truncate(id, 9223372036854775807)", Transform.TRUNCATE, "id", 2**63 - 1, "id_trunc"),
])
def test_the_accepted_forms_parse_into_their_parts(text, transform, source, argument, column):
    spec = PartitionSpec.parse(text)
    assert (spec.transform, spec.source, spec.argument, spec.column) == (transform, source, argument, column)
    assert isinstance(spec, Model) and PartitionSpec.from_text(spec.to_text()) == spec
    assert PartitionSpec.parse(spec.text) == spec  # the canonical spelling reads back as itself


@pytest.mark.parametrize(("text", "says"), [
    ("days(created_at)", "days(…) is Spark's spelling: write day(column)"),
    ("hours(created_at)", "write hour(column)"),
    ("bucket(16, id)", "the number comes after the column (Spark's order is the other way round): write bucket(id, 16)"),
    ("truncate(10, id)", "write truncate(id, 10)"),
    ("identity(id)", "an identity partition is the bare column"),
    ("week(created_at)", "'week' is not a transform"),
    ("day(created_at, 3)", "day takes day(column); found 'created_at , 3'"),
    ("bucket(id)", "bucket takes bucket(column, count); found 'id'"),
    ("truncate(id, x)", "truncate takes truncate(column, width)"),
    ("bucket(id, 0)", "the number of buckets is 0; it must be from 1 to 2147483647"),
    ("bucket(id, 2147483648)", "it must be from 1 to 2147483647"),
    ("truncate(id, 9223372036854775808)", "the width is 9223372036854775808"),
    ("bucket(id, -4)", "found '-4)', where a name, a number"),
    ("day(created_at)); DROP TABLE t; --", "found ';"),
    ("day(concat(a, b))", "found 'concat ( a , b )' between the parentheses"),
    ("`open", "(a backtick left open)"),
    ("region, id", "found 'region , id', which is neither a column nor a transform"),
    ("day(created_at) as", "neither a column nor a transform"),
    ("day(created_at) AS Dt", "the partition column's name 'Dt' is not lower-case letters, digits and _"),
    ("day(created_at) AS `d-t`", "'d-t' is not lower-case"),
    ("`Order Date`", "the partition column's default name would be 'order date_part'"),
    ("   ", "is empty"),
])
def test_anything_else_is_refused_naming_the_text_what_was_found_and_the_forms(text, says):
    with pytest.raises(BadPartitionSpec) as raised:
        PartitionSpec.parse(text)
    message = str(raised.value)
    assert repr(text) in message and says in message
    assert "The accepted forms are column, year(column), month(column), day(column), hour(column), " \
           "truncate(column, width), bucket(column, count)" in message


def test_a_spec_that_is_not_text_is_refused():
    with pytest.raises(BadPartitionSpec, match="is empty"):
        PartitionSpec.parse(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "hive_type"), [
    ("region", "string"), ("small", "tinyint"), ("big_u", "decimal(20,0)"), ("born", "date"), ("made", "smallint"),
    ("kind", "string"), ("year(born)", "string"), ("hour(paid_at)", "string"), ("truncate(small, 10)", "bigint"),
    ("truncate(big_u, 10)", "decimal(20,0)"), ("bucket(price, 4)", "int"), ("bucket(note, 4)", "int"),
])
def test_each_partition_column_has_its_hive_type(text, hive_type):
    assert resolved(text).hive_type == hive_type


@pytest.mark.parametrize(("text", "says"), [
    ("day(id)", "'id' of type bigint: the column holds no date. day takes DATE, DATETIME or TIMESTAMP."),
    ("hour(born)", "'born' of type date: a DATE has no hour. hour takes DATETIME or TIMESTAMP."),
    ("truncate(price, 10)", "'price' of type decimal(12,2): the column is not an integer. truncate takes an integer"),
    ("truncate(region, 3)", "of type varchar(32): the column is not an integer"),
    ("bucket(ratio, 8)", "'ratio' of type double: approximate numbers"),
    ("bucket(doc, 8)", "'doc' of type json"),
    ("created_at", "'created_at' of type datetime(6): a partition per instant would hold a row or two each: "
                   "partition by day(column) or hour(column)"),
    ("note", "'note' of type text: its values are not exact, short or few enough"),
    ("ratio", "of type double"),
    ("long_name", "'long_name' of type varchar(255): its values reach 255 characters, more than a partition "
                  "value may hold (200)"),
])
def test_a_column_type_the_transform_does_not_take_is_refused_naming_column_type_and_the_accepted(text, says):
    with pytest.raises(BadPartitionSpec) as raised:
        resolved(text)
    assert says in str(raised.value)
    assert "takes" in str(raised.value)


def test_a_column_the_table_lacks_or_a_partition_column_named_like_one_is_refused():
    with pytest.raises(BadPartitionSpec, match=r"names the column 'nope', which the table does not have \(its "
                                                r"columns: id, created_at"):
        resolved("day(nope)")
    with pytest.raises(BadPartitionSpec, match="names its partition column 'id', which the table has as a column "
                                                r"\('id'\).*write `day\(created_at\) AS another_name`"):
        resolved("day(created_at) AS id")
    with pytest.raises(BadPartitionSpec, match=r"partition column 'od', which the table has as a column \('OD'\)"):
        resolved("bucket(id, 4) AS od").spec.resolve([("id", "int"), ("OD", "int")])
    with pytest.raises(BadPartitionSpec, match="not a zone name"):
        resolved("day(created_at)", "Mars/Olympus")


def test_a_binding_keeps_the_zone_only_for_a_source_whose_values_it_changes():
    assert resolved("day(created_at)", "Asia/Shanghai").time_zone == "Asia/Shanghai"
    assert resolved("bucket(created_at, 4)", "Asia/Shanghai").time_zone == "Asia/Shanghai"
    assert resolved("bucket(paid_at, 4)", "Asia/Shanghai") == resolved("bucket(paid_at, 4)")  # its UTC text
    assert resolved("day(born)", "Asia/Shanghai") == resolved("day(born)")
    assert resolved("bucket(id, 4)", "Asia/Shanghai") == resolved("bucket(id, 4)")
    assert resolved("bucket(id, 4)") != resolved("bucket(id, 8)")


def test_a_table_is_refused_by_name_with_what_to_do_when_its_spec_does_not_fit_its_columns():
    assert table_partitioning("shop.orders", None, COLUMNS, "Asia/Shanghai") is None
    bound = table_partitioning("shop.orders", PartitionSpec.parse("day(created_at)"), COLUMNS, "Asia/Shanghai")
    assert bound == resolved("day(created_at)", "Asia/Shanghai") and bound.time_zone == "Asia/Shanghai"
    for text, says in [("day(placed_at)", "names the column 'placed_at', which the table does not have"),
                       ("day(region)", "cannot partition by the column 'region' of type varchar(32)"),
                       ("bucket(small, 4) AS id", "names its partition column 'id', which the table has")]:
        with pytest.raises(BadPartitionSpec) as refused:
            table_partitioning("shop.orders", PartitionSpec.parse(text), COLUMNS, "UTC")
        message = str(refused.value)
        assert message.startswith("The table shop.orders cannot be partitioned as its `partition_by:` says: ")
        assert says in message and "Change or remove the `partition_by:` of the table entry" in message


def test_a_column_is_found_whatever_its_case_an_exact_match_first():
    assert resolved("DAY(Created_At)").source_column == "created_at"
    both = [("Id", "int"), ("id", "varchar(10)")]
    assert PartitionSpec.parse("id").resolve(both).source_type == "varchar(10)"


def test_a_bound_spec_refuses_to_be_built_with_a_type_its_transform_does_not_take():
    with pytest.raises(ValueError, match="holds no date"):
        Partitioning(spec=PartitionSpec.parse("day(x)"), source_column="x", source_type="int")


# --- the value of a row ----------------------------------------------------------------------------------

def test_null_and_zero_dates_land_in_the_null_partition_for_every_transform():
    # A zero date is NULL by the time a row reaches here (core.values), on both ways in.
    for text in ("region", "year(born)", "month(created_at)", "day(paid_at)", "hour(created_at)",
                 "truncate(id, 10)", "bucket(id, 16)", "bucket(born, 16)"):
        assert resolved(text).value(None) is None, text
    assert resolved("region").value("") is None  # as Hive and Spark store an empty partition string
    assert metastore_value(None) == NULL_PARTITION == "__HIVE_DEFAULT_PARTITION__"


def test_the_time_transforms_give_fixed_width_texts_across_year_boundaries():
    last = dt.datetime(2026, 12, 31, 23, 59, 59, 999999)
    first = last + dt.timedelta(microseconds=1)
    texts = [(resolved(f"{t}(created_at)").value(last), resolved(f"{t}(created_at)").value(first))
             for t in ("year", "month", "day", "hour")]
    assert texts == [("2026", "2027"), ("2026-12", "2027-01"), ("2026-12-31", "2027-01-01"),
                     ("2026-12-31-23", "2027-01-01-00")]
    assert resolved("day(born)").value(dt.date(1, 1, 1)) == "0001-01-01"
    assert resolved("month(born)").value(dt.date(2024, 2, 29)) == "2024-02"
    assert resolved("year(born)").value(dt.date(9999, 12, 31)) == "9999"
    assert resolved("hour(created_at)").value(dt.datetime(9999, 12, 31, 23, 59, 59)) == "9999-12-31-23"


def test_in_utc_a_datetime_partitions_by_its_digits_and_a_timestamp_by_its_utc_instant():
    value = dt.datetime(2026, 11, 25, 23, 30)  # a TIMESTAMP arrives as naive UTC
    assert resolved("day(created_at)").value(value) == "2026-11-25"
    assert resolved("day(paid_at)").value(value) == "2026-11-25"


def test_in_a_readers_zone_a_timestamp_partitions_by_the_time_shown_there_a_datetime_by_its_digits():
    shanghai = dt.datetime(2026, 11, 25, 16, 30)  # 00:30 the next day in Shanghai
    assert resolved("day(paid_at)", "Asia/Shanghai").value(shanghai) == "2026-11-26"
    assert resolved("day(created_at)", "Asia/Shanghai").value(shanghai) == "2026-11-25"
    assert resolved("day(born)", "Asia/Shanghai").value(dt.date(2026, 11, 25)) == "2026-11-25"


def test_a_datetime_the_zone_skips_partitions_as_the_time_after_the_gap_that_hive_holds():
    hour = resolved("hour(created_at)", "America/New_York")
    assert hour.value(dt.datetime(2026, 3, 8, 2, 30)) == "2026-03-08-03"  # skipped: held as 03:30
    assert hour.value(dt.datetime(2026, 3, 8, 1, 59)) == "2026-03-08-01"
    assert hour.value(dt.datetime(2026, 11, 1, 1, 30)) == "2026-11-01-01"  # happens twice: its digits
    assert resolved("hour(created_at)").value(dt.datetime(2026, 3, 8, 2, 30)) == "2026-03-08-02"  # UTC: none
    # The merge counts such rows; a bucket of the column follows the digits Hive holds as well.
    bucket = resolved("bucket(created_at, 1000)", "America/New_York")
    assert bucket.value(dt.datetime(2026, 3, 8, 2, 30)) == bucket.value(dt.datetime(2026, 3, 8, 3, 30))
    assert resolved("day(created_at)", "America/New_York").value(dt.datetime(9999, 12, 31, 23, 0)) == "9999-12-31"
    assert resolved("day(created_at)", "Pacific/Kiritimati").value(dt.datetime(1, 1, 1, 0, 0)) == "0001-01-01"


@pytest.mark.parametrize(("value", "lower"), [
    (0, 0), (9, 0), (10, 10), (-1, -10), (-10, -10), (-11, -20), (123456789, 123456780),
    (2**63 - 1, 9223372036854775800), (-(2**63) + 8, -9223372036854775800),
])
def test_truncate_takes_the_floor_of_the_range_as_iceberg_does_not_truncation_toward_zero(value, lower):
    assert resolved("truncate(id, 10)").value(value) == lower


def test_a_range_whose_lower_bound_a_bigint_cannot_hold_is_the_null_partition():
    assert resolved("truncate(id, 10)").value(-(2**63)) is None  # its range starts at -2**63 - 8
    assert resolved("truncate(id, 2)").value(-(2**63)) == -(2**63)
    assert resolved("truncate(small, 100)").value(-128) == -200  # a bigint partition column: no overflow
    unsigned = resolved("truncate(big_u, 1000000)")
    assert unsigned.value(2**64 - 1) == Decimal(18446744073709000000)
    assert isinstance(unsigned.value(5), Decimal)


def test_a_bucket_is_crc32_of_the_columns_text_modulo_the_count_as_verify_and_the_server_compute_it():
    # CRC-32 of "123456789" is 0xCBF43926 (the algorithm's check value); MariaDB's CRC32() gives the same.
    assert 0xCBF43926 % 64 == 38
    assert resolved("bucket(id, 64)").value(123456789) == 38
    assert resolved("bucket(region, 64)").value("123456789") == 38
    assert resolved("bucket(big_u, 64)").value(123456789) == 38
    assert resolved("bucket(price, 7)").value(Decimal("-1.50")) == resolved("bucket(region, 7)").value("-1.50")
    assert resolved("bucket(born, 7)").value(dt.date(26, 1, 2)) == resolved("bucket(region, 7)").value("0026-01-02")
    assert resolved("bucket(took, 7)").value(dt.timedelta(seconds=-1)) == resolved("bucket(region, 7)").value(
        "-1000000")
    assert resolved("bucket(raw, 7)").value(b"\x00\xff") == resolved("bucket(region, 7)").value("00FF")
    assert resolved("bucket(price, 7)").value(Decimal("1.5")) == resolved("bucket(region, 7)").value("1.50")
    spread = {resolved("bucket(id, 16)").value(i) for i in range(1000)}
    assert spread == set(range(16))


def test_identity_keeps_the_value_in_its_hive_type():
    assert resolved("region").value("EU west") == "EU west"
    assert resolved("small").value(-128) == -128
    assert resolved("big_u").value(2**64 - 1) == Decimal("18446744073709551615")
    assert resolved("born").value(dt.date(2026, 11, 25)) == dt.date(2026, 11, 25)
    assert resolved("made").value(2155) == 2155


def test_the_metastore_holds_each_value_as_its_text():
    assert [metastore_value(v) for v in ("2026-11-25", -10, Decimal("18446744073709000000"), dt.date(1, 2, 3))] \
        == ["2026-11-25", "-10", "18446744073709000000", "0001-02-03"]
