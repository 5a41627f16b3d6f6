"""Every kind of binlog event, and what the pass does with it; and compressed events turned back into the events
they hold (MariaDB's ``log_bin_compress``, MySQL's ``binlog_transaction_compression``).

The pass sees each event of its range and decides it by its kind (``event_kind``): decoded (row events, their
table maps, statements, transaction bounds), proved irrelevant (events that hold no change of a row), or not
understood, which stops every captured table it may touch. A kind this table does not list is not understood,
unless the server marked the event as one a replica may ignore.

Compressed events never reach the pass as such: the reader's connection turns each one back into the plain
events it holds (``uncompressed``), byte for byte what the server would have written uncompressed, so that the
row decoders, the statement classifier and the decoder processes read them as any other.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import StrEnum

# Header flags (MySQL's log_event.h, the same in MariaDB).
ARTIFICIAL = 0x20  # made up by the server for the replica (the first rotate and format description of a dump)
IGNORABLE = 0x80  # "a replica that does not know this event may ignore it"
# Set by the reader on each event taken out of one MySQL transaction payload, which all end where the payload ends.
IN_PAYLOAD = 0x8000

HEADER = 19  # the common header: when, type, server id, size, end position, flags
CHECKSUM = 4


class Kind(StrEnum):
    ROWS = "rows"  # row images of one table: decoded when the table is captured
    TABLE_MAP = "table map"  # the columns of the row events that follow (the reader keeps them)
    STATEMENT = "statement"  # a query event: classified (``core.statements``)
    BOUNDARY = "boundary"  # starts or ends a transaction (GTID, XID)
    ROTATE = "rotate"
    IRRELEVANT = "irrelevant"  # holds no change of a row, or only context of a statement that is classified
    TRANSACTION_UNDONE = "transaction undone"  # the transaction's row events may not have happened (XA PREPARE)
    NOT_UNDERSTOOD = "not understood"  # stops every captured table it may touch


@dataclass(frozen=True)
class EventType:
    code: int
    name: str
    kind: Kind
    why: str = ""  # for an irrelevant kind: why it holds no change; for one not understood: what it is


def _types() -> dict[int, EventType]:
    listed: list[tuple[int, str, Kind] | tuple[int, str, Kind, str]] = [
        (1, "START_EVENT_V3", Kind.NOT_UNDERSTOOD, "a binlog format older than MySQL 5.0"),
        (2, "QUERY_EVENT", Kind.STATEMENT),
        (3, "STOP_EVENT", Kind.IRRELEVANT, "the server stopped; the next file goes on"),
        (4, "ROTATE_EVENT", Kind.ROTATE),
        (5, "INTVAR_EVENT", Kind.IRRELEVANT, "a value for the statement that follows, which is classified"),
        (6, "LOAD_EVENT", Kind.NOT_UNDERSTOOD, "a LOAD DATA of an old binlog format"),
        (7, "SLAVE_EVENT", Kind.NOT_UNDERSTOOD, "an event never written by a server"),
        (8, "CREATE_FILE_EVENT", Kind.NOT_UNDERSTOOD, "a LOAD DATA of an old binlog format"),
        (9, "APPEND_BLOCK_EVENT", Kind.IRRELEVANT, "a block of a LOAD DATA file; its statement is classified"),
        (10, "EXEC_LOAD_EVENT", Kind.NOT_UNDERSTOOD, "a LOAD DATA of an old binlog format"),
        (11, "DELETE_FILE_EVENT", Kind.IRRELEVANT, "a LOAD DATA file removed on the replica"),
        (12, "NEW_LOAD_EVENT", Kind.NOT_UNDERSTOOD, "a LOAD DATA of an old binlog format"),
        (13, "RAND_EVENT", Kind.IRRELEVANT, "a seed for the statement that follows, which is classified"),
        (14, "USER_VAR_EVENT", Kind.IRRELEVANT, "a variable for the statement that follows, which is classified"),
        (15, "FORMAT_DESCRIPTION_EVENT", Kind.IRRELEVANT, "the file's format, which the reader follows"),
        (16, "XID_EVENT", Kind.BOUNDARY),
        (17, "BEGIN_LOAD_QUERY_EVENT", Kind.IRRELEVANT, "the first block of a LOAD DATA file; its statement is "
                                                        "classified"),
        (18, "EXECUTE_LOAD_QUERY_EVENT", Kind.STATEMENT, "a LOAD DATA statement, whose text the reader does not give"),
        (19, "TABLE_MAP_EVENT", Kind.TABLE_MAP),
        (20, "PRE_GA_WRITE_ROWS_EVENT", Kind.NOT_UNDERSTOOD, "row events of MySQL 5.1 before its release"),
        (21, "PRE_GA_UPDATE_ROWS_EVENT", Kind.NOT_UNDERSTOOD, "row events of MySQL 5.1 before its release"),
        (22, "PRE_GA_DELETE_ROWS_EVENT", Kind.NOT_UNDERSTOOD, "row events of MySQL 5.1 before its release"),
        (23, "WRITE_ROWS_EVENT_V1", Kind.ROWS), (24, "UPDATE_ROWS_EVENT_V1", Kind.ROWS),
        (25, "DELETE_ROWS_EVENT_V1", Kind.ROWS),
        (26, "INCIDENT_EVENT", Kind.NOT_UNDERSTOOD, "the server's notice that changes may be missing from the binlog"),
        (27, "HEARTBEAT_LOG_EVENT", Kind.IRRELEVANT, "the server's sign of life"),
        (28, "IGNORABLE_LOG_EVENT", Kind.IRRELEVANT, "marked by the server as one to ignore"),
        (29, "ROWS_QUERY_LOG_EVENT", Kind.IRRELEVANT, "the text of the statement whose row events follow"),
        (30, "WRITE_ROWS_EVENT", Kind.ROWS), (31, "UPDATE_ROWS_EVENT", Kind.ROWS),
        (32, "DELETE_ROWS_EVENT", Kind.ROWS),
        (33, "GTID_LOG_EVENT", Kind.BOUNDARY),
        (34, "ANONYMOUS_GTID_LOG_EVENT", Kind.BOUNDARY),
        (35, "PREVIOUS_GTIDS_LOG_EVENT", Kind.IRRELEVANT, "the GTIDs of the files before"),
        (36, "TRANSACTION_CONTEXT_EVENT", Kind.IRRELEVANT, "group replication's certification data"),
        (37, "VIEW_CHANGE_EVENT", Kind.IRRELEVANT, "a change of group replication's members"),
        (38, "XA_PREPARE_LOG_EVENT", Kind.TRANSACTION_UNDONE,
         "the end of an XA transaction's first phase: its row events happen only if a later XA COMMIT says so"),
        (39, "PARTIAL_UPDATE_ROWS_EVENT", Kind.ROWS),
        (40, "TRANSACTION_PAYLOAD_EVENT", Kind.NOT_UNDERSTOOD, "a compressed transaction the reader did not open"),
        (41, "HEARTBEAT_LOG_EVENT_V2", Kind.IRRELEVANT, "the server's sign of life"),
        (42, "GTID_TAGGED_LOG_EVENT", Kind.BOUNDARY),
        (160, "ANNOTATE_ROWS_EVENT", Kind.IRRELEVANT, "the text of the statement whose row events follow"),
        (161, "BINLOG_CHECKPOINT_EVENT", Kind.IRRELEVANT, "the server's crash-recovery mark"),
        (162, "GTID_EVENT", Kind.BOUNDARY),
        (163, "GTID_LIST_EVENT", Kind.IRRELEVANT, "the GTID state at the start of a file"),
        (164, "START_ENCRYPTION_EVENT", Kind.IRRELEVANT, "the file is encrypted; the server decrypts what it sends"),
    ]
    listed += [(code, name, Kind.NOT_UNDERSTOOD, "a compressed event the reader did not open")
               for code, name in _MARIADB_COMPRESSED.items()]
    types = [EventType(*entry) for entry in listed]
    return {t.code: t for t in types}


# MariaDB's compressed events and the plain type each holds (log_event.h).
_MARIADB_COMPRESSED = {165: "QUERY_COMPRESSED_EVENT", 166: "WRITE_ROWS_COMPRESSED_EVENT_V1",
                       167: "UPDATE_ROWS_COMPRESSED_EVENT_V1", 168: "DELETE_ROWS_COMPRESSED_EVENT_V1",
                       169: "WRITE_ROWS_COMPRESSED_EVENT", 170: "UPDATE_ROWS_COMPRESSED_EVENT",
                       171: "DELETE_ROWS_COMPRESSED_EVENT"}
_PLAIN = {165: 2, 166: 23, 167: 24, 168: 25, 169: 30, 170: 31, 171: 32}
TRANSACTION_PAYLOAD = 40
XID = 16
COMPRESSED = frozenset({*_PLAIN, TRANSACTION_PAYLOAD})
FORMAT_DESCRIPTION = 15
TYPES = _types()


def event_type(code: int, flags: int = 0) -> EventType:
    """The kind of an event of type ``code``; one this table does not know is not understood, unless the server
    flagged it as ignorable."""
    known = TYPES.get(code)
    if known is not None:
        return known
    if flags & IGNORABLE:
        return EventType(code, f"event type {code}", Kind.IRRELEVANT, "flagged by the server as one a replica may "
                                                                      "ignore")
    return EventType(code, f"event type {code}", Kind.NOT_UNDERSTOOD, "an event type this reader does not know")


class BadCompressedEvent(ValueError):
    """A compressed event whose bytes do not hold what its header says."""


@dataclass
class StreamFormat:
    """What the reader learnt of the stream from its format description events: whether events end with a
    checksum, and the length of each type's fixed part."""

    checksum: bool = True
    post_header: tuple[int, ...] = ()

    def learn(self, event: bytes) -> None:
        """Take the format of a format description event (header included)."""
        # binlog version (2), server version (50), created (4), header length (1), one length per type, then the
        # checksum algorithm (1) and the checksum (4) on every server that writes checksums at all (5.6.1+).
        lengths = event[HEADER + 57:-5]
        self.post_header = tuple(lengths)
        self.checksum = event[-5] != 0

    def post_header_of(self, code: int, default: int) -> int:
        return self.post_header[code - 1] if 0 < code <= len(self.post_header) else default


def uncompressed(event: bytes, stream: StreamFormat) -> list[bytes]:
    """The plain events a compressed event holds (header to checksum, each as the server writes it): one for
    MariaDB's compressed query and row events, the transaction's events for MySQL's transaction payload, which
    are flagged ``IN_PAYLOAD`` and given the payload's end position. Raises BadCompressedEvent."""
    code = event[4]
    if code == TRANSACTION_PAYLOAD:
        return _payload_events(event, stream)
    if code not in _PLAIN:
        raise ValueError(f"event type {code} is not a compressed one")
    size = int.from_bytes(event[9:13], "little")
    if size != len(event):
        raise BadCompressedEvent(f"the event is {len(event)} bytes long, and its header says {size}")
    body_end = size - (CHECKSUM if stream.checksum else 0)
    if code == 165:  # the query text is compressed; the fixed part, status variables and schema name are not
        fixed = stream.post_header_of(code, 13)
        schema_length = event[HEADER + 8]
        status_length = int.from_bytes(event[HEADER + 11:HEADER + 13], "little")
        start = HEADER + fixed + status_length + schema_length + 1
    else:  # the row images are; the table id, flags, extra data, column count and bitmaps are not
        start = HEADER + 8
        if stream.post_header_of(code, 10 if code >= 169 else 8) == 10:
            start += int.from_bytes(event[start:start + 2], "little")  # the extra data's length holds its own
        width, start = _packed(event, start)
        start += (width + 7) // 8 * (2 if code in (167, 170) else 1)
    if start >= body_end:
        raise BadCompressedEvent(f"its compressed part would start at byte {start} of {body_end}")
    inflated = _mariadb_inflate(event[start:body_end])
    return [_with_header(event[:start] + inflated, _PLAIN[code], None, 0, stream.checksum)]


def _mariadb_inflate(part: bytes) -> bytes:
    """MariaDB's compressed block: a byte of 0x80 | algorithm << 4 | n, the length in n big-endian bytes, zlib."""
    head = part[0]
    if head & 0x80 == 0 or (head & 0x70) >> 4 != 0 or not 1 <= head & 0x07 <= 4:
        raise BadCompressedEvent(f"its compressed part begins with {head:#04x}, which names no algorithm known "
                                 "(zlib is 0x80 plus the length's bytes)")
        # (MariaDB writes zlib only; another algorithm would be a server newer than this reader.)
    n = head & 0x07
    length = int.from_bytes(part[1:1 + n], "big")
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(part[1 + n:], length + 1)
    except zlib.error as exc:
        raise BadCompressedEvent(f"its compressed part does not inflate: {exc}") from None
    if len(data) != length or not inflater.eof:
        raise BadCompressedEvent(f"its compressed part inflates to {len(data)} bytes, not the {length} it says")
    return data


_END, _SIZE, _ALGORITHM, _UNCOMPRESSED = 0, 1, 2, 3
_ZSTD, _NONE = 0, 255
MAX_PAYLOAD = 1 << 32  # what a payload's uncompressed size field may say and be believed


def _payload_events(event: bytes, stream: StreamFormat) -> list[bytes]:
    """A MySQL TRANSACTION_PAYLOAD_EVENT's events: fields (type, length, value as packed integers) up to an end
    mark, then the payload, zstd or not compressed; inside, whole events without checksums."""
    end = len(event) - (CHECKSUM if stream.checksum else 0)
    at, fields = HEADER, {}
    while True:
        field, at = _packed(event, at)
        if field == _END:
            break
        length, at = _packed(event, at)
        value, _ = _packed(event, at)
        fields[field] = value
        at += length
        if at > end:
            raise BadCompressedEvent("its header fields run past its end")
    algorithm = fields.get(_ALGORITHM, _NONE)
    payload = event[at:end]
    if fields.get(_SIZE, len(payload)) != len(payload):
        raise BadCompressedEvent(f"its payload is {len(payload)} bytes, and its header says {fields[_SIZE]}")
    if algorithm == _ZSTD:
        import zstandard  # the one compression MySQL writes; imported when a payload is met

        size = fields.get(_UNCOMPRESSED)
        if size is None or size > MAX_PAYLOAD:
            raise BadCompressedEvent(f"its uncompressed size is {size}")
        try:
            data = zstandard.ZstdDecompressor().decompress(payload, max_output_size=size)
        except zstandard.ZstdError as exc:
            raise BadCompressedEvent(f"its payload does not decompress: {exc}") from None
        if len(data) != size:
            raise BadCompressedEvent(f"its payload decompresses to {len(data)} bytes, not the {size} it says")
    elif algorithm == _NONE:
        data = payload
    else:
        raise BadCompressedEvent(f"its compression algorithm {algorithm} is neither zstd (0) nor none (255)")
    end_position = int.from_bytes(event[13:17], "little")
    events, at = [], 0
    while at < len(data):
        if len(data) - at < HEADER:
            raise BadCompressedEvent(f"its payload ends inside an event's header, at byte {at}")
        size = int.from_bytes(data[at + 9:at + 13], "little")
        if size < HEADER or at + size > len(data):
            raise BadCompressedEvent(f"an event inside it, at byte {at}, says it is {size} bytes long")
        inner = data[at:at + size]
        flags = int.from_bytes(inner[17:19], "little") | IN_PAYLOAD
        events.append(_with_header(inner, inner[4], end_position, flags, stream.checksum))
        at += size
    return events


def _with_header(event: bytes, code: int, end_position: int | None, flags: int, checksum: bool) -> bytes:
    """``event`` (header and body, no checksum) with its type, size, end position and flags set, and the checksum
    the stream's events carry (CRC32 of all before it)."""
    size = len(event) + (CHECKSUM if checksum else 0)
    head = bytearray(event[:HEADER])
    head[4] = code
    head[9:13] = size.to_bytes(4, "little")
    if end_position is not None:
        head[13:17] = end_position.to_bytes(4, "little")
    head[17:19] = (int.from_bytes(head[17:19], "little") | flags).to_bytes(2, "little")
    whole = bytes(head) + event[HEADER:]
    return whole + struct.pack("<I", zlib.crc32(whole)) if checksum else whole


def _packed(data: bytes, at: int) -> tuple[int, int]:
    """A packed (length-encoded) integer at ``at``, and the offset after it."""
    if at >= len(data):
        raise BadCompressedEvent(f"it ends at byte {at}, inside a length")
    first = data[at]
    width = {252: 2, 253: 3, 254: 8}.get(first)
    if width is None:
        if first == 251 or first == 255:
            raise BadCompressedEvent(f"a length at byte {at} begins with {first}")
        return first, at + 1
    if at + 1 + width > len(data):
        raise BadCompressedEvent(f"it ends at byte {at}, inside a length")
    return int.from_bytes(data[at + 1:at + 1 + width], "little"), at + 1 + width
