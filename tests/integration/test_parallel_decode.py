"""A binlog pass that decodes its row events in decoder processes (``stages.decode_workers``) writes the same raw
files, byte for byte, as one that decodes them itself, and fails the same tables with the same messages: on a
range of many tables, transactions larger than a batch, binlog rotations, column changes and a table replaced."""

from __future__ import annotations

import filecmp
import os
from pathlib import Path

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.decode_workers import DecodeWorkers
from airflow_cdc_provider.stages.extract import extract, in_one_directory

TABLES = 8


def test_decoder_processes_write_the_same_raw_files_and_failures_as_one_process(mariadb, capture_conn, tmp_path,
                                                                                 monkeypatch):
    schema = f"decode_{os.urandom(3).hex()}"
    names = [TableName(schema, f"t{n}") for n in range(TABLES)]
    shared = [TableName(schema, name) for name in ("enums", "cp1250", "replaced")]
    enums, cp1250, replaced = shared
    mariadb.execute(
        f"CREATE DATABASE {schema}",
        *(f"CREATE TABLE {t.quoted} (id INT NOT NULL PRIMARY KEY, name VARCHAR(40) NULL, amount DECIMAL(14,3) NULL, "
          "at DATETIME(6) NULL, note TEXT NULL, flag TINYINT NULL)" for t in names),
        # The reader decodes this one's events (ENUM), in the pass itself, between the decoders' tables.
        f"CREATE TABLE {enums.quoted} (id INT NOT NULL PRIMARY KEY, state ENUM('new', 'paid') NULL, n INT NULL)",
        f"CREATE TABLE {cp1250.quoted} (id INT NOT NULL PRIMARY KEY, tx VARCHAR(20) CHARACTER SET cp1250 NULL)",
        f"CREATE TABLE {replaced.quoted} (id INT NOT NULL PRIMARY KEY, v INT NULL)")
    hook = MySqlSourceHook(capture_conn)
    headers = [hook.raw_header(t) for t in [*names, *shared]]
    start = hook.current_watermark()
    fill = (f"SELECT seq, CONCAT('row ', seq), seq / 7, '2026-01-01' + INTERVAL seq SECOND, "
            f"IF(seq MOD 3 = 0, NULL, REPEAT('é', seq MOD 50)), seq MOD 2 FROM {schema}.seq_1_to_")
    conn = mariadb.root_connection()
    with conn.cursor() as cursor:
        # One transaction over every table, larger than a decoder's batch (a megabyte of events).
        cursor.execute("BEGIN")
        for n, table in enumerate(names):
            cursor.execute(f"INSERT INTO {table.quoted} {fill}{3000 + 500 * n}")
            cursor.execute(f"INSERT INTO {enums.quoted} VALUES ({n}, 'new', {n})")
        cursor.execute("COMMIT")
    conn.close()
    statements = [f"INSERT INTO {replaced.quoted} VALUES (1, 1), (2, 2)"]
    for round_ in range(3):
        for n, table in enumerate(names):
            statements += [
                f"UPDATE {table.quoted} SET amount = amount + 1, name = CONCAT(name, '+') WHERE id MOD 5 = {round_}",
                f"DELETE FROM {table.quoted} WHERE id MOD 97 = {round_}",
                f"UPDATE {table.quoted} SET id = id + 100000 WHERE id = {10 + round_}",  # a key change
                f"UPDATE {enums.quoted} SET state = 'paid', n = n + 1 WHERE id = {n}",
            ]
        statements.append("FLUSH BINARY LOGS")  # a rotation between rounds
        if round_ == 1:
            statements += [f"ALTER TABLE {names[0].quoted} ADD COLUMN extra VARCHAR(10) NULL DEFAULT 'x'",
                           f"UPDATE {names[0].quoted} SET extra = 'y' WHERE id < 50",
                           f"TRUNCATE TABLE {replaced.quoted}",
                           f"INSERT INTO {replaced.quoted} VALUES (3, 3)"]
    # cp1250 has no character at 0x81: the table fails, the same way either way, at that value (not at the
    # change of its columns the pass meets before the decoder's answer).
    statements += [f"INSERT INTO {cp1250.quoted} VALUES (1, 'ok'), (2, CONVERT(x'4181' USING cp1250))",
                   f"INSERT INTO {cp1250.quoted} VALUES (3, 'after')",
                   f"ALTER TABLE {cp1250.quoted} ADD COLUMN z INT NULL",
                   f"INSERT INTO {cp1250.quoted} VALUES (4, 'later', 4)"]
    mariadb.execute(*statements)
    high = hook.current_watermark()
    assert high.sequence >= start.sequence + 3, "the range spans binlog rotations"
    definitions = [hook.raw_header(t) for t in [*names, *shared]]

    def run(decoders: int, out: Path):
        return extract(hook, in_one_directory(headers, out, definitions=definitions, schema_changes="evolve"), start, high, defaults=hook.added_column_defaults, charsets=hook.column_charsets, max_raw_bytes=300_000, decoders=decoders)

    alone = run(0, tmp_path / "alone")
    sent: list[str] = []
    add = DecodeWorkers.add
    monkeypatch.setattr(DecodeWorkers, "add", lambda self, *item: (sent.append(item[2]), add(self, *item))[1])
    beside = run(2, tmp_path / "beside")
    # The decoders had most events; the ENUM table's the pass decoded itself.
    assert 0.8 * beside.events < len(sent) < beside.events, (len(sent), beside.events)
    assert {t: str(e) for t, e in beside.failed.items()} == {t: str(e) for t, e in alone.failed.items()}
    assert set(alone.failed) == {str(cp1250), str(replaced)}, alone.failed
    assert "holds a value that is not cp1250 text" in str(alone.failed[str(cp1250)])
    assert "TRUNCATE" in str(alone.failed[str(replaced)])
    assert beside.events == alone.events and beside.counts == alone.counts
    assert beside.headers == alone.headers and beside.schema_changes == alone.schema_changes
    assert len(alone.schema_changes[str(names[0])]) == 1, "the added column: a new header mid-range"
    for table in alone.files:
        ours, theirs = alone.files[table], beside.files[table]
        assert [Path(f).name for f in ours] == [Path(f).name for f in theirs]
        for a, b in zip(ours, theirs):
            assert filecmp.cmp(a, b, shallow=False), f"{table}: {b} differs from {a}"
    assert sum(len(f) for f in alone.files.values()) > 2 * len(alone.files), "raw files rotated by size"
    assert sum(c["I"] for c in alone.counts.values()) > 20_000
    assert not list((tmp_path / "beside").rglob("*.tmp")) and not list((tmp_path / "beside").rglob(f"*{cp1250}*"))
