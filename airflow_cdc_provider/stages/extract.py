"""Extraction: row events of the configured tables, from a watermark to a high watermark, into raw files.

The reader is stopped here, by coordinates, and never relies on the library to stop: on MariaDB its
non-blocking mode reconnects at the end of the log and reads it again forever, and its ``end_log_pos`` ignores
the file. The range ends exactly at the high watermark, which was read from the server's binlog status and so
lies at a transaction boundary; the watermark handed on is that one.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants.NONE_SOURCE import EMPTY_SET
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.records import RawHeader, key_uid
from airflow_cdc_provider.core.values import binlog_normaliser, normalise_rows
from airflow_cdc_provider.core.watermark import Watermark, split_binlog_file
from airflow_cdc_provider.stages.raw_files import MAX_RAW_BYTES, RawFileWriter


class ExtractionError(CdcError):
    """The binlog could not be read to the high watermark; nothing of this range is handed on."""


class SchemaChanged(CdcError):
    """A row event whose columns differ from the table's columns when the extraction started."""


@dataclass
class ExtractResult:
    start: Watermark
    end: Watermark
    files: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    events: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start.to_dict(), "end": self.end.to_dict(), "files": self.files,
                "counts": self.counts, "events": self.events}


class _TableSink:
    """One table's raw files, and what it needs to turn a row image into a record."""

    def __init__(self, header: RawHeader, writer: RawFileWriter) -> None:
        self.header, self.writer = header, writer
        self.names = header.column_names
        self.key_indexes = header.key_indexes()
        self.normalisers = [(i, f) for i, (_, ctype) in enumerate(header.columns) if (f := binlog_normaliser(ctype))]
        self.sets = {name for name, ctype in header.columns if ctype.lower().startswith("set(")}

    def image(self, values: dict[str, Any], none_sources: dict[str, str]) -> list[Any]:
        if self.sets and none_sources:
            # The reader gives None for an empty SET too; only its none_sources tell it from NULL.
            values = {name: set() if none_sources.get(name) == EMPTY_SET and name in self.sets else value
                      for name, value in values.items()}
        row = list(values.values())
        if self.normalisers:
            normalise_rows((row,), self.normalisers)
        return row

    def uid(self, row: list[Any]) -> str:
        return key_uid([row[i] for i in self.key_indexes])


def extract(
    connection_settings: dict[str, Any],
    headers: Sequence[RawHeader],
    start: Watermark,
    high: Watermark,
    out_dir: str | Path,
    max_raw_bytes: int = MAX_RAW_BYTES,
    replica_server_id: int | None = None,
    stop_before: dt.datetime | None = None,
) -> ExtractResult:
    """Read the row events of the tables in ``headers`` in (start, high] into raw files under ``out_dir``.

    With ``stop_before``, the range ends earlier: before the first transaction that began at or after that
    moment (binlog event times are whole seconds). Binlog order is commit order, so the range is still a
    state the source was in. ``result.end`` is then that transaction's position, without a GTID (the caller
    looks it up).

    ``connection_settings`` holds host, port, user and password of the capture user (never logged).
    """
    if high < start:
        raise ExtractionError(f"The high watermark {high} is before the start {start}: the range is empty backwards.")
    sinks = {}
    for h in headers:
        name = TableName.parse(h.table)
        sinks[(name.schema, name.table)] = _TableSink(h, RawFileWriter(out_dir, h.table, h, max_raw_bytes))
    result = ExtractResult(start, high)
    try:
        if start.coordinate < high.coordinate:
            result.events, end = _read(connection_settings, sinks, start, high, replica_server_id, stop_before)
            if end is not None:
                result.end = Watermark(end[0], end[1], server_id=high.server_id, server_uuid=high.server_uuid)
        for sink in sinks.values():
            result.files[sink.header.table] = sink.writer.close()
            result.counts[sink.header.table] = dict(sink.writer.counts)
    except BaseException:
        for sink in sinks.values():
            sink.writer.abort()
        raise
    return result


def _read(settings: dict[str, Any], sinks: dict, start: Watermark, high: Watermark, server_id: int | None,
          stop_before: dt.datetime | None) -> tuple[int, tuple[str, int] | None]:
    """Returns the number of row events written, and the end (file, position) when ``stop_before`` cut the range."""
    stream = BinLogStreamReader(
        connection_settings={"host": settings["host"], "port": settings["port"], "user": settings["user"],
                             "password": settings["password"]},
        # A replica id of its own: the server drops an older dump connection with the same id.
        server_id=server_id or random.randint(1 << 20, (1 << 32) - 1),
        resume_stream=True,
        log_file=start.file,
        log_pos=start.position,
        blocking=False,
        # File and position are read as MySQL does on MariaDB too: the MariaDB mode re-reads the log forever.
        is_mariadb=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, RotateEvent, XidEvent, QueryEvent,
                     *((GtidEvent, MariadbGtidEvent) if stop_before else ())],
        only_schemas=sorted({schema for schema, _ in sinks}),
        only_tables=sorted({table for _, table in sinks}),
        enable_logging=False,
    )
    high_at = high.coordinate
    seq = split_binlog_file(start.file)[1]
    last = start.coordinate
    cut = stop_before.timestamp() if stop_before is not None else None
    between_transactions = True
    events = 0
    try:
        for event in stream:
            end_pos = event.packet.log_pos
            if isinstance(event, RotateEvent):
                if end_pos:  # a real rotate ends the current file; the first one sent is artificial (0)
                    last = _advance(last, (seq, end_pos))
                next_seq = split_binlog_file(event.next_binlog)[1]
                if end_pos and next_seq <= seq:
                    raise ExtractionError(f"The binlog went backwards: {event.next_binlog} follows file {seq}.")
                seq = next_seq
                if last >= high_at:
                    return events, None
                if end_pos:  # a range that ends here ends at the start of the next file
                    last = (seq, 4)
                continue
            at = (seq, end_pos)
            if at > high_at:
                return events, None  # the first event of a transaction after the high watermark: not ours
            if cut is not None and between_transactions and event.timestamp >= cut:
                # The first event of a transaction that began at or after stop_before: the range ends before it.
                return events, (_file_name(start.file, last[0]), last[1])
            between_transactions = isinstance(event, XidEvent) or (
                isinstance(event, QueryEvent) and _query_text(event) not in ("BEGIN", "XA START"))
            last = _advance(last, at)
            if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                sink = sinks.get((event.schema, event.table))
                if sink is not None:
                    _write_rows(sink, event, at)
                    events += 1
            if last == high_at:
                return events, None
        # The server said end of log. Events the reader filters out (checkpoints, other tables) are not
        # yielded but still move its position: where it stopped tells whether the high watermark was passed.
        reached = (split_binlog_file(stream.log_file)[1], stream.log_pos or 0)
    finally:
        stream.close()
    if reached >= high_at:
        return events, None
    raise ExtractionError(
        f"The binlog ended at {stream.log_file}:{stream.log_pos}, before the high watermark {high}. The server "
        "may have been restarted or its binlog reset; run the task again."
    )


def _query_text(event: QueryEvent) -> str:
    query = event.query if isinstance(event.query, str) else event.query.decode("utf-8", "replace")
    return query.strip().upper()


def _file_name(like: str, sequence: int) -> str:
    """The name of binlog file number ``sequence``, spelt like ``like`` (base name, zero-padded digits)."""
    base, number = like.rsplit(".", 1)
    return f"{base}.{sequence:0{len(number)}d}"


def _advance(last: tuple[int, int], at: tuple[int, int]) -> tuple[int, int]:
    if at <= last:
        raise ExtractionError(
            f"The binlog reader went backwards, from file {last[0]} position {last[1]} to {at[0]}:{at[1]}; stopped "
            "so that nothing is read twice. Run the task again."
        )
    return at


def _write_rows(sink: _TableSink, event: Any, at: tuple[int, int]) -> None:
    columns = tuple(c.name for c in event.columns)
    if columns != sink.names:
        where = f"binlog file {at[0]}, end position {at[1]}"
        if any(name.startswith("UNKNOWN_COL") for name in columns):
            raise SchemaChanged(
                f"The row event of {sink.header.table} at {where} carries no column names: the server wrote it "
                "with binlog_row_metadata other than FULL. Set binlog_row_metadata=FULL and take a fresh snapshot."
            )
        raise SchemaChanged(
            f"The row event of {sink.header.table} at {where} has the columns {list(columns)}, but the table had "
            f"{list(sink.names)} when this extraction started: its definition changed in the range. Take a fresh "
            "snapshot of the table."
        )
    write = sink.writer.write
    seq, pos = at
    if isinstance(event, UpdateRowsEvent):
        for n, row in enumerate(event.rows):
            before = sink.image(row["before_values"], row["before_none_sources"])
            after = sink.image(row["after_values"], row["after_none_sources"])
            old_uid, new_uid = sink.uid(before), sink.uid(after)
            if old_uid != new_uid:  # the key changed: the old key is gone
                write("D", old_uid, (seq, pos, n), before)
            write("U", new_uid, (seq, pos, n), after)
    else:
        op = "I" if isinstance(event, WriteRowsEvent) else "D"
        for n, row in enumerate(event.rows):
            image = sink.image(row["values"], row["none_sources"])
            write(op, sink.uid(image), (seq, pos, n), image)
