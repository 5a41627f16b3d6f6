"""The initial select: the whole table in key order, in keyset chunks, as upsert files.

The watermark is taken before the first row is read: a change made during the read is then also in the binlog
after the watermark, and replaying it onto a row the snapshot already has is harmless, because rows are matched
by key. Taken after the read, such a change would be lost.

Each finished chunk is recorded in a progress file, so that a killed snapshot resumes after its last finished
chunk (as Debezium's incremental snapshot does) with the watermark of its first attempt.

A table whose key begins with an integer column can be read on several connections at once (``readers``): cut
into key ranges (``core.key_ranges``) after the one watermark, each range read in keyset chunks of its own by
whichever reader is free, each reader but one a process of its own (``hooks.reader_processes``). The progress
file then holds each range's progress, written by the task alone; a killed snapshot resumes each range after its
last finished chunk.

A table with no key (its whole row is its identity, ``core.keys``) has no order to read it in chunks by: it is
read in one statement, a consistent read of one moment, into one file, and a killed read starts again.

For a diff-mode table (``stages.diff``) each row's hash and digest come with it (``core.diff``): each chunk's go
to a digests part beside it, and the parts, sorted by hash, to the version's digests file once the table is read.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
import pymysql

from airflow_cdc_provider.core import diff
from airflow_cdc_provider.core.batches import DEFAULT_READ_BUFFER, RowSize, next_batch
from airflow_cdc_provider.core.errors import DuplicateKey, SourceConnectionLost, mysql_error_said
from airflow_cdc_provider.core.flavor import ServerFlavor
from airflow_cdc_provider.core.identifiers import TableName, formatted, quote_identifier
from airflow_cdc_provider.core.key_ranges import KeyRange, RangeProgress, ranges_left, split_key_space
from airflow_cdc_provider.core.model import Model
from airflow_cdc_provider.core.records import RawHeader, decode_values, encode_value
from airflow_cdc_provider.core.types import arrow_columns, file_schema, parquet_options
from airflow_cdc_provider.core.values import normalise_columns, snapshot_normaliser, snapshot_select
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import SNAPSHOT_PROGRESS_FILE
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.stages.diff import DIGEST_COLUMN, HASH_COLUMN, digests_schema
from airflow_cdc_provider.storage import WorkStore, make_dirs, new_file, room_for


class Source(Protocol):
    """Where the table is read from (``MySqlSourceHook``): its watermark, and reads streamed on one connection."""

    def streaming_reads(self) -> AbstractContextManager[Any]: ...
    def current_watermark(self) -> Watermark: ...
    def first_key_bounds(self, header: RawHeader) -> tuple[int, int] | None: ...
    def reader_process(self, work: str, what: str) -> Any: ...
    def duplicate_key(self, header: RawHeader) -> tuple[tuple[Any, ...], int] | None: ...

    @property
    def flavor(self) -> ServerFlavor: ...


@dataclass
class SnapshotResult:
    watermark: Watermark | None  # None: a diff-mode table's, read without the binlog
    rows: int = 0
    chunks: int = 0
    files: list[str] = field(default_factory=list)
    resumed_after_chunk: int = 0
    taken_at: str | None = None  # when the watermark was taken (UTC, ISO 8601): the moment the snapshot reflects
    digests_file: str | None = None  # the rows' digests, for a diff-mode table (``stages.diff``)
    ranges: int = 0  # the key ranges it was read in on several connections (0: read in one range, on one)
    readers: int = 1  # the connections it was read on at once, by this attempt


class SnapshotProgress(Model):
    """The progress file of a snapshot (``RunDir.snapshot_progress``): its watermark, the finished chunks and the
    key of the last row read."""

    table: str
    columns: tuple[tuple[str, str], ...]
    watermark: Watermark | None  # None: taken without the binlog (a diff-mode table's)
    taken_at: str  # when the watermark was taken (UTC, ISO 8601)
    chunks: int = 0
    rows: int = 0
    files: tuple[str, ...] = ()
    last_key: list[Any] | None = None  # in the raw records' encoding (``core.records.encode_value``)
    done: bool = False
    # A snapshot read in key ranges on several connections: each range's progress (``last_key`` is then None).
    ranges: tuple[RangeProgress, ...] = ()


def keyset_query(header: RawHeader, chunk_rows: int, after: bool, extra: Sequence[str] = (),
                 within: KeyRange | None = None) -> str:
    """``SELECT … WHERE key > last ORDER BY key LIMIT n``, the comparison spelt out for composite keys.

    ``(a, b) > (x, y)`` becomes ``a > x OR (a = x AND b > y)``, a form every MySQL and MariaDB plans as an
    index range; never OFFSET, whose cost grows with every chunk. Run it with ``keyset_args`` (a list, empty for the
    first chunk): the names' own ``%`` are doubled for them. A table with no key: every row, in one statement.
    ``within``: the rows of one key range only, its bounds first in the arguments (``KeyRange.bounds``).
    """
    table = TableName.parse(header.table)
    columns = ", ".join([*(snapshot_select(name, column_type) for name, column_type in header.columns), *extra])
    if header.whole_row:
        return formatted(f"SELECT {columns} FROM {table.quoted}")
    keys = [formatted(quote_identifier(k)) for k in header.key]
    sql = formatted(f"SELECT {columns} FROM {table.quoted}")
    conditions = within.conditions(keys[0]) if within is not None else []
    if after:
        terms = []
        for i, key in enumerate(keys):
            equal = [f"{k} = %s" for k in keys[:i]]
            terms.append("(" + " AND ".join([*equal, f"{key} > %s"]) + ")")
        conditions.append("(" + " OR ".join(terms) + ")" if conditions else " OR ".join(terms))
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    return f"{sql} ORDER BY {', '.join(keys)} LIMIT {int(chunk_rows)}"


def keyset_args(last_key: Sequence[Any]) -> list[Any]:
    return [value for i in range(len(last_key)) for value in (*last_key[:i], last_key[i])]


class _Progress:
    """The progress file, in the snapshot's local directory."""

    def __init__(self, path: Path, header: RawHeader) -> None:
        self.path, self.header, self.store = str(path), header, WorkStore()
        self.state: SnapshotProgress | None = None
        state = self.store.read(self.path, SnapshotProgress)
        if state is not None and state.table == header.table and state.columns == tuple(header.columns):
            self.state = state

    def start(self, watermark: Watermark | None, ranges: Sequence[KeyRange] = ()) -> None:
        self._save(SnapshotProgress(table=self.header.table, columns=self.header.columns, watermark=watermark,
                                    taken_at=dt.datetime.now(dt.UTC).isoformat(),
                                    ranges=tuple(RangeProgress(range=r) for r in ranges)))

    def finish_range_chunk(self, index: int, file: str | None, rows: int, last_key: list[Any] | None,
                           done: bool) -> SnapshotProgress:
        """A chunk of range ``index`` read into ``file`` (None: it was empty and is gone)."""
        state = self._started()
        ranges = list(state.ranges)
        now = ranges[index]
        ranges[index] = now.model_copy(update={
            "chunks": now.chunks + 1, "rows": now.rows + rows, "done": done,
            "last_key": last_key if last_key is not None else now.last_key})
        self._save(state.model_copy(update={
            "chunks": state.chunks + 1, "rows": state.rows + rows, "ranges": tuple(ranges),
            "files": (*state.files, file) if file is not None else state.files, "done": all(r.done for r in ranges)}))
        return self._started()

    def finish_chunk(self, file: str, rows: int, last_key: list[Any] | None, done: bool) -> None:
        state = self._started()
        self._save(state.model_copy(update={
            "chunks": state.chunks + 1, "rows": state.rows + rows, "files": (*state.files, file),
            "last_key": [encode_value(v) for v in last_key] if last_key is not None else None, "done": done}))

    def _started(self) -> SnapshotProgress:
        if self.state is None:
            raise RuntimeError(f"The snapshot of {self.header.table} has no progress yet: start() it first.")
        return self.state

    def _save(self, state: SnapshotProgress) -> None:
        self.store.write(self.path, state)
        self.state = state


ChunkDone = Callable[[int, "list[Any] | None"], None]  # rows read so far, the last key read


def snapshot(source: Source, header: RawHeader, out_dir: str | os.PathLike[str], chunk_rows: int = 50_000,
             progress: ChunkDone | None = None, read_buffer: int = DEFAULT_READ_BUFFER,
             key_declared: bool = False, digests: str | os.PathLike[str] | None = None,
             readers: int = 1) -> SnapshotResult:
    """Read the table into ``out_dir/snapshot-NNNNN.parquet`` chunk files; resume from the progress file.
    ``progress`` is called after each chunk. The rows are held ``read_buffer`` bytes at a time
    (``core.batches``), each batch written as it is read. A key the configuration declares (``key_declared``) is
    checked unique first: raises ``DuplicateKey`` before any row is read. ``digests``: the file the rows' digests
    go to, for a diff-mode table (``stages.diff``), which is read without the binlog: its snapshot takes no
    watermark, and reflects the moment its read began. ``readers``: the connections a table whose key begins
    with an integer column is read on at once, in key ranges (see the module's docstring); each holds
    ``read_buffer`` bytes of rows at most."""
    out = Path(out_dir)
    make_dirs(out)
    with room_for(out, f"the snapshot of {header.table}"):
        result = _snapshot(source, header, out, chunk_rows, progress or (lambda rows, key: None), read_buffer,
                           key_declared, digests is not None, readers)
        if digests is not None:
            result.digests_file = _join_digests(header, result.files, Path(digests))
        return result


def _snapshot(source: Source, header: RawHeader, out: Path, chunk_rows: int, progress: ChunkDone,
              read_buffer: int, key_declared: bool, digests: bool, readers: int) -> SnapshotResult:
    progress_file = _Progress(out / SNAPSHOT_PROGRESS_FILE, header)
    if key_declared and progress_file.state is None:
        # Rows that share a key would be one row in the copy, and the keyset chunks would skip those after a
        # chunk's last key: neither may happen silently.
        _check_unique(source, header)
    if progress_file.state is None:
        # Before any row is read: see the module's docstring.
        watermark = None if digests else source.current_watermark()
        ranges: Sequence[KeyRange] = ()
        if readers > 1 and not digests and not header.whole_row:
            bounds = source.first_key_bounds(header)  # after the watermark: see core.key_ranges
            if bounds is not None and len(found := split_key_space(*bounds, readers, chunk_rows)) > 1:
                ranges = found
        progress_file.start(watermark, ranges)
    state = progress_file._started()
    result = SnapshotResult(state.watermark, state.rows, state.chunks, list(state.files),
                            resumed_after_chunk=state.chunks, taken_at=state.taken_at)
    if state.done:
        return result
    if state.ranges:
        return _read_ranges(source, header, out, chunk_rows, progress, read_buffer, readers, progress_file, result)
    last_key = decode_values(json.dumps(state.last_key)) if state.last_key is not None else None
    schema = file_schema(header)
    size = RowSize.of(header.columns)
    mariadb = source.flavor.is_mariadb
    extra = (diff.row_hash(header.columns, header.key, mariadb), diff.row_digest(header.columns, mariadb)) \
        if digests else ()
    with source.streaming_reads() as reads:
        while True:
            chunk = result.chunks + 1
            path = out / f"snapshot-{chunk:05d}.parquet"
            try:
                rows, chunk_last = _read_chunk(reads, header, schema, chunk_rows, last_key, path, size, read_buffer,
                                               extra)
            except pymysql.err.OperationalError as exc:
                raise SourceConnectionLost(
                    f"The connection to the source failed while the snapshot of {header.table} read chunk {chunk} "
                    f"{mysql_error_said(exc)}. The {chunk - 1} chunks read before are kept; the task's retry goes on "
                    "after them.") from None
            if chunk_last is not None:
                last_key = chunk_last
            done = rows < chunk_rows or header.whole_row
            if rows or not result.files:  # an empty table still gets one (empty) file to load
                result.files.append(str(path))
            else:
                path.unlink(missing_ok=True)
                _digests_part(path).unlink(missing_ok=True)
            result.chunks, result.rows = chunk, result.rows + rows
            progress_file.finish_chunk(result.files[-1], rows, last_key, done)
            progress(result.rows, last_key)
            if done:
                return result


class ChunkOrder(Model):
    """An order to a reader: read the next chunk of a key range into ``path`` (``read_range_chunk``)."""

    table: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    range: KeyRange
    last_key: list[Any] | None  # encoded (``core.records.encode_value``); None: the range's first chunk
    chunk_rows: int
    read_buffer: int
    path: str


class ChunkRead(Model):
    """A reader's answer: the chunk's rows, and the key of its last row (encoded; None for an empty chunk)."""

    rows: int
    last_key: list[Any] | None


def read_range_chunk(reads: Any, order_text: str) -> str:
    """A reader's work (``hooks.reader_processes``, and the task's own reader): a ``ChunkOrder`` done on ``reads``,
    answered as a ``ChunkRead``."""
    order = ChunkOrder.model_validate_json(order_text)
    header = RawHeader(order.table, order.columns, order.key)
    last_key = decode_values(json.dumps(order.last_key)) if order.last_key is not None else None
    path = Path(order.path)
    try:
        rows, last = _read_chunk(reads, header, file_schema(header), order.chunk_rows, last_key, path,
                                 RowSize.of(header.columns), order.read_buffer, within=order.range)
    except pymysql.err.OperationalError as exc:
        raise SourceConnectionLost(
            f"The connection to the source failed while the snapshot of {header.table} read {path.name} "
            f"{mysql_error_said(exc)}. The chunks read before are kept; the task's retry goes on after them.") from None
    return ChunkRead(rows=rows, last_key=[encode_value(v) for v in last] if last is not None else None
                     ).model_dump_json()


class _TaskReader:
    """The task's own reader, on the task's connection: asked as a reader process is."""

    def __init__(self, reads: Any) -> None:
        self.reads = reads

    def ask(self, order: str) -> str:
        return read_range_chunk(self.reads, order)

    def close(self) -> None:
        pass


_WORK = f"{__name__}:{read_range_chunk.__name__}"


def _read_ranges(source: Source, header: RawHeader, out: Path, chunk_rows: int, progress: ChunkDone,
                 read_buffer: int, readers: int, progress_file: _Progress, result: SnapshotResult) -> SnapshotResult:
    """The key ranges not read yet, by ``readers`` readers at once: the task's own, and reader processes. A free
    reader takes the next range and reads it to its end, chunk by chunk; each chunk read is recorded in the
    progress file as it is answered. The first error stops the others after their chunk, and is raised."""
    state = progress_file._started()
    pending = deque(ranges_left(state.ranges))
    lock = threading.Lock()
    failed: list[BaseException] = []

    def read(reader: Any) -> None:
        try:
            while not failed:
                with lock:
                    if not pending:
                        return
                    index = pending.popleft()
                while not failed:
                    with lock:
                        now = progress_file._started().ranges[index]
                    path = out / f"snapshot-r{index + 1:03d}-{now.chunks + 1:05d}.parquet"
                    answer = ChunkRead.model_validate_json(reader.ask(ChunkOrder(
                        table=header.table, columns=header.columns, key=header.key, range=now.range,
                        last_key=now.last_key, chunk_rows=chunk_rows, read_buffer=read_buffer,
                        path=str(path)).model_dump_json()))
                    done = answer.rows < chunk_rows
                    # An empty chunk leaves no file, but for the table's first: an empty table still gets one.
                    keep = answer.rows > 0 or (index == 0 and now.chunks == 0)
                    if not keep:
                        path.unlink(missing_ok=True)
                    with lock:
                        state = progress_file.finish_range_chunk(index, str(path) if keep else None, answer.rows,
                                                                 answer.last_key, done)
                        progress(state.rows, None)
                    if done:
                        break
        except BaseException as exc:
            failed.append(exc)

    wanted = min(max(readers, 1), len(pending))
    with source.streaming_reads() as reads:
        # The processes are started first: they start up while the task's reader reads.
        team: list[Any] = []
        try:
            team += [source.reader_process(_WORK, f"the snapshot of {header.table}") for _ in range(wanted - 1)]
            team.insert(0, _TaskReader(reads))
            threads = [threading.Thread(target=read, args=(r,), name=f"snapshot-reader-{i}", daemon=True)
                       for i, r in enumerate(team)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for reader in team:
                reader.close()
    if failed:
        raise failed[0]
    state = progress_file._started()
    result.rows, result.chunks, result.files = state.rows, state.chunks, list(state.files)
    result.ranges, result.readers = len(state.ranges), wanted
    return result


def _check_unique(source: Source, header: RawHeader) -> None:
    found = source.duplicate_key(header)
    if found is None:
        return
    values, rows = found
    shown = ", ".join(f"{name} = {value!r}" for name, value in zip(header.key, values, strict=True))
    raise DuplicateKey(f"The key that `key:` declares for {header.table} ({', '.join(header.key)}) is not unique at "
                       f"the source: {rows} rows hold {shown}. Nothing of the table was read. Declare columns whose "
                       "values identify one row each (a unique index on them keeps it so), or remove the duplicates.")


def _read_chunk(reads: Any, header: RawHeader, schema: pa.Schema, chunk_rows: int, last_key: list[Any] | None,
                path: Path, size: RowSize, read_buffer: int, extra: Sequence[str] = (),
                within: KeyRange | None = None) -> tuple[int, list[Any] | None]:
    """One keyset chunk, streamed (server-side cursor) in batches of about ``read_buffer`` bytes into a Parquet
    file (a row group per batch) written beside and renamed. Returns its rows and the key of its last row. With
    ``extra`` (a row's hash and digest) those go to the chunk's digests part, written first."""
    tmp = path.with_suffix(".parquet.tmp")
    rows, chunk_last = 0, None
    key_indexes = header.key_indexes()
    width = len(header.columns)
    normalisers = [(i, f) for i, (_, ctype) in enumerate(header.columns) if (f := snapshot_normaliser(ctype))]
    part = _digests_part(path)
    with new_file(tmp, replace=True) as sink, \
            pq.ParquetWriter(sink, schema, **parquet_options(header.columns)) as writer, \
            _digests_writer(header, part, bool(extra)) as digests, reads.cursor() as cursor:
        cursor.execute(keyset_query(header, chunk_rows, last_key is not None, extra, within),
                       [*(within.bounds() if within is not None else ()),
                        *(keyset_args(last_key) if last_key is not None else ())])
        while batch := next_batch(cursor.fetchmany, size, read_buffer):
            last = batch[-1]
            chunk_last = [last[i] for i in key_indexes]  # the key as the server gave it, for the next chunk's WHERE
            count = len(batch)
            # Column-wise: one transposition in C, then the few columns that need it normalised.
            columns: list[Any] = list(zip(*batch))
            del batch, last  # the rows go before the table is written: the batch is held once, not twice
            normalise_columns(columns, normalisers)
            table = arrow_columns(columns[:width], schema)
            if digests is not None:
                digests.write_table(table.select(list(header.identity)).append_column(
                    HASH_COLUMN, pa.array(columns[width], pa.uint64())).append_column(
                    DIGEST_COLUMN, pa.array(columns[width + 1], pa.uint64())))
            del columns
            writer.write_table(table)
            del table
            rows += count
            failpoint("snapshot.chunk")
    if extra:  # the digests part first: a chunk file stands for a chunk read whole, with its digests
        os.replace(f"{part}.tmp", part)
    os.replace(tmp, path)
    return rows, chunk_last


@contextmanager
def _digests_writer(header: RawHeader, part: Path, wanted: bool) -> Iterator[pq.ParquetWriter | None]:
    if not wanted:
        yield None
        return
    with pq.ParquetWriter(f"{part}.tmp", digests_schema(header)) as writer:
        yield writer


def _digests_part(chunk: Path) -> Path:
    return chunk.with_name(chunk.name.replace("snapshot-", "digests-"))


def _join_digests(header: RawHeader, chunks: Sequence[str], target: Path) -> str:
    """The digests parts of every chunk as one file (``stages.diff.digests_schema``), a part at a time."""
    schema = digests_schema(header)
    make_dirs(target.parent)
    with pq.ParquetWriter(f"{target}.tmp", schema) as writer:
        for chunk in chunks:
            writer.write_table(pq.read_table(_digests_part(Path(chunk))).cast(schema))
    os.replace(f"{target}.tmp", target)
    return str(target)
