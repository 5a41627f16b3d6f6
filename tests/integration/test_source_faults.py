"""Faults under the capture stages, against real servers: a binlog connection killed on the server, two readers
with one replica server id, the source restarted mid-snapshot and mid-extraction, a full work directory.

Each ends the same way: the stage either read everything or failed saying what happened; run again, it
completes, and snapshot plus changes equal the source.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from airflow_cdc_provider.core.errors import SourceConnectionLost, WorkDirFull
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.workdir import SNAPSHOT_PROGRESS_FILE as PROGRESS_FILE
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import extract, in_one_directory
from airflow_cdc_provider.stages.replay import replay
from airflow_cdc_provider.stages.snapshot import snapshot
from tests.conftest import conn_env
from tests.integration.capture_helpers import apply_changes, read_rows, source_rows
from tests.servers import start_server

DDL = "CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, grp INT NOT NULL, label VARCHAR(200) NOT NULL)"


def write_many(server, table: str, transactions: int, rows: int = 100, first: int = 0) -> None:
    """``transactions`` inserts of ``rows`` rows each, then an update and a delete in every tenth transaction."""
    conn = server.root_connection()
    try:
        with conn.cursor() as cursor:
            for n in range(transactions):
                base = first + n * rows
                cursor.execute(f"INSERT INTO {table} VALUES " + ",".join(
                    f"({base + i}, {n}, 'row {base + i} of transaction {n}')" for i in range(rows)))
                if n % 10 == 9:
                    cursor.execute(f"UPDATE {table} SET label = CONCAT(label, ' changed') WHERE grp = {n - 5}")
                    cursor.execute(f"DELETE FROM {table} WHERE grp = {n - 7} AND id % 3 = 0")
    finally:
        conn.close()


class Table:
    def __init__(self, server, conn_id: str, schema: str) -> None:
        self.server, self.hook = server, MySqlSourceHook(conn_id)
        self.name = TableName(schema, "events")
        server.execute(f"CREATE DATABASE IF NOT EXISTS {schema}", DDL.format(t=self.name.quoted))
        self.header = self.hook.raw_header(self.name)

    def extract(self, start, out: Path, **kwargs):
        return extract(self.hook, in_one_directory([self.header], out), start, self.hook.current_watermark(),
                       **kwargs).check()

    def equals_source(self, snapshot_files, raw_files, out: Path) -> None:
        replayed = replay(raw_files, out / "upsert.parquet", out / "delete.parquet")
        merged = apply_changes(self.header, read_rows(snapshot_files), read_rows([replayed.upsert_file]),
                               read_rows([replayed.delete_file]))
        assert merged == source_rows(self.server, self.header)


def in_thread(call):
    """Run ``call`` in a thread; returns the thread and a dict that gets ``result`` or ``error``."""
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def dump_threads(server, user: str) -> list[int]:
    return [row[0] for row in server.execute(
        f"SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump' AND USER = '{user}'")]


def test_the_binlog_connection_killed_on_the_server_mid_extraction_never_reads_short(mariadb, make_user, tmp_path):
    conn_id = make_user()
    user = json.loads(os.environ[conn_env(conn_id)])["login"]
    table = Table(mariadb, conn_id, f"kill_{os.urandom(2).hex()}")
    start = table.hook.current_watermark()
    write_many(mariadb, table.name.quoted, 2000)
    since = mariadb.track_binlog_dumps()
    thread, outcome = in_thread(lambda: table.extract(start, tmp_path / "raw"))
    kills = 0
    while thread.is_alive() and kills < 3:
        for thread_id in dump_threads(mariadb, user):
            if list((tmp_path / "raw").glob("*.tmp")):  # the reader is under way: its raw file is open
                try:
                    mariadb.execute(f"KILL {thread_id}")
                    kills += 1
                    time.sleep(0.3)
                except Exception:  # noqa: BLE001 - it ended between the two statements
                    pass
        time.sleep(0.01)
    thread.join()
    assert kills >= 1, "the reader ended before its connection could be killed"
    print(f"{kills} kills: {'refused: ' + str(outcome['error']) if 'error' in outcome else 'read on'}")
    if "error" in outcome:  # refused, saying so: then the task's retry reads the range again
        error = outcome["error"]
        assert isinstance(error, SourceConnectionLost), error
        assert "the task's retry reads it again" in str(error)
        result = table.extract(start, tmp_path / "raw-again")
    else:  # the reader went on from where it was, on a new connection
        result = outcome["result"]
        dumps = mariadb.binlog_dumps(since, user)
        assert len(dumps) >= 2 and dumps[1][0] >= dumps[0][0], dumps
    assert result.counts[str(table.name)]["I"] == 200_000
    table.equals_source([], result.files[str(table.name)], tmp_path)


def test_two_extractions_with_one_replica_server_id_at_once_never_read_short(mariadb, make_user, tmp_path):
    conn_id = make_user()
    table = Table(mariadb, conn_id, f"dup_{os.urandom(2).hex()}")
    start = table.hook.current_watermark()
    write_many(mariadb, table.name.quoted, 1000)
    runs = [in_thread(lambda n=n: table.extract(start, tmp_path / f"raw-{n}", replica_server_id=4242))
            for n in range(2)]
    for thread, _ in runs:
        thread.join()
    complete = 0
    print([repr(o.get("error")) if "error" in o else "complete" for _, o in runs])
    for _, outcome in runs:
        if "error" in outcome:
            assert isinstance(outcome["error"], SourceConnectionLost), outcome["error"]
            assert "the same replica server id 4242" in str(outcome["error"])
            continue
        result = outcome["result"]
        assert result.counts[str(table.name)]["I"] == 100_000, "a short read"
        table.equals_source([], result.files[str(table.name)], tmp_path)
        complete += 1
    assert complete >= 1


@pytest.fixture
def own_server(tmp_path, make_user):
    """A server of this test's own, to restart: (server, connection id)."""
    server = start_server(tmp_path / "server")
    try:
        yield server, make_user(server=server)
    finally:
        server.stop()


def test_the_source_restarted_mid_snapshot_and_mid_extraction(own_server, tmp_path):
    server, conn_id = own_server
    table = Table(server, conn_id, "shop")
    write_many(server, table.name.quoted, 300)

    # Mid-snapshot: the read fails saying so; run again, it goes on after its last finished chunk.
    out = tmp_path / "snapshot"
    thread, outcome = in_thread(lambda: snapshot(table.hook, table.header, out, chunk_rows=100))
    progress = out / PROGRESS_FILE
    while thread.is_alive() and not (progress.exists() and json.loads(progress.read_text())["chunks"] >= 3):
        time.sleep(0.005)
    server.restart()
    thread.join()
    assert isinstance(outcome.get("error"), SourceConnectionLost), outcome
    assert "while the snapshot of shop.events read chunk" in str(outcome["error"])
    assert "the server went away" in str(outcome["error"])
    done = snapshot(table.hook, table.header, out, chunk_rows=100)
    assert done.resumed_after_chunk >= 3

    # Mid-extraction, a crash (SIGKILL) this time: the range fails saying so, and reads whole once it is back.
    write_many(server, table.name.quoted, 1500, first=1_000_000)
    thread, outcome = in_thread(lambda: table.extract(done.watermark, tmp_path / "raw"))
    while thread.is_alive() and not list((tmp_path / "raw").glob("*.tmp")):
        time.sleep(0.002)
    server.restart(kill=True)
    thread.join()
    assert isinstance(outcome.get("error"), SourceConnectionLost), outcome
    assert "The binlog connection to" in str(outcome["error"]) and "reads it again" in str(outcome["error"])
    result = table.extract(done.watermark, tmp_path / "raw-again")
    table.equals_source(done.files, result.files[str(table.name)], tmp_path)


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 256 KiB, as a work directory's filesystem that fills up; ``grow()`` makes room."""
    mount = tmp_path / "work"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)

    class Disk:
        path = mount

        @staticmethod
        def grow(size: str) -> None:
            subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)

    try:
        yield Disk
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_work_directory_fails_clearly_and_the_run_again_completes_with_room(
        mariadb, capture_conn, small_disk, tmp_path):
    table = Table(mariadb, capture_conn, f"full_{os.urandom(2).hex()}")
    write_many(mariadb, table.name.quoted, 300)

    with pytest.raises(WorkDirFull, match=(f"The filesystem of the work directory {small_disk.path}.* is full: "
                                           "writing the snapshot of .* bytes are free there. Nothing was committed")):
        snapshot(table.hook, table.header, small_disk.path / "snapshot", chunk_rows=2000)
    small_disk.grow("64m")
    done = snapshot(table.hook, table.header, small_disk.path / "snapshot", chunk_rows=2000)

    write_many(mariadb, table.name.quoted, 300, first=1_000_000)
    result = table.extract(done.watermark, small_disk.path / "raw")
    # The replay's files do not fit beside the raw files: a ballast takes all but a little of the room.
    ballast = small_disk.path / "ballast"
    free = os.statvfs(small_disk.path).f_bavail * os.statvfs(small_disk.path).f_frsize
    with open(ballast, "wb") as f:
        f.truncate(0)
        f.write(b"\0" * (free - 32 * 1024))
    with pytest.raises(WorkDirFull, match="writing the replay of 1 raw files failed"):
        replay(result.files[str(table.name)], small_disk.path / "upsert.parquet", small_disk.path / "delete.parquet")
    assert not (small_disk.path / "upsert.parquet").exists(), "nothing handed on"
    ballast.unlink()
    table.equals_source(done.files, result.files[str(table.name)], small_disk.path)
