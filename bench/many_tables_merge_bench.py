"""One merge application loading many small tables: where a table's time goes when tables are many and small.

    .venv/bin/python bench/many_tables_merge_bench.py [tables] [rows per table]

Each table (default 200 of 3 rows) gets a snapshot's capture file in its run's directory; one merge job loads them
all into an embedded metastore, as the merge task of a source's first load does. Printed: the application's wall
time, its session start, the tables' own time, and each phase (``TableMerge.phases``) per table. With few rows
the phases are the merge's fixed cost per table, which a source of a thousand small tables pays a thousand times.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from airflow_cdc_testing.hive import run_spark_job  # noqa: E402

from airflow_cdc_provider.core.ledger import RunRef, plan_run  # noqa: E402
from airflow_cdc_provider.core.merge import MergeJob, MergeResult, MergeSpec  # noqa: E402
from airflow_cdc_provider.core.watermark import Watermark  # noqa: E402
from airflow_cdc_provider.core.workdir import TableDir  # noqa: E402
from airflow_cdc_provider.spark import MERGE_JOB  # noqa: E402


def main(argv: list[str]) -> int:
    tables = int(argv[1]) if len(argv) > 1 else 200
    rows = int(argv[2]) if len(argv) > 2 else 3
    work = Path(tempfile.mkdtemp(prefix="cdc-bench-many-"))
    run = RunRef("bench", "first-load")
    plan = plan_run(run, None, None, None)
    specs = []
    for n in range(tables):
        run_dir = Path(TableDir(work_dir=str(work / "work"), hive_table=f"ods.t{n}").run(run.key).root)
        run_dir.mkdir(parents=True)
        pq.write_table(pa.table({"id": pa.array(range(rows), pa.int32()), "v": pa.array(["x"] * rows)}),
                       run_dir / "snapshot.parquet")
        specs.append(MergeSpec(
            database="ods", table=f"t{n}", source=f"shop.t{n}", warehouse_dir=str(work / "warehouse"),
            metastore_uri=None, plan=plan, end=Watermark("binlog.000001", 4, server_id=1),
            as_of=dt.datetime.now(dt.UTC), columns=(("id", "int"), ("v", "string")), key=("id",),
            capture_dir=str(run_dir), upsert_files=(str(run_dir / "snapshot.parquet"),), delete_file=None))
    job = work / "job.json"
    job.write_text(MergeJob(warehouse_dir=str(work / "warehouse"), metastore_uri=None, tables=tuple(specs),
                            result_file=str(work / "result.json")).to_text())
    started = time.perf_counter()
    done = run_spark_job(MERGE_JOB, str(job), work_dir=str(work), timeout=7200)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-5000:])
    result = MergeResult.from_text((work / "result.json").read_text())
    wrong = {name: t.rows for name, t in result.tables.items() if (t.status, t.rows) != ("committed", rows)}
    if wrong:
        raise SystemExit(f"{len(wrong)} tables not committed with {rows} rows: {dict(list(wrong.items())[:5])}")
    phases: dict[str, float] = {}
    for table in result.tables.values():
        for phase, seconds in table.phases.items():
            phases[phase] = phases.get(phase, 0.0) + seconds
    own = sum(t.seconds for t in result.tables.values())
    print(f"{tables} tables of {rows} rows in one merge application: {wall:.1f} s wall, session "
          f"{result.session_seconds:.1f} s, tables {own:.1f} s ({own / tables * 1000:.0f} ms per table)")
    print("per table: " + ", ".join(f"{phase} {seconds / tables * 1000:.0f} ms" for phase, seconds in phases.items()))
    print(json.dumps({"tables": tables, "wall_s": round(wall, 1), "per_table_ms": round(own / tables * 1000)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
