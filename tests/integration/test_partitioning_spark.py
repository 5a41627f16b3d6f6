"""The partition value of a row, computed by Spark over the Hive form of the capture files (``spark.partitioning``)
and by Python over the values the capture stages give (``core.partitioning``): the same value, of the same type,
for a few hundred varied values of every transform and column type, NULLs, zero dates (NULL by then), the ends of
each range, negative numbers, year boundaries, and the readers' zone's skipped and doubled hours. And verify's Spark
half over a partitioned version, against the same rows unpartitioned. One Spark session, in this process, without
Hive: nothing here needs a metastore."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_cdc_provider.core.partitioning import PartitionSpec
from airflow_cdc_provider.core.types import arrow_schema, arrow_table, hive_type
from tests.integration.hive_helpers import local_spark

COLUMNS = [("n", "int"), ("id", "bigint"), ("small", "tinyint"), ("big_u", "bigint unsigned"),
           ("Created_At", "datetime(6)"), ("paid_at", "timestamp(6)"), ("born", "date"), ("region", "varchar(32)"),
           ("kind", "enum('a','bb','c d')"), ("price", "decimal(12,2)"), ("wide", "decimal(50,10)"),
           ("took", "time(6)"), ("raw", "varbinary(16)"), ("made", "year"), ("flag", "bit(1)")]

SPECS = ["region", "small", "big_u", "born", "made", "kind",
         "year(created_at)", "month(created_at)", "day(created_at)", "hour(created_at)", "year(born)", "month(born)",
         "day(born)", "year(paid_at)", "day(paid_at)", "hour(paid_at)",
         "truncate(id, 10)", "truncate(id, 3)", "truncate(id, 1000000)", "truncate(id, 9223372036854775807)",
         "truncate(small, 7)", "truncate(big_u, 1000)", "truncate(n, 1)",
         "bucket(id, 64)", "bucket(small, 5)", "bucket(big_u, 8)", "bucket(created_at, 32)", "bucket(paid_at, 8)",
         "bucket(born, 5)", "bucket(region, 16)", "bucket(kind, 3)", "bucket(price, 8)", "bucket(wide, 8)",
         "bucket(took, 8)", "bucket(raw, 8)", "bucket(made, 4)", "bucket(flag, 5)"]

BIGINT = 2**63


def _rows(count: int) -> list[list[object]]:
    rng = random.Random(20261125)

    def one_of(*values: object) -> object:
        return rng.choice(values)

    def datetime() -> dt.datetime:
        return one_of(
            dt.datetime(rng.randint(1, 9999), 1, 1) + dt.timedelta(seconds=rng.randint(0, 364 * 86400),
                                                                  microseconds=rng.randint(0, 999999)),
            dt.datetime(2026, 3, 8, 2, rng.randint(0, 59)),  # skipped in New York
            dt.datetime(2026, 11, 1, 1, rng.randint(0, 59)),  # twice in New York
            dt.datetime(2026, 12, 31, 23, 59, 59, 999999), dt.datetime(2027, 1, 1), dt.datetime(1, 1, 1),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999))

    rows = []
    for n in range(count):
        row = [n,
               one_of(rng.randint(-10**7, 10**7), rng.randint(-BIGINT, BIGINT - 1), -BIGINT, -BIGINT + 1, BIGINT - 1,
                      -1, 0),
               rng.randint(-128, 127),
               one_of(rng.randint(0, 2**64 - 1), 2**64 - 1, 0, rng.randint(0, 10**6)),
               datetime(),
               one_of(dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7),
                      dt.datetime(1970, 1, 1) + dt.timedelta(seconds=rng.randint(1, 2**31 - 1)),
                      dt.datetime(2026, 11, 1, 5, 30), dt.datetime(2026, 3, 8, 7, 30)),
               one_of(dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2026, 12, 31), dt.date(2027, 1, 1),
                      dt.date(1582, 10, 10), dt.date(2024, 2, 29),
                      dt.date(1, 1, 1) + dt.timedelta(days=rng.randint(0, 3_652_058))),
               one_of("", "EU", "eu", "naïve café", "😀 emoji", "a#b", "NULL", "x'); --", str(rng.random())),
               one_of("a", "bb", "c d", ""),
               Decimal(rng.randint(-10**12 + 1, 10**12 - 1)) / 100,
               one_of("0.0000000001", "-1234567890123456789012345678901234567890.5", "0E-10", str(rng.random())),
               dt.timedelta(microseconds=rng.randint(-3020399000000, 3020399000000)),
               rng.randbytes(rng.randint(0, 16)),
               one_of(1901, 2155, rng.randint(1901, 2155)),
               one_of(True, False)]
        if n % 7 == 3:  # NULLs, zero dates among them (the capture stages give those as NULL)
            row = [v if i == 0 or rng.random() < 0.5 else None for i, v in enumerate(row)]
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local session for the module's tests, in UTC, with the rebase modes of the provider's jobs."""
    with local_spark("partitioning", {"spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "1",
                                      **{f"spark.sql.parquet.{mode}": "CORRECTED" for mode in (
                                          "datetimeRebaseModeInRead", "datetimeRebaseModeInWrite",
                                          "int96RebaseModeInRead", "int96RebaseModeInWrite")}}) as session:
        yield session


def _hive_rows(spark: Any, path: str, zone: str) -> Any:
    """The capture file at ``path`` as the merge reads it: Hive's names and types, DATETIMEs held for the zone."""
    from airflow_cdc_provider.spark import merge_rows

    return merge_rows.hive_frame(spark, [path], [(name, hive_type(ctype)) for name, ctype in COLUMNS],
                                 SimpleNamespace(datetime_zone=zone, datetime_columns=("created_at",)))


@pytest.mark.spark
def test_spark_and_python_give_every_row_the_same_partition_value(spark, tmp_path):
    from airflow_cdc_provider.spark.names import column
    from airflow_cdc_provider.spark.partitioning import partition_value

    rows = _rows(400)
    path = str(tmp_path / "upserts.parquet")
    pq.write_table(arrow_table(rows, arrow_schema(COLUMNS)), path)
    wrong = []
    for zone in ("UTC", "America/New_York"):
        specs = [PartitionSpec.parse(f"{text} AS p{i}").resolve(COLUMNS, zone) for i, text in enumerate(SPECS)]
        got = _hive_rows(spark, path, zone).select(column("n"), *[partition_value(p) for p in specs]).collect()
        assert len(got) == len(rows)
        position = {name.lower(): i for i, (name, _) in enumerate(COLUMNS)}
        for p in specs:  # every transform met NULL and several partitions: nothing compared in vain
            values = {row[p.column] for row in got}
            assert len(values) >= 3 and (None in values or p.source_column == "n"), (p.spec.text, values)
        for row in got:
            source = rows[row["n"]]
            for p in specs:
                value = source[position[p.source_column.lower()]]
                mine, theirs = p.value(value), row[p.column]
                if (type(mine), mine) != (type(theirs), theirs):
                    wrong.append(f"{zone} {p.spec.text} of {value!r}: Python {mine!r}, Spark {theirs!r}")
    assert wrong[:20] == []


@pytest.mark.spark
def test_verify_sums_a_partitioned_version_as_the_same_rows_unpartitioned(spark, tmp_path):
    """Verify's Spark half over a version whose partitions are spread over two version directories (one kept
    from version 1, one rewritten by version 2, one emptied by it, the NULL partition kept) gives the sums and
    row hashes it gives over the same rows in one unpartitioned version directory; a version file naming another
    table's partition is refused before anything is read."""
    from pyspark.sql import functions as F

    from airflow_cdc_provider.core.ledger import VERSION_FILE, RunRef, VersionInfo
    from airflow_cdc_provider.core.merge import VersionRefused
    from airflow_cdc_provider.core.partitioning import metastore_value
    from airflow_cdc_provider.core.verify import VerifyJob
    from airflow_cdc_provider.core.watermark import Watermark
    from airflow_cdc_provider.spark import verify_job
    from airflow_cdc_provider.spark.files import HadoopFiles
    from airflow_cdc_provider.spark.names import column
    from airflow_cdc_provider.spark.partitioning import partition_value

    path = str(tmp_path / "upserts.parquet")
    pq.write_table(arrow_table(_rows(400), arrow_schema(COLUMNS)), path)
    warehouse = tmp_path / "warehouse"
    partitioning = PartitionSpec.parse("bucket(id, 3) AS p").resolve(COLUMNS)
    first = _hive_rows(spark, path, "UTC").withColumn("p", partition_value(partitioning))
    ods = warehouse / "ods.db"
    first.write.partitionBy("p").parquet(f"file:{ods}/orders/v000001")
    # Version 2 rewrites partition 1 (every other row of it gone, the rest changed) and empties partition 2.
    rewritten = first.where("p = 1 AND n % 2 = 0").withColumn("region", F.concat(column("region"), F.lit("!")))
    rewritten.write.partitionBy("p").parquet(f"file:{ods}/orders/v000002")
    (ods / "orders" / "v000002" / "_empty" / "p=2").mkdir(parents=True)
    now = first.where("p = 0 OR p IS NULL").unionByName(rewritten).drop("p")
    now.write.parquet(f"file:{ods}/flat/v000001")

    def version(number: int, table: str, partitions: dict[Any, str] | None) -> str:
        where = ods / table / f"v{number:06d}"
        (where / VERSION_FILE).write_text(VersionInfo(
            version=number, watermark=Watermark("binlog.000001", 4, server_id=1), run=RunRef("d", "r"),
            partitioning=partitioning if partitions is not None else None,
            partitions=tuple((metastore_value(v), f"file:{ods}/orders/{d}") for v, d in (partitions or {}).items()),
        ).to_text())
        return f"file:{where}"

    kept = {0: "v000001/p=0", None: "v000001/p=__HIVE_DEFAULT_PARTITION__"}
    locations = {"partitioned": version(2, "orders", {**kept, 1: "v000002/p=1", 2: "v000002/_empty/p=2"}),
                 "unpartitioned": version(1, "flat", None),
                 "version 1": version(1, "orders", {**kept, 1: "v000001/p=1", 2: "v000001/p=2"})}
    files = HadoopFiles(spark, "")
    found = {}
    for name, location in locations.items():
        job = VerifyJob(warehouse_dir=f"file:{warehouse}", metastore_uri=None,
                        table=f"ods.{location.rsplit('/', 2)[-2]}", columns=tuple(COLUMNS), key=("n",), mariadb=True,
                        buckets=7, result_file=str(tmp_path / "result.json"), detail=tuple(range(7)),
                        location=location)
        result = verify_job.run(spark, job, files)
        found[name] = (result.buckets, {b: sorted(rows) for b, rows in result.rows.items()})

    assert found["partitioned"] == found["unpartitioned"]
    summed = sum(rows for rows, _ in found["partitioned"][0].values())
    assert summed == now.count() and 0 < rewritten.count() < summed
    assert found["version 1"] != found["partitioned"]  # the partitions listed are what is read, not the directory
    assert sum(rows for rows, _ in found["version 1"][0].values()) == 400

    (ods / "orders" / "v000002" / VERSION_FILE).write_text(VersionInfo(
        version=2, watermark=Watermark("binlog.000001", 4, server_id=1), run=RunRef("d", "r"),
        partitioning=partitioning, partitions=(("0", f"file:{ods}/flat/v000001"),)).to_text())
    job = job.model_copy(update={"table": "ods.orders", "location": locations["partitioned"]})
    refused = verify_job.table_result(spark, job, files).refused
    assert "flat/v000001, which is not one of the table's partition directories" in refused, refused
    with pytest.raises(VersionRefused, match="not one of the table's partition directories"):
        verify_job.run(spark, job, files)


@pytest.mark.spark
def test_verify_finds_where_a_versions_history_open_rows_differ_from_its_rows(spark, tmp_path):
    """Verify's Spark half over a version with an SCD2 history: the open rows as the history writes them (every
    type of the table, a deletion marker beside them) sum as the version's rows; one value changed in them is one
    bucket that differs; a version file naming another table's directory as the open partition is refused."""
    from pyspark.sql import functions as F

    from airflow_cdc_provider.core.history import OPEN_END, HistoryCommit, HistorySettings
    from airflow_cdc_provider.core.ledger import VERSION_FILE, RunRef, VersionInfo
    from airflow_cdc_provider.core.merge import VersionRefused
    from airflow_cdc_provider.core.verify import VerifyJob
    from airflow_cdc_provider.core.watermark import Watermark
    from airflow_cdc_provider.spark import verify_job
    from airflow_cdc_provider.spark.files import HadoopFiles
    from airflow_cdc_provider.spark.history import initial_open
    from airflow_cdc_provider.spark.names import column

    path = str(tmp_path / "upserts.parquet")
    pq.write_table(arrow_table(_rows(300), arrow_schema(COLUMNS)), path)
    rows = _hive_rows(spark, path, "UTC")
    ods = tmp_path / "warehouse" / "ods.db"
    rows.write.parquet(f"file:{ods}/orders/v000001")
    settings = HistorySettings(scd2=True, hard_deletes="new_record")
    columns = [(name.lower(), hive_type(ctype)) for name, ctype in COLUMNS]
    moment = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    opened = initial_open(rows, columns, settings, "2026-11-01", moment, 1)
    marker = opened.limit(1).withColumn("n", F.lit(10**6)).withColumn("is_deleted", F.lit(True))
    (opened.unionByName(marker).write.parquet(f"file:{ods}/orders_history/v000001/end_date={OPEN_END}"))
    first = opened.agg(F.min("n")).first()[0]
    tampered = opened.withColumn("region", F.when(column("n") == first, F.lit("changed")).otherwise(column("region")))
    tampered.write.parquet(f"file:{ods}/orders_history/v000002/end_date={OPEN_END}")

    def verified(open_partition: str) -> Any:
        history = HistoryCommit(table="orders_history", day="2026-11-01", partitions=((OPEN_END, open_partition),),
                                switched=(OPEN_END,), opened=300, closed=0)
        (ods / "orders" / "v000001" / VERSION_FILE).write_text(VersionInfo(
            version=1, watermark=Watermark("binlog.000001", 4, server_id=1), run=RunRef("d", "r"),
            history=history).to_text())
        job = VerifyJob(warehouse_dir=f"file:{tmp_path / 'warehouse'}", metastore_uri=None, table="ods.orders",
                        columns=tuple(COLUMNS), key=("n",), mariadb=True, buckets=7,
                        result_file=str(tmp_path / "result.json"), location=f"file:{ods}/orders/v000001")
        return verify_job.run(spark, job, HadoopFiles(spark, ""))

    assert verified(f"file:{ods}/orders_history/v000001/end_date={OPEN_END}").history_differing == ()
    assert len(verified(f"file:{ods}/orders_history/v000002/end_date={OPEN_END}").history_differing or ()) == 1
    with pytest.raises(VersionRefused, match="names a history that is not one"):
        verified(f"file:{ods}/orders/v000001")


def test_a_shards_partition_directory_is_spelt_as_spark_spells_it(spark):
    from airflow_cdc_provider.core.shards import Shard
    from airflow_cdc_provider.spark.partition_commit import partition_dir

    awkward = "".join(chr(c) for c in range(1, 128) if chr(c) not in "`") + "é✓"
    for shard in (Shard(source_schema="shop_00", source_table="orders_01"),
                  Shard(server="eu-1.a", source_schema=awkward, source_table="a/b=c%d#e:f")):
        assert shard.partition_dir == partition_dir(spark._jvm, shard.values)
