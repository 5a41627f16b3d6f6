"""A diff-mode read of a table (``core.diff``): its changes since the version whose row digests are kept, found on
the server by bucket sums, then the changed rows read in full. Everything is read in one transaction with a
consistent snapshot, so the changes are those of one moment: the version they make reflects the source as of that
moment (``DiffResult.as_of``).

Writes three files into ``out_dir``: the upserts (every column, as a snapshot's file), the deletes (the key
columns) and the digests of the new version (the old ones, less the deleted and changed rows, plus the changed
rows' new digests), each written beside and renamed. Of a table with no key, whose whole row is its identity, the
digests file holds every column (the deletes are rows, by their values), and an upsert is every copy of a row
whose copies changed in number: the kept digests are read a batch at a time, never whole.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_cdc_provider.core import diff
from airflow_cdc_provider.core.batches import DEFAULT_READ_BUFFER, RowSize, next_batch
from airflow_cdc_provider.core.checksum import TEXT_HASH
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.types import arrow_table, file_schema, parquet_options
from airflow_cdc_provider.core.values import normalise_rows, snapshot_normaliser, snapshot_select
from airflow_cdc_provider.core.workdir import DELETE_FILE, DIGESTS_FILE, UPSERT_FILE
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.storage import make_dirs, new_file

HASH_COLUMN, DIGEST_COLUMN = "_hash", "_digest"
# The digests file's schema metadata naming the hash its numbers are cut from (``core.checksum.TEXT_HASH``). A file
# without it was written before the hash was named, with MD5.
HASH_METADATA = b"cdc.text_hash"
BATCH_ROWS = 262_144  # rows of the kept digests held at once


class ConsistentReads(Protocol):
    """Statements on one connection, in one transaction with a consistent snapshot (``MySqlSourceHook``)."""

    as_of: dt.datetime  # the server's clock (UTC) read just after the snapshot was taken
    mariadb: bool

    def query(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]: ...
    def bytes_sent(self) -> int: ...
    def binlog_position(self) -> tuple[str, int] | None: ...
    def streamed(self, sql: str, args: Sequence[Any]) -> AbstractContextManager[Any]: ...


class DiffSource(Protocol):
    def consistent_reads(self) -> AbstractContextManager[ConsistentReads]: ...


@dataclass
class DiffResult:
    as_of: dt.datetime
    upsert_file: str
    delete_file: str
    digests_file: str
    upserts: int = 0
    inserts: int = 0  # rows the version before did not have (by copies, for a table with no key)
    deletes: int = 0  # rows in the delete file
    removed: int = 0  # rows the version before had and the source has no longer (by copies, likewise)
    rows: int = 0  # the new version's rows
    levels: list[tuple[int, int, int]] = field(default_factory=list)  # each level's bits, buckets summed, differing
    compared_rows: int = 0  # rows whose hash and digest were read
    bytes_sent: int = 0  # what the server sent for it, by its own counter
    keyed: bool = True  # False: the table has no key, its whole row is its identity
    # The binlog position the snapshot reflects exactly (MariaDB's binlog_snapshot_file and _position), when asked
    # for and the server tells it; None otherwise.
    binlog: tuple[str, int] | None = None
    # The hash the kept digests were cut from, when not the one the server computes now (``kept_hash``): none of
    # them can match, so every row is read and the version's rows replaced by them, once.
    other_hash: str | None = None

    @property
    def changes(self) -> dict[str, int]:
        """Rows inserted, updated and deleted (a table with no key has no updates: a changed row is a copy
        removed and one added)."""
        return {"I": self.inserts, "U": self.upserts - self.inserts if self.keyed else 0, "D": self.removed}


def digests_schema(header: RawHeader) -> pa.Schema:
    """The digests file of a version: the identity's columns (``RawHeader.identity``, as the upsert files type
    them), each row's hash and digest (``core.diff``)."""
    schema = file_schema(header)
    return pa.schema([*(schema.field(k) for k in header.identity), pa.field(HASH_COLUMN, pa.uint64()),
                      pa.field(DIGEST_COLUMN, pa.uint64())], metadata={HASH_METADATA: TEXT_HASH.encode()})


def kept_hash(schema: pa.Schema) -> str:
    """The hash a digests file's numbers were cut from (``schema``: the file's, as read): its metadata's, or ``md5``
    for a file from before it."""
    return str((schema.metadata or {}).get(HASH_METADATA, b"md5").decode())


def diff_table(source: DiffSource, header: RawHeader, digests_file: str | os.PathLike[str],
               out_dir: str | os.PathLike[str], read_buffer: int = DEFAULT_READ_BUFFER,
               digests_out: str | os.PathLike[str] | None = None, digest_sql: str | None = None,
               binlog: bool = False, keep_digests: bool = True) -> DiffResult:
    """Find ``header``'s table's changes since the version ``digests_file`` describes, and write them into
    ``out_dir``; the new version's digests to ``digests_out`` (default: ``DIGESTS_FILE`` in ``out_dir``).

    ``digest_sql``: the rows' digest as the kept digests were computed, when not the diff mode's own (a heal's,
    from a Hive version: ``stages.heal``). ``binlog``: ask the server which binlog position the snapshot
    reflects (``DiffResult.binlog``). ``keep_digests=False``: no digests of the new version are written (a heal's
    table goes on from the binlog and keeps none); ``DiffResult.digests_file`` is then empty."""
    out = Path(out_dir)
    make_dirs(out)
    kept = pq.read_table(digests_file, columns=[HASH_COLUMN, DIGEST_COLUMN])
    kept_with = kept_hash(kept.schema)
    hashes = kept.column(HASH_COLUMN).to_numpy(zero_copy_only=False).astype(np.uint64)
    digests = kept.column(DIGEST_COLUMN).to_numpy(zero_copy_only=False).astype(np.uint64)
    del kept
    table = TableName.parse(header.table).quoted
    with source.consistent_reads() as reads:
        hash_sql = diff.row_hash(header.columns, header.key, reads.mariadb)
        digest_sql = digest_sql or diff.row_digest(header.columns, reads.mariadb)
        result = DiffResult(reads.as_of, str(out / UPSERT_FILE), str(out / DELETE_FILE),
                            str(digests_out or out / DIGESTS_FILE) if keep_digests else "", keyed=not header.whole_row,
                            binlog=reads.binlog_position() if binlog else None,
                            other_hash=kept_with if kept_with != TEXT_HASH else None)
        sent = reads.bytes_sent()
        parent_bits, parents = _descend(reads, table, hash_sql, digest_sql, hashes, digests, result)
        inside = diff.within(hashes, parent_bits, parents)
        server_pairs = _pairs(reads, table, hash_sql, digest_sql, parent_bits, parents, int(inside.sum()))
        result.compared_rows = len(server_pairs[0])
        changes = diff.compare_pairs(server_pairs, (hashes[inside], digests[inside]))
        failpoint("diff.compared")
        upserted = _read_rows(reads, header, table, hash_sql, changes.upserts, Path(result.upsert_file), read_buffer)
        result.bytes_sent = reads.bytes_sent() - sent
    result.upserts = len(upserted)
    if header.whole_row:
        result.inserts, result.removed = diff.copies_changed(server_pairs[0], hashes[inside])
    else:
        result.inserts = int((~np.isin(changes.upserts, hashes)).sum())
        result.removed = len(changes.deletes)
    _rewrite(header, digests_file, changes, upserted, server_pairs, result)
    return result


def _descend(reads: ConsistentReads, table: str, hash_sql: str, digest_sql: str, hashes: np.ndarray,
             digests: np.ndarray, result: DiffResult) -> tuple[int, np.ndarray]:
    """The levels of bucket sums: the buckets (and their bits) whose rows' pairs are then read."""
    bits, parent_bits = diff.first_bits(len(hashes)), 0
    parents = np.array([], dtype=np.uint64)
    for level in range(diff.MAX_LEVELS):
        inside = diff.within(hashes, parent_bits, parents)
        expected = (1 << bits) if not parent_bits else len(parents) << (bits - parent_bits)
        blobs = [row[0] for s in diff.sums_statements(table, hash_sql, digest_sql, bits, parent_bits,
                                                      parents.tolist(), min(expected, len(hashes) or 1))
                 for row in reads.query(s.sql, s.args)]
        server = diff.unpack_sums(blobs, bits)
        local = diff.local_sums(hashes[inside], digests[inside], bits)
        differing = diff.differing(server, local)
        result.levels.append((bits, len(server[0]), len(differing)))
        parent_bits, parents = bits, differing
        if not len(differing):
            break
        rows = int(diff.within(hashes, bits, differing).sum())
        more = diff.refinement(len(differing), rows, bits, level + 1)
        if not more:
            break
        bits += more
    return parent_bits, parents


def _pairs(reads: ConsistentReads, table: str, hash_sql: str, digest_sql: str, parent_bits: int,
           parents: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    if parent_bits and not len(parents):
        return np.array([], dtype=np.uint64), np.array([], dtype=np.uint64)
    blobs = [row[0] for s in diff.pairs_statements(table, hash_sql, digest_sql, parent_bits, parents.tolist(), rows)
             for row in reads.query(s.sql, s.args)]
    return diff.unpack_pairs(blobs)


def _read_rows(reads: ConsistentReads, header: RawHeader, table: str, hash_sql: str, wanted: np.ndarray,
               path: Path, read_buffer: int) -> pa.Table:
    """The rows whose hash is ``wanted``, read in full into the upsert file; returns their identity's columns and
    hashes."""
    schema = file_schema(header)
    select = [snapshot_select(name, ctype) for name, ctype in header.columns]
    normalisers = [(i, f) for i, (_, ctype) in enumerate(header.columns) if (f := snapshot_normaliser(ctype))]
    size = RowSize.of((*header.columns, (HASH_COLUMN, "bigint unsigned")))
    keys: list[pa.Table] = []
    tmp = _beside(str(path))
    with new_file(Path(tmp), replace=True) as sink, pq.ParquetWriter(sink, schema,
                                                                     **parquet_options(header.columns)) as writer:
        for statement in diff.rows_statements(table, select, hash_sql, wanted.tolist()) if len(wanted) else []:
            with reads.streamed(statement.sql, statement.args) as cursor:
                while batch := next_batch(cursor.fetchmany, size, read_buffer):
                    values = [list(row[:-1]) for row in batch]
                    found = pa.array([row[-1] for row in batch], type=pa.uint64())
                    del batch
                    if normalisers:
                        normalise_rows(values, normalisers)
                    rows = arrow_table(values, schema)
                    del values
                    writer.write_table(rows)
                    keys.append(rows.select(list(header.identity)).append_column(HASH_COLUMN, found))
    os.replace(tmp, path)
    key_schema = pa.schema([*(schema.field(k) for k in header.identity), pa.field(HASH_COLUMN, pa.uint64())])
    return pa.concat_tables(keys) if keys else key_schema.empty_table()


def _rewrite(header: RawHeader, kept_file: str | os.PathLike[str], changes: diff.RowChanges, upserted: pa.Table,
             server_pairs: tuple[np.ndarray, np.ndarray], result: DiffResult) -> None:
    """The delete file (the kept rows of the deleted hashes, by their identity's columns) and the digests of the
    version the changes make: the kept rows but the deleted and changed ones, then the changed rows with the
    digests the server gave in the same snapshot. One pass over the kept digests, a batch at a time."""
    schema = digests_schema(header)
    deleted = pa.array(changes.deletes, type=pa.uint64())
    gone = pa.array(np.concatenate([changes.deletes, changes.upserts]), type=pa.uint64())
    digest_of = dict(zip(server_pairs[0].tolist(), server_pairs[1].tolist()))
    new_digests = pa.array([digest_of[h] for h in upserted.column(HASH_COLUMN).to_pylist()], type=pa.uint64())
    changed = upserted.append_column(DIGEST_COLUMN, new_digests).select(schema.names).cast(schema)
    identity = schema.remove(schema.get_field_index(DIGEST_COLUMN)).remove(schema.get_field_index(HASH_COLUMN))
    with contextlib.ExitStack() as writers:
        deletes = writers.enter_context(pq.ParquetWriter(_beside(result.delete_file), identity))
        kept = None
        if result.digests_file:
            make_dirs(Path(result.digests_file).parent)
            kept = writers.enter_context(pq.ParquetWriter(_beside(result.digests_file), schema))
        for batch in pq.ParquetFile(kept_file).iter_batches(batch_size=BATCH_ROWS):
            rows = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
            hashes = rows.column(HASH_COLUMN)
            if len(deleted):
                removed = rows.filter(pc.is_in(hashes, deleted)).select(identity.names)
                deletes.write_table(removed)
                result.deletes += len(removed)
            staying = rows.filter(pc.invert(pc.is_in(hashes, gone))) if len(gone) else rows
            if kept is not None:
                kept.write_table(staying)
            result.rows += len(staying)
        if kept is not None:
            kept.write_table(changed)
        result.rows += len(changed)
    os.replace(_beside(result.delete_file), result.delete_file)
    if result.digests_file:
        os.replace(_beside(result.digests_file), result.digests_file)


def _beside(path: str) -> str:
    return f"{path}.tmp"
