"""A whole source through the example DAG: tables by pattern, one binlog pass per run, one Spark application.

Real `dag.test` runs against a real MariaDB, real Spark and a real (embedded) metastore. After every run every
Hive table equals its source, except a table whose change was refused, which stays as it was. Beside the sixteen
tables (and one with no key of its own, captured by the key its entry declares: `key:`), a table per character set
of a sample of each kind (TEXT_CHARSETS) holds text of that set's own repertoire (tests/integration/
charset_helpers.py), loaded by the snapshot and changed through the binlog; and a log table with no key at all,
whose equal rows are one row counted, is captured by a diff in the same runs (equal to its source as a multiset:
each row as many times). So is the child of a foreign key with a cascading action, named without `capture:`,
whose rows the server deletes without a row event when its parent's go. A table named before it exists is stopped
in the first run, with its reason, while every other table loads; the run that finds it loads it.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import yaml
from airflow_cdc_testing.cluster import MetastoreService
from airflow_cdc_testing.hive import read_hive_tables

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from tests.conftest import ROOT
from tests.e2e.dag_run import run_dag
from tests.e2e.status import status
from tests.e2e.test_example_dag import latest_xcoms, outcomes
from tests.integration.capture_helpers import source_rows
from tests.integration.charset_helpers import change_rows, create_table, insert_row, server_charsets, table_name
from tests.integration.hive_helpers import hive_rows, plain

DAG_ID = "mysql_binlog_to_hive"
# Enough for a random subset to change and another to stay idle in each run, and for Airflow's map limit to deal
# the written tables into fewer tasks; the time a source of many tables takes is measured by bench/source_bench.py
# and bench/many_tables_merge_bench.py (each table here costs every run's merge about a second).
TABLES = 16
LAST = f"t{TABLES:02d}"  # dropped at the source in the third run
KEYLESS = "audit_log"
# A parent, and its child by a foreign key ON DELETE CASCADE: named without `capture:`, the child is captured by a
# diff (the binlog holds no event for the rows a cascade deletes), the parent from the binlog.
PARENT, CHILD = "fk_parent", "fk_child"
LATE = "late"  # named in the configuration, created at the source only after the first run


# The character sets whose text goes all the way to Hive here: each kind's odd ones (bytes, re-assigned ASCII,
# two-byte sets with the server's corrections, the UTF-16 and UTF-32 families), and cp1250, whose byte 0x81 is no
# text. Every set the server offers is captured, by snapshot and binlog, in tests/integration/test_charsets.py;
# once decoded, text is text to the merge (each table here costs every run's merge about a second).
TEXT_CHARSETS = {"binary", "ascii", "swe7", "latin1", "cp1250", "big5", "cp932", "eucjpms", "gbk", "gb18030", "ucs2",
                 "utf16le", "utf32", "utf8mb4"}


# A table with no key of its own (an index that is not unique), captured by the key its entry declares.
DECLARED = {"lines": ["a", "b"]}


def _ddl(schema: str, name: str, n: int) -> str:
    # Two key shapes: a single AUTO_INCREMENT key, and a composite one.
    if n % 2:
        return (f"CREATE TABLE {schema}.{name} (a INT NOT NULL, b VARCHAR(8) NOT NULL, qty INT NULL,"
                f" price DECIMAL(9,2) NOT NULL, seen DATETIME(3) NULL, {'KEY' if name in DECLARED else 'PRIMARY KEY'}"
                " (a, b))")
    return (f"CREATE TABLE {schema}.{name} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, label VARCHAR(40) NOT NULL,"
            " amount DECIMAL(12,2) NULL, note TEXT NULL)")


class Source:
    """The example DAG over one schema of the shared server, selected by a pattern."""

    def __init__(self, server, conn_id: str, tmp_path: Path, metastore: MetastoreService):
        self.server, self.conn_id, self.tmp = server, conn_id, tmp_path
        suffix = os.urandom(3).hex()
        self.schema, self.database = f"many_{suffix}", f"ods_{suffix}"  # a database of its own on the service
        self.rng = random.Random(20261122)
        self.tables: dict[str, int] = {}  # name → shape number
        self.next_id: dict[str, int] = {}
        server.execute(f"CREATE DATABASE {self.schema}")
        for n in range(1, TABLES + 1):
            self.create(f"t{n:02d}", n)
        self.create("lines", 1)
        # cs_<charset> → its character set
        self.charsets = {table_name(c): c for c in server_charsets(server) if c in TEXT_CHARSETS}
        assert {"cp1250", "big5", "ucs2", "utf8mb4"} <= set(self.charsets.values())
        for charset in self.charsets.values():
            create_table(server, self.schema, charset)
            for row_id in (1, 2):
                insert_row(server, self.schema, charset, row_id)
        # No key at all: captured by a diff. Excluded by the pattern: never looked at.
        server.execute(f"CREATE TABLE {self.schema}.{KEYLESS} (at DATETIME NULL, line TEXT NULL, n INT NULL)",
                       f"CREATE TABLE {self.schema}.tmp_scratch (id INT PRIMARY KEY)")
        for i in range(6):  # each row twice, and two rows of NULLs
            server.execute(*[f"INSERT INTO {self.schema}.{KEYLESS} VALUES ('2026-07-01 10:00:0{i}', 'event {i}', {i})"
                             ] * 2)
        server.execute(*[f"INSERT INTO {self.schema}.{KEYLESS} VALUES (NULL, NULL, NULL)"] * 2)
        server.execute(f"CREATE TABLE {self.schema}.{PARENT} (id INT NOT NULL PRIMARY KEY, name VARCHAR(20) NULL)",
                       f"CREATE TABLE {self.schema}.{CHILD} (id INT NOT NULL PRIMARY KEY, parent_id INT NULL, "
                       f"note VARCHAR(20) NULL, CONSTRAINT fk_child_parent FOREIGN KEY (parent_id) REFERENCES "
                       f"{self.schema}.{PARENT} (id) ON DELETE CASCADE)",
                       f"INSERT INTO {self.schema}.{PARENT} VALUES (1, 'a'), (2, 'b'), (3, 'c')",
                       f"INSERT INTO {self.schema}.{CHILD} VALUES (10, 1, 'x'), (11, 1, 'y'), (12, 2, 'z'), "
                       "(13, NULL, NULL)")
        self.config = {
            "mysql_conn_id": conn_id, "spark_conn_id": "spark_source", "work_dir": str(tmp_path / "work"),
            "hive": {"database": self.database, "warehouse_dir": str(tmp_path / "warehouse"),
                     "metastore_uri": metastore.uri},
            "tables": [*({"source": f"{self.schema}.{name}", "target": name, "key": key}
                         for name, key in DECLARED.items()),
                       *({"source": f"{self.schema}.{name}", "target": name} for name in (CHILD, LATE)),
                       {"source": f"{self.schema}.*", "exclude": [f"{self.schema}.tmp_*"], "target": "{table}"}],
            "retries": 0, "snapshot_concurrency": 4,
        }
        self.config_path = tmp_path / "cdc.yaml"
        # The rolling verify (on by default) starts a Spark application in every run, over every table: only the
        # second run keeps the default, and says what it found (``verify(True)``).
        self.verify(False)
        self.env = {**os.environ, "CDC_CONFIG": str(self.config_path),
                    "AIRFLOW_CONN_SPARK_SOURCE": json.dumps({"conn_type": "spark", "host": "local[2]"})}
        self.hook = MySqlSourceHook(conn_id)
        self.user = json.loads(os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"])["login"]

    def create(self, name: str, n: int, rows: int = 12) -> None:
        self.tables[name], self.next_id[name] = n, rows
        self.server.execute(_ddl(self.schema, name, n))
        for i in range(1, rows + 1):
            self.insert(name, i)

    def insert(self, name: str, i: int) -> None:
        table = f"{self.schema}.{name}"
        if self.tables[name] % 2:
            self.server.execute(f"INSERT INTO {table} VALUES ({i}, 'k{i % 3}', {i * 7}, {i}.25, "
                                f"'2026-01-0{1 + i % 9} 10:00:0{i % 10}.123')")
        else:
            self.server.execute(f"INSERT INTO {table} (id, label, amount, note) VALUES ({i}, 'row {i}', {i}.50, "
                                f"{'NULL' if i % 4 == 0 else repr(f'note ✓ {i}')})")

    def change(self, name: str) -> None:
        """A few random inserts, updates, deletes and key changes on one table."""
        table, rng = f"{self.schema}.{name}", self.rng
        ids = [row[0] for row in self.server.execute(
            f"SELECT {'a' if self.tables[name] % 2 else 'id'} FROM {table}")]
        for _ in range(rng.randint(2, 6)):
            op = rng.choice(["insert", "update", "delete", "key"])
            if op == "insert" or not ids:
                self.next_id[name] += 1
                self.insert(name, self.next_id[name])
                ids.append(self.next_id[name])
                continue
            victim = rng.choice(ids)
            if self.tables[name] % 2:
                statements = {"update": f"UPDATE {table} SET qty = qty + 1, seen = NULL WHERE a = {victim}",
                              "delete": f"DELETE FROM {table} WHERE a = {victim}",
                              "key": f"UPDATE {table} SET a = a + 1000 WHERE a = {victim}"}
            else:
                statements = {"update": f"UPDATE {table} SET amount = amount * 2, note = 'changed' WHERE id = {victim}",
                              "delete": f"DELETE FROM {table} WHERE id = {victim}",
                              "key": f"UPDATE {table} SET id = id + 1000 WHERE id = {victim}"}
            self.server.execute(statements[op])
            ids.remove(victim)
            if op == "key":
                ids.append(victim + 1000)

    def change_keyless(self) -> None:
        """One copy of a row updated and one deleted, where the table holds it twice; a copy more of another."""
        table, rng = f"{self.schema}.{KEYLESS}", self.rng
        counts = dict(self.server.execute(f"SELECT line, COUNT(*) FROM {table} WHERE line IS NOT NULL GROUP BY line"))
        twice = sorted(line for line, n in counts.items() if n > 1)
        updated, deleted = rng.sample(twice, 2)
        self.server.execute(f"UPDATE {table} SET n = n + 100 WHERE line = '{updated}' LIMIT 1",
                            f"DELETE FROM {table} WHERE line = '{deleted}' LIMIT 1",
                            f"INSERT INTO {table} SELECT * FROM {table} WHERE line = '{rng.choice(sorted(counts))}' "
                            "LIMIT 1")

    def run(self, logical_date: str, *conf: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        return run_dag(DAG_ID, logical_date, *conf, env={**self.env, **(env or {})}, cwd=ROOT, timeout=1200)

    def verify(self, default: bool) -> None:
        """The runs to come with the rolling verify as it ships (``default``), or with none."""
        if default:
            self.config.pop("verify", None)
        else:
            self.config["verify"] = {"slices": 0}
        self.config_path.write_text(yaml.safe_dump(self.config))

    def hive(self, names: list[str]) -> dict[str, tuple[dict, str]]:
        hive = self.config["hive"]
        read = read_hive_tables(hive["warehouse_dir"], hive["metastore_uri"], [f"{self.database}.{n}" for n in names])
        return {n: (hive_rows(read[f"{self.database}.{n}"][0], self.header(n).key), read[f"{self.database}.{n}"][1])
                for n in names}

    def header(self, name: str):
        return self.hook.raw_header(TableName(self.schema, name), DECLARED.get(name))

    def foreign(self) -> list[str]:
        """The parent and its child: not in ``tables``, whose changes are random."""
        return [PARENT, CHILD]

    def source(self, name: str) -> dict:
        return plain(source_rows(self.server, self.header(name)))

    def assert_equal(self, names: list[str], also: list[str] = ()) -> dict[str, tuple[dict, str]]:
        """Each of ``names`` equals its source; ``also``: tables read back in the same Spark application."""
        hive = self.hive([*names, *also])
        for name in names:
            assert hive[name][0] == self.source(name), f"{self.database}.{name} differs from {self.schema}.{name}"
        return hive


def table_task_names() -> list[str]:
    """The names the UI shows for the mapped per-table tasks of the latest run."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == DAG_ID).order_by(DagRun.id.desc()).first()
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run.run_id,
                                                 TaskInstance.task_id == "source.table").all()
        return [ti.rendered_map_index for ti in tis]


@pytest.mark.usefixtures("airflow_home")
def test_a_source_of_many_tables_by_pattern_through_several_runs(mariadb, capture_conn, tmp_path, metastore_service):
    source = Source(mariadb, capture_conn, tmp_path, metastore_service)
    since = mariadb.track_binlog_dumps()

    # 1. The first run loads every table the pattern matches by a snapshot, a few at a time; the table with no key
    #    and the child of the cascading key are reported as captured by a diff, the excluded one never looked at;
    #    no binlog is read. The table named before it exists is stopped, with why: the others load all the same,
    #    and the run fails, naming it.
    code, output = source.run("2026-08-01T00:00:00+00:00")
    assert code != 0, output[-8000:]
    assert f"{source.schema}.{KEYLESS} can be captured into {source.database}.{KEYLESS}: no key (each row identified by all its " \
           "values, equal rows counted), by a diff" in output
    assert f"{source.schema}.{CHILD} can be captured into {source.database}.{CHILD}: key id, by a diff with its last " \
           "version's row digests (capture: diff), since it is the child of a foreign key with a cascading action " \
           f"(`fk_child_parent` (parent_id) REFERENCES {source.schema}.{PARENT} (id) ON DELETE CASCADE)" in output
    late = f"{source.schema}.{LATE}"
    assert f"{late} → {source.database}.{LATE} failed in this run: check: The table {late} does not exist" in output
    first = outcomes(DAG_ID)
    names, texts = sorted(source.tables), [*sorted(source.charsets), KEYLESS, *source.foreign()]
    assert sorted(first) == sorted(f"{source.schema}.{n}" for n in [*names, *texts, LATE])
    stopped = first.pop(late)
    assert (stopped["mode"], stopped["status"], stopped["version"]) == ("nothing", "failed", None)
    assert {(o["mode"], o["status"], o["version"]) for o in first.values()} == {("snapshot", "committed", 1)}
    assert "tmp_scratch" not in output
    assert "No table has changes" not in output
    assert f"Merging {len(names) + len(texts)} tables in one Spark application" in output
    assert f"{source.schema}.lines can be captured into {source.database}.lines: key a, b (declared by `key:`" in output
    assert mariadb.binlog_dumps(since, source.user) == []
    source.assert_equal([*names, *texts])
    # The status: the missing table stopped with the check's reason; the child captured by diffs.
    code, rows, text = status(DAG_ID, source.database, max_lag="100d")
    assert code == 1 and {s for s, r in rows.items() if r["state"] == "stopped"} == {late}, text
    assert rows[late]["reason"] == stopped["error"] and "does not exist" in rows[late]["reason"], text
    assert rows[f"{source.schema}.{CHILD}"]["kind"]["capture"] == ["diff"]

    # 2. Changes on a random subset, and a table created between two runs: it is loaded by a snapshot in the
    #    run that finds it, while the others are read from the binlog, all in one pass.
    changed = sorted(source.rng.sample(names, 8))
    for name in changed:
        source.change(name)
    for charset in source.charsets.values():  # each character set's text through the binlog
        change_rows(mariadb, source.schema, charset)
    source.change_keyless()
    source.create("t99", 99, rows=5)
    source.create(LATE, 2, rows=3)
    # The parent's row deleted: the server deletes its child rows too, with no row event of theirs in the binlog.
    mariadb.execute(f"DELETE FROM {source.schema}.{PARENT} WHERE id = 1",
                    f"UPDATE {source.schema}.{CHILD} SET note = 'changed' WHERE id = 12")
    assert [row[0] for row in mariadb.execute(f"SELECT id FROM {source.schema}.{CHILD} ORDER BY id")] == [12, 13]
    since = mariadb.track_binlog_dumps()
    source.verify(True)
    code, output = source.run("2026-08-01T01:00:00+00:00")
    source.verify(False)
    assert code == 0, output[-8000:]
    second = outcomes(DAG_ID)
    assert second[f"{source.schema}.t99"]["mode"] == "snapshot"
    assert (second[late]["mode"], second[late]["status"]) == ("snapshot", "committed"), "found: loaded"
    child = second[f"{source.schema}.{CHILD}"]
    assert (child["mode"], child["status"], child["upserts"], child["deletes"]) == ("diff", "committed", 1, 2), child
    assert second[f"{source.schema}.{PARENT}"]["mode"] == "incremental"
    statuses = {name: second[f"{source.schema}.{name}"]["status"] for name in names}
    assert {n for n, s in statuses.items() if s == "committed"} == set(changed)
    assert {n for n, s in statuses.items() if s == "idle"} == set(names) - set(changed)
    assert {second[f"{source.schema}.{n}"]["status"] for n in texts} == {"committed"}
    assert second[f"{source.schema}.{KEYLESS}"]["mode"] == "diff"
    dumps = mariadb.binlog_dumps(since, source.user)
    assert len(dumps) == 1, f"one replication connection for the run, whatever the number of tables: {dumps}"
    assert sorted(table_task_names()) == sorted(f"{source.schema}.{n}" for n in [*changed, "t99", LATE, *texts]), \
        "a task per table the run wrote, named after it; none for an idle table"
    names = sorted(source.tables)
    hive = source.assert_equal([*names, *texts])
    idle = next(n for n in names if statuses.get(n) == "idle")
    assert hive[idle][1].endswith("/v000001"), "an idle table keeps its version"
    ledger_path = tmp_path / "work" / f"{source.database}.{idle}" / "ledger" / "committed.json"
    assert json.loads(ledger_path.read_text())["watermark"] == second[f"{source.schema}.{idle}"]["watermark"], \
        "its watermark advanced to the end of the range"
    assert not ledger_path.with_name("lock.json").exists(), "and its lock is released"
    # The rolling verify, on by default: a slice of every table, changed by the run or idle, each found equal to
    # the source; the table without a key cannot be summed by key ranges and says so.
    verified = {t["source"]: t for t in latest_xcoms(DAG_ID, key="verification")["source.verify"]["tables"]}
    assert sorted(verified) == sorted(second)
    assert {s: t["status"] for s, t in verified.items() if t["status"] != "clean"} == {
        f"{source.schema}.{KEYLESS}": "not_verified"}, verified
    assert {(t["slice"]["index"], t["slice"]["of"]) for t in verified.values() if t["status"] == "clean"} <= {
        (0, 24), (1, 24)}

    # 3. One table's column dropped (refused under strict), one given a value that is no text in its character
    #    set, another table dropped at the source: the others commit, the run fails naming the two failed tables,
    #    whose Hive tables are left as they were. Airflow here maps a task over at most 4 values: the 8 tables
    #    written or failed are dealt into 4 table tasks.
    changed = sorted(source.rng.sample([n for n in names if n not in ("t04", LAST)], 5))
    for name in [*changed, "t04"]:
        source.change(name)
    source.change_keyless()
    changed.append(KEYLESS)
    mariadb.execute(f"ALTER TABLE {source.schema}.t04 DROP COLUMN note", f"DROP TABLE {source.schema}.{LAST}")
    del source.tables[LAST]
    # cp1250 has no character at 0x81: the server stores the byte all the same (its SELECT shows '?'), and the
    # binlog path cannot read it as text. That table fails alone, in its extraction, like the refused one.
    mariadb.execute(f"INSERT INTO {source.schema}.cs_cp1250 (id, tx) VALUES (9, CONVERT(x'4181' USING cp1250))")
    before = hive["t04"]  # as the second run left it: the changes above are at the source only
    before_text = hive["cs_cp1250"]
    since = mariadb.track_binlog_dumps()
    code, output = source.run("2026-08-01T02:00:00+00:00", env={"AIRFLOW__CORE__MAX_MAP_LENGTH": "4"})
    assert code != 0
    assert f"{source.schema}.t04 → {source.database}.t04 failed in this run: extract: " in output and "dropped note" in output
    assert f"{source.schema}.cs_cp1250 → {source.database}.cs_cp1250 failed in this run: extract: The column tx of " \
           f"{source.schema}.cs_cp1250 holds a value that is not cp1250 text" in output
    tasks = [name.split(", ") for name in table_task_names()]
    assert len(tasks) == 4 and sorted(s for task in tasks for s in task) == sorted(
        f"{source.schema}.{n}" for n in [*changed, "t04", "cs_cp1250"]), tasks
    for name in changed:  # the table that shares its task with the refused one too
        assert not (tmp_path / "work" / f"{source.database}.{name}" / "ledger" / "lock.json").exists(), name
    assert f"The table {source.schema}.{LAST} is no longer at the source" in output and f"{source.database}.{LAST} is kept" in output
    third = outcomes(DAG_ID)
    assert f"{source.schema}.{LAST}" not in third
    assert {n for n in third if third[n]["status"] == "committed"} == {f"{source.schema}.{n}" for n in changed}
    assert len(mariadb.binlog_dumps(since, source.user)) == 1
    names = sorted(source.tables)
    hive = source.assert_equal([*(n for n in names if n != "t04"), KEYLESS], also=["t04", "cs_cp1250"])
    assert hive["t04"] == before, "the refused table is as it was"
    assert hive["cs_cp1250"] == before_text, "and so is the one with a value that is not text"

    # 4. The failed run cleared and run again: it redoes only what did not commit; the refused table fails again.
    code, output = source.run("2026-08-01T02:00:00+00:00")
    assert code != 0 and "dropped note" in output
    again = outcomes(DAG_ID)
    failing = {f"{source.schema}.t04", f"{source.schema}.cs_cp1250"}
    assert {s for s, o in again.items() if o["status"] == "failed"} == failing
    assert {o["status"] for s, o in again.items() if s not in failing} == {"nothing"}
    assert all("already committed by this run" in o["reason"] for s, o in again.items()
               if s.endswith(tuple(changed)))
    # The status: the refused tables stopped, each with its run's own message; the others current; the table with
    # no key captured by diffs, as one; exit 1.
    code, rows, text = status(DAG_ID, source.database, max_lag="100d")
    assert code == 1 and {s for s, r in rows.items() if r["state"] == "stopped"} == failing, text
    assert rows[f"{source.schema}.t04"]["reason"] == again[f"{source.schema}.t04"]["error"] and \
        "dropped note" in rows[f"{source.schema}.t04"]["reason"]
    assert "holds a value that is not cp1250 text" in rows[f"{source.schema}.cs_cp1250"]["reason"]
    for name in failing:
        # Its lock stays with the failed run, whose lease lasts minutes more: the run has ended, so the table is
        # not shown running (as the next run's plan would take the lock over at once).
        assert (tmp_path / "work" / f"{source.database}.{name.split('.')[1]}" / "ledger" / "lock.json").exists(), name
        assert rows[name]["running"] is None, rows[name]
    assert rows[f"{source.schema}.t04"]["rows"] == len(before[0]), "its version's rows, counted by the merge that made it"
    assert {r["state"] for s, r in rows.items() if s not in failing} == {"current"}, text
    assert rows[f"{source.schema}.{KEYLESS}"]["kind"]["capture"] == ["diff", "keyless"]
    assert text.index("stopped") < text.index("current"), "the stopped tables first"
