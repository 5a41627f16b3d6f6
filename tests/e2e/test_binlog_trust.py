"""Nothing lost without a word, and what breaks the binlog's chain healed, through the example DAG: a compressed
binlog (MariaDB's log_bin_compress, decoded by decoder processes), statements that change tables' rows without row
events (partition maintenance, TRUNCATE, a table dropped and created again), online schema changes
(pt-online-schema-change under a writer, adding then changing a column, and a gh-ost-style swap by hand),
foreign-key cascades, and a column dropped and added again. A table whose chain breaks is brought level by a diff
against its version in the same run, with no person acting (``docs/runs.md``); the next run reads its binlog
from the diff's moment. Then the type changes DBAs make (a widening by pt-online-schema-change under a writer and
by ALTER, a column dropped and added again with another type, a table created again with a BIGINT key): each
table is loaded anew in the run, its new Hive types read back, and the next run goes on from the binlog. After every run each table equals its source, or it stopped with its message (a change of
columns its policy refuses) and its Hive table is as it was. (The compressed binlog through several runs, decoded
in the pass itself, and a purged binlog healed: tests/e2e/test_pipeline.py; `on_broken_chain: stop`:
tests/integration/test_capture_operators.py.)"""

from __future__ import annotations

import random
import re
import subprocess
import threading
import time

import pytest
import yaml

from tests.e2e.test_example_dag import latest_xcoms
from tests.e2e.test_pipeline import DAG_ID, Pipeline
from tests.integration.capture_helpers import compressed_binlog

PARTITIONED = ("CREATE TABLE {s}.%s (id INT NOT NULL, v VARCHAR(20) NOT NULL, n INT NULL, PRIMARY KEY (id)) "
               "PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN (200), "
               "PARTITION p2 VALUES LESS THAN MAXVALUE)")
# Each partitioned table meets one statement in the second run: those that change its rows without row events
# break its chain, and it heals; the one that only moves rows between partitions is followed. (Every other statement that stops a table is
# run against the server in tests/integration/test_statements_live.py: what stops a table there stops it here.)
STATEMENTS = {
    "pt_trunc": "ALTER TABLE {s}.pt_trunc TRUNCATE PARTITION p0",
    "pt_drop": "ALTER TABLE {s}.pt_drop DROP PARTITION p1",
    "pt_exch": "ALTER TABLE {s}.pt_exch EXCHANGE PARTITION p0 WITH TABLE {s}.pt_swap",
    "pt_reorg": "ALTER TABLE {s}.pt_reorg REORGANIZE PARTITION p2 INTO (PARTITION p2 VALUES LESS THAN (250), "
                "PARTITION p3 VALUES LESS THAN MAXVALUE)",
}
STOPPED = ["readd_strict"]  # its policy refuses the change of columns: a heal would not take it on either
ITEMS = "(id INT NOT NULL PRIMARY KEY, v VARCHAR(40) NOT NULL, n INT NULL, at DATETIME(6) NULL)"
FILL = ("INSERT INTO {s}.%s (id, v, n, at) SELECT seq, CONCAT('v', seq, ' é'), seq MOD 13, "
        "'2026-01-01 00:00:00' + INTERVAL seq SECOND FROM {s}.seq_1_to_%d")
PARTS = ("CREATE TABLE {s}.parts (id INT NOT NULL, v VARCHAR(40) NOT NULL, n INT NULL, at DATETIME(6) NULL, "
         "PRIMARY KEY (id)) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (21), "
         "PARTITION p1 VALUES LESS THAN MAXVALUE)")
# The tables each break heals in the second run, with what broke the chain.
HEALED = {"items": "TRUNCATE", "recreated": "DROP TABLE", "parts": "TRUNCATE PARTITION", "swapped": "RENAME",
          "ptosc": "RENAME TABLE", "pt_trunc": "TRUNCATE PARTITION", "pt_drop": "DROP PARTITION",
          "pt_exch": "EXCHANGE PARTITION"}


class Writer:
    """A thread that keeps changing a table (an update, an insert, a delete at a time) while an online schema
    change tool works on it."""

    def __init__(self, server, table: str, first_id: int) -> None:
        self.server, self.table, self.done, self.changes = server, table, threading.Event(), 0
        self.first_id = first_id
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(30)

    def _run(self) -> None:
        rng, new_id = random.Random(self.first_id), self.first_id
        with self.server.root_connection() as conn, conn.cursor() as cursor:
            while not self.done.is_set():
                statement = rng.choice([f"UPDATE {self.table} SET n = n + 1 WHERE id = {rng.randint(1, 2000)}",
                                        f"INSERT INTO {self.table} (id, v, n) VALUES ({new_id}, 'w', 1)",
                                        f"DELETE FROM {self.table} WHERE id = {rng.randint(1, 2000)}"])
                new_id += 1
                self.changes += cursor.execute(statement)
                time.sleep(0.05)  # an application's pace: some tens of changes a second


def online_schema_change(server, schema: str, table: str, alter: str, first_id: int) -> int:
    """pt-online-schema-change (Debian's percona-toolkit) altering ``table`` under a writer, in small chunks with a
    pause between them so that the writer's changes fall during the copy; returns the rows the writer changed."""
    with Writer(server, f"{schema}.{table}", first_id) as writer:
        tool = subprocess.Popen(["pt-online-schema-change", "--alter", alter, "--execute", "--recursion-method=none",
                                 "--no-version-check", "--chunk-size=100", "--chunk-time=0", "--sleep=0.1",
                                 f"S={server.socket_path},u=root,D={schema},t={table}"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            output, _ = tool.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            waits = server.execute("SELECT ID, USER, COMMAND, TIME, STATE, LEFT(INFO, 200) FROM "
                                   "information_schema.PROCESSLIST WHERE COMMAND <> 'Sleep' OR TIME > 5")
            tool.kill()
            raise AssertionError(f"pt-online-schema-change did not finish: {tool.communicate()[0][-3000:]}; "
                                 f"the server's threads: {waits}") from None
    assert tool.returncode == 0 and "Successfully altered" in output, output
    assert writer.changes > 10, writer.changes
    return writer.changes


FOREIGN_KEYS = [
    "CREATE TABLE {s}.parent (id INT NOT NULL PRIMARY KEY, name VARCHAR(20) NOT NULL)",
    "CREATE TABLE {s}.child_cascade (id INT NOT NULL PRIMARY KEY, parent_id INT NULL, note VARCHAR(20) NULL, "
    "FOREIGN KEY (parent_id) REFERENCES {s}.parent (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE {s}.child_null (id INT NOT NULL PRIMARY KEY, parent_id INT NULL, "
    "FOREIGN KEY (parent_id) REFERENCES {s}.parent (id) ON DELETE SET NULL ON UPDATE SET NULL)",
    "CREATE TABLE {s}.fkc_lines (id INT NOT NULL PRIMARY KEY, parent_id INT NULL, "
    "FOREIGN KEY (parent_id) REFERENCES {s}.parent (id) ON DELETE CASCADE)",
    "INSERT INTO {s}.parent VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
    "INSERT INTO {s}.child_cascade VALUES (10, 1, 'x'), (11, 1, 'y'), (12, 2, 'z'), (13, 3, NULL), (14, NULL, 'w')",
    "INSERT INTO {s}.child_null VALUES (20, 1), (21, 2), (22, 3)",
    "INSERT INTO {s}.fkc_lines VALUES (30, 1), (31, 2)",
]
READDED = [statement.replace("NAME", t) for t in ("readd_one", "readd_two", "readd_strict") for statement in (
    "CREATE TABLE {s}.NAME (id INT NOT NULL PRIMARY KEY, c INT NOT NULL DEFAULT 1, note VARCHAR(10) NULL)",
    "INSERT INTO {s}.NAME (id, c, note) VALUES (1, 11, 'a'), (2, 12, 'b'), (3, 13, NULL)")]


def _orders_changes(rng: random.Random, pipeline: Pipeline, first_no: int) -> list[str]:
    """Random inserts, updates and deletes of orders, each on a row of its own."""
    keys = pipeline.server.execute(f"SELECT order_no, line_no FROM {pipeline.schema}.orders")
    rng.shuffle(keys)
    out = [f"INSERT INTO {{s}}.orders (order_no, line_no, customer_id, amount, note) VALUES ({first_no + i}, 1, 1, "
           f"{rng.randint(1, 9999) / 100}, '{'é' * rng.randint(0, 40)}')" for i in range(rng.randint(20, 40))]
    for order_no, line_no in keys[:len(keys) // 2]:
        where = f"WHERE order_no = {order_no} AND line_no = {line_no}"
        out.append(rng.choice([f"UPDATE {{s}}.orders SET amount = amount + 1, note = 'u{rng.random()}' {where}",
                               f"DELETE FROM {{s}}.orders {where}"]))
    return out


@pytest.mark.usefixtures("airflow_home")
def test_compressed_binlog_broken_chains_healed_cascades_and_readded_columns(mariadb, capture_conn, tmp_path,
                                                                            metastore_service):
    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders"], metastore=metastore_service)
    pipeline.sql(*(f"CREATE TABLE {{s}}.{t} {ITEMS}" for t in ("items", "recreated", "swapped", "ptosc")), PARTS,
                 FILL % ("items", 2000), FILL % ("recreated", 300), FILL % ("swapped", 2000), FILL % ("parts", 2000),
                 FILL % ("ptosc", 2000))
    pipeline.sql(*(PARTITIONED % t for t in STATEMENTS),
                 "CREATE TABLE {s}.pt_swap (id INT NOT NULL, v VARCHAR(20) NOT NULL, n INT NULL, PRIMARY KEY (id))",
                 "INSERT INTO {s}.pt_swap VALUES (5, 'swapped in', 5)",
                 *(f"INSERT INTO {{s}}.{t} SELECT seq, CONCAT('v', seq), seq MOD 7 FROM {{s}}.seq_10_to_290_step_10"
                   for t in STATEMENTS),
                 *FOREIGN_KEYS, *READDED,
                 # orders with more rows to change at random
                 "INSERT INTO {s}.orders (order_no, line_no, customer_id, amount) "
                 "SELECT seq, 1, 1, seq / 10 FROM {s}.seq_5000_to_5200")
    binlog_tables = ["orders", *STATEMENTS, "parent", "readd_one", "readd_two", "readd_strict", "items", "recreated",
                     "parts", "ptosc"]
    diff_tables = ["child_cascade", "child_null"]
    pipeline.tables = binlog_tables + diff_tables + ["swapped"]
    config = pipeline.config
    config["source"] = {"mysql_conn_id": config.pop("mysql_conn_id"), "binlog_decoders": 2}
    config["tables"] = [
        *({"source": f"{pipeline.schema}.{t}", "target": t} for t in binlog_tables),
        *({"source": f"{pipeline.schema}.{t}", "target": t, "capture": "diff"} for t in diff_tables),
        # A pattern that sets `capture: binlog`: a child of a cascading key it matches is left out, with the reason;
        # the others go on. (Without it, the child is captured by a diff: tests/e2e/test_source.py.)
        {"source": f"{pipeline.schema}.fkc_*", "target": "{table}", "capture": "binlog"},
        # Another: the gh-ost swap's shadow and old tables, which it matches too, must not be captured.
        {"source": f"{pipeline.schema}.*swapped*", "target": "{table}"},
    ]
    for entry in config["tables"]:
        if entry["source"].endswith((".readd_one", ".readd_two")):
            entry["schema_changes"] = "evolve"
    pipeline.config_path.write_text(yaml.safe_dump(config))

    code, output = pipeline.run("2026-11-20T00:00:00+00:00")
    assert code == 0, output[-8000:]
    skipped = {s["source"]: s["reason"] for s in latest_xcoms(DAG_ID)["source.check"]["skipped"]}
    reason = skipped[f"{pipeline.schema}.fkc_lines"]
    for part in ("ON DELETE CASCADE", f"{pipeline.schema}.parent", "Its entry sets `capture: binlog`: remove that"):
        assert part in reason, (part, reason)
    # What the tables that will stop hold now, and so what Hive must still hold after the run that stops them.
    first = {table: pipeline.source(table) for table in STOPPED}

    with compressed_binlog(mariadb):
        rng = random.Random("binlog-trust-2026")
        pipeline.sql(
            *_orders_changes(rng, pipeline, 7000),
            # Row changes on the partitioned tables, then each one's statement.
            *(f"UPDATE {{s}}.{t} SET n = n + 100 WHERE id IN (10, 150, 280)" for t in STATEMENTS),
            *STATEMENTS.values(),
            "INSERT INTO {s}.pt_reorg VALUES (295, 'after reorg', 1)",
            # The parent's rows deleted and re-keyed: the server cascades to the children without row events.
            "DELETE FROM {s}.parent WHERE id = 1",
            "UPDATE {s}.parent SET id = 30 WHERE id = 3",
            "UPDATE {s}.parent SET name = 'bb' WHERE id = 2",
            # A column dropped and added again: in one statement, and in two with rows of another table between.
            "ALTER TABLE {s}.readd_one DROP COLUMN c, ADD COLUMN c INT NOT NULL DEFAULT 7",
            "UPDATE {s}.readd_one SET note = 'changed' WHERE id = 1",
            *(f"ALTER TABLE {{s}}.{t} DROP COLUMN c" for t in ("readd_two", "readd_strict")),
            "UPDATE {s}.orders SET amount = amount + 1 WHERE order_no = 5001",
            *(f"ALTER TABLE {{s}}.{t} ADD COLUMN c INT NOT NULL DEFAULT 9" for t in ("readd_two", "readd_strict")),
        )
        pipeline.sql(
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
        online_schema_change(mariadb, pipeline.schema, "ptosc", "ADD COLUMN extra VARCHAR(20) NULL", 100_000)
    code, output = pipeline.run("2026-11-20T01:00:00+00:00")
    assert code != 0, "the stopped table fails the run"
    for table in STOPPED:
        assert f"{pipeline.schema}.{table}" in output, (table, output[-6000:])
    assert "dropped c" in output and "schema_changes: evolve" in output, output[-6000:]
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
    assert pipeline.outcome("ptosc")["added_columns"] == ["extra"]
    # pt-online-schema-change: what the writer changed during the copy, not every row.
    assert 0 < healed["ptosc"]["upserts"] + healed["ptosc"]["deletes"] < 200, healed["ptosc"]
    # A heal of 1% of the rows ships a few percent of the table: the bucket sums, the differing buckets' hashes.
    full = mariadb.execute(f"SELECT SUM(LENGTH(v) + 20) FROM {pipeline.schema}.parts")[0][0]
    assert healed["parts"]["bytes_sent"] < 0.5 * int(full), (healed["parts"], full)
    read = pipeline.hive_tables()  # one Spark read for every table
    for table, (rows, _) in read.items():
        expected = first[table] if table in STOPPED else pipeline.source(table)
        assert rows == expected, (f"{pipeline.database}.{table}: "
                                  f"{'changed though it stopped' if table in STOPPED else 'differs'}")
    assert {r["c"] for r in read["readd_one"][0].values()} == {7}, "the new column's default"
    assert {r["c"] for r in read["readd_two"][0].values()} == {9}
    assert read["swapped"][0][(20,)]["note"] == "after the swap"
    # (A fresh snapshot bringing a stopped table level: tests/e2e/test_partitions.py and test_pipeline.py.)

    # The chain goes on from each diff's moment. Types change as DBAs change them, under both policies, and no
    # merge onto a version can follow them: pt-online-schema-change widens a column under a writer (strict), an
    # ALTER widens one in place (strict), a column is dropped and added again with another type (evolve: in one
    # statement, and in two), and a table is dropped and created again with a BIGINT key and other columns
    # (strict). Each is loaded anew in the run, its Hive table defined again with the new types.
    pipeline.sql("UPDATE {s}.items SET v = 'later' WHERE id = 3000", "DELETE FROM {s}.recreated WHERE id = 8",
                 "INSERT INTO {s}.parts (id, v) VALUES (5, 'back in p0')",
                 "UPDATE {s}.swapped SET note = 'later' WHERE id = 21",
                 "UPDATE {s}.pt_trunc SET n = 1 WHERE id = 150",
                 "ALTER TABLE {s}.items CHANGE n n BIGINT NULL",
                 "UPDATE {s}.items SET n = 5000000000 WHERE id = 1",
                 "ALTER TABLE {s}.readd_one DROP COLUMN c, ADD COLUMN c VARCHAR(10) NOT NULL DEFAULT 'x'",
                 "UPDATE {s}.readd_one SET c = 'y' WHERE id = 2",
                 "ALTER TABLE {s}.readd_two DROP COLUMN c", "UPDATE {s}.orders SET amount = amount + 1",
                 "ALTER TABLE {s}.readd_two ADD COLUMN c DECIMAL(6,2) NULL",
                 "DROP TABLE {s}.recreated",
                 "CREATE TABLE {s}.recreated (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR(40) NOT NULL, label TEXT NULL)",
                 "INSERT INTO {s}.recreated (id, v, label) VALUES (1, 'one', 'a'), (9000000000, 'big', NULL)")
    online_schema_change(mariadb, pipeline.schema, "ptosc", "MODIFY v VARCHAR(80) NOT NULL, MODIFY n BIGINT NULL",
                         200_000)
    code, output = pipeline.run("2026-11-20T02:00:00+00:00")
    assert code != 0, "the stopped table fails the run again"
    for table in ("parts", "swapped", "pt_trunc"):
        outcome = pipeline.outcome(table)
        assert (outcome["mode"], sum(outcome["changes"].values())) == ("incremental", 1), outcome
    # Each with the change that made it one (the binlog spells a type without its display width).
    reloaded = {"items": r"n \(int\(11\) → bigint(\(20\))?\) land as another Hive type",
                "ptosc": r"n \(int\(11\) → bigint(\(20\))?\) land as another Hive type",
                "readd_one": r"c \(int(\(11\))? → varchar\(10\)\) land as another Hive type",
                "readd_two": r"c \(int(\(11\))? → decimal\(6,2\)\) land as another Hive type",
                "recreated": r"It changes the key column\(s\) id \(int\(11\) → bigint(\(20\))?\)"}
    for table, why in reloaded.items():
        outcome = pipeline.outcome(table)
        assert (outcome["mode"], outcome["status"], outcome["healed"]["reloaded"]) == ("snapshot", "committed",
                                                                                       True), outcome
        assert re.search(why, outcome["healed"]["why"]) and "loaded anew" in output, outcome["healed"]
        assert outcome["rows"] == len(pipeline.source(table)), outcome
    assert "RENAME TABLE" in pipeline.outcome("ptosc")["healed"]["why"]
    # A widening in place: the columns and the location in one metastore call, no moment without the table.
    for table in ("items", "ptosc"):
        assert f"{pipeline.database}.{table}: its columns and location switched in one metastore call" in output
    assert "DROP TABLE" in pipeline.outcome("recreated")["healed"]["why"]
    read = pipeline.hive_tables()
    for table, (rows, _) in read.items():
        expected = first[table] if table in STOPPED else pipeline.source(table)
        assert rows == expected, f"{pipeline.database}.{table} differs"
    # The new Hive types, read back.
    types = pipeline.hive_types(list(reloaded))
    assert types["items"]["n"] == types["ptosc"]["n"] == types["recreated"]["id"] == "int64", types
    assert (types["readd_one"]["c"], types["readd_two"]["c"]) == ("string", "decimal128(6, 2)"), types
    assert "at" not in types["recreated"] and "label" in types["recreated"], types

    # The runs after a load anew read the binlog from its moment, as before.
    pipeline.sql("UPDATE {s}.items SET n = n + 1 WHERE id = 1", "INSERT INTO {s}.recreated VALUES (2, 'two', 'b')",
                 "UPDATE {s}.readd_two SET c = 1.25 WHERE id = 3")
    code, output = pipeline.run("2026-11-20T03:00:00+00:00")
    assert code != 0, "the stopped table fails the run again"
    for table in ("items", "recreated", "readd_two"):
        outcome = pipeline.outcome(table)
        assert (outcome["mode"], sum(outcome["changes"].values())) == ("incremental", 1), outcome
    pipeline.assert_all_equal([*reloaded, "parts"])
