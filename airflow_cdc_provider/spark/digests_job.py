"""The Spark half of a heal: the digests of a binlog-mode table's committed Hive version, row by row, as a
diff-mode snapshot has the server give them (``core.version_digests``).

    spark-submit digests_job.py <URI of the digests jobs JSON (``core.version_digests.DigestsJobs``)>

Each job's directory ``out`` is replaced by Parquet part files of the version's rows: ``_key<n>`` for its n-th key
column (carried as ``key_carriage`` says), ``_hash`` and ``_digest`` (signed bigints: the same bits as the server's
unsigned ones), and Hadoop's ``_SUCCESS`` once whole; ``stages.version_digests`` makes the digests file of them. A
version that is not read as the table (``core.merge.VersionRefused``), or whose DATETIMEs were written for another
zone than the job's, leaves ``out`` holding only ``_refused``, its reason: the other tables' digests are written all
the same.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from airflow_cdc_provider.core.ledger import VERSION_FILE, VersionInfo
from airflow_cdc_provider.core.merge import VersionRefused
from airflow_cdc_provider.core.version_digests import (
    REFUSED_FILE,
    SPARK_DIGEST,
    SPARK_HASH,
    DigestsJob,
    DigestsJobs,
    key_carriage,
    spark_key_column,
)
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.spark.files import HadoopFiles
from airflow_cdc_provider.spark.names import column
from airflow_cdc_provider.spark.row_texts import (
    column_text,
    first_64_bits,
    key_text,
    row_text,
    text_hash,
    version_frame,
)
from airflow_cdc_provider.spark.session import hive_session, prefer_installed_pyspark


def _carried(name: str, column_type: str, job: DigestsJob) -> Any:
    """A key column as ``key_carriage`` carries it: its Hive value, or its checksum text (a DATETIME's digits in
    the readers' zone, a TIMESTAMP's in UTC)."""
    carriage = key_carriage(column_type)
    if carriage.how == "value":
        return column(name.lower()).cast(carriage.spark_type)
    return column_text(name, column_type, job.mariadb, job.time_zone)


def digests_frame(spark: Any, job: DigestsJob, files: HadoopFiles) -> Any:
    """The version's rows as (``_key0``, …, ``_hash``, ``_digest``): the key's and the row's texts are verify's
    (``spark.row_texts``), which the server's ``core.diff.key_hash`` and ``row_digest(every_json=False)`` match."""

    frame = version_frame(spark, job, files)  # refuses a place that is not one of the table's versions
    text = files.read_text(f"{job.location.rstrip('/')}/{VERSION_FILE}")
    problem = job.version_zone_problem(VersionInfo.from_text(text).datetime_zone if text else job.time_zone)
    if problem:
        raise VersionRefused(problem)
    types = dict(job.columns)
    keys = [_carried(name, types[name], job).alias(spark_key_column(i)) for i, name in enumerate(job.key)]
    key = key_text(job.columns, job.key, job.mariadb, job.time_zone)
    row = row_text(job.columns, job.mariadb, job.time_zone)
    return frame.select(
        *keys, first_64_bits(text_hash(key)).alias(SPARK_HASH), first_64_bits(text_hash(row)).alias(SPARK_DIGEST))


def write_digests(spark: Any, job: DigestsJob, files: HadoopFiles) -> int | None:
    """Replace ``job.out`` by the version's digests; the rows written, or None when the version was refused (its
    reason in ``out``'s ``_refused``)."""
    try:
        frame = digests_frame(spark, job, files)
    except VersionRefused as exc:  # raised before any row of the version was read
        print(f"cdc-digests: {job.table}: {exc}", flush=True)
        files.delete(job.out)  # an earlier attempt's digests are no answer now
        files.write_text(f"{job.out.rstrip('/')}/{REFUSED_FILE}", str(exc), overwrite=True)
        return None
    # Overwrite: a killed attempt's part files go with it.
    frame.write.mode("overwrite").parquet(job.out)
    return int(spark.read.parquet(job.out).count())  # from the files' footers


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} <URI of the digests jobs JSON>", file=sys.stderr)
        return 2
    prefer_installed_pyspark()
    from pyspark import SparkConf, SparkContext

    files = HadoopFiles(SparkContext.getOrCreate(SparkConf()), "")
    text = files.read_text(argv[1])
    if text is None:
        print(f"cdc-digests: the digests job file {argv[1]} does not exist", file=sys.stderr)
        return 2
    jobs = DigestsJobs.from_text(text).jobs
    failpoint("heal.digests")
    if not jobs:
        return 0
    spark = hive_session("cdc-digests", jobs[0].warehouse_dir, jobs[0].metastore_uri)
    for job in jobs:
        started = time.monotonic()
        rows = write_digests(spark, job, files)
        if rows is not None:
            print(f"cdc-digests: {job.table}: {rows} rows in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
