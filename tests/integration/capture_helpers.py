"""Helpers for capture tests: apply upsert/delete files to a snapshot, as the merge will, and compare."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_cdc_provider.core.config import RunConfig, SourceConfig, WorkConfig
from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.stages.extract import extract, in_one_directory
from airflow_cdc_provider.stages.replay import replay


def sections(conn_id: str | None, work_dir: str | os.PathLike[str], work_conn_id: str | None = None, **run) -> dict:
    """The configuration's sections a capture operator takes whole, as the task group factory hands them: the
    source's (with its connection; none for an operator that does not read the source), the work dir's, and
    ``run:`` with ``run``'s settings."""
    given = {"work": WorkConfig(dir=str(work_dir), conn_id=work_conn_id), "run": RunConfig(**run)}
    return {**given, "source": SourceConfig(mysql_conn_id=conn_id)} if conn_id else given


def capture_after(hook, header, start, tmp_path, name="x", positions=False):
    """Extract from ``start`` to the server's position now, and replay: (extract result, replay result)."""
    high = hook.current_watermark()
    result = extract(hook, in_one_directory([header], tmp_path / f"raw-{name}"), start, high).check()
    files = result.files[header.table]
    replayed = replay(files, tmp_path / f"upsert-{name}.parquet", tmp_path / f"delete-{name}.parquet",
                      positions=positions)
    return result, replayed


@contextlib.contextmanager
def compressed_binlog(server) -> Iterator[None]:
    """The server's binlog compressed within the block, as it was afterwards: MariaDB's log_bin_compress (every
    event of 10 bytes or more), MySQL's binlog_transaction_compression (each transaction one payload event) for
    the sessions opened within. (A global setting: the tests that share the server run one after another.)"""
    from airflow_cdc_testing.server import Product

    if getattr(server, "product", None) is Product.MYSQL:
        (before,) = server.execute("SELECT @@GLOBAL.binlog_transaction_compression")
        server.execute("SET GLOBAL binlog_transaction_compression = ON")
        try:
            yield
        finally:
            server.execute(f"SET GLOBAL binlog_transaction_compression = {int(before[0])}")
        return
    (before,) = server.execute("SELECT @@GLOBAL.log_bin_compress, @@GLOBAL.log_bin_compress_min_len")
    server.execute("SET GLOBAL log_bin_compress = ON", "SET GLOBAL log_bin_compress_min_len = 10")
    try:
        yield
    finally:
        server.execute(f"SET GLOBAL log_bin_compress = {int(before[0])}",
                       f"SET GLOBAL log_bin_compress_min_len = {int(before[1])}")


def read_rows(files: Iterable[str]) -> list[dict]:
    rows: list[dict] = []
    for f in files:
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def apply_changes(header: RawHeader, origin: list[dict], upserts: list[dict], deletes: list[dict]) -> dict:
    """origin ANTI JOIN deletes ANTI JOIN upserts UNION ALL upserts, keyed by the key columns."""
    key = lambda row: tuple(row[k] for k in header.key)  # noqa: E731
    gone = {key(r) for r in deletes} | {key(r) for r in upserts}
    result = {key(r): r for r in origin if key(r) not in gone}
    for r in upserts:
        assert key(r) not in result, f"two upserts for {key(r)}"
        result[key(r)] = r
    return result


def source_rows(server, header: RawHeader) -> dict:
    """The table as the server has it now, read the way the snapshot reads it (UTC session), keyed (each key once:
    a key that lands twice, as two zero dates do, fails); a table with no key ``counted``."""
    schema, table = header.table.split(".")
    conn = server.root_connection(init_command="SET time_zone = '+00:00'")
    try:
        with conn.cursor() as cursor:
            # By name: MySQL's invisible columns are not in a SELECT *.
            names = ", ".join(quote_identifier(name) for name, _ in header.columns)
            cursor.execute(f"SELECT {names} FROM `{schema}`.`{table}`")
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, r)) for r in cursor.fetchall()]
    finally:
        conn.close()
    from airflow_cdc_provider.core.types import ColumnType, arrow_schema

    # PyMySQL gives a date it cannot represent (0000-00-00, 2020-00-15) as the server's text: NULL in the copy.
    dated = [name for name, ctype in header.columns if ColumnType.parse(ctype).base in ("date", "datetime",
                                                                                        "timestamp")]
    for row in rows:
        for name in dated:
            if isinstance(row[name], str):
                row[name] = None
    # JSON as the copy holds it: one canonical text of the document (``core.values.canonical_json``), whatever the
    # server printed (MySQL prints blanks after its commas and colons, MariaDB the text as written).
    from airflow_cdc_provider.core.values import canonical_json

    documents = [name for name, ctype in header.columns if ColumnType.parse(ctype).base == "json"]
    for row in rows:
        for name in documents:
            if row[name] is not None:
                row[name] = canonical_json(row[name])
    # Through Arrow, so both sides hold the same Python types (e.g. TIMESTAMP as an aware UTC datetime).
    table_ = pa.Table.from_pylist(rows, schema=arrow_schema(header.columns))
    if header.whole_row:
        return counted(table_.to_pylist())
    keyed = {tuple(r[k] for k in header.key): r for r in table_.to_pylist()}
    assert len(keyed) == len(rows), "two rows of the source have one key in the copy's form"
    return keyed


def counted(rows: list[dict]) -> dict:
    """The rows of a table with no key, each keyed by its values and its copy's number: two such tables are equal
    when they hold the same rows, each as many times."""
    copies: dict[tuple, int] = {}
    keyed = {}
    for row in rows:
        values = tuple(row.values())
        copies[values] = copies.get(values, 0) + 1
        keyed[(*values, copies[values])] = row
    return keyed
