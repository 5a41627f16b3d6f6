"""The typed values tasks hand each other: they survive XCom's JSON, and the merge spec is made from them."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pydantic import ValidationError

from airflow_cdc_provider.core.contract import (
    Captured,
    CapturedTable,
    Extraction,
    MergeInput,
    SourcePlan,
    TableExtraction,
    TableOutcome,
    TablePlan,
)
from airflow_cdc_provider.core.ledger import Committed, LedgerConflict, RunPlan, RunRef
from airflow_cdc_provider.core.merge import check_datetime_zone, merge_spec
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.outcomes import deal, table_task_batches
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import TableDir

UTC = dt.UTC
T0 = dt.datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
RUN = RunRef("d", "scheduled__2026-03-01T11:00:00+00:00")
COLUMNS = (("id", "int(11)"), ("price", "decimal(10,2)"), ("at", "datetime(3)"))


def wm(position: int) -> Watermark:
    return Watermark("binlog.000001", position, server_id=1, gtid="0-1-5")


def captured(source="shop.orders", hive_table="ods.orders") -> CapturedTable:
    return CapturedTable(source=source, hive_table=hive_table, schema_changes="strict", key=("id",), columns=COLUMNS)


def table_plan(mode=Mode.INCREMENTAL, source="shop.orders", as_of=None) -> TablePlan:
    plan = RunPlan(RUN, mode, "why", input_version=2 if mode == Mode.INCREMENTAL else None,
                   start=wm(100) if mode == Mode.INCREMENTAL else None, stop_before=T0, start_columns=COLUMNS[:2],
                   as_of=as_of)
    committed = Committed(2, "/wh/ods.db/orders/v000002", wm(100), T0, RUN, Mode.INCREMENTAL, COLUMNS[:2])
    return TablePlan(table=captured(source), plan=plan, table_dir=TableDir(work_dir="/w", hive_table="ods.orders"),
                     committed=committed if mode == Mode.INCREMENTAL else None)


RUN_DIR = TableDir(work_dir="/w", hive_table="ods.orders").run(RUN.key).root  # where table_plan()'s files are


def merge_input(mode="incremental", source="shop.orders") -> MergeInput:
    return MergeInput(source=source, mode=mode, upsert_files=(f"{RUN_DIR}/u.parquet",),
                      delete_file=f"{RUN_DIR}/d.parquet" if mode == "incremental" else None, columns=COLUMNS, key=("id",),
                      end=wm(900), as_of=T0, source_columns=COLUMNS, upserts=3, deletes=1)


def through_xcom(value):
    return type(value).model_validate(json.loads(json.dumps(value.to_xcom())))


def test_every_value_survives_xcom_json_unchanged():
    plan = SourcePlan(run=RUN, tables=(table_plan(), table_plan(Mode.SNAPSHOT, "shop.items")))
    extraction = Extraction(start=wm(100), end=wm(900), as_of=T0, events=4, tables=(
        TableExtraction(source="shop.orders", start=wm(100), end=wm(900), counts={"I": 1, "U": 0, "D": 0},
                        files=("/w/a.raw",), columns=COLUMNS),))
    outcome = TableOutcome(source="shop.orders", hive_table="ods.orders", mode=Mode.INCREMENTAL, status="committed",
                           version=3, watermark=wm(900))
    for value in (plan, extraction, Captured(inputs=(merge_input(),)), outcome):
        assert through_xcom(value) == value
    assert [t.source for t in plan.snapshots] == ["shop.items"] and plan.table("shop.orders").mode == Mode.INCREMENTAL


def test_a_table_is_idle_when_its_range_holds_no_row_and_no_column_change():
    quiet = TableExtraction(source="a.b", start=wm(100), end=wm(900), counts={"I": 0, "U": 0, "D": 0}, files=(),
                            columns=COLUMNS)
    altered = quiet.model_copy(update={"schema_changes": ({"change": "added note"},)})
    written = quiet.model_copy(update={"counts": {"I": 0, "U": 0, "D": 2}})
    extraction = Extraction(tables=(quiet, altered, written))
    assert [t is quiet for t in extraction.idle] == [True] and len(extraction.changed) == 2


def test_values_refuse_what_they_do_not_know():
    with pytest.raises(ValidationError, match="extra"):
        MergeInput.model_validate({**merge_input().to_xcom(), "ledger": "x"})
    with pytest.raises(ValidationError, match="sequence number"):
        MergeInput.model_validate({**merge_input().to_xcom(), "end": {"file": "nofile", "position": 4,
                                                                       "server_id": 1}})
    with pytest.raises(ValidationError):
        TableOutcome(source="a.b", hive_table="o.b", mode=Mode.NOTHING, status="fine")


def test_merge_spec_from_the_plan_the_input_and_the_target():
    spec = merge_spec(table_plan(), merge_input(), "/wh", "thrift://m:9083", keep_versions=4)
    assert (spec.database, spec.table, spec.source) == ("ods", "orders", "shop.orders")
    assert spec.columns == (("id", "int"), ("price", "decimal(10,2)"), ("at", "timestamp"))
    assert (spec.end, spec.as_of, spec.plan.input_version, spec.keep_versions) == (wm(900), T0, 2, 4)
    assert spec.delete_file == f"{RUN_DIR}/d.parquet" and spec.metastore_uri == "thrift://m:9083"
    assert spec.capture_dir == RUN_DIR
    committed = spec.committed(3, "/wh/ods.db/orders/v000003")
    assert (committed.version, committed.watermark, committed.run, committed.columns) == (3, wm(900), RUN, COLUMNS)


def test_merge_spec_names_the_datetime_columns_and_the_readers_zone():
    spec = merge_spec(table_plan(), merge_input(), "/wh", None, 3, "Asia/Shanghai")
    assert (spec.datetime_zone, spec.datetime_columns) == ("Asia/Shanghai", ("at",))
    assert merge_spec(table_plan(), merge_input(), "/wh", None, 3).datetime_zone == "UTC"
    check_datetime_zone("Asia/Shanghai", spec)  # the same zone: merged
    with pytest.raises(LedgerConflict, match="DATETIME columns of ods.orders were written for readers in UTC, but "
                                             "`hive: time_zone:` is now Asia/Shanghai. Nothing was changed"):
        check_datetime_zone("UTC", spec)
    no_datetimes = merge_input().model_copy(update={"columns": COLUMNS[:2]})
    check_datetime_zone("UTC", merge_spec(table_plan(), no_datetimes, "/wh", None, 3, "Asia/Shanghai"))


def test_merge_spec_keeps_the_moment_a_first_commit_reflected():
    earlier = T0 - dt.timedelta(hours=1)
    assert merge_spec(table_plan(as_of=earlier), merge_input(), "/wh", None, 3).as_of == earlier


def test_merge_spec_refuses_an_input_of_another_table_or_mode():
    with pytest.raises(ValueError, match="shop.items was given for shop.orders"):
        merge_spec(table_plan(), merge_input(source="shop.items"), "/wh", None, 3)
    with pytest.raises(ValueError, match="planned as incremental, but its merge input is a snapshot"):
        merge_spec(table_plan(), merge_input(mode="snapshot"), "/wh", None, 3)


def test_tables_are_dealt_into_batches_in_order():
    assert deal(list(range(5)), 2) == [[0, 1, 2], [3, 4]]
    assert deal(list(range(2)), 5) == [[0], [1]]
    assert deal([1], 1) == [[1]]
    assert deal([], 3) == []


def test_table_tasks_take_a_table_each_until_airflows_map_limit_then_a_few_each():
    assert table_task_batches(["a", "b", "c"], 1024) == [["a"], ["b"], ["c"]]
    assert table_task_batches(["a", "b", "c"], 3) == [["a"], ["b"], ["c"]]
    assert table_task_batches([], 3) == []
    # 1,100 tables under the default limit: 1,024 tasks, none over the limit, every table once, in order.
    tables = [f"t{n:04d}" for n in range(1100)]
    batches = table_task_batches(tables, 1024)
    assert len(batches) == 1024 and {len(b) for b in batches} == {1, 2}
    assert [t for b in batches for t in b] == tables
    assert table_task_batches(list("abcdefg"), 4) == [["a", "b"], ["c", "d"], ["e", "f"], ["g"]]
