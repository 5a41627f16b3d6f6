"""A heal's digests of a Hive version: how each key column type travels from Spark to the digests file, the
digests job's checks, and the digests file made of the job's output (part files written here as the job writes
them: no Spark)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from airflow_cdc_provider.core.merge import VersionRefused
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.shards import Shard
from airflow_cdc_provider.core.types import arrow_type
from airflow_cdc_provider.core.version_digests import (
    Carriage,
    DigestsJob,
    DigestsJobs,
    KeyNotCarried,
    carriage_problem,
    key_carriage,
)
from airflow_cdc_provider.stages.diff import digests_schema
from airflow_cdc_provider.stages.version_digests import NoDigests, digests_file_from_spark

WAREHOUSE = "/srv/cdc/warehouse"


@pytest.mark.parametrize(("column_type", "how", "spark_type"), [
    ("tinyint", "value", "tinyint"), ("tinyint(1)", "value", "tinyint"), ("smallint unsigned", "value", "int"),
    ("int", "value", "int"), ("int unsigned", "value", "bigint"), ("bigint", "value", "bigint"),
    ("bigint unsigned", "value", "decimal(20,0)"), ("bigint(20) unsigned zerofill", "value", "decimal(20,0)"),
    ("decimal(12,3)", "value", "decimal(12,3)"), ("decimal(65,30)", "value", "string"),
    ("float", "value", "float"), ("double", "value", "double"), ("bit(1)", "value", "boolean"),
    ("bit(9)", "value", "binary"), ("varchar(20)", "value", "string"), ("char(3)", "value", "string"),
    ("enum('a','b')", "value", "string"), ("set('a','b')", "value", "string"), ("uuid", "value", "string"),
    ("binary(16)", "value", "binary"), ("varbinary(8)", "value", "binary"), ("date", "value", "date"),
    ("year", "value", "smallint"), ("time(6)", "value", "bigint"), ("time", "value", "bigint"),
    ("datetime(6)", "wall_clock_text", "string"), ("datetime", "wall_clock_text", "string"),
    ("timestamp(6)", "utc_text", "string"), ("timestamp", "utc_text", "string"),
])
def test_each_key_type_travels_as_its_value_or_as_its_text_and_lands_in_the_capture_files_type(column_type, how,
                                                                                              spark_type):
    assert key_carriage(column_type) == Carriage(how, spark_type, arrow_type(column_type))


def test_the_file_types_are_the_capture_files_a_time_a_duration_an_instant_in_utc():
    assert key_carriage("time(6)").file_type == pa.duration("us")
    assert key_carriage("datetime(6)").file_type == pa.timestamp("us")
    assert key_carriage("timestamp(6)").file_type == pa.timestamp("us", tz="UTC")
    assert key_carriage("bigint unsigned").file_type == pa.decimal128(20, 0)


@pytest.mark.parametrize(("column_type", "says"), [
    ("json", "JSON"), ("vector(3)", "has no Hive mapping"), ("", "has no Hive mapping"),
])
def test_a_key_type_that_would_not_come_back_exactly_is_refused_by_name(column_type, says):
    with pytest.raises(KeyNotCarried, match=says) as caught:
        key_carriage(column_type)
    assert repr(column_type) in str(caught.value)


def test_the_heal_is_told_why_a_table_cannot_be_described_by_a_digests_file():
    columns = (("id", "int"), ("doc", "json"), ("v", "vector(3)"), ("at", "datetime(6)"))
    assert carriage_problem("shop.t", columns, ("id", "at")) is None
    found = carriage_problem("shop.t", columns, ("id", "doc", "v", "gone"))
    assert found is not None and found.startswith("The table shop.t cannot be healed")
    assert "doc: the type 'json' (JSON)" in found and "v: the type 'vector(3)' has no Hive mapping" in found
    assert "gone: not one of the table's columns" in found and "fresh_snapshot=true" in found
    assert "has no key" in (carriage_problem("shop.t", columns, ()) or "")


def digests_job(**changes) -> DigestsJob:
    fields = {"warehouse_dir": WAREHOUSE, "metastore_uri": None, "table": "ods.orders",
              "columns": (("id", "int"), ("at", "datetime(6)")), "key": ("id", "at"), "mariadb": True,
              "time_zone": "Europe/Paris", "location": f"file:{WAREHOUSE}/ods.db/orders/v000003",
              "out": "/srv/cdc/work/ods.orders/runs/r/heal/version-digests"}
    return DigestsJob.model_validate_json(json.dumps({**fields, **changes}))


@pytest.mark.parametrize(("changes", "says"), [
    ({"table": "ods.Orders"}, "must be in lower case"),
    ({"table": "ods.orders\n"}, "not a valid Hive name"),
    ({"table": "ods"}, "not a valid Hive name"),
    ({"columns": [["id`) OR 1=1 --\x00", "int"]], "key": ["id`) OR 1=1 --\x00"]}, "NUL character"),
    ({"columns": [["id", "int"], ["at", "datetime; DROP"]]}, "Cannot read the column type"),
    ({"key": []}, "non-empty subset"),
    ({"key": ["id", "gone"]}, "non-empty subset"),
    ({"key": ["id", "id"]}, "non-empty subset"),
    ({"columns": [["id", "int"], ["doc", "json"]], "key": ["id", "doc"]}, "doc: the type 'json' \\(JSON\\)"),
    ({"time_zone": "UTC', 'x"}, "not a zone name"),
    ({"location": f"file:{WAREHOUSE}/ods.db/customers/v000003"}, "not a version directory of the table orders"),
    ({"location": f"file:{WAREHOUSE}/ods.db/orders"}, "not a version directory of the table orders"),
    ({"location": "file:/etc/orders/v000003"}, "not under the warehouse"),
    ({"out": "relative/dir"}, "neither an absolute path nor a URI"),
    ({"out": "/srv/cdc/work/./x"}, r"`\.` or `\.\.` segment"),
    ({"out": f"{WAREHOUSE}/ods.db/orders/v000004"}, "in the warehouse"),
    ({"out": "/srv/cdc"}, "or holds it"),
])
def test_a_digests_job_whose_names_key_or_locations_break_the_rules_is_refused(changes, says):
    assert digests_job().table == "ods.orders"
    with pytest.raises(Exception, match=says):  # pydantic passes on what is not a ValueError
        digests_job(**changes)


def test_a_shards_job_reads_its_own_partitions_versions_only():
    shard = Shard(source_schema="shop_01", source_table="orders")
    own = f"file:{WAREHOUSE}/ods.db/orders/_source_schema=shop_01/_source_table=orders/v000002"
    job = digests_job(shard=shard.model_dump(), location=own)
    assert job.versions_of == "orders/_source_schema=shop_01/_source_table=orders"
    with pytest.raises(ValidationError, match="not a version directory"):
        digests_job(shard=shard.model_dump())  # the whole table's version, not the shard's
    jobs = DigestsJobs(jobs=(job, digests_job()))
    assert DigestsJobs.from_text(jobs.to_text()) == jobs


def test_a_version_written_for_another_zone_is_not_described_in_this_one():
    job = digests_job()  # Europe/Paris, a DATETIME column
    assert job.version_zone_problem("Europe/Paris") is None
    found = job.version_zone_problem("UTC")
    assert found is not None and "written for readers in UTC, but `hive: time_zone:` is now Europe/Paris" in found
    # With no DATETIME, the zone changes nothing of the texts.
    plain = digests_job(columns=[["id", "int"], ["paid", "timestamp(6)"]], key=["id"])
    assert plain.version_zone_problem("UTC") is None


# --- the digests file of the job's output ------------------------------------------------------------------

HEADER = RawHeader("shop.orders", (("region", "varchar(8)"), ("id", "bigint unsigned"), ("at", "datetime(6)"),
                                   ("paid", "timestamp(6)"), ("took", "time(6)"), ("note", "text")),
                   ("region", "id", "at", "paid", "took"))


def spark_output(directory, rows: dict[str, list], complete: bool = True, parts: int = 2) -> None:
    """Part files as the digests job writes them (Spark's types: a TIME's bigint, texts for times)."""
    directory.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("_key0", pa.string()), ("_key1", pa.decimal128(20, 0)), ("_key2", pa.string()),
                        ("_key3", pa.string()), ("_key4", pa.int64()), ("_hash", pa.int64()),
                        ("_digest", pa.int64())])
    table = pa.table(rows, schema=schema)
    size = -(-len(table) // parts)
    for n in range(parts):
        pq.write_table(table.slice(n * size, size), directory / f"part-0000{n}-x-c000.snappy.parquet")
        (directory / f".part-0000{n}-x-c000.snappy.parquet.crc").write_bytes(b"\x00junk")
    if complete:
        (directory / "_SUCCESS").write_text("")


ROWS = {"_key0": ["eu", "é€", "us"], "_key1": [Decimal(0), Decimal(2**64 - 1), Decimal(7)],
        "_key2": ["0001-01-01 00:00:00.000000", "9999-12-31 23:59:59.999999", None],  # None: a zero date
        "_key3": ["1970-01-01 00:00:01.000001", "2038-01-19 03:14:07.999999", "2024-03-10 07:30:00.000000"],
        "_key4": [-3020399000000, 0, 1], "_hash": [-1, 0, 2**63 - 1], "_digest": [-(2**63), 5, -2]}


def test_the_digests_file_has_the_capture_files_types_and_the_servers_unsigned_bits(tmp_path):
    spark_output(tmp_path / "spark", ROWS)
    out = tmp_path / "digests" / "version-digests.parquet"
    assert digests_file_from_spark(tmp_path / "spark", HEADER, out) == 3
    written = pq.read_table(out)
    assert written.schema == digests_schema(HEADER) and not (tmp_path / "digests" / "version-digests.parquet.tmp").exists()
    assert written.to_pylist() == [
        {"region": "eu", "id": Decimal(0), "at": dt.datetime(1, 1, 1), "paid": dt.datetime(1970, 1, 1, 0, 0, 1, 1, dt.UTC),
         "took": dt.timedelta(microseconds=-3020399000000), "_hash": 2**64 - 1, "_digest": 2**63},
        {"region": "é€", "id": Decimal(2**64 - 1), "at": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
         "paid": dt.datetime(2038, 1, 19, 3, 14, 7, 999999, dt.UTC), "took": dt.timedelta(0), "_hash": 0,
         "_digest": 5},
        {"region": "us", "id": Decimal(7), "at": None, "paid": dt.datetime(2024, 3, 10, 7, 30, tzinfo=dt.UTC),
         "took": dt.timedelta(microseconds=1), "_hash": 2**63 - 1, "_digest": 2**64 - 2}]
    # The files fetched from the directory give the same file.
    fetched = sorted((tmp_path / "spark").glob("*.parquet"))
    assert digests_file_from_spark(fetched, HEADER, tmp_path / "again.parquet") == 3
    assert pq.read_table(tmp_path / "again.parquet").equals(written)
    assert digests_file_from_spark(f"file://{tmp_path / 'spark'}", HEADER, tmp_path / "uri.parquet") == 3


def test_an_output_not_written_whole_refused_or_odd_is_no_digests_file(tmp_path):
    spark_output(tmp_path / "killed", ROWS, complete=False)
    with pytest.raises(FileNotFoundError, match="hold no _SUCCESS"):
        digests_file_from_spark(tmp_path / "killed", HEADER, tmp_path / "d.parquet")
    (tmp_path / "refused").mkdir()
    (tmp_path / "refused" / "_refused").write_text("The version at x is not read as the table orders: …")
    with pytest.raises(VersionRefused, match="is not read as the table orders"):
        digests_file_from_spark(tmp_path / "refused", HEADER, tmp_path / "d.parquet")
    with pytest.raises(VersionRefused):
        digests_file_from_spark([tmp_path / "refused" / "_refused"], HEADER, tmp_path / "d.parquet")
    with pytest.raises(NoDigests, match="wrote no part files"):
        digests_file_from_spark([], HEADER, tmp_path / "d.parquet")
    spark_output(tmp_path / "odd", {**ROWS, "_key2": ["2024-01-01 00:00:00", None, None]})
    with pytest.raises(ValueError, match="'2024-01-01 00:00:00' for the key column at"):
        digests_file_from_spark(tmp_path / "odd", HEADER, tmp_path / "d.parquet")
    with pytest.raises(KeyNotCarried, match="has no key"):
        digests_file_from_spark(tmp_path / "odd", RawHeader("shop.log", HEADER.columns, ()), tmp_path / "d.parquet")
    assert not (tmp_path / "d.parquet").exists()
