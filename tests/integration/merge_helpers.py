"""One Hive target driven run by run as the operators drive it: lock, plan, capture, merge job, spark-submit,
and the commit recorded in the ledger from the job's result."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from airflow_cdc_testing.hive import read_hive_table, spark_env, spark_submit_command

from airflow_cdc_provider.core.changelog import ChangelogSpec, changelog_table
from airflow_cdc_provider.core.history import HistorySettings, HistorySpec
from airflow_cdc_provider.core.ledger import Ledger, RunRef, plan_run
from airflow_cdc_provider.core.merge import MergeJob, MergeSpec, PlainTarget
from airflow_cdc_provider.core.types import hive_type
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.spark import MERGE_JOB
from airflow_cdc_provider.spark.jvm import ClassArchive, batch_gc_options
from airflow_cdc_provider.stages.snapshot import snapshot
from airflow_cdc_provider.storage import WorkStore
from tests.integration.capture_helpers import capture_after
from tests.integration.hive_helpers import hive_rows

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Table:
    """One Hive target with its ledger, driven run by run as the operators will."""

    def __init__(self, hook, header, tmp_path: Path, target: str = "ods.items", changelog: bool = False,
                 history: HistorySettings | None = None, keep_versions: int = 2):
        self.hook, self.header, self.tmp = hook, header, tmp_path
        self.changelog = ChangelogSpec(table=changelog_table(target.split(".")[1])) if changelog else None
        self.history = HistorySpec.of(target.split(".")[1], history) if history else None
        self.keep_versions = keep_versions
        self.as_of = NOW  # the moment the next run's version reflects
        self.database, self.table = target.split(".")
        self.warehouse = str(tmp_path / "warehouse")
        self.ledger = Ledger(TableDir(work_dir=str(tmp_path / "work"), hive_table=target), WorkStore())
        self.runs = 0

    def run_dir(self, run: RunRef) -> Path:
        """Where the run's capture files go: the merge reads them from nowhere else."""
        return Path(self.ledger.table.run(run.key).root)

    def spec(self, run: RunRef, plan, end, upserts, delete_file) -> Path:
        spec = MergeSpec(
            database=self.database, table=self.table, source=self.header.table, warehouse_dir=self.warehouse,
            metastore_uri=None, plan=plan, end=end, as_of=self.as_of, capture_dir=str(self.run_dir(run)),
            columns=tuple((n, hive_type(t)) for n, t in self.header.columns), key=self.header.key,
            upsert_files=tuple(upserts), delete_file=delete_file, keep_versions=self.keep_versions,
            target=PlainTarget(changelog=self.changelog, history=self.history),
        )
        job = MergeJob(self.warehouse, None, (spec,), str(self.tmp / f"result-{run.run_id}.json"))
        path = self.tmp / f"job-{run.run_id}.json"
        path.write_text(job.to_text())
        return path

    def prepare(self, fresh: bool = False):
        """The next run (a fresh snapshot when ``fresh``): take the lock, plan, capture, and write the merge job."""
        self.runs += 1
        run = RunRef("test", f"r{self.runs}")
        self.ledger.acquire(run, lambda holder: False, NOW)
        plan = plan_run(run, self.ledger.committed(), None, None, fresh_snapshot=fresh)
        self.ledger.save_run_plan(plan)
        if plan.mode == "snapshot":
            snap = snapshot(self.hook, self.header, self.run_dir(run) / "snapshot")
            return run, self.spec(run, plan, snap.watermark, snap.files, None)
        result, replayed = capture_after(self.hook, self.header, plan.start, self.run_dir(run), run.run_id,
                                         positions=self.changelog is not None)
        self.last_range = (plan.start, result.end)
        return run, self.spec(run, plan, result.end, [replayed.upsert_file], replayed.delete_file)

    def submit(self, job_path: Path, java_options: list[str] | None = None,
               env: dict[str, str] | None = None) -> subprocess.Popen:
        command = spark_submit_command(MERGE_JOB, str(job_path), work_dir=str(self.tmp), java_options=java_options)
        return subprocess.Popen(command, env=env or spark_env(), cwd=self.tmp, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def merge(self, job_path: Path, env: dict[str, str] | None = None) -> dict:
        """Run the job, and record its commit in the ledger as the merge task does; the table's result.

        ``env``: another Spark's environment (its spark-submit first on PATH), which starts its own JVM."""
        archive = None if env else ClassArchive(str(Path(sys.executable).with_name("spark-submit")))
        proc = self.submit(job_path, archive.java_options() + batch_gc_options() if archive else None, env)
        output, _ = proc.communicate(timeout=600)
        if archive:
            archive.job_done() if proc.returncode == 0 else archive.job_failed()
        assert proc.returncode == 0, output[-6000:]
        self.last_output = output
        job = MergeJob.from_text(job_path.read_text())
        (spec,) = job.tables
        result = json.loads(Path(job.result_file).read_text())["tables"][f"{self.database}.{self.table}"]
        if result["status"] == "committed":
            self.ledger.commit(spec.plan, spec.committed(result["version"], result["location"]))
        self.ledger.release(spec.plan.run)
        return result

    def read(self):
        rows, location = read_hive_table(self.warehouse, None, f"{self.database}.{self.table}")
        return hive_rows(rows, self.header.key), location
