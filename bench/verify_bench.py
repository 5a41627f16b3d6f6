"""Verify of a table against a full reload of it, on a throwaway MariaDB, with Spark in local mode.

    .venv/bin/python bench/verify_bench.py [rows]

The table (default 2,000,000 rows; the merge bench's) is loaded once into Hive (snapshot + merge). Then, twice
over, measured in the same run:

- verify as the verify task does it: the server sums every bucket (``MySqlSourceHook.bucket_sums``, 1,000 rows
  per bucket) while one Spark application sums the version's buckets, then compares with the server's sums;
  the table is clean, so nothing more is read;
- a full reload as MySqlToHiveOperator does it, and one done as fast as we could (see bench/merge_bench.py).

It prints wall times, the ratio (target: verify <= 0.5x the full reload), and what verify cost the server: the
table rows its statements read (Handler_read_next; target: one pass, the table's rows: the key is an integer,
so ranges of key values need no lookup of their ends) and the bytes it sent (no row of a clean bucket is shipped).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_cdc_testing.server import ThrowawayServer  # noqa: E402

from airflow_cdc_provider.core.identifiers import TableName  # noqa: E402
from airflow_cdc_provider.core.verify import (  # noqa: E402
    SourceSums,
    VerifyJob,
    VerifyJobs,
    bucket_count,
    sums_of,
)
from airflow_cdc_provider.spark import VERIFY_JOB  # noqa: E402
from bench.capture_bench import Source, header_of  # noqa: E402
from bench.merge_bench import DDL, FILL, Incremental, full_reload, mysql_to_hive, submit  # noqa: E402

# The table's rows read in key order (a range of the key: one per row), and the other reads, nearly all of them
# the lookups of each row's group in the temporary table a GROUP BY builds (one per row, one range start per
# statement).
READS = ("Handler_read_next",)
SCANS = ("Handler_read_first", "Handler_read_key", "Handler_read_rnd", "Handler_read_rnd_next")


def status(server) -> dict[str, int]:
    rows = server.execute("SHOW GLOBAL STATUS WHERE Variable_name IN "
                          f"({', '.join(repr(n) for n in (*READS, *SCANS, 'Bytes_sent'))})")
    found = {name.lower(): int(value) for name, value in rows}
    return {name: found.get(name.lower(), 0) for name in (*READS, *SCANS, "Bytes_sent")}


def verify(hook, header, version: dict, work: Path, rows: int) -> tuple[float, float, float, dict]:
    """The verify task's two halves over one table, at the same time as the task runs them; returns (total,
    server, Spark seconds, the job's result)."""
    t0 = time.perf_counter()
    buckets = bucket_count(hook.estimated_rows(header.table), 1000)
    sums_file = work / "verify-source-sums.json"
    sums_file.unlink(missing_ok=True)
    job = VerifyJob(str(work / "warehouse"), None, "ods.incremental", header.columns, header.key, True, buckets,
                    str(work / "verify-result.json"), location=version["location"], source_file=str(sums_file))
    (work / "verify-jobs.json").write_text(VerifyJobs(jobs=(job,)).to_text())
    spark_s: list[float] = []
    spark = threading.Thread(target=lambda: spark_s.append(submit(VERIFY_JOB, str(work / "verify-jobs.json"),
                                                                  cwd=work)))
    spark.start()
    sums = hook.bucket_sums(header, buckets)
    server_s = time.perf_counter() - t0
    sums_file.write_text(SourceSums(sums=sums_of(sums)).to_text())
    spark.join()
    result = json.loads((work / "verify-result.json").read_text())
    assert sum(s.rows for s in sums.values()) == rows, "the server's sums miss rows"
    assert result["compared"], "the Spark half did not compare"
    return time.perf_counter() - t0, server_s, spark_s[0], result


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    work = Path(tempfile.mkdtemp(prefix="verify-bench-"))
    with ThrowawayServer.start(work / "mariadb", {"max_binlog_size": 256 * 1024 * 1024}) as server:
        login = server.create_user("bench")
        os.environ["AIRFLOW_CONN_BENCH_SOURCE"] = json.dumps({"conn_type": "mysql", "host": "127.0.0.1",
                                                              "port": server.port, "login": login.user,
                                                              "password": login.password})
        from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook

        hook = MySqlSourceHook("bench_source")
        source = Source(server, login)
        server.execute("CREATE DATABASE bench", f"CREATE TABLE bench.orders ({DDL})",
                       f"INSERT INTO bench.orders SELECT {FILL} FROM bench.seq_1_to_{rows}",
                       "ANALYZE TABLE bench.orders")
        header = header_of(server, TableName("bench", "orders"))
        t0 = time.perf_counter()
        _, _, version = Incremental(server, source, header, work).run()
        print(f"table of {rows:,} rows; initial load (snapshot + merge) {time.perf_counter() - t0:.1f} s")

        verify_times, op_times, full_times = [], [], []
        for round_ in range(2):
            before = status(server)
            seconds, server_s, spark_s, result = verify(hook, header, version, work, rows)
            after = status(server)
            verify_times.append(seconds)
            read = sum(after[n] - before[n] for n in READS)
            scanned = sum(after[n] - before[n] for n in SCANS)
            sent = after["Bytes_sent"] - before["Bytes_sent"]
            assert result["differing"] == [], f"a clean table differs in buckets {result['differing'][:10]}"
            op_times.append(mysql_to_hive(source, header, work)[0])
            full_times.append(full_reload(source, header, work)[0])
            print(f"round {round_ + 1}: verify {seconds:.1f} s (server sums {server_s:.1f} s and Spark {spark_s:.1f} s "
                  "at the same time, "
                  f"{len(result['buckets']):,} buckets, none differs; the server read {read:,} rows by key = "
                  f"{read / rows:.2f}x the table, and made {scanned:,} other reads, the GROUP BY's lookups of its "
                  "groups; sent "
                  f"{sent / 1e6:.2f} MB); MySqlToHiveOperator-style reload "
                  f"{op_times[-1]:.1f} s; Parquet full reload {full_times[-1]:.1f} s")
        verify_s = statistics.median(verify_times)
        print(f"verify / MySqlToHiveOperator-style full reload: time {verify_s / statistics.median(op_times):.2f}x "
              f"(target <= 0.5x); verify / Parquet full reload: {verify_s / statistics.median(full_times):.2f}x")


if __name__ == "__main__":
    main()
