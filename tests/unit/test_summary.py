"""The run summary: one line per table a person can read at a glance."""

from __future__ import annotations

import datetime as dt

from airflow_cdc_provider.core.contract import TableOutcome
from airflow_cdc_provider.core.summary import summary_line
from airflow_cdc_provider.core.watermark import Watermark

NOW = dt.datetime(2026, 5, 1, 12, 0, 42, tzinfo=dt.UTC)


def test_an_incremental_a_snapshot_and_a_failed_table_each_in_one_line():
    incremental = TableOutcome(
        source="shop.orders", hive_table="ods.orders", mode="incremental", status="committed", version=5,
        start=Watermark("mysql-bin.000003", 4, 1), watermark=Watermark("mysql-bin.000003", 9120, 1),
        changes={"I": 12, "U": 1040, "D": 3}, as_of=NOW - dt.timedelta(seconds=42),
        seconds={"extract": 1.23, "replay": 0.31, "merge": 8.06})
    assert summary_line(incremental, NOW) == (
        "shop.orders → ods.orders: committed incremental mysql-bin.000003:4 → mysql-bin.000003:9120, +12 ~1,040 -3, "
        "version 5, lag 42 s; extract 1.2 s, replay 0.3 s, merge 8.1 s")
    snapshot = TableOutcome(source="shop.items", hive_table="ods.items", mode="snapshot", status="committed",
                            version=1, watermark=Watermark("mysql-bin.000001", 77, 1), changes={"I": 3},
                            as_of=NOW, seconds={"snapshot": 0.5, "merge": 6.0})
    assert summary_line(snapshot, NOW) == ("shop.items → ods.items: committed snapshot as of mysql-bin.000001:77, "
                                           "+3 ~0 -0, version 1, lag 0 s; snapshot 0.5 s, merge 6.0 s")
    failed = TableOutcome(source="shop.x", hive_table="ods.x", mode="incremental", status="failed",
                          error="extract: the binlog was purged")
    assert summary_line(failed, NOW) == "shop.x → ods.x: failed incremental; extract: the binlog was purged"


def test_a_partitioned_tables_line_counts_the_partitions_its_commit_rewrote_and_emptied():
    outcome = TableOutcome(source="shop.events", hive_table="ods.events", mode="incremental", status="committed",
                           version=9, changes={"I": 2000, "U": 2008, "D": 2}, partitions=1_500,
                           rewritten_partitions=12, emptied_partitions=1)
    assert summary_line(outcome, NOW) == ("shop.events → ods.events: committed incremental, +2,000 ~2,008 -2, "
                                          "version 9, partitions 12 rewritten, 1 emptied of 1,500")
