"""The Spark half of verify: each bucket's sums over a Hive table, and the rows of the buckets asked for.

    spark-submit verify_job.py <URI of the verify job JSON>

See ``core.verify`` for the buckets and ``core.checksum`` for the row texts. Writes the result file the job names:
``{"buckets": {bucket: [rows, low, high]}, "rows": {bucket: [[key text, md5], ...]}, "seconds": …}``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import pandas as pd

from airflow_cdc_provider.core.checksum import hive_text, spark_text
from airflow_cdc_provider.core.verify import VerifyJob
from airflow_cdc_provider.spark.files import HadoopFiles
from airflow_cdc_provider.spark.session import hive_session


def _python_text(column_type: str, mariadb: bool) -> Any:
    """A column text ``hive_text`` gives, as a vectorised UDF."""
    from pyspark.sql.functions import pandas_udf

    def text(value: Any) -> Any:
        if value is None or (isinstance(value, float) and math.isnan(value)):  # pandas holds a NULL double as NaN
            return None
        return hive_text(value, column_type, mariadb)

    @pandas_udf("string")  # type: ignore[call-overload]
    def texts(values: pd.Series) -> pd.Series:
        return values.map(text)

    return texts


def row_frame(spark: Any, job: VerifyJob) -> Any:
    """The table's rows as (bucket, key text, row text MD5)."""
    from pyspark.sql import functions as F

    def text(name: str, column_type: str) -> Any:
        expression = spark_text(name, column_type, job.mariadb)
        if expression == "python":
            return _python_text(column_type, job.mariadb)(F.col(f"`{name.lower()}`"))
        return None if expression is None else F.expr(expression)

    types = dict(job.columns)
    texts = [t for name, ctype in job.columns if (t := text(name, ctype)) is not None]
    flags = F.concat(*[F.when(F.col(f"`{name.lower()}`").isNull(), F.lit("1")).otherwise(F.lit("0"))
                       for name, _ in job.columns])
    row_text = F.concat_ws("#", *texts, flags)
    key_text = F.concat_ws("#", *[text(name, types[name]) for name in job.key])
    return spark.table(job.table).select(
        F.pmod(F.crc32(key_text.cast("binary")), F.lit(job.buckets)).alias("bucket"), key_text.alias("key"),
        F.md5(row_text.cast("binary")).alias("md5"))


def run(spark: Any, job: VerifyJob) -> dict[str, Any]:
    from pyspark.sql import functions as F

    rows = row_frame(spark, job).cache()
    half = lambda start: F.conv(F.substring("md5", start, 8), 16, 10).cast("bigint")  # noqa: E731
    sums = rows.groupBy("bucket").agg(F.count(F.lit(1)).alias("rows"), F.bit_xor(half(1)).alias("low"),
                                      F.bit_xor(half(9)).alias("high"))
    result: dict[str, Any] = {"buckets": {str(r["bucket"]): [r["rows"], r["low"], r["high"]] for r in sums.collect()},
                              "rows": {}}
    if job.detail:
        listed = rows.where(F.col("bucket").isin(list(job.detail))).select("bucket", "key", "md5").collect()
        for r in listed:
            result["rows"].setdefault(str(r["bucket"]), []).append([r["key"], r["md5"]])
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} <URI of the verify job JSON>", file=sys.stderr)
        return 2
    from pyspark import SparkConf, SparkContext

    started = time.monotonic()
    files = HadoopFiles(SparkContext.getOrCreate(SparkConf()), "")
    text = files.read_text(argv[1])
    if text is None:
        print(f"cdc-verify: the verify job {argv[1]} does not exist", file=sys.stderr)
        return 2
    job = VerifyJob.from_json(text)
    spark = hive_session(f"cdc-verify {job.table}", job.warehouse_dir, job.metastore_uri)
    result = run(spark, job)
    result["seconds"] = round(time.monotonic() - started, 3)
    files.write_text(job.result_file, json.dumps(result), overwrite=True)
    print(f"cdc-verify: {job.table}: {len(result['buckets'])} buckets summed in {result['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
