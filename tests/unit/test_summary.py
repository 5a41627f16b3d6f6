"""The run summary: one line per table a person can read at a glance."""

from __future__ import annotations

import datetime as dt

from airflow_cdc_provider.core.contract import TableOutcome
from airflow_cdc_provider.core.summary import summary_line, verify_note
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


def test_what_the_runs_verify_found_is_in_the_tables_line_and_its_metrics():
    from airflow_cdc_provider.core.contract import KeyDifference, TableVerification, VerifySlice
    from airflow_cdc_provider.core.metrics import verify_metrics

    base = TableVerification(source="shop.orders", hive_table="ods.orders", status="clean", version=5, buckets=48,
                             slice=VerifySlice(index=2, of=24))
    drifted = base.model_copy(update={"status": "different", "differences": 3, "repair_buckets": (2, 26),
                                      "keys": (KeyDifference(key="7", kind="different"),)})
    assert verify_note(base) == "verify (slice 3 of 24): clean"
    assert verify_note(drifted) == "verify (slice 3 of 24): 3 keys differ in 2 of 48 buckets, left for a repair"
    assert verify_note(base.model_copy(update={"slice": None, "status": "not_verified", "reason": "no key"})) == \
        "verify (whole table): not verified, no key"
    sent = {m.name: m.value for m in verify_metrics(drifted)}
    assert sent == {"cdc.verify.checked.ods.orders": 1, "cdc.verify.different.ods.orders": 1,
                    "cdc.verify.differing_keys.ods.orders": 3}
    assert {m.name: m.value for m in verify_metrics(base)}["cdc.verify.different.ods.orders"] == 0
    assert verify_metrics(base.model_copy(update={"status": "not_verified"})) == []
