"""Reading rows again: the reread parameter and what each table's run reads again, the condition (buckets of the
key, a user's condition, or both; one that could be more than one expression of a SELECT is refused before the
server sees it), and what comes of it in the extraction (a read that waits, buckets held back, the files' order)."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.config import ConfigError
from airflow_cdc_provider.core.contract import CapturedTable, Reread, TablePlan
from airflow_cdc_provider.core.ledger import INCREMENTAL, NOTHING, SNAPSHOT, RunPlan, RunRef
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.reread import (
    held_buckets,
    read_whole_by_snapshot,
    replaced,
    replay_order,
    reread_conditions,
    reread_for,
    reread_waits,
    second_pass_needed,
)
from airflow_cdc_provider.core.verify import RepairRequest
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.stages.raw_files import RawFileWriter
from airflow_cdc_provider.stages.reread import BadRereadCondition, check_where, drop_keys, raw_uids, reread_condition

HEADER = RawHeader("shop.orders", (("order_no", "bigint(20)"), ("line_no", "smallint(6)"), ("note", "text")),
                   ("order_no", "line_no"))


def test_buckets_and_a_condition_select_their_rows_together():
    key = "CONCAT_WS('#', CAST(`order_no` + 0 AS CHAR), CAST(`line_no` + 0 AS CHAR))"
    assert reread_condition(HEADER, 40, [7, 3, 7], None, True) == f"MOD(CRC32({key}), 40) IN (3, 7)"
    assert reread_condition(HEADER, 0, (), "order_no > 5", True) == "(order_no > 5)"
    assert reread_condition(HEADER, 40, [1], "note IS NULL", True) == f"MOD(CRC32({key}), 40) IN (1) OR (note IS NULL)"
    assert reread_condition(HEADER, 0, (), "", True) == "TRUE"


@pytest.mark.parametrize("where", ["1=1; DROP TABLE orders", "id > 1 -- all", "id > 1 # all", "id /* x */ > 1"])
def test_a_condition_with_a_statement_or_a_comment_is_refused_with_what_to_do(where):
    with pytest.raises(BadRereadCondition, match="one SQL expression on the table's columns.*nothing was read"):
        check_where(where)


def test_dropping_keys_from_reread_files_keeps_the_others_and_the_header(tmp_path):
    writer = RawFileWriter(tmp_path, "reread", HEADER)
    for n, uid in enumerate(("a" * 32, "b" * 32, "c" * 32)):
        writer.write("I", uid, (0, 0, n), [n, 1, "x"])
    files = writer.close()
    assert drop_keys(files, {"b" * 32, "d" * 32}) == 1
    assert raw_uids(files) == {"a" * 32, "c" * 32}
    assert open(files[0]).readline().startswith("#cdc-raw 1 ")


def test_the_reread_parameter_must_name_tables_of_the_run_with_conditions():
    sources = ["shop.orders", "shop.customers"]
    assert reread_conditions("null", sources) == {} and reread_conditions(None, sources) == {}
    assert reread_conditions("{}", sources) == {} and reread_conditions("  ", sources) == {}
    assert reread_conditions("None", sources) == {}
    with pytest.raises(ConfigError, match=r"names shop.order, which this run does not capture; its tables are "
                                          r"shop.customers, shop.orders. Nothing was changed."):
        reread_conditions('{"shop.order": "id > 1"}', sources)
    for bad in ('["shop.orders"]', "shop.orders", '{"shop.orders": 5}', ["shop.orders"]):
        with pytest.raises(ConfigError) as refused:
            reread_conditions(bad, sources)
        assert str(refused.value) == (
            'The parameter reread must map tables to conditions, like {"shop.orders": "id BETWEEN 100 AND 200", '
            f'"shop.customers": ""}} (an empty condition reads the whole table), got {bad!r}. Nothing was changed.')


def test_the_reread_parameter_gives_each_table_its_condition_stripped_empty_for_the_whole_table():
    sources = ["shop.orders", "shop.customers"]
    asked = '{"shop.orders": "  id BETWEEN 10 AND 20 ", "shop.customers": null}'
    assert reread_conditions(asked, sources) == {"shop.orders": "id BETWEEN 10 AND 20", "shop.customers": ""}
    assert reread_conditions({"shop.customers": ""}, sources) == {"shop.customers": ""}


# --- what a table's run reads again ---------------------------------------------------------------------------

REPAIR = RepairRequest(buckets=40, which=(3, 17), version=5, run="scheduled__x")


def test_an_incremental_run_reads_the_pending_repairs_buckets_again_with_the_reason():
    reread = reread_for(INCREMENTAL, REPAIR, None)
    assert reread == Reread(buckets=40, which=(3, 17), where=None,
                            reason="a repair of the 2 buckets that verify found different in version 5")
    assert not read_whole_by_snapshot(INCREMENTAL, REPAIR, None)


def test_an_incremental_run_reads_the_rows_of_a_condition_or_the_whole_table_again():
    assert reread_for(INCREMENTAL, None, "id > 5") == Reread(where="id > 5",
                                                             reason="the reread parameter: id > 5")
    assert reread_for(INCREMENTAL, None, "") == Reread(where="", reason="the reread parameter: the whole table")


def test_a_repair_and_a_condition_are_read_again_together_with_both_reasons():
    reread = reread_for(INCREMENTAL, REPAIR, "id > 5")
    assert (reread.buckets, reread.which, reread.where) == (40, (3, 17), "id > 5")
    assert reread.reason == ("a repair of the 2 buckets that verify found different in version 5; the reread "
                             "parameter: id > 5")


def test_nothing_asked_nothing_read_again():
    assert reread_for(INCREMENTAL, None, None) is None
    assert not read_whole_by_snapshot(SNAPSHOT, None, None)


@pytest.mark.parametrize(("repair", "where"), [(REPAIR, None), (None, "id > 5"), (None, ""), (REPAIR, "")])
def test_a_snapshot_reads_the_table_whole_so_nothing_asked_is_read_apart(repair, where):
    assert reread_for(SNAPSHOT, repair, where) is None
    assert read_whole_by_snapshot(SNAPSHOT, repair, where)  # which the plan task says


@pytest.mark.parametrize(("repair", "where"), [(REPAIR, None), (None, "id > 5")])
def test_a_table_left_as_it_is_reads_nothing_again(repair, where):
    assert reread_for(NOTHING, repair, where) is None
    assert not read_whole_by_snapshot(NOTHING, repair, where)


# --- what comes of it in the extraction -----------------------------------------------------------------------

RUN = RunRef("mysql_binlog_to_hive", "scheduled__2026-03-01T11:00:00+00:00")
COLUMNS = (("id", "int(11)"), ("note", "text"))


def planned(start_columns) -> TablePlan:
    table = CapturedTable(source="shop.orders", hive_table="ods.orders", schema_changes="evolve", key=("id",),
                          columns=COLUMNS)
    plan = RunPlan(run=RUN, mode=INCREMENTAL, input_version=3, start=Watermark("binlog.000003", 120, server_id=1),
                   start_columns=start_columns)
    return TablePlan(table=table, plan=plan, table_dir=TableDir(work_dir="/work", hive_table="ods.orders"),
                     reread=Reread(where="", reason="the reread parameter: the whole table"))


def test_a_reread_waits_for_the_next_run_when_the_columns_changed_since_the_version():
    assert reread_waits(planned(start_columns=(("id", "int(11)"),)))
    assert not reread_waits(planned(start_columns=COLUMNS))
    assert not reread_waits(planned(start_columns=None))  # a version that predates recording its columns


def test_the_binlog_after_the_range_is_read_only_for_rows_read_again_after_a_range_cut_short():
    end, high = Watermark("binlog.000004", 300, server_id=1), Watermark("binlog.000004", 800, server_id=1)
    assert second_pass_needed(end, high, {"shop.orders"})
    assert not second_pass_needed(high, high, {"shop.orders"})  # the range ends at the read
    assert not second_pass_needed(end, high, {})  # nothing was read again


def test_buckets_changed_after_the_range_are_held_back_and_the_rest_replaced():
    asked = Reread(buckets=40, which=(3, 17, 21), reason="a repair")
    held = held_buckets(asked, {17, 30})  # 30 changed too, but was not asked for
    assert held == {17}
    assert replaced(asked, held) == Reread(buckets=40, which=(3, 21), reason="a repair")
    assert replaced(asked, set()) == asked


def test_a_table_not_read_again_reports_no_reread():
    assert replaced(None, {1}) is None
    assert replaced(Reread(where="", reason="x"), None) is None  # asked, but it waits for the next run


def test_the_reread_rows_go_before_the_binlogs_so_that_the_binlog_wins():
    assert replay_order(["reread-00000.raw"], ["raw-00000.raw", "raw-00001.raw"]) == [
        "reread-00000.raw", "raw-00000.raw", "raw-00001.raw"]
    assert replay_order([], ["raw-00000.raw"]) == ["raw-00000.raw"]
