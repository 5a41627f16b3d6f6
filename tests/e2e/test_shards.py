"""Shards into one Hive table, end to end: 8 shards over two schemas on each of two servers, through the example
DAG with one task group a server (two configurations), in real `dag.test` runs, real Spark and a real metastore.

One server's shards are read from its binlog, the other's by diffs. After every run the Hive table holds every
shard's rows, each with its server, schema and table, and equals the sources; each shard keeps its own ledger and
watermark, and a run's commits touch its own shards' partitions only.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import yaml
from airflow_cdc_testing.hive import read_hive_tables

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import Ledger
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.storage import WorkStore
from tests.conftest import ROOT
from tests.e2e.dag_run import run_dag
from tests.e2e.status import status
from tests.e2e.test_example_dag import latest_xcoms, outcomes
from tests.integration.capture_helpers import source_rows
from tests.integration.hive_helpers import hive_rows, plain

DAG_ID = "mysql_binlog_to_hive"
SHARD_COLUMNS = ("_source_server", "_source_schema", "_source_table")


class Group:
    """One server's shards: two schemas of two tables each, and its configuration."""

    def __init__(self, name: str, server, conn_id: str, tmp: Path, suffix: str, capture: str):
        self.name, self.server, self.hook = name, server, MySqlSourceHook(conn_id)
        self.schemas = [f"shard{n}_{suffix}" for n in (1, 2)]
        self.rng = random.Random(f"{name}-2026")
        self.tables = [TableName(schema, f"orders_{t}") for schema in self.schemas for t in (0, 1)]
        for schema in self.schemas:
            server.execute(f"CREATE DATABASE {schema}")
        for n, table in enumerate(self.tables):
            server.execute(f"CREATE TABLE {table.quoted} (id INT NOT NULL PRIMARY KEY, customer VARCHAR(20) NOT NULL, "
                           "amount DECIMAL(10,2) NULL, placed DATETIME(3) NULL)")
            # The same ids on every shard: a row is its shard's and its key's.
            server.execute(f"INSERT INTO {table.quoted} VALUES " + ", ".join(
                f"({i}, 'c{(i + n) % 4}', {i * 3}.5{n}, '2026-11-0{1 + i % 9} 08:00:00.25')" for i in range(1, 11)))
        self.config = {
            "source": {"mysql_conn_id": conn_id, "capture": capture},
            "work": {"dir": str(tmp / "work")},
            "hive": {"database": "ods", "warehouse_dir": str(tmp / "warehouse"), "metastore_uri": None},
            "spark": {"conn_id": "spark_shards"},
            "run": {"retries": 0, "schema_changes": "evolve"},
            "verify": {"slices": 0},  # verified whole in the run that asks; the slices are test_verify's
            "tables": [{"source": f"shard?_{suffix}.orders_*", "target": "orders", "shards": {"server": name}}],
        }
        self.path = tmp / f"{name}.yaml"
        self.path.write_text(yaml.safe_dump(self.config))

    def change(self) -> None:
        """A few random inserts, updates, deletes and key changes on every shard."""
        for table in self.tables:
            ids = [row[0] for row in self.server.execute(f"SELECT id FROM {table.quoted}")]
            top = max(ids)
            statements = []
            for _ in range(self.rng.randint(2, 5)):  # each on a row of its own: none undoes another
                op, victim = self.rng.choice(["insert", "update", "delete", "key"]), self.rng.choice(ids)
                if op == "insert":
                    top += 1
                    statements.append(f"INSERT INTO {table.quoted} VALUES ({top}, 'new', NULL, NULL)")
                    continue
                ids.remove(victim)
                statements.append({
                    "update": f"UPDATE {table.quoted} SET amount = amount + 1, placed = NULL WHERE id = {victim}",
                    "delete": f"DELETE FROM {table.quoted} WHERE id = {victim}",
                    "key": f"UPDATE {table.quoted} SET id = id + 1000 WHERE id = {victim}"}[op])
            self.server.execute("START TRANSACTION", *statements, "COMMIT")

    def rows(self) -> dict:
        """Every shard's rows, keyed by the shard's columns and the row's key, as the Hive table holds them."""
        found = {}
        for table in self.tables:
            header = self.hook.raw_header(table)
            for key, row in plain(source_rows(self.server, header)).items():
                shard = (self.name, table.schema, table.table)
                found[(*shard, *key)] = {**row, **dict(zip(SHARD_COLUMNS, shard))}
        return found


@pytest.mark.usefixtures("airflow_home")
def test_eight_shards_on_two_servers_into_one_hive_table(mariadb, start_server, make_user, tmp_path):
    suffix = os.urandom(2).hex()
    other = start_server()
    groups = [Group("east", mariadb, make_user(), tmp_path, suffix, "binlog"),
              Group("west", other, make_user(privileges=("SELECT",), server=other), tmp_path, suffix, "diff")]
    env = {**os.environ, "CDC_CONFIG": os.pathsep.join(str(g.path) for g in groups),
           "AIRFLOW_CONN_SPARK_SHARDS": json.dumps({"conn_type": "spark", "host": "local[2]"})}
    store = WorkStore()

    def run(date: str, *conf: str) -> tuple[int, str]:
        return run_dag(DAG_ID, date, *conf, env=env, cwd=ROOT, timeout=1200)

    def assert_equal():
        table, _ = read_hive_tables(str(tmp_path / "warehouse"), None, ["ods.orders"])["ods.orders"]
        assert [name for name in table.column_names[-3:]] == list(SHARD_COLUMNS), table.column_names
        expected = {}
        for group in groups:
            expected.update(group.rows())
        for row in expected.values():  # a column only some shards have is NULL in the others' rows
            for name in table.column_names:
                row.setdefault(name, None)
        assert hive_rows(table, [*SHARD_COLUMNS, "id"]) == expected
        return table

    def ledger(group: Group, table: TableName) -> Ledger:
        from airflow_cdc_provider.core.shards import Shard

        shard = Shard(server=group.name, source_schema=table.schema, source_table=table.table)
        return Ledger(TableDir(work_dir=str(tmp_path / "work"), hive_table="ods.orders", shard=shard.path), store)

    # 1. Every shard loaded by a snapshot, each group its own: one Hive table, partitioned by the shards.
    code, output = run("2026-11-20T00:00:00+00:00")
    assert code == 0, output[-8000:]
    for group in groups:
        assert f"{group.tables[0]} can be captured into ods.orders (the shard {group.name}.{group.tables[0]})" \
            in output
    loaded = [*outcomes(DAG_ID, "source").values(), *outcomes(DAG_ID, "source_2").values()]
    assert len(loaded) == 8 and {(o["mode"], o["status"]) for o in loaded} == {("snapshot", "committed")}
    assert_equal()

    # 2. Random changes on every shard, and on one shard a column added: the Hive table gains it (schema_changes:
    #    evolve), NULL in the others' rows; a shard appearing is picked up by a snapshot. Each group commits its
    #    own shards, from the binlog or by a diff, each shard a version of its own; verify checks each shard's
    #    version (its partition) against its source.
    for group in groups:
        group.change()
    east = groups[0]
    east.server.execute(f"ALTER TABLE {east.tables[0].quoted} ADD COLUMN channel VARCHAR(10) NULL",
                        f"UPDATE {east.tables[0].quoted} SET channel = 'web' WHERE id % 2 = 0")
    new = TableName(east.schemas[1], "orders_9")
    east.server.execute(f"CREATE TABLE {new.quoted} LIKE {east.tables[1].quoted}",
                        f"INSERT INTO {new.quoted} VALUES (1, 'late', 1.00, NULL)")
    code, output = run("2026-11-20T01:00:00+00:00", json.dumps({"verify": True}))
    assert code == 0, output[-8000:]
    changed = {(g.name, str(t)): o for g, task in zip(groups, ("source", "source_2"))
               for t, o in ((t, outcomes(DAG_ID, task)[str(t)]) for t in g.tables)}
    assert {(o["mode"], o["status"]) for (g, _), o in changed.items() if g == "east"} == {
        ("incremental", "committed")}, changed
    assert {(o["mode"], o["status"]) for (g, _), o in changed.items() if g == "west"} == {("diff", "committed")}
    assert None not in {ledger(groups[0], t).committed().watermark for t in groups[0].tables}
    assert all(ledger(groups[1], t).committed().digests for t in groups[1].tables)
    assert {ledger(g, t).committed().version for g in groups for t in g.tables} == {2}, \
        "a version a shard: each shard's commit is its own"
    for group in groups:  # and each ledger records its own shard's version, in its partition's directory
        for t in group.tables:
            assert f"/_source_server={group.name}/_source_schema={t.schema}/_source_table={t.table}/v000002" in \
                ledger(group, t).committed().location
    for group, task in ((groups[0], "source.verify"), (groups[1], "source_2.verify")):
        verified = {t["source"]: t for t in latest_xcoms(DAG_ID, key="verification")[task]["tables"]}
        assert sorted(verified) == sorted(str(t) for t in [*group.tables, *([new] if group is east else [])])
        assert {t["status"] for t in verified.values()} == {"clean"}, verified
    east.tables.append(new)
    assert outcomes(DAG_ID, "source")[str(new)]["mode"] == "snapshot"
    # The status: a row per shard (the servers' shards share their names: a row per group and source), each its own
    # version of the one Hive table, in its group, captured its group's way, verified clean.
    code, rows, text = status(DAG_ID, "ods", max_lag="100d", key=lambda r: (r["kind"]["group"], r["kind"]["source"]))
    assert code == 0 and sorted(rows) == sorted((task, str(t)) for g, task in zip(groups, ("source", "source_2"))
                                                for t in g.tables), text
    for group, task in zip(groups, ("source", "source_2")):
        for t in group.tables:
            row = rows[task, str(t)]
            assert (row["state"], row["kind"]["hive_table"], row["kind"]["group"], row["version"]) == (
                "current", "ods.orders", task, ledger(group, t).committed().version), row
            assert row["kind"]["capture"] == ["diff" if group is groups[1] else "binlog", "shard"], row
            assert ledger(group, t).table.shard == row["kind"]["shard"], row
            assert row["verify"]["status"] == "clean", row
    table = assert_equal()
    channels = {(r["_source_schema"], r["_source_table"], r["id"]): r["channel"] for r in table.to_pylist()
                if r["_source_server"] == "east"}
    assert {v for (s, t, _), v in channels.items() if (s, t) != (east.tables[0].schema, "orders_0")} == {None}
    assert "web" in {v for (s, t, _), v in channels.items() if (s, t) == (east.tables[0].schema, "orders_0")}
