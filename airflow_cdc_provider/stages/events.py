"""Events: raw files (binlog order) → one events file, every row event of the range in binlog order as changelog
rows, for a table whose changelog has ``mode: all`` (``core.changelog``).

The raw files are read forwards. Each record becomes a row of the upsert file's columns (the same layout plans
and fills as replay, ``stages.replay.Layouts``), with its change type, its ordinal and its binlog coordinate:

    I             → insert
    B then its U  → update_preimage (B's values) + update_postimage (U's values), one ordinal
    D             → delete (the new key of a key change follows as a U without a B: an insert, an ordinal of its own)
    U without B   → insert

The file is written a batch at a time, as replay writes, beside its name and renamed when whole.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_cdc_provider.core.changelog import CHANGE_COLUMNS, DELETE, INSERT, UPDATE_POSTIMAGE, UPDATE_PREIMAGE
from airflow_cdc_provider.core.records import CorruptRawFile, RawRecord, parse_record
from airflow_cdc_provider.core.replay import COORDINATE_LIMITS
from airflow_cdc_provider.core.schema import Fill
from airflow_cdc_provider.core.types import arrow_table, file_schema, parquet_options
from airflow_cdc_provider.stages.replay import (
    BATCH_BYTES,
    BATCH_ROWS,
    BLOCK_SIZE,
    POSITION_FIELDS,
    Layouts,
    blocks_forwards,
)
from airflow_cdc_provider.storage import make_dirs, new_file, room_for

(CHANGE_TYPE, _), (CHANGE_ORDINAL, _) = CHANGE_COLUMNS[:2]
EVENT_FIELDS = (pa.field(CHANGE_TYPE, pa.string()), pa.field(CHANGE_ORDINAL, pa.int64()), *POSITION_FIELDS)


@dataclass
class EventsResult:
    events_file: str
    records: int = 0  # raw records read
    rows: int = 0  # rows written: an update is two
    changes: int = 0  # ordinals given: an update is one, a key change two
    columns: tuple[tuple[str, str], ...] = ()  # the table's columns in the file (before EVENT_FIELDS)


class _EventsOutput:
    """Event rows batched into one Parquet file: the table's columns, then EVENT_FIELDS."""

    def __init__(self, schema: pa.Schema, path: Path, options: dict[str, Any]) -> None:
        self.schema = schema
        self.sink = new_file(path)
        self.writer = pq.ParquetWriter(self.sink, pa.schema([*schema, *EVENT_FIELDS], schema.metadata), **options)
        self.values: list[list[Any]] = []
        self.types: list[str] = []
        self.ordinals: list[int] = []
        self.coordinates: list[tuple[int, int, int]] = []
        self.bytes = 0

    def add(self, change_type: str, ordinal: int, record: RawRecord, values: list[Any], size: int) -> None:
        self.values.append(values)
        self.types.append(change_type)
        self.ordinals.append(ordinal)
        self.coordinates.append(record.coordinate)
        self.bytes += size
        if len(self.values) >= BATCH_ROWS or self.bytes >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.values:
            return
        table = arrow_table(self.values, self.schema)
        at = np.array(self.coordinates, np.int64).reshape(-1, 3)
        columns = [pa.array(self.types, pa.string()), pa.array(self.ordinals, pa.int64()),
                   *(pa.array(at[:, n]).cast(f.type) for n, f in enumerate(POSITION_FIELDS))]
        self.writer.write_table(pa.Table.from_arrays([*table.columns, *columns],
                                                     schema=pa.schema([*self.schema, *EVENT_FIELDS],
                                                                      self.schema.metadata)))
        self.values, self.types, self.ordinals, self.coordinates, self.bytes = [], [], [], [], 0

    def close(self) -> None:
        try:
            self.flush()
            self.writer.close()
        finally:
            self.sink.close()  # the writer leaves a file it was handed open


def write_events(raw_files: Sequence[str | os.PathLike[str]], out_path: str | os.PathLike[str],
                 fills: Sequence[Fill] = (), block_size: int = BLOCK_SIZE) -> EventsResult:
    """Write every record of ``raw_files`` (in binlog order) as a changelog row into ``out_path``.

    ``fills`` are the extraction's, as replay takes them. The file appears only when whole. A ``B`` not followed
    by the ``U`` of its key at its coordinate is a corrupt raw file.
    """
    files = [Path(f) for f in raw_files]
    if not files:
        raise ValueError("write_events needs at least one raw file (an extraction with no changes still writes one).")
    out = Path(out_path)
    with room_for(out.parent, f"the events of {len(files)} raw files"):
        make_dirs(out.parent)
        work = Path(tempfile.mkdtemp(prefix=".events-", dir=out.parent))
        try:
            result = _write_events(files, work / out.name, fills, block_size)
            os.replace(work / out.name, out)
            result.events_file = str(out)
            return result
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _write_events(files: list[Path], path: Path, fills: Sequence[Fill], block_size: int) -> EventsResult:
    layouts = Layouts(files, fills)
    header = layouts.header
    output = _EventsOutput(file_schema(header), path, parquet_options(header.columns))
    result = EventsResult(str(path), columns=header.columns)
    before: tuple[RawRecord, list[Any], int] | None = None  # a B waiting for its U
    ordinal = 0
    try:
        for path_in in files:
            plan = layouts.plan(path_in)
            for block in blocks_forwards(path_in, block_size):
                for i in range(len(block.starts)):
                    line = block.line(i)
                    record = parse_record(line.decode("utf-8"), path_in)
                    if not all(c <= limit for c, limit in zip(record.coordinate, COORDINATE_LIMITS)):
                        raise CorruptRawFile(path_in, None, f"the coordinate is not within {COORDINATE_LIMITS}: "
                                                            f"{line[:200]!r}")
                    values = list(record.values)
                    if plan is not None:
                        values = [values[j] if j is not None else constant for j, constant in plan]
                    result.records += 1
                    op, size = record.op, len(line)
                    if before is not None:
                        pre, pre_values, pre_size = before
                        if op != "U" or (record.uid, record.coordinate) != (pre.uid, pre.coordinate):
                            raise CorruptRawFile(path_in, None, "a before image (B) is not followed by the "
                                                 f"update (U) of its key at its coordinate but by {line[:200]!r}")
                        ordinal += 1
                        output.add(UPDATE_PREIMAGE, ordinal, pre, pre_values, pre_size)
                        output.add(UPDATE_POSTIMAGE, ordinal, record, values, size)
                        result.rows += 2
                        before = None
                        continue
                    if op == "B":
                        before = (record, values, size)
                        continue
                    ordinal += 1
                    output.add(DELETE if op == "D" else INSERT, ordinal, record, values, size)
                    result.rows += 1
                del block  # not held while the next block is read
        if before is not None:
            raise CorruptRawFile(files[-1], None, "the last record is a before image (B) without its update (U)")
    finally:
        output.close()
    result.changes = ordinal
    return result
