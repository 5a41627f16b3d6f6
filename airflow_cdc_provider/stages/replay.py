"""Replay: raw files (binlog order) → one upsert file and one delete file (Parquet, typed).

The raw files are read from the end backwards in blocks, never copied reversed. Past the memory budget the
work is split into hash partitions of the uid on disk; each partition holds every record of its keys in the
original order, so the result is the same for any input size.

When the table's columns changed in the range, each raw file holds the columns in force when it was written,
and the upsert file holds them all (``core.schema.layout_plans``): a row from before an ADD COLUMN gets the
value the server gave it (its ``Fill``), a row from after a drop (kept by ``schema_changes: evolve``) NULL.

For a table with a changelog (``positions``), both files end with ``core.changelog.POSITION_COLUMNS``: the
coordinate of each key's surviving record, where its net change comes from. Only the survivors' coordinates are
parsed, a block at a time, so a replay without them does no more work than before.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_cdc_provider.core.changelog import POSITION_COLUMNS
from airflow_cdc_provider.core.records import CorruptRawFile, RawHeader, decode_values
from airflow_cdc_provider.core.replay import (
    BadLine,
    Block,
    SeenKeys,
    bad_uids,
    coordinates,
    parse_block,
    uid_buckets,
)
from airflow_cdc_provider.core.schema import Fill, layout_plans
from airflow_cdc_provider.core.types import arrow_schema, arrow_table, file_schema, parquet_options
from airflow_cdc_provider.core.workdir import DELETE_FILE, FILLS_FILE, UPSERT_FILE
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.storage import make_dirs, new_file, room_for

FILLS_METADATA = "cdc.fills"

BLOCK_SIZE = 8 * 1024 * 1024
BATCH_ROWS = 65536
BEFORE = ord("B")  # an update's before image: never survives, as its U follows it
BATCH_BYTES = 64 * 1024 * 1024  # of records' text: a batch of large rows is written before it reaches BATCH_ROWS
# SeenKeys holds 32 bytes a key, and np.insert copies it while it grows: count 3x.
BYTES_PER_KEY = 96


@dataclass
class ReplayResult:
    upsert_file: str
    delete_file: str
    fills_file: str = ""  # one row: what added columns hold in rows that predate them; "" when none were added
    records: int = 0
    upserts: int = 0
    deletes: int = 0
    partitions: int = 0
    peak_keys: int = 0
    # The upsert file's columns (before any POSITION_COLUMNS): every column the raw files held.
    columns: tuple[tuple[str, str], ...] = ()
    key: tuple[str, ...] = ()
    positions: bool = False  # both files end with POSITION_COLUMNS


def read_header(path: Path) -> tuple[RawHeader, int]:
    with open(path, "rb") as f:
        first = f.readline()
    return RawHeader.parse(first.decode("utf-8", "replace"), path), len(first)


def _line_number(path: Path, header_end: int, block_offset: int, index: int) -> int:
    before = 0
    with open(path, "rb") as f:
        f.seek(header_end)
        left = block_offset - header_end
        while left > 0:  # in blocks: the file may be far larger than memory
            data = f.read(min(left, BLOCK_SIZE))
            if not data:
                break
            before += data.count(b"\n")
            left -= len(data)
    return 1 + before + index + 1


def blocks_backwards(path: Path, block_size: int = BLOCK_SIZE) -> Iterator[Block]:
    """The file's complete record lines as blocks, the last block first.

    A line longer than a block is gathered from the blocks it spans and joined once, when its start is found:
    each byte is read once and copied a fixed number of times, however long the line.
    """
    _, header_end = read_header(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size > header_end:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                raise CorruptRawFile(path, _line_number(path, header_end, size, 0),
                                     "the last line is cut short (no newline at its end)")
        # The start of the line the last block began in the middle of, in pieces, the latest piece first.
        pending: list[bytes] = []
        end = size
        while end > header_end:
            start = max(header_end, end - block_size)
            f.seek(start)
            piece = f.read(end - start)
            end = start
            if start > header_end:
                split = piece.find(b"\n") + 1
                if split == 0:  # inside a line longer than the block: keep gathering it
                    pending.append(piece)
                    continue
                head, piece = piece[:split], piece[split:]
            else:
                head = b""
            offset = start + len(head)
            pending.append(piece)
            data = b"".join(reversed(pending)) if len(pending) > 1 else pending[0]
            pending = [head] if head else []
            if data:
                try:
                    yield parse_block(data)
                except BadLine as bad:
                    raise CorruptRawFile(path, _line_number(path, header_end, offset, bad.index), str(bad)) from None
            del data


def blocks_forwards(path: Path, block_size: int = BLOCK_SIZE) -> Iterator[Block]:
    """The file's complete record lines as blocks, in file order; a line longer than a block is gathered from
    the blocks it spans and joined once, at its end."""
    _, header_end = read_header(path)
    with open(path, "rb") as f:
        f.seek(header_end)
        pending: list[bytes] = []  # the start of a line not yet ended, in pieces
        offset = header_end
        while True:
            chunk = f.read(block_size)
            if not chunk:
                if any(pending):
                    raise CorruptRawFile(path, _line_number(path, header_end, offset, 0),
                                         "the last line is cut short (no newline at its end)")
                return
            cut = chunk.rfind(b"\n") + 1
            if cut == 0:  # inside a line longer than the block
                pending.append(chunk)
                continue
            pending.append(chunk[:cut] if cut < len(chunk) else chunk)
            data = b"".join(pending) if len(pending) > 1 else pending[0]
            pending = [chunk[cut:]] if cut < len(chunk) else []
            del chunk
            try:
                yield parse_block(data)
            except BadLine as bad:
                raise CorruptRawFile(path, _line_number(path, header_end, offset, bad.index), str(bad)) from None
            offset += len(data)
            del data


# The coordinate's columns: binlog file sequence number, end position of the row event, row index in it.
POSITION_FIELDS = tuple(pa.field(name, kind) for name, kind in zip(POSITION_COLUMNS, (pa.int32(), pa.int64(),
                                                                                     pa.int32())))


class _Output:
    """Upsert rows (all columns) and delete rows (key columns) batched into two Parquet files; with
    ``positions``, each row followed by its record's coordinate (POSITION_COLUMNS)."""

    def __init__(self, header: RawHeader, upsert_path: Path, delete_path: Path, positions: bool = False) -> None:
        if header.whole_row:  # the check sends a table with no key to a diff (``core.keys``)
            raise ValueError(f"{header.table} has no key: its changes cannot be replayed from the binlog, where a "
                             "change to one of two equal rows cannot be told from a change to the other.")
        self.schema = file_schema(header)
        self.key_indexes = header.key_indexes()
        self.delete_schema = pa.schema([self.schema.field(i) for i in self.key_indexes])
        self.positions = positions
        # The coordinates of the rows added and not yet written, in their order, in chunks of a block each: held
        # apart from the rows, so that adding a row costs the same with positions as without.
        self.upsert_at: list[np.ndarray] = []
        self.delete_at: list[np.ndarray] = []
        upsert_schema, delete_schema = self.schema, self.delete_schema
        if positions:
            upsert_schema, delete_schema = _positioned(upsert_schema), _positioned(delete_schema)
        self.sinks = [new_file(upsert_path), new_file(delete_path)]
        self.upsert_writer = pq.ParquetWriter(self.sinks[0], upsert_schema, **parquet_options(header.columns))
        self.delete_writer = pq.ParquetWriter(self.sinks[1], delete_schema)
        self.upserts: list[list[Any]] = []
        self.deletes: list[list[Any]] = []
        self.upsert_count = self.delete_count = 0
        self.upsert_bytes = 0

    def hold_coordinates(self, ops: np.ndarray, at: np.ndarray) -> None:
        """The coordinates of the records about to be added, in the order they will be (their ops beside)."""
        deleted = ops == ord("D")
        self.upsert_at.append(at[~deleted])
        self.delete_at.append(at[deleted])

    def add(self, op: int, values: list[Any], size: int) -> None:
        """Add a record's values; ``size`` is its text's length, what its values weigh about."""
        if op == ord("D"):
            self.deletes.append([values[i] for i in self.key_indexes])
            if len(self.deletes) >= BATCH_ROWS:
                self._flush_deletes()
        else:
            self.upserts.append(values)
            self.upsert_bytes += size
            if len(self.upserts) >= BATCH_ROWS:
                self._flush_upserts()

    def flush_full(self) -> None:
        """Write the upserts held once they weigh BATCH_BYTES: called between blocks, when the block read is let
        go, so that a block of one huge record is not held while its values are written."""
        if self.upsert_bytes >= BATCH_BYTES:
            self._flush_upserts()

    def _flush_upserts(self) -> None:
        if self.upserts:
            table = arrow_table(self.upserts, self.schema)
            if self.positions:
                table = _with_coordinates(table, self.upsert_at)
            self.upsert_count += len(self.upserts)
            self.upserts, self.upsert_bytes = [], 0  # the rows go before the table is written
            self.upsert_writer.write_table(table)

    def _flush_deletes(self) -> None:
        if self.deletes:
            table = arrow_table(self.deletes, self.delete_schema)
            if self.positions:
                table = _with_coordinates(table, self.delete_at)
            self.delete_writer.write_table(table)
            self.delete_count += len(self.deletes)
            self.deletes = []

    def close(self) -> None:
        try:
            self._flush_upserts()
            self._flush_deletes()
            self.upsert_writer.close()
            failpoint("replay.write")
            self.delete_writer.close()
        finally:
            for sink in self.sinks:  # the writers leave a file they were handed open
                sink.close()


def _positioned(schema: pa.Schema) -> pa.Schema:
    return pa.schema([*schema, *POSITION_FIELDS], schema.metadata)


def _with_coordinates(table: pa.Table, held: list[np.ndarray]) -> pa.Table:
    """``table`` with the coordinates of its rows, the first ones ``held``; the rest stay held."""
    at = np.concatenate(held) if len(held) > 1 else held[0]
    held[:] = [at[len(table) :]]
    at = at[: len(table)]
    columns = [pa.array(at[:, n]).cast(f.type) for n, f in enumerate(POSITION_FIELDS)]
    return pa.Table.from_arrays([*table.columns, *columns], schema=_positioned(table.schema))


class _OverBudget(Exception):
    def __init__(self, keys: int, bytes_read: int):
        super().__init__(keys, bytes_read)
        self.keys, self.bytes_read = keys, bytes_read


class Layouts:
    """Each raw file's columns (its layout) and how its rows become rows of the combined columns."""

    def __init__(self, files: Sequence[Path], fills: Sequence[Fill]) -> None:
        headers = [read_header(path)[0] for path in files]
        first = headers[0]
        self.layouts: list[RawHeader] = []
        self.of: dict[Path, int] = {}
        for path, header in zip(files, headers):
            if (header.table, header.key) != (first.table, first.key):
                raise CorruptRawFile(path, 1,
                                     f"its header {header} is of another table or key than {files[0]}'s {first}")
            if not self.layouts or header != self.layouts[-1]:
                self.layouts.append(header)
            self.of[path] = len(self.layouts) - 1
        columns, plans = layout_plans([h.columns for h in self.layouts], fills)
        self.header = RawHeader(first.table, columns, first.key)
        # None for a layout that is the combined one already: its rows are taken as they are.
        self.plans = [None if all(i == n for n, (i, _) in enumerate(plan)) and len(h.columns) == len(plan) else plan
                      for h, plan in zip(self.layouts, plans)]

    def plan(self, path: Path) -> list[tuple[int | None, object]] | None:
        return self.plans[self.of[path]]


def _replay_into(files: Sequence[Path], output: _Output, layouts: Layouts, key_limit: int,
                 block_size: int) -> tuple[int, int]:
    """Replay ``files`` (binlog order) into ``output``; returns (records, peak keys)."""
    seen, records, bytes_read = SeenKeys(), 0, 0
    for path in reversed(files):
        plan = layouts.plan(path)
        for block in blocks_backwards(path, block_size):
            records += len(block.starts)
            bytes_read += len(block.data)
            survivors = seen.survivors(block)
            if (block.ops[survivors] == BEFORE).any():  # its U, later in the file, would have been seen first
                i = int(survivors[block.ops[survivors] == BEFORE][-1])
                raise CorruptRawFile(path, None, f"a before image (B) without the update (U) of its key after it: "
                                                 f"{block.line(i)[:200]!r}")
            bad = bad_uids(block, survivors)
            if len(bad):
                raise CorruptRawFile(path, None, f"the uid is not 32 hex digits: {block.line(int(bad[-1]))[:200]!r}")
            if output.positions:
                try:
                    output.hold_coordinates(block.ops[survivors], coordinates(block, survivors))
                except BadLine as exc:
                    raise CorruptRawFile(path, None, str(exc)) from None
            data = memoryview(block.data)
            for i, start, end, op in zip(survivors.tolist(), block.starts[survivors].tolist(),
                                         block.ends[survivors].tolist(), block.ops[survivors].tolist()):
                try:
                    # Decoded from the block in place: a line of hundreds of megabytes is not copied first.
                    values = decode_values(str(data[block.data.index(b"\t", start + 35, end) + 1 : end], "utf-8"))
                except ValueError as exc:
                    raise CorruptRawFile(path, None,
                                         f"a record's values cannot be read ({exc}): {block.line(i)[:200]!r}") from None
                if plan is not None:
                    values = [values[j] if j is not None else constant for j, constant in plan]
                output.add(op, values, end - start)
            del block, data  # not held while the next block is read (a block may be one line of gigabytes)
            output.flush_full()
            if len(seen) > key_limit:
                raise _OverBudget(len(seen), bytes_read)
    return records, len(seen)


def _partition(files: Sequence[Path], layouts: Layouts, parts: int, digit: int, work: Path,
               block_size: int) -> list[list[Path]]:
    """Split records by hex digits [digit, digit+4) of their uid into ``parts`` groups of files, keeping their
    order; each group has one file per layout met, with that layout's header."""
    groups: list[list[Path]] = [[] for _ in range(parts)]
    outs: list[Any] = []
    layout = None
    try:
        for path in files:
            if layouts.of[path] != layout:  # the columns changed: every group goes on in a new file
                for out in outs:
                    out.close()
                layout = layouts.of[path]
                header = layouts.layouts[layout].format().encode("utf-8")
                outs = []
                for p in range(parts):
                    part = work / f"part-{digit}-{p:05d}-{os.urandom(4).hex()}.raw"
                    layouts.of[part] = layout
                    groups[p].append(part)
                    outs.append(new_file(part))
                    outs[-1].write(header)
            for block in blocks_forwards(path, block_size):
                which = uid_buckets(block, digit, parts)
                data = block.data
                for p in np.unique(which):
                    idx = np.flatnonzero(which == p)
                    outs[p].write(b"".join(data[s : e + 1] for s, e in zip(block.starts[idx], block.ends[idx])))
                del block, data  # not held while the next block is read
    finally:
        for out in outs:
            out.close()
    return groups


def _concat(parts: Sequence[Path], target: Path, options: dict[str, Any]) -> None:
    schema = pq.read_schema(parts[0])
    with new_file(target) as sink, pq.ParquetWriter(sink, schema, **options) as writer:
        for part in parts:
            file = pq.ParquetFile(part)
            # Row group by row group: each was written bounded by bytes (``_Output``), so memory stays so too.
            for i in range(file.num_row_groups):
                writer.write_table(file.read_row_group(i))


def write_fills(path: Path, header: RawHeader, fills: Sequence[Fill]) -> None:
    """One row holding each added column's constant, typed as the upsert file's column; the sources (the
    columns a renamed one takes its values from) in the metadata. The merge fills the table's rows from it."""
    types = {name.lower(): (name, ctype) for name, ctype in header.columns}
    columns = [types[f.column.lower()] for f in fills]
    schema = arrow_schema(columns).with_metadata(
        {FILLS_METADATA: json.dumps([{"column": f.column, "sources": list(f.sources)} for f in fills])})
    with new_file(path) as sink:
        pq.write_table(arrow_table([[f.value for f in fills]], schema), sink)


def replay(
    raw_files: Sequence[str | os.PathLike[str]],
    upsert_file: str | os.PathLike[str],
    delete_file: str | os.PathLike[str],
    memory_budget: int = 512 * 1024 * 1024,
    block_size: int = BLOCK_SIZE,
    fills: Sequence[Fill] = (),
    fills_file: str | os.PathLike[str] | None = None,
    positions: bool = False,
) -> ReplayResult:
    """Replay ``raw_files`` (in binlog order) into ``upsert_file`` and ``delete_file``.

    ``fills`` (from the extraction) say what columns added in the range hold in rows that predate them; with
    any, they are written to ``fills_file`` too (default: ``fills.parquet`` beside the upsert file), for the
    merge to fill the table's other rows. With ``positions`` (a table with a changelog), both files end with
    POSITION_COLUMNS: the coordinate of each key's surviving record. The files appear only when the whole replay
    succeeded (written beside, then renamed).
    """
    files = [Path(f) for f in raw_files]
    if not files:
        raise ValueError("replay needs at least one raw file (an extraction with no changes still writes one).")
    with room_for(Path(upsert_file).parent, f"the replay of {len(files)} raw files"):
        return _replay(files, upsert_file, delete_file, memory_budget, block_size, fills, fills_file, positions)


def _replay(files: list[Path], upsert_file: str | os.PathLike[str], delete_file: str | os.PathLike[str],
            memory_budget: int, block_size: int, fills: Sequence[Fill], fills_file: str | os.PathLike[str] | None,
            positions: bool) -> ReplayResult:
    layouts = Layouts(files, fills)
    header = layouts.header
    upsert_path, delete_path = Path(upsert_file), Path(delete_file)
    key_limit = max(1024, memory_budget // BYTES_PER_KEY)
    make_dirs(upsert_path.parent)
    work = Path(tempfile.mkdtemp(prefix=".replay-", dir=upsert_path.parent))
    try:
        result = ReplayResult(str(upsert_path), str(delete_path), columns=header.columns, key=header.key,
                              positions=positions)
        done: list[tuple[Path, Path]] = []
        pending: list[tuple[list[Path], int]] = [(files, 0)]
        while pending:
            group, digit = pending.pop()
            # Each group writes files of its own, so that a group that outgrows the budget leaves nothing behind.
            n = len(done)
            output = _Output(header, work / f"u{n}-{digit}.parquet", work / f"d{n}-{digit}.parquet", positions)
            try:
                records, peak = _replay_into(group, output, layouts, key_limit, block_size)
            except _OverBudget as over:
                output.close()
                if digit + 4 > 28:
                    raise RuntimeError(
                        f"replay could not split the keys under the memory budget {memory_budget}") from over
                total = sum(p.stat().st_size for p in group)
                estimate = over.keys * total / max(1, over.bytes_read)
                parts = int(min(4096, max(2, np.ceil(2 * estimate / key_limit))))
                result.partitions += parts
                pending.extend((g, digit + 4) for g in _partition(group, layouts, parts, digit, work, block_size))
                continue
            except BaseException:
                output.close()
                raise
            output.close()
            result.records += records
            result.peak_keys = max(result.peak_keys, peak)
            result.upserts += output.upsert_count
            result.deletes += output.delete_count
            done.append((work / f"u{n}-{digit}.parquet", work / f"d{n}-{digit}.parquet"))
        if fills:
            fills_path = Path(fills_file) if fills_file else upsert_path.with_name(FILLS_FILE)
            write_fills(work / FILLS_FILE, header, fills)
            os.replace(work / FILLS_FILE, fills_path)
            result.fills_file = str(fills_path)
        if len(done) == 1:
            os.replace(done[0][0], upsert_path)
            os.replace(done[0][1], delete_path)
        else:
            _concat([u for u, _ in done], work / UPSERT_FILE, parquet_options(header.columns))
            _concat([d for _, d in done], work / DELETE_FILE, {})
            os.replace(work / UPSERT_FILE, upsert_path)
            os.replace(work / DELETE_FILE, delete_path)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)
