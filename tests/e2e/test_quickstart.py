"""docs/quickstart.md as a user follows it: the provider's wheel installed with its constraints into a fresh
environment beside a plain Airflow, the pre-flight, then the docs' own DAG file (not a copy) run with
``python mysql_to_hive.py`` (its ``dag.test()``) against a throwaway server: the initial load, after which Hive
equals the source. (The runs from the binlog that follow are the example DAG's tests': the same factory.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from airflow_cdc_testing.hive import read_hive_tables

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from tests.conftest import ROOT, SAMPLE_SCHEMA, conn_env
from tests.integration.capture_helpers import source_rows
from tests.integration.hive_helpers import hive_rows, plain
from tests.packaging import build_wheel

QUICKSTART = ROOT / "docs" / "quickstart"
CONSTRAINTS = ROOT / "constraints.txt"
TABLES = {"shop.orders": "ods.shop_orders", "shop.customers": "ods.shop_customers"}


def _pinned(package: str) -> str:
    (line,) = [line for line in CONSTRAINTS.read_text().splitlines() if line.startswith(f"{package}==")]
    return line


def _run(command: list[str], env: dict[str, str], cwd: Path, timeout: float = 900) -> str:
    # In a folder of its own, not the checkout's: that would be imported instead of the installed package.
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{output[-8000:]}"
    return output


def test_the_quickstart_dag_from_the_wheel_copies_the_tables(start_server, make_user, tmp_path):
    # A fresh environment with a plain Airflow in it, then the provider's wheel with the `mysql` extra, each with
    # the repository's constraints (uv: pip's resolver, from the cache `make` filled).
    venv = tmp_path / "venv"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], dict(os.environ), cwd)
    python = venv / "bin" / "python"
    uv = [str(Path(sys.executable).with_name("uv")), "pip", "install", "--quiet", "--python", str(python),
          "-c", str(CONSTRAINTS)]
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("AIRFLOW", "PYTHON", "VIRTUAL_ENV", "CDC_"))}
    _run([*uv, _pinned("apache-airflow")], clean, cwd)
    wheel = build_wheel(tmp_path / "wheel")
    _run([*uv, f"airflow-cdc-provider[mysql] @ {wheel.as_uri()}"], clean, cwd)
    installed = _run([str(python), "-c", "import airflow_cdc_provider, airflow; "
                      "print(airflow_cdc_provider.__file__, airflow.__version__)"], clean, cwd)
    assert installed.startswith(str(venv)), "the provider comes from the wheel, not the checkout"
    assert installed.split()[-1] == _pinned("apache-airflow").split("==")[1]

    # The docs' DAG file, as it stands (linked, so that its own directory holds this test's cdc.yaml), and the
    # docs' cdc.yaml with this machine's directories.
    server = start_server()
    server.run_script(SAMPLE_SCHEMA)
    capture = make_user(server=server)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "mysql_to_hive.py").symlink_to(QUICKSTART / "mysql_to_hive.py")
    config = yaml.safe_load((QUICKSTART / "cdc.yaml").read_text())
    config["work"]["dir"] = str(tmp_path / "work")
    config["hive"]["warehouse_dir"] = str(tmp_path / "warehouse")
    (dags / "cdc.yaml").write_text(yaml.safe_dump(config))
    home = tmp_path / "airflow-home"
    env = {**clean, "PATH": f"{venv / 'bin'}{os.pathsep}{clean.get('PATH', '')}", "AIRFLOW_HOME": str(home),
           "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           # The connections the docs' configuration names, as a user's secrets would give them.
           conn_env(config["source"]["mysql_conn_id"]): os.environ[conn_env(capture)],
           conn_env(config["spark"]["conn_id"]): json.dumps({"conn_type": "spark", "host": "local[1]"}),
           "JDK_JAVA_OPTIONS": os.environ.get("JDK_JAVA_OPTIONS", "")}
    preflight = _run([str(python), "-m", "airflow_cdc_provider.preflight", str(dags / "cdc.yaml")], env, cwd)
    assert preflight.rstrip().endswith("Ready for the first load."), preflight
    _run([str(venv / "bin" / "airflow"), "db", "migrate"], env, cwd)

    hook = MySqlSourceHook(capture)
    headers = {source: hook.raw_header(TableName.parse(source)) for source in TABLES}

    first = _run([str(python), str(dags / "mysql_to_hive.py")], env, cwd)
    for source, hive_table in TABLES.items():
        assert f"Plan for {source} → {hive_table}: snapshot" in first, first[-5000:]
    # Each table, read back through the metastore: the source's rows, in the table's first version.
    read = read_hive_tables(str(tmp_path / "warehouse"), None, list(TABLES.values()))
    for source, hive_table in TABLES.items():
        rows, location = read[hive_table]
        assert hive_rows(rows, headers[source].key) == plain(source_rows(server, headers[source])), source
        assert re.search(r"/v0*1$", location), (hive_table, location)
    password = json.loads(os.environ[conn_env(capture)])["password"]
    assert not any(password in output for output in (preflight, first))
