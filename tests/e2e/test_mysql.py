"""The example DAG on a real MySQL 9.7 (Debian's, in its root): what differs from MariaDB, end to end."""

from __future__ import annotations

import pytest
import yaml

from tests.e2e.test_pipeline import Pipeline

DAG_ID = "mysql_binlog_to_hive"


@pytest.mark.usefixtures("airflow_home")
def test_the_example_dag_on_mysql_with_the_shipped_configuration(mysql, make_user, tmp_path):
    pipeline = Pipeline(mysql, make_user(server=mysql), tmp_path, ["orders", "customers"])
    del pipeline.config["verify"]  # as shipped: the rolling verify on
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    code, output = pipeline.run("2026-03-01T00:00:00+00:00")
    assert code == 0, output[-8000:]
    pipeline.assert_all_equal()
    pipeline.sql(
        "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount, note) VALUES (1004, 1, 1, 3.10, 'new'),"
        " (1004, 2, 1, 4.20, NULL)",
        "UPDATE {s}.orders SET amount = amount + 1, note = CONCAT(IFNULL(note, ''), ' ✓') WHERE order_no = 1001",
        "DELETE FROM {s}.orders WHERE order_no = 1002",
        "UPDATE {s}.customers SET city = 'Manchester' WHERE id = 2")
    code, output = pipeline.run("2026-03-01T01:00:00+00:00")
    assert code == 0, output[-8000:]
    pipeline.assert_all_equal()
