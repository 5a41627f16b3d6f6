"""Capture speed against baselines measured in the same run, on a throwaway MariaDB and a throwaway MySQL 9.7.

    .venv/bin/python bench/capture_bench.py [rows] [mariadb|mysql|both]

Each server's figures are printed under its name, the same measures side by side (MySQL's root: make mysql).

Extraction: rows/s of `extract` (decode, normalise, write raw files) against a bare python-mysql-replication
loop that only decodes the same binlog range; on a narrow (5-column) and a 30-column table. Target >= 1.0x in one
process (the extraction decodes the common column types itself: ``core.row_images``), >= 1.6x with two decoder
processes beside the pass (``stages.decode_workers``).
Compressed binlog: the same extraction of the same changes written with MariaDB's ``log_bin_compress=ON`` (on
MySQL: ``binlog_transaction_compression=ON``, each transaction one zstd payload event), against the uncompressed
one, in one process and with two decoders. Target <= 1.2x the time.
Snapshot: rows/s of `snapshot` (keyset chunks to Parquet) against a bare streaming-cursor read
(SSCursor, fetchmany(10000)) of the same table; with one reader, and in key ranges on two and three connections
(`readers`, ``core.key_ranges``). Target >= 1.2x with parallel readers.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pymysql.cursors  # noqa: E402
from airflow_cdc_testing.server import Product, ThrowawayServer  # noqa: E402
from pymysqlreplication import BinLogStreamReader  # noqa: E402
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent  # noqa: E402

from airflow_cdc_provider.core.identifiers import TableName  # noqa: E402
from airflow_cdc_provider.core.records import RawHeader  # noqa: E402
from airflow_cdc_provider.core.watermark import Watermark  # noqa: E402
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook  # noqa: E402
from airflow_cdc_provider.stages.extract import extract, in_one_directory  # noqa: E402
from airflow_cdc_provider.stages.snapshot import snapshot  # noqa: E402

NARROW = "id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(12,2), updated_at DATETIME(3), qty INT"
NARROW_FILL = "seq, CONCAT('name ', seq), seq / 100, '2026-01-01 00:00:00' + INTERVAL seq SECOND, seq % 1000"
WIDE = "id INT PRIMARY KEY, " + ", ".join(
    f"c{i} {['INT', 'VARCHAR(30)', 'DECIMAL(10,2)', 'DATETIME', 'BIGINT', 'DOUBLE'][i % 6]}" for i in range(29)
)
WIDE_FILL = "seq, " + ", ".join(
    ["seq", "CONCAT('v', seq)", "seq / 7", "'2026-01-01' + INTERVAL seq MINUTE", "seq * 1000", "seq / 3"][i % 6]
    for i in range(29)
)


class Source:
    """The server for the bare baselines (the login's own connections, the watermark), and the provider's hook on
    it (an Airflow connection given by environment variable) for the stages."""

    def __init__(self, server: ThrowawayServer, login):
        self.server, self.login = server, login
        os.environ["AIRFLOW_CONN_CDC_BENCH"] = json.dumps(server.connection_uri(login))
        self.hook = MySqlSourceHook("cdc_bench")

    def settings(self) -> dict:
        return {"host": "127.0.0.1", "port": self.server.port, "user": self.login.user, "password": self.login.password}

    def get_conn(self):
        return pymysql.connect(**self.settings(), autocommit=True, init_command="SET time_zone = '+00:00'")

    def current_watermark(self) -> Watermark:
        return self.hook.current_watermark()


def fill_numbers(server, rows: int) -> None:
    """``bench.numbers``: the integers 1 to ``rows`` (``seq``), made by doubling: MySQL has no sequence tables."""
    server.execute("CREATE TABLE bench.numbers (seq INT NOT NULL PRIMARY KEY)", "INSERT INTO bench.numbers VALUES (1)")
    have = 1
    while have < rows:
        server.execute(f"INSERT INTO bench.numbers SELECT seq + {have} FROM bench.numbers WHERE seq + {have} <= {rows}")
        have *= 2


def numbers(rows: int) -> str:
    return f"bench.numbers WHERE seq <= {int(rows)}"


def header_of(server, table: TableName) -> RawHeader:
    columns = server.execute(
        f"SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA='{table.schema}' "
        f"AND TABLE_NAME='{table.table}' ORDER BY ORDINAL_POSITION")
    return RawHeader(str(table), tuple(columns), ("id",))


def bare_decode(source: Source, start: Watermark, table: TableName) -> tuple[int, float]:
    t0 = time.perf_counter()
    s = source.settings()
    stream = BinLogStreamReader(
        connection_settings={"host": s["host"], "port": s["port"], "user": s["user"], "password": s["password"]},
        server_id=424242, resume_stream=True, log_file=start.file, log_pos=start.position, blocking=False,
        is_mariadb=False, only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=[table.schema], only_tables=[table.table], enable_logging=False)
    rows = 0
    for event in stream:
        rows += len(event.rows)
    stream.close()
    return rows, time.perf_counter() - t0


def bench_extract(server, source, work, name, ddl, fill, rows):
    table = TableName("bench", name)
    server.execute(f"CREATE TABLE {table.quoted} ({ddl})")
    start = source.current_watermark()
    server.execute(f"INSERT INTO {table.quoted} SELECT {fill} FROM {numbers(rows)}")
    high = source.current_watermark()
    bare_rows, bare_s = bare_decode(source, start, table)
    for decoders, target in ((0, "1.0x"), (2, "1.6x")):
        t0 = time.perf_counter()
        tables = in_one_directory([header_of(server, table)], work / f"raw-{name}-{decoders}")
        result = extract(source.hook, tables, start, high, decoders=decoders)
        ours_s = time.perf_counter() - t0
        ours_rows = sum(result.counts[str(table)].values())
        assert ours_rows == bare_rows == rows, (ours_rows, bare_rows, rows)
        print(f"extract {name:6s} {rows:>9,} rows: bare decode {rows / bare_s:>9,.0f} rows/s, extract with "
              f"{decoders} decoder processes {rows / ours_s:>9,.0f} rows/s, ratio {bare_s / ours_s:.2f}x "
              f"(target >= {target})")


def bench_compressed(server, source, work, rows):
    """The same inserts, updates and deletes twice, the second time compressed: extraction time against time."""
    ranges = {}
    mysql = server.product is Product.MYSQL
    for compressed in (False, True):
        table = TableName("bench", f"packed{int(compressed)}")
        on = "ON" if compressed else "OFF"
        setting = (f"SET SESSION binlog_transaction_compression = {on}" if mysql
                   else f"SET GLOBAL log_bin_compress = {on}")
        server.execute(f"CREATE TABLE {table.quoted} ({NARROW})")
        start = source.current_watermark()
        server.execute(setting, f"INSERT INTO {table.quoted} SELECT {NARROW_FILL} FROM {numbers(rows)}",
                       f"UPDATE {table.quoted} SET amount = amount + 1 WHERE id % 3 = 0",
                       f"DELETE FROM {table.quoted} WHERE id % 7 = 0")
        ranges[compressed] = (table, start, source.current_watermark())
    if not mysql:
        server.execute("SET GLOBAL log_bin_compress = OFF")
    for decoders in (0, 2):
        # Alternated, best of five each: the machine is shared, and a pass is a few seconds.
        times = {False: float("inf"), True: float("inf")}
        for attempt in range(5):
            for compressed, (table, start, high) in ranges.items():
                t0 = time.perf_counter()
                tables = in_one_directory([header_of(server, table)],
                                          work / f"raw-packed{int(compressed)}-{decoders}-{attempt}")
                result = extract(source.hook, tables, start, high, decoders=decoders)
                times[compressed] = min(times[compressed], time.perf_counter() - t0)
                counts = result.counts[str(table)]
        print(f"extract compressed narrow, {decoders} decoder processes: {sum(counts.values()):,} records, "
              f"uncompressed {times[False]:.2f} s, compressed {times[True]:.2f} s, ratio "
              f"{times[True] / times[False]:.2f}x (target <= 1.2x)")


def bench_snapshot(server, source, work, rows):
    table = TableName("bench", "snap")
    server.execute(f"CREATE TABLE {table.quoted} ({NARROW})",
                   f"INSERT INTO {table.quoted} SELECT {NARROW_FILL} FROM {numbers(rows)}")
    conn = source.get_conn()
    t0 = time.perf_counter()
    with conn.cursor(pymysql.cursors.SSCursor) as cursor:
        cursor.execute(f"SELECT * FROM {table.quoted}")
        n = 0
        while batch := cursor.fetchmany(10000):
            n += len(batch)
    bare_s = time.perf_counter() - t0
    conn.close()
    for readers in (1, 2, 3):
        t0 = time.perf_counter()
        result = snapshot(source.hook, header_of(server, table), work / f"snap{readers}", chunk_rows=50_000,
                          readers=readers)
        ours_s = time.perf_counter() - t0
        assert result.rows == n == rows
        print(f"snapshot narrow {rows:>9,} rows: bare SSCursor {rows / bare_s:>9,.0f} rows/s, snapshot with "
              f"{readers} reader(s) {rows / ours_s:>9,.0f} rows/s, ratio {bare_s / ours_s:.2f}x"
              + (" (target >= 1.2x)" if readers > 1 else ""))


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    which = sys.argv[2] if len(sys.argv) > 2 else "both"
    products = [Product.MARIADB, Product.MYSQL] if which == "both" else [Product(which)]
    work = Path(tempfile.mkdtemp(prefix="capture-bench-"))
    for product in products:
        with ThrowawayServer.start(work / product, {"max_binlog_size": 64 * 1024 * 1024}, product=product) as server:
            print(f"== {product}: {server.execute('SELECT VERSION()')[0][0]}", flush=True)
            login = server.create_user("bench")
            server.execute("CREATE DATABASE bench")
            fill_numbers(server, rows * 5)
            source = Source(server, login)
            bench_extract(server, source, work, "narrow", NARROW, NARROW_FILL, rows)
            bench_extract(server, source, work, "wide30", WIDE, WIDE_FILL, rows // 4)
            bench_compressed(server, source, work, rows)
            bench_snapshot(server, source, work, rows * 5)


if __name__ == "__main__":
    main()
