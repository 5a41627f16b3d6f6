"""Schema changes between two runs of the real DAG: the Hive table gains added columns within the run, rows from
before and after the change land right, and `schema_changes: evolve` keeps dropped and renamed columns."""

from __future__ import annotations

import json

import pytest
import yaml

from airflow_cdc_provider.core.ledger import RunRef
from tests.e2e.test_example_dag import latest_xcoms
from tests.e2e.test_pipeline import DAG_ID, Pipeline


def hive_columns(rows: dict) -> list[str]:
    """The columns of a Hive table read back (``Pipeline.hive_tables``), in the table's order."""
    return list(next(iter(rows.values())))


def _merge_again(job_path) -> dict[str, dict]:
    """The merge job of a run submitted once more, as a retry of its merge task would; each table's result."""
    from airflow_cdc_testing.hive import run_spark_job

    from airflow_cdc_provider.core.merge import MergeJob
    from airflow_cdc_provider.spark import MERGE_JOB
    from airflow_cdc_provider.storage import WorkStore

    job = MergeJob.from_text(job_path.read_text())
    done = run_spark_job(MERGE_JOB, str(job_path), work_dir=str(job_path.parent))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads(WorkStore().read_text(job.result_file))["tables"]


def run_ok(pipeline: Pipeline, date: str) -> dict:
    code, output = pipeline.run(date)
    assert code == 0, output[-8000:]
    return latest_xcoms(DAG_ID)


# One pipeline, two tables changing in the same runs: orders under the default policy (strict: added columns
# land in Hive within the run), customers under `schema_changes: evolve` (dropped and renamed columns kept).
@pytest.mark.usefixtures("airflow_home")
def test_added_columns_land_within_the_run_and_evolve_keeps_dropped_and_renamed_columns(
        mariadb, capture_conn, tmp_path, metastore_service):
    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders", "customers"], metastore=metastore_service)
    (customers_entry,) = [t for t in pipeline.config["tables"] if t["target"] == "customers"]
    customers_entry["schema_changes"] = "evolve"
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    pipeline.sql("INSERT INTO {s}.customers (email, name, city, created_at) VALUES ('bob@example.com', 'Bob', 'Rome',"
                 " '2026-01-04 00:00:00')")
    run_ok(pipeline, "2026-05-01T00:00:00+00:00")

    pipeline.sql(
        # orders. Before the change: a row changed, a row added; 1001/2 and 1003/1 stay as loaded.
        "UPDATE {s}.orders SET amount = 20.00 WHERE order_no = 1001 AND line_no = 1",
        "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount) VALUES (1005, 1, 2, 1.00)",
        "ALTER TABLE {s}.orders ADD COLUMN channel VARCHAR(20) NOT NULL DEFAULT 'web',"
        " ADD COLUMN discount DECIMAL(5,2) NULL, ADD COLUMN placed DATE NOT NULL DEFAULT '2020-02-29'",
        # After it: rows with the new columns set, and a row from before changed again.
        "UPDATE {s}.orders SET channel = 'shop', discount = 0.50 WHERE order_no = 1002",
        "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount, channel, placed) VALUES"
        " (1006, 1, 1, 9.99, 'app', '2026-05-01')",
        "UPDATE {s}.orders SET amount = 21.00 WHERE order_no = 1005",
        # customers: a column renamed and one dropped, rows changed before, between and after.
        "UPDATE {s}.customers SET city = 'Paris' WHERE id = 1",
        "ALTER TABLE {s}.customers RENAME COLUMN city TO town",
        "UPDATE {s}.customers SET town = 'Leeds' WHERE id = 2",
        "ALTER TABLE {s}.customers DROP COLUMN name",
        "INSERT INTO {s}.customers (email, town, created_at) VALUES ('grace@example.com', 'NYC', NOW(3))",
    )
    xcoms = run_ok(pipeline, "2026-05-01T01:00:00+00:00")
    assert pipeline.outcome("orders")["added_columns"] == ["channel", "discount", "placed"]
    changes = pipeline.extraction("orders", xcoms)["schema_changes"]
    assert [c["change"] for c in changes] == ["added channel, discount, placed"]
    changes = [c["change"] for c in pipeline.extraction("customers", xcoms)["schema_changes"]]
    assert changes == ["renamed city to town", "dropped name"]
    read = pipeline.hive_tables()
    hive, _ = read["orders"]
    assert hive == pipeline.source("orders"), f"{pipeline.database}.orders differs from the source"
    assert hive_columns(hive)[-3:] == ["channel", "discount", "placed"]
    assert hive[(1003, 1)]["channel"] == "web" and hive[(1003, 1)]["discount"] is None, "untouched: the default"
    assert hive[(1001, 1)]["channel"] == "web", "changed before the ALTER: the default too"
    assert hive[(1002, 1)]["channel"] == "shop"

    customers, _ = read["customers"]
    assert hive_columns(customers) == ["id", "email", "name", "city", "created_at", "town"]
    evolved = {key: dict(row) for key, row in customers.items()}
    source = pipeline.source("customers")
    kept = {key: (row.pop("name"), row.pop("city")) for key, row in evolved.items()}
    assert evolved == source, "every column the source has holds the source's values"
    assert kept == {
        (1,): ("Ada", "Paris"),  # last changed before the rename and the drop: both hold its last values
        (2,): ("Alan", None),    # changed after the rename: the old name no longer holds its value
        (3,): ("Bob", "Rome"),   # untouched: as loaded
        (4,): (None, None),      # inserted after both
    }
    assert source[(3,)]["town"] == "Rome", "the renamed column carries the values of the old one"

    # Merged again onto its input version (without the columns), into a table that has them already: the
    # same rows (the merge job run on the same spec, as a retry of the merge task does).
    run = RunRef(DAG_ID, "manual__2026-05-01T01:00:00+00:00")
    (job,) = pipeline.tmp.glob(f"work/*/runs/{run.key}/merge-job-1.json")  # one job for both tables
    again = _merge_again(job)[f"{pipeline.database}.orders"]
    assert again["status"] == "committed" and again["added_columns"] == [] and again["origin"] == 1
    read = pipeline.assert_all_equal(["orders"])
    assert read["orders"][0] == hive

    # A column added in the middle of the MySQL table, after the last row event of the range: no row carries
    # it, the DDL does. Hive appends it; a later run starts from the columns this one committed.
    pipeline.sql("UPDATE {s}.orders SET note = 'x' WHERE order_no = 1006",
                 "ALTER TABLE {s}.orders ADD COLUMN region CHAR(2) NOT NULL DEFAULT 'EU' AFTER line_no",
                 "UPDATE {s}.customers SET town = 'York' WHERE id = 1")
    xcoms = run_ok(pipeline, "2026-05-01T02:00:00+00:00")
    assert pipeline.outcome("orders")["added_columns"] == ["region"]
    read = pipeline.hive_tables()
    hive, _ = read["orders"]
    assert hive == pipeline.source("orders"), f"{pipeline.database}.orders differs from the source"
    assert {row["region"] for row in hive.values()} == {"EU"}
    assert hive_columns(hive)[-1] == "region"
    assert pipeline.ledger("orders").committed().columns[2] == ("region", "char(2)")
    customers, _ = read["customers"]
    assert (customers[(1,)]["name"], customers[(1,)]["city"], customers[(1,)]["town"]) == (None, None, "York")
    assert (customers[(3,)]["name"], customers[(3,)]["city"]) == ("Bob", "Rome")

    pipeline.sql("UPDATE {s}.orders SET region = 'US' WHERE order_no = 1001")
    xcoms = run_ok(pipeline, "2026-05-01T03:00:00+00:00")
    assert pipeline.outcome("orders")["added_columns"] == []
    assert pipeline.extraction("orders", xcoms)["schema_changes"] == []
    pipeline.assert_equal("orders")


@pytest.mark.usefixtures("airflow_home")
def test_a_dropped_column_fails_the_run_under_strict_leaves_hive_as_it_was_and_a_fresh_snapshot_recovers(
        mariadb, capture_conn, tmp_path):
    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders"])
    run_ok(pipeline, "2026-07-01T00:00:00+00:00")
    warehouse = pipeline.warehouse_files()
    pipeline.sql("UPDATE {s}.orders SET amount = 1.00 WHERE order_no = 1003",
                 "ALTER TABLE {s}.orders DROP COLUMN note")
    (file, position), = [(f, p) for f, p, *_ in mariadb.execute("SHOW MASTER STATUS")]
    code, output = pipeline.run("2026-07-01T01:00:00+00:00")
    assert code != 0
    assert f"DROP COLUMN note` (binlog file {int(file.rsplit('.', 1)[1])}, end position {position})" in output
    assert "dropped note" in output and "schema_changes: evolve" in output and "fresh_snapshot=true" in output
    assert pipeline.warehouse_files() == warehouse, "the Hive table is as it was"
    # The run failed with its table, and its summary (a teardown: it ran, and did not make the run a success)
    # says so.
    summary = latest_xcoms(DAG_ID)["source.summary"][f"{pipeline.schema}.orders"]
    assert summary.startswith(f"{pipeline.schema}.orders → ods.orders: failed incremental"), summary

    code, output = pipeline.run("2026-07-01T02:00:00+00:00", json.dumps({"fresh_snapshot": True}))
    assert code == 0, output[-8000:]
    hive, _ = pipeline.assert_equal("orders")
    assert "note" not in hive[(1003, 1)]
