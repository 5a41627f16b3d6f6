"""A table's history as the core describes it: the history table's columns, and the tables refused one."""

import pytest

from airflow_cdc_provider.core.history import (
    HISTORY_PARTITION,
    BadHistory,
    HistorySettings,
    history_columns,
    table_history,
)

OWN = [("id", "int"), ("name", "string")]


def test_history_columns_follow_the_tables_own_with_what_granularity_and_hard_deletes_add():
    assert history_columns(OWN, HistorySettings(scd2=True)) == [
        *OWN, ("start_date", "string"), ("is_current", "boolean"), ("_start_version", "bigint")]
    assert history_columns(OWN, HistorySettings(scd2=True, granularity="run", hard_deletes="new_record")) == [
        *OWN, ("start_date", "string"), ("start_time", "timestamp"), ("end_time", "timestamp"),
        ("is_current", "boolean"), ("is_deleted", "boolean"), ("_start_version", "bigint")]
    assert HISTORY_PARTITION not in dict(history_columns(OWN, HistorySettings(scd2=True))), "a partition column"


@pytest.mark.parametrize(("settings", "columns", "taken", "hint"), [
    (HistorySettings(scd2=True), ["id", "End_Date"], "end_date", "Set `history: false`"),
    (HistorySettings(scd2=True), ["IS_CURRENT", "_start_version"], "_start_version, is_current", "Set `history: false`"),
    (HistorySettings(scd2=True, granularity="run"), ["id", "end_time"], "end_time", "Set `history: false`"),
    (HistorySettings(scd2=True, hard_deletes="new_record"), ["is_deleted"], "is_deleted", "Set `history: false`"),
    (HistorySettings(daily=True), ["id", "dt"], "dt", "Name the snapshots' day column otherwise"),
    (HistorySettings(daily=True, day_column="day"), ["id", "Day"], "day", "Name the snapshots' day column otherwise"),
])
def test_a_table_with_a_column_its_history_tables_add_is_refused_saying_which_and_what_to_do(settings, columns,
                                                                                             taken, hint):
    with pytest.raises(BadHistory) as err:
        table_history("shop.a", settings, [(name, "int") for name in columns])
    assert str(err.value).startswith(f"The table shop.a cannot have the history its `history:` (or `hive: history:`) "
                                     f"asks for: the table has the column(s) {taken}, which its history tables add "
                                     f"themselves. {hint}")


def test_a_column_only_the_other_kind_of_history_adds_is_no_clash():
    assert table_history("shop.a", HistorySettings(daily=True), [("end_date", "date"), ("is_current", "int")])
    assert table_history("shop.a", HistorySettings(scd2=True), [("dt", "date"), ("end_time", "datetime")])
    assert table_history("shop.a", HistorySettings(scd2=True, granularity="day", hard_deletes="invalidate"),
                         [("is_deleted", "tinyint")])
    assert table_history("shop.a", None, [("end_date", "date")]) is None
