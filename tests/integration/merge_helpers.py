"""One Hive target driven run by run as the operators drive it: lock, plan, capture, merge spec, spark-submit."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from airflow_cdc_provider.core.ledger import Ledger, RunRef, plan_run
from airflow_cdc_provider.core.merge import MergeSpec
from airflow_cdc_provider.core.types import hive_type
from airflow_cdc_provider.spark import MERGE_JOB
from airflow_cdc_provider.spark.jvm import ClassArchive, batch_gc_options
from airflow_cdc_provider.stages.snapshot import snapshot
from airflow_cdc_provider.testing.hive import read_hive_table, spark_env, spark_submit_command
from tests.integration.capture_helpers import capture_after
from tests.integration.hive_helpers import hive_rows

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


class Table:
    """One Hive target with its ledger, driven run by run as the operators will."""

    def __init__(self, hook, header, tmp_path: Path, target: str = "ods.items"):
        self.hook, self.header, self.tmp = hook, header, tmp_path
        self.database, self.table = target.split(".")
        self.warehouse = str(tmp_path / "warehouse")
        self.ledger = Ledger(tmp_path / "ledger")
        self.runs = 0

    def spec(self, run: RunRef, plan, end, upserts, delete_file) -> Path:
        spec = MergeSpec(
            database=self.database, table=self.table, source=self.header.table, warehouse_dir=self.warehouse,
            metastore_uri=None, plan=plan, end=end, as_of=NOW,
            columns=tuple((n, hive_type(t)) for n, t in self.header.columns), key=self.header.key,
            upsert_files=tuple(upserts), delete_file=delete_file, ledger_dir=str(self.ledger.root),
            result_file=str(self.tmp / f"result-{run.run_id}.json"), keep_versions=2,
        )
        path = self.tmp / f"spec-{run.run_id}.json"
        spec.write(path)
        return path

    def prepare(self):
        """The next run: take the lock, plan, capture, and write the merge spec."""
        self.runs += 1
        run = RunRef("test", f"r{self.runs}")
        self.ledger.acquire(run, lambda holder: False, NOW)
        plan = plan_run(run, self.ledger.committed(), None, None)
        self.ledger.save_run_plan(plan)
        if plan.mode == "snapshot":
            snap = snapshot(self.hook, self.header, self.tmp / f"snap-{run.run_id}")
            return run, self.spec(run, plan, snap.watermark, snap.files, None)
        result, replayed = capture_after(self.hook, self.header, plan.start, self.tmp, run.run_id)
        return run, self.spec(run, plan, result.end, [replayed.upsert_file], replayed.delete_file)

    def submit(self, spec_path: Path, java_options: list[str] | None = None) -> subprocess.Popen:
        command = spark_submit_command(MERGE_JOB, str(spec_path), work_dir=str(self.tmp), java_options=java_options)
        return subprocess.Popen(command, env=spark_env(), cwd=self.tmp, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def merge(self, spec_path: Path) -> dict:
        archive = ClassArchive(str(Path(sys.executable).with_name("spark-submit")))
        proc = self.submit(spec_path, archive.java_options() + batch_gc_options())
        output, _ = proc.communicate(timeout=600)
        archive.job_done() if proc.returncode == 0 else archive.job_failed()
        assert proc.returncode == 0, output[-6000:]
        run = RunRef("test", json.loads(spec_path.read_text())["plan"]["run"]["run_id"])
        self.ledger.release(run)
        return json.loads(Path(json.loads(spec_path.read_text())["result_file"]).read_text())

    def read(self):
        rows, location = read_hive_table(self.warehouse, None, f"{self.database}.{self.table}")
        return hive_rows(rows, self.header.key), location
