"""Re-reading part of a table from the source into the run's binlog range (verify's repair, the reread parameter).

The rows are read while the range is open, after the table's watermark and before the range's end, and written
as a raw file of inserts that goes before the binlog's raw files. The replay keeps the newest record of each
key, so a row the binlog changed in the range takes the binlog's version, and any other re-read row is the
source's row at the end of the range (nothing changed it between the read and the end). This is the rule of an
incremental snapshot's chunk, read between a low and a high watermark: a chunk row that the binlog changed in
its window is dropped, the binlog's version wins.

When the range ends before the read (a scheduled run's data interval end), the keys the binlog changed between
the range's end and the read are dropped from the re-read rows: those rows are newer than the range, and the
next run's range brings them. A bucket holding such a key is not replaced in this run either (its row at the
range's end is not known: it may have been deleted since); it is left for the next repair.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pymysql

from airflow_cdc_provider.core.batches import DEFAULT_READ_BUFFER, RowSize, next_batch
from airflow_cdc_provider.core.checksum import bucket_of
from airflow_cdc_provider.core.condition import Clause, literal_percent
from airflow_cdc_provider.core.errors import BadRereadCondition
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.records import UID_END, UID_START, RawHeader, key_uid
from airflow_cdc_provider.core.reread import where_clause
from airflow_cdc_provider.core.values import normalise_rows, snapshot_normaliser, snapshot_select
from airflow_cdc_provider.core.workdir import DELETE_FILE, UPSERT_FILE
from airflow_cdc_provider.stages.raw_files import RawFileWriter
from airflow_cdc_provider.storage import make_dirs, new_file

REREAD_PREFIX = "reread"


@dataclass
class RereadResult:
    files: list[str] = field(default_factory=list)
    rows: int = 0
    held: set[int] = field(default_factory=set)  # buckets not replaced after all: see the extract operator


class Reads(Protocol):
    """Reads on one connection of the source (``MySqlSourceHook.streaming_reads``)."""

    def cursor(self) -> AbstractContextManager[Any]: ...
    def rollback(self) -> None: ...


def validate_where(reads: Reads, header: RawHeader, where: str) -> None:
    """Have the server plan the statement the provider writes from ``where`` (``core.reread.where_clause``: a
    condition that is not a plain one on the table's columns is refused before anything is sent), in a read-only
    transaction, with ``LIMIT 0``: what only the server can refuse (comparing two columns of collations that do
    not mix) raises ``BadRereadCondition`` with the server's words, before the run takes any lock."""
    clause = where_clause(where, header.table, header.columns)
    table = literal_percent(TableName.parse(header.table).quoted)
    with reads.cursor() as cursor:
        try:
            cursor.execute("START TRANSACTION READ ONLY")
            cursor.execute(f"SELECT 1 FROM {table} WHERE {clause.sql} LIMIT 0", clause.args)
            cursor.fetchall()  # no rows; read to the end all the same, as a streamed result must be
        except pymysql.err.MySQLError as exc:
            raise BadRereadCondition(
                f"The reread condition {where!r} on {header.table} is refused by the server: {exc.args[-1]}. Give "
                "a condition the server can evaluate on the table's columns (for example `id BETWEEN 100 AND 200`), "
                "and trigger the run again; nothing was read or changed.") from None
        finally:
            reads.rollback()


def reread(reads: Reads, header: RawHeader, condition: Clause, out_dir: str | os.PathLike[str],
           read_buffer: int = DEFAULT_READ_BUFFER) -> RereadResult:
    """Read the rows of ``header``'s table that ``condition`` selects (``core.reread.reread_clause``: the provider's
    SQL, its values bound), in one read-only transaction, into raw insert records (``reread-NNNNN.raw`` in
    ``out_dir``), streamed: about ``read_buffer`` bytes of rows held at a time (``core.batches``)."""
    table = literal_percent(TableName.parse(header.table).quoted)
    columns = literal_percent(", ".join(snapshot_select(name, ctype) for name, ctype in header.columns))
    normalisers = [(i, f) for i, (_, ctype) in enumerate(header.columns) if (f := snapshot_normaliser(ctype))]
    key_indexes = header.key_indexes()
    size = RowSize.of(header.columns)
    writer = RawFileWriter(out_dir, REREAD_PREFIX, header)
    result = RereadResult()
    try:
        with reads.cursor() as cursor:
            cursor.execute("START TRANSACTION READ ONLY")
            cursor.execute(f"SELECT {columns} FROM {table} WHERE {condition.sql}", condition.args)
            while batch := next_batch(cursor.fetchmany, size, read_buffer):
                rows = [list(row) for row in batch]
                del batch
                if normalisers:
                    normalise_rows(rows, normalisers)
                for row in rows:
                    writer.write("I", key_uid([row[i] for i in key_indexes]), (0, 0, result.rows), row)
                    result.rows += 1
                del rows, row  # not held while the next batch is read
        reads.rollback()
        result.files = writer.close()
    except BaseException:
        writer.abort()
        raise
    return result


def drop_keys(files: Iterable[str], uids: set[str]) -> int:
    """Remove the records of ``uids`` from re-read raw files (rewritten in place); returns how many went."""
    dropped = 0
    for name in files:
        path = Path(name)
        tmp = path.with_suffix(".raw.tmp")
        # Line by line into the new file: a raw file may be far larger than memory.
        with open(path, encoding="utf-8", newline="\n") as f, new_file(tmp, text=True, replace=True) as out:
            out.write(f.readline())
            for line in f:
                if line[UID_START:UID_END] in uids:
                    dropped += 1
                else:
                    out.write(line)
        os.replace(tmp, path)
    return dropped


def buckets_of(raw_files: list[str], header: RawHeader, buckets: int, work: str | os.PathLike[str]) -> set[int]:
    """The buckets (``core.verify``) of the keys raw files change, replayed into ``work`` (a scratch directory)."""
    from airflow_cdc_provider.stages.replay import replay
    from airflow_cdc_provider.stages.verify import key_texts

    if not raw_files:
        return set()
    make_dirs(work)
    replayed = replay(raw_files, Path(work) / UPSERT_FILE, Path(work) / DELETE_FILE)
    return {bucket_of(key, buckets) for key in key_texts((replayed.upsert_file, replayed.delete_file),
                                                                    header)}


def raw_uids(files: Iterable[str]) -> set[str]:
    """The uids of every record of raw files."""
    found: set[str] = set()
    for name in files:
        with open(name, encoding="utf-8", newline="\n") as f:
            f.readline()
            found.update(line[UID_START:UID_END] for line in f)
    return found
