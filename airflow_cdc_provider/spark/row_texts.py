"""The row texts of ``core.checksum`` in Spark, over a Hive version: each column's text, a key's, a row's, and the
first 64 bits of their hash (``text_hash``). Verify (``spark.verify_job``) sums them; a heal's digests job
(``spark.digests_job``) writes them row by row; both read the version through ``version_frame``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import pandas as pd

from airflow_cdc_provider.core.checksum import (
    DATE_FORMAT_SPARK,
    DATETIME_FORMAT_SPARK,
    NULL_KEY_TEXT,
    hive_text,
    spark_text,
)
from airflow_cdc_provider.core.ledger import VERSION_FILE, VersionInfo
from airflow_cdc_provider.core.merge import version_locations
from airflow_cdc_provider.core.types import hive_type
from airflow_cdc_provider.spark.files import HadoopFiles
from airflow_cdc_provider.spark.names import column, columns_ddl


class VersionJob(Protocol):
    """What ``version_frame`` needs of a job: where the version is, and whose it may be."""

    @property
    def warehouse_dir(self) -> str: ...
    @property
    def columns(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def location(self) -> str | None: ...
    @property
    def versions_of(self) -> str: ...


def _python_text(column_type: str, mariadb: bool) -> Any:
    """A column text ``hive_text`` gives, as a vectorised UDF."""
    from pyspark.sql.functions import pandas_udf  # type: ignore[attr-defined]  # pyspark-client declares it elsewhere

    def text(value: Any) -> Any:
        if value is None or (isinstance(value, float) and math.isnan(value)):  # pandas holds a NULL double as NaN
            return None
        return hive_text(value, column_type, mariadb)

    @pandas_udf("string")  # type: ignore[untyped-decorator]
    def texts(values: pd.Series) -> pd.Series:
        return values.map(text)

    return texts


def column_text(name: str, column_type: str, mariadb: bool, time_zone: str) -> Any:
    """A column's text (``core.checksum``) as a Spark column, or None for a column counted by its NULL flag."""
    from pyspark.sql import functions as F

    rule = spark_text(column_type, mariadb, time_zone)
    value = column(name.lower())  # the Hive table's name
    if rule is None:
        return None
    if rule == "python":
        return _python_text(column_type, mariadb)(value)
    if rule == "string":
        return value.cast("string")
    if rule == "bit1":
        return value.cast("int").cast("string")
    if rule == "hex":
        return F.hex(value)
    if rule == "date":
        return F.date_format(value, DATE_FORMAT_SPARK)
    if rule == "zoned_datetime":
        value = F.from_utc_timestamp(value, time_zone)
    return F.date_format(value, DATETIME_FORMAT_SPARK)


def key_text(columns: Any, key: Any, mariadb: bool, time_zone: str) -> Any:
    """The key's text as a Spark column: its columns' texts joined by ``#``, a NULL one (a zero date's) spelt
    ``NULL_KEY_TEXT`` as the server spells it."""
    from pyspark.sql import functions as F

    types = dict(columns)
    return F.concat_ws("#", *[F.coalesce(column_text(name, types[name], mariadb, time_zone), F.lit(NULL_KEY_TEXT))
                              for name in key])


def row_text(columns: Sequence[tuple[str, str]], mariadb: bool, time_zone: str) -> Any:
    """A row's text as a Spark column (``core.checksum.source_row_text``, verify's: a JSON column on MySQL counts
    by its NULL flag only): its columns' texts joined by ``#``, then one flag per column, 1 for a NULL."""
    from pyspark.sql import functions as F

    texts = [t for name, ctype in columns if (t := column_text(name, ctype, mariadb, time_zone)) is not None]
    flags = F.concat(*[F.when(column(name.lower()).isNull(), F.lit("1")).otherwise(F.lit("0"))
                       for name, _ in columns])
    return F.concat_ws("#", *texts, flags)


def text_hash(text: Any) -> Any:
    """The hash of a text (a Spark column) in hex digits, as the server's ``core.checksum.text_hash_sql`` gives
    it: SHA-256 of its UTF-8 bytes."""
    from pyspark.sql import functions as F

    return F.sha2(text.cast("binary"), 256)


def first_64_bits(hex_digits: Any) -> Any:
    """The first 64 bits of a hash (a Spark column of its hex digits) as a signed bigint: Spark has no unsigned
    one, and these are the same bits as the server's unsigned number."""
    from pyspark.sql import functions as F

    return F.conv(F.substring(hex_digits, 1, 16), 16, -10).cast("bigint")


def bucket_of(text: Any, buckets: int) -> Any:
    """The bucket of a key text (CRC32 modulo the buckets), as the server computes it."""
    from pyspark.sql import functions as F

    return F.pmod(F.crc32(text.cast("binary")), F.lit(int(buckets)))


def version_frame(spark: Any, job: VersionJob, files: HadoopFiles, typed: bool = False) -> Any:
    """The rows of the version at ``job.location``, as its version file says where they are (``version_locations``,
    which refuses any place but the table's own version directories): the directory's files; for a partitioned
    version, the files of every partition it lists, in its directory or older ones', read as the source's
    columns only (the files hold no partition column; an emptied partition's directory holds no file).

    ``typed``: ``job.columns`` are the version's own (verify reads only such a version), so an unpartitioned one is
    read as their Hive types too, without a Spark job to find its schema in the files (a second or so a table,
    most of a rolling verify's time over many small tables)."""
    location = job.location or ""
    text = files.read_text(f"{location.rstrip('/')}/{VERSION_FILE}")
    info = VersionInfo.from_text(text) if text is not None else None
    locations = version_locations(info, location, job.warehouse_dir, job.versions_of)
    schema = columns_ddl((name.lower(), hive_type(ctype)) for name, ctype in job.columns)
    if info is None or info.partitioning is None:
        return spark.read.schema(schema).parquet(location) if typed else spark.read.parquet(location)
    # The schema given, not found in the files: the rows of a version whose partitions are all empty have none to
    # find it in, and every partition is read as the same columns.
    if not locations:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*locations)
