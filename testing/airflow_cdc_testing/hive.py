"""Reading a Hive table back through its metastore: in a driver kept for the process's reads, which holds nothing of
a table between two of them (Derby admits one JVM at a time); and spark-submit for one job."""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_cdc_provider.spark.jvm import ClassArchive, batch_gc_options


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

    With ``time_zone``, read as a Spark reader in that zone does: timestamps as the text it shows. Read by this
    process's reader for that metastore (a driver JVM kept for all its reads, ``read_table_job --serve``): one for
    the embedded metastores, one for each metastore service. A JVM that has talked to a service keeps Hive's client
    of it, and would look an embedded metastore's tables up there."""
    with tempfile.TemporaryDirectory(prefix="cdc-read-") as tmp:
        outs = [os.path.join(tmp, f"t{i}.parquet") for i in range(len(tables))]
        pairs = [arg for table, out in zip(tables, outs) for arg in (table, out)]
        zone = ["--time-zone", time_zone] if time_zone else []
        reader = _readers.get(metastore_uri or "")
        if reader is None or reader.process.poll() is not None:
            reader = _readers[metastore_uri or ""] = _Reader()
        reader.read([*zone, warehouse_dir, metastore_uri or "", *pairs], tables)
        return {table: (pq.read_table(out), json.loads(Path(f"{out}.json").read_text())["location"])
                for table, out in zip(tables, outs)}


class _Reader:
    """The driver that reads Hive tables for this process, started at its first read and kept until it exits."""

    def __init__(self) -> None:
        self.home = tempfile.mkdtemp(prefix="cdc-reader-")
        self.log = Path(self.home) / "reader.log"
        env = {**spark_env(), "PYSPARK_SUBMIT_ARGS": " ".join([
            "--master", "local[1]", "--conf", "spark.ui.enabled=false",
            "--driver-java-options", f"-Dderby.system.home={self.home}", "pyspark-shell"])}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "airflow_cdc_testing.read_table_job", "--serve"],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                            bufsize=1, env=env, cwd=self.home)
        self._lock = threading.Lock()
        atexit.register(self.close)

    def read(self, args: list[str], tables: list[str], timeout: float = 600) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        with self._lock:
            self.process.stdin.write(json.dumps(args) + "\n")
            self.process.stdin.flush()
            ready, _, _ = select.select([self.process.stdout], [], [], timeout)
            line = self.process.stdout.readline() if ready else ""
            if not line:
                self.process.kill()
                raise RuntimeError(f"Reading {tables}: the reader gave no answer (exit {self.process.wait()}):\n"
                                   f"{self.log.read_text(errors='replace')[-5000:]}")
            error = json.loads(line).get("error")
            if error:
                raise RuntimeError(f"Reading {tables} failed:\n{error}\n{self.log.read_text(errors='replace')[-3000:]}")

    def close(self) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.home, ignore_errors=True)


_readers: dict[str, _Reader] = {}  # by metastore URI ("": the embedded metastores)


def read_hive_table(warehouse_dir: str, metastore_uri: str | None, table: str,
                    time_zone: str | None = None) -> tuple[pa.Table, str]:
    """The rows of ``database.table`` (an Arrow table) and the location the metastore gives for it."""
    return read_hive_tables(warehouse_dir, metastore_uri, [table], time_zone)[table]
