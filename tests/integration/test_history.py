"""What a table was, kept by its merges over simulated days (each run's version reflects a chosen moment): daily
snapshot partitions, and the SCD2 history, against real MariaDB changes, real Spark and an embedded metastore."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from airflow_cdc_testing.hive import read_hive_tables, spark_env

from airflow_cdc_provider.core.history import HistorySettings
from airflow_cdc_provider.core.ledger import VERSION_FILE, VersionInfo
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from tests.integration.capture_helpers import source_rows
from tests.integration.hive_helpers import plain
from tests.integration.merge_helpers import Table
from tests.integration.test_capture import fill, items, random_change  # noqa: F401

pytestmark = pytest.mark.spark

# The moments the runs' versions reflect: a first load inside a day, a run at midnight, one inside a day, one just
# past midnight, and one three days later (the days between had no run). Two of them are killed first, at the
# new commit steps: with the history written and nothing committed (its re-run writes it again, and the killed
# attempt's directories go), and with the table switched but its days and history not (its re-run lists them
# first, and its own version, onto the run's input version again, changes nothing).
RUNS = [("2026-11-01T10:00", None), ("2026-11-02T00:00", None), ("2026-11-02T09:00", "merge.history.written"),
        ("2026-11-03T00:30", None), ("2026-11-06T00:00", "merge.driver.switched")]


def test_each_daily_snapshot_is_the_table_at_its_days_end_without_a_copy_and_the_history_as_of_it_too(
        mariadb, items, capture_conn, tmp_path):
    fill(mariadb, items.quoted, 120)
    hook = MySqlSourceHook(capture_conn)
    table = Table(hook, hook.raw_header(items), tmp_path, history=HistorySettings(daily=True, keep_days=3,
                                                                                         scd2=True))
    rng, next_id = random.Random(30), [120]
    at_version: dict[int, dict] = {}
    versions = tmp_path / "warehouse" / "ods.db" / "items"
    # The versions on disk after each run: the newest two (keep_versions), any a kept day is, however old, and
    # the one a re-run merges onto.
    on_disk = [{1}, {1, 2}, {2, 4}, {2, 4, 5}, {5, 6, 7}]
    for (moment, place), kept in zip(RUNS, on_disk):
        for _ in range(30):
            random_change(mariadb, items, rng, next_id)
        table.as_of = dt.datetime.fromisoformat(moment).replace(tzinfo=dt.UTC)
        _, spec = table.prepare()
        state = plain(source_rows(mariadb, table.header))
        if place:
            proc = table.submit(spec, env={**spark_env(), "CDC_FAILPOINT": place})
            output, _ = proc.communicate(timeout=600)
            assert proc.returncode != 0 and f"failpoint {place}" in output, output[-3000:]
        version = table.merge(spec)["version"]
        at_version[version] = state
        if place == "merge.driver.switched":
            at_version[version - 1] = state
        assert {int(p.name[1:]) for p in versions.iterdir()} == kept, moment
    history_dirs = {int(p.name[1:]): sorted(q.name for q in p.iterdir())
                    for p in (tmp_path / "warehouse" / "ods.db" / "items_history").iterdir()}
    assert 3 not in history_dirs, "the killed attempt's history directories are gone"
    for number, held in history_dirs.items():  # a removed version's stay only for the closed rows it wrote last
        assert number in (5, 6, 7) or (held and "end_date=9999-12-31" not in held), (number, held)

    # Each day is the first version at or after its end; the days past keep_days (3) are no longer listed.
    days = {"2026-11-01": 2, "2026-11-02": 5, "2026-11-03": 6, "2026-11-04": 6, "2026-11-05": 6}
    info = VersionInfo.from_text((versions / "v000006" / VERSION_FILE).read_text())
    assert dict(info.snapshot_days) == {day: v for day, v in days.items() if day >= "2026-11-03"}
    assert info.dropped_days == ("2026-11-01", "2026-11-02")
    read = read_hive_tables(table.warehouse, None, ["ods.items_snapshots", "ods.items_history"])
    (snapshots, _), (history, _) = read["ods.items_snapshots"], read["ods.items_history"]
    by_day: dict[str, dict] = {}
    for row in snapshots.to_pylist():
        day = row.pop("dt")
        by_day.setdefault(day, {})[(row["region"], row["id"])] = row
    assert sorted(by_day) == ["2026-11-03", "2026-11-04", "2026-11-05"]
    for day, rows in by_day.items():
        assert plain(rows) == at_version[days[day]], f"the snapshot of {day} is not version {days[day]}"
    # No row was copied: the snapshots table's own directory holds nothing.
    assert not any((tmp_path / "warehouse" / "ods.db" / "items_snapshots").rglob("*.parquet"))

    # The history as of each day is that day's snapshot (the days dropped from the snapshots too); each key has
    # one open row, and only the rows' values at some day's end are kept.
    rows = [{k: v for k, v in row.items()} for row in history.to_pylist()]
    columns = [name.lower() for name, _ in table.header.columns]
    for day, version in days.items():
        as_of = {(r["region"], r["id"]): {c: r[c] for c in columns} for r in rows
                 if r["start_date"] <= day < r["end_date"]}
        assert plain(as_of) == at_version[version], f"the history as of {day} is not version {version}"
    open_keys = [(r["region"], r["id"]) for r in rows if r["end_date"] == "9999-12-31"]
    assert len(open_keys) == len(set(open_keys)) == len(at_version[7])
    assert all(r["is_current"] == (r["end_date"] == "9999-12-31") for r in rows)
    assert all(r["start_date"] < r["end_date"] for r in rows), "a value held only within a day is not kept"
