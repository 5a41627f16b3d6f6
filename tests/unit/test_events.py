"""The events file of a changelog of every event (``stages.events``), and replay's indifference to before images."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_cdc_provider.core.changelog import POSITION_COLUMNS
from airflow_cdc_provider.core.records import CorruptRawFile, RawHeader, format_record, key_uid
from airflow_cdc_provider.core.schema import Fill
from airflow_cdc_provider.core.types import file_schema, parquet_options
from airflow_cdc_provider.stages import events as events_module
from airflow_cdc_provider.stages.events import write_events
from airflow_cdc_provider.stages.replay import replay

HEADER = RawHeader("shop.users", (("id", "varchar(10)"), ("name", "varchar(50)"), ("score", "int(11)")), ("id",))
WIDER = RawHeader("shop.users", HEADER.columns[:2] + (("city", "varchar(20)"),) + HEADER.columns[2:], ("id",))


def write_at(path: Path, changes, header: RawHeader = HEADER) -> Path:
    """changes: (op, values, (seq, pos, row)) in binlog order."""
    keys = header.key_indexes()
    with open(path, "w", encoding="utf-8") as f:
        f.write(header.format())
        for op, values, at in changes:
            f.write(format_record(op, key_uid([values[i] for i in keys]), at, values))
    return path


def rows(result) -> list[tuple]:
    return [tuple(r.values()) for r in pq.read_table(result.events_file).to_pylist()]


def test_every_operation_becomes_its_changelog_rows_in_binlog_order(tmp_path):
    raw = write_at(tmp_path / "raw", [
        ("I", ["a", "A", 1], (3, 100, 0)),
        ("B", ["a", "A", 1], (3, 200, 0)),      # an update that keeps its key: before, then after
        ("U", ["a", "A2", 2], (3, 200, 0)),
        ("B", ["b", "B", 5], (3, 200, 1)),      # a second row of the same event
        ("U", ["b", "B", 6], (3, 200, 1)),
        ("D", ["a", "A2", 2], (3, 300, 0)),     # a key change a → c: the old key's delete, the new key's insert
        ("U", ["c", "A2", 2], (3, 300, 0)),
        ("D", ["b", "B", 6], (4, 5_000_000_000, 2)),  # a lone delete, at a position beyond int32
        ("U", ["d", "D", 9], (4, 5_000_000_100, 0)),  # an update without its before image: an insert
    ])
    result = write_events([raw], tmp_path / "events.parquet")
    assert rows(result) == [
        ("a", "A", 1, "insert", 1, 3, 100, 0),
        ("a", "A", 1, "update_preimage", 2, 3, 200, 0),
        ("a", "A2", 2, "update_postimage", 2, 3, 200, 0),
        ("b", "B", 5, "update_preimage", 3, 3, 200, 1),
        ("b", "B", 6, "update_postimage", 3, 3, 200, 1),
        ("a", "A2", 2, "delete", 4, 3, 300, 0),
        ("c", "A2", 2, "insert", 5, 3, 300, 0),
        ("b", "B", 6, "delete", 6, 4, 5_000_000_000, 2),
        ("d", "D", 9, "insert", 7, 4, 5_000_000_100, 0),
    ]
    assert (result.records, result.rows, result.changes) == (9, 9, 7)
    assert result.events_file == str(tmp_path / "events.parquet") and result.columns == HEADER.columns
    schema = pq.read_schema(result.events_file)
    assert schema.names == ["id", "name", "score", "_change_type", "_change_ordinal", *POSITION_COLUMNS]
    assert [str(schema.field(n).type) for n in ("_change_type", "_change_ordinal", *POSITION_COLUMNS)] == [
        "string", "int64", "int32", "int64", "int32"]
    assert schema.metadata == file_schema(HEADER).metadata  # the upsert file's header: the merge reads it there
    assert sorted(tmp_path.iterdir()) == [tmp_path / "events.parquet", raw], "nothing else left beside it"


def test_a_range_with_an_added_column_has_the_upsert_files_columns_and_fills(tmp_path):
    first = write_at(tmp_path / "r1", [
        ("I", ["a", "A", 1], (1, 10, 0)),
        ("B", ["a", "A", 1], (1, 20, 0)),
    ])
    # The update's after image is in the next file (a file full, or the columns changed at this event).
    second = write_at(tmp_path / "r2", [
        ("U", ["a", "A1", "Oslo", 2], (1, 20, 0)),
        ("B", ["a", "A1", "Oslo", 2], (1, 30, 0)),
        ("U", ["a", "A1", "Bergen", 2], (1, 30, 0)),
        ("I", ["b", "B", None, 3], (1, 40, 0)),
    ], WIDER)
    fills = [Fill("city", (), "n/a")]
    result = write_events([first, second], tmp_path / "events.parquet", fills)
    upsert = replay([first, second], tmp_path / "u.parquet", tmp_path / "d.parquet", fills=fills)
    assert pq.read_schema(result.events_file).names[:4] == pq.read_schema(upsert.upsert_file).names == [
        "id", "name", "score", "city"]
    assert pq.read_schema(result.events_file).metadata == pq.read_schema(upsert.upsert_file).metadata
    assert [r[:6] for r in rows(result)] == [
        ("a", "A", 1, "n/a", "insert", 1),
        ("a", "A", 1, "n/a", "update_preimage", 2),
        ("a", "A1", 2, "Oslo", "update_postimage", 2),
        ("a", "A1", 2, "Oslo", "update_preimage", 3),
        ("a", "A1", 2, "Bergen", "update_postimage", 3),
        ("b", "B", 3, None, "insert", 4),
    ]
    assert pq.ParquetFile(result.events_file).metadata.row_group(0).column(0).statistics is not None
    assert parquet_options(result.columns)["write_statistics"] == ["id", "name", "score", "city"]


def events_of(changes):
    """What the events file must hold, worked out plainly from (op, values, at) in binlog order."""
    out, ordinal, n = [], 0, 0
    while n < len(changes):
        op, values, at = changes[n]
        if op == "B":
            ordinal += 1
            after = changes[n + 1]
            out += [(*values, "update_preimage", ordinal, *at), (*after[1], "update_postimage", ordinal, *at)]
            n += 2
            continue
        ordinal += 1
        out.append((*values, "delete" if op == "D" else "insert", ordinal, *at))
        n += 1
    return out


def random_changes(seed: int, count: int):
    """Changes as an extraction with before images writes them: B+U for an update, D+U for a key change."""
    rng = random.Random(seed)
    rows: dict[str, list] = {}
    changes = []
    for n in range(count):
        at = (1 + n // 2500, 4 + 50 * n, 0)
        key = f"k{rng.randrange(800)}"
        old = rows.get(key)
        if old is None:
            rows[key] = [key, f"v{n}", n]
            changes.append(("I", rows[key], at))
        elif rng.random() < 0.15:
            changes.append(("D", old, at))
            del rows[key]
        elif rng.random() < 0.1 and f"{key}x" not in rows:  # a key change
            del rows[key]
            rows[f"{key}x"] = [f"{key}x", old[1], n]
            changes += [("D", old, at), ("U", rows[f"{key}x"], at)]
        else:
            rows[key] = [key, f"v{n}", n]
            changes += [("B", old, at), ("U", rows[key], at)]
    return changes


def test_ordinals_and_positions_hold_across_blocks_files_and_small_batches(tmp_path, monkeypatch):
    changes = random_changes(3, 6000)
    cut = next(n for n in range(len(changes) // 2, len(changes)) if changes[n][0] == "B") + 1  # B | U across files
    files = [write_at(tmp_path / "r1", changes[:cut]), write_at(tmp_path / "r2", changes[cut:])]
    monkeypatch.setattr(events_module, "BATCH_ROWS", 97)
    result = write_events(files, tmp_path / "events.parquet", block_size=4096)
    assert rows(result) == events_of(changes)
    assert pq.ParquetFile(result.events_file).metadata.num_row_groups > 1


@pytest.mark.parametrize(("changes", "problem"), [
    ([("B", ["a", "A", 1], (1, 9, 0)), ("I", ["b", "B", 1], (1, 10, 0))], "is not followed by the update"),
    ([("B", ["a", "A", 1], (1, 9, 0)), ("U", ["b", "A", 1], (1, 9, 0))], "is not followed by the update"),
    ([("B", ["a", "A", 1], (1, 9, 0)), ("U", ["a", "A", 2], (1, 9, 1))], "is not followed by the update"),
    ([("I", ["a", "A", 1], (1, 8, 0)), ("B", ["a", "A", 1], (1, 9, 0))], "without its update"),
])
def test_a_before_image_without_its_update_is_a_corrupt_file_and_nothing_is_written(tmp_path, changes, problem):
    raw = write_at(tmp_path / "raw", changes)
    with pytest.raises(CorruptRawFile, match=problem):
        write_events([raw], tmp_path / "events.parquet")
    assert list(tmp_path.iterdir()) == [raw]


# --- replay: a before image is never output ---------------------------------------------------------------


def replayed(tmp_path: Path, name: str, changes, split: bool):
    half = len(changes) // 2
    if changes[half - 1][0] == "B":
        half += 1  # the file boundary may fall anywhere but inside a pair: tried by the other half of the test
    files = [write_at(tmp_path / f"{name}1", changes[:half]), write_at(tmp_path / f"{name}2", changes[half:])]
    kw = {"memory_budget": 1024 * 96, "block_size": 16384} if split else {}
    result = replay(files, tmp_path / f"{name}-u.parquet", tmp_path / f"{name}-d.parquet", positions=True, **kw)
    return result, pq.read_table(result.upsert_file).sort_by("id"), pq.read_table(result.delete_file).sort_by("id")


@pytest.mark.parametrize("split", [False, True])
def test_replay_gives_the_same_files_with_before_images_as_without(tmp_path, split):
    changes = random_changes(5, 30000)
    with_before, upserts, deletes = replayed(tmp_path, "b", changes, split)
    without, upserts2, deletes2 = replayed(tmp_path, "n", [c for c in changes if c[0] != "B"], split)
    assert (with_before.partitions >= 2) == split
    assert upserts.equals(upserts2) and deletes.equals(deletes2)
    assert (with_before.upserts, with_before.deletes) == (without.upserts, without.deletes)
    assert with_before.records == len(changes)
    assert sum(1 for c in changes if c[0] == "B") > 1000


def test_a_before_image_split_from_its_update_by_a_file_boundary_is_still_dropped(tmp_path):
    first = write_at(tmp_path / "r1", [("I", ["a", "A", 1], (1, 4, 0)), ("B", ["a", "A", 1], (1, 9, 0))])
    second = write_at(tmp_path / "r2", [("U", ["a", "A2", 2], (1, 9, 0))])
    result = replay([first, second], tmp_path / "u.parquet", tmp_path / "d.parquet", positions=True)
    assert pq.read_table(result.upsert_file).to_pylist() == [
        {"id": "a", "name": "A2", "score": 2, "cdc,seq": 1, "cdc,pos": 9, "cdc,row": 0}]
    assert (result.upserts, result.deletes) == (1, 0)


def test_replay_refuses_a_before_image_whose_update_is_missing(tmp_path):
    raw = write_at(tmp_path / "raw", [("B", ["a", "A", 1], (1, 9, 0))])
    with pytest.raises(CorruptRawFile, match=r"a before image \(B\) without the update"):
        replay([raw], tmp_path / "u.parquet", tmp_path / "d.parquet")
    assert not (tmp_path / "u.parquet").exists()
