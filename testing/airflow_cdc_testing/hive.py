"""Reading a Hive table back through its metastore, in a separate spark-submit (Derby admits one JVM at a time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_cdc_provider.spark.jvm import ClassArchive, batch_gc_options

READ_TABLE_JOB = str(Path(__file__).with_name("read_table_job.py"))


def spark_env() -> dict[str, str]:
    """The environment for spark-submit: this interpreter's bin first, so its pyspark and python are used."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def spark_submit_command(application: str, *args: str, work_dir: str, master: str = "local[2]",
                         java_options: list[str] | None = None) -> list[str]:
    """A local spark-submit of one of the provider's jobs (Derby's log kept in ``work_dir``)."""
    options = " ".join([f"-Dderby.system.home={work_dir}", *(java_options or [])])
    return ["spark-submit", "--master", master, "--conf", "spark.ui.enabled=false",
            "--driver-java-options", options, application, *args]


def run_spark_job(application: str, *args: str, work_dir: str, master: str = "local[2]",
                  timeout: float = 600) -> subprocess.CompletedProcess:
    """spark-submit one job and wait for it, its driver JVM started from the class-data archive."""
    archive = ClassArchive(str(Path(sys.executable).with_name("spark-submit")))
    result = subprocess.run(
        spark_submit_command(application, *args, work_dir=work_dir, master=master,
                             java_options=archive.java_options() + batch_gc_options()),
        env=spark_env(), capture_output=True, text=True, cwd=work_dir, timeout=timeout,
    )
    archive.job_done() if result.returncode == 0 else archive.job_failed()
    return result


def read_hive_tables(warehouse_dir: str, metastore_uri: str | None, tables: list[str],
                     time_zone: str | None = None) -> dict[str, tuple[pa.Table, str]]:
    """For each ``database.table``: its rows (an Arrow table) and the location the metastore gives for it.

    With ``time_zone``, read as a Spark reader in that zone does: timestamps as the text it shows."""
    with tempfile.TemporaryDirectory(prefix="cdc-read-") as tmp:
        outs = [os.path.join(tmp, f"t{i}.parquet") for i in range(len(tables))]
        pairs = [arg for table, out in zip(tables, outs) for arg in (table, out)]
        zone = ["--time-zone", time_zone] if time_zone else []
        result = run_spark_job(READ_TABLE_JOB, *zone, warehouse_dir, metastore_uri or "", *pairs, work_dir=tmp,
                               master="local[1]")
        if result.returncode != 0:
            raise RuntimeError(f"Reading {tables} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
        return {table: (pq.read_table(out), json.loads(Path(f"{out}.json").read_text())["location"])
                for table, out in zip(tables, outs)}


def read_hive_table(warehouse_dir: str, metastore_uri: str | None, table: str,
                    time_zone: str | None = None) -> tuple[pa.Table, str]:
    """The rows of ``database.table`` (an Arrow table) and the location the metastore gives for it."""
    return read_hive_tables(warehouse_dir, metastore_uri, [table], time_zone)[table]
