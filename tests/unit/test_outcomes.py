"""What the merge task decides for each table of a run (``core.outcomes``): which status it gets and why, what its
ledger records, and what goes to Spark."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_cdc_provider.core.contract import (
    Captured,
    CapturedTable,
    Extraction,
    MergeInput,
    RefusedTable,
    Reread,
    SourcePlan,
    StoppedTable,
    TableExtraction,
    TableFailure,
    TablePlan,
)
from airflow_cdc_provider.core.ledger import Committed, RunPlan, RunRef
from airflow_cdc_provider.core.merge import TableMerge, merge_spec
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.outcomes import (
    advance,
    advance_diff,
    merge_commit,
    merged,
    repair_settled_by,
    sort_tables,
)
from airflow_cdc_provider.core.shards import Shard
from airflow_cdc_provider.core.verify import Replaced
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import TableDir

T0 = dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(hours=1)
RUN = RunRef("d", "scheduled__2026-03-01T11:00:00+00:00")
OTHER = RunRef("d", "manual__2026-03-01T11:30:00+00:00")
COLUMNS = (("id", "int(11)"), ("price", "decimal(10,2)"), ("at", "datetime(3)"))


def wm(position: int) -> Watermark:
    return Watermark("binlog.000001", position, server_id=1, gtid="0-1-5")


def table_plan(name: str, mode: str = Mode.INCREMENTAL, warning: str | None = None) -> TablePlan:
    """A table of the run, ``shop.<name>`` → ``ods.<name>``; an incremental one has version 2 at position 100."""
    incremental = mode == Mode.INCREMENTAL
    plan = RunPlan(RUN, mode, f"why {name}", input_version=2 if incremental else None,
                   start=wm(100) if incremental else None, stop_before=T1, warning=warning)
    committed = Committed(2, f"/wh/ods.db/{name}/v000002", wm(100), T0, RUN, Mode.INCREMENTAL, COLUMNS)
    return TablePlan(table=CapturedTable(source=f"shop.{name}", hive_table=f"ods.{name}", schema_changes="strict",
                                         key=("id",), columns=COLUMNS),
                     plan=plan, table_dir=TableDir(work_dir="/w", hive_table=f"ods.{name}"),
                     committed=committed if mode != Mode.SNAPSHOT else None)


def merge_input(table: TablePlan, reread: Reread | None = None) -> MergeInput:
    snapshot = table.mode == Mode.SNAPSHOT
    return MergeInput(source=table.source, mode=table.mode, upsert_files=(f"{table.run_dir.root}/u.parquet",),
                      delete_file=None if snapshot else f"{table.run_dir.root}/d.parquet", columns=COLUMNS, key=("id",), end=wm(900),
                      as_of=T1, source_columns=COLUMNS, upserts=3, deletes=0 if snapshot else 1, reread=reread,
                      changes={"I": 3, "D": 0 if snapshot else 1}, start=None if snapshot else wm(100),
                      seconds={"snapshot": 1.5} if snapshot else {"extract": 0.5, "replay": 0.25})


def part(table: TablePlan, rows: int) -> TableExtraction:
    return TableExtraction(source=table.source, start=wm(100), end=wm(900), counts={"I": rows, "U": 0, "D": 0},
                           files=(), columns=COLUMNS, seconds=0.5)


class Ledgers:
    """What the tables' ledgers say, and which tables were asked about."""

    def __init__(self, recorded: dict[str, RunPlan] | None = None, holders: dict[str, RunRef] | None = None):
        self.recorded, self.holders, self.asked = recorded or {}, holders or {}, []

    def run_plan(self, table: TablePlan) -> RunPlan | None:
        self.asked.append(table.source)
        return self.recorded.get(table.source)

    def holder(self, table: TablePlan) -> RunRef | None:
        return self.holders.get(table.source, RUN)


def spec(table: TablePlan, merge_input: MergeInput):
    return merge_spec(table, merge_input, "/wh", None, 3)


def sort(plan: SourcePlan, snapshot=None, extraction=None, replay=None, ledgers: Ledgers | None = None):
    ledgers = ledgers or Ledgers()
    return sort_tables(plan, snapshot, extraction, replay, ledgers.run_plan, ledgers.holder, spec)


def test_a_table_planned_for_nothing_is_nothing_with_its_plans_reason_and_no_spark_work():
    quiet = table_plan("quiet", Mode.NOTHING)
    found = sort(SourcePlan(run=RUN, tables=(quiet,)), Captured(), Extraction(), Captured())
    outcome = found.decided["shop.quiet"]
    assert (outcome.status, outcome.reason, outcome.hive_table, outcome.mode) == ("nothing", "why quiet", "ods.quiet",
                                                                                 Mode.NOTHING)
    assert not found.merging and not found.advances


def test_a_table_whose_stage_failed_is_failed_naming_the_stage_and_the_others_still_merge():
    orders, items = table_plan("orders"), table_plan("items")
    replay = Captured(inputs=(merge_input(items),),
                      failed=(TableFailure(source="shop.orders", stage="replay", error="bad row at 4711"),))
    found = sort(SourcePlan(run=RUN, tables=(orders, items)), None,
                 Extraction(as_of=T1, tables=(part(orders, 2), part(items, 1))), replay)
    assert (found.decided["shop.orders"].status, found.decided["shop.orders"].error) == ("failed",
                                                                                         "replay: bad row at 4711")
    assert [(t.source, i.source) for t, i, _ in found.merging] == [("shop.items", "shop.items")]


def test_a_table_the_check_refused_is_failed_with_its_reason_and_the_others_still_merge_and_advance():
    orders, items = table_plan("orders"), table_plan("items")
    refused = RefusedTable(source="shop.gone", hive_table="ods.gone", shard=Shard(source_schema="shop",
                                                                                  source_table="gone"),
                           reason="The table shop.gone does not exist, or the capture user cannot see it.")
    stopped = StoppedTable(table=refused, table_dir=TableDir(work_dir="/w", hive_table="ods.gone"))
    ledgers = Ledgers()
    found = sort(SourcePlan(run=RUN, tables=(orders, items), stopped=(stopped,)), None,
                 Extraction(as_of=T1, tables=(part(orders, 2), part(items, 0))),
                 Captured(inputs=(merge_input(orders),)), ledgers)
    gone = found.decided["shop.gone"]
    assert (gone.status, gone.mode, gone.hive_table, gone.shard) == ("failed", Mode.NOTHING, "ods.gone", refused.shard)
    assert gone.error == "check: The table shop.gone does not exist, or the capture user cannot see it."
    assert (gone.version, gone.watermark) == (None, None), "the run did nothing to it"
    assert [t.source for t, _, _ in found.merging] == ["shop.orders"]
    assert found.decided["shop.items"].status == "idle" and [t.source for t, _ in found.advances] == ["shop.items"]
    assert "shop.gone" not in ledgers.asked, "no ledger of it is read: it holds no lock of this run"


def test_an_idle_table_advances_its_watermark_on_the_version_it_has():
    orders = table_plan("orders")
    extraction = Extraction(start=wm(100), end=wm(900), as_of=T1, tables=(part(orders, 0),))
    found = sort(SourcePlan(run=RUN, tables=(orders,)), None, extraction, Captured())
    outcome = found.decided["shop.orders"]
    assert outcome.status == "idle"
    assert outcome.reason == f"no change in the range: version 2 now reflects the source as of {T1.isoformat()}"
    assert (outcome.version, outcome.watermark, outcome.start, outcome.as_of) == (2, wm(900), wm(100), T1)
    assert outcome.seconds == {"extract": 0.5}
    [(table, committed)] = found.advances
    assert table is orders
    assert committed == Committed(2, "/wh/ods.db/orders/v000002", wm(900), T1, RUN, Mode.INCREMENTAL, COLUMNS)
    assert not found.merging


def test_an_idle_table_keeps_the_rows_its_version_was_committed_with():
    orders = table_plan("orders")
    counted = orders.model_copy(update={"committed": orders.committed.model_copy(update={"rows": 42})})
    extraction = Extraction(as_of=T1, tables=(part(counted, 0),))
    assert advance(counted, extraction.tables[0], extraction).committed.rows == 42
    # A diff that found no change: the same version, its rows too.
    diff = counted.model_copy(update={"plan": counted.plan.model_copy(update={"mode": Mode.DIFF})})
    unchanged = merge_input(diff).model_copy(update={"upserts": 0, "deletes": 0, "digests_file": "/w/d.parquet"})
    step = advance_diff(diff, unchanged)
    assert (step.outcome.status, step.committed.version, step.committed.rows) == ("idle", 2, 42)


def test_an_idle_table_without_a_version_or_a_moment_fails_and_records_nothing():
    orders = table_plan("orders")
    without_version = orders.model_copy(update={"committed": None})
    for table, as_of in ((without_version, T1), (orders, None)):
        extraction = Extraction(as_of=as_of, tables=(part(table, 0),))
        step = advance(table, extraction.tables[0], extraction)
        assert step.committed is None
        assert (step.outcome.status, step.outcome.error) == (
            "failed", "an incremental plan without a committed version, or a range without its moment")


def test_a_table_an_earlier_attempt_committed_is_committed_again_without_spark():
    orders = table_plan("orders")
    done = orders.plan.model_copy(update={"output_version": 3, "end": wm(900), "as_of": T1})
    ledgers = Ledgers(recorded={"shop.orders": done}, holders={"shop.orders": OTHER})  # released since: no matter
    found = sort(SourcePlan(run=RUN, tables=(orders,)), None, None, Captured(inputs=(merge_input(orders),)), ledgers)
    outcome = found.decided["shop.orders"]
    assert (outcome.status, outcome.reason) == ("committed", "committed by an earlier attempt of this task")
    assert (outcome.version, outcome.watermark, outcome.upserts, outcome.deletes) == (3, wm(900), 3, 1)
    assert not found.merging


def test_a_table_whose_lock_another_run_holds_is_failed_and_not_merged():
    orders = table_plan("orders")
    ledgers = Ledgers(recorded={"shop.orders": orders.plan}, holders={"shop.orders": OTHER})
    found = sort(SourcePlan(run=RUN, tables=(orders,)), None, None, Captured(inputs=(merge_input(orders),)), ledgers)
    outcome = found.decided["shop.orders"]
    assert outcome.status == "failed"
    assert outcome.error == f"This run does not hold the table's lock (held by {OTHER}); nothing was changed."
    assert not found.merging


def test_an_input_that_cannot_be_merged_fails_its_table_with_the_reason():
    orders = table_plan("orders")
    wrong = merge_input(table_plan("orders", Mode.SNAPSHOT))  # a snapshot's input for an incremental plan
    found = sort(SourcePlan(run=RUN, tables=(orders,)), Captured(inputs=(wrong,)), None, None)
    assert found.decided["shop.orders"].status == "failed"
    assert found.decided["shop.orders"].error == ("merge: shop.orders was planned as incremental, but its merge "
                                                  "input is a snapshot.")


def test_a_table_planned_for_work_whose_input_never_came_is_failed():
    orders, items = table_plan("orders"), table_plan("items", Mode.SNAPSHOT)
    found = sort(SourcePlan(run=RUN, tables=(orders, items)), Captured(inputs=(merge_input(items),)), None, None)
    outcome = found.decided["shop.orders"]
    assert (outcome.status, outcome.error) == ("failed", "its capture did not finish: see the snapshot, extract, "
                                                         "replay or heal task's log")
    assert [t.source for t, _, _ in found.merging] == ["shop.items"]


def test_the_tables_with_changes_go_to_spark_with_their_specs_in_the_order_they_came():
    orders, items, quiet = table_plan("orders"), table_plan("items", Mode.SNAPSHOT), table_plan("quiet")
    ledgers = Ledgers()
    found = sort(SourcePlan(run=RUN, tables=(orders, items, quiet)), Captured(inputs=(merge_input(items),)),
                 Extraction(as_of=T1, tables=(part(orders, 2), part(quiet, 0))), Captured(inputs=(merge_input(orders),)),
                 ledgers)
    assert [(t.source, s.database, s.table, s.end) for t, _, s in found.merging] == [
        ("shop.items", "ods", "items", wm(900)), ("shop.orders", "ods", "orders", wm(900))]
    assert ledgers.asked == ["shop.items", "shop.orders"]  # an idle table's ledger is not asked about its plan
    assert list(found.decided) == ["shop.quiet"]


def test_a_committed_merge_becomes_a_committed_outcome_with_what_the_run_read():
    orders = table_plan("orders")
    merge = merge_input(orders)
    result = TableMerge(status="committed", reason="onto version 2, as planned", version=3,
                        location="/wh/ods.db/orders/v000003", rows=10, added_columns=("note",), seconds=4.0)
    outcome = merged(orders, merge, spec(orders, merge), result)
    assert (outcome.status, outcome.reason, outcome.version, outcome.rows) == ("committed", result.reason, 3, 10)
    assert (outcome.watermark, outcome.as_of, outcome.start) == (wm(900), T1, wm(100))
    assert (outcome.upserts, outcome.deletes, outcome.changes) == (3, 1, {"I": 3, "D": 1})
    assert outcome.seconds == {"extract": 0.5, "replay": 0.25, "merge": 4.0}
    assert outcome.added_columns == ("note",) and outcome.warnings == ()
    recorded = merge_commit(orders, spec(orders, merge), result)
    assert (recorded.version, recorded.location, recorded.watermark, recorded.as_of, recorded.rows) == (
        3, "/wh/ods.db/orders/v000003", wm(900), T1, 10)


def test_an_unchanged_or_failed_merge_claims_no_watermark():
    orders = table_plan("orders")
    merge = merge_input(orders)
    unchanged = merged(orders, merge, spec(orders, merge), TableMerge(status="unchanged", reason="already past"))
    failed = merged(orders, merge, spec(orders, merge), TableMerge(status="failed", error="Spark said no"))
    assert (unchanged.status, unchanged.reason, unchanged.watermark, unchanged.as_of) == (
        "unchanged", "already past", None, None)
    assert (failed.status, failed.error, failed.watermark) == ("failed", "Spark said no", None)


def test_a_merge_warns_of_datetimes_in_a_daylight_saving_gap_after_the_plans_warning():
    orders = table_plan("orders", warning="a snapshot instead of the binlog")
    merge = merge_input(orders)
    zoned = merge_spec(orders, merge, "/wh", None, 3, "Europe/Berlin")
    outcome = merged(orders, merge, zoned, TableMerge(status="committed", version=3, location="/v3",
                                                       datetimes_in_gaps=2))
    assert outcome.warnings == (
        "a snapshot instead of the binlog",
        "2 rows hold a DATETIME that does not exist in Europe/Berlin (a daylight-saving gap): written as the time "
        "after the gap")


def test_a_commit_without_the_version_it_wrote_is_refused():
    orders = table_plan("orders")
    merge = merge_input(orders)
    with pytest.raises(ValueError, match="committed shop.orders without the version it wrote"):
        merge_commit(orders, spec(orders, merge), TableMerge(status="committed", location="/v3"))


def test_a_snapshot_settles_a_whole_repair_and_a_reread_only_its_buckets():
    snapshot, orders = table_plan("items", Mode.SNAPSHOT), table_plan("orders")
    assert repair_settled_by(snapshot, merge_input(snapshot)) == Replaced()
    assert repair_settled_by(orders, merge_input(orders, Reread(buckets=8, which=(1, 5)))) == Replaced((1, 5))
    assert repair_settled_by(orders, merge_input(orders, Reread(where="id > 3"))) is None  # a condition: no bucket
    assert repair_settled_by(orders, merge_input(orders)) is None
