"""The example DAG on a real MySQL 9.7 (Debian's, run from its root), with the configuration as shipped (the rolling
verify on): what differs from MariaDB, end to end. After every run each table equals its source, or it stopped (or
healed) with its message while the others committed beside it.

What it goes through, a run each: the first load of every type (the all-types fixture and Flink CDC's conformance
table, against the server's own answer of each value), JSON documents of every kind, invisible and generated
columns, a table with no key (by a diff); changes in a session whose transactions are compressed
(``binlog_transaction_compression``: one payload event each), a 20,000-row transaction among them; a session that
logs MINIMAL row images and one that logs JSON changes as diffs (PARTIAL_JSON): their tables heal by a diff, the
others go on from the binlog; the binlog purged past the tables' watermarks (every table heals); a row changed
behind the binlog's back, found by the verify and repaired by the next run, while an invisible column is widened
(its table loaded anew).
"""

from __future__ import annotations

import pytest
import yaml

from airflow_cdc_provider.core.identifiers import TableName
from tests.conftest import CONFORMANCE_SQL
from tests.e2e.test_example_dag import latest_xcoms
from tests.e2e.test_pipeline import DAG_ID, Pipeline
from tests.e2e.writers import Writers
from tests.integration.fidelity_helpers import (
    MARIADB_ONLY,
    MYSQL_COLUMNS,
    MYSQL_DDL,
    differences,
    insert_cases,
    oracle_rows,
)
from tests.integration.test_source_hook import purge_binlogs_to

DOCS_DDL = [
    # With an invisible column (in the row events, not in a SELECT *) and a virtual generated one.
    "CREATE TABLE {s}.docs (id INT NOT NULL PRIMARY KEY, doc JSON NULL, tag VARCHAR(20) NOT NULL DEFAULT 'new',"
    " secret INT NULL DEFAULT 5 INVISIBLE, twice INT AS (id * 2) VIRTUAL)",
    "INSERT INTO {s}.docs (id, doc) VALUES (1, '{{\"a\": 1, \"b\": [true, null, \"x\"]}}'), (2, NULL),"
    " (3, '[1, 2.5, \"three\", {{\"four\": 4}}]')",
    # No key: taken by a diff with its last version's row digests (capture: diff, chosen for it), a JSON column too.
    "CREATE TABLE {s}.visits (page VARCHAR(100) NOT NULL, seen DATETIME NOT NULL, doc JSON NULL)",
    "INSERT INTO {s}.visits VALUES ('/a', '2026-01-01 00:00:00', '{{\"x\": 1}}'), ('/a', '2026-01-01 00:00:00', NULL),"
    " ('/a', '2026-01-01 00:00:00', NULL)",
]
# A CTE of n rows: MySQL has no sequence tables (MariaDB's seq_1_to_n).
NUMBERS = "WITH RECURSIVE numbers (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM numbers WHERE n < {n})"


@pytest.mark.usefixtures("airflow_home")
def test_the_example_dag_on_mysql_keeps_every_table_equal_through_payloads_partial_images_and_a_purge(
        mysql, make_user, tmp_path, request):
    pipeline = Pipeline(mysql, make_user(server=mysql), tmp_path,
                        ["orders", "customers", "docs", "visits", "all_types", "full_types"])
    pipeline.sql(*DOCS_DDL, MYSQL_DDL.format(name="{s}.all_types"))
    # Every type, awkward values included, by the snapshot now and through the binlog in the next run; and Flink
    # CDC's conformance table (every MySQL type, one row).
    all_types = f"{pipeline.schema}.all_types"
    insert_cases(mysql, all_types, 1, MARIADB_ONLY)
    mysql.run_script(CONFORMANCE_SQL, database=pipeline.schema)
    del pipeline.config["verify"]  # as shipped: the rolling verify on
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))

    def run(hour: int, equal_but: set[str] = frozenset()) -> str:
        """Run, then compare every table but ``equal_but`` with its source."""
        code, output = pipeline.run(f"2026-03-01T{hour:02d}:00:00+00:00")
        assert code == 0, output[-8000:]
        for table, (hive, _) in pipeline.hive_tables().items():
            if table in equal_but:
                assert hive != pipeline.source(table), (hour, table)
                continue
            if table in ("all_types", "full_types"):  # against the server's own answer of each value's Hive form
                header = pipeline.hook.raw_header(TableName(pipeline.schema, table))
                problems = differences(oracle_rows(mysql, header), hive)
                assert problems == [], f"run {hour}, {table}:\n" + "\n".join(problems)
            else:
                assert hive == pipeline.source(table), (hour, table)
        return output

    output = run(0)
    assert {t: pipeline.outcome(t)["mode"] for t in pipeline.tables} == dict.fromkeys(pipeline.tables, "snapshot")
    assert "verify (slice 1 of 24): clean" in output
    # Random changes besides, between the runs (held while one runs, so that each run's end can be compared):
    # two writers inserting, updating, deleting and moving keys of orders, and changing customers.
    writers = Writers(mysql, pipeline.schema, threads=2, pause=0.01)
    request.addfinalizer(writers.stop)

    def churn(commits: int = 150) -> None:
        writers.resume(mysql)
        writers.wait_for(writers.commits + commits)
        writers.hold()

    # Compressed transactions: each one TRANSACTION_PAYLOAD event holding the usual ones, a big one among them.
    pipeline.sql(
        "SET SESSION binlog_transaction_compression = ON", "SET SESSION cte_max_recursion_depth = 30000",
        "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount, note) " + NUMBERS.format(n=20000)
        + " SELECT 100000 + n, 1, n % 7, n / 100, CONCAT('bulk ', n) FROM numbers",
        "UPDATE {s}.orders SET amount = amount + 1, note = CONCAT(IFNULL(note, ''), ' ✓') WHERE order_no = 1001",
        "DELETE FROM {s}.orders WHERE order_no = 1002 OR order_no BETWEEN 100010 AND 100019",
        "UPDATE {s}.customers SET city = 'Manchester' WHERE id = 2",
        "UPDATE {s}.docs SET doc = JSON_SET(doc, '$.c', 'added') WHERE id = 1",
        # Documents of every kind through the binlog: MySQL's opaque values (a DATETIME, DATE, TIME, DECIMAL and
        # binary string put in by SQL), bare scalars, a big number, a DECIMAL's scale; the copy's text of each is
        # the snapshot's (MySQL's print, made canonical).
        "INSERT INTO {s}.docs (id, doc) VALUES (4, JSON_OBJECT('dt', CAST('2024-02-29 10:11:12.123456' AS"
        " DATETIME(6)), 'd', CAST('2024-02-29' AS DATE), 't', CAST('-01:02:03.5' AS TIME(1)), 'dec',"
        " CAST(-12.50 AS DECIMAL(10,2)), 'bin', CAST(x'00ff' AS BINARY), 'é', JSON_ARRAY(1, 'two', NULL)))",
        "INSERT INTO {s}.docs (id, doc) VALUES (5, '\"a bare string\"'), (6, '42'), (7, 'true'), (8, 'null'),"
        " (9, CAST(CAST('100:00:00' AS TIME) AS JSON)), (10, '-1e300'), (11, JSON_ARRAY(CAST(1.5 AS DECIMAL(30,20)))),"
        " (12, CAST(CAST('2024-01-01 00:00:00' AS DATETIME) AS JSON))",
        "UPDATE {s}.docs SET doc = JSON_SET(doc, '$.later', CAST('23:59:59' AS TIME)) WHERE id = 4",
        "INSERT INTO {s}.visits VALUES ('/b', NOW(), '[1]')", "DELETE FROM {s}.visits WHERE doc IS NULL LIMIT 1")
    insert_cases(mysql, all_types, 101, MARIADB_ONLY)
    writers.__enter__()
    churn()
    pipeline.sql("UPDATE {s}.full_types SET id = 2 WHERE id = 1",
                 "UPDATE {s}.all_types SET " + ", ".join(f"`{name}` = NULL" for name, _ in MYSQL_COLUMNS)
                 + " WHERE id = 1")
    events = mysql.execute(f"SHOW BINLOG EVENTS IN '{pipeline.hook.current_watermark().file}'")
    assert "Transaction_payload" in {event[2] for event in events}
    run(1)
    changes = pipeline.outcome("orders")["changes"]  # the writers' besides
    assert changes["I"] >= 20000 and changes["U"] >= 2 and changes["D"] >= 11, changes
    modes = {t: pipeline.outcome(t)["mode"] for t in pipeline.tables}
    assert modes == {"orders": "incremental", "customers": "incremental", "docs": "incremental", "visits": "diff",
                     "all_types": "incremental", "full_types": "incremental"}

    # A session that logs MINIMAL row images (an update, a key change, an insert that leaves defaults out, a delete)
    # and one that logs JSON changes as diffs (PARTIAL_JSON), whose documents cannot be made from them. Their tables
    # are brought level by a diff (the documents' exactly, though Spark cannot print MySQL's JSON: every row
    # holding one is read again); the tables the sessions did not touch go on from the binlog.
    pipeline.sql(
        "SET SESSION binlog_row_image = 'MINIMAL'",
        "UPDATE {s}.customers SET city = 'Leeds' WHERE id = 1",
        "UPDATE {s}.customers SET id = 20 WHERE id = 2",
        "INSERT INTO {s}.customers (email, name, created_at) VALUES ('joan@example.com', 'Joan', NOW(3))",
        "DELETE FROM {s}.customers WHERE email = 'ada@example.com'")
    pipeline.sql(
        "SET SESSION binlog_row_value_options = 'PARTIAL_JSON'",
        "UPDATE {s}.docs SET doc = JSON_REPLACE(doc, '$.a', 2), tag = 'partial' WHERE id = 1",
        "UPDATE {s}.docs SET doc = JSON_REMOVE(doc, '$[0]') WHERE id = 3")
    pipeline.sql("UPDATE {s}.orders SET note = 'full image' WHERE order_no = 1001")
    churn()
    run(2)
    for table, setting in (("customers", "binlog_row_image=MINIMAL or NOBLOB"),
                           ("docs", "binlog_row_value_options=PARTIAL_JSON")):
        healed = pipeline.outcome(table)
        assert (healed["mode"], healed["status"]) == ("heal", "committed"), healed
        assert setting in healed["healed"]["why"], healed
    assert pipeline.outcome("orders")["mode"] == "incremental"

    # The binlog purged past every table's watermark: each table heals by a diff, and the binlog goes on from there.
    pipeline.sql("UPDATE {s}.orders SET amount = 0 WHERE order_no = 1001", "DELETE FROM {s}.customers WHERE id = 20",
                 "UPDATE {s}.docs SET doc = '\"a bare string\"' WHERE id = 2")
    churn()
    writers.stop()
    assert sum(writers.key_changes.values()) > 0, "keys moved among the random changes"
    mysql.execute("FLUSH BINARY LOGS")
    purge_binlogs_to(mysql, pipeline.hook.current_watermark().file)
    run(3)
    modes = {t: pipeline.outcome(t)["mode"] for t in pipeline.tables}
    assert modes == {"orders": "heal", "customers": "heal", "docs": "heal", "visits": "diff", "all_types": "heal",
                     "full_types": "heal"}

    # A row changed behind the binlog's back (sql_log_bin=0): the verify (the whole table at once here) finds it by
    # the server's and Spark's sums, and the next run repairs it, with the change the binlog did bring.
    pipeline.sql("SET SESSION sql_log_bin = 0",
                 "UPDATE {s}.orders SET note = 'drifted' WHERE order_no = 1001 AND line_no = 1")
    pipeline.config["verify"] = {"slices": 1}
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    run(4, equal_but={"orders"})
    line = latest_xcoms(DAG_ID)["source.summary"][f"{pipeline.schema}.orders"]
    assert ": 1 keys differ in 1 of " in line and "left for a repair" in line, line
    # And an invisible column widened (INT to BIGINT, a value only the new type holds): docs is loaded anew in the
    # run, with its invisible and generated columns, and its Hive column is a bigint.
    pipeline.sql("UPDATE {s}.orders SET amount = 1 WHERE order_no = 1003",
                 "ALTER TABLE {s}.docs MODIFY secret BIGINT NULL DEFAULT 5 INVISIBLE",
                 "UPDATE {s}.docs SET secret = 5000000000 WHERE id = 2")
    run(5)
    orders = pipeline.extraction("orders")
    assert orders["reread"] and orders["reread_rows"] >= 1, orders
    docs = pipeline.outcome("docs")
    assert (docs["mode"], docs["healed"]["reloaded"]) == ("snapshot", True), docs
    assert "secret (int → bigint) land as another Hive type" in docs["healed"]["why"], docs
    assert pipeline.hive_types(["docs"])["docs"]["secret"] == "int64"
