"""Replay: the seed's example, repeated inserts, key changes, typed values, corrupt lines, partitioning."""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from airflow_cdc_provider.core.changelog import POSITION_COLUMNS
from airflow_cdc_provider.core.records import CorruptRawFile, RawHeader, format_record, key_uid
from airflow_cdc_provider.core.replay import parse_block
from airflow_cdc_provider.core.schema import Fill
from airflow_cdc_provider.core.types import file_schema
from airflow_cdc_provider.stages import replay as replay_module
from airflow_cdc_provider.stages.replay import blocks_backwards, blocks_forwards, replay

HEADER = RawHeader("shop.users", (("id", "varchar(10)"), ("name", "varchar(50)"), ("score", "int(11)")), ("id",))


def write_raw(path: Path, changes, header: RawHeader = HEADER, start: int = 0) -> Path:
    """changes: (op, values) in binlog order."""
    keys = header.key_indexes()
    with open(path, "w", encoding="utf-8") as f:
        f.write(header.format())
        for n, (op, values) in enumerate(changes, start):
            f.write(format_record(op, key_uid([values[i] for i in keys]), (1, 1000 + n, 0), values))
    return path


def run(tmp_path: Path, *files: Path, **kw):
    result = replay(files, tmp_path / "upsert.parquet", tmp_path / "delete.parquet", **kw)
    upserts = sorted(tuple(r.values()) for r in pq.read_table(result.upsert_file).to_pylist())
    deletes = sorted(tuple(r.values()) for r in pq.read_table(result.delete_file).to_pylist())
    return result, upserts, deletes


def test_the_seeds_example(tmp_path):
    # Section 4.1/4.2 of the seed: seven changes of seven keys; every one is the last of its key.
    raw = write_raw(tmp_path / "raw", [
        ("I", ["20001", "name1", 11]),
        ("I", ["20002", "name2", 12]),
        ("U", ["10007", "name777", 777]),
        ("U", ["10002", "name222", 222]),
        ("D", ["10005", "name5", 15]),
        ("D", ["10001", "name1", 10]),
        ("D", ["10008", "name8", 22]),
    ])
    result, upserts, deletes = run(tmp_path, raw)
    assert upserts == [("10002", "name222", 222), ("10007", "name777", 777), ("20001", "name1", 11),
                       ("20002", "name2", 12)]
    assert deletes == [("10001",), ("10005",), ("10008",)]
    assert (result.records, result.upserts, result.deletes) == (7, 4, 3)


def test_last_operation_per_key_wins(tmp_path):
    raw = write_raw(tmp_path / "raw", [
        ("I", ["a", "first", 1]),
        ("U", ["a", "second", 2]),
        ("U", ["a", "third", 3]),      # a: last is an update
        ("I", ["b", "b", 1]),
        ("D", ["b", "b", 1]),          # b: inserted then deleted → delete (harmless if absent)
        ("D", ["c", "c", 1]),
        ("I", ["c", "again", 2]),      # c: deleted then re-inserted → upsert only
        ("I", ["d", "d", 1]),
        ("I", ["d", "d-reread", 2]),   # d: a repeated insert (a re-read range): the later one only
    ])
    _, upserts, deletes = run(tmp_path, raw)
    assert upserts == [("a", "third", 3), ("c", "again", 2), ("d", "d-reread", 2)]
    assert deletes == [("b",)]


def test_key_change_deletes_the_old_key_and_upserts_the_new(tmp_path):
    # Extraction writes an UPDATE that changes the key as D(old) then U(new), at the same coordinate.
    raw = write_raw(tmp_path / "raw", [("I", ["old", "x", 1]), ("D", ["old", "x", 1]), ("U", ["new", "x", 1])])
    _, upserts, deletes = run(tmp_path, raw)
    assert upserts == [("new", "x", 1)] and deletes == [("old",)]


def test_later_files_win(tmp_path):
    first = write_raw(tmp_path / "r1", [("I", ["a", "v1", 1]), ("I", ["b", "v1", 1])])
    second = write_raw(tmp_path / "r2", [("U", ["a", "v2", 2])], start=10)
    _, upserts, _ = run(tmp_path, first, second)
    assert upserts == [("a", "v2", 2), ("b", "v1", 1)]


def test_values_keep_their_types_and_never_break_a_line(tmp_path):
    header = RawHeader("t.t", (
        ("id", "bigint(20) unsigned"), ("s", "text"), ("b", "blob"), ("d", "decimal(30,10)"),
        ("ts", "timestamp(6)"), ("dtm", "datetime(3)"), ("day", "date"), ("t", "time"),
    ), ("id",))
    awkward = 'comma, "quote", \'single\'\nnew line\ttab \\ back 😀 \x00nul'
    rows = [
        [18446744073709551615, awkward, b"\x00\n\xff,", Decimal("12345678901234567890.0123456789"),
         dt.datetime(2024, 2, 29, 23, 59, 59, 123456), dt.datetime(1999, 12, 31, 1, 2, 3, 456000),
         dt.date(1, 1, 1), dt.timedelta(hours=-838, minutes=-59)],
        [2, "", b"", Decimal("0E-10"), None, None, None, None],
        [3, None, None, None, None, None, None, None],
    ]
    raw = write_raw(tmp_path / "raw", [("I", r) for r in rows], header)
    assert len(raw.read_text(encoding="utf-8").splitlines()) == 1 + len(rows)
    result = replay([raw], tmp_path / "u.parquet", tmp_path / "d.parquet")
    table = pq.read_table(result.upsert_file)
    got = {r["id"]: r for r in table.to_pylist()}
    assert got[18446744073709551615]["s"] == awkward and got[18446744073709551615]["b"] == b"\x00\n\xff,"
    assert got[18446744073709551615]["d"] == Decimal("12345678901234567890.0123456789")
    assert got[18446744073709551615]["ts"] == dt.datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=dt.UTC)
    assert got[18446744073709551615]["dtm"] == dt.datetime(1999, 12, 31, 1, 2, 3, 456000)
    assert got[18446744073709551615]["t"] == dt.timedelta(hours=-838, minutes=-59)
    assert got[2]["s"] == "" and got[2]["b"] == b"" and got[3]["s"] is None and got[3]["b"] is None
    assert str(table.schema.field("ts").type) == "timestamp[us, tz=UTC]"


def test_corrupt_line_names_file_and_line_and_writes_nothing(tmp_path):
    raw = write_raw(tmp_path / "raw", [("I", [str(i), "n", i]) for i in range(1000)])
    lines = raw.read_text().splitlines(keepends=True)
    lines[501] = lines[501].replace("\t", " ", 1)  # line 502 of the file
    raw.write_text("".join(lines))
    with pytest.raises(CorruptRawFile) as err:
        replay([raw], tmp_path / "u.parquet", tmp_path / "d.parquet", block_size=4096)
    assert f"{raw}, line 502" in str(err.value)
    assert not (tmp_path / "u.parquet").exists() and not (tmp_path / "d.parquet").exists()


def test_cut_short_last_line_is_refused(tmp_path):
    raw = write_raw(tmp_path / "raw", [("I", ["a", "n", 1]), ("I", ["b", "n", 2])])
    raw.write_bytes(raw.read_bytes()[:-5])
    with pytest.raises(CorruptRawFile, match="line 3 is corrupt: the last line is cut short"):
        replay([raw], tmp_path / "u.parquet", tmp_path / "d.parquet")


def test_unreadable_values_of_a_surviving_record(tmp_path):
    raw = write_raw(tmp_path / "raw", [("I", ["a", "n", 1])])
    raw.write_text(raw.read_text().replace('"n"', '"n]'))
    with pytest.raises(CorruptRawFile, match="values cannot be read"):
        replay([raw], tmp_path / "u.parquet", tmp_path / "d.parquet")


DOCS = RawHeader("t.docs", (("id", "int(11)"), ("body", "longtext")), ("id",))


class CountingFile:
    """A file whose reads are counted (bytes returned), to see how often the reader reads each byte."""

    def __init__(self, file, counted):
        self.file, self.counted = file, counted

    def read(self, *args):
        data = self.file.read(*args)
        self.counted[0] += len(data)
        return data

    def readline(self, *args):
        line = self.file.readline(*args)
        self.counted[0] += len(line)
        return line

    def seek(self, *args):
        return self.file.seek(*args)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def test_a_line_of_tens_of_megabytes_is_read_once_in_linear_time_either_way(tmp_path, monkeypatch):
    body = '0123456789abcdef"\n\té' * (1 << 20)  # 20 M characters, 25 MB as a raw line (JSON escapes)
    changes = [("I", [i, f"small {i}"]) for i in range(750)] + [("U", [5000, body])] + [
        ("I", [i, f"after {i}"]) for i in range(750, 1500)]
    raw = write_raw(tmp_path / "raw", changes, DOCS)
    data = raw.read_bytes()
    header_end = data.index(b"\n") + 1
    lines = data[header_end:].splitlines(keepends=False)
    assert len(lines) == 1501 and max(map(len, lines)) > 25_000_000

    started = time.process_time()
    parse_block(raw.read_bytes()[header_end:])  # a linear pass over the lines: what reading them costs at least
    linear = time.process_time() - started

    counted = [0]
    real_open = open
    monkeypatch.setattr(replay_module, "open", lambda *a, **k: CountingFile(real_open(*a, **k), counted),
                        raising=False)
    for reader, order in ((blocks_backwards, reversed), (blocks_forwards, list)):
        counted[0] = 0
        started = time.process_time()
        blocks = list(reader(raw, 8192))  # the long line spans 3,000 blocks
        took = time.process_time() - started
        assert [block.line(i) for block in order(blocks) for i in range(len(block.starts))] == lines
        # Each byte read once (the header twice, the last byte twice to check the file's end).
        assert counted[0] <= len(data) + header_end + 1, reader.__name__
        # Re-copying the gathered part of the line for each block took seconds here (3,000 copies of up to 25 MB);
        # gathered and joined once, the reader costs about one linear pass.
        assert took < 5 * linear + 0.2, (reader.__name__, took, linear)
    monkeypatch.undo()

    result = replay([raw], tmp_path / "u.parquet", tmp_path / "d.parquet", block_size=65536)
    assert result.upserts == 1501
    rows = {r["id"]: r["body"] for r in pq.read_table(result.upsert_file).to_pylist()}
    assert hashlib.sha256(rows[5000].encode()).hexdigest() == hashlib.sha256(body.encode()).hexdigest()
    assert rows[1499] == "after 1499" and rows[0] == "small 0"


def reference(changes):
    last = {}
    for op, values in changes:
        last[values[0]] = (op, values)
    upserts = sorted(tuple(v) for op, v in last.values() if op != "D")
    deletes = sorted((v[0],) for op, v in last.values() if op == "D")
    return upserts, deletes


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_partitioned_replay_gives_the_same_result(tmp_path, seed):
    rng = random.Random(seed)
    changes = [(rng.choice("IUD"), [f"k{rng.randrange(6000)}", f"v{n}", n]) for n in range(30000)]
    half = len(changes) // 2
    files = [write_raw(tmp_path / "r1", changes[:half]), write_raw(tmp_path / "r2", changes[half:], start=half)]
    in_memory, upserts, deletes = run(tmp_path, *files)
    assert in_memory.partitions == 0
    assert (upserts, deletes) == reference(changes)
    # A budget of 1024 keys: the 6000 keys must be split into partitions on disk.
    split, upserts2, deletes2 = run(tmp_path, *files, memory_budget=1024 * 96, block_size=16384)
    assert split.partitions >= 2 and split.peak_keys <= 1024 + 16384 // 40
    assert (upserts2, deletes2) == (upserts, deletes)
    assert split.records == in_memory.records == len(changes)


@pytest.mark.parametrize("key", [[5], [-(2**63)], [18446744073709551615], ["abc"], ['quo"te\n😀\x00'], [""], [1, "a"],
                                 [Decimal("1.50")], [b"\x00"]])
def test_uid_fast_paths_spell_keys_as_the_general_encoding(key):
    import hashlib

    from airflow_cdc_provider.core.records import encode_values

    assert key_uid(key) == hashlib.md5(encode_values(key).encode("utf-8")).hexdigest()


def test_fast_encoding_is_the_json_encoders_text():
    import json

    from airflow_cdc_provider.core.records import _ENCODER, decode_values, encode_values

    rows = [
        [None, 0, -5, 2**70, "", 'a"b\\c\n\t\x00😀é', Decimal("-0.00"), Decimal("1E+3"),
         dt.datetime(2024, 1, 2, 3, 4, 5), dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.date(1, 1, 1)],
        [1.5, True, bytearray(b"\x00"), dt.timedelta(seconds=-1)],  # types the fast path leaves to the encoder
        [b"", b"\x00\xff" * 100],
    ]
    for row in rows:
        assert encode_values(row) == _ENCODER.encode(row)
        json.loads(encode_values(row))
        assert decode_values(encode_values(row)) == row


# --- columns that change in the range ---------------------------------------------------------------------

WIDER = RawHeader("shop.users", HEADER.columns[:2] + (("city", "varchar(20)"),) + HEADER.columns[2:], ("id",))
RENAMED = RawHeader("shop.users", (("id", "varchar(10)"), ("title", "varchar(50)"), ("score", "int(11)")), ("id",))


def layered(tmp_path: Path, *parts) -> list[Path]:
    """Raw files in binlog order, one per (header, changes); coordinates keep rising across them."""
    files, n = [], 0
    for i, (header, changes) in enumerate(parts):
        files.append(write_raw(tmp_path / f"raw-{i}", changes, header, start=n))
        n += len(changes)
    return files


def test_rows_from_before_an_added_column_get_its_fill_and_later_rows_their_value(tmp_path):
    files = layered(tmp_path,
                    (HEADER, [("I", ["a", "A", 1]), ("U", ["b", "B", 2]), ("D", ["c", "C", 3])]),
                    (WIDER, [("U", ["b", "B2", "Oslo", 5]), ("I", ["d", "D", None, 4])]))
    fills = [Fill("city", (), "n/a")]
    result, upserts, deletes = run(tmp_path, *files, fills=fills)
    assert upserts == [("a", "A", 1, "n/a"), ("b", "B2", 5, "Oslo"), ("d", "D", 4, None)]
    assert deletes == [("c",)]
    assert [f.name for f in pq.read_schema(result.upsert_file)] == ["id", "name", "score", "city"]
    assert pq.read_table(result.fills_file).to_pylist() == [{"city": "n/a"}]


def test_partitioned_replay_across_a_change_of_columns_gives_the_same_result(tmp_path):
    rng = random.Random(7)
    before = [(rng.choice("IUD"), [f"k{rng.randrange(3000)}", f"v{n}", n]) for n in range(8000)]
    after = [(rng.choice("IUD"), [f"k{rng.randrange(3000)}", f"w{n}", f"c{n}", n]) for n in range(8000)]
    files = layered(tmp_path, (HEADER, before), (WIDER, after))
    fills = [Fill("city", (), "n/a")]
    whole, upserts, deletes = run(tmp_path, *files, fills=fills)
    split, upserts2, deletes2 = run(tmp_path, *files, fills=fills, memory_budget=1024 * 96, block_size=16384)
    assert whole.partitions == 0 and split.partitions >= 2
    assert (upserts2, deletes2) == (upserts, deletes)
    assert {u[3] == "n/a" for u in upserts} == {True, False}, "rows from both sides of the change survive"


def test_a_renamed_column_carries_its_values_and_the_old_one_is_kept_until_the_rename(tmp_path):
    files = layered(tmp_path,
                    (HEADER, [("I", ["a", "A", 1]), ("I", ["b", "B", 2])]),
                    (RENAMED, [("U", ["b", "B2", 3])]))
    fills = [Fill("title", ("name",), None, needs_value=False)]
    result, upserts, _ = run(tmp_path, *files, fills=fills)
    # The row last changed before the rename has both names; the one changed after, only the new one.
    assert upserts == [("a", "A", 1, "A"), ("b", None, 3, "B2")]
    meta = pq.read_schema(result.fills_file).metadata[b"cdc.fills"]
    assert b'"sources": ["name"]' in meta


def test_a_column_dropped_and_added_again_holds_the_new_default_for_rows_from_before(tmp_path):
    dropped = RawHeader("shop.users", HEADER.columns[:1] + HEADER.columns[2:], ("id",))
    files = layered(tmp_path,
                    (HEADER, [("I", ["a", "A", 1])]),
                    (dropped, [("I", ["b", 2])]),
                    (HEADER, [("I", ["c", "C", 3])]))
    _, upserts, _ = run(tmp_path, *files, fills=[Fill("name", (), "fresh")])
    assert upserts == [("a", "fresh", 1), ("b", "fresh", 2), ("c", "C", 3)]


def test_files_of_another_key_are_refused(tmp_path):
    other = RawHeader("shop.users", HEADER.columns, ("name",))
    files = layered(tmp_path, (HEADER, [("I", ["a", "A", 1])]), (other, [("I", ["b", "B", 2])]))
    with pytest.raises(CorruptRawFile, match="another table or key"):
        run(tmp_path, *files)
    assert not (tmp_path / "upsert.parquet").exists()


def test_a_key_holding_zero_dates_is_one_key_and_never_another_keys():
    # A zero DATETIME or DATE of a key column is None by both ways in (core.values): the same key, the same uid.
    zero = [1, None, None, dt.timedelta(0)]
    assert key_uid(zero) == key_uid([1, None, None, dt.timedelta(0)])
    # NULL is JSON's null in the encoding: never the text "null", nor a shifted or missing part, nor a zero value.
    others = [[1, "null", None, dt.timedelta(0)], [1, None, dt.timedelta(0)], [1, None, dt.timedelta(0), None],
              [1, dt.date(1, 1, 1), None, dt.timedelta(0)], [1, None, None, 0], [1, None, None, None],
              [1, None, dt.date(2020, 1, 1), dt.timedelta(0)], [1, dt.date(2020, 1, 1), None, dt.timedelta(0)],
              [1, dt.datetime(1, 1, 1), None, dt.timedelta(0)], [None, 1, None, dt.timedelta(0)]]
    uids = {key_uid(key) for key in others}
    assert len(uids) == len(others) and key_uid(zero) not in uids


def test_a_key_holding_zero_dates_deleted_inserted_and_updated_keeps_its_last_operation(tmp_path):
    header = RawHeader("legacy.datetime_key", (("id", "int(11)"), ("dt", "datetime"), ("d", "date"),
                                               ("t", "time"), ("v", "varchar(10)")), ("id", "dt", "d", "t"))
    zero, at = dt.timedelta(0), dt.datetime(2020, 1, 1)
    raw = write_raw(tmp_path / "raw", [
        ("D", [1, None, None, zero, "a"]),
        ("I", [1, None, None, zero, "b"]),
        ("U", [1, None, None, zero, "c"]),
        ("D", [2, at, None, zero, "x"]),
        ("I", [2, None, dt.date(2020, 1, 1), zero, "y"]),  # another key of id 2: both stay
    ], header)
    result, upserts, deletes = run(tmp_path, raw)
    assert upserts == [(1, None, None, zero, "c"), (2, None, dt.date(2020, 1, 1), zero, "y")]
    assert deletes == [(2, at, None, zero)]
    assert (result.upserts, result.deletes) == (2, 1)


# --- positions: where each key's surviving record is in the binlog (a table with a changelog) -------------


def write_at(path: Path, changes, header: RawHeader = HEADER) -> Path:
    """changes: (op, values, (seq, pos, row)) in binlog order."""
    keys = header.key_indexes()
    with open(path, "w", encoding="utf-8") as f:
        f.write(header.format())
        for op, values, at in changes:
            f.write(format_record(op, key_uid([values[i] for i in keys]), at, values))
    return path


def positioned(result) -> tuple[dict, dict]:
    """Each file's rows by key: (the row's own values, its coordinate); the coordinate columns last."""
    files = []
    for file in (result.upsert_file, result.delete_file):
        rows = [tuple(r.values()) for r in pq.read_table(file).to_pylist()]
        by_key = {r[0]: (r[:-3], r[-3:]) for r in rows}
        assert len(by_key) == len(rows)
        files.append(by_key)
    return files[0], files[1]


def last_records(changes) -> tuple[dict, dict]:
    """What replay must give, worked out plainly: each key's last change, its values and coordinate."""
    last = {}
    for op, values, at in changes:
        last[values[0]] = (op, tuple(values), at)
    upserts = {k: (v, at) for k, (op, v, at) in last.items() if op != "D"}
    deletes = {k: ((k,), at) for k, (op, v, at) in last.items() if op == "D"}
    return upserts, deletes


def test_positions_are_the_coordinate_of_each_keys_last_record(tmp_path):
    first = write_at(tmp_path / "r1", [
        ("I", ["a", "A", 1], (7, 500, 0)),   # a: last changed in the earlier file
        ("I", ["b", "B", 1], (7, 600, 1)),
        ("I", ["c", "C", 1], (7, 700, 0)),
        ("D", ["e", "E", 1], (7, 800, 2)),
        ("I", ["x", "X", 1], (7, 900, 0)),
    ])
    second = write_at(tmp_path / "r2", [
        ("U", ["b", "B2", 2], (1_000_000, 5_000_000_000, 0)),  # beyond int32: the position is int64
        ("D", ["c", "C", 1], (1_000_000, 5_000_000_300, 3)),   # an update of the key c → d: D old, U new
        ("U", ["d", "C", 1], (1_000_000, 5_000_000_300, 3)),
        ("D", ["x", "X", 1], (1_000_000, 5_000_000_400, 0)),   # x deleted, then inserted again
        ("I", ["x", "X2", 2], (1_000_000, 5_000_000_500, 1)),
    ])
    result = replay([first, second], tmp_path / "u.parquet", tmp_path / "d.parquet", positions=True)
    upserts, deletes = positioned(result)
    assert upserts == {
        "a": (("a", "A", 1), (7, 500, 0)),
        "b": (("b", "B2", 2), (1_000_000, 5_000_000_000, 0)),
        "d": (("d", "C", 1), (1_000_000, 5_000_000_300, 3)),
        "x": (("x", "X2", 2), (1_000_000, 5_000_000_500, 1)),
    }
    assert deletes == {"c": (("c",), (1_000_000, 5_000_000_300, 3)), "e": (("e",), (7, 800, 2))}
    for file, own in ((result.upsert_file, ["id", "name", "score"]), (result.delete_file, ["id"])):
        schema = pq.read_schema(file)
        assert schema.names == [*own, *POSITION_COLUMNS]
        assert [str(schema.field(n).type) for n in POSITION_COLUMNS] == ["int32", "int64", "int32"]
    assert result.positions and result.columns == HEADER.columns
    assert pq.read_schema(result.upsert_file).metadata == file_schema(HEADER).metadata


@pytest.mark.parametrize("way", ["whole", "small batches", "partitioned"])
def test_positions_follow_their_rows_in_batches_and_partitions(tmp_path, monkeypatch, way):
    rng = random.Random(11)
    changes = [(rng.choice("IUD"), [f"k{rng.randrange(6000)}", f"v{n}", n], (3 + n // 9000, 4 + 40 * n, n % 3))
               for n in range(20000)]
    files = [write_at(tmp_path / "r1", changes[:9000]), write_at(tmp_path / "r2", changes[9000:])]
    kw = {}
    if way == "small batches":  # rows written while the coordinates of the rest of their block are held
        monkeypatch.setattr(replay_module, "BATCH_ROWS", 7)
    if way == "partitioned":
        kw = {"memory_budget": 1024 * 96, "block_size": 16384}
    result = replay(files, tmp_path / "u.parquet", tmp_path / "d.parquet", positions=True, **kw)
    assert (result.partitions >= 2) == (way == "partitioned")
    assert positioned(result) == last_records(changes)


@pytest.mark.parametrize("split", [False, True])
def test_positions_across_a_change_of_columns(tmp_path, split):
    rng = random.Random(5)
    before = [(rng.choice("IUD"), [f"k{rng.randrange(3000)}", f"v{n}", n], (1, 4 + n, 0)) for n in range(6000)]
    after = [(rng.choice("IUD"), [f"k{rng.randrange(3000)}", f"w{n}", f"c{n}", n], (2, 4 + n, 1))
             for n in range(6000)]
    files = [write_at(tmp_path / "r1", before), write_at(tmp_path / "r2", after, WIDER)]
    kw = {"memory_budget": 1024 * 96, "block_size": 16384} if split else {}
    result = replay(files, tmp_path / "u.parquet", tmp_path / "d.parquet", positions=True,
                    fills=[Fill("city", (), "n/a")], **kw)
    assert (result.partitions >= 2) == split
    upserts, deletes = positioned(result)
    # In the upsert file a row from after the change has its city last: id, name, score, city.
    expected = {k: ((v[0], v[1], v[3], v[2]) if len(v) == 4 else (*v, "n/a"), at)
                for k, (v, at) in last_records(before + after)[0].items()}
    assert upserts == expected and deletes == last_records(before + after)[1]
    assert {at[0] for _, at in upserts.values()} == {1, 2}, "rows from both sides of the change survive"
    assert pq.read_schema(result.upsert_file).names == ["id", "name", "score", "city", *POSITION_COLUMNS]
    assert pq.read_schema(result.fills_file).names == ["city"]


def test_without_positions_the_files_are_as_before(tmp_path):
    raw = write_at(tmp_path / "raw", [("I", ["a", "A", 1], (1, 4, 0)), ("D", ["b", "B", 2], (1, 9, 0))])
    result = replay([raw], tmp_path / "u.parquet", tmp_path / "d.parquet")
    assert not result.positions
    assert pq.read_schema(result.upsert_file) == file_schema(HEADER)
    assert pq.read_schema(result.upsert_file).metadata == file_schema(HEADER).metadata
    assert pq.read_schema(result.delete_file).names == ["id"]
    assert pq.read_table(result.upsert_file).to_pylist() == [{"id": "a", "name": "A", "score": 1}]


@pytest.mark.parametrize("coordinate", ["1:x:0", "1:2", "1:2:3:4", "-1:2:3", "2147483648:2:3", "1:2: 3", "1:2_0:3",
                                        "1:9223372036854775808:0", "1:12345678901234567890:0", "", "1::0", "1:2:3/"])
def test_a_bad_coordinate_of_a_surviving_record_is_refused_and_of_a_dropped_one_not_read(tmp_path, coordinate):
    raw = write_at(tmp_path / "raw", [("I", ["a", "A", 1], (1, 4, 0)), ("U", ["a", "A2", 2], (1, 9, 0))])
    survivor = raw.read_text().replace("\t1:9:0\t", f"\t{coordinate}\t")
    raw.write_text(survivor)
    with pytest.raises(CorruptRawFile, match="coordinate"):
        replay([raw], tmp_path / "u.parquet", tmp_path / "d.parquet", positions=True)
    assert not (tmp_path / "u.parquet").exists()
    # Without positions no coordinate is read, and one of a record that does not survive is never read.
    replay([raw], tmp_path / "u.parquet", tmp_path / "d.parquet")
    raw.write_text(survivor.replace(f"\t{coordinate}\t", "\t1:9:0\t").replace("\t1:4:0\t", f"\t{coordinate}\t"))
    result = replay([raw], tmp_path / "u.parquet", tmp_path / "d.parquet", positions=True)
    assert positioned(result)[0] == {"a": (("a", "A2", 2), (1, 9, 0))}


def test_coordinates_are_read_whole_up_to_their_columns_limits():
    from airflow_cdc_provider.core.replay import COORDINATE_LIMITS, coordinates

    ats = [(0, 0, 0), COORDINATE_LIMITS, (1, 2**32 + 5, 7)] * 3  # the two mixed: each line read on its own
    lines = "".join(format_record("U", key_uid([n]), at, [n]) for n, at in enumerate(ats)).encode()
    block = parse_block(lines)
    assert coordinates(block, np.arange(len(ats))).tolist() == [list(at) for at in ats]
    assert coordinates(block, np.array([5, 1])).tolist() == [[1, 2**32 + 5, 7], list(COORDINATE_LIMITS)]
    assert coordinates(block, np.array([], np.int64)).shape == (0, 3)
