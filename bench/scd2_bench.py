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
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_cdc_testing.server import ThrowawayServer  # noqa: E402

from airflow_cdc_provider.core.history import HistorySettings, HistorySpec  # noqa: E402
from airflow_cdc_provider.core.identifiers import TableName  # noqa: E402
from airflow_cdc_provider.stages.extract import extract, in_one_directory  # noqa: E402
from airflow_cdc_provider.stages.replay import replay  # noqa: E402
from airflow_cdc_provider.stages.snapshot import snapshot  # noqa: E402
from bench.capture_bench import Source, header_of  # noqa: E402
from bench.merge_bench import DDL, FILL, change  # noqa: E402
from bench.targets import Target, size_of  # noqa: E402

START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


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
        kept = Target("orders", header, work, history=HistorySpec.of("orders", HistorySettings(daily=True, scd2=True)))
        database = kept.warehouse / "ods.db"
        out = kept.begin()
        snap = snapshot(source.hook, header, out / "snapshot")
        seconds, outcome, _ = kept.merge(snap.watermark, snap.files, None, as_of=START)
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
            extracted = extract(source.hook, in_one_directory([header], out / "raw"), kept.plan.start, high)
            replayed = replay(extracted.files[header.table], out / "upsert.parquet", out / "delete.parquet")
            as_of = START + dt.timedelta(days=day + 1)  # the day's midnight: the range ends there
            seconds, outcome, _ = kept.merge(extracted.end, [str(replayed.upsert_file)], str(replayed.delete_file),
                                             as_of=as_of)
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
