"""Snapshot, extraction and replay against a real server: the result equals the source exactly."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from airflow_cdc_provider.core.errors import DuplicateKey
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.workdir import SNAPSHOT_PROGRESS_FILE as PROGRESS_FILE
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import extract, in_one_directory
from airflow_cdc_provider.stages.replay import replay
from airflow_cdc_provider.stages.snapshot import snapshot
from tests.conftest import ROOT
from tests.integration.capture_helpers import apply_changes, capture_after, read_rows, source_rows

ITEMS_DDL = (
    "CREATE TABLE {name} (region CHAR(2) NOT NULL, id INT NOT NULL, label VARCHAR(200) NULL,"
    " price DECIMAL(12,3) NOT NULL, seen_at TIMESTAMP(6) NULL, payload BLOB NULL, PRIMARY KEY (region, id))"
)


def fill(server, name: str, rows: int) -> None:
    values = ",".join(
        f"('{'eu' if i % 2 else 'us'}', {i}, 'item {i}, \"quoted\"\\nline', {i}.125, '2024-03-01 10:00:00.5', X'00{i % 256:02x}')"
        for i in range(rows)
    )
    server.execute(f"INSERT INTO {name} VALUES {values}")


@pytest.fixture
def items(mariadb, request):
    schema = f"cap_{request.node.name[:20].replace('[', '_').replace(']', '')}_{os.urandom(2).hex()}"
    mariadb.execute(f"CREATE DATABASE {schema}", ITEMS_DDL.format(name=f"{schema}.items"))
    yield TableName(schema, "items")
    mariadb.execute(f"DROP DATABASE {schema}")


def random_change(server, table: TableName, rng: random.Random, next_id: list[int]) -> None:
    choice = rng.random()
    region = rng.choice(["eu", "us"])
    target = rng.randrange(next_id[0])
    if choice < 0.3:
        next_id[0] += 1
        server.execute(f"INSERT INTO {table.quoted} VALUES ('{region}', {next_id[0]}, 'new\\t{next_id[0]}', 1.5, NOW(6), NULL)")
    elif choice < 0.6:
        server.execute(f"UPDATE {table.quoted} SET label = CONCAT(label, ',u'), price = price + 1 WHERE id = {target}")
    elif choice < 0.8:
        server.execute(f"DELETE FROM {table.quoted} WHERE id = {target}")
    elif choice < 0.9:  # a key change
        next_id[0] += 1
        server.execute(f"UPDATE IGNORE {table.quoted} SET id = {next_id[0]} WHERE id = {target}")
    else:  # a delete, then the same key again
        server.execute(f"DELETE FROM {table.quoted} WHERE id = {target}",
                       f"INSERT IGNORE INTO {table.quoted} VALUES ('{region}', {target}, 'again', 2.25, NULL, X'')")


def test_snapshot_during_writes_then_extract_and_replay_equals_source(mariadb, items, capture_conn, tmp_path):
    # A key column whose name holds a placeholder: each chunk's read runs with the last key as its arguments.
    mariadb.execute(f"ALTER TABLE {items.quoted} RENAME COLUMN region TO `re%sgion`")
    # Enough chunks that the snapshot outlasts many writes, however fast the machine.
    fill(mariadb, items.quoted, 12000)
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(items)
    stop, during = threading.Event(), []
    rng, next_id = random.Random(5), [12000]

    def writer():
        while not stop.is_set():
            random_change(mariadb, items, rng, next_id)
            during.append(time.monotonic())

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.2)
        began = time.monotonic()
        snap = snapshot(hook, header, tmp_path / "snap", chunk_rows=100)
        ended = time.monotonic()
        time.sleep(0.2)
    finally:
        stop.set()
        thread.join()
    assert sum(began <= t <= ended for t in during) >= 10, "the writer must have changed rows during the snapshot"
    assert snap.chunks > 20
    result, replayed = capture_after(hook, header, snap.watermark, tmp_path)
    counts = result.counts[header.table]
    assert counts["I"] and counts["U"] and counts["D"]
    merged = apply_changes(header, read_rows(snap.files), read_rows([replayed.upsert_file]),
                           read_rows([replayed.delete_file]))
    assert merged == source_rows(mariadb, header)


def test_a_declared_key_is_checked_unique_before_the_snapshot_reads_and_then_read_in_its_order(
        mariadb, items, capture_conn, tmp_path):
    # The table's own key dropped: `key:` declares (id, re%sgion), a placeholder in a name again, over an index
    # that is not unique.
    mariadb.execute(f"ALTER TABLE {items.quoted} RENAME COLUMN region TO `re%sgion`",
                    f"ALTER TABLE {items.quoted} DROP PRIMARY KEY, ADD INDEX ix (id)")
    fill(mariadb, items.quoted, 300)
    mariadb.execute(f"INSERT INTO {items.quoted} VALUES ('eu', 7, 'twin', 1.5, NULL, NULL)",  # row 7 is eu's
                    f"INSERT INTO {items.quoted} VALUES ('us', 7, 'other region', 1.5, NULL, NULL)")
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(items, ["id", "re%sgion"])
    assert header.key == ("id", "re%sgion")
    with pytest.raises(DuplicateKey, match=r"The key that `key:` declares for cap_\w+\.items \(id, re%sgion\) is not "
                                            r"unique at the source: 2 rows hold id = 7, re%sgion = 'eu'\. Nothing of "
                                            r"the table was read"):
        snapshot(hook, header, tmp_path / "snap", chunk_rows=40, key_declared=True)
    assert not (tmp_path / "snap" / PROGRESS_FILE).exists(), "no watermark taken, nothing to resume"

    mariadb.execute(f"DELETE FROM {items.quoted} WHERE label = 'twin'")
    snap = snapshot(hook, header, tmp_path / "snap", chunk_rows=40, key_declared=True)
    rows = read_rows(snap.files)
    assert snap.chunks == 8 and len(rows) == snap.rows == 301, "every row once, across the chunks' edges"
    assert apply_changes(header, rows, [], []) == source_rows(mariadb, header)


def test_killed_snapshot_resumes_after_its_last_finished_chunk(mariadb, items, capture_conn, tmp_path):
    fill(mariadb, items.quoted, 20000)
    out = tmp_path / "snap"
    script = (
        "import sys; from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook;"
        "from airflow_cdc_provider.core.identifiers import TableName;"
        "from airflow_cdc_provider.stages.snapshot import snapshot;"
        f"hook = MySqlSourceHook({capture_conn!r}); t = TableName({items.schema!r}, 'items');"
        f"snapshot(hook, hook.raw_header(t), {str(out)!r}, chunk_rows=50)"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    progress = out / PROGRESS_FILE
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if progress.exists() and json.loads(progress.read_text())["chunks"] >= 5:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = json.loads(progress.read_text())
    assert 5 <= killed_at["chunks"] < 400 and not killed_at["done"], "killed before its end"
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(items)
    resumed = snapshot(hook, header, out, chunk_rows=50)
    assert resumed.resumed_after_chunk == killed_at["chunks"]
    assert resumed.watermark.to_xcom() == killed_at["watermark"]
    rows = read_rows(resumed.files)
    assert len(rows) == 20000 == resumed.rows
    assert {tuple(r[k] for k in header.key): r for r in rows} == source_rows(mariadb, header)


def test_transaction_bigger_than_max_binlog_size_across_rotation(mariadb, items, capture_conn, tmp_path):
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(items)
    start = hook.current_watermark()
    big = "'" + "x" * 180 + "'"
    conn = mariadb.root_connection()
    with conn.cursor() as cursor:
        cursor.execute("BEGIN")
        for base in range(0, 12000, 1000):
            cursor.execute(f"INSERT INTO {items.quoted} VALUES " + ",".join(
                f"('eu', {i}, {big}, 1, NULL, NULL)" for i in range(base, base + 1000)))
        cursor.execute("COMMIT")
    conn.close()
    mariadb.execute(f"UPDATE {items.quoted} SET label = 'after the big one' WHERE id < 10")
    result, replayed = capture_after(hook, header, start, tmp_path)
    assert result.end.sequence >= start.sequence + 1, "the big transaction must have rotated the binlog"
    assert result.counts[header.table] == {"I": 12000, "U": 10, "D": 0}
    assert replayed.upserts == 12000
    merged = apply_changes(header, [], read_rows([replayed.upsert_file]), read_rows([replayed.delete_file]))
    assert merged == source_rows(mariadb, header)


def test_interleaved_tables_and_a_same_named_table_elsewhere(mariadb, items, capture_conn, tmp_path):
    other = TableName(items.schema, "other")
    decoy_schema = items.schema + "_decoy"
    mariadb.execute(
        f"CREATE TABLE {other.quoted} (code VARCHAR(10) NOT NULL PRIMARY KEY, n INT)",
        f"CREATE DATABASE {decoy_schema}", ITEMS_DDL.format(name=f"`{decoy_schema}`.items"),
    )
    try:
        hook = MySqlSourceHook(capture_conn)
        headers = [hook.raw_header(items), hook.raw_header(other)]
        start = hook.current_watermark()
        for i in range(50):
            mariadb.execute(
                "BEGIN",
                f"INSERT INTO {items.quoted} VALUES ('us', {i}, 'i', 1, NULL, NULL)",
                f"INSERT INTO `{decoy_schema}`.items VALUES ('us', {i}, 'decoy', 1, NULL, NULL)",
                f"INSERT INTO {other.quoted} VALUES ('c{i}', {i})",
                f"UPDATE {other.quoted} SET code = 'k{i}' WHERE code = 'c{i}'" if i % 10 == 0 else "DO 0",
                "COMMIT",
            )
        high = hook.current_watermark()
        result = extract(hook, in_one_directory(headers, tmp_path / "raw"), start, high)
        assert result.counts[str(items)] == {"I": 50, "U": 0, "D": 0}
        assert result.counts[str(other)] == {"I": 50, "U": 5, "D": 5}  # key changes: D(old) + U(new)
        for header in headers:
            rep = replay(result.files[header.table], tmp_path / f"{header.table}.u", tmp_path / f"{header.table}.d")
            merged = apply_changes(header, [], read_rows([rep.upsert_file]), read_rows([rep.delete_file]))
            assert merged == source_rows(mariadb, header)
    finally:
        mariadb.execute(f"DROP DATABASE `{decoy_schema}`")


def test_extraction_stops_at_the_high_watermark_and_ranges_chain(mariadb, items, capture_conn, tmp_path):
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(items)
    start = hook.current_watermark()
    mariadb.execute(f"INSERT INTO {items.quoted} VALUES ('eu', 1, 'one', 1, NULL, NULL)")
    high = hook.current_watermark()
    mariadb.execute(f"INSERT INTO {items.quoted} VALUES ('eu', 2, 'two', 2, NULL, NULL)")
    began = time.monotonic()
    first = extract(hook, in_one_directory([header], tmp_path / "r1"), start, high)
    assert time.monotonic() - began < 10
    assert first.end == high and first.counts[header.table]["I"] == 1
    second_high = hook.current_watermark()
    second = extract(hook, in_one_directory([header], tmp_path / "r2"), first.end, second_high)
    assert second.counts[header.table]["I"] == 1
    empty = extract(hook, in_one_directory([header], tmp_path / "r3"), second_high, second_high)
    assert empty.counts[header.table] == {"I": 0, "U": 0, "D": 0} and empty.end == second_high
    rep = replay(first.files[header.table] + second.files[header.table] + empty.files[header.table],
                 tmp_path / "u", tmp_path / "d")
    assert sorted(r["id"] for r in read_rows([rep.upsert_file])) == [1, 2]


def test_range_ending_on_events_the_reader_does_not_yield(mariadb, items, capture_conn, tmp_path):
    # A fresh binlog file starts with events that are never yielded (format description, GTID list,
    # checkpoints): a high watermark among them must still count as reached.
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(items)
    start = hook.current_watermark()
    mariadb.execute(f"INSERT INTO {items.quoted} VALUES ('eu', 7, 'seven', 7, NULL, NULL)", "FLUSH BINARY LOGS")
    high = hook.current_watermark()
    assert high.sequence == start.sequence + 1
    result = extract(hook, in_one_directory([header], tmp_path / "raw"), start, high)
    assert result.end == high and result.counts[header.table]["I"] == 1


def _next_whole_second() -> dt.datetime:
    now = dt.datetime.now(dt.UTC)
    return (now + dt.timedelta(seconds=1)).replace(microsecond=0)


def _sleep_until(moment: dt.datetime) -> None:
    time.sleep(max(0.0, (moment - dt.datetime.now(dt.UTC)).total_seconds()) + 0.05)


@pytest.mark.parametrize("rotate", [False, True])
def test_stop_before_ends_the_range_before_the_first_transaction_from_that_moment(
    mariadb, items, capture_conn, tmp_path, rotate
):
    # A scheduled run reflects its data interval end: transactions that began before it, none after.
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(items)
    start = hook.current_watermark()
    mariadb.execute(f"INSERT INTO {items.quoted} VALUES ('eu', 1, 'before', 1, NULL, NULL)",
                    "CREATE TABLE IF NOT EXISTS shop.cut_other (a INT PRIMARY KEY)",
                    "INSERT INTO shop.cut_other VALUES (1) ON DUPLICATE KEY UPDATE a = a")
    if rotate:
        mariadb.execute("FLUSH BINARY LOGS")
    boundary = hook.current_watermark()
    cut = _next_whole_second()
    _sleep_until(cut)
    mariadb.execute(f"UPDATE {items.quoted} SET label = 'after' WHERE id = 1",
                    f"INSERT INTO {items.quoted} VALUES ('eu', 2, 'after', 2, NULL, NULL)")
    high = hook.current_watermark()
    first = extract(hook, in_one_directory([header], tmp_path / "r1"), start, high, stop_before=cut)
    assert first.counts[header.table] == {"I": 1, "U": 0, "D": 0}
    assert first.end.coordinate <= boundary.coordinate if not rotate else first.end.coordinate == (boundary.sequence, 4)
    assert first.end.gtid is None  # looked up by the caller
    second = extract(hook, in_one_directory([header], tmp_path / "r2"), first.end, high)
    assert second.end == high and second.counts[header.table] == {"I": 1, "U": 1, "D": 0}
    none_yet = extract(hook, in_one_directory([header], tmp_path / "r3"), start, high, stop_before=cut - dt.timedelta(hours=1))
    assert none_yet.end.coordinate == start.coordinate and none_yet.counts[header.table]["I"] == 0
    all_ = extract(hook, in_one_directory([header], tmp_path / "r4"), start, high, stop_before=cut + dt.timedelta(hours=1))
    assert all_.end == high and all_.counts[header.table] == {"I": 2, "U": 1, "D": 0}


MB = 1024 * 1024


def test_a_200_mb_row_is_captured_by_the_snapshot_and_the_binlog_in_bounded_memory(start_server, make_user, tmp_path):
    # A server of its own: a row this size needs max_allowed_packet above it, and its 600 MB of binlog stay out of
    # the session's server.
    server = start_server(max_allowed_packet=1 << 30)
    conn_id = make_user(server=server)
    # Each value made by the server (a SHA-512 hex digest repeated): the test process never holds one.
    def value(seed: str, size: int) -> str:
        return f"REPEAT(SHA2(CONCAT('{seed}', id), 512), {size // 128})"

    server.execute(
        "CREATE DATABASE big", "CREATE TABLE big.docs (id INT PRIMARY KEY, body LONGBLOB)",
        *(f"INSERT INTO big.docs SELECT id, {value('doc', 8 * MB if i < 5 else 200 * MB)} FROM (SELECT {i} AS id) AS one"
          for i in range(1, 6)))
    expected = {str(i): [length, digest] for i, length, digest in
                server.execute("SELECT id, LENGTH(body), SHA2(body, 256) FROM big.docs")}
    update = f"UPDATE big.docs SET body = CONCAT({value('new', 200 * MB)}, 'end') WHERE id = 5"
    args = {"conn": conn_id, "table": "big.docs", "out": str(tmp_path), "socket": str(server.socket_path),
            "update": update, "read_buffer": 16 * MB}
    done = subprocess.run([sys.executable, "-m", "tests.integration.large_row_capture", json.dumps(args)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-5000:]
    report = json.loads(done.stdout.splitlines()[-1])
    # The snapshot holds 16 MB of rows at a time: two rows of 8 MB a batch, the 200 MB row alone.
    assert report["row_groups"] == [2, 2, 1]
    assert report["snapshot"] == expected
    ((length, digest),) = server.execute("SELECT LENGTH(body), SHA2(body, 256) FROM big.docs WHERE id = 5")
    assert report["counts"] == {"I": 0, "U": 1, "D": 0}
    assert report["upserts"] == {"5": [length, digest]} and length == 200 * MB + 3
    peaks, row = report["peaks"], 200 * MB
    print(f"peak memory above the process's size before each stage, in MB: "
          f"{ {stage: round(peak / MB) for stage, peak in peaks.items()} }; seconds {report['seconds']}; largest "
          f"size {report['max_rss'] // MB} MB")
    # Measured here: 4.0, 6.4 and 5.5 times the row. The snapshot holds the row as PyMySQL reads it (its packet
    # and a copy), the value, its Arrow copy and the Parquet page. The update's binlog event carries the row twice
    # (before and after), PyMySQL reads it into a buffer and copies it, the reader decodes both images, and the
    # raw line is base64, a third larger. Replay holds the line, its text, the base64 value and the bytes.
    # Holding 10,000 rows a fetch, Parquet statistics of the value, or copies per block were gigabytes more.
    assert peaks["snapshot"] < 5 * row, peaks
    assert peaks["extract"] < 7.5 * row, peaks
    assert peaks["replay"] < 6.5 * row, peaks
