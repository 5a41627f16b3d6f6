"""`make demo`: a throwaway server with a row binlog, the sample shop schema, and the example DAG run for real.

Set CDC_MYSQL_ADMIN_URL=mysql://admin:password@host:3306 to use an existing MySQL 8 / MariaDB server instead:
the demo then (re)creates the `shop` schema and a capture user `cdc_demo` there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / ".demo"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def main() -> int:
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(DEMO / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "CDC_CONFIG": str(DEMO / "cdc_config.yaml"),
    }
    os.environ.update({k: env[k] for k in ("AIRFLOW_HOME", "AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__LOAD_EXAMPLES")})
    from airflow_cdc_provider.testing.server import ExistingServer, ThrowawayServer

    admin_url = os.environ.get("CDC_MYSQL_ADMIN_URL")
    if admin_url:
        server = ExistingServer(admin_url)
        say(f"Using the existing server at {server.host}:{server.port}")
    else:
        server = ThrowawayServer.start(DEMO / "mariadb")
        say(f"Started a throwaway MariaDB on 127.0.0.1:{server.port} (data in {server.data_dir}), row binlog on")
    try:
        server.execute("DROP DATABASE IF EXISTS shop", "DROP USER IF EXISTS 'cdc_demo'@'%'")
        server.run_script(ROOT / "dags" / "sample" / "shop.sql")
        say("Loaded the sample schema: " + ", ".join(
            f"shop.{t} ({n} rows)" for t, n in server.execute(
                "SELECT 'customers', COUNT(*) FROM shop.customers UNION ALL SELECT 'orders', COUNT(*) FROM shop.orders")
        ))
        login = server.create_user("cdc_demo")
        say("Created the capture user cdc_demo with SELECT, REPLICATION SLAVE, REPLICATION CLIENT only")
        # The connection travels as an environment variable: never on a command line or in a file.
        env["AIRFLOW_CONN_MYSQL_CDC"] = json.dumps(server.connection_uri(login))
        (DEMO / "cdc_config.yaml").write_text(
            "mysql_conn_id: mysql_cdc\nspark_conn_id: spark_default\n"
            f"work_dir: {DEMO / 'work'}\nhive:\n  database: ods\n  warehouse_dir: {DEMO / 'warehouse'}\n"
            "tables:\n  - source: shop.orders\n  - source: shop.customers\n"
        )
        subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True)
        say(f"Migrated a fresh Airflow metadata DB in {env['AIRFLOW_HOME']}")
        say("Running the example DAG mysql_binlog_to_hive (airflow dags test); log in .demo/run.log")
        with open(DEMO / "run.log", "w") as log:
            result = subprocess.run([AIRFLOW, "dags", "test", "mysql_binlog_to_hive"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
        report()
        if result.returncode != 0:
            print(f"The DAG run failed: see {DEMO / 'run.log'}", file=sys.stderr)
            return result.returncode
        say("What exists so far: the capture check of every table (settings, privileges, key, watermark). "
            "Snapshot, extraction, replay and the Spark merge into Hive are the next stages.")
        return 0
    finally:
        server.stop()


def report() -> None:
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == "mysql_binlog_to_hive").order_by(DagRun.id.desc()).first()
        print(f"   run {run.run_id}: {run.state}")
        for row in session.query(XComModel).filter(XComModel.run_id == run.run_id).order_by(XComModel.task_id):
            value = row.value if not isinstance(row.value, str) else json.loads(row.value)
            wm = value["watermark"]
            print(f"   {row.task_id}: {value['table']} on {value['flavor']} can be captured; "
                  f"key ({', '.join(value['key'])}); watermark {wm['file']}:{wm['position']} gtid {wm['gtid']}")


if __name__ == "__main__":
    sys.exit(main())
