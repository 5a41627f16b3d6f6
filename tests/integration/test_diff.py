"""The diff mode's read against a real server: the changes it finds, applied to the version before, are the source;
the digests it keeps are those a new snapshot would read; and what the server ships follows the changes, not the
table."""

from __future__ import annotations

import os
import random
from collections import Counter

import pyarrow.parquet as pq

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.diff import diff_table
from airflow_cdc_provider.stages.snapshot import snapshot
from tests.integration.capture_helpers import apply_changes, read_rows, source_rows
from tests.integration.fidelity_helpers import CASES, COLUMNS, DDL, insert_cases, update_to_cases

ORDERS = ("CREATE TABLE {name} (region VARCHAR(8) NOT NULL, id INT NOT NULL, label VARCHAR(60) NULL, "
          "amount DECIMAL(12,3) NOT NULL, ratio DOUBLE NULL, at DATETIME(6) NULL, flags BIT(5) NULL, "
          "PRIMARY KEY (region, id), KEY (id))")


def _fill(server, table: str, rows: int) -> None:
    for start in range(0, rows, 5000):
        values = ", ".join(f"('{'eu' if i % 3 else 'us'}', {i}, 'order {i}', {i}.125, {i} / 7, "
                           f"'2026-01-01 00:00:00' + INTERVAL {i} SECOND, b'{i % 32:05b}')"
                           for i in range(start, min(rows, start + 5000)))
        server.execute(f"INSERT INTO {table} VALUES {values}")


def _change(server, table: str, rng: random.Random, ids: list[int], count: int) -> None:
    """``count`` random changes: inserts, updates (some by the least a type can tell), deletes, key changes."""
    statements = []
    for _ in range(count):
        op, victim = rng.random(), rng.choice(ids)
        if op < 0.25:
            new = max(ids) + 1
            ids.append(new)
            statements.append(f"INSERT INTO {table} VALUES ('eu', {new}, NULL, 1.5, NULL, NULL, NULL)")
        elif op < 0.7:
            change = rng.choice(["label = CONCAT(label, ' ')",  # a trailing space, which = would not see
                                 "amount = amount + 0.001", "ratio = ratio + ratio * 1e-15",
                                 "at = at + INTERVAL 1 MICROSECOND", "flags = flags ^ 1", "label = NULL"])
            statements.append(f"UPDATE {table} SET {change} WHERE id = {victim}")
        elif op < 0.9:
            statements.append(f"DELETE FROM {table} WHERE id = {victim}")
            ids.remove(victim)
        else:
            new = max(ids) + 1
            statements.append(f"UPDATE {table} SET id = {new} WHERE id = {victim}")
            ids.remove(victim)
            ids.append(new)
    server.execute("START TRANSACTION", *statements, "COMMIT")  # one commit: the statements are many


def _full_read_bytes(server, table: str) -> int:
    """What the server sends for a plain full read of the table, by its own session counter."""
    conn = server.root_connection()
    try:
        with conn.cursor() as cursor:
            cursor.execute("FLUSH STATUS")
            cursor.execute("SHOW SESSION STATUS LIKE 'Bytes_sent'")
            before = int(cursor.fetchall()[0][1])
            cursor.execute(f"SELECT * FROM {table}")
            cursor.fetchall()
            cursor.execute("SHOW SESSION STATUS LIKE 'Bytes_sent'")
            return int(cursor.fetchall()[0][1]) - before
    finally:
        conn.close()


def test_diff_runs_find_every_change_and_ship_about_the_changed_rows(mariadb, capture_conn, tmp_path):
    table = TableName(f"diff_{os.urandom(3).hex()}", "orders")
    mariadb.execute(f"CREATE DATABASE {table.schema}", ORDERS.format(name=table.quoted))
    rows = 40_000
    _fill(mariadb, table.quoted, rows)
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(table)
    first = snapshot(hook, header, tmp_path / "snap", chunk_rows=15_000, digests=tmp_path / "digests-0.parquet")
    assert first.chunks == 3 and first.digests_file and first.watermark is None, "a diff-mode table needs no binlog"
    version = {tuple(r[k] for k in header.key): r for r in read_rows(first.files)}
    digests = first.digests_file
    full_bytes = _full_read_bytes(mariadb, table.quoted)
    rng, ids = random.Random(30), list(range(rows))

    for run, count in enumerate([400, 40, 0, 4000]):
        _change(mariadb, table.quoted, rng, ids, count)
        result = diff_table(hook, header, digests, tmp_path / f"diff{run}")
        upserts, deletes = read_rows([result.upsert_file]), read_rows([result.delete_file])
        merged = apply_changes(header, list(version.values()), upserts, deletes)
        now = source_rows(mariadb, header)
        assert merged == now, f"run {run} ({count} changes)"
        assert result.rows == len(merged)
        # The rows that differ, and only them.
        assert sorted(tuple(r[k] for k in header.key) for r in deletes) == sorted(set(version) - set(now))
        assert sorted(tuple(r[k] for k in header.key) for r in upserts) == sorted(
            k for k, row in now.items() if version.get(k) != row)
        if not count:
            assert result.upserts == result.deletes == 0 and result.levels[0][2] == 0, result.levels
        # The digests kept are those of the table now: a new snapshot reads the same.
        again = snapshot(hook, header, tmp_path / f"check{run}", chunk_rows=50_000,
                         digests=tmp_path / f"check{run}.parquet")
        by_hash = [("_hash", "ascending")]
        assert pq.read_table(result.digests_file).sort_by(by_hash).equals(
            pq.read_table(again.digests_file).sort_by(by_hash))
        # Shipped, by the server's own count: the first level's sums (about 10 bytes a bucket of about 8 rows) and
        # about three rows' worth a changed row (its full read, its bucket's pairs), not the table (76 bytes a row).
        changed = result.upserts + result.deletes
        assert result.bytes_sent <= 2000 + 3 * rows // 2 + 250 * changed, (run, result.bytes_sent, changed,
                                                                            result.levels)
        version, digests = merged, result.digests_file
    assert full_bytes > 70 * rows


def test_a_diff_finds_a_change_of_every_type_and_reads_the_values_as_a_snapshot_does(mariadb, make_user, tmp_path):
    table = TableName(f"diff_{os.urandom(3).hex()}", "all_types")
    mariadb.execute(f"CREATE DATABASE {table.schema}", DDL.format(name=table.quoted))
    # A row of NULLs per case, read by a snapshot; then each is updated to its case: every row differs by its case's
    # values. And the cases again as rows of their own, then the cases' values updated onto the row before's:
    # changes from one awkward value to another.
    ids = [n + 1 for n in range(len(CASES))]
    mariadb.execute(*[f"INSERT INTO {table.quoted} (id) VALUES ({i})" for i in ids])
    insert_cases(mariadb, table.quoted, 101)
    hook = MySqlSourceHook(make_user())
    header = hook.raw_header(table)
    first = snapshot(hook, header, tmp_path / "snap", digests=tmp_path / "digests.parquet")
    update_to_cases(mariadb, table.quoted, 1)
    shifted = [f"UPDATE {table.quoted} AS a JOIN {table.quoted} AS b ON b.id = a.id + 1 SET "
               + ", ".join(f"a.`{c}` = b.`{c}`" for c, _ in COLUMNS) + f" WHERE a.id BETWEEN 101 AND {100 + len(CASES) - 1}"]
    mariadb.execute(*shifted)
    result = diff_table(hook, header, first.digests_file, tmp_path / "diff")
    assert result.deletes == 0
    upserts = read_rows([result.upsert_file])
    before = apply_changes(header, read_rows(first.files), [], [])
    merged = apply_changes(header, list(before.values()), upserts, [])
    now = apply_changes(header, read_rows(snapshot(hook, header, tmp_path / "fresh").files), [], [])
    assert merged == now, "the values a snapshot reads"
    # Exactly the rows that changed: each case's row (unless its case leaves every value NULL), and each shifted
    # row (unless two neighbouring cases hold the same values).
    assert sorted(r["id"] for r in upserts) == sorted(k[0] for k, row in now.items() if before[k] != row)
    assert result.upserts >= len(CASES) + len(CASES) // 2, result.upserts


def _multiset(rows: list[dict]) -> Counter:
    return Counter(tuple(sorted(r.items())) for r in rows)


def test_a_table_with_no_key_is_diffed_as_a_multiset_of_rows(mariadb, capture_conn, tmp_path):
    """Equal rows are one row counted: an UPDATE or a DELETE of one copy of two changes exactly one."""
    table = TableName(f"diff_{os.urandom(3).hex()}", "log")
    mariadb.execute(f"CREATE DATABASE {table.schema}",
                    f"CREATE TABLE {table.quoted} (at DATETIME(3) NULL, host VARCHAR(20) NULL, line TEXT NULL, "
                    "qty INT NULL, KEY (host))")
    for start in range(0, 3000, 1000):  # every row three times
        mariadb.execute(f"INSERT INTO {table.quoted} VALUES " + ", ".join(
            f"('2026-03-01 10:00:00' + INTERVAL {i} SECOND, 'h{i % 7}', 'line {i}', {i % 5})"
            for i in range(start // 3, start // 3 + 1000)))
    mariadb.execute(f"INSERT INTO {table.quoted} VALUES (NULL, NULL, NULL, NULL), (NULL, NULL, NULL, NULL), "
                    f"(NULL, 'NULL', NULL, NULL)")
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(table)
    assert header.key == () and header.identity == ("at", "host", "line", "qty")
    first = snapshot(hook, header, tmp_path / "snap", chunk_rows=500, digests=tmp_path / "digests-0.parquet")
    assert first.chunks == 1 and first.rows == 3003, "one statement: a table with no key has no order to chunk by"
    version = _multiset(read_rows(first.files))
    digests = first.digests_file
    rng = random.Random(31)
    for run in range(3):
        statements = []
        for _ in range(40):
            i = rng.randrange(1000)
            row = f"at = '2026-03-01 10:00:00' + INTERVAL {i} SECOND AND line = 'line {i}'"
            statements.append(rng.choice([
                f"UPDATE {table.quoted} SET qty = qty + 10 WHERE {row} LIMIT 1",  # one copy of several
                f"DELETE FROM {table.quoted} WHERE {row} LIMIT 1",
                f"DELETE FROM {table.quoted} WHERE {row}",  # every copy
                f"INSERT INTO {table.quoted} SELECT * FROM {table.quoted} WHERE {row} LIMIT 1",  # one copy more
                f"INSERT INTO {table.quoted} VALUES (NULL, 'NULL', NULL, NULL)"]))
        statements.append(f"DELETE FROM {table.quoted} WHERE host IS NULL LIMIT 1")  # one of the two NULL rows
        mariadb.execute("START TRANSACTION", *statements, "COMMIT")
        result = diff_table(hook, header, digests, tmp_path / f"diff{run}")
        upserts, deletes = read_rows([result.upsert_file]), read_rows([result.delete_file])
        # The merge's way: every row of an upserted or deleted identity goes, the upserts come in (all copies).
        touched = {tuple(sorted(r.items())) for r in [*upserts, *deletes]}
        merged = Counter({row: n for row, n in version.items() if row not in touched}) + _multiset(upserts)
        fresh = snapshot(hook, header, tmp_path / f"fresh{run}", digests=tmp_path / f"fresh{run}.parquet")
        now = _multiset(read_rows(fresh.files))
        assert merged == now, f"run {run}"
        assert (result.inserts, result.removed) == (sum((now - version).values()), sum((version - now).values()))
        assert result.changes["U"] == 0 and result.rows == sum(now.values())
        # Only the rows whose copies changed in number, and all of their copies.
        changed = {row for row in now.keys() | version.keys() if now[row] != version[row]}
        assert {tuple(sorted(r.items())) for r in upserts} == {row for row in changed if now[row]}
        assert _multiset(upserts) == Counter({row: now[row] for row in changed if now[row]})
        assert {tuple(sorted(r.items())) for r in deletes} == {row for row in changed if not now[row]}
        kept, again = pq.read_table(result.digests_file), pq.read_table(fresh.digests_file)
        assert kept.sort_by([("_hash", "ascending")]).equals(again.sort_by([("_hash", "ascending")])), \
            "the digests kept are a snapshot's: every column and each copy's hash"
        assert result.bytes_sent <= 2000 + 3 * 3003 // 2 + 250 * sum(now[r] + version[r] for r in changed)
        version, digests = now, result.digests_file


def test_a_heals_digest_reads_again_just_the_rows_an_added_column_gives_a_value(mariadb):
    """After an online schema change, a heal compares the columns the version and the source share, and reads
    again the rows whose added columns hold a value: none for a nullable column the tool copied as NULL, the
    rows a writer set since, and every row for a column added with a default that is not NULL (the version has
    none of those values)."""
    from airflow_cdc_provider.core.diff import heal_digest

    table = TableName(f"heal_digest_{os.urandom(3).hex()}", "items")
    shared = [("id", "int(11)"), ("label", "varchar(20)")]
    mariadb.execute(f"CREATE DATABASE {table.schema}",
                    f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, label VARCHAR(20) NULL)",
                    f"INSERT INTO {table.quoted} SELECT seq, CONCAT('item ', seq) FROM {table.schema}.seq_1_to_50")

    def digests(added: list[str]) -> dict[int, int]:
        return dict(mariadb.execute(f"SELECT id, {heal_digest(shared, added, True)} FROM {table.quoted}"))

    before = digests([])
    mariadb.execute(f"ALTER TABLE {table.quoted} ADD COLUMN note VARCHAR(10) NULL",
                    f"UPDATE {table.quoted} SET note = 'set' WHERE id IN (7, 8)")
    after = digests(["note"])
    assert sorted(i for i in before if before[i] != after[i]) == [7, 8]
    mariadb.execute(f"ALTER TABLE {table.quoted} ADD COLUMN channel VARCHAR(10) NOT NULL DEFAULT 'web'")
    defaulted = digests(["note", "channel"])
    assert all(before[i] != defaulted[i] for i in before), "every row holds a value the version does not have"
