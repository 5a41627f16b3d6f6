"""The merge task (a SparkSubmitOperator running the provider's merge job) and the finish task."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook, BaseOperator
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.ledger import SNAPSHOT, Ledger, RunPlan, RunRef
from airflow_cdc_provider.core.merge import MergeSpec
from airflow_cdc_provider.core.types import header_of, hive_type
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.spark import MERGE_JOB
from airflow_cdc_provider.spark.jvm import ClassArchive, batch_gc_options
from airflow_cdc_provider.spark.session import metastore_conf


class SparkMergeOperator(SparkSubmitOperator):
    """Merge this run's upsert and delete files into the next version of the Hive table, and commit it.

    Runs ``airflow_cdc_provider/spark/merge_job.py`` through spark-submit; ``--master`` and the rest come from
    the Spark connection. The job's only argument is the path of a merge spec it reads (no secret in it).
    Safe to retry: a killed job leaves the table on its previous version, and a retry merges again.

    The job runs its driver here (client mode) with this interpreter, so it can write the ledger in
    ``work_dir``. When no ``spark-submit`` is on the PATH, the one installed beside this interpreter (with the
    ``pyspark`` package) is used.

    :param hive_table: the target, ``database.table``.
    :param warehouse_dir: the Hive warehouse; an embedded metastore lives in it unless ``metastore_uri``.
    :param metastore_uri: ``thrift://host:port`` of a Hive metastore, or None for the embedded one.
    :param plan_task_id, snapshot_task_id, extract_task_id, replay_task_id: the tasks whose XComs it reads.
    :param keep_versions: versions of the table kept on disk (at least 2).
    :param class_archive: start the driver JVM from a class-data archive kept on this worker, with the
        throughput collector unless ``conf`` chooses one (see ``airflow_cdc_provider.spark.jvm``); it cuts
        seconds off every merge.
    """

    def __init__(self, *, hive_table: str, warehouse_dir: str, metastore_uri: str | None, plan_task_id: str,
                 snapshot_task_id: str, extract_task_id: str, replay_task_id: str, keep_versions: int = 3,
                 class_archive: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("name", f"cdc-merge-{hive_table}")
        super().__init__(application=MERGE_JOB, **kwargs)
        self.hive_table, self.warehouse_dir, self.metastore_uri = hive_table, warehouse_dir, metastore_uri
        self.plan_task_id, self.snapshot_task_id = plan_task_id, snapshot_task_id
        self.extract_task_id, self.replay_task_id = extract_task_id, replay_task_id
        self.keep_versions, self.class_archive = keep_versions, class_archive
        self._given: tuple[dict, dict] | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        self._require_spark_connection()
        ti = context["ti"]
        planned = ti.xcom_pull(task_ids=self.plan_task_id, key="plan")
        plan = RunPlan.from_dict(planned)
        run_dir = Path(planned["run_dir"])
        fills_file = None
        if plan.mode == SNAPSHOT:
            snap = ti.xcom_pull(task_ids=self.snapshot_task_id)
            upserts, delete_file = snap["files"], None
            end, as_of = Watermark.from_dict(snap["watermark"]), snap["taken_at"]
            source_columns = None
        else:
            extraction, replayed = ti.xcom_pull(task_ids=self.extract_task_id), ti.xcom_pull(task_ids=self.replay_task_id)
            upserts, delete_file = [replayed["upsert_file"]], replayed["delete_file"]
            end, as_of = Watermark.from_dict(extraction["end"]), extraction["as_of"]
            source_columns = extraction.get("columns")
            fills_file = replayed.get("fills_file") or None
        # A re-run keeps the moment its first commit reflected; the range is the same.
        as_of = plan.as_of or dt.datetime.fromisoformat(as_of)
        header = header_of(pq.read_schema(upserts[0]))
        # The columns at the end of the range; a snapshot's are its files'.
        source_columns = tuple((str(n), str(t)) for n, t in source_columns or header.columns)
        database, table = self.hive_table.split(".", 1)
        result_file = run_dir / "merge-result.json"
        result_file.unlink(missing_ok=True)
        spec = MergeSpec(
            database=database, table=table, source=header.table, warehouse_dir=self.warehouse_dir,
            metastore_uri=self.metastore_uri, plan=plan, end=end, as_of=as_of,
            columns=tuple((name, hive_type(ctype)) for name, ctype in header.columns), key=header.key,
            upsert_files=tuple(upserts), delete_file=delete_file, ledger_dir=planned["ledger_dir"],
            result_file=str(result_file), keep_versions=self.keep_versions, source_columns=source_columns,
            fills_file=fills_file,
        )
        spec_path = run_dir / "merge-spec.json"
        spec.write(spec_path)
        self.application_args = [str(spec_path)]
        # What was given, kept apart from what is added here, so that running the same instance again (a
        # retry in-process) does not add the options twice.
        if self._given is None:
            self._given = (dict(self.conf or {}), dict(self.env_vars or {}))
        given_conf, given_env = self._given
        self.conf = {**metastore_conf(self.warehouse_dir, self.metastore_uri), **given_conf,
                     "spark.pyspark.driver.python": sys.executable}
        self.env_vars = dict(given_env)
        java_options = [given_conf.get("spark.driver.extraJavaOptions", "")]
        if not self.metastore_uri:  # Derby writes derby.log into its home: keep it out of the worker's cwd
            java_options.append(f"-Dderby.system.home={os.path.abspath(self.warehouse_dir)}")
        spark_submit = "spark-submit"
        if shutil.which(spark_submit) is None:
            bin_dir = str(Path(sys.executable).parent)
            self.env_vars["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
            spark_submit = str(Path(bin_dir) / spark_submit)
        archive = ClassArchive(spark_submit) if self.class_archive else None
        if archive is not None:
            java_options += archive.java_options() + batch_gc_options(" ".join(java_options))
        self.conf["spark.driver.extraJavaOptions"] = " ".join(o for o in java_options if o)
        self._hook = None
        try:
            super().execute(context)
        except BaseException:
            if archive is not None:
                archive.job_failed()
            raise
        if archive is not None:
            archive.job_done()
        result = json.loads(result_file.read_text())
        self.log.info("Merge of %s: %s", self.hive_table, json.dumps(result))
        return result

    def _require_spark_connection(self) -> None:
        # Without its connection, SparkSubmitHook quietly submits to YARN; say what is missing instead.
        try:
            BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException:
            raise CdcError(
                f"The Spark connection {self._conn_id!r} does not exist. Create it with conn_type `spark` and the "
                "master as its host (`local[*]` to run on the worker, or e.g. spark://host:7077), or set "
                "`spark_conn_id:` in the configuration to an existing one."
            ) from None


class CdcFinishOperator(BaseOperator):
    """Release the table's lock and remove the files of older runs. Runs after the merge, or after a plan
    that had nothing to do; not after a failure, so a failed run keeps the lock until it has ended.

    :param keep_runs: run directories kept, newest first (a re-run needs its own).
    """

    def __init__(self, *, plan_task_id: str, keep_runs: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan_task_id, self.keep_runs = plan_task_id, keep_runs

    def execute(self, context: Any) -> dict[str, Any]:
        planned = context["ti"].xcom_pull(task_ids=self.plan_task_id, key="plan")
        run = RunRef.from_dict(planned["run"])
        released = Ledger(planned["ledger_dir"]).release(run)
        runs = Path(planned["run_dir"]).parent
        removed = []
        if runs.is_dir():
            dirs = sorted((p for p in runs.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in dirs[self.keep_runs:]:
                if old.name != Path(planned["run_dir"]).name:
                    shutil.rmtree(old, ignore_errors=True)
                    removed.append(old.name)
        self.log.info("Released the lock of %s: %s; removed %d old run directories", run, released, len(removed))
        return {"released": released, "removed_runs": removed}
