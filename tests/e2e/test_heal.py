"""A table whose binlog chain breaks heals itself, through the example DAG: a TRUNCATE then inserts, a table dropped
and created again, a partition truncated, and a gh-ost-style online schema change (a shadow table with a new
column, filled and kept level by hand, then swapped in by RENAME TABLE) are each brought level by a diff against
the table's version in the same run, with no person acting; the other tables go on from the binlog, and the next
run reads the healed tables' binlog from the diff's moment. After every run every table equals its source.
(A purged binlog healed: tests/e2e/test_pipeline.py; today's stop kept by `on_broken_chain: stop`:
tests/e2e/test_binlog_trust.py.)"""

from __future__ import annotations

import pytest
import yaml

from tests.e2e.test_example_dag import latest_xcoms
from tests.e2e.test_pipeline import DAG_ID, Pipeline

ITEMS = "(id INT NOT NULL PRIMARY KEY, v VARCHAR(40) NOT NULL, n INT NULL, at DATETIME(6) NULL)"
FILL = ("INSERT INTO {s}.%s (id, v, n, at) SELECT seq, CONCAT('v', seq, ' é'), seq MOD 13, "
        "'2026-01-01 00:00:00' + INTERVAL seq SECOND FROM {s}.seq_1_to_%d")
PARTS = ("CREATE TABLE {s}.parts (id INT NOT NULL, v VARCHAR(40) NOT NULL, n INT NULL, at DATETIME(6) NULL, "
         "PRIMARY KEY (id)) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (21), "
         "PARTITION p1 VALUES LESS THAN MAXVALUE)")
HEALED = {"items": "TRUNCATE", "recreated": "DROP TABLE", "parts": "TRUNCATE PARTITION", "swapped": "RENAME"}


@pytest.mark.usefixtures("airflow_home")
def test_broken_chains_heal_by_a_diff_and_the_binlog_goes_on(mariadb, capture_conn, tmp_path):
    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders"])
    pipeline.sql(*(f"CREATE TABLE {{s}}.{t} {ITEMS}" for t in ("items", "recreated", "swapped")), PARTS,
                 FILL % ("items", 2000), FILL % ("recreated", 300), FILL % ("swapped", 2000), FILL % ("parts", 2000))
    pipeline.tables = ["orders", "customers", *HEALED]
    # Every other table of the schema by one pattern: the swap's shadow and old tables must not be captured by it.
    pipeline.config["tables"] = [{"source": f"{pipeline.schema}.orders", "target": "orders"},
                                 {"source": f"{pipeline.schema}.*", "target": "{table}"}]
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    code, output = pipeline.run("2026-11-28T00:00:00+00:00")
    assert code == 0, output[-8000:]
    pipeline.assert_all_equal()

    pipeline.sql(
        "UPDATE {s}.orders SET amount = amount + 1 WHERE order_no = 1001",
        # Emptied without row events, then new rows (some with keys it had).
        "UPDATE {s}.items SET n = -1 WHERE id = 5", "TRUNCATE TABLE {s}.items",
        "INSERT INTO {s}.items (id, v, n) VALUES (1, 'again', 1), (3000, 'new', 2)",
        # Dropped and created again with other rows.
        "DROP TABLE {s}.recreated", f"CREATE TABLE {{s}}.recreated {ITEMS}", FILL % ("recreated", 250),
        "UPDATE {s}.recreated SET v = 'changed' WHERE id = 7",
        # 1% of the table's rows go with their partition.
        "ALTER TABLE {s}.parts TRUNCATE PARTITION p0", "UPDATE {s}.parts SET n = 99 WHERE id = 1500",
        # gh-ost by hand: a shadow table with the new column, copied into, kept level with the writes made
        # meanwhile, then swapped in; a write after the swap fills the new column.
        f"CREATE TABLE {{s}}._swapped_gho {ITEMS}", "ALTER TABLE {s}._swapped_gho ADD COLUMN note VARCHAR(20) NULL",
        "INSERT INTO {s}._swapped_gho (id, v, n, at) SELECT id, v, n, at FROM {s}.swapped WHERE id <= 1000",
        "UPDATE {s}.swapped SET n = n + 100 WHERE id IN (10, 1500)", "DELETE FROM {s}.swapped WHERE id = 11",
        "UPDATE {s}._swapped_gho SET n = n + 100 WHERE id = 10", "DELETE FROM {s}._swapped_gho WHERE id = 11",
        "INSERT INTO {s}._swapped_gho (id, v, n, at) SELECT id, v, n, at FROM {s}.swapped WHERE id > 1000",
        "CREATE TABLE {s}._swapped_ghc (id INT NOT NULL PRIMARY KEY, hint VARCHAR(20))",
        "RENAME TABLE {s}.swapped TO {s}._swapped_del, {s}._swapped_gho TO {s}.swapped",
        "DROP TABLE {s}._swapped_ghc",
        "UPDATE {s}.swapped SET note = 'after the swap' WHERE id = 20",
    )
    code, output = pipeline.run("2026-11-28T01:00:00+00:00")
    assert code == 0, output[-8000:]
    xcoms = latest_xcoms(DAG_ID)
    skipped = {s["source"]: s["reason"] for s in xcoms["source.check"]["skipped"]}
    assert "a working table of gh-ost" in skipped[f"{pipeline.schema}._swapped_del"], skipped
    assert pipeline.outcome("orders")["mode"] == "incremental"
    healed = {}
    for table, statement in HEALED.items():
        outcome = pipeline.outcome(table)
        assert (outcome["mode"], outcome["status"]) == ("heal", "committed"), outcome
        assert statement in outcome["healed"]["why"], outcome["healed"]
        healed[table] = outcome["healed"]
    # What each diff found and read: no more than what changed.
    assert (healed["items"]["upserts"], healed["items"]["deletes"]) == (2, 1999), healed["items"]
    assert (healed["parts"]["upserts"], healed["parts"]["deletes"]) == (1, 20), healed["parts"]
    # The swap: the rows the writes changed, and the one row whose new column holds a value.
    assert (healed["swapped"]["upserts"], healed["swapped"]["deletes"]) == (3, 1), healed["swapped"]
    assert pipeline.outcome("swapped")["added_columns"] == ["note"]
    # A heal of 1% of the rows ships a few percent of the table: the bucket sums, the differing buckets' hashes.
    full = mariadb.execute(f"SELECT SUM(LENGTH(v) + 20) FROM {pipeline.schema}.parts")[0][0]
    assert healed["parts"]["bytes_sent"] < 0.5 * int(full), (healed["parts"], full)
    level = pipeline.assert_all_equal()
    assert level["swapped"][0][(20,)]["note"] == "after the swap"

    # The chain goes on from each diff's moment.
    pipeline.sql("UPDATE {s}.items SET v = 'later' WHERE id = 3000", "DELETE FROM {s}.recreated WHERE id = 8",
                 "INSERT INTO {s}.parts (id, v) VALUES (5, 'back in p0')",
                 "UPDATE {s}.swapped SET note = 'later' WHERE id = 21")
    code, output = pipeline.run("2026-11-28T02:00:00+00:00")
    assert code == 0, output[-8000:]
    for table in HEALED:
        outcome = pipeline.outcome(table)
        assert (outcome["mode"], sum(outcome["changes"].values())) == ("incremental", 1), outcome
    pipeline.assert_all_equal()
