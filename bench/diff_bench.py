"""A diff-mode run against a full reload, on a throwaway MariaDB, with Spark in local mode.

    .venv/bin/python bench/diff_bench.py [rows] [changed fraction]

The table (default 2,000,000 rows, merge_bench's) is loaded once by a snapshot that keeps its rows' digests. Then,
twice over, a fraction of its rows (default 1%) is changed and the Hive table brought up to date both ways, each
timed from end to end in the same run:

- diff mode, without the binlog: the bucket sums and the changed rows read in one consistent snapshot
  (``stages.diff``), then the same Spark merge and commit an incremental run has;
- the full reload as MySqlToHiveOperator does it (merge_bench's ``mysql_to_hive``).

It prints wall times and the bytes the server sent for each (its own session counter), and the ratios.
Targets: time <= 0.5x, bytes <= 0.05x.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from airflow_cdc_provider.core.ledger import Ledger, RunRef, plan_run  # noqa: E402
from airflow_cdc_provider.core.merge import MergeJob, MergeSpec  # noqa: E402
from airflow_cdc_provider.core.types import hive_type  # noqa: E402
from airflow_cdc_provider.core.workdir import TableDir  # noqa: E402
from airflow_cdc_provider.spark import MERGE_JOB  # noqa: E402
from airflow_cdc_provider.stages.diff import diff_table  # noqa: E402
from airflow_cdc_provider.stages.snapshot import snapshot  # noqa: E402
from airflow_cdc_provider.storage import WorkStore  # noqa: E402
from bench.merge_bench import bench_table, change, mysql_to_hive, submit  # noqa: E402


def full_read_bytes(server) -> int:
    """What the server sends for every row of the table: a plain SELECT *, by its session counter."""
    conn = server.root_connection()
    try:
        with conn.cursor() as cursor:
            cursor.execute("SHOW SESSION STATUS LIKE 'Bytes_sent'")
            before = int(cursor.fetchall()[0][1])
            cursor.execute("SELECT * FROM bench.orders")
            while cursor.fetchmany(50_000):
                pass
            cursor.execute("SHOW SESSION STATUS LIKE 'Bytes_sent'")
            return int(cursor.fetchall()[0][1]) - before
    finally:
        conn.close()


class DiffMode:
    def __init__(self, source, header, work: Path):
        self.source, self.header, self.work = source, header, work
        self.ledger = Ledger(TableDir(work_dir=str(work), hive_table="ods.diff"), WorkStore())
        self.runs, self.digests = 0, ""

    def run(self) -> tuple[float, dict]:
        self.runs += 1
        run = RunRef("bench", f"r{self.runs}")
        t0 = time.perf_counter()
        self.ledger.acquire(run, lambda holder: False, dt.datetime.now(dt.UTC))
        plan = plan_run(run, self.ledger.committed(), None, None, capture="diff")
        self.ledger.save_run_plan(plan)
        out = Path(self.ledger.table.run(run.key).root)
        detail: dict = {}
        if plan.mode == "snapshot":
            snap = snapshot(self.source.hook, self.header, out / "snapshot", digests=out / "digests.parquet")
            upserts, deletes, as_of = snap.files, None, dt.datetime.now(dt.UTC)
            self.digests = str(snap.digests_file)
        else:
            found = diff_table(self.source.hook, self.header, self.digests, out)
            detail = {"read": time.perf_counter() - t0, "bytes_sent": found.bytes_sent, "levels": found.levels,
                      "upserts": found.upserts, "deletes": found.deletes, "compared": found.compared_rows}
            upserts, deletes, as_of = [found.upsert_file], found.delete_file, found.as_of
            self.digests = found.digests_file
        spec = MergeSpec(
            database="ods", table="diff", source=self.header.table, warehouse_dir=str(self.work / "warehouse"),
            metastore_uri=None, plan=plan, end=None, as_of=as_of,  # read without the binlog: no watermark
            columns=tuple((n, hive_type(t)) for n, t in self.header.columns), key=self.header.key,
            capture_dir=str(out), upsert_files=tuple(upserts), delete_file=deletes, digests=self.digests,
        )
        (out / "job.json").write_text(MergeJob(spec.warehouse_dir, None, (spec,), str(out / "result.json")).to_text())
        detail["merge"] = submit(MERGE_JOB, str(out / "job.json"), cwd=out)
        result = json.loads((out / "result.json").read_text())["tables"]["ods.diff"]
        self.ledger.commit(plan, spec.committed(result["version"], result["location"]))
        self.ledger.release(run)
        return time.perf_counter() - t0, {**detail, **result}


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    fraction = float(sys.argv[2]) if len(sys.argv) > 2 else 0.01
    work = Path(tempfile.mkdtemp(prefix="diff-bench-"))
    with bench_table(work, rows) as (server, source, header):
        diff = DiffMode(source, header, work)
        t0 = time.perf_counter()
        diff.run()
        print(f"table of {rows:,} rows; initial load (snapshot with digests + merge) {time.perf_counter() - t0:.1f} s")
        table_bytes = full_read_bytes(server)
        op_times, diff_times, diff_bytes = [], [], []
        for round_ in range(2):
            seconds, _ = mysql_to_hive(source, header, work)
            op_times.append(seconds)
            changed = change(server, rows, fraction, round_)
            seconds, detail = diff.run()
            diff_times.append(seconds)
            diff_bytes.append(detail["bytes_sent"])
            print(f"round {round_ + 1}: {changed:,} rows changed; MySqlToHiveOperator-style reload "
                  f"{op_times[-1]:.1f} s; diff mode {seconds:.1f} s (read {detail['read']:.1f} s: "
                  f"{detail['upserts']:,} upserts, "
                  f"{detail['deletes']:,} deletes, {detail['compared']:,} rows' digests compared, levels "
                  f"{detail['levels']}; merge {detail['merge']:.1f} s; version {detail['version']} with "
                  f"{detail['rows']:,} rows), {detail['bytes_sent']:,} bytes sent against {table_bytes:,} for the "
                  "table")
        count = server.execute("SELECT COUNT(*) FROM bench.orders")[0][0]
        assert detail["rows"] == count, (detail["rows"], count)
        print(f"diff mode / MySqlToHiveOperator-style full reload: time "
              f"{statistics.median(diff_times) / statistics.median(op_times):.2f}x (target <= 0.5x), bytes sent "
              f"{statistics.median(diff_bytes) / table_bytes:.4f}x the table's (target <= 0.05x)")


if __name__ == "__main__":
    main()
