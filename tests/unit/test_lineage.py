"""What the merge reports to OpenLineage, and what a run sends to StatsD: names, values, and the facets' form."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_cdc_provider.core.contract import TableOutcome
from airflow_cdc_provider.core.lineage import hive_namespace, mysql_namespace, table_lineage
from airflow_cdc_provider.core.metrics import binlog_metrics, table_metrics

SOURCE = (("ID", "bigint(20)"), ("Note", "varchar(20)"), ("amount", "decimal(12,2)"))
HIVE = (("id", "bigint"), ("note", "string"), ("amount", "decimal(12,2)"), ("old_col", "string"))


def test_datasets_are_named_as_openlineage_names_mysql_and_hive_tables():
    assert mysql_namespace("db1.internal", None) == "mysql://db1.internal:3306"
    assert hive_namespace("thrift://hms:9083,thrift://hms2:9083") == "hive://hms:9083"
    assert hive_namespace(None) == "hive://embedded"
    with pytest.raises(ValueError, match="has no host"):
        hive_namespace("thrift://:9083")


def test_each_hive_column_comes_from_the_source_column_of_its_name_whatever_its_case():
    lineage = table_lineage("shop.orders", SOURCE, "ods.orders", HIVE, "mysql://db:3306", "hive://hms:9083")
    assert (lineage.source.namespace, lineage.source.name) == ("mysql://db:3306", "shop.orders")
    assert (lineage.target.namespace, lineage.target.name, lineage.target.fields) == ("hive://hms:9083",
                                                                                    "ods.orders", HIVE)
    # A column the source dropped (kept by schema_changes: evolve) comes from no column now.
    assert lineage.columns == (("id", "ID"), ("note", "Note"), ("amount", "amount"))
    # A partitioned table's partition column is a field of the Hive table, computed from its source column.
    partitioned = table_lineage("shop.orders", SOURCE, "ods.orders", HIVE, "mysql://db:3306", "hive://hms:9083",
                                ("id_trunc", "bigint", "ID"))
    assert partitioned.target.fields == (*HIVE, ("id_trunc", "bigint"))
    assert partitioned.columns == (*lineage.columns, ("id_trunc", "ID"))


def test_the_facets_are_openlineage_datasets_with_schema_and_column_lineage():
    from openlineage.client.serde import Serde

    from airflow_cdc_provider.operators.lineage import operator_lineage

    orders = table_lineage("shop.orders", SOURCE, "ods.orders", HIVE, "mysql://db:3306", "hive://hms:9083")
    lines = table_lineage("shop.lines", SOURCE[:1], "ods.lines", HIVE[:1], "mysql://db:3306", "hive://hms:9083")
    lineage = operator_lineage([orders, lines, orders])
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("mysql://db:3306", "shop.orders"),
                                                               ("mysql://db:3306", "shop.lines")]
    output = Serde.to_dict(lineage.outputs[0])
    assert [(f["name"], f["type"]) for f in output["facets"]["schema"]["fields"]] == list(HIVE)
    assert output["facets"]["columnLineage"]["fields"]["note"]["inputFields"] == [
        {"namespace": "mysql://db:3306", "name": "shop.orders", "field": "Note",
         "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}]}]
    assert "old_col" not in output["facets"]["columnLineage"]["fields"]


def test_a_new_version_counts_rows_per_operation_seconds_per_stage_and_lag():
    now = dt.datetime(2026, 5, 1, 12, 0, 30, tzinfo=dt.UTC)
    outcome = TableOutcome(source="shop.orders", hive_table="ods.orders", mode="incremental", status="committed",
                           version=3, as_of=now - dt.timedelta(seconds=30), changes={"I": 5, "D": 1},
                           seconds={"extract": 1.5, "replay": 0.25, "merge": 12.0})
    metrics = {(m.kind, m.name): m.value for m in table_metrics(outcome, now)}
    assert metrics == {
        ("incr", "cdc.rows_read.insert.ods.orders"): 5, ("incr", "cdc.rows_read.update.ods.orders"): 0,
        ("incr", "cdc.rows_read.delete.ods.orders"): 1, ("timing", "cdc.duration.extract.ods.orders"): 1.5,
        ("timing", "cdc.duration.replay.ods.orders"): 0.25, ("timing", "cdc.duration.merge.ods.orders"): 12.0,
        ("gauge", "cdc.lag_seconds.ods.orders"): 30.0}
    assert all(m.tags["table"] == "ods.orders" for m in table_metrics(outcome, now))
    # An idle table reports its lag alone; a failed one or one the run left alone, nothing.
    idle = outcome.model_copy(update={"status": "idle"})
    assert [(m.kind, m.name) for m in table_metrics(idle, now)] == [("gauge", "cdc.lag_seconds.ods.orders")]
    assert table_metrics(outcome.model_copy(update={"status": "failed"}), now) == []
    assert table_metrics(outcome.model_copy(update={"status": "nothing"}), now) == []


def test_a_binlog_pass_is_named_by_dag_and_group_one_part_each():
    metrics = binlog_metrics("cdc.hourly", "warehouse.orders", 4096, 12)
    assert [(m.name, m.value) for m in metrics] == [("cdc.binlog.bytes.cdc__hourly.warehouse__orders", 4096),
                                                   ("cdc.binlog.events.cdc__hourly.warehouse__orders", 12)]
    assert metrics[0].tags == {"dag_id": "cdc.hourly", "group": "warehouse.orders"}


def test_a_commit_with_a_changelog_writes_the_table_and_its_changelog_table_from_the_same_source():
    from airflow_cdc_provider.core.changelog import ChangelogSettings, ChangelogSpec
    from airflow_cdc_provider.core.merge import PlainTarget, written_lineage
    from tests.unit.test_job_specs import spec

    plain = spec()
    with_changelog = plain.model_copy(update={"target": PlainTarget(changelog=ChangelogSpec(
        table="orders_changelog", settings=ChangelogSettings()))})
    (only,) = written_lineage(plain, plain.source_columns, "mysql://db:3306", "hive://hms:9083")
    table, changelog = written_lineage(with_changelog, plain.source_columns, "mysql://db:3306", "hive://hms:9083")
    assert table == only and changelog.source == table.source
    assert changelog.target.name == "ods.orders_changelog" and changelog.columns == table.columns
    assert [name for name, _ in changelog.target.fields][len(table.target.fields):] == [
        "_change_type", "_change_ordinal", "_commit_timestamp", "_source_file", "_source_position", "_source_row",
        "dt", "_commit_version"]
