"""What the core decides about a table's changelog and daily snapshots: the day a version's changes are filed
under, the days a version is the snapshot of, the days kept, and what a commit reports of them."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_cdc_provider.core.assets import changelog_event_extra
from airflow_cdc_provider.core.changelog import ChangelogCommit, ChangelogSettings, version_day
from airflow_cdc_provider.core.contract import TableOutcome
from airflow_cdc_provider.core.history import HistorySettings, day_end, days_served, next_days
from airflow_cdc_provider.core.summary import summary_line

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("as_of", "previous", "zone", "day"), [
    # A table's first version: the day its moment ends, midnight belonging to the day it ends.
    ("2026-11-27T00:00", None, "UTC", "2026-11-26"),
    ("2026-11-26T13:00", None, "UTC", "2026-11-26"),
    # A later one: the day of the moment the version before it reflects (midnight: the day it starts). A daily run
    # ending at midnight files its changes under the day they happened; a run just past midnight, under the day
    # whose snapshot it is.
    ("2026-11-27T00:00", "2026-11-26T00:00", "UTC", "2026-11-26"),
    ("2026-11-27T00:05", "2026-11-26T18:00", "UTC", "2026-11-26"),
    ("2026-11-27T06:00", "2026-11-27T00:05", "UTC", "2026-11-27"),
    # In the readers' zone: 16:00 UTC is midnight in Shanghai.
    ("2026-11-26T17:00", "2026-11-26T16:00", "Asia/Shanghai", "2026-11-27"),
    ("2026-11-26T15:00", None, "Asia/Shanghai", "2026-11-26"),
])
def test_a_versions_changes_are_filed_under_the_first_day_whose_snapshot_holds_them(as_of, previous, zone, day):
    assert version_day(at(as_of), at(previous) if previous else None, zone) == day


@pytest.mark.parametrize(("as_of", "previous", "zone", "days"), [
    ("2026-11-27T00:00", "2026-11-26T00:00", "UTC", ("2026-11-26",)),  # a daily run ending at midnight
    ("2026-11-27T00:05", "2026-11-26T12:00", "UTC", ("2026-11-26",)),  # the first past the day's end
    ("2026-11-26T13:05", "2026-11-26T12:00", "UTC", ()),  # inside a day
    ("2026-11-30T01:05", "2026-11-26T12:00", "UTC", ("2026-11-26", "2026-11-27", "2026-11-28", "2026-11-29")),
    ("2026-11-27T00:00", None, "UTC", ("2026-11-26",)),  # a first version exactly at a day's end
    ("2026-11-27T00:01", None, "UTC", ()),  # the days before a first version were never copied
    ("2026-11-26T16:00", "2026-11-25T15:00", "Asia/Shanghai", ("2026-11-25", "2026-11-26")),
])
def test_a_version_is_the_snapshot_of_every_day_that_ended_since_the_version_before_it(as_of, previous, zone, days):
    assert days_served(at(as_of), at(previous) if previous else None, zone) == days
    for day in days:  # each day ended after the previous version and by this one
        assert (previous is None or day_end(day, zone) > at(previous)) and day_end(day, zone) <= at(as_of)


def test_a_day_ends_at_the_next_midnight_of_its_zone_across_a_daylight_saving_change():
    assert day_end("2026-11-01", "America/New_York") == at("2026-11-02T05:00")  # a 25-hour day
    assert day_end("2026-03-08", "America/New_York") == at("2026-03-09T04:00")  # a 23-hour day


def test_the_days_kept_are_the_last_keep_days_that_ended_and_their_versions_stay():
    previous = (("2026-11-20", 3), ("2026-11-21", 4), ("2026-11-22", 6))
    days, dropped = next_days(previous, ("2026-11-23", "2026-11-24"), 9, 3, at("2026-11-25T00:00"), "UTC")
    assert days == (("2026-11-22", 6), ("2026-11-23", 9), ("2026-11-24", 9)) and dropped == ("2026-11-20",
                                                                                             "2026-11-21")
    assert next_days(previous, (), 9, None, at("2026-11-25T00:00"), "UTC") == (previous, ())
    # A re-run's version serves no new day: the days stay with the versions they are.
    assert next_days(previous, (), 10, 10, at("2026-11-23T00:00"), "UTC") == (previous, ())


@pytest.mark.parametrize(("value", "expected"), [
    (True, ChangelogSettings()), (False, None), (None, None),
    ({"snapshot": "none", "day_column": "ds"}, ChangelogSettings(snapshot="none", day_column="ds")),
])
def test_a_changelog_setting_reads_true_false_or_a_mapping(value, expected):
    assert ChangelogSettings.of(value) == expected


def test_a_table_whose_columns_a_changelog_or_history_adds_is_named_with_the_way_out():
    settings = ChangelogSettings()
    assert settings.clash(["ID", "note"]) is None
    assert "dt" in settings.clash(["id", "DT"]) and "day_column" in settings.clash(["id", "DT"])
    assert "_change_type" in settings.clash(["_Change_Type"])
    assert HistorySettings.of({"daily": False}) is None, "neither daily snapshots nor a history: none"
    with pytest.raises(ValueError, match="must be false or a mapping"):
        HistorySettings.of(True)


def test_a_commits_changelog_is_in_its_summary_line_and_its_own_asset_event():
    now = at("2026-11-26T10:00")
    commit = ChangelogCommit(table="orders_changelog", day="2026-11-25", location="file:/w/ods.db/orders_changelog/"
                             "v000007", rows=41, committed_at=now)
    outcome = TableOutcome(source="shop.orders", hive_table="ods.orders", mode="incremental", status="committed",
                           version=7, as_of=now, changelog=commit)
    assert summary_line(outcome, now) == ("shop.orders → ods.orders: committed incremental, version 7, changelog "
                                          "41 rows (dt=2026-11-25), lag 0 s")
    extra = changelog_event_extra(outcome)
    assert extra["partition"] == {"dt": "2026-11-25", "_commit_version": 7} and extra["rows"] == 41
    assert extra["table"] == "ods.orders" and extra["version"] == 7


def test_daily_snapshots_of_a_table_partitioned_by_a_column_named_as_their_day_are_refused_with_the_way_out():
    from airflow_cdc_provider.core.history import BadHistory, table_history

    daily = HistorySettings(daily=True)
    with pytest.raises(BadHistory, match="snapshot_dt"):
        table_history("shop.orders", daily, [("id", "int")], "dt")
    assert table_history("shop.orders", daily.model_copy(update={"day_column": "ds"}), [("id", "int")], "dt")
    assert table_history("shop.orders", HistorySettings(scd2=True), [("id", "int")], "dt")


def test_a_commit_gives_an_asset_event_to_each_table_beside_it_that_it_changed():
    from airflow_cdc_provider.core.assets import beside_events
    from airflow_cdc_provider.core.history import HistoryCommit

    now = at("2026-11-26T00:00")
    history = HistoryCommit(table="orders_history", day="2026-11-25", partitions=(("9999-12-31", "x"),),
                            switched=("9999-12-31",), opened=10, closed=2)
    outcome = TableOutcome(source="shop.orders", hive_table="ods.orders", mode="incremental", status="committed",
                           version=7, as_of=now, snapshot_days=("2026-11-25",), history=history)
    events = dict(beside_events(outcome))
    assert set(events) == {"ods.orders_snapshots", "ods.orders_history"}, "no changelog: no event for one"
    assert events["ods.orders_snapshots"]["days"] == ["2026-11-25"]
    assert (events["ods.orders_history"]["opened"], events["ods.orders_history"]["closed"]) == (10, 2)
    inside_a_day = outcome.model_copy(update={"snapshot_days": ()})
    assert [name for name, _ in beside_events(inside_a_day)] == ["ods.orders_history"]


def test_a_commit_with_history_writes_its_snapshots_and_history_tables_from_the_same_source():
    from airflow_cdc_provider.core.history import HistorySpec
    from airflow_cdc_provider.core.merge import PlainTarget, written_lineage
    from tests.unit.test_job_specs import spec

    plain = spec()
    kept = plain.model_copy(update={"target": PlainTarget(
        history=HistorySpec.of("orders", HistorySettings(daily=True, scd2=True)))})
    names = [w.target.name for w in written_lineage(kept, plain.source_columns, "mysql://db:3306", "hive://h:9083")]
    assert names == ["ods.orders", "ods.orders_snapshots", "ods.orders_history"]
    history = written_lineage(kept, plain.source_columns, "mysql://db:3306", "hive://h:9083")[2]
    assert [n for n, _ in history.target.fields][-4:] == ["start_date", "is_current", "_start_version", "end_date"]


def test_the_history_of_an_expired_version_is_pruned_even_when_a_kept_day_pins_the_version():
    from airflow_cdc_provider.core.history import history_dirs_to_prune

    # Versions 2 (pinned by a day) and 3 expired; 4 and 5 kept; 1's directory is gone; 6 is the new one.
    assert history_dirs_to_prune({1, 2, 3, 4, 5, 6}, versions={2, 3, 4, 5, 6}, expired=[2, 3]) == [1, 2, 3]
    assert history_dirs_to_prune({5, 6}, versions={5, 6}, expired=[]) == []
