"""What a heal ships from the server, against the table's bytes: after a TRUNCATE PARTITION of 1% of the table, and
after an online schema change (pt-online-schema-change) that added a nullable column while a writer changed rows.

    .venv/bin/python bench/heal_bench.py [rows]

The table (default 2,000,000 rows, merge_bench's, partitioned at the source in 100 ranges of ids) is loaded into
Hive by a snapshot and a Spark merge, as a first run does. Each case then breaks its chain and heals it as the heal
task does (``stages.heal``): the digests job over the Hive version (Spark), the diff at the server, the merge.
It prints the bytes the server sent for each heal (its own session counter) against a plain read of the whole
table, and the rows the diff read and found gone. Targets: bytes <= 0.05x for both.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_cdc_provider.core.contract import CapturedTable, TablePlan  # noqa: E402
from airflow_cdc_provider.core.identifiers import TableName  # noqa: E402
from airflow_cdc_provider.core.ledger import Ledger, RunRef, plan_run  # noqa: E402
from airflow_cdc_provider.core.merge import MergeJob, MergeSpec  # noqa: E402
from airflow_cdc_provider.core.records import RawHeader  # noqa: E402
from airflow_cdc_provider.core.types import hive_type  # noqa: E402
from airflow_cdc_provider.core.version_digests import DigestsJob, DigestsJobs  # noqa: E402
from airflow_cdc_provider.core.workdir import TableDir  # noqa: E402
from airflow_cdc_provider.spark import DIGESTS_JOB, MERGE_JOB  # noqa: E402
from airflow_cdc_provider.stages.heal import heal_table, merge_input, target  # noqa: E402
from airflow_cdc_provider.stages.snapshot import snapshot  # noqa: E402
from airflow_cdc_provider.stages.version_digests import digests_file_from_spark  # noqa: E402
from airflow_cdc_provider.storage import WorkStore  # noqa: E402
from bench.capture_bench import header_of  # noqa: E402
from bench.diff_bench import full_read_bytes  # noqa: E402
from bench.merge_bench import bench_table, submit  # noqa: E402

PARTITIONS = 100


class Copy:
    """The Hive copy of bench.orders and its ledger, loaded and healed as a run would."""

    def __init__(self, source, work: Path) -> None:
        self.source, self.work, self.runs = source, work, 0
        self.ledger = Ledger(TableDir(work_dir=str(work), hive_table="ods.healed"), WorkStore())

    def _merge(self, spec: MergeSpec, out: Path) -> dict:
        (out / "job.json").write_text(MergeJob(spec.warehouse_dir, None, (spec,), str(out / "result.json")).to_text())
        seconds = submit(MERGE_JOB, str(out / "job.json"), cwd=out)
        result = json.loads((out / "result.json").read_text())["tables"]["ods.healed"]
        self.ledger.commit(spec.plan, spec.committed(result["version"], result["location"]))
        return {**result, "merge_seconds": seconds}

    def _run(self) -> tuple[RunRef, Path]:
        self.runs += 1
        run = RunRef("bench", f"r{self.runs}")
        self.ledger.acquire(run, lambda holder: False, dt.datetime.now(dt.UTC))
        out = Path(self.ledger.table.run(run.key).root)
        out.mkdir(parents=True, exist_ok=True)
        return run, out

    def load(self, header: RawHeader) -> None:
        run, out = self._run()
        plan = plan_run(run, None, None, None)
        self.ledger.save_run_plan(plan)
        snap = snapshot(self.source.hook, header, out / "snapshot")
        spec = MergeSpec(database="ods", table="healed", source=header.table,
                         warehouse_dir=str(self.work / "warehouse"), metastore_uri=None, plan=plan,
                         end=snap.watermark, as_of=dt.datetime.now(dt.UTC),
                         columns=tuple((n, hive_type(t)) for n, t in header.columns), key=header.key,
                         capture_dir=str(out), upsert_files=tuple(snap.files), delete_file=None,
                         source_columns=header.columns)
        self._merge(spec, out)
        self.ledger.release(run)

    def heal(self, why: str) -> dict:
        run, out = self._run()
        committed = self.ledger.committed()
        assert committed is not None
        plan = plan_run(run, committed, None, None)
        self.ledger.save_run_plan(plan)
        name = TableName("bench", "orders")
        table = TablePlan(table=CapturedTable(source=str(name), hive_table="ods.healed", schema_changes="strict",
                                              key=("id",), columns=committed.columns or ()),
                          plan=plan, table_dir=self.ledger.table, committed=committed)
        t0 = time.perf_counter()
        heal = target(table, why, self.source.hook)
        job = DigestsJob(warehouse_dir=str(self.work / "warehouse"), metastore_uri=None, table="ods.healed",
                         columns=heal.compared, key=heal.header.key, mariadb=True, time_zone="UTC",
                         location=committed.location, out=str(out / "version-digests"))
        (out / "digests-jobs.json").write_text(DigestsJobs(jobs=(job,)).to_text())
        digests_seconds = submit(DIGESTS_JOB, str(out / "digests-jobs.json"), cwd=out)
        version = RawHeader(heal.header.table, heal.compared, heal.header.key)
        digests_file_from_spark(out / "version-digests", version, out / "version-digests.parquet")
        result = heal_table(self.source.hook, heal, out / "version-digests.parquet", out / "heal", mariadb=True)
        given = merge_input(heal, result, str)
        spec = MergeSpec(database="ods", table="healed", source=str(name), warehouse_dir=str(self.work / "warehouse"),
                         metastore_uri=None, plan=plan.model_copy(update={"mode": "heal"}), end=given.end,
                         as_of=given.as_of, columns=tuple((n, hive_type(t)) for n, t in given.columns),
                         key=given.key, capture_dir=str(out), upsert_files=given.upsert_files,
                         delete_file=given.delete_file, source_columns=given.source_columns,
                         fill_sources=given.fill_sources, reread_rows=True)
        merged = self._merge(spec, out)
        self.ledger.release(run)
        found = result.found
        return {**merged, "seconds": time.perf_counter() - t0, "digests_seconds": digests_seconds,
                "diff_seconds": result.seconds, "bytes_sent": found.bytes_sent, "upserts": found.upserts,
                "deletes": found.deletes, "compared": found.compared_rows, "levels": found.levels}


def online_schema_change(server, rows: int) -> int:
    """pt-online-schema-change adds a nullable column while a writer updates rows; returns the rows it changed."""
    done, changed = threading.Event(), [0]

    def write() -> None:
        rng = random.Random(7)
        with server.root_connection() as conn, conn.cursor() as cursor:
            while not done.is_set():  # an application's pace: a few hundred updates a second
                changed[0] += cursor.execute(f"UPDATE bench.orders SET qty = qty + 1 WHERE id = {rng.randint(1, rows)}")
                time.sleep(0.002)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        subprocess.run(["pt-online-schema-change", "--alter", "ADD COLUMN channel VARCHAR(20) NULL", "--execute",
                        "--recursion-method=none", "--no-version-check", "--chunk-size=20000", "--chunk-time=0",
                        f"S={server.socket_path},u=root,D=bench,t=orders"], check=True, capture_output=True,
                       timeout=3600)
    finally:
        done.set()
        writer.join(30)
    return changed[0]


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    work = Path(tempfile.mkdtemp(prefix="heal-bench-"))
    width = rows // PARTITIONS
    with bench_table(work, rows) as (server, source, header):
        ranges = ", ".join(f"PARTITION p{i} VALUES LESS THAN ({(i + 1) * width + 1})" for i in range(PARTITIONS - 1))
        server.execute(f"ALTER TABLE bench.orders PARTITION BY RANGE (id) ({ranges}, "
                       "PARTITION pmax VALUES LESS THAN MAXVALUE)")
        header = header_of(server, TableName("bench", "orders"))
        copy = Copy(source, work)
        t0 = time.perf_counter()
        copy.load(header)
        table_bytes = full_read_bytes(server)
        print(f"table of {rows:,} rows in {PARTITIONS} partitions; initial load {time.perf_counter() - t0:.1f} s; a "
              f"plain read of it sends {table_bytes:,} bytes")
        server.execute("ALTER TABLE bench.orders TRUNCATE PARTITION p37")
        truncated = copy.heal("TRUNCATE PARTITION p37")
        print(f"TRUNCATE PARTITION of 1%: healed in {truncated['seconds']:.1f} s (digests job "
              f"{truncated['digests_seconds']:.1f} s, diff {truncated['diff_seconds']:.1f} s, merge "
              f"{truncated['merge_seconds']:.1f} s): {truncated['upserts']:,} rows read, "
              f"{truncated['deletes']:,} gone, "
              f"{truncated['compared']:,} rows' digests compared, levels {truncated['levels']}; "
              f"{truncated['bytes_sent']:,} bytes sent: {truncated['bytes_sent'] / table_bytes:.4f}x the table's "
              "(target <= 0.05x)")
        written = online_schema_change(server, rows)
        added = copy.heal("pt-online-schema-change ADD COLUMN channel")
        print(f"pt-online-schema-change ADD COLUMN under a writer ({written:,} rows changed meanwhile): healed in "
              f"{added['seconds']:.1f} s (digests job {added['digests_seconds']:.1f} s, diff "
              f"{added['diff_seconds']:.1f} s, merge {added['merge_seconds']:.1f} s): {added['upserts']:,} rows "
              f"read, {added['deletes']:,} gone; {added['bytes_sent']:,} bytes sent: "
              f"{added['bytes_sent'] / table_bytes:.4f}x the table's (target <= 0.05x)")
        count = server.execute("SELECT COUNT(*) FROM bench.orders")[0][0]
        assert added["rows"] == count, (added["rows"], count)


if __name__ == "__main__":
    main()
