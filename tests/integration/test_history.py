"""What changed and what was, kept by a table's merges over simulated days (each run's version reflects a chosen
moment): its changelog, its daily snapshot partitions and its SCD2 history (run to run, deletes kept as markers),
against real MariaDB changes, real Spark and an embedded metastore, through a fresh snapshot over a history made
wrong by hand and kills at every commit step."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from airflow_cdc_testing.hive import read_hive_tables, spark_env

from airflow_cdc_provider.core.history import HistorySettings
from airflow_cdc_provider.core.ledger import VERSION_FILE, VersionInfo
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from tests.integration.capture_helpers import source_rows
from tests.integration.hive_helpers import apply_changes, changes_by_version, hive_rows, plain
from tests.integration.merge_helpers import Table
from tests.integration.test_capture import fill, items, random_change  # noqa: F401

pytestmark = pytest.mark.spark

# The moments the runs' versions reflect: a first load inside a day, a run at midnight, one inside a day, one just
# past midnight, and one three days later (the days between had no run). Three are killed first, one at each
# commit step: with the changes written and nothing committed, with the history written and nothing committed
# (each re-run writes them again, and the killed attempt's directories go, never listed), and with the table
# switched but its changelog, days and history not listed (its re-run lists them first, and its own version,
# merged onto the run's input version again, changes nothing).
RUNS = [("2026-11-01T10:00", None), ("2026-11-02T00:00", None), ("2026-11-02T09:00", "merge.changes.written"),
        ("2026-11-03T00:30", "merge.history.written"), ("2026-11-06T00:00", "merge.driver.switched")]


def test_changelog_snapshots_and_history_agree_with_the_source_each_day_through_kills_at_every_commit_step(
        mariadb, items, capture_conn, tmp_path):
    fill(mariadb, items.quoted, 120)
    hook = MySqlSourceHook(capture_conn)
    table = Table(hook, hook.raw_header(items), tmp_path, changelog=True,
                  history=HistorySettings(daily=True, keep_days=3, scd2=True, granularity="run",
                                          hard_deletes="new_record"))
    columns = [name.lower() for name, _ in table.header.columns]
    key = tuple(k.lower() for k in table.header.key)
    rng, next_id = random.Random(30), [120]
    at_version: dict[int, dict] = {}
    database = tmp_path / "warehouse" / "ods.db"
    # The versions on disk after each run: the newest two (keep_versions), any a kept day is, however old, and
    # the one a re-run merges onto.
    on_disk = [{1}, {1, 2}, {2, 4}, {2, 4, 6}, {6, 7, 8}]
    # Of those, the versions kept only because a day is them: their history's directories go all the same (the
    # snapshots read the table's version directory), but for the closed rows the history still lists.
    pinned_only = [set(), set(), set(), {2}, set()]
    for number, ((moment, place), kept, pinned) in enumerate(zip(RUNS, on_disk, pinned_only)):
        for _ in range(30):
            random_change(mariadb, items, rng, next_id)
        # An update and its undo, and a row inserted then deleted, within one range: no net change either.
        mariadb.execute(f"UPDATE {items.quoted} SET label = 'changed' WHERE id = {number}",
                        f"UPDATE {items.quoted} SET label = 'item {number}, \"quoted\"\\nline' WHERE id = {number}",
                        f"INSERT INTO {items.quoted} VALUES ('eu', {10_000 + number}, 'brief', 1, NULL, NULL)",
                        f"DELETE FROM {items.quoted} WHERE id = {10_000 + number}")
        table.as_of = dt.datetime.fromisoformat(moment).replace(tzinfo=dt.UTC)
        if number == 1:
            # The history's open rows made wrong by hand (one value changed, one row gone), then a fresh snapshot:
            # it brings them level with the source (checked by the history as of each day, below).
            tamper_open_rows(database / "items_history" / "v000001" / "end_date=9999-12-31")
        _, spec = table.prepare(fresh=number == 1)
        state = plain(source_rows(mariadb, table.header))
        if place:
            proc = table.submit(spec, env={**spark_env(), "CDC_FAILPOINT": place})
            output, _ = proc.communicate(timeout=600)
            assert proc.returncode != 0 and f"failpoint {place}" in output, output[-3000:]
        if place == "merge.driver.switched":
            for _ in range(30):  # later changes must not leak into the re-run
                random_change(mariadb, items, rng, next_id)
        result = table.merge(spec)
        at_version[result["version"]] = state
        if place == "merge.driver.switched":
            at_version[result["version"] - 1] = state
            assert result["changelog"]["rows"] == 0 and result["origin"] == result["version"] - 2
        assert result["status"] == "committed", (result, table.last_output[-5000:])
        assert {int(p.name[1:]) for p in (database / "items").iterdir()} == kept, moment
        for path in (database / "items_history").iterdir():
            if int(path.name[1:]) in pinned or int(path.name[1:]) not in kept:
                assert not (path / "end_date=9999-12-31").exists(), (moment, path.name)

    # The killed attempts' directories are gone, never listed; a removed version's history directory stays only
    # for the closed rows of a day it wrote last, which the history still lists.
    assert sorted(p.name for p in (database / "items_changelog").iterdir()) == [
        f"v{v:06d}" for v in (1, 2, 4, 6, 7, 8)]
    history_dirs = {int(p.name[1:]): sorted(q.name for q in p.iterdir()) for p in (database / "items_history").iterdir()}
    assert 5 not in history_dirs and 3 not in history_dirs, history_dirs
    for number, held in history_dirs.items():
        assert number in (6, 7, 8) or (held and "end_date=9999-12-31" not in held), (number, held)

    # Each day is the first version at or after its end; the days past keep_days (3) are no longer listed.
    days = {"2026-11-01": 2, "2026-11-02": 6, "2026-11-03": 7, "2026-11-04": 7, "2026-11-05": 7}
    info = VersionInfo.from_text((database / "items" / "v000007" / VERSION_FILE).read_text())
    assert dict(info.snapshot_days) == {day: v for day, v in days.items() if day >= "2026-11-03"}
    assert info.dropped_days == ("2026-11-01", "2026-11-02")
    read = read_hive_tables(table.warehouse, None, [f"ods.items{t}" for t in ("", "_changelog", "_snapshots",
                                                                            "_history")])
    rows = hive_rows(read["ods.items"][0], table.header.key)
    snapshots, history = read["ods.items_snapshots"][0].to_pylist(), read["ods.items_history"][0].to_pylist()
    by_version = changes_by_version(read["ods.items_changelog"][0])

    # The changelog applied in order gives every version; a version's changes are filed under the first day whose
    # snapshot holds them, so the changes up to day D give D's snapshot.
    assert sorted(by_version) == [1, 2, 4, 6, 7], "one partition per committed version (the last one empty)"
    state: dict = {}
    for version in sorted(at_version):
        state = apply_changes(state, by_version.get(version, []), key, columns)
        assert state == at_version[version], f"the changelog up to version {version} does not give it"
    assert state == rows
    for day, version in days.items():
        upto: dict = {}
        for number in sorted(by_version):
            if by_version[number][0]["dt"] <= day:
                upto = apply_changes(upto, by_version[number], key, columns)
        assert upto == at_version[version], f"the changes filed up to {day} do not give its snapshot"
    assert {c["_change_type"] for c in by_version[1]} == {"insert"} and len(by_version[1]) == len(at_version[1])
    for number, changes in by_version.items():
        assert len({c["dt"] for c in changes}) == 1
        if number > 2:  # where each change comes from: its key's last row event
            assert all(c["_source_file"].startswith("binlog.") and c["_source_position"] > 4 for c in changes)
        else:  # a snapshot's rows (the first load, and the fresh snapshot compared with the version before)
            assert all(c["_source_file"] is None for c in changes)
        assert not [c for c in changes if c["id"] >= 10_000], "an undone update or a short-lived row is no change"

    # Each kept day's snapshot is the table at that day's end, and no row was copied for it.
    by_day: dict[str, dict] = {}
    for row in snapshots:
        by_day.setdefault(row.pop("dt"), {})[(row["region"], row["id"])] = row
    assert sorted(by_day) == ["2026-11-03", "2026-11-04", "2026-11-05"]
    for day, held in by_day.items():
        assert plain(held) == at_version[days[day]], f"the snapshot of {day} is not version {days[day]}"
    assert not any((database / "items_snapshots").rglob("*.parquet"))

    # The history as of each day is that day's snapshot (the days dropped from the snapshots too); each key has
    # one open row, a deleted key's a marker (``hard_deletes: new_record``); each value held from one run to the
    # next (``granularity: run``), within a day too, has its row.
    for day, version in days.items():
        as_of = {(r["region"], r["id"]): {c: r[c] for c in columns} for r in history
                 if r["start_date"] <= day < r["end_date"] and not r["is_deleted"]}
        assert plain(as_of) == at_version[version], f"the history as of {day} is not version {version}"
    open_rows = [r for r in history if r["end_date"] == "9999-12-31"]
    open_keys = [(r["region"], r["id"]) for r in open_rows]
    assert len(open_keys) == len(set(open_keys)) and len([r for r in open_rows if not r["is_deleted"]]) == len(rows)
    assert any(r["is_deleted"] for r in open_rows) and all(r["is_current"] == (r in open_rows) for r in history)
    assert all(r["end_time"] is None if r in open_rows else r["start_time"] < r["end_time"] for r in history)
    assert any(r["start_date"] == r["end_date"] for r in history), "no value held only within a day"


def tamper_open_rows(directory) -> None:
    """Change the label of the first open row and leave the second out, in the partition's files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(directory.glob("*.parquet"))
    read = pa.concat_tables([pq.read_table(f) for f in files])
    rows = read.to_pylist()
    rows[0]["label"] = "tampered"
    for f in files:
        f.unlink()
    # Timestamps as Spark wrote them (INT96): as INT64 without a zone, Spark would read them as another type.
    pq.write_table(pa.Table.from_pylist(rows[:1] + rows[2:], schema=read.schema), directory / "part-0.parquet",
                   use_deprecated_int96_timestamps=True)
