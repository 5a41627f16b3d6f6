"""Every binlog event type decided (``core.binlog_events``), and compressed events turned back into the plain
events they hold: MySQL's transaction payload from a recorded MySQL 8 binlog, MariaDB's compressed events built
as its server writes them."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from pymysqlreplication.packet import BinLogPacketWrapper

from airflow_cdc_provider.core.binlog_events import (
    IGNORABLE,
    IN_PAYLOAD,
    TYPES,
    BadCompressedEvent,
    Kind,
    StreamFormat,
    event_type,
    uncompressed,
)

BINLOGS = Path(__file__).resolve().parents[2].parent / "shared" / "mysql-binlogs"


def _events(name: str) -> list[bytes]:
    data = (BINLOGS / name).read_bytes()
    assert data[:4] == b"\xfebin"
    events, at = [], 4
    while at + 19 <= len(data):
        size = int.from_bytes(data[at + 9:at + 13], "little")
        events.append(data[at:at + size])
        at += size
    return events


# The reader's own classes: every other type reaches the pass as its NotImplementedEvent, undecoded.
_READER_CLASSES = set(BinLogPacketWrapper._BinLogPacketWrapper__event_map)


@pytest.mark.parametrize("code", [c for c in range(256) if c not in _READER_CLASSES])
def test_each_type_the_reader_hands_over_undecoded_is_decided(code):
    decided = event_type(code)
    # Nothing the pass would need the reader's decoding for: no rows, statement or table map of its own.
    assert decided.kind in (Kind.IRRELEVANT, Kind.NOT_UNDERSTOOD, Kind.BOUNDARY), decided
    if decided.kind is Kind.IRRELEVANT:
        assert decided.why, "an event passed over says why it holds no change"
    if code not in TYPES:
        assert decided.kind is Kind.NOT_UNDERSTOOD and "does not know" in decided.why
        assert event_type(code, IGNORABLE).kind is Kind.IRRELEVANT, "the server's ignorable flag"


@pytest.mark.parametrize(("code", "kind"), [
    (26, Kind.NOT_UNDERSTOOD),  # INCIDENT: changes may be missing
    (20, Kind.NOT_UNDERSTOOD), (21, Kind.NOT_UNDERSTOOD), (22, Kind.NOT_UNDERSTOOD),  # pre-GA row events
    (6, Kind.NOT_UNDERSTOOD), (10, Kind.NOT_UNDERSTOOD),  # old LOAD DATA
    (38, Kind.TRANSACTION_UNDONE),  # XA PREPARE
    (40, Kind.NOT_UNDERSTOOD), *((c, Kind.NOT_UNDERSTOOD) for c in range(165, 172)),  # compressed, not opened
    (23, Kind.ROWS), (30, Kind.ROWS), (39, Kind.ROWS), (19, Kind.TABLE_MAP), (2, Kind.STATEMENT),
    (18, Kind.STATEMENT), (16, Kind.BOUNDARY), (33, Kind.BOUNDARY), (34, Kind.BOUNDARY), (42, Kind.BOUNDARY),
    (162, Kind.BOUNDARY), (4, Kind.ROTATE), (160, Kind.IRRELEVANT), (161, Kind.IRRELEVANT), (5, Kind.IRRELEVANT),
])
def test_event_kinds(code, kind):
    assert event_type(code).kind is kind


def test_the_recorded_binlogs_hold_no_event_the_table_does_not_list():
    for path in sorted(BINLOGS.iterdir()):
        if path.name in ("README.md", "LICENSE-MIT") or "truncated" in path.name or "corrupt" in path.name:
            continue
        for event in _events(path.name):
            assert event[4] in TYPES, (path.name, event[4])


def _fake_ctl():
    class Ctl:
        charset = "utf8mb4"

        def _get_dbms(self):
            return "mysql"

    return Ctl()


def _parse(event: bytes, table_map: dict):
    """The reader's own parse of an event (as a stream gives it: an OK byte, then the event)."""
    from pymysql.protocol import MysqlPacket

    from airflow_cdc_provider.hooks.mysql_source import EVERY_EVENT

    wrapper = BinLogPacketWrapper(MysqlPacket(b"\0" + event, "utf8"), table_map, _fake_ctl(), (8, 0, 36), True,
                                  set(EVERY_EVENT), None, None, None, None, False, False, False, False, False)
    return wrapper


def test_a_mysql_transaction_payload_gives_its_events_ending_where_it_ends():
    events = _events("transaction_compression.000001")
    stream = StreamFormat()
    stream.learn(events[0])
    assert stream.checksum and len(stream.post_header) >= 40
    (payload,) = [e for e in events if e[4] == 40]
    inner = uncompressed(payload, stream)
    assert [e[4] for e in inner] == [2, 19, 30, 16]  # BEGIN, the table map, the row, the commit
    end = int.from_bytes(payload[13:17], "little")
    for event in inner:
        assert int.from_bytes(event[13:17], "little") == end
        assert int.from_bytes(event[17:19], "little") & IN_PAYLOAD
        assert int.from_bytes(event[9:13], "little") == len(event)
        assert struct.unpack("<I", event[-4:])[0] == zlib.crc32(event[:-4]), "the checksum the stream's events have"
    table_map: dict = {}
    parsed = [_parse(e, table_map) for e in inner]
    assert parsed[0].event.query == "BEGIN"
    rows = parsed[2].event
    # The file's one transaction inserts the row (1) into test.tb1 (a single INT column, minimal metadata).
    assert (rows.schema, rows.table) == ("test", "tb1")
    assert [list(r["values"].values()) for r in rows.rows] == [[1]]
    assert parsed[3].event.xid
    # A payload whose bytes are damaged says so.
    damaged = bytearray(payload)
    damaged[-10] ^= 0xFF
    with pytest.raises(BadCompressedEvent):
        uncompressed(bytes(damaged), stream)


def _mariadb_compress(event: bytes, code: int, start: int, checksum: bool = True) -> bytes:
    """A plain event compressed as MariaDB's binlog_buf_compress does, from byte ``start`` on (test's own)."""
    body = event[start:len(event) - (4 if checksum else 0)]
    n = max(1, (len(body).bit_length() + 7) // 8)
    packed = bytes([0x80 | n]) + len(body).to_bytes(n, "big") + zlib.compress(body)
    head = bytearray(event[:start])
    head[4] = code
    whole = bytes(head) + packed
    size = len(whole) + (4 if checksum else 0)
    whole = whole[:9] + size.to_bytes(4, "little") + whole[13:]
    return whole + struct.pack("<I", zlib.crc32(whole)) if checksum else whole


def test_mariadb_compressed_row_and_query_events_are_the_plain_ones():
    events = _events("mariadb-bin.000001")
    stream = StreamFormat()
    stream.learn(events[0])
    for plain in [e for e in events if e[4] == 23]:
        width = plain[19 + 8]  # one byte: fewer than 251 columns
        start = 19 + 8 + 1 + (width + 7) // 8
        compressed = _mariadb_compress(plain, 166, start, stream.checksum)
        assert uncompressed(compressed, stream) == [plain]
    # A query event (built: the recorded MariaDB file has none): fixed part, status variables, schema, text.
    text = b"TRUNCATE TABLE shop.items" * 20
    fixed = struct.pack("<IIBHH", 7, 0, 4, 0, 0)
    plain = struct.pack("<IBIIIH", 1700000000, 2, 1, 0, 1234, 0) + fixed + b"shop\0" + text
    plain = plain[:9] + (len(plain) + 4).to_bytes(4, "little") + plain[13:]
    plain += struct.pack("<I", zlib.crc32(plain))
    compressed = _mariadb_compress(plain, 165, 19 + 13 + 5)
    assert len(compressed) < len(plain)
    assert uncompressed(compressed, stream) == [plain]
    # Damaged: the length it says, an unknown algorithm.
    with pytest.raises(BadCompressedEvent, match="inflate"):
        uncompressed(compressed[:-12] + b"\0" * 8 + compressed[-4:], stream)
    wrong = bytearray(compressed)
    wrong[19 + 13 + 5] = 0x91  # algorithm 1
    with pytest.raises(BadCompressedEvent, match="names no algorithm"):
        uncompressed(bytes(wrong), stream)


class _RecordedSource:
    """The binlog pass's source over a recorded file: its events as the reader's connection hands them over, a
    transaction payload opened into its events (``hooks.source_link``)."""

    address = ("recorded", 0)

    def __init__(self, name: str) -> None:
        self.events = _events(name)

    def binlog_stream(self, start, server_id, only_schemas, only_tables):
        stream = StreamFormat()
        table_map: dict = {}
        parsed = []
        for event in self.events:
            if event[4] == 15:
                stream.learn(event)
            if int.from_bytes(event[13:17], "little") <= start.position:
                continue
            for plain in uncompressed(event, stream) if event[4] == 40 else [event]:
                parsed.append(_parse(plain, table_map).event)

        class Stream:
            log_file, log_pos = start.file, parsed[-1].packet.log_pos

            def __iter__(self):
                return iter(parsed)

            def close(self):
                pass

        return Stream()


def test_the_pass_reads_a_payloads_events_as_one_transaction_ending_where_the_payload_ends(tmp_path):
    from airflow_cdc_provider.core.records import RawHeader
    from airflow_cdc_provider.core.watermark import Watermark
    from airflow_cdc_provider.stages.extract import MissingRowMetadata, extract, in_one_directory

    # The recorded file: a format description, the GTIDs before (ending at 197), an anonymous GTID, then the one
    # transaction as a payload (ending at 431): BEGIN, the table map of test.tb1, its row, the commit.
    start, high = (Watermark(file="binlog.000001", position=p, server_id=1) for p in (197, 431))
    header = RawHeader("test.tb1", (("a", "int(11)"),), ("a",))
    result = extract(_RecordedSource("transaction_compression.000001"), in_one_directory([header], tmp_path), start, high)
    # The row event inside reached its table: written with minimal row metadata, it carries no column names,
    # which stops the table (the way the pass meets such an event in any binlog).
    error = result.failed["test.tb1"]
    assert isinstance(error, MissingRowMetadata) and "binlog file 1, end position 431" in str(error)
    assert result.end == high
