"""Partitioned Hive targets end to end: real `airflow dags test` runs, a real MariaDB, real Spark, a real metastore.

One table per kind of partition spec (a day, ranges of the key, buckets of the key, a column's value), each
given the same random inserts, updates, moves between partitions, key changes and deletes, some emptying a
partition. After every run each Hive table equals its source, and each row is in the partition its values say.
A run that changes one partition rewrites that one only. A changed spec is refused until a fresh snapshot.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from airflow_cdc_testing.hive import read_hive_tables

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import VERSION_FILE, VersionInfo
from airflow_cdc_provider.core.partitioning import PartitionSpec
from tests.e2e.test_pipeline import Pipeline
from tests.integration.capture_helpers import source_rows
from tests.integration.hive_helpers import apply_changes, changes_by_version, hive_rows, plain

SPECS = {
    "ev_day": "day(happened_at)",
    "ev_month": "month(happened_at) AS ym",
    "ev_trunc": "truncate(id, 100)",
    "ev_bucket": "bucket(id, 8) AS b",
    "ev_kind": "kind",
}
DDL = ("CREATE TABLE {s}.%s (id BIGINT NOT NULL PRIMARY KEY, kind VARCHAR(20) NULL, happened_at DATETIME(3) NULL,"
       " amount DECIMAL(10,2) NOT NULL, note VARCHAR(60) NULL)")
FILL = ("INSERT INTO {s}.%s SELECT seq, IF(seq %% 9 = 0, NULL, ELT(1 + seq %% 4, 'a', 'b', 'c', '')),"
        " IF(seq %% 13 = 0, NULL, '2026-11-01 00:00:00' + INTERVAL (seq %% 20) DAY + INTERVAL seq SECOND),"
        " seq / 10, CONCAT('row ', seq) FROM {s}.seq_1_to_1000")
# Each statement empties one partition of one of the tables (and deletes rows here and there in the others).
EMPTYING = [
    "DELETE FROM {s}.%s WHERE id BETWEEN 300 AND 399",  # truncate(id, 100): 300
    "DELETE FROM {s}.%s WHERE happened_at >= '2026-11-05' AND happened_at < '2026-11-06'",  # day: 2026-11-05
    "DELETE FROM {s}.%s WHERE kind = 'c'",  # kind: c
    "DELETE FROM {s}.%s WHERE MOD(CRC32(id), 8) = 3",  # bucket(id, 8): 3, as the server computes verify's rule
]


def random_changes(rng: random.Random, next_id: list[int], count: int) -> list[str]:
    """Statements (each with ``%s`` for the table) of every kind of change, moves between partitions included."""
    out = []
    for _ in range(count):
        choice, target = rng.random(), rng.randrange(1, next_id[0])
        if choice < 0.25:  # at the key's tail
            next_id[0] += 1
            kind = rng.choice(["'a'", "'b'", "'d'", "''", "NULL"])
            when = rng.choice(["NULL", f"'2026-11-{rng.randrange(1, 28):02d} 12:00:00.5'"])
            out.append(f"INSERT INTO {{s}}.%s VALUES ({next_id[0]}, {kind}, {when}, 1.50, 'new')")
        elif choice < 0.45:  # within the row's partition, whatever the spec
            out.append(f"UPDATE {{s}}.%s SET amount = amount + 1, note = CONCAT(IFNULL(note, ''), ',u') "
                       f"WHERE id = {target}")
        elif choice < 0.6:  # to another day, or to none and back
            when = rng.choice(["NULL", f"'2026-12-{rng.randrange(1, 28):02d} 08:30:00'"])
            out.append(f"UPDATE {{s}}.%s SET happened_at = {when} WHERE id = {target}")
        elif choice < 0.7:  # to another kind, the NULL partition ('' and NULL) included
            kind = rng.choice(["'a'", "'e'", "''", "NULL"])
            out.append(f"UPDATE {{s}}.%s SET kind = {kind} WHERE id = {target}")
        elif choice < 0.85:  # a key change: another range and bucket
            next_id[0] += 1
            out.append(f"UPDATE IGNORE {{s}}.%s SET id = {next_id[0]} WHERE id = {target}")
        else:
            out.append(f"DELETE FROM {{s}}.%s WHERE id = {target}")
    return out


# Tables whose changelog is checked after each run: the changes applied to what Hive held give what it holds.
# One lists net changes, the other every row event.
CHANGELOGS = {"ev_trunc": True, "ev_kind": {"mode": "all"}}


class Partitioned(Pipeline):
    def __init__(self, server, conn_id, tmp_path, metastore):
        super().__init__(server, conn_id, tmp_path, list(SPECS), metastore=metastore)
        for entry in self.config["tables"]:
            entry["partition_by"] = SPECS[entry["target"]]
            if entry["target"] in CHANGELOGS:
                entry["changelog"] = CHANGELOGS[entry["target"]]
        self.held: dict[str, tuple[int, dict]] = {}  # by table: the versions whose changes were applied, the rows
        self.config_path.write_text(yaml.safe_dump(self.config))
        self.sql(*(DDL % t for t in SPECS), *(FILL % t for t in SPECS))

    def everywhere(self, statements: list[str]) -> None:
        self.sql(*(s % t for s in statements for t in SPECS))

    def levelled(self, tables: list[str] | None = None) -> dict[str, dict]:
        """Each table's rows as Hive holds them (the partition column aside), checked against the source: the
        same rows, each in the partition its values give. Returns the partition values found, by table."""
        hive, tables = self.config["hive"], tables or list(SPECS)
        logs = [f"{t}_changelog" for t in tables if t in CHANGELOGS]
        read = read_hive_tables(hive["warehouse_dir"], hive["metastore_uri"],
                                [f"{hive['database']}.{t}" for t in [*tables, *logs]])
        found = {}
        for table in tables:
            text = next(e["partition_by"] for e in self.config["tables"] if e["target"] == table)
            header = self.hook.raw_header(TableName(self.schema, table))
            layout = PartitionSpec.parse(text).resolve(header.columns)
            rows, _ = read[f"{hive['database']}.{table}"]
            assert rows.column_names[-1] == layout.column, rows.column_names
            held = dict(zip((tuple(r) for r in zip(*(rows.column(k).to_pylist() for k in header.key))),
                            rows.column(layout.column).to_pylist()))
            source = source_rows(self.server, header)
            assert hive_rows(rows.drop_columns([layout.column]), header.key) == plain(source), f"{table} differs"
            expected = {key: layout.value(row[layout.source_column]) for key, row in source.items()}
            assert held == expected, f"rows of {table} in other partitions than their values give"
            found[table] = set(held.values())
            if table in CHANGELOGS:
                self.check_changelog(table, header, hive_rows(rows.drop_columns([layout.column]), header.key),
                                     read[f"{hive['database']}.{table}_changelog"][0])
        return found

    def check_changelog(self, table: str, header, now: dict, changelog) -> None:
        """The changes of the versions committed since the last look, applied to the rows Hive held then, give
        the rows it holds now; the table's first version's are all inserts."""
        seen, state = self.held.get(table, (0, {}))
        by_version = changes_by_version(changelog)
        columns = [name.lower() for name, _ in header.columns]
        key = tuple(k.lower() for k in header.key)
        every_event = CHANGELOGS[table] != True  # noqa: E712
        for version in sorted(v for v in by_version if v > seen):
            changes = by_version[version]
            # Every event of a version read from the binlog has its place; a snapshot's rows have none.
            every = every_event and all(c["_change_ordinal"] is not None for c in changes)
            assert not every_event or every or {c["_source_file"] for c in changes} == {None}, changes[:3]
            state = apply_changes(state, changes, key, columns, every_event=every)
        assert state == now, f"the changelog of {table} does not give its rows"
        self.held[table] = (max(by_version, default=seen), now)

    def version(self, table: str) -> VersionInfo:
        location = self.ledger(table).committed().location
        return VersionInfo.from_text((Path(location.removeprefix("file:")) / VERSION_FILE).read_text())


def files_of(location: str) -> list[tuple[str, int, int]]:
    """A partition directory's files: name, size and modification time (ns)."""
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                  for p in Path(location.removeprefix("file:")).iterdir())


@pytest.mark.usefixtures("airflow_home")
def test_each_partition_spec_keeps_hive_equal_rewrites_only_touched_partitions_and_refuses_a_changed_spec(
        mariadb, capture_conn, tmp_path, metastore_service):
    pipeline = Partitioned(mariadb, capture_conn, tmp_path, metastore_service)
    code, output = pipeline.run("2026-11-01T00:00:00+00:00")
    assert code == 0, output[-8000:]
    first = pipeline.levelled()
    assert None in first["ev_day"] and None in first["ev_kind"], "NULL dates and NULL or empty kinds: NULL partition"
    assert len(first["ev_trunc"]) == 11 and len(first["ev_bucket"]) == 8 and first["ev_month"] == {"2026-11", None}

    # Random changes of every kind, then deletes that each empty a partition of one table.
    rng, next_id = random.Random(28), [1000]
    pipeline.everywhere(random_changes(rng, next_id, 60) + EMPTYING)
    # And a VARCHAR lengthened and a DECIMAL widened: the decimal lands as another Hive type, so ev_month is loaded
    # anew in the run, every partition written with the new type in the one commit.
    pipeline.sql("ALTER TABLE {s}.ev_month MODIFY note VARCHAR(200) NULL, MODIFY amount DECIMAL(14,3) NOT NULL",
                 "UPDATE {s}.ev_month SET amount = amount + 0.001, note = REPEAT('n', 150) WHERE id = 2")
    code, output = pipeline.run("2026-11-01T01:00:00+00:00")
    assert code == 0, output[-8000:]
    found = pipeline.levelled()
    widened = pipeline.outcome("ev_month")
    assert (widened["mode"], widened["healed"]["reloaded"]) == ("snapshot", True), widened
    assert "amount (decimal(10,2) → decimal(14,3)) land as another Hive type" in widened["healed"]["why"], widened
    assert widened["rewritten_partitions"] == widened["partitions"] == len(found["ev_month"]), widened
    types = pipeline.hive_types(["ev_month"])["ev_month"]
    assert (types["amount"], types["note"]) == ("decimal128(14, 3)", "string"), types
    for table, emptied in (("ev_trunc", 300), ("ev_day", "2026-11-05"), ("ev_kind", "c"), ("ev_bucket", 3)):
        assert emptied in first[table] and emptied not in found[table], (table, emptied)
        # Still listed, over an empty directory: the commit that emptied it switched it with the others.
        listed = dict(pipeline.version(table).partitions)
        assert str(emptied) in listed and "/_empty/" in listed[str(emptied)], listed

    # A run that changes one row of ev_trunc rewrites its partition only: every other partition keeps its
    # location and its files. In the same run, ev_kind's spec has changed without a fresh snapshot: that table is
    # refused before its binlog is read, naming both layouts and the way on, and left as it was.
    before = dict(pipeline.version("ev_trunc").partitions)
    files_before = {value: files_of(location) for value, location in before.items()}
    kind_version = pipeline.ledger("ev_kind").committed().version
    pipeline.config["tables"][list(SPECS).index("ev_kind")]["partition_by"] = "bucket(id, 4)"
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    pipeline.sql("UPDATE {s}.ev_trunc SET amount = amount + 7 WHERE id BETWEEN 200 AND 299 ORDER BY id LIMIT 1")
    code, output = pipeline.run("2026-11-01T02:00:00+00:00")
    assert code != 0
    for part in (f"The Hive table {pipeline.database}.ev_kind is partitioned by kind AS kind_part, but its configuration now says "
                 "partitioned by bucket(id, 4) AS id_bucket", "fresh_snapshot=true"):
        assert part in output, (part, output[-6000:])
    assert pipeline.ledger("ev_kind").committed().version == kind_version
    pipeline.levelled(["ev_trunc"])
    after = dict(pipeline.version("ev_trunc").partitions)
    assert set(after) == set(before)
    assert {value for value in after if after[value] != before[value]} == {"200"}
    assert {value: files_of(location) for value, location in after.items() if value != "200"} == {
        value: files for value, files in files_before.items() if value != "200"}
    outcome = pipeline.outcome("ev_trunc")
    assert (outcome["partitions"], outcome["rewritten_partitions"], outcome["emptied_partitions"]) == (11, 1, 0)

    # The fresh snapshot lays ev_kind out anew, and reloads the others over their partitions. Its first try is
    # killed with ev_kind defined again under its staged name and the table dropped: the re-run renames the staged
    # table to it first, and completes (its changelog goes on from that version).
    code, output = pipeline.run("2026-11-01T03:00:00+00:00", json.dumps({"fresh_snapshot": True}),
                                env={"CDC_FAILPOINT": "merge.driver.redefined"})
    assert code != 0 and "failpoint merge.driver.redefined: killing process" in output, output[-6000:]
    code, output = pipeline.run("2026-11-01T03:00:00+00:00", json.dumps({"fresh_snapshot": True}))
    assert code == 0, output[-8000:]
    assert "was defined again by a job killed before its rename: renamed from its staged name" in output
    found = pipeline.levelled()
    assert found["ev_kind"] == {0, 1, 2, 3}
