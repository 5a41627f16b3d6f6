"""A snapshot read on several connections at once, in key ranges (``stages.snapshot``, ``core.key_ranges``): the
same rows as the source, through a kill of the task and of a reader process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.workdir import SNAPSHOT_PROGRESS_FILE as PROGRESS_FILE
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.hooks.reader_processes import ReaderDied
from airflow_cdc_provider.stages.snapshot import snapshot
from tests.conftest import ROOT
from tests.integration.capture_helpers import read_rows, source_rows

ROWS = 12_000


@pytest.fixture
def lines(mariadb):
    """A table keyed by (order_no, line_no), order_no an integer: a few orders far below and far above the rest,
    so that the ranges cut from MIN and MAX are uneven, and gaps."""
    schema = f"par_{os.urandom(3).hex()}"
    table = TableName(schema, "lines")
    mariadb.execute(
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {table.quoted} (order_no BIGINT NOT NULL, line_no INT NOT NULL, label VARCHAR(60) NULL, "
        "amount DECIMAL(12,3) NULL, at DATETIME(6) NULL, payload BLOB NULL, PRIMARY KEY (order_no, line_no))",
        f"INSERT INTO {table.quoted} SELECT (seq DIV 3) * 7, seq MOD 3, CONCAT('line ', seq), seq / 8, "
        f"'2026-01-01' + INTERVAL seq SECOND, IF(seq MOD 5 = 0, NULL, UNHEX(HEX(seq))) FROM {schema}.seq_1_to_{ROWS - 4}",
        f"INSERT INTO {table.quoted} VALUES (-9000000000, 1, 'far below', 1, NULL, X''), "
        "(-5, 2, 'below', NULL, NULL, NULL), (9000000000, 1, 'far above', 2, NULL, NULL), "
        "(9000000000, 2, 'far above', 3, NULL, NULL)")
    yield table
    mariadb.execute(f"DROP DATABASE {schema}")


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_snapshot_read_in_key_ranges_on_three_connections_survives_a_kill_and_equals_the_source(
        mariadb, lines, capture_conn, tmp_path):
    out = tmp_path / "snap"
    script = (
        "from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook;"
        "from airflow_cdc_provider.core.identifiers import TableName;"
        "from airflow_cdc_provider.stages.snapshot import snapshot;"
        f"hook = MySqlSourceHook({capture_conn!r}); t = TableName({lines.schema!r}, 'lines');"
        f"snapshot(hook, hook.raw_header(t), {str(out)!r}, chunk_rows=200, readers=3)"
    )
    task = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    progress = out / PROGRESS_FILE
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if progress.exists() and json.loads(progress.read_text())["chunks"] >= 8:
            break
        time.sleep(0.005)
    readers = _children(task.pid)
    task.send_signal(signal.SIGKILL)
    task.wait()
    killed_at = json.loads(progress.read_text())
    assert 8 <= killed_at["chunks"] and not killed_at["done"], "killed before its end"
    assert len(readers) == 2, "two reader processes beside the task's own reader"
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in readers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in readers), "the readers die with the task: none writes under its retry"
    # 12 ranges (4 per reader), the first open below, the last open above; several read in part.
    ranges = killed_at["ranges"]
    assert len(ranges) == 12 and ranges[0]["range"]["low"] is None and ranges[-1]["range"]["high"] is None
    assert sum(r["chunks"] > 0 for r in ranges) >= 3, "the readers read ranges at the same time"

    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(lines)
    resumed = snapshot(hook, header, out, chunk_rows=200, readers=3)
    assert resumed.resumed_after_chunk == killed_at["chunks"]
    assert resumed.watermark.to_xcom() == killed_at["watermark"], "one watermark, taken before any read"
    rows = read_rows(resumed.files)
    assert len(rows) == ROWS == resumed.rows, "no row twice, none lost"
    assert {tuple(r[k] for k in header.key): r for r in rows} == source_rows(mariadb, header)
    assert all(Path(f).name.startswith("snapshot-r") for f in resumed.files)
    assert not list(out.glob("*.tmp")), "a chunk the kill cut short was read again, not kept"
    done = json.loads(progress.read_text())
    assert done["done"] and all(r["done"] for r in done["ranges"])

    # One reader asked for: the table in one range, as before (keyset chunks, no process).
    single = snapshot(hook, header, tmp_path / "single", chunk_rows=5000, readers=1)
    assert json.loads((tmp_path / "single" / PROGRESS_FILE).read_text())["ranges"] == []
    by_key = {tuple(r[k] for k in header.key): r for r in rows}
    assert {tuple(r[k] for k in header.key): r for r in read_rows(single.files)} == by_key
    # The Parquet files have the single read's schema.
    assert pq.read_schema(single.files[0]) == pq.read_schema(resumed.files[0])


def test_a_reader_process_gets_the_login_by_pipe_and_its_death_or_error_fails_the_read(mariadb, lines, capture_conn,
                                                                                    tmp_path):
    from airflow_cdc_provider.core.key_ranges import KeyRange
    from airflow_cdc_provider.stages.snapshot import _WORK, ChunkOrder

    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(lines)
    password = hook.login.password.get_secret_value()
    assert password and password not in repr(hook.login) and password not in hook.login.model_dump_json()

    def order(table: str, path: Path) -> str:
        return ChunkOrder(table=table, columns=header.columns, key=header.key, range=KeyRange(low=0, high=700),
                          last_key=None, chunk_rows=150, read_buffer=1 << 20, path=str(path)).model_dump_json()

    reader = hook.reader_process(_WORK, f"the snapshot of {lines}")
    try:
        pid = reader._process.pid
        assert password not in Path(f"/proc/{pid}/cmdline").read_text(), "never on a command line"
        answer = json.loads(reader.ask(order(str(lines), tmp_path / "a.parquet")))
        assert answer["rows"] == 150 and answer["last_key"][0] < 700
        assert pq.read_table(tmp_path / "a.parquet").num_rows == 150
        # The work's error, in the task: the missing table named.
        with pytest.raises(RuntimeError, match="nowhere"):
            reader.ask(order(f"{lines.schema}.nowhere", tmp_path / "b.parquet"))
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ReaderDied, match="killed by signal 9 before it answered"):
            reader.ask(order(str(lines), tmp_path / "c.parquet"))
    finally:
        reader.close()
