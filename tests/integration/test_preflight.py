"""The pre-flight a user runs before the first load, as they run it: ``python -m airflow_cdc_provider.preflight``
on a configuration file, against a real server, reading the same connections the tasks read."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import SAMPLE_SCHEMA, conn_env


def preflight(config: dict, tmp_path: Path, env: dict[str, str], airflow_cli: bool = False) -> tuple[int, str]:
    path = tmp_path / "cdc.yaml"
    path.write_text(yaml.safe_dump(config))
    command = ([str(Path(sys.executable).with_name("airflow")), "cdc", "preflight"] if airflow_cli else
               [sys.executable, "-m", "airflow_cdc_provider.preflight"])
    done = subprocess.run([*command, str(path)],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_wrong_server_and_user_get_every_problem_with_its_fix(start_server, make_user, tmp_path):
    server = start_server(binlog_format="MIXED", binlog_row_image="MINIMAL")
    server.run_script(SAMPLE_SCHEMA)
    conn_id = make_user(privileges=("SELECT",), on="shop.*", server=server)
    metastore = f"thrift://127.0.0.1:{closed_port()}"
    (tmp_path / "work").mkdir(mode=0o777)
    os.chmod(tmp_path / "work", 0o777)  # anyone may write it: refused, as the tasks refuse it
    config = {"source": {"mysql_conn_id": conn_id}, "work": {"dir": str(tmp_path / "work")},
              "hive": {"warehouse_dir": str(tmp_path / "warehouse"), "metastore_uri": metastore},
              "spark": {"conn_id": "spark_nowhere"},
              "tables": [{"source": "shop.orders"}, {"source": "shop.nowhere"}]}
    code, output = preflight(config, tmp_path, {})
    assert code == 1, output
    password = json.loads(os.environ[conn_env(conn_id)])["password"]
    assert password not in output
    problems = [line for line in output.splitlines() if line.startswith("  PROBLEM")]
    # Each problem, with its fix on its line: the statement to run, or what to do.
    expected = {
        "[source] The server setting binlog_format is 'MIXED'": "Fix: SET GLOBAL binlog_format='ROW'",
        "[source] The server setting binlog_row_image is 'MINIMAL'": "Fix: SET GLOBAL binlog_row_image='FULL'",
        "lacks the privilege REPLICATION SLAVE": "Fix: GRANT REPLICATION SLAVE ON *.* TO",
        "lacks the privilege REPLICATION CLIENT": "Fix: GRANT REPLICATION CLIENT ON *.* TO",
        "[tables] The table shop.nowhere does not exist": "GRANT SELECT ON `shop`.`nowhere`",
        f"[work directory] The directory {tmp_path / 'work'} can be written by its group and every user":
            f"chmod 700 {tmp_path / 'work'}",
        "[spark] The Spark connection 'spark_nowhere' does not exist": "Create it with conn_type `spark`",
        f"[hive] the Hive metastore at {metastore} does not answer": "Start it, or correct the address",
    }
    for start, fix in expected.items():
        told = [line for line in problems if start in line]
        assert len(told) == 1 and fix in told[0], f"{start!r} with {fix!r} is not among the problems:\n{output}"
    assert len(problems) == len(expected), output
    assert output.rstrip().endswith(f"{len(expected)} problems to fix before the first load."), output
    assert "ok      [tables] shop.orders → ods.shop_orders: key order_no, line_no" in output
    assert "capture: diff" in output, "and the way on without the binlog"


def test_a_ready_configuration_says_so_and_what_it_found(mariadb, capture_conn, tmp_path):
    # As Airflow's own command: the provider's `cli` entry (Airflow 3.3+).
    spark = {"AIRFLOW_CONN_SPARK_PREFLIGHT": json.dumps({"conn_type": "spark", "host": "local[1]"})}
    config = {"source": {"mysql_conn_id": capture_conn}, "work": {"dir": str(tmp_path / "work")},
              "hive": {"warehouse_dir": str(tmp_path / "warehouse")}, "spark": {"conn_id": "spark_preflight"},
              "tables": [{"source": "shop.orders"}, {"source": "shop.*", "exclude": ["shop.orders"]}]}
    code, output = preflight(config, tmp_path, spark, airflow_cli=True)
    assert code == 0, output
    assert "PROBLEM" not in output
    assert "[tables] shop.orders → ods.shop_orders: key order_no, line_no, from the binlog" in output
    assert "[tables] shop.customers → ods.shop_customers: key id, from the binlog" in output
    assert "[spark] Java " in output and "[spark] spark-submit: " in output
    assert output.rstrip().endswith("Ready for the first load.")
    assert not (tmp_path / "work").exists(), "the pre-flight makes nothing"


def test_mysql_as_it_ships_gets_every_problem_its_defaults_would_fail_runs_with(tmp_path, make_user):
    from airflow_cdc_testing.server import Product

    from tests.servers import start_server

    # MySQL 9.7's own defaults for what capture needs: binlog_row_metadata MINIMAL, the rest as MySQL ships it.
    server = start_server(tmp_path / "mysql", {"binlog_row_metadata": None, "binlog_format": None,
                                               "binlog_row_image": None, "max_binlog_size": None},
                          product=Product.MYSQL)
    try:
        server.run_script(SAMPLE_SCHEMA)
        server.execute("CREATE TABLE shop.visits (page VARCHAR(100) NOT NULL, seen DATETIME NOT NULL)")
        conn_id = make_user(server=server)
        spark = {"AIRFLOW_CONN_SPARK_PREFLIGHT": json.dumps({"conn_type": "spark", "host": "local[1]"})}
        config = {"source": {"mysql_conn_id": conn_id}, "work": {"dir": str(tmp_path / "work")},
                  "hive": {"warehouse_dir": str(tmp_path / "warehouse")}, "spark": {"conn_id": "spark_preflight"},
                  "tables": [{"source": "shop.*"}]}
        code, output = preflight(config, tmp_path, spark)
        assert code == 1, output
        assert "ok      [source] MySQL 8.4+ (9.7." in output, "the server's product and version named"
        problems = [line for line in output.splitlines() if line.startswith("  PROBLEM")]
        assert len(problems) == 1, output
        assert "The server setting binlog_row_metadata is 'MINIMAL', but capture needs FULL" in problems[0]
        assert "Fix: SET PERSIST binlog_row_metadata='FULL'" in problems[0]
        # The table with no key is taken by a diff, which runs on MySQL as on MariaDB (the e2e test runs one).
        assert "shop.visits → ods.shop_visits: no key" in output and "(capture: diff)" in output
    finally:
        server.stop()
