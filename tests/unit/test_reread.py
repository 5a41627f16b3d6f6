"""The reread's condition: buckets of the key, a user's condition, or both; a condition that could be more than
one expression of a SELECT is refused before the server sees it."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.records import RawHeader
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
    from types import SimpleNamespace

    from airflow_cdc_provider.core.config import ConfigError
    from airflow_cdc_provider.operators.plan import CdcPlanOperator

    tables = [SimpleNamespace(source="shop.orders"), SimpleNamespace(source="shop.customers")]

    def conditions(reread):
        return CdcPlanOperator(task_id="plan", check={}, work_dir="/tmp/x", reread=reread)._conditions(tables)

    assert conditions("null") == {} and conditions(None) == {} and conditions("{}") == {}
    with pytest.raises(ConfigError, match=r"names shop.order, which this run does not capture; its tables are "
                                          r"shop.customers, shop.orders. Nothing was changed."):
        conditions('{"shop.order": "id > 1"}')
    for bad in ('["shop.orders"]', "shop.orders", '{"shop.orders": 5}'):
        with pytest.raises(ConfigError, match=r"must map tables to conditions, like .* got"):
            conditions(bad)
