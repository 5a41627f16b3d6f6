"""What a table's history costs as it grows: the bytes each daily run writes for its SCD2 history and its daily
snapshot, over simulated days, on a throwaway MariaDB with Spark in local mode.

    .venv/bin/python bench/scd2_bench.py [rows] [days] [changed fraction]

One source table (default 200,000 rows, merge_bench's columns) is loaded into a Hive table with
``history: {daily: true, scd2: true}``. Then, for each day (default 30), a fraction of its rows (default 0.5%) is
changed (updates, deletes, inserts), captured (extract → replay) and merged as a run whose range ends at that
day's midnight. Per day it prints the keys changed, the history rows the run closed and kept open, and the bytes
written: the table's new version, the history's directory of that version (its open partition and its day's
closed rows), and the snapshots table's own directory. Expected: the closed rows and their bytes follow the
changes, not the table; the open partition is the table's size (rewritten each run, as an unpartitioned table's
version is); the daily snapshot writes nothing (its partition is the version's own directory).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_cdc_testing.hive import run_spark_job  # noqa: E402
from airflow_cdc_testing.server import ThrowawayServer  # noqa: E402

from airflow_cdc_provider.core.history import HistorySettings, HistorySpec  # noqa: E402
from airflow_cdc_provider.core.identifiers import TableName  # noqa: E402
from airflow_cdc_provider.core.ledger import Ledger, RunRef, plan_run  # noqa: E402
from airflow_cdc_provider.core.merge import MergeJob, MergeSpec  # noqa: E402
from airflow_cdc_provider.core.types import hive_type  # noqa: E402
from airflow_cdc_provider.core.workdir import TableDir  # noqa: E402
from airflow_cdc_provider.spark import MERGE_JOB  # noqa: E402
from airflow_cdc_provider.stages.extract import extract  # noqa: E402
from airflow_cdc_provider.stages.replay import replay  # noqa: E402
from airflow_cdc_provider.stages.snapshot import snapshot  # noqa: E402
from airflow_cdc_provider.storage import WorkStore  # noqa: E402
from bench.capture_bench import Source, header_of  # noqa: E402
from bench.merge_bench import DDL, FILL, change  # noqa: E402

START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


class Kept:
    """The Hive table with its history, run by run as the operators do (lock, plan, merge, ledger)."""

    def __init__(self, header, work: Path):
        self.header, self.work = header, work
        self.ledger = Ledger(TableDir(work_dir=str(work / "work"), hive_table="ods.orders"), WorkStore())
        self.warehouse = work / "warehouse"
        self.history = HistorySpec.of("orders", HistorySettings(daily=True, scd2=True))
        self.runs = 0

    def begin(self) -> Path:
        self.runs += 1
        self.run = RunRef("bench", f"r{self.runs}")
        self.ledger.acquire(self.run, lambda holder: False, dt.datetime.now(dt.UTC))
        self.plan = plan_run(self.run, self.ledger.committed(), None, None)
        self.ledger.save_run_plan(self.plan)
        return Path(self.ledger.table.run(self.run.key).root)

    def merge(self, end, upserts: list[str], deletes: str | None, as_of: dt.datetime) -> tuple[float, dict]:
        out = Path(self.ledger.table.run(self.run.key).root)
        spec = MergeSpec(
            database="ods", table="orders", source=self.header.table, warehouse_dir=str(self.warehouse),
            metastore_uri=None, plan=self.plan, end=end, as_of=as_of,
            columns=tuple((n, hive_type(t)) for n, t in self.header.columns), key=self.header.key,
            capture_dir=str(out), upsert_files=tuple(upserts), delete_file=deletes, history=self.history)
        (out / "job.json").write_text(MergeJob(spec.warehouse_dir, None, (spec,), str(out / "result.json")).to_text())
        t0 = time.perf_counter()
        result = run_spark_job(MERGE_JOB, str(out / "job.json"), work_dir=str(out), timeout=3600)
        seconds = time.perf_counter() - t0
        if result.returncode:
            raise RuntimeError(result.stdout[-3000:] + result.stderr[-5000:])
        outcome = json.loads((out / "result.json").read_text())["tables"]["ods.orders"]
        assert outcome["status"] == "committed", outcome
        self.ledger.commit(self.plan, spec.committed(outcome["version"], outcome["location"]))
        self.ledger.release(self.run)
        return seconds, outcome


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    days = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    fraction = float(sys.argv[3]) if len(sys.argv) > 3 else 0.005
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    print(f"{rows:,} rows, {days} days, {fraction:.2%} changed a day", flush=True)
    work = Path(tempfile.mkdtemp(prefix="scd2-bench-"))
    try:
        run(work, rows, days, fraction)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work: Path, rows: int, days: int, fraction: float) -> None:
    with ThrowawayServer.start(work / "mariadb", {"max_binlog_size": 256 * 1024 * 1024}) as server:
        source = Source(server, server.create_user("bench"))
        server.execute("CREATE DATABASE bench", f"CREATE TABLE bench.orders ({DDL})",
                       f"INSERT INTO bench.orders SELECT {FILL} FROM bench.seq_1_to_{rows}")
        header = header_of(server, TableName("bench", "orders"))
        kept = Kept(header, work)
        database = kept.warehouse / "ods.db"
        out = kept.begin()
        snap = snapshot(source.hook, header, out / "snapshot")
        seconds, outcome = kept.merge(snap.watermark, snap.files, None, START)
        version_bytes = size_of(database / "orders" / "v000001")
        print(f"first load: {snap.rows:,} rows, merge {seconds:.1f} s, version {version_bytes:,} bytes, history "
              f"{size_of(database / 'orders_history'):,} bytes", flush=True)
        print("day         keys  closed    open  version B  history B (open + closed)  closed B  snapshots B  "
              "history total B  merge s", flush=True)
        closed_bytes = []
        for day in range(days):
            change(server, rows, fraction, day)
            out = kept.begin()
            high = source.current_watermark()
            extracted = extract(source.hook, [header], kept.plan.start, high, out / "raw")
            replayed = replay(extracted.files[header.table], out / "upsert.parquet", out / "delete.parquet")
            as_of = START + dt.timedelta(days=day + 1)  # the day's midnight: the range ends there
            seconds, outcome = kept.merge(extracted.end, [str(replayed.upsert_file)], str(replayed.delete_file),
                                          as_of)
            name = f"v{outcome['version']:06d}"
            history = outcome["history"]
            written = database / "orders_history" / name
            closed = size_of(written) - size_of(written / "end_date=9999-12-31")
            closed_bytes.append(closed)
            print(f"{history['day']}  {replayed.upserts + replayed.deletes:>6,}  {history['closed']:>6,}  "
                  f"{history['opened']:>6,}  {size_of(database / 'orders' / name):>9,}  {size_of(written):>24,}  "
                  f"{closed:>8,}  {size_of(database / 'orders_snapshots'):>11,}  "
                  f"{size_of(database / 'orders_history'):>15,}  {seconds:>7.1f}", flush=True)
        print(f"closed bytes per day: first {closed_bytes[0]:,}, last {closed_bytes[-1]:,}, "
              f"max {max(closed_bytes):,}; the snapshots table's directory holds "
              f"{size_of(database / 'orders_snapshots'):,} bytes after {days} days")


if __name__ == "__main__":
    main()
