"""One incremental run against a full reload, on a throwaway MariaDB, with Spark in local mode.

    .venv/bin/python bench/merge_bench.py [rows] [changed fraction]

The table (default 2,000,000 rows) is loaded once. Then, twice over, a fraction of its rows (default 1%) is
changed (updates, deletes, inserts) and the Hive table is brought up to date both ways, each timed from end
to end and measured in the same run:

- incremental: extract (binlog from the committed watermark) → replay → Spark merge and commit;
- full reload as MySqlToHiveOperator does it (apache-airflow-providers-apache-hive): SELECT every row through a
  buffered cursor, write them with csv.writer (delimiter \\x01) to a local file, then CREATE TABLE … STORED AS
  textfile and LOAD DATA LOCAL INPATH … OVERWRITE. Its HiveCliHook runs those statements in the hive CLI;
  here Spark SQL runs the same statements against the same metastore;
- full reload done as fast as we could: a streaming cursor into Parquet (Arrow), then INSERT OVERWRITE into a
  Parquet Hive table on Spark. A stricter baseline than the operator, reported beside it.

Every Spark job, ours and the baselines', starts its driver JVM the same way: from the same class-data archive,
with the throughput collector (see airflow_cdc_provider/spark/jvm.py). It prints wall times, rows read from the
source, and the ratios. Target (against the operator's full
reload): time <= 0.5x, rows <= 0.02x.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow.parquet as pq  # noqa: E402
import pymysql.cursors  # noqa: E402
from airflow_cdc_testing.hive import run_spark_job  # noqa: E402
from airflow_cdc_testing.server import ThrowawayServer  # noqa: E402

from airflow_cdc_provider.core.identifiers import TableName  # noqa: E402
from airflow_cdc_provider.core.ledger import Ledger, RunRef, plan_run  # noqa: E402
from airflow_cdc_provider.core.merge import MergeJob, MergeSpec  # noqa: E402
from airflow_cdc_provider.core.records import RawHeader  # noqa: E402
from airflow_cdc_provider.core.types import arrow_table, file_schema, hive_type  # noqa: E402
from airflow_cdc_provider.core.workdir import TableDir  # noqa: E402
from airflow_cdc_provider.spark import MERGE_JOB  # noqa: E402
from airflow_cdc_provider.stages.extract import extract, in_one_directory  # noqa: E402
from airflow_cdc_provider.stages.replay import replay  # noqa: E402
from airflow_cdc_provider.stages.snapshot import snapshot  # noqa: E402
from airflow_cdc_provider.storage import WorkStore  # noqa: E402
from bench.capture_bench import Source, header_of  # noqa: E402

DDL = ("id INT PRIMARY KEY, customer VARCHAR(40) NOT NULL, amount DECIMAL(12,2) NOT NULL, status VARCHAR(12),"
       " note VARCHAR(100), qty INT, created_at DATETIME(3) NOT NULL, updated_at TIMESTAMP(6) NULL")
FILL = ("seq, CONCAT('customer ', seq % 50000), seq / 100, ELT(1 + seq % 3, 'new', 'paid', 'shipped'),"
        " CONCAT('order note ', seq), seq % 1000, '2026-01-01 00:00:00' + INTERVAL seq SECOND, NULL")

OVERWRITE_JOB = """
import sys
from airflow_cdc_provider.spark.session import hive_session
warehouse, path = sys.argv[1], sys.argv[2]
spark = hive_session("full-reload", warehouse, None)
spark.sql("CREATE DATABASE IF NOT EXISTS ods")
frame = spark.read.parquet(path)
frame = frame.select([frame[c].cast("timestamp") if t == "timestamp_ntz" else frame[c] for c, t in frame.dtypes])
frame.createOrReplaceTempView("incoming")
columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in frame.schema)
spark.sql(f"CREATE TABLE IF NOT EXISTS ods.full_reload ({columns}) STORED AS PARQUET")
spark.sql("INSERT OVERWRITE TABLE ods.full_reload SELECT * FROM incoming")
"""


LOAD_JOB = """
import sys
from airflow_cdc_provider.spark.session import hive_session
warehouse, path, columns = sys.argv[1], sys.argv[2], sys.argv[3]
spark = hive_session("mysql-to-hive", warehouse, None)
spark.sql("CREATE DATABASE IF NOT EXISTS ods")
spark.sql(f"CREATE TABLE IF NOT EXISTS ods.mysql_to_hive ({columns}) ROW FORMAT DELIMITED FIELDS TERMINATED BY "
          "'\\001' STORED AS textfile")
spark.sql(f"LOAD DATA LOCAL INPATH '{path}' OVERWRITE INTO TABLE ods.mysql_to_hive")
"""


def change(server, rows: int, fraction: float, round_: int) -> int:
    """Change ``fraction`` of the rows: 70% updates, 15% deletes, 15% inserts of new keys."""
    n = int(rows * fraction)
    updates, deletes, inserts = int(n * 0.7), int(n * 0.15), n - int(n * 0.7) - int(n * 0.15)
    step = rows // updates
    server.execute(
        f"UPDATE bench.orders SET amount = amount + 1, status = 'changed{round_}', updated_at = NOW(6)"
        f" WHERE id % {step} = {round_} AND id <= {rows}",
        f"DELETE FROM bench.orders WHERE id % {rows // deletes} = {round_ + 7} AND id <= {rows} LIMIT {deletes}",
        f"INSERT INTO bench.orders SELECT {FILL.replace('seq', f'(seq + {rows * (round_ + 1)})')}"
        f" FROM bench.seq_1_to_{inserts}",
    )
    return n


def submit(script: str, *args: str, cwd: Path) -> float:
    """spark-submit a job; every job here, ours and the baselines', starts from the same class-data archive."""
    t0 = time.perf_counter()
    result = run_spark_job(script, *args, work_dir=str(cwd), timeout=3600)
    if result.returncode:
        raise RuntimeError(result.stdout[-3000:] + result.stderr[-5000:])
    return time.perf_counter() - t0


class Incremental:
    def __init__(self, server, source, header, work: Path):
        self.server, self.source, self.header, self.work = server, source, header, work
        self.ledger = Ledger(TableDir(work_dir=str(work), hive_table="ods.incremental"), WorkStore())
        self.runs = 0

    def run(self) -> tuple[float, int, dict]:
        self.runs += 1
        run = RunRef("bench", f"r{self.runs}")
        t0 = time.perf_counter()
        self.ledger.acquire(run, lambda holder: False, dt.datetime.now(dt.UTC))
        plan = plan_run(run, self.ledger.committed(), None, None)
        self.ledger.save_run_plan(plan)
        out = Path(self.ledger.table.run(run.key).root)  # the merge reads capture files from the run's directory
        parts = {}
        if plan.mode == "snapshot":
            snap = snapshot(self.source.hook, self.header, out / "snapshot")
            upserts, deletes, end, read = snap.files, None, snap.watermark, snap.rows
        else:
            high = self.source.current_watermark()
            extracted = extract(self.source.hook, in_one_directory([self.header], out / "raw"), plan.start, high)
            parts["extract"] = time.perf_counter() - t0
            replayed = replay(extracted.files[self.header.table], out / "upsert.parquet", out / "delete.parquet")
            parts["replay"] = time.perf_counter() - t0 - parts["extract"]
            upserts, deletes, end = [replayed.upsert_file], replayed.delete_file, extracted.end
            read = sum(extracted.counts[self.header.table].values())
        spec = MergeSpec(
            database="ods", table="incremental", source=self.header.table, warehouse_dir=str(self.work / "warehouse"),
            metastore_uri=None, plan=plan, end=end, as_of=dt.datetime.now(dt.UTC),
            columns=tuple((n, hive_type(t)) for n, t in self.header.columns), key=self.header.key,
            capture_dir=str(out), upsert_files=tuple(upserts), delete_file=deletes,
        )
        (out / "job.json").write_text(MergeJob(spec.warehouse_dir, None, (spec,), str(out / "result.json")).to_text())
        merge_s = submit(MERGE_JOB, str(out / "job.json"), cwd=out)
        result = json.loads((out / "result.json").read_text())["tables"]["ods.incremental"]
        self.ledger.commit(plan, spec.committed(result["version"], result["location"]))
        self.ledger.release(run)
        if parts:
            parts["merge"] = merge_s
        return time.perf_counter() - t0, read, {**parts, **result}


def full_reload(source, header, work: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    schema = file_schema(header)
    path = work / f"full-{time.monotonic_ns()}.parquet"
    conn = source.get_conn()
    rows = 0
    with pq.ParquetWriter(path, schema) as writer, conn.cursor(pymysql.cursors.SSCursor) as cursor:
        cursor.execute("SELECT * FROM bench.orders")
        while batch := cursor.fetchmany(10000):
            writer.write_table(arrow_table(batch, schema))
            rows += len(batch)
    conn.close()
    job = work / "overwrite_job.py"
    job.write_text(OVERWRITE_JOB)
    submit(str(job), str(work / "warehouse-full"), str(path), cwd=work)
    path.unlink()
    return time.perf_counter() - t0, rows


def mysql_to_hive(source, header, work: Path) -> tuple[float, int]:
    """MySqlToHiveOperator.execute: buffered cursor → csv.writer → CREATE TABLE textfile, LOAD DATA OVERWRITE."""
    t0 = time.perf_counter()
    path = work / f"mysql-to-hive-{time.monotonic_ns()}.csv"
    conn = source.get_conn()
    with conn.cursor() as cursor, open(path, "w", encoding="utf-8") as out:
        cursor.execute("SELECT * FROM bench.orders")
        rows = cursor.rowcount
        csv.writer(out, delimiter="\x01", quoting=csv.QUOTE_MINIMAL, quotechar='"').writerows(cursor)
    conn.close()
    job = work / "load_job.py"
    job.write_text(LOAD_JOB)
    columns = ", ".join(f"`{name}` {hive_type(ctype)}" for name, ctype in header.columns)
    submit(str(job), str(work / "warehouse-operator"), str(path), columns, cwd=work)
    path.unlink(missing_ok=True)
    return time.perf_counter() - t0, rows


@contextlib.contextmanager
def bench_table(work: Path, rows: int) -> Iterator[tuple[ThrowawayServer, Source, RawHeader]]:
    """A throwaway server holding the bench's table of ``rows`` rows, its bench login, and the table's header."""
    with ThrowawayServer.start(work / "mariadb", {"max_binlog_size": 256 * 1024 * 1024}) as server:
        source = Source(server, server.create_user("bench"))
        server.execute("CREATE DATABASE bench", f"CREATE TABLE bench.orders ({DDL})",
                       f"INSERT INTO bench.orders SELECT {FILL} FROM bench.seq_1_to_{rows}")
        yield server, source, header_of(server, TableName("bench", "orders"))


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    fraction = float(sys.argv[2]) if len(sys.argv) > 2 else 0.01
    work = Path(tempfile.mkdtemp(prefix="merge-bench-"))
    with bench_table(work, rows) as (server, source, header):
        incremental = Incremental(server, source, header, work)
        t0 = time.perf_counter()
        incremental.run()  # the initial load: version 1
        print(f"table of {rows:,} rows; initial load (snapshot + merge) {time.perf_counter() - t0:.1f} s")

        op_times, full_times, incr_times, full_rows, incr_rows = [], [], [], [], []
        for round_ in range(2):
            seconds, read = mysql_to_hive(source, header, work)
            op_times.append(seconds)
            full_rows.append(read)
            seconds, read = full_reload(source, header, work)
            full_times.append(seconds)
            changed = change(server, rows, fraction, round_)
            seconds, read, detail = incremental.run()
            incr_times.append(seconds)
            incr_rows.append(read)
            print(f"round {round_ + 1}: {changed:,} rows changed; MySqlToHiveOperator-style reload "
                  f"{op_times[-1]:.1f} s, Parquet full reload {full_times[-1]:.1f} s ({full_rows[-1]:,} rows read "
                  f"each); incremental {seconds:.1f} s ({read:,} row images read: extract {detail['extract']:.1f} s, "
                  f"replay {detail['replay']:.1f} s, merge {detail['merge']:.1f} s "
                  f"{detail['phases']}, version {detail['version']} with {detail['rows']:,} rows)")
        count = server.execute("SELECT COUNT(*) FROM bench.orders")[0][0]
        assert detail["rows"] == count, (detail["rows"], count)  # the committed version, counted by the job
        incr = statistics.median(incr_times)
        rows_ratio = statistics.median(incr_rows) / statistics.median(full_rows)
        print(f"incremental / MySqlToHiveOperator-style full reload: time {incr / statistics.median(op_times):.2f}x "
              f"(target <= 0.5x), rows read {rows_ratio:.4f}x (target <= 0.02x)")
        print(f"incremental / Parquet full reload: time {incr / statistics.median(full_times):.2f}x; "
              f"Hive row count checked: {count:,}")


if __name__ == "__main__":
    main()
