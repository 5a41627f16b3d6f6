"""`make demo`: the whole story on this machine, for real.

A throwaway MariaDB with a row binlog and the sample shop schema; the example DAG run with `airflow dags test`
against it, with Spark in local mode and an embedded Hive metastore: an initial load, then runs with changes
made in between (inserts, updates, deletes, a key change, a delete and a re-insert of the same key). After
each run the source and the Hive table are printed side by side.

`make demo-mysql` (CDC_DEMO_SERVER=mysql) does the same on a throwaway MySQL 9.7 (Debian's, from its root made by
scripts/ensure-mysql.sh), with the configuration as shipped. Set CDC_MYSQL_ADMIN_URL=mysql://admin:password@host:3306
to use an existing MySQL 8 / MariaDB server instead: the demo then (re)creates the `shop` schema and a capture user
`cdc_demo` there.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / ".demo"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
TABLES = {"orders": ("order_no", "line_no"), "customers": ("id",)}

ROUNDS = [
    ("new orders, a changed amount, a cancelled order, a customer who moved", [
        "INSERT INTO shop.orders (order_no, line_no, customer_id, amount, note) VALUES (1005, 1, 2, 42.00, 'new'),"
        " (1005, 2, 2, 1.50, 'and a pen')",
        "UPDATE shop.orders SET amount = 21.99, note = 'first order, repriced' WHERE order_no = 1001 AND line_no = 1",
        "DELETE FROM shop.orders WHERE order_no = 1002",
        "UPDATE shop.customers SET city = 'Cambridge' WHERE email = 'alan@example.com'",
    ]),
    ("a key change, and an order line deleted then entered again with the same key", [
        "UPDATE shop.orders SET order_no = 2003 WHERE order_no = 1003",
        "DELETE FROM shop.orders WHERE order_no = 1001 AND line_no = 2",
        "INSERT INTO shop.orders (order_no, line_no, customer_id, amount, note) "
        "VALUES (1001, 2, 1, 6.00, 're-entered')",
        "INSERT INTO shop.customers (email, name, city) VALUES ('barbara@example.com', 'Barbara Liskov', 'Boston')",
    ]),
    ("a customer leaves, one row changed twice", [
        "DELETE FROM shop.customers WHERE email = 'edsger@example.com'",
        "UPDATE shop.orders SET note = 'changed once' WHERE order_no = 1005 AND line_no = 1",
        "UPDATE shop.orders SET note = 'changed twice' WHERE order_no = 1005 AND line_no = 1",
    ]),
]


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
        # Spark in local mode on this machine, all cores.
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
    }
    os.environ.update({k: env[k] for k in ("AIRFLOW_HOME", "AIRFLOW__CORE__DAGS_FOLDER",
                                           "AIRFLOW__CORE__LOAD_EXAMPLES")})
    from airflow_cdc_testing.server import ExistingServer, Product, ThrowawayServer

    admin_url = os.environ.get("CDC_MYSQL_ADMIN_URL")
    if admin_url:
        server = ExistingServer(admin_url)
        say(f"Using the existing server at {server.host}:{server.port}")
    else:
        product = Product(os.environ.get("CDC_DEMO_SERVER") or Product.MARIADB)
        server = ThrowawayServer.start(DEMO / product, product=product)
        name = "MySQL" if product is Product.MYSQL else "MariaDB"
        say(f"Started a throwaway {name} {server.execute('SELECT VERSION()')[0][0]} on 127.0.0.1:{server.port} "
            f"(data in {server.data_dir}), row binlog on")
    try:
        server.execute("DROP DATABASE IF EXISTS shop", "DROP USER IF EXISTS 'cdc_demo'@'%'")
        server.run_script(ROOT / "dags" / "sample" / "shop.sql")
        say("Loaded the sample schema: shop.orders and shop.customers")
        login = server.create_user("cdc_demo")
        say("Created the capture user cdc_demo with SELECT, REPLICATION SLAVE, REPLICATION CLIENT only")
        # The connection travels as an environment variable: never on a command line or in a file.
        env["AIRFLOW_CONN_MYSQL_CDC"] = json.dumps(server.connection_uri(login))
        warehouse = DEMO / "warehouse"
        (DEMO / "cdc_config.yaml").write_text(
            "mysql_conn_id: mysql_cdc\nspark_conn_id: spark_default\n"
            f"work_dir: {DEMO / 'work'}\nhive:\n  database: ods\n  warehouse_dir: {warehouse}\n"
            "tables:\n  - source: shop.orders\n  - source: shop.customers\n"
        )
        subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True)
        say(f"Migrated a fresh Airflow metadata DB in {env['AIRFLOW_HOME']}")

        all_equal = run_and_show(server, env, warehouse, 0, "the initial load: a snapshot of each table")
        for n, (what, statements) in enumerate(ROUNDS, start=1):
            say(f"Changes in the source: {what}")
            for statement in statements:
                print(f"   {statement}")
            server.execute(*statements)
            all_equal &= run_and_show(server, env, warehouse, n, "reads the binlog since the last run")
        say("After every run, Hive equals the source." if all_equal else "Hive and the source differ: see above.")
        return 0 if all_equal else 1
    finally:
        server.stop()


def run_and_show(server, env: dict, warehouse: Path, n: int, what: str) -> bool:
    say(f"Run {n}: {what} (airflow dags test mysql_binlog_to_hive; log in .demo/run-{n}.log)")
    with open(DEMO / f"run-{n}.log", "w") as log:
        result = subprocess.run([AIRFLOW, "dags", "test", "mysql_binlog_to_hive"], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise SystemExit(f"The DAG run failed: see {DEMO / f'run-{n}.log'}")
    report()
    from airflow_cdc_testing.hive import read_hive_tables

    hive = read_hive_tables(str(warehouse), None, [f"ods.shop_{t}" for t in TABLES])
    equal = True
    for table, key in TABLES.items():
        rows, location = hive[f"ods.shop_{table}"]
        equal &= side_by_side(f"shop.{table}", source_rows(server, table), f"ods.shop_{table}", rows.to_pylist(),
                              key, location)
    return equal


def report() -> None:
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == "mysql_binlog_to_hive").order_by(DagRun.id.desc()).first()
        print(f"   run {run.run_id}: {run.state}")
        # The merge's ``outcomes``: every table's, an idle one's too (its return value groups the tables the run
        # wrote into the per-table tasks).
        rows = session.query(XComModel).filter(XComModel.run_id == run.run_id, XComModel.key == "outcomes",
                                               XComModel.task_id == "source.merge").all()
        for row in rows:
            value = row.value if not isinstance(row.value, str) else json.loads(row.value)
            for outcome in value:
                version = f" version {outcome['version']}" if outcome.get("version") is not None else ""
                print(f"   {outcome['source']} → {outcome['hive_table']}: {outcome['mode']}, {outcome['status']}"
                      f"{version}; {outcome['upserts']} upserts, {outcome['deletes']} deletes"
                      f"{'; ' + outcome['reason'] if outcome['reason'] else ''}")


def source_rows(server, table: str) -> list[dict]:
    conn = server.root_connection(init_command="SET time_zone = '+00:00'")
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT * FROM shop.`{table}`")
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, r)) for r in cursor.fetchall()]
    finally:
        conn.close()


def _text(value) -> str:
    if isinstance(value, dt.datetime):
        value = value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
        return value.isoformat(sep=" ", timespec="milliseconds")
    if isinstance(value, decimal.Decimal):
        return f"{value:f}"
    if value is None:
        return "NULL"
    return str(value).replace("\n", "\\n")


def side_by_side(source_name: str, source: list[dict], hive_name: str, hive: list[dict], key: tuple[str, ...],
                 location: str) -> bool:
    columns = [c for c in source[0]] if source else [c for c in (hive[0] if hive else {})]
    show = [c for c in columns if c not in ("updated_at", "created_at")]
    by_key_source = {tuple(r[k] for k in key): r for r in source}
    by_key_hive = {tuple(r[k.lower()] for k in key): r for r in hive}
    width = 58
    print(f"\n   {source_name:<{width}} | {hive_name} (at {location.rsplit('/', 1)[-1]})")
    equal = True
    for k in sorted(set(by_key_source) | set(by_key_hive)):
        s, h = by_key_source.get(k), by_key_hive.get(k)
        left = " ".join(_text(s[c]) for c in show) if s else "—"
        right = " ".join(_text(h[c.lower()]) for c in show) if h else "—"
        same = s is not None and h is not None and all(_text(s[c]) == _text(h[c.lower()]) for c in columns)
        equal &= same
        print(f"   {left[:width]:<{width}} | {right[:width]:<{width}} {'' if same else '  <-- differs'}")
    return equal


if __name__ == "__main__":
    sys.exit(main())
