"""A Hive table the benches feed run by run as the operators do (lock, plan, merge job, ledger), with whatever it
keeps beside it (a changelog, daily snapshots, an SCD2 history)."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

from airflow_cdc_testing.hive import run_spark_job

from airflow_cdc_provider.core.changelog import ChangelogSpec
from airflow_cdc_provider.core.history import HistorySpec
from airflow_cdc_provider.core.ledger import Ledger, RunRef, plan_run
from airflow_cdc_provider.core.merge import MergeJob, MergeSpec, PartitionedTarget, PlainTarget
from airflow_cdc_provider.core.partitioning import Partitioning
from airflow_cdc_provider.core.types import hive_type
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.spark import MERGE_JOB
from airflow_cdc_provider.storage import WorkStore


def size_of(path: Path) -> int:
    """The bytes of the files under ``path`` (0 when it does not exist)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


class Target:
    """``ods.<name>``, fed from the source table ``header`` describes, in ``work``'s warehouse."""

    def __init__(self, name: str, header: Any, work: Path, partitioning: Partitioning | None = None,
                 changelog: ChangelogSpec | None = None, history: HistorySpec | None = None):
        self.name, self.header, self.work, self.partitioning = name, header, work, partitioning
        self.changelog, self.history = changelog, history
        self.ledger = Ledger(TableDir(work_dir=str(work / "work"), hive_table=f"ods.{name}"), WorkStore())
        self.warehouse = work / "warehouse"
        self.runs = 0
        self.run_ref: RunRef | None = None
        self.plan: Any = None
        self.outcome: dict = {}

    def begin(self) -> Path:
        """Take the lock and plan the next run; its capture directory."""
        self.runs += 1
        self.run_ref = RunRef("bench", f"r{self.runs}")
        self.ledger.acquire(self.run_ref, lambda holder: False, dt.datetime.now(dt.UTC))
        self.plan = plan_run(self.run_ref, self.ledger.committed(), None, None)
        self.ledger.save_run_plan(self.plan)
        return Path(self.ledger.table.run(self.run_ref.key).root)

    def merge(self, end: Any, upserts: list[str], deletes: str | None, left: tuple[str, ...] = (),
              as_of: dt.datetime | None = None) -> tuple[float, dict, dict]:
        """Merge and commit the version reflecting ``as_of`` (now when None); (the job's wall seconds, its result
        for the table, the job's whole result)."""
        assert self.run_ref is not None
        out = Path(self.ledger.table.run(self.run_ref.key).root)
        spec = MergeSpec(
            database="ods", table=self.name, source=self.header.table, warehouse_dir=str(self.warehouse),
            metastore_uri=None, plan=self.plan, end=end, as_of=as_of or dt.datetime.now(dt.UTC),
            columns=tuple((n, hive_type(t)) for n, t in self.header.columns), key=self.header.key,
            capture_dir=str(out), upsert_files=tuple(upserts), delete_file=deletes,
            target=(PartitionedTarget(partitioning=self.partitioning, left_partitions=left,
                                      changelog=self.changelog, history=self.history) if self.partitioning
                    else PlainTarget(changelog=self.changelog, history=self.history)),
        )
        (out / "job.json").write_text(MergeJob(spec.warehouse_dir, None, (spec,), str(out / "result.json")).to_text())
        t0 = time.perf_counter()
        result = run_spark_job(MERGE_JOB, str(out / "job.json"), work_dir=str(out), timeout=3600)
        seconds = time.perf_counter() - t0
        if result.returncode:
            raise RuntimeError(result.stdout[-3000:] + result.stderr[-5000:])
        job = json.loads((out / "result.json").read_text())
        outcome = job["tables"][f"ods.{self.name}"]
        assert outcome["status"] == "committed", outcome
        self.ledger.commit(self.plan, spec.committed(outcome["version"], outcome["location"]))
        self.ledger.release(self.run_ref)
        self.outcome = outcome
        return seconds, outcome, job
