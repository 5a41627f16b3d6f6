"""A whole source against one table: real runs of the example DAG (`airflow dags test`) on a throwaway MariaDB,
with Spark in local mode and an embedded metastore.

    .venv/bin/python bench/source_bench.py [tables] [rows per table] [changed tables]

Measured in one run, on one server (defaults: 50 tables of 20,000 rows, 10 of them changed):

- baseline: the example DAG over one table of the same shape; after its first load, 1% of its rows change
  (updates, deletes, inserts) and one incremental run brings Hive level; its wall time is T1;
- the source: the example DAG over every table of a schema (a `schema.*` pattern); after its first load, 1% of
  the rows of some tables change the same way and one incremental run brings every table level (T_inc); then a
  run with nothing changed (T_idle).

Each run is timed three ways: the wall time of the whole `airflow dags test` process (about 10 s of it is the
command's own start, DAG parse and first task, whatever the DAG does), the run's duration as Airflow records
it, and the sum of its task instances' durations (the pipeline's own work). Printed too: whether the idle run
started the merge's Spark application, and the rolling verify's (on by default, measured by
bench/rolling_verify_bench.py), and per run the binlog dumps the capture user opened and the bytes the server sent
it against the size of the binlog range. Targets: T_inc <= 3 x T1; T_idle <= 0.2 x T_inc, with no merge
application (the rolling verify's comes on top); one binlog dump per run, the range sent once. After the first
load and the incremental run, every Hive table is compared with its source table (rows, key sum, amount sum,
changed rows); a difference stops the bench.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOME = Path(tempfile.mkdtemp(prefix="cdc-bench-home-"))
os.environ.update({"AIRFLOW_HOME": str(HOME), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
                   "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                   "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME / 'airflow.db'}"})

import yaml  # noqa: E402
from airflow_cdc_testing.hive import read_hive_tables  # noqa: E402
from airflow_cdc_testing.server import ThrowawayServer  # noqa: E402

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DDL = ("id INT PRIMARY KEY, customer VARCHAR(40) NOT NULL, amount DECIMAL(12,2) NOT NULL, status VARCHAR(12),"
       " note VARCHAR(100), qty INT, created_at DATETIME(3) NOT NULL, updated_at TIMESTAMP(6) NULL")
FILL = ("seq, CONCAT('customer ', seq % 5000), seq / 100, ELT(1 + seq % 3, 'new', 'paid', 'shipped'),"
        " CONCAT('order note ', seq), seq % 1000, '2026-01-01 00:00:00' + INTERVAL seq SECOND, NULL")


def create(server: ThrowawayServer, schema: str, names: list[str], rows: int) -> None:
    server.execute(f"CREATE DATABASE {schema}")
    for name in names:
        server.execute(f"CREATE TABLE {schema}.{name} ({DDL})",
                       f"INSERT INTO {schema}.{name} SELECT {FILL} FROM seq_1_to_{rows}", database=schema)


def change(server: ThrowawayServer, table: str, rows: int) -> None:
    """1% of the rows: updates, deletes and inserts in equal parts."""
    part = max(1, rows // 300)
    server.execute(
        f"UPDATE {table} SET amount = amount + 1, status = 'changed' WHERE id % 300 = 7",
        f"DELETE FROM {table} WHERE id % 300 = 11",
        f"INSERT INTO {table} SELECT {FILL.replace('seq,', f'seq + {rows},', 1)} FROM seq_1_to_{part}",
        database=table.split(".")[0],
    )


class Dag:
    """The example DAG with one configuration; each run is an `airflow dags test`, timed from end to end."""

    def __init__(self, name: str, tables: list[dict], conn_env: dict[str, str], work: Path):
        self.name, self.work = name, work / name
        config = {"mysql_conn_id": "mysql_bench", "spark_conn_id": "spark_bench", "work_dir": str(self.work / "work"),
                  "hive": {"database": name, "warehouse_dir": str(self.work / "warehouse")}, "tables": tables,
                  "retries": 0}
        self.work.mkdir(parents=True)
        (self.work / "cdc.yaml").write_text(yaml.safe_dump(config))
        self.env = {**os.environ, **conn_env, "CDC_CONFIG": str(self.work / "cdc.yaml"),
                    "AIRFLOW_CONN_SPARK_BENCH": json.dumps({"conn_type": "spark", "host": "local[2]"})}

    def run(self, label: str) -> tuple[float, str]:
        started = time.perf_counter()
        done = subprocess.run([AIRFLOW, "dags", "test", "mysql_binlog_to_hive"], env=self.env, capture_output=True,
                              text=True, cwd=self.work)
        seconds = time.perf_counter() - started
        output = done.stdout + done.stderr
        # Kept for a look at where the time went (the merge prints its phases as `cdc-merge: ...`).
        (self.work / f"{label.replace(' ', '-')}.log").write_text(output)
        if done.returncode != 0:
            raise SystemExit(f"{label} failed:\n{output[-6000:]}")
        return seconds, output


def last_run() -> tuple[float, float, int]:
    """The latest run of the example DAG as the metadata DB has it: its duration, the sum of its tasks'
    durations (the pipeline's own work, without the process start and parse of `airflow dags test`), and its
    number of task instances."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == "mysql_binlog_to_hive").order_by(DagRun.id.desc()).first()
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == run.dag_id,
                                                 TaskInstance.run_id == run.run_id).all()
        return ((run.end_date - run.start_date).total_seconds(), sum(ti.duration or 0 for ti in tis), len(tis))


def described(wall: float) -> tuple[str, float, float]:
    duration, tasks, count = last_run()
    return (f"{wall:6.1f} s wall, run {duration:5.1f} s, tasks {tasks:5.1f} s in {count} task instances", duration,
            tasks)


def fingerprints_at_source(server: ThrowawayServer, schema: str, names: list[str]) -> dict[str, tuple]:
    """Per table: rows, the sum of the keys, the sum of the amounts in cents, and the rows whose status changed."""
    found = {}
    conn = server.root_connection(schema)
    try:
        with conn.cursor() as cursor:
            for name in names:
                cursor.execute(f"SELECT COUNT(*), SUM(id), SUM(amount * 100), SUM(status = 'changed') FROM {name}")
                found[name] = tuple(int(v or 0) for v in cursor.fetchone())
    finally:
        conn.close()
    return found


def fingerprints_in_hive(dag: Dag, names: list[str]) -> dict[str, tuple]:
    import pyarrow.compute as pc

    read = read_hive_tables(str(dag.work / "warehouse"), None, [f"{dag.name}.{dag.name}_{n}" for n in names])
    found = {}
    for name in names:
        rows = read[f"{dag.name}.{dag.name}_{name}"][0]  # the default target: <schema>_<table>
        cents = pc.sum(pc.multiply(rows["amount"], 100)).as_py() if rows.num_rows else 0
        found[name] = (rows.num_rows, pc.sum(rows["id"]).as_py() or 0, int(cents or 0),
                       int(pc.sum(pc.equal(rows["status"], "changed")).as_py() or 0))
    return found


def check_equal(server: ThrowawayServer, dag: Dag, names: list[str], label: str) -> None:
    """Every table of the run in Hive as at the source, by its fingerprint; the bench stops on a difference."""
    started = time.perf_counter()
    source, hive = fingerprints_at_source(server, dag.name, names), fingerprints_in_hive(dag, names)
    wrong = {name: (source[name], hive[name]) for name in names if source[name] != hive[name]}
    if wrong:
        raise SystemExit(f"{label}: {len(wrong)} of {len(names)} Hive tables differ from the source (source, Hive): "
                         f"{dict(list(wrong.items())[:5])}")
    print(f"    all {len(names)} Hive tables equal to the source (rows, key sum, amount sum, changed rows; "
          f"checked in {time.perf_counter() - started:.0f} s)", flush=True)


def binlog_range(output: str) -> str:
    for line in output.splitlines():
        if "One binlog pass from" in line:
            return line.split("One binlog pass from", 1)[1].split("[", 1)[0].strip()
    return "no binlog pass"


def start_source(prefix: str) -> tuple[Path, ThrowawayServer, str, dict[str, str]]:
    """A work directory, Airflow's metadata DB migrated, and a throwaway server with a capture user: its name and
    the environment that gives the DAG its connection (``mysql_bench``). Stop the server when done."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    subprocess.run([AIRFLOW, "db", "migrate"], check=True, capture_output=True)
    server = ThrowawayServer.start(work / "mariadb")
    user = server.create_user("bench", ("SELECT", "REPLICATION SLAVE", "REPLICATION CLIENT"))
    return work, server, user.user, {"AIRFLOW_CONN_MYSQL_BENCH": json.dumps(server.connection_uri(user))}


def main(argv: list[str]) -> int:
    tables = int(argv[1]) if len(argv) > 1 else 50
    rows = int(argv[2]) if len(argv) > 2 else 20_000
    changed = int(argv[3]) if len(argv) > 3 else 10
    work, server, user, conn_env = start_source("cdc-bench-source-")
    try:
        names = [f"t{n:03d}" for n in range(1, tables + 1)]
        create(server, "one", ["t001"], rows)
        create(server, "many", names, rows)
        print(f"{tables} tables of {rows:,} rows, {changed} of them with 1% of their rows changed; one table of "
              f"{rows:,} rows as the baseline", flush=True)

        baseline = Dag("one", [{"source": "one.t001"}], conn_env, work)
        baseline.run("baseline first load")
        change(server, "one.t001", rows)
        since, sent = server.track_binlog_dumps(), server.bytes_sent(user)
        t1, out1 = baseline.run("baseline incremental run")
        base_dumps, base_bytes = len(server.binlog_dumps(since, user)), server.bytes_sent(user) - sent
        text1, run1, tasks1 = described(t1)
        print(f"one table, incremental run:   {text1}\n    {base_dumps} binlog dump, {base_bytes:,} bytes sent "
              f"to the capture user; range {binlog_range(out1)}", flush=True)

        source = Dag("many", [{"source": "many.*"}], conn_env, work)
        t_load, _ = source.run("source first load")
        print(f"{tables} tables, first load:      {described(t_load)[0]}", flush=True)
        check_equal(server, source, names, "first load")
        for name in names[:changed]:
            change(server, f"many.{name}", rows)
        since, sent = server.track_binlog_dumps(), server.bytes_sent(user)
        t_inc, out_inc = source.run("source incremental run")
        dumps, inc_bytes = len(server.binlog_dumps(since, user)), server.bytes_sent(user) - sent
        text_inc, run_inc, tasks_inc = described(t_inc)
        print(f"{tables} tables, incremental run: {text_inc}\n    {dumps} binlog dump, {inc_bytes:,} bytes sent "
              f"to the capture user; range {binlog_range(out_inc)}", flush=True)
        check_equal(server, source, names, "incremental run")
        since, sent = server.track_binlog_dumps(), server.bytes_sent(user)
        t_idle, out_idle = source.run("source idle run")
        idle_dumps, idle_bytes = len(server.binlog_dumps(since, user)), server.bytes_sent(user) - sent
        # The merge's application, and the rolling verify's (on by default: docs/verify.md), told apart by name.
        spark = "--name cdc-merge" in out_idle
        verify_spark = "--name cdc-verify" in out_idle
        text_idle, run_idle, tasks_idle = described(t_idle)
        print(f"{tables} tables, idle run:        {text_idle}\n    {idle_dumps} binlog dump, {idle_bytes:,} "
              f"bytes sent to the capture user; merge's Spark started: {spark}; the rolling verify's: {verify_spark}",
              flush=True)
        print(f"\nincremental run, {tables} tables / 1 table: {t_inc / t1:.2f}x wall, {run_inc / run1:.2f}x run, "
              f"{tasks_inc / tasks1:.2f}x task time   (target <= 3x)")
        print(f"idle run / incremental run:            {t_idle / t_inc:.2f}x wall, {run_idle / run_inc:.2f}x run, "
              f"{tasks_idle / tasks_inc:.2f}x task time   (target <= 0.2x, no merge Spark; the rolling "
              "verify's application comes on top: bench/rolling_verify_bench.py)")
        print(f"each run's output is kept in {work}/<dag>/<run>.log")
        print(f"binlog dumps per run:                  {dumps} with {changed} tables changed, {idle_dumps} idle "
              f"(target: 1)")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
