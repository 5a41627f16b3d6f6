"""Asset URIs of the Hive tables written, and the extra of a commit's event."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_cdc_provider.core.assets import event_extra, hive_asset_uri
from airflow_cdc_provider.core.contract import TableOutcome
from airflow_cdc_provider.core.watermark import Watermark
from tests.conftest import read_config


def test_uris_name_the_metastore_or_the_embedded_one_and_the_source():
    assert hive_asset_uri("thrift://hms.internal:9083", "ods.orders") == "hive://hms.internal:9083/ods/orders"
    assert hive_asset_uri("thrift://a:9000,thrift://b:9000", "ods.t") == "hive://a:9000/ods/t"
    assert hive_asset_uri(None, "ods.orders") == "hive://embedded/ods/orders"
    with pytest.raises(ValueError, match="has no host"):
        hive_asset_uri("thrift://:9083", "ods.t")


def test_a_commits_extra_carries_version_watermark_as_of_and_counts():
    as_of = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
    outcome = TableOutcome(source="shop.orders", hive_table="ods.orders", mode="incremental", status="committed",
                           version=4, watermark=Watermark("mysql-bin.000002", 120, 1), as_of=as_of, rows=10,
                           changes={"I": 2, "U": 5}, location="file:/warehouse/ods.db/orders/v000004")
    extra = event_extra(outcome)
    assert extra["version"] == 4 and extra["as_of"] == "2026-05-01T00:00:00+00:00" and extra["rows"] == 10
    assert (extra["inserted"], extra["updated"], extra["deleted"]) == (2, 5, 0)
    assert extra["watermark"]["file"] == "mysql-bin.000002"
    assert extra["location"] == "file:/warehouse/ods.db/orders/v000004"

    # The tables page's version, as the event announced it: its lag from the moment it reflects to the event.
    from airflow_cdc_provider.core.status import Commit

    commit = Commit.of(extra, as_of + dt.timedelta(minutes=2), "scheduled__x", "cdc.table", 0)
    assert (commit.version, commit.mode, commit.lag_at_commit, commit.rows) == (4, "incremental", 120.0, 10)
    assert (commit.inserted, commit.updated, commit.deleted, commit.location) == (2, 5, 0, extra["location"])


def test_a_downstream_dag_finds_a_tables_asset_from_the_configuration():
    from airflow_cdc_provider.task_groups import table_asset

    config = read_config({"tables": [{"source": "shop.orders", "target": "orders"}, "shop.c*"],
                                  "hive": {"database": "ods", "metastore_uri": "thrift://hms:9083"}})
    assert table_asset(config, "shop.orders").uri == "hive://hms:9083/ods/orders"
    assert table_asset(config, "shop.customers").uri == "hive://hms:9083/ods/shop_customers"  # by the pattern
    with pytest.raises(ValueError, match="selects no table shop.items"):
        table_asset(config, "shop.items")
