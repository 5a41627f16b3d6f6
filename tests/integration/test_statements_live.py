"""Statements run on the real server, one captured table each, in one binlog pass: each that changes rows without
row events stops its table with a message naming it; each that keeps every row's values is followed, and the
table's later row events are read. Partitioned source tables, both servers' spellings, comments, odd names; and
on MySQL its own DDL (instant and inplace algorithms, invisible and generated columns, functional indexes)."""

from __future__ import annotations

import os

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import extract, in_one_directory

PARTITIONED = ("(id INT NOT NULL, v VARCHAR(20) NOT NULL, n INT NULL, PRIMARY KEY (id)) PARTITION BY RANGE (id) "
               "(PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN (200), "
               "PARTITION p2 VALUES LESS THAN MAXVALUE)")
PLAIN = "(id INT NOT NULL PRIMARY KEY, v VARCHAR(20) NOT NULL, n INT NULL)"

# table → (its definition, the statement, whether it stops the table). "{t}" is the table, "{s}" its schema.
CASES = {
    "trunc_part": (PARTITIONED, "ALTER TABLE {t} TRUNCATE PARTITION p0", True),
    "drop_part": (PARTITIONED, "ALTER TABLE {t} DROP PARTITION p1", True),
    "exch_part": (PARTITIONED, "ALTER TABLE {t} EXCHANGE PARTITION p0 WITH TABLE {s}.swap", True),
    "conv_part": (PARTITIONED, "ALTER TABLE {t} CONVERT PARTITION p2 TO TABLE {s}.converted", True),
    "ignore_uniq": (PARTITIONED, "ALTER IGNORE TABLE {t} ADD UNIQUE KEY (n, id)", True),
    "to_latin1": (PARTITIONED, "ALTER TABLE {t} CONVERT TO CHARACTER SET latin1", True),
    "narrowed": (PARTITIONED, "/* narrower */ ALTER TABLE {t} MODIFY v VARCHAR(8) NOT NULL", True),
    "renamed_to": (PLAIN, "ALTER TABLE {t} RENAME TO {s}.renamed_away", True),
    "swapped": (PLAIN, "RENAME TABLE {t} TO {s}.swapped_old, {s}.swapped_new TO {t}", True),
    "commented": (PLAIN, "-- the nightly clean-up\nTRUNCATE {t}", True),
    "replaced": (PLAIN, "CREATE OR REPLACE TABLE {t} " + PLAIN, True),
    "statement_dml": (PLAIN, "SET STATEMENT binlog_format = 'STATEMENT' FOR DELETE FROM {t} WHERE id = 10", True),
    "cascade_added": (PLAIN, "ALTER TABLE {t} ADD FOREIGN KEY (n) REFERENCES {s}.parent (id) ON DELETE CASCADE", True),
    "reorg_part": (PARTITIONED, "ALTER TABLE {t} REORGANIZE PARTITION p2 INTO (PARTITION p2 VALUES LESS THAN (250), "
                                "PARTITION p3 VALUES LESS THAN MAXVALUE)", False),
    "coalesced": ("(id INT NOT NULL PRIMARY KEY, v VARCHAR(20) NOT NULL, n INT NULL) PARTITION BY HASH (id) "
                  "PARTITIONS 4", "ALTER TABLE {t} COALESCE PARTITION 2", False),
    "added_part": (PARTITIONED.replace(", PARTITION p2 VALUES LESS THAN MAXVALUE", ""),
                   "ALTER TABLE {t} ADD PARTITION (PARTITION p2 VALUES LESS THAN (400))", False),
    "to_utf8mb4": (PARTITIONED.replace("VARCHAR(20)", "VARCHAR(20) CHARACTER SET latin1"),
                   "ALTER TABLE {t} CONVERT TO CHARACTER SET utf8mb4", False),
    "widened": (PLAIN, "ALTER TABLE {t} MODIFY v VARCHAR(40) NOT NULL, ALGORITHM=COPY", False),
    "indexed": (PLAIN, "/*!40000 ALTER TABLE {t} ADD INDEX (n) */", False),
    "optimized": (PLAIN, "OPTIMIZE TABLE {t}", False),
    "online_added": (PLAIN, "ALTER ONLINE TABLE {t} ADD COLUMN extra INT NULL DEFAULT 3", False),
    # A MODIFY that names no character set takes the table's default: the row events show the conversion.
    "to_default": (PLAIN.replace("VARCHAR(20)", "VARCHAR(20) CHARACTER SET utf8mb4") + " DEFAULT CHARSET=latin1",
                   "ALTER TABLE {t} MODIFY v VARCHAR(30) NOT NULL", True),
    "from_default": (PLAIN.replace("VARCHAR(20)", "VARCHAR(20) CHARACTER SET latin1") + " DEFAULT CHARSET=utf8mb4",
                     "ALTER TABLE {t} MODIFY v VARCHAR(30) NOT NULL", False),
    # NOT NULL: in a strict sql_mode (the server's default, as for "widened") a NULL fails the statement; in a lax
    # one the server writes 0 in its place.
    "not_null_lax": (PLAIN, "SET STATEMENT sql_mode = '' FOR ALTER TABLE {t} MODIFY n INT NOT NULL", True),
    "xa_two": (PLAIN, "SELECT 1", True),  # the XA transactions below
    "xa_one": (PLAIN, "SELECT 1", False),
}


def test_each_statement_stops_its_table_or_is_followed(mariadb, capture_conn, tmp_path):
    schema = f"stmt_{os.urandom(3).hex()}"
    tables = {name: TableName(schema, name) for name in CASES}
    mariadb.execute(
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.swap {PLAIN}", f"INSERT INTO {schema}.swap VALUES (5, 'swapped in', 5)",
        f"CREATE TABLE {schema}.swapped_new {PLAIN}",
        f"CREATE TABLE {schema}.parent (id INT NOT NULL PRIMARY KEY)",
        f"INSERT INTO {schema}.parent SELECT seq FROM {schema}.seq_0_to_20",
        *(f"CREATE TABLE {table.quoted} {CASES[name][0]}" for name, table in tables.items()),
        *(f"INSERT INTO {table.quoted} SELECT seq, CONCAT('v', seq), seq MOD 7 FROM {schema}.seq_10_to_390_step_10"
          for name, table in tables.items() if name != "added_part"),
        f"INSERT INTO {tables['added_part'].quoted} SELECT seq, 'v', 1 FROM {schema}.seq_10_to_190_step_10")
    hook = MySqlSourceHook(capture_conn)
    headers = [hook.raw_header(t) for t in tables.values()]
    start = hook.current_watermark()
    statements = []
    for name, table in tables.items():
        statements += [f"UPDATE {table.quoted} SET n = n + 1 WHERE id = 20",
                       CASES[name][1].format(t=table.quoted, s=schema)]
        if name != "renamed_to":  # (gone)
            statements.append(f"INSERT INTO {table.quoted} (id, v, n) VALUES (155, 'after', 1)")
    mariadb.execute(*statements)
    # An XA transaction's row events come with its first phase (XA PREPARE), before it is decided: they stop the
    # table; one committed in one phase is a transaction as any other.
    mariadb.execute("XA START 'two'", f"INSERT INTO {tables['xa_two'].quoted} VALUES (500, 'xa', 1)", "XA END 'two'",
                    "XA PREPARE 'two'", "XA COMMIT 'two'",
                    "XA START 'one'", f"INSERT INTO {tables['xa_one'].quoted} VALUES (500, 'xa', 1)", "XA END 'one'",
                    "XA COMMIT 'one' ONE PHASE")
    high = hook.current_watermark()
    definitions = [hook.raw_header(t) for name, t in tables.items() if name not in ("renamed_to",)]
    result = extract(hook, in_one_directory(headers, tmp_path / "raw", definitions=definitions), start, high, charsets=hook.column_charsets, defaults=hook.added_column_defaults)
    stopped = {name for name, (_, _, stops) in CASES.items() if stops}
    assert {TableName.parse(t).table for t in result.failed} == stopped, {t: str(e) for t, e in result.failed.items()}
    for name in stopped:
        message = str(result.failed[str(tables[name])])
        assert str(tables[name]) in message and "fresh_snapshot=true" in message, message
        assert "the Hive table is as it was" in message, message
    assert "XA_PREPARE_LOG_EVENT" in str(result.failed[str(tables["xa_two"])])
    for name in set(CASES) - stopped:
        counts = result.counts[str(tables[name])]
        assert (counts["U"], counts["I"]) == (1, 2 if name == "xa_one" else 1), (name, counts)


# MySQL's own DDL: its algorithms, invisible and generated columns, functional indexes; and MySQL's spellings of
# what MariaDB writes otherwise. (table → its definition, the statement, whether it stops the table.)
MYSQL_CASES = {
    "instant_mid": (PLAIN, "ALTER TABLE {t} ADD COLUMN mid INT NULL DEFAULT 7 AFTER id, ALGORITHM=INSTANT", False),
    "instant_drop": (PLAIN, "ALTER TABLE {t} DROP COLUMN n, ALGORITHM=INSTANT", False),
    "inplace_index": (PLAIN, "ALTER TABLE {t} ADD INDEX (n), ALGORITHM=INPLACE, LOCK=NONE", False),
    "functional_index": (PLAIN, "ALTER TABLE {t} ADD INDEX ((n * 2))", False),
    "invisible_added": (PLAIN, "ALTER TABLE {t} ADD COLUMN hid INT NULL INVISIBLE", False),
    "made_invisible": (PLAIN, "ALTER TABLE {t} ALTER COLUMN n SET INVISIBLE", False),
    # A generated column added computes every row's value without row events: a chain broken (healed by default).
    "virtual_added": (PLAIN, "ALTER TABLE {t} ADD COLUMN twice INT AS (n * 2) VIRTUAL", True),
    "stored_added": (PLAIN, "ALTER TABLE {t} ADD COLUMN thrice INT AS (n * 3) STORED", True),
    "virtual_before": ("(id INT NOT NULL PRIMARY KEY, v VARCHAR(20) NOT NULL, n INT NULL, half INT AS (n DIV 2) "
                       "VIRTUAL)", "SELECT 1", False),
    "renamed_column": (PLAIN, "ALTER TABLE {t} RENAME COLUMN n TO m", False),
    "mysql_truncate": (PLAIN, "TRUNCATE TABLE {t}", True),
    "swapped": (PLAIN, "RENAME TABLE {t} TO {s}.swapped_old, {s}.swapped_new TO {t}", True),
    "copy_narrowed": (PLAIN, "ALTER TABLE {t} MODIFY v VARCHAR(8) NOT NULL, ALGORITHM=COPY", True),
}


def test_mysql_ddl_stops_its_table_or_is_followed(mysql, make_user, tmp_path):
    schema = f"stmt_{os.urandom(3).hex()}"
    tables = {name: TableName(schema, name) for name in MYSQL_CASES}
    mysql.execute(
        f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.swapped_new {PLAIN}",
        *(f"CREATE TABLE {table.quoted} {MYSQL_CASES[name][0]}" for name, table in tables.items()),
        *(f"INSERT INTO {table.quoted} (id, v, n) VALUES (10, 'v10', 1), (20, 'v20', 2), (30, 'v30', 3)"
          for table in tables.values()))
    hook = MySqlSourceHook(make_user(server=mysql))
    headers = [hook.raw_header(t) for t in tables.values()]
    start = hook.current_watermark()
    statements = []
    for name, table in tables.items():
        statements += [f"UPDATE {table.quoted} SET v = 'changed' WHERE id = 20",
                       MYSQL_CASES[name][1].format(t=table.quoted, s=schema),
                       f"INSERT INTO {table.quoted} (id, v) VALUES (155, 'after')"]
    mysql.execute(*statements)
    high = hook.current_watermark()
    definitions = [hook.raw_header(t) for t in tables.values()]
    result = extract(hook, in_one_directory(headers, tmp_path / "raw", definitions=definitions, schema_changes="evolve"),
                     start, high, charsets=hook.column_charsets, defaults=hook.added_column_defaults)
    stopped = {name for name, (_, _, stops) in MYSQL_CASES.items() if stops}
    assert {TableName.parse(t).table for t in result.failed} == stopped, {t: str(e) for t, e in result.failed.items()}
    for name in set(MYSQL_CASES) - stopped:
        counts = result.counts[str(tables[name])]
        assert (counts["U"], counts["I"]) == (1, 1), (name, counts)
