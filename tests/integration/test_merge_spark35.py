"""The merge job under Spark 3.5, which most Hive platforms run: pyspark 3.5 in a virtual environment of its own
(built once, beside the project's), with only what the job imports (this package's core, pydantic, pyarrow)."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from tests.conftest import ROOT
from tests.integration.capture_helpers import source_rows
from tests.integration.hive_helpers import plain
from tests.integration.merge_helpers import Table
from tests.integration.test_capture import fill, items, random_change  # noqa: F401

pytestmark = pytest.mark.spark

SPARK_35 = "3.5.7"
VENV = ROOT / ".venv-spark35"
# What the job imports besides pyspark, at the versions the project's own environment pins.
ALSO = ("pydantic", "pydantic_core", "annotated-types", "typing-inspection", "typing_extensions", "pyarrow")


def _pins() -> list[str]:
    pinned = dict(line.strip().split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines()
                  if "==" in line)
    return [f"pyspark=={SPARK_35}", "py4j==0.10.9.7", *(f"{name}=={pinned[name]}" for name in ALSO)]


@pytest.fixture(scope="module")
def spark35_env() -> dict[str, str]:
    python = VENV / "bin" / "python"
    pins = _pins()
    # Built again when the pins change.
    marker = VENV / f".installed-{hashlib.sha1(' '.join(pins).encode()).hexdigest()[:12]}"
    if not marker.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                               *pins], capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        marker.touch()
    bin_dir = str(VENV / "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYTHONPATH")}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "PYSPARK_PYTHON": str(python),
            "PYSPARK_DRIVER_PYTHON": str(python), "PYTHONPATH": str(ROOT)}


def test_the_merge_job_runs_under_spark_3_5(mariadb, items, capture_conn, tmp_path, spark35_env):
    fill(mariadb, items.quoted, 200)
    hook = MySqlSourceHook(capture_conn)
    table = Table(hook, hook.raw_header(items), tmp_path)
    _, job = table.prepare()
    assert table.merge(job, env=spark35_env)["version"] == 1
    assert f"version {SPARK_35}" in subprocess.run(["spark-submit", "--version"], env=spark35_env,
                                                   capture_output=True, text=True).stderr
    rng, next_id = random.Random(35), [200]
    for _ in range(50):
        random_change(mariadb, items, rng, next_id)
    _, job = table.prepare()
    result = table.merge(job, env=spark35_env)
    assert result["status"] == "committed" and result["version"] == 2
    rows, location = table.read()  # by the project's own Spark, through the metastore Spark 3.5 wrote
    assert rows == plain(source_rows(mariadb, table.header)) and location.endswith("/v000002")
    assert Path(table.warehouse, "metastore_db").is_dir()
