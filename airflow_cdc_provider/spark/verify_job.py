"""The Spark half of verify: each bucket's sums over a Hive version, and the rows of the buckets that differ.

    spark-submit verify_job.py <URI of the verify jobs JSON: a list, one job per table>

See ``core.verify`` for the buckets, ``core.checksum`` for the row texts (``spark.row_texts`` spells them in
Spark). Writes the result file each job names: ``{"buckets": {bucket: [rows, digest]}, "differing": [bucket, ...],
"rows": {bucket: [[key text, row text's hash], ...]}, "seconds": …}``; ``differing`` compares with the server's
sums (in the job, or written to the job's ``source_file`` while it runs), ``rows`` lists the rows of the differing
buckets (at most the job's ``detail_limit`` of them) and of those the job names.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from airflow_cdc_provider.core.history import OPEN_END
from airflow_cdc_provider.core.ledger import VERSION_FILE, VersionInfo
from airflow_cdc_provider.core.merge import VersionRefused, history_partition_problem
from airflow_cdc_provider.core.types import hive_type
from airflow_cdc_provider.core.verify import (
    BucketSum,
    SourceSums,
    VerifyJob,
    VerifyJobs,
    VerifyResult,
    bucket_sums,
    differing_buckets,
    sums_of,
)
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.spark.files import HadoopFiles
from airflow_cdc_provider.spark.history import open_values
from airflow_cdc_provider.spark.names import column

# bucket_of and key_text re-exported: the merge (spark.merge_job, spark.partitioning) imports them from here.
from airflow_cdc_provider.spark.row_texts import bucket_of as bucket_of
from airflow_cdc_provider.spark.row_texts import first_64_bits, row_text, text_hash, version_frame
from airflow_cdc_provider.spark.row_texts import key_text as key_text
from airflow_cdc_provider.spark.session import hive_session, prefer_installed_pyspark


def history_frame(spark: Any, job: VerifyJob, files: HadoopFiles) -> Any | None:
    """The values the SCD2 history's open rows give the version at ``job.location`` (``spark.history.open_values``),
    read from the open partition its version file names, checked to be a version directory of the history table;
    None when the version keeps no history."""
    location = (job.location or "").rstrip("/")
    text = files.read_text(f"{location}/{VERSION_FILE}") if location else None
    history = VersionInfo.from_text(text).history if text is not None else None
    if history is None:
        return None
    where = dict(history.partitions).get(OPEN_END, "")
    problem = history_partition_problem(where, OPEN_END, history.table, job.warehouse_dir)
    if problem:
        raise VersionRefused(f"The version file at {location} names a history that is not one: {problem}")
    rows = spark.read.parquet(where)
    return open_values(rows, [(name.lower(), hive_type(ctype)) for name, ctype in job.columns])


def row_frame(spark: Any, job: VerifyJob, files: HadoopFiles, frame: Any | None = None) -> Any:
    """The table's rows (or those of ``frame``, in its columns) as (bucket, key text, row text's hash); of a rolling
    verify's slice only, filtered on the key's bucket before any row's text is built."""
    from pyspark.sql import functions as F

    text = row_text(job.columns, job.mariadb, job.time_zone)
    key = key_text(job.columns, job.key, job.mariadb, job.time_zone)
    if frame is None:
        frame = version_frame(spark, job, files, typed=True) if job.location else spark.table(job.table)
    bucket = bucket_of(key, job.buckets)
    if job.slice is not None and job.slice.key_range is not None:  # the values of a one-column integer key
        start, end = job.slice.key_range
        value = column(job.key[0].lower())
        if start is not None:
            frame = frame.where(value >= F.lit(start))
        if end is not None:
            frame = frame.where(value < F.lit(end))
    elif job.slice is not None:
        frame = frame.where(F.pmod(bucket, F.lit(job.slice.of)) == F.lit(job.slice.index))
    return frame.select(bucket.alias("bucket"), key.alias("key"), text_hash(text).alias("text_hash"))


def wait_for_sums(files: HadoopFiles, job: VerifyJob, timeout: float = 6 * 3600) -> dict[int, BucketSum] | None:
    """The server's sums: in the job, or written to ``source_file`` by the verify task while this job summed the
    copy (the two halves run at the same time). None when the task gave up on the server's side (it writes
    ``{"error": …}``)."""
    if job.source is not None or job.source_file is None:
        return job.source_sums() if job.source is not None else None
    deadline = time.monotonic() + timeout
    while (text := files.read_text(job.source_file)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"The server's sums of {job.table} did not appear at {job.source_file}.")
        time.sleep(0.5)
    written = SourceSums.from_text(text)
    return bucket_sums(written.sums) if written.sums is not None else None


@dataclass
class _Table:
    """One job of the application: its rows (lazy), and its copy's sums once the batch has summed them."""

    job: VerifyJob
    rows: Any = None
    copy: dict[int, BucketSum] | None = None
    refused: str = ""


# Tables summed by one Spark job: their rows are one union, grouped by (table, bucket) once. A job per table cost
# about 0.6 s each here, most of a rolling verify's time over a source of many small tables; a bounded batch keeps
# the plan of the union small.
BATCH = 64


def sum_copies(spark: Any, tables: list[_Table], files: HadoopFiles) -> None:
    """Each table's rows and its copy's bucket sums (``_Table.rows``, ``.copy``), the tables of a batch in one Spark
    job; a table whose version is refused gets why (``.refused``), read before any of its rows."""
    from functools import reduce

    from pyspark.sql import functions as F

    for table in tables:
        try:
            table.rows = row_frame(spark, table.job, files)
        except VersionRefused as exc:
            print(f"cdc-verify: {table.job.table}: {exc}", flush=True)
            table.refused = str(exc)
    readable = [t for t in tables if not t.refused]
    for start in range(0, len(readable), BATCH):
        batch = readable[start:start + BATCH]
        union = reduce(lambda a, b: a.unionByName(b), (t.rows.select(F.lit(n).alias("table"), "bucket", "text_hash")
                                                          for n, t in enumerate(batch)))
        for table in batch:
            table.copy = {}
        for r in _summed(union, "table").collect():
            batch[r["table"]].copy[int(r["bucket"])] = _bucket_sum(r)


def compare(spark: Any, table: _Table, files: HadoopFiles, summing: float) -> VerifyResult:
    """A summed table against the server's sums (waited for), with the rows of the buckets that differ listed;
    ``summing``: its share of the batch's time."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    job, rows, copy = table.job, table.rows, table.copy or {}
    # The history's open rows are the table's values: compared bucket by bucket with the version's, as the
    # version is with the source.
    history = history_frame(spark, job, files)
    history_differing = (tuple(differing_buckets(copy, _sums(row_frame(spark, job, files, history))))
                         if history is not None else None)
    source = wait_for_sums(files, job)
    differing = differing_buckets(source, copy) if source is not None else []
    listed = sorted(set(job.detail) | set(differing[: job.detail_limit]))
    listed_rows: dict[int, list[tuple[str, str]]] = {}
    if listed:
        for r in rows.where(F.col("bucket").isin(listed)).select("bucket", "key", "text_hash").collect():
            listed_rows.setdefault(int(r["bucket"]), []).append((r["key"], r["text_hash"]))
    return VerifyResult(buckets=sums_of(copy), differing=tuple(differing),
                        rows={b: tuple(found) for b, found in listed_rows.items()}, compared=source is not None,
                        history_differing=history_differing,
                        seconds=round(summing + time.monotonic() - started, 3))


def _summed(rows: Any, *by: str) -> Any:
    """Each bucket's (of each ``by`` group's) rows and XOR of their hashes' first 64 bits, of ``row_frame``'s rows."""
    from pyspark.sql import functions as F

    return rows.groupBy(*by, "bucket").agg(F.count(F.lit(1)).alias("rows"),
                                           F.bit_xor(first_64_bits(F.col("text_hash"))).alias("digest"))


def _bucket_sum(summed: Any) -> BucketSum:
    """A row of ``_summed`` as the bucket's sums (the digest unsigned, as the server's)."""
    return BucketSum(summed["rows"], summed["digest"] & _UNSIGNED)


def _sums(rows: Any) -> dict[int, BucketSum]:
    """Each bucket's sums, of ``row_frame``'s rows."""
    return {int(r["bucket"]): _bucket_sum(r) for r in _summed(rows).collect()}


_UNSIGNED = (1 << 64) - 1


def run(spark: Any, job: VerifyJob, files: HadoopFiles) -> VerifyResult:
    """One table's result; raises ``VersionRefused`` when its version is not read."""
    table = _Table(job)
    started = time.monotonic()
    sum_copies(spark, [table], files)
    if table.refused:
        raise VersionRefused(table.refused)
    return compare(spark, table, files, time.monotonic() - started)


def table_result(spark: Any, job: VerifyJob, files: HadoopFiles) -> VerifyResult:
    """One table's result, or why its version was not read."""
    try:
        return run(spark, job, files)
    except VersionRefused as exc:
        return VerifyResult(buckets={}, refused=str(exc))


def verify_all(spark: Any, jobs: tuple[VerifyJob, ...], files: HadoopFiles) -> None:
    """Every job's result file: the copies summed in batches, then each compared as its server's sums come. A
    refused version's result says why (the verify task then fails without retries); the others are summed either
    way."""
    started = time.monotonic()
    tables = [_Table(job) for job in jobs]
    sum_copies(spark, tables, files)
    summing = (time.monotonic() - started) / max(1, len(tables))
    for table in tables:
        try:
            result = (VerifyResult(buckets={}, refused=table.refused) if table.refused
                      else compare(spark, table, files, summing))
        except VersionRefused as exc:  # the history's version file, read before any of its rows
            print(f"cdc-verify: {table.job.table}: {exc}", flush=True)
            result = VerifyResult(buckets={}, refused=str(exc))
        files.write_text(table.job.result_file, result.to_text(), overwrite=True)
        print(f"cdc-verify: {table.job.table}: {len(result.buckets)} buckets summed, {len(result.differing)} "
              f"differ, in {result.seconds} s", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} <URI of the verify jobs JSON>", file=sys.stderr)
        return 2
    prefer_installed_pyspark()
    from pyspark import SparkConf, SparkContext

    files = HadoopFiles(SparkContext.getOrCreate(SparkConf()), "")
    text = files.read_text(argv[1])
    if text is None:
        print(f"cdc-verify: the verify job file {argv[1]} does not exist", file=sys.stderr)
        return 2
    jobs = VerifyJobs.from_text(text).jobs
    failpoint("verify.driver")
    spark = hive_session("cdc-verify", jobs[0].warehouse_dir, jobs[0].metastore_uri)
    verify_all(spark, jobs, files)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
