"""Extraction: row events of the configured tables, from a watermark to a high watermark, into raw files.

The reader is stopped here, by coordinates, and never relies on the library to stop: on MariaDB its
non-blocking mode reconnects at the end of the log and reads it again forever, and its ``end_log_pos`` ignores
the file. The range ends exactly at the high watermark, which was read from the server's binlog status and so
lies at a transaction boundary; the watermark handed on is that one.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pymysql
from pymysqlreplication.constants.BINLOG import PARTIAL_UPDATE_ROWS_EVENT
from pymysqlreplication.constants.NONE_SOURCE import EMPTY_SET
from pymysqlreplication.json_binary import JsonDiff
from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

from airflow_cdc_provider.core.binlog_columns import ENUM, SET, TEXT_CODES, column_type_of, text_charset
from airflow_cdc_provider.core.binlog_events import IN_PAYLOAD, XID, EventType, Kind, event_type
from airflow_cdc_provider.core.charsets import UTF8_NAMES, UndecodableText, ascii_compatible, text_decoder
from airflow_cdc_provider.core.charsets import known as known_charset
from airflow_cdc_provider.core.contract import AddedColumn, ColumnChange
from airflow_cdc_provider.core.errors import CdcError, SourceConnectionLost, mysql_error_said
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.partitioning import BadPartitionSpec, Partitioning, metastore_value
from airflow_cdc_provider.core.records import RawHeader, decode_values, encode_values, key_uid
from airflow_cdc_provider.core.row_images import BinlogColumn, RowImageDecoder, UndecodableValue, plan_decoder
from airflow_cdc_provider.core.schema import (
    Fill,
    SchemaChange,
    UnknownDefault,
    added_columns,
    check_changes,
    landing,
    logged_as,
    reload_reason,
)
from airflow_cdc_provider.core.statements import (
    ROLLBACK,
    ROLLBACK_TO,
    Effect,
    TableEffect,
    classify,
    holds_every_character,
    may_name,
    retyping_keeps_values,
)
from airflow_cdc_provider.core.types import ColumnType
from airflow_cdc_provider.core.values import binlog_normaliser, normalise_rows
from airflow_cdc_provider.core.watermark import Watermark, split_binlog_file
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.stages.decode_workers import (
    DELETE,
    INSERT,
    UPDATE,
    Answer,
    DecodePlan,
    DecodeWorkers,
    Item,
    records_of,
)
from airflow_cdc_provider.stages.raw_files import MAX_RAW_BYTES, RawFileWriter
from airflow_cdc_provider.storage import room_for


class ExtractionError(CdcError):
    """The binlog could not be read to the high watermark; nothing of this range is handed on."""


class MissingRowMetadata(CdcError):
    """A row event without column names: the server does not log binlog_row_metadata=FULL."""


class ChainBroken(CdcError):
    """The table's rows may have changed in the range in a way its row events do not say: from there on the binlog
    cannot bring the copy level. ``why`` says what happened and where; the message adds what became of the table
    and the way on, for a run that stops the table (``run: on_broken_chain: stop``). A run that heals it instead
    brings it level by a diff (``stages.heal``)."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(f"{why} {_STOPPED} {_FRESH}")


class TableReplaced(ChainBroken):
    """A statement changed the table's rows without row events in the range (truncated, dropped, renamed, created
    again, a partition dropped…): row events cannot follow that."""


class StatementNotUnderstood(ChainBroken):
    """A statement the capture does not understand may name the table."""


class EventNotUnderstood(ChainBroken):
    """An event the capture cannot follow is in the range."""


class RowsUndone(ChainBroken):
    """Row events of the table may not have happened: their transaction was rolled back or only prepared."""


class PartialRowImage(ChainBroken):
    """A row event whose image leaves columns out (``binlog_row_image`` MINIMAL or NOBLOB, on the server or in the
    session that wrote it), or holds a JSON column's change as a diff (``binlog_row_value_options=PARTIAL_JSON``):
    the copy's row cannot be written from part of it, and is never guessed."""


class ColumnsRetyped(ChainBroken):
    """A change of the table's columns that no merge onto its version can follow: a column whose Hive type changes,
    or a change to its key (``core.schema.reload_reason``). The heal loads the table anew (``stages.heal``)."""


class RowsNotDecoded(CdcError):
    """The binlog reader could not decode a row event of the table (a value it does not know)."""


class UnreadableText(CdcError):
    """A text value (or an ENUM or SET's members) that cannot be read in its column's character set."""


class PartitionSourceChanged(CdcError):
    """The column a table is partitioned by was dropped, renamed or retyped in the range, so that the partition
    its rows were in can no longer be told."""


@dataclass
class ExtractResult:
    start: Watermark
    end: Watermark
    files: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    events: int = 0
    headers: dict[str, RawHeader] = field(default_factory=dict)  # each table's columns at the end of the range
    schema_changes: dict[str, list[SchemaChange]] = field(default_factory=dict)
    fills: dict[str, list[Fill]] = field(default_factory=dict)  # what added columns hold in earlier rows
    failed: dict[str, CdcError] = field(default_factory=dict)  # tables left out of the range, with why
    # A partitioned table's partitions rows left (``_TableSink.note_left``), as the metastore writes them, sorted.
    left_partitions: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def check(self) -> ExtractResult:
        """Raise the first table's failure, if any (for a caller of one table); else return the result."""
        for error in self.failed.values():
            raise error
        return self



def reported(change: SchemaChange) -> ColumnChange:
    """A schema change as the run reports it."""
    return ColumnChange(table=change.table, at=change.at, ddl=change.ddl, before=change.before, after=change.after,
                        renames=change.renames, change=change.describe())


def added_columns_of(fills: Sequence[Fill]) -> tuple[AddedColumn, ...]:
    """Fills as the extraction hands them to the replay: each constant in the raw records' encoding."""
    return tuple(AddedColumn(column=f.column, sources=f.sources, value=encode_values([f.value]),
                             needs_value=f.needs_value) for f in fills)


def fills_of(added: Sequence[AddedColumn]) -> list[Fill]:
    return [Fill(a.column, a.sources, decode_values(a.value)[0], a.needs_value) for a in added]


_RANGE_START = "the start of the range"


@dataclass(frozen=True)
class TableRange:
    """One table of a pass, as ``extract`` takes it: its columns at its start, where its raw files go, and how
    its events are taken."""

    header: RawHeader  # its columns at its start, as the previous run captured them
    out_dir: str | Path  # its raw files' directory
    definition: RawHeader | None = None  # its definition now: the types of the columns added in the range
    # A later start than the range's (its own committed watermark): the events up to it are the table's already.
    start: Watermark | None = None
    schema_changes: str = "strict"  # its policy for changes of columns (``core.schema``)
    partitioning: Partitioning | None = None  # a partitioned table's, as the check bound it
    # Its changelog keeps every row event (``mode: all``): an update that keeps its key is written as its before
    # image (B) then its after image (U).
    before_images: bool = False


class _SchemaTrail:
    """One table's changes of columns met in the range, and what the range's ALTERs said about them."""

    def __init__(self, start: RawHeader, now: RawHeader) -> None:
        self.now = now  # the definition when the extraction began: the types of added columns
        self.start = start.columns
        self.changes: list[SchemaChange] = []
        self.last_ddl: str | None = None  # the last ALTER TABLE of this table, with its position
        self.renames: list[tuple[str, str]] = []  # columns the ALTERs since the last change renamed
        self.ddl_dropped: set[str] = set()  # columns the ALTERs of the range dropped, lower-cased
        self.ddl_since_rows = False  # an ALTER came after the last row event

    def record(self, before: RawHeader, after: RawHeader, where: str) -> None:
        self.changes.append(SchemaChange(before.table, where, self.last_ddl, before.columns, after.columns,
                                         tuple(self.renames)))
        self.renames = []

    def alter(self, shown: str, effect: TableEffect) -> list[str]:
        """An ALTER of the table, noted; the columns it added again (dropped by it or by an earlier ALTER)."""
        self.last_ddl, self.ddl_since_rows = shown, True
        self.renames += list(effect.renames)
        readded = [*effect.readded, *(d.name for d in effect.added if d.name.lower() in self.ddl_dropped)]
        self.ddl_dropped |= {column.lower() for column in effect.dropped}
        self.ddl_dropped -= {column.lower() for column in readded}
        return readded

    def changed_since(self, header: RawHeader) -> bool:
        """An ALTER after the last row event left the table otherwise than ``header``: its result is the
        definition now."""
        return self.ddl_since_rows and [(n, landing(t)) for n, t in self.now.columns] != [
            (n, landing(t)) for n, t in header.columns]

    def fills(self, table: str, defaults: Callable[[str, Sequence[str]], dict[str, Any]] | None) -> list[Fill]:
        """The added columns' fills, with the constants the server gave existing rows looked up."""
        fills = added_columns(self.start, self.changes)
        wanted = [f.column for f in fills if f.needs_value]
        if not wanted:
            return fills
        if defaults is None:
            raise UnknownDefault(f"The columns {wanted} were added to {table} in the range, and no way to look up "
                                 "their defaults was given.")
        values = defaults(table, wanted)
        return [Fill(f.column, f.sources, values[f.column], True) if f.needs_value else f for f in fills]


class _Texts:
    """How one table's string columns are read, in the character set each row event's table map gives them.

    The reader decodes text by its own table of character sets: some right, some not at all (it hands over
    ucs2 or macce bytes as they are), some wrongly (utf16 and utf32 as little-endian, latin1 as Python's
    cp1252, which refuses five bytes MySQL's latin1 has), and it reads ENUM and SET members as UTF-8
    whatever their character set. So every text column is read as bytes and decoded here, by
    ``core.charsets``, as the server converts it; members outside UTF-8 come from the column's definition.
    """

    def __init__(self, table: str, charsets_now: Callable[[str], dict[str, str]] | None) -> None:
        self.table = table
        self.texts: list[tuple[int, str, str, Callable[[bytes], str]]] = []  # index, name, charset, its decoder
        self.members: dict[int, tuple[str, ...]] = {}  # ENUM and SET members the reader cannot read, by index
        self.binaries: list[int] = []  # the binary strings' indexes
        self.column_charsets: dict[str, str] = {}  # each string column's character set, by lower-cased name
        self._lookup = charsets_now  # the columns' character sets now, by table
        self._charsets_now: dict[str, str] | None = None

    def plan(self, columns: list[Any], known: dict[str, str], where: str) -> None:
        """Which of ``columns`` are text in which character set, and the ENUM and SET members the reader cannot
        read; a column whose character set changed since the last event, checked."""
        before = self.column_charsets
        self.texts, self.members, self.binaries, self.column_charsets = [], {}, [], {}
        for i, column in enumerate(columns):
            if (code := column.type) not in _TEXT_TYPES:
                continue
            charset = text_charset(column) or self._charset_now(column.name, where)
            self.column_charsets[column.name.lower()] = charset
            if charset == "binary":
                if code in TEXT_CODES:
                    self.binaries.append(i)
                continue
            if not known_charset(charset):
                raise UnreadableText(
                    f"The column {column.name} of {self.table} is in the character set {charset!r}, which the "
                    "capture cannot read. Convert the column to utf8mb4, or leave the table out of the configuration.")
            if code not in (ENUM, SET):
                self.texts.append((i, column.name, charset, text_decoder(charset)))
            elif charset not in _MEMBERS_AS_UTF8:
                self.members[i] = self._members(column, charset, known.get(column.name), where)
        self._check_conversions(before, columns, where)
        self.set_members(columns)  # before the columns' types are read: they hold the members

    def charsets(self) -> dict[int, str]:
        """The text columns' character sets, by index."""
        return {i: charset for i, _, charset, _ in self.texts}

    def _charset_now(self, column: str, where: str) -> str:
        """The column's character set now, for a collation the binlog reader does not know."""
        if self._charsets_now is None and self._lookup is not None:
            self._charsets_now = self._lookup(self.table)
        charset = (self._charsets_now or {}).get(column)
        if charset is None:
            raise UnreadableText(
                f"The column {column} of {self.table} has a collation the binlog reader does not know in the "
                f"row event at {where}, and its character set cannot be looked up: it is no longer in the table. "
                "Trigger a run with fresh_snapshot=true.")
        return charset

    def _members(self, column: Any, charset: str, ctype: str | None, where: str) -> tuple[str, ...]:
        """An ENUM or SET's members in a character set other than UTF-8, from its definition.

        The table map holds them in the column's character set, and the reader decodes them as UTF-8 (a member
        it cannot decode becomes ''). The definition (information_schema, which the server converts) has them
        right; it is the one the event was written with when it has as many members, and the members the reader
        did read as ASCII are the definition's.
        """
        logged = list(column.enum_values[1:] if column.type == ENUM else column.set_values or [])
        kind = "ENUM" if column.type == ENUM else "SET"
        parsed = ColumnType.parse(ctype) if ctype else None
        members = tuple(parsed.members()) if parsed is not None and parsed.base == kind.lower() else None
        ascii_based = ascii_compatible(charset)
        if members is None or len(members) != len(logged) or any(
                ascii_based and m.isascii() and m and m != d for m, d in zip(logged, members)):
            raise UnreadableText(
                f"The {kind} column {column.name} of {self.table} is in the character set {charset}, whose "
                f"members the binlog reader cannot read, and its definition now has other members than the row "
                f"event at {where} ({len(logged)} there): the members it was written with are unknown. Trigger a run "
                "with fresh_snapshot=true.")
        return members

    def set_members(self, columns: list[Any]) -> None:
        for i, members in self.members.items():
            if columns[i].type == ENUM:
                columns[i].enum_values = ["", *members]  # the reader's form: the invalid value's '' first
            else:
                columns[i].set_values = list(members)

    def read_as_bytes(self, columns: list[Any]) -> None:
        # The reader decodes a column's bytes by the codec its character_set_name names: latin-1 reads each byte
        # as the code point of its value, which decode() turns back into the bytes, in C both ways. (A name with
        # no codec, such as 'binary', would give the bytes themselves, but through a LookupError per value: six
        # times slower.) Set on the reader's columns of this table map, before its rows are decoded (a rows
        # event decodes its rows when they are first read).
        for i, *_ in self.texts:
            columns[i].character_set_name = _AS_BYTES
        self.set_members(columns)

    def _check_conversions(self, before: dict[str, str], columns: list[Any], where: str) -> None:
        """A text column whose character set changed between two row events was converted by the server, every
        row of it, without row events: followed when the new set holds every character of the old (the text is
        the same), else the table stops. (The statement that did it is classified too; this also sees a
        conversion the statement does not spell out, such as a MODIFY that takes the table's default.)"""
        for column in columns:
            name = column.name.lower() if column.name else ""
            old, new = before.get(name), self.column_charsets.get(name)
            if old is None or new is None or old == new or column.type in (ENUM, SET):
                continue
            if not holds_every_character(new, old):
                raise TableReplaced(
                    f"The column {column.name} of {self.table} is in the character set {new} from the row "
                    f"event at {where} on, and was in {old} before: the server converted every value, some of which "
                    f"{new} may not hold, without row events. The copy cannot follow rows changed without row "
                    f"events.")

    def decode(self, row: list[Any], where: str) -> None:
        """A row image the reader read, its text decoded (in place) and its empty binary strings bytes."""
        for i, name, charset, decode in self.texts:
            value = row[i]
            if type(value) is str:  # the bytes, read as latin-1 (see read_as_bytes)
                try:
                    row[i] = decode(value.encode(_AS_BYTES))
                except UndecodableText as exc:
                    raise self._unreadable(name, charset, where, exc) from None
        for i in self.binaries:
            if row[i] == "":  # the reader's empty binary string: b"".decode() of any codec name, even 'binary'
                row[i] = b""

    def undecodable(self, index: int, error: object, where: str) -> UnreadableText:
        """A text value of column ``index`` that is not text in its character set (``error`` says why)."""
        _, name, charset, _ = next(t for t in self.texts if t[0] == index)
        return self._unreadable(name, charset, where, error)

    def _unreadable(self, name: str, charset: str, where: str, exc: object) -> UnreadableText:
        return UnreadableText(
            f"The column {name} of {self.table} holds a value that is not {charset} text, the column's "
            f"character set, in the row event at {where}: {exc}. The server stored bytes that are no {charset} "
            "characters (written over a binary connection, or converted with a lax sql_mode); its own SELECT shows "
            "them as '?'. Nothing of this table was written; the other tables go on. Correct the value at the "
            f"source (or make {name} VARBINARY or BLOB if it holds bytes, not text), then trigger a run with "
            "fresh_snapshot=true: the binlog still holds this change, and a run from the table's watermark would "
            "meet it again.")


class _PartitionsLeft:
    """A partitioned table's layout, bound to the columns in force, and the partitions its rows left in the range,
    as the metastore writes them. The merge rewrites only the partitions a run touches, and only a before image
    tells which partition a row was in."""

    def __init__(self, partitioning: Partitioning) -> None:
        self.partitioning = self.bound = partitioning  # as the check bound it, then bound again (``bind``)
        self.left: set[str] = set()
        self.at = 0  # the index of the column the partition is read from

    def bind(self, header: RawHeader, where: str) -> None:
        """The layout bound to ``header``'s columns: which column of a row image its value is read from, and the
        column's type then. The spec is bound anew at each change of columns (the zone is the check's: a type
        that would date its values otherwise lands as another Hive type, which no policy takes on)."""
        spec, bound = self.partitioning.spec, self.bound
        try:
            self.bound = spec.resolve(header.columns, self.partitioning.time_zone)
        except BadPartitionSpec as exc:
            column = bound.source_column
            found = [ctype for name, ctype in header.columns if name.lower() == column.lower()]
            if where == _RANGE_START:  # the columns of its last version, against the check's of now
                change = (f"the range starts with the columns of its last version, where {column} is "
                          f"{found[0]}, not {bound.source_type}" if found else
                          f"the range starts with the columns of its last version, which have no {column}")
            else:
                change = (f"at {where} the type of {column} changed from {bound.source_type} to {found[0]}" if found
                          else f"at {where} the column {column} was dropped or renamed")
            raise PartitionSourceChanged(
                f"The table {header.table} is partitioned by its column {column} ({spec.text}), and {change}: "
                f"{exc} The partitions its rows were in can no longer be told from the binlog. Nothing of this "
                "table was written; the Hive table is as it was. Make `partition_by:` fit the table's columns if "
                "need be, then trigger a run with fresh_snapshot=true.") from None
        self.at = header.column_names.index(self.bound.source_column)

    def note(self, update: bool, images: list[list[Any]], uid: Callable[[list[Any]], str]) -> None:
        """The partitions the rows of a row event leave: a deleted row's, the old key's of an update that changes
        the key (written as a delete), and the before image's of an update that moves the row to another
        partition."""
        at, value = self.at, self.bound.value
        if update:
            for before, after in zip(images[::2], images[1::2]):
                partition = value(before[at])
                if partition != value(after[at]) or uid(before) != uid(after):
                    self.left.add(metastore_value(partition))
        else:
            for image in images:
                self.left.add(metastore_value(value(image[at])))


class _TableSink:
    """One table of the pass: its raw files, and the columns in force at the current point of the binlog, with
    the parts that follow them (the schema-change trail, the text columns' decoding, the partitions left)."""

    def __init__(self, table: TableRange, writer: RawFileWriter, start_at: tuple[int, int],
                 charsets_now: Callable[[str], dict[str, str]] | None = None) -> None:
        header = table.header
        self.writer = writer
        self.before_images = table.before_images
        self.policy = table.schema_changes
        self.start_at = start_at  # the events up to here are the table's already
        self.trail = _SchemaTrail(header, table.definition or header)
        self.texts = _Texts(header.table, charsets_now)
        self.partitions = None if table.partitioning is None else _PartitionsLeft(table.partitioning)
        self._columns: list[Any] | None = None  # the reader's column list last followed, and its columns' attributes
        self._attributes: list[dict[str, Any]] | None = None
        # The row images of the columns followed, decoded from the event's bytes (``core.row_images``); None
        # where a column's type is not planned there: the reader decodes them.
        self.decoder: RowImageDecoder | None = None
        self.binlog_columns: tuple[BinlogColumn, ...] = ()  # the decoder's columns
        self._decode_plan: tuple[Any, ...] = ()
        self.failed: CdcError | None = None
        try:
            self._use(header)
        except PartitionSourceChanged as exc:  # the columns at the start do not fit the spec
            self.fail(exc)

    def fail(self, error: CdcError) -> None:
        """Leave this table out of the range: its raw files go, the other tables go on. The first error is the
        table's."""
        if self.failed is None:
            self.failed = error
        self.writer.abort()

    def _use(self, header: RawHeader, where: str = _RANGE_START) -> None:
        self.header = header
        self.names = header.column_names
        self.key_indexes = header.key_indexes() if set(header.key) <= set(self.names) else ()
        self.normalisers = [(i, f) for i, (_, ctype) in enumerate(header.columns) if (f := binlog_normaliser(ctype))]
        self.sets = {name for name, ctype in header.columns if ctype.lower().startswith("set(")}
        if self.partitions is not None:
            self.partitions.bind(header, where)

    def follow(self, columns: list[Any], where: str, settle: Callable[[], None]) -> None:
        """Decode from here on with ``columns``, the event's own; a new file and a recorded change if they differ.
        ``settle`` is called before the columns followed change: what decoder processes still hold of this table
        is written first (``stages.decode_workers``), so that the change lands after it.

        The reader makes a new column list for each table map (one per transaction); equal lists are the common
        case and cost one comparison of the columns' attributes.
        """
        if columns is self._columns:
            return
        # Compared in C (Column.__eq__ builds a dict per call); copies, as read_as_bytes changes the columns.
        attributes = [dict(vars(c)) for c in columns]
        if attributes == self._attributes:
            self._columns = columns
            self.texts.read_as_bytes(columns)
            return
        settle()
        if self.failed is not None:  # by an event the decoder processes held
            return
        self._columns, self._attributes = columns, attributes
        names = tuple(c.name for c in columns)
        if any(name is None or name.startswith("UNKNOWN_COL") for name in names):
            raise MissingRowMetadata(
                f"The row event of {self.header.table} at {where} carries no column names: the server wrote it with "
                "binlog_row_metadata other than FULL. Set binlog_row_metadata=FULL and take a fresh snapshot.")
        known = {name: ctype for name, ctype in (*self.trail.now.columns, *self.header.columns)}
        self.texts.plan(columns, known, where)
        self.decoder = self._plan_decoder(columns)
        layout = []
        for column in columns:
            logged = column_type_of(column)
            # The definition's type when it lands the same: it knows what the binlog does not (MariaDB's JSON,
            # INET6 and UUID are text and binary there).
            ctype = known.get(column.name)
            layout.append((column.name, ctype if ctype is not None and logged_as(ctype, logged) else logged))
        self.texts.read_as_bytes(columns)
        if names == self.names and all(landing(a) == landing(b) for (_, a), (_, b) in zip(layout, self.header.columns)):
            return
        self._change(RawHeader(self.header.table, tuple(layout), self.header.key), where)

    def _plan_decoder(self, columns: list[Any]) -> RowImageDecoder | None:
        """The decoder of these columns' images: text in the character sets the texts' plan chose, every other
        string as its bytes (a binary string's, the one kind of string column not among the texts)."""
        if self.sets or self.texts.members:
            return None
        charsets = self.texts.charsets()
        self.binlog_columns = tuple(
            BinlogColumn(type=c.type, unsigned=bool(getattr(c, "unsigned", False)),
                         max_length=getattr(c, "max_length", 0) or 0, length_size=getattr(c, "length_size", 0) or 0,
                         precision=getattr(c, "precision", 0) or 0, decimals=getattr(c, "decimals", 0) or 0,
                         fsp=getattr(c, "fsp", 0) or 0, charset=charsets.get(i, "binary"))
            for i, c in enumerate(columns))
        return plan_decoder(list(self.binlog_columns))

    def decode_plan(self) -> DecodePlan:
        """What a decoder process needs for this table's events now (``stages.decode_workers``)."""
        if not self._decode_plan or self._decode_plan[0] is not self.decoder or self._decode_plan[1] is not self.header:
            self._decode_plan = (self.decoder, self.header, DecodePlan(
                self.binlog_columns, tuple(ctype for _, ctype in self.header.columns), tuple(self.key_indexes),
                self.before_images))
        plan: DecodePlan = self._decode_plan[2]
        return plan

    def _change(self, header: RawHeader, where: str) -> None:
        self.trail.record(self.header, header, where)
        self.writer.switch(header)
        self._use(header, where)

    def readd(self, name: str, where: str) -> None:
        """A column dropped and added again by the ALTERs of the range (in one statement or several) is a new column,
        whatever its name: the rows it did not touch got the new column's value. Recorded as two changes, the drop
        then the add, where the DDL is (row events may show neither: none came between, or the types land the same),
        so that the table's policy decides, and the add gets its fill like any added column."""
        columns = self.header.columns
        at = next((i for i, (column, _) in enumerate(columns) if column.lower() == name.lower()), None)
        if at is None:
            return  # not a column here: the row events show the add
        defined = {column.lower(): ctype for column, ctype in self.trail.now.columns}
        ctype = defined.get(name.lower(), columns[at][1])
        without = columns[:at] + columns[at + 1:]
        self._change(RawHeader(self.header.table, without, self.header.key), where)
        # At the end, where ADD COLUMN puts a column (a FIRST or AFTER shows in the row events as an order).
        self._change(RawHeader(self.header.table, (*without, (columns[at][0], ctype)), self.header.key), where)

    def image(self, values: dict[str, Any], none_sources: dict[str, str], where: str) -> list[Any]:
        if self.sets and none_sources:
            # The reader gives None for an empty SET too; only its none_sources tell it from NULL.
            values = {name: set() if none_sources.get(name) == EMPTY_SET and name in self.sets else value
                      for name, value in values.items()}
        row = list(values.values())
        self.texts.decode(row, where)
        if self.normalisers:
            try:
                normalise_rows([row], self.normalisers)
            except ValueError as exc:  # a value its column's normaliser does not take (a JSON text that is not)
                raise RowsNotDecoded(f"A value of the row event of {self.header.table} at {where} cannot be "
                                     f"taken: {str(exc)[:300]}. {_STOPPED}") from None
        return row

    def images(self, event: Any, where: str) -> list[list[Any]]:
        """The event's row images, normalised: an update's before and after images in turn.

        Decoded from the event's bytes where the columns' decoder and the event allow (every column present, no
        partial JSON update, rows not yet read); else by the reader, row by row."""
        body = _rows_body(event) if self.decoder is not None else None
        if body is None:
            rows = _reader_rows(self, event, where)
            if isinstance(event, UpdateRowsEvent):
                return [self.image(row[f"{side}_values"], row[f"{side}_none_sources"], where)
                        for row in rows for side in ("before", "after")]
            return [self.image(row["values"], row["none_sources"], where) for row in rows]
        assert self.decoder is not None
        try:
            images = self.decoder.images(body)
        except UndecodableValue as exc:
            raise self.texts.undecodable(exc.index, exc.error, where) from None
        except ValueError as exc:
            raise self.misfit(exc, where) from None
        if self.normalisers:
            normalise_rows(images, self.normalisers)
        return images

    def misfit(self, error: object, where: str) -> ExtractionError:
        return ExtractionError(
            f"The row event of {self.header.table} at {where} does not fit its table map ({error}). Run the "
            "task again; if it fails the same way, the binlog is damaged at this point.")

    def uid(self, row: list[Any]) -> str:
        return key_uid([row[i] for i in self.key_indexes])

    def finish(self) -> None:
        """A DDL after the last row event changed the table too: the definition now is its result."""
        if self.trail.changed_since(self.header):
            self._change(self.trail.now, "the end of the range")


class BinlogSource(Protocol):
    """Where the binlog comes from (``MySqlSourceHook``): it opens the stream, and names the server for messages."""

    @property
    def address(self) -> tuple[str, int]: ...

    def binlog_stream(self, start: Watermark, server_id: int, only_schemas: Collection[str],
                      only_tables: Collection[str]) -> Any: ...


def in_one_directory(headers: Sequence[RawHeader], out_dir: str | Path, definitions: Sequence[RawHeader] = (),
                     schema_changes: str = "strict",
                     partitionings: Mapping[str, Partitioning] | None = None) -> list[TableRange]:
    """The tables of ``headers`` with their raw files in one directory (each table's files are named by it), their
    definitions now from ``definitions``, where they are, and one policy for all."""
    now = {d.table: d for d in definitions}
    return [TableRange(h, out_dir, now.get(h.table), schema_changes=schema_changes,
                       partitioning=(partitionings or {}).get(h.table)) for h in headers]


def extract(
    source: BinlogSource,
    tables: Sequence[TableRange],
    start: Watermark,
    high: Watermark,
    max_raw_bytes: int = MAX_RAW_BYTES,
    replica_server_id: int | None = None,
    stop_before: dt.datetime | None = None,
    defaults: Callable[[str, Sequence[str]], dict[str, Any]] | None = None,
    progress: Callable[[int, tuple[int, int]], None] | None = None,
    charsets: Callable[[str], dict[str, str]] | None = None,
    decoders: int = 0,
) -> ExtractResult:
    """Read the row events of ``tables`` in (start, high] into raw files, in one pass.

    Each table (``TableRange``) comes with its columns at its start (as the previous run captured them) and its
    definition now, which gives the types of columns added in the range. A table's own ``start`` is later than
    ``start`` (its own committed watermark): the events up to it are the table's already and are skipped. Each
    row event is decoded with its own columns; where they change, the raw files go on with a new header, and the
    change is checked against the table's ``schema_changes`` policy (``core.schema``) before the range is handed
    on. ``defaults(table, columns)`` gives the values existing rows got for columns added in the range
    (``MySqlSourceHook.added_column_defaults``).

    A table whose part of the range cannot be handed on (a refused schema change, the table truncated or
    replaced, a row event without column names) is left out with its error in ``result.failed`` and its raw
    files removed; the other tables go on. An error of the pass itself fails it all.

    With ``stop_before``, the range ends earlier: before the first transaction that began at or after that
    moment (binlog event times are whole seconds). Binlog order is commit order, so the range is still a
    state the source was in. ``result.end`` is then that transaction's position, without a GTID (the caller
    looks it up).

    ``progress(row events, (file sequence, position))`` is called as the pass goes, every few thousand events.

    Text is decoded from each column's character set as the table map names it (``core.charsets``);
    ``charsets(table)`` gives the columns' character sets now (``MySqlSourceHook.column_charsets``), asked only
    for a column whose collation the binlog reader does not know. A value that is not text in its character set
    fails its table, as above.

    A partitioned table's ``partitioning`` (``CapturedTable.partitioning``) gives ``result.left_partitions`` the
    partitions its rows left in the range (``_PartitionsLeft``). A change of its columns after which the spec no
    longer fits fails the table, as above.

    A table with ``before_images`` (its changelog has ``mode: all``) gets each update that keeps its key as a
    ``B`` record (its before image) before its ``U``; ``result.counts`` counts updates as ``U`` alone.

    ``source`` opens the pass's one replication connection (``MySqlSourceHook.binlog_stream``).

    ``decoders``: processes that decode the row events beside the pass (``stages.decode_workers``); the raw files
    are the same bytes with any number of them. 0: the pass decodes alone.
    """
    if high < start:
        raise ExtractionError(f"The high watermark {high} is before the start {start}: the range is empty backwards.")
    with room_for(tables[0].out_dir if tables else ".", "the extraction's raw files"):
        sinks = {}
        for table in tables:
            h = table.header
            if table.start is not None and table.start < start:
                raise ExtractionError(f"The start {table.start} of {h.table} is before the range's start {start}.")
            name = TableName.parse(h.table)
            sinks[(name.schema, name.table)] = _TableSink(
                table, RawFileWriter(table.out_dir, h.table, h, max_raw_bytes),
                (table.start or start).coordinate, charsets)
        result = ExtractResult(start, high)
        try:
            if start.coordinate < high.coordinate:
                result.events, end = _read(source, sinks, start, high, replica_server_id, stop_before,
                                           progress or (lambda events, at: None), decoders)
                if end is not None:
                    result.end = Watermark(file=end[0], position=end[1], server_id=high.server_id,
                                           server_uuid=high.server_uuid)
            for sink in sinks.values():
                if sink.failed is None:
                    try:
                        sink.finish()
                        _check_changes(sink.trail.changes, sink.policy, sink.header.key)
                        result.fills[sink.header.table] = sink.trail.fills(sink.header.table, defaults)
                    except CdcError as exc:
                        sink.fail(exc)
            for sink in sinks.values():
                table_name = sink.header.table
                if sink.failed is not None:
                    result.failed[table_name] = sink.failed
                    continue
                result.files[table_name] = sink.writer.close()
                result.counts[table_name] = {op: sink.writer.counts[op] for op in ("I", "U", "D")}
                left = sink.partitions.left if sink.partitions is not None else ()
                result.left_partitions[table_name] = tuple(sorted(left))
                result.headers[table_name], result.schema_changes[table_name] = sink.header, sink.trail.changes
        except BaseException:
            for sink in sinks.values():
                sink.writer.abort()
            raise
        return result


def _check_changes(changes: Sequence[SchemaChange], policy: str, key: Sequence[str]) -> None:
    """The range's changes of a table's columns against its policy: its refusal of the first change it does not
    take on (``SchemaChangeRefused``); else ``ColumnsRetyped`` when only a load anew can follow them."""
    check_changes(changes, policy, key)
    why = reload_reason(changes, key)
    if why is not None:
        raise ColumnsRetyped(f"{why}.")


_TEXT_TYPES = frozenset({*TEXT_CODES, ENUM, SET})
_AS_BYTES = "latin-1"  # a codec whose text holds each byte as it is (not a MySQL character set name)
# ENUM and SET members the reader reads right: it decodes them as UTF-8.
_MEMBERS_AS_UTF8 = UTF8_NAMES | {"ascii"}

PROGRESS_EVENTS = 2000  # binlog events between two calls of the progress callback


def _read(source: BinlogSource, sinks: dict[tuple[str, str], _TableSink], start: Watermark, high: Watermark,
          server_id: int | None,
          stop_before: dt.datetime | None,
          progress: Callable[[int, tuple[int, int]], None],
          decoders: int = 0) -> tuple[int, tuple[str, int] | None]:
    """Returns the number of row events written, and the end (file, position) when ``stop_before`` cut the range.
    ``decoders``: decoder processes beside the pass (``stages.decode_workers``); 0, the pass decodes alone."""
    if not decoders:
        return _pass(source, sinks, start, high, server_id, stop_before, progress, None, {})
    numbered = list(sinks.values())
    # Events read after one that failed their table, before its answer came: the pass alone would have
    # skipped them, and not counted them.
    skipped = 0

    def write(items: Sequence[Item], answers: Sequence[Answer]) -> None:
        nonlocal skipped
        for (number, _, _, _, seq, pos), answer in zip(items, answers):
            sink = numbered[number]
            if sink.failed is not None:
                skipped += 1
                continue
            if answer[0] == "lines":
                write_line = sink.writer.write_line
                for op, line in answer[1]:
                    write_line(op, line)
                continue
            where = _where((seq, pos))
            sink.fail(sink.texts.undecodable(answer[1], answer[2], where) if answer[0] == "undecodable"
                      else sink.misfit(answer[1], where))

    workers = DecodeWorkers(decoders, write)
    failed = True
    try:
        events, end = _pass(source, sinks, start, high, server_id, stop_before, progress, workers,
                            {id(sink): n for n, sink in enumerate(numbered)})
        workers.drain()
        failed = False
        return events - skipped, end
    finally:
        workers.close(failed)


def _pass(source: BinlogSource, sinks: dict[tuple[str, str], _TableSink], start: Watermark, high: Watermark,
          server_id: int | None, stop_before: dt.datetime | None, progress: Callable[[int, tuple[int, int]], None],
          workers: DecodeWorkers | None, numbers: dict[int, int]) -> tuple[int, tuple[str, int] | None]:
    """Every event of the range, each decided by its kind (``core.binlog_events``): row events written, statements
    classified, transaction bounds followed, events that hold no change passed over, and one not understood
    stopping every table it may touch."""
    # A replica id of its own: the server drops an older dump connection with the same id.
    server_id = server_id or random.randint(1 << 20, (1 << 32) - 1)
    stream = source.binlog_stream(
        start, server_id,
        # Sets: the reader tests each table map and row event's names against them (only_tables matches a name in
        # any schema, so the sinks' own (schema, table) look-up below decides). The row events it leaves out are
        # of tables not captured: a range starts at a transaction boundary, so every row event's table map is
        # seen first, and one the names left out leaves out its row events.
        only_schemas=frozenset(schema for schema, _ in sinks),
        only_tables=frozenset(table for _, table in sinks),
    )
    statements = _Statements(sinks)
    high_at = high.coordinate
    seq = split_binlog_file(start.file)[1]
    last = start.coordinate
    cut = stop_before.timestamp() if stop_before is not None else None
    transaction = _Transaction()
    events = seen = 0
    try:
        for event in _events(stream, source.address, server_id,
                             # Read when the stream is lost: where the pass had got to by then.
                             lambda: _file_name(start.file, last[0]) + f":{last[1]}"):  # noqa: B023
            seen += 1
            if seen % PROGRESS_EVENTS == 0:
                progress(events, last)
            packet = event.packet
            decided = event_type(packet.event_type, packet.flags)
            kind = decided.kind
            end_pos = packet.log_pos
            if kind is Kind.ROTATE:
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
            if kind is Kind.IRRELEVANT:
                # Outside transactions or beside them (a checkpoint, a format description, a heartbeat): not a
                # place a range ends, as the reader's position past them tells at the end of the log.
                continue
            if cut is not None and not transaction.open and event.timestamp >= cut:
                # The first event of a transaction that began at or after stop_before: the range ends before it.
                return events, (_file_name(start.file, last[0]), last[1])
            in_payload = bool(packet.flags & IN_PAYLOAD)
            if not (in_payload and at == last):  # the events of one payload all end where it ends
                last = _advance(last, at)
            if kind is Kind.ROWS:
                transaction.open = True
                sink = sinks.get((event.schema, event.table))
                if sink is not None and sink.failed is None and at > sink.start_at:
                    transaction.touched.add(id(sink))
                    try:
                        written = _write_rows(sink, event, at, workers, numbers.get(id(sink), 0))
                    except CdcError as exc:
                        sink.fail(exc)
                        written = True
                    events += written
                    failpoint("extract.file")
            elif kind is Kind.BOUNDARY:
                transaction.boundary(packet.event_type == XID)
            elif kind is Kind.STATEMENT:
                query = _query_of(event)
                if query is None:  # an event of the reader's class for it that carries no text
                    statements.not_understood(decided, _where(at), at)
                elif transaction.statement(query) != _Transaction.BOUND:
                    if workers is not None:  # a table the statement stops fails after what it had
                        workers.drain()
                    statements.decide(query, _schema_of(event), at, _where(at), transaction,
                                      _strict(getattr(event, "sql_mode", None)))
            elif kind is Kind.TRANSACTION_UNDONE:
                if workers is not None:
                    workers.drain()
                statements.undone(decided, _where(at), at, transaction)
                transaction.close()
            elif kind is Kind.NOT_UNDERSTOOD:
                if workers is not None:
                    workers.drain()
                statements.not_understood(decided, _where(at), at)
            if last == high_at and not (in_payload and transaction.open):
                return events, None
        # The server said end of log. Events the reader filters out (other tables' row events) are not yielded
        # but still move its position: where it stopped tells whether the high watermark was passed.
        reached = (split_binlog_file(stream.log_file)[1], stream.log_pos or 0)
    finally:
        stream.close()
    if reached >= high_at:
        return events, None
    raise ExtractionError(
        f"The binlog ended at {stream.log_file}:{stream.log_pos}, before the high watermark {high}. The server "
        "may have been restarted or its binlog reset; run the task again."
    )


class _Transaction:
    """Where the pass is between transactions, and the captured tables whose row events the open one holds (a
    ROLLBACK or XA PREPARE may undo them)."""

    BOUND = "bound"

    def __init__(self) -> None:
        self.open = False
        self.began = False  # a BEGIN (or XA START) opened it: its statements do not end it
        self.touched: set[int] = set()

    def boundary(self, ends: bool) -> None:
        if ends:
            self.close()
        else:  # a GTID: a transaction starts, with BEGIN or as one statement
            self.open, self.began, self.touched = True, False, set()

    def close(self) -> None:
        self.open = self.began = False

    def statement(self, query: str) -> str:
        """Follow the transaction through a statement; BOUND for BEGIN and COMMIT, which need no more."""
        head = query.lstrip()[:12].upper()
        if head == "BEGIN" or head.startswith("XA START"):
            if not self.began:
                self.touched = set()
            self.open = self.began = True
            return self.BOUND
        if head == "COMMIT":
            self.close()
            return self.BOUND
        if not self.began:  # a statement of its own (DDL): it is its transaction
            self.open = False
        return ""


def _events(stream: Any, address: tuple[str, int], server_id: int, where: Callable[[], str]) -> Any:
    """The reader's events; a broken connection it cannot resume as an error that says so. (The reader itself
    resumes from where it was after a dropped connection, when the server takes it back.)"""
    try:
        yield from stream
    except pymysql.err.OperationalError as exc:
        raise SourceConnectionLost(
            f"The binlog connection to {address[0]}:{address[1]} failed after {where()} "
            f"{mysql_error_said(exc, server_id)}. Nothing of this range was handed on; the task's retry reads it "
            "again.") from None


_Named = dict[tuple[str, str], list[tuple[tuple[str, str], _TableSink]]]


def _by_lowered_name(sinks: dict[tuple[str, str], _TableSink]) -> _Named:
    """The sinks by lower-cased (schema, table), as ``core.statements`` names tables: a statement finds the tables
    it names in one look-up each, however many tables the pass captures."""
    index: _Named = {}
    for (schema, table), sink in sinks.items():
        index.setdefault((schema.lower(), table.lower()), []).append(((schema, table), sink))
    return index


class _Statements:
    """What statements and events the pass cannot follow do to the captured tables: each statement classified
    (``core.statements``) by what it does to the rows of each table it names."""

    def __init__(self, sinks: dict[tuple[str, str], _TableSink]) -> None:
        self.sinks = sinks
        self.named = _by_lowered_name(sinks)

    def _live(self, at: tuple[int, int]) -> list[tuple[tuple[str, str], _TableSink]]:
        return [(name, sink) for name, sink in self.sinks.items() if sink.failed is None and at > sink.start_at]

    def decide(self, query: str, default_schema: str, at: tuple[int, int], where: str,
               transaction: _Transaction, strict: bool = False) -> None:
        """``strict``: the statement ran in a strict sql_mode (the query event's status says)."""
        statement = classify(query, default_schema)
        shown = f"`{' '.join(query.split())[:300]}` ({where})"
        if statement.kind in (ROLLBACK, ROLLBACK_TO):
            self._stop_touched(transaction, at, lambda table: RowsUndone(
                f"The transaction that changed {table} ends with {shown}: row events before it did not happen "
                "(a transaction that also changed a table without transactions, such as MyISAM, logs its rollback "
                f"this way)."))
            if statement.kind == ROLLBACK:
                transaction.close()
            return
        if not statement.understood:
            for (schema, table), sink in self._live(at):
                if may_name(query, schema, table):
                    sink.fail(StatementNotUnderstood(
                        f"The table {schema}.{table} may be named by {shown}, a statement the capture does not "
                        f"understand, so it cannot tell whether its rows changed."))
            return
        for schema, effect, reason in statement.schemas:
            if effect is not Effect.KEEPS_ROWS:
                for (name, sink) in [(n, k) for n, k in self._live(at) if n[0].lower() == schema]:
                    sink.fail(TableReplaced(_changed(name, shown, reason)))
        for table_effect in statement.tables:
            for name, sink in self.named.get(table_effect.table, ()):
                if sink.failed is None and at > sink.start_at:
                    try:
                        _take(sink, name, table_effect, shown, strict, statement.kind)
                    except CdcError as exc:  # a column the table is partitioned by, dropped
                        sink.fail(exc)

    def not_understood(self, kind: EventType, where: str, at: tuple[int, int]) -> None:
        """An event the capture cannot follow: every captured table may have changed by it."""
        for (schema, table), sink in self._live(at):
            sink.fail(EventNotUnderstood(
                f"The binlog holds an event the capture cannot follow at {where}: {kind.name} (type {kind.code}), "
                f"{kind.why}. The table {schema}.{table} may have changed by it."))

    def undone(self, kind: EventType, where: str, at: tuple[int, int], transaction: _Transaction) -> None:
        self._stop_touched(transaction, at, lambda table: RowsUndone(
            f"The row events of {table} at {where} belong to a transaction that ends with {kind.name}: {kind.why}, "
            f"which the capture does not wait for."))

    def _stop_touched(self, transaction: _Transaction, at: tuple[int, int], error: Callable[[str], CdcError]) -> None:
        for (schema, table), sink in self._live(at):
            if id(sink) in transaction.touched:
                sink.fail(error(f"{schema}.{table}"))


_STOPPED = "Nothing of this table was written; the Hive table is as it was; the other tables go on."
_FRESH = ("Trigger a run with fresh_snapshot=true to reload the table, or set `run: on_broken_chain: heal` to have "
          "each run bring such a table level by a diff (docs/capture.md says what each statement does).")


def _changed(name: tuple[str, str], shown: str, reason: str) -> str:
    return (f"The table {name[0]}.{name[1]} was changed by {shown}: {reason}. The copy cannot follow rows changed "
            f"without row events.")


def _take(sink: _TableSink, name: tuple[str, str], effect: TableEffect, shown: str, strict: bool,
          kind: str) -> None:
    """A statement's effect on one captured table: noted when it keeps the rows' values; else the table stops."""
    if effect.effect is not Effect.KEEPS_ROWS:
        sink.fail(TableReplaced(_changed(name, shown, effect.reason)))
        return
    types = {column.lower(): ctype for column, ctype in sink.header.columns}
    keys = {column.lower() for column in sink.header.key}
    charsets = sink.texts.column_charsets  # known once a row event of the range was read
    for definition in effect.redefined:
        renamed_from = next((a for a, b in effect.renames if b.lower() == definition.name.lower()), None)
        was = (renamed_from or definition.name).lower()
        old = types.get(was)
        if old is None:
            continue  # a column the table did not have here: its change shows in the row events' columns
        # A key column holds no NULL; in a strict sql_mode the server refuses to make a column holding NULL
        # NOT NULL, so a statement logged then found none.
        keeps, why = retyping_keeps_values(old, definition, True if was in keys or strict else None,
                                           old_charset=charsets.get(was))
        if not keeps:
            sink.fail(TableReplaced(_changed(name, shown, f"the column {definition.name} changed from {old} to "
                                                          f"{definition.type}, which {why}")))
            return
    if kind not in ("alter", "multiple"):
        return  # an index, a trigger, OPTIMIZE…: the columns stay as they are
    for column in sink.trail.alter(shown, effect):
        sink.readd(column, shown)


# sql_mode's STRICT_TRANS_TABLES and STRICT_ALL_TABLES bits, as a query event's status carries them (the same in
# MySQL and MariaDB).
_STRICT_MODES = (1 << 21) | (1 << 22)


def _strict(sql_mode: int | None) -> bool:
    return bool(sql_mode is not None and sql_mode & _STRICT_MODES)


def _query_of(event: Any) -> str | None:
    query = getattr(event, "query", None)
    if query is None:
        return None
    return query if isinstance(query, str) else query.decode("utf-8", "replace")


def _schema_of(event: Any) -> str:
    schema = getattr(event, "schema", None) or ""
    return schema.decode("utf-8", "replace") if isinstance(schema, bytes) else schema


def _where(at: tuple[int, int]) -> str:
    return f"binlog file {at[0]}, end position {at[1]}"


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


def _write_rows(sink: _TableSink, event: Any, at: tuple[int, int], workers: DecodeWorkers | None,
                number: int) -> bool:
    """A row event's records into its table's raw files; with ``workers``, decoded by a decoder process where
    it can be (``stages.decode_workers``), the table's number ``number`` there. False: the table turned out to
    have failed at an event before, which the decoder processes held (the event is not the table's then)."""
    where = _where(at)
    sink.follow(event.columns, where, workers.drain if workers is not None else _nothing_held)
    if sink.failed is not None:
        return False
    sink.trail.ddl_since_rows = False
    _check_images_whole(sink, event, where)
    kind = UPDATE if isinstance(event, UpdateRowsEvent) else INSERT if isinstance(event, WriteRowsEvent) else DELETE
    if workers is not None:
        if sink.partitions is None and sink.decoder is not None and (body := _rows_body(event)) is not None:
            workers.add(number, workers.plan(sink.decode_plan()), kind, body, *at)
            return True
        if number in workers.pending_sinks:  # decoded here: after what the decoders still hold of the table
            workers.drain()
            if sink.failed is not None:
                return False
    if event.event_type == PARTIAL_UPDATE_ROWS_EVENT:
        _check_json_whole(sink, event, where)
    images = sink.images(event, where)
    write = sink.writer.write
    for op, uid, coordinate, values in records_of(kind, images, sink.key_indexes, sink.before_images, *at):
        write(op, uid, coordinate, values)
    if sink.partitions is not None:  # a partitioned table: the one test per event a table not partitioned pays
        sink.partitions.note(kind == UPDATE, images, sink.uid)
    return True


_ROW_IMAGE_FIX = (
    "Set binlog_row_image=FULL on the server (SET PERSIST binlog_row_image = 'FULL'; on Amazon RDS and Aurora, in "
    "the DB parameter group) and keep sessions from changing it (setting it for a session takes a privilege: "
    "SESSION_VARIABLES_ADMIN or SYSTEM_VARIABLES_ADMIN on MySQL, SUPER or BINLOG ADMIN on MariaDB).")


def _check_images_whole(sink: _TableSink, event: Any, where: str) -> None:
    """Raise ``PartialRowImage`` when an image of the event leaves a column of the table out. MySQL and MariaDB
    write only the key's columns in a MINIMAL before image and only the columns a statement set in an after image;
    NOBLOB leaves unchanged BLOB and TEXT columns out."""
    columns = event.columns
    full = (1 << len(columns)) - 1
    images = (("before", event.columns_present_bitmap), ("after", getattr(event, "columns_present_bitmap2", None))) \
        if isinstance(event, UpdateRowsEvent) else (("", event.columns_present_bitmap),)
    for side, bitmap in images:
        if bitmap is None:
            continue
        present = int.from_bytes(bitmap, "little") & full
        if present != full:
            missing = [column.name or f"#{n + 1}" for n, column in enumerate(columns) if not present >> n & 1]
            raise PartialRowImage(
                f"The row event of {sink.header.table} at {where} leaves the column(s) {', '.join(missing)} out of "
                f"its {side + ' ' if side else ''}image: the server, or the session that wrote it, logs "
                f"binlog_row_image=MINIMAL or NOBLOB, and the copy's row cannot be written from part of one. "
                f"{_ROW_IMAGE_FIX}")


def _check_json_whole(sink: _TableSink, event: Any, where: str) -> None:
    """Raise ``PartialRowImage`` when an after image of a partial update event holds a JSON column's change as a
    diff (``binlog_row_value_options=PARTIAL_JSON``) instead of the document. (Read through the reader, which
    keeps the rows for ``images``.)"""
    diffs = sorted({str(name) for row in _reader_rows(sink, event, where)
                    for name, value in row["after_values"].items() if isinstance(value, JsonDiff)})
    if diffs:
        raise PartialRowImage(
            f"The row event of {sink.header.table} at {where} holds the change of the JSON column(s) "
            f"{', '.join(diffs)} as a diff, not the document: the server, or the session that wrote it, logs "
            "binlog_row_value_options=PARTIAL_JSON, and the copy's document cannot be made from a diff exactly. "
            "Set binlog_row_value_options='' on the server (SET PERSIST binlog_row_value_options = ''; on Amazon "
            "RDS and Aurora, in the DB parameter group) and keep sessions from changing it.")


def _reader_rows(sink: _TableSink, event: Any, where: str) -> list[dict[str, Any]]:
    """The event's rows as the reader decodes them. Whatever it fails on stops the table alone: the event's bytes
    were all read from the server before, so the pass goes on."""
    try:
        return list(event.rows)
    except CdcError:
        raise
    except Exception as exc:
        raise RowsNotDecoded(
            f"The binlog reader could not decode the row event of {sink.header.table} at {where}: "
            f"{type(exc).__name__}: {str(exc)[:300]}. {_STOPPED} Report it with the server's version and the "
            "column types of the table; a run with fresh_snapshot=true reloads the table past it.") from None


def _nothing_held() -> None:
    """No decoder process holds anything of a table when the pass decodes alone."""


def _rows_body(event: Any) -> bytes | None:
    """The bytes of a rows event's row images, read from its packet, when they can be decoded without the reader:
    the table map's columns all there, and no partial JSON update. None otherwise, and once the reader has read the
    rows (they are then its). Every column is present in each image: ``_write_rows`` stopped the table otherwise
    (``_check_images_whole``)."""
    if (not event.complete or event.event_type == PARTIAL_UPDATE_ROWS_EVENT
            or event.number_of_columns != len(event.columns)):
        return None
    packet = event.packet
    left = event.event_size - packet.read_bytes
    # The reader reads the rows from the packet until at most one byte is left: then they are its (read through
    # ``event.rows``, which keeps them). The packet of rows not read yet holds more (a row image is at least its
    # bitmap of NULLs and a value or a byte of it); where it would not, the reader reads them, as rightly.
    if left <= 1:
        return None
    return bytes(packet.read(left))
