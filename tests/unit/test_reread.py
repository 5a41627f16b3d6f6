"""Reading rows again: the reread parameter (off unless the configuration allows it) and what each table's run reads
again, the condition (buckets of the key, a user's condition, or both, written by the provider with its values
bound; core.condition refuses anything but a plain condition), and what comes of it in the extraction (a read that
waits, buckets held back, the files' order)."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.condition import Clause
from airflow_cdc_provider.core.config import ConfigError
from airflow_cdc_provider.core.contract import CapturedTable, Reread, TablePlan
from airflow_cdc_provider.core.errors import BadRereadCondition
from airflow_cdc_provider.core.ledger import RunPlan, RunRef
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.reread import (
    held_buckets,
    read_whole_by_snapshot,
    replaced,
    replay_order,
    reread_clause,
    reread_conditions,
    reread_for,
    reread_waits,
    second_pass_needed,
)
from airflow_cdc_provider.core.verify import RepairRequest
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.stages.raw_files import RawFileWriter
from airflow_cdc_provider.stages.reread import drop_keys, raw_uids

HEADER = RawHeader("shop.orders", (("order_no", "bigint(20)"), ("line_no", "smallint(6)"), ("note", "text")),
                   ("order_no", "line_no"))


def test_buckets_and_a_condition_select_their_rows_together_every_number_and_literal_bound():
    key = "CONCAT_WS('#', IFNULL(CAST(`order_no` + 0 AS CHAR), 'NULL'), IFNULL(CAST(`line_no` + 0 AS CHAR), 'NULL'))"
    assert reread_clause(HEADER, 40, [7, 3, 7], None, True) == Clause(f"MOD(CRC32({key}), %s) IN (%s, %s)",
                                                                      (40, 3, 7))
    assert reread_clause(HEADER, 0, (), "order_no > 5", True) == Clause("(`order_no` > %s)", (5,))
    assert reread_clause(HEADER, 40, [1], "note IS NULL", True) == Clause(
        f"MOD(CRC32({key}), %s) IN (%s) OR (`note` IS NULL)", (40, 1))
    assert reread_clause(HEADER, 0, (), "", True) == Clause("TRUE", ())
    assert reread_clause(HEADER, 0, (), None, True) == Clause("TRUE", ())


def test_the_providers_own_percent_signs_are_not_placeholders():
    dated = RawHeader("shop.days", (("day", "date"), ("n", "int(11)")), ("day",))
    clause = reread_clause(dated, 8, [2], "n = 1", True)
    assert "DATE_FORMAT(`day`, '%%Y-%%m-%%d')" in clause.sql and clause.args == (8, 2, 1)
    assert clause.sql.count("%s") == len(clause.args)


def test_a_repair_reads_again_a_key_holding_a_zero_date_by_the_text_its_null_part_has_in_the_copy():
    # A zero date of a key column is NULL in the copy: its bucket is the CRC32 of a text where it is NULL_KEY_TEXT,
    # the server's zero-date value turned to NULL first, as verify's sums and Spark spell it. No key value is sent.
    zeros = RawHeader("legacy.events", (("id", "int(11)"), ("at", "datetime"), ("day", "date"), ("t", "time")),
                      ("id", "at", "day", "t"))
    clause = reread_clause(zeros, 16, [5, 2], None, True)
    assert clause.args == (16, 2, 5) and clause.sql.replace("%%", "").count("%s") == 3
    at = "(YEAR(`at`) = 0 OR MONTH(`at`) = 0 OR DAYOFMONTH(`at`) = 0)"
    assert (f"IFNULL(IF({at}, NULL, DATE_FORMAT(`at`, '%%Y-%%m-%%d %%H:%%i:%%s.%%f')), 'NULL')" in clause.sql)
    assert clause.sql.startswith("MOD(CRC32(CONCAT_WS('#', IFNULL(CAST(`id` + 0 AS CHAR), 'NULL'), ")
    # A condition naming the zero date by value is bound, and <=> kept: the server compares its stored zero date.
    named = reread_clause(zeros, 0, (), "id = 1 AND day <=> '0000-00-00'", True)
    assert named == Clause("((`id` = %s AND `day` <=> %s))", (1, "0000-00-00"))


def test_a_condition_that_is_not_plain_is_refused_when_the_clause_is_written_too():
    with pytest.raises(BadRereadCondition, match="holds the function SLEEP()"):
        reread_clause(HEADER, 40, [1], "SLEEP(3600) = 0", True)


def test_dropping_keys_from_reread_files_keeps_the_others_and_the_header(tmp_path):
    writer = RawFileWriter(tmp_path, "reread", HEADER)
    for n, uid in enumerate(("a" * 32, "b" * 32, "c" * 32)):
        writer.write("I", uid, (0, 0, n), [n, 1, "x"])
    files = writer.close()
    assert drop_keys(files, {"b" * 32, "d" * 32}) == 1
    assert raw_uids(files) == {"a" * 32, "c" * 32}
    assert open(files[0]).readline().startswith("#cdc-raw 1 ")


def captured(source: str, columns=(("id", "int(11)"), ("note", "text"))) -> CapturedTable:
    return CapturedTable(source=source, hive_table=f"ods.{source.split('.')[1]}", schema_changes="strict", key=("id",),
                         columns=columns)


TABLES = [captured("shop.orders"), captured("shop.customers")]


def test_the_reread_parameter_must_name_tables_of_the_run_with_conditions():
    assert reread_conditions("null", TABLES, True) == {} and reread_conditions(None, TABLES, True) == {}
    assert reread_conditions("{}", TABLES, True) == {} and reread_conditions("  ", TABLES, True) == {}
    assert reread_conditions("None", TABLES, True) == {}
    with pytest.raises(ConfigError, match=r"names shop.order, which this run does not capture; its tables are "
                                          r"shop.customers, shop.orders. Nothing was changed."):
        reread_conditions('{"shop.order": "id > 1"}', TABLES, True)
    for bad in ('["shop.orders"]', "shop.orders", '{"shop.orders": 5}', ["shop.orders"]):
        with pytest.raises(ConfigError) as refused:
            reread_conditions(bad, TABLES, True)
        assert str(refused.value) == (
            'The parameter reread must map tables to conditions, like {"shop.orders": "id BETWEEN 100 AND 200", '
            f'"shop.customers": ""}} (an empty condition reads the whole table), got {bad!r}. Nothing was changed.')


def test_the_reread_parameter_gives_each_table_its_condition_stripped_empty_for_the_whole_table():
    asked = '{"shop.orders": "  id BETWEEN 10 AND 20 ", "shop.customers": null}'
    assert reread_conditions(asked, TABLES, True) == {"shop.orders": "id BETWEEN 10 AND 20", "shop.customers": ""}
    assert reread_conditions({"shop.customers": ""}, TABLES, True) == {"shop.customers": ""}


@pytest.mark.parametrize("asked", ['{"shop.orders": "id BETWEEN 10 AND 20"}', {"shop.customers": ""},
                                   '{"shop.orders": "SLEEP(3600) = 0"}', '["not", "a", "mapping"]'])
def test_the_reread_parameter_is_refused_whatever_it_holds_unless_the_configuration_allows_it(asked):
    with pytest.raises(ConfigError) as refused:
        reread_conditions(asked, TABLES, False)
    message = str(refused.value)
    assert message.startswith("This run was triggered with the parameter reread (")
    assert ("which this source's configuration does not allow: `run: allow_reread:` is false, as by default" in
            message)
    assert "set `run: allow_reread: true` in the configuration (docs/security.md)" in message
    assert message.endswith("Nothing was changed.")
    assert reread_conditions("{}", TABLES, False) == {}  # nothing asked: nothing to refuse


def test_each_condition_is_parsed_against_its_own_tables_columns_before_anything_else_happens():
    tables = [captured("shop.orders"), captured("shop.customers", (("id", "int(11)"), ("email", "text")))]
    assert reread_conditions({"shop.customers": "email LIKE '%@x.org'"}, tables, True) == {
        "shop.customers": "email LIKE '%@x.org'"}
    with pytest.raises(BadRereadCondition, match="names the column 'email', which shop.orders does not have"):
        reread_conditions({"shop.orders": "email LIKE '%@x.org'"}, tables, True)
    with pytest.raises(BadRereadCondition, match="holds a subquery"):
        reread_conditions({"shop.orders": "id IN (SELECT id FROM shop.users)"}, tables, True)


# --- what a table's run reads again ---------------------------------------------------------------------------

REPAIR = RepairRequest(buckets=40, which=(3, 17), version=5, run="scheduled__x")


def test_an_incremental_run_reads_the_pending_repairs_buckets_again_with_the_reason():
    reread = reread_for(Mode.INCREMENTAL, REPAIR, None)
    assert reread == Reread(buckets=40, which=(3, 17), where=None,
                            reason="a repair of the 2 buckets that verify found different in version 5")
    assert not read_whole_by_snapshot(Mode.INCREMENTAL, REPAIR, None)


def test_an_incremental_run_reads_the_rows_of_a_condition_or_the_whole_table_again():
    assert reread_for(Mode.INCREMENTAL, None, "id > 5") == Reread(where="id > 5",
                                                             reason="the reread parameter: id > 5")
    assert reread_for(Mode.INCREMENTAL, None, "") == Reread(where="", reason="the reread parameter: the whole table")


def test_a_repair_and_a_condition_are_read_again_together_with_both_reasons():
    reread = reread_for(Mode.INCREMENTAL, REPAIR, "id > 5")
    assert (reread.buckets, reread.which, reread.where) == (40, (3, 17), "id > 5")
    assert reread.reason == ("a repair of the 2 buckets that verify found different in version 5; the reread "
                             "parameter: id > 5")


def test_nothing_asked_nothing_read_again():
    assert reread_for(Mode.INCREMENTAL, None, None) is None
    assert not read_whole_by_snapshot(Mode.SNAPSHOT, None, None)


@pytest.mark.parametrize(("repair", "where"), [(REPAIR, None), (None, "id > 5"), (None, ""), (REPAIR, "")])
def test_a_snapshot_reads_the_table_whole_so_nothing_asked_is_read_apart(repair, where):
    assert reread_for(Mode.SNAPSHOT, repair, where) is None
    assert read_whole_by_snapshot(Mode.SNAPSHOT, repair, where)  # which the plan task says


@pytest.mark.parametrize(("repair", "where"), [(REPAIR, None), (None, "id > 5")])
def test_a_table_left_as_it_is_reads_nothing_again(repair, where):
    assert reread_for(Mode.NOTHING, repair, where) is None
    assert not read_whole_by_snapshot(Mode.NOTHING, repair, where)


# --- what comes of it in the extraction -----------------------------------------------------------------------

RUN = RunRef("mysql_binlog_to_hive", "scheduled__2026-03-01T11:00:00+00:00")
COLUMNS = (("id", "int(11)"), ("note", "text"))


def planned(start_columns) -> TablePlan:
    table = CapturedTable(source="shop.orders", hive_table="ods.orders", schema_changes="evolve", key=("id",),
                          columns=COLUMNS)
    plan = RunPlan(run=RUN, mode=Mode.INCREMENTAL, input_version=3, start=Watermark("binlog.000003", 120, server_id=1),
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
