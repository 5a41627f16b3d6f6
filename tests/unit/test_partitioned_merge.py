"""What the core decides for a partitioned table's merge: a layout that changed without a fresh snapshot is
refused with both layouts named; which paths of an old version directory go and which stay for the partitions
newer versions still read; and what a merge spec of a partitioned table must hold."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from airflow_cdc_provider.core.ledger import LedgerConflict
from airflow_cdc_provider.core.merge import MergeSpec, check_layout, layout_text, merge_spec, retention
from airflow_cdc_provider.core.partitioning import PartitionSpec
from tests.unit.test_contract import merge_input, table_plan

WAREHOUSE = "/srv/cdc/warehouse"
TABLE = "file:/srv/cdc/warehouse/ods.db/orders"


def layout(text: str, zone: str = "UTC"):
    return PartitionSpec.parse(text).resolve([("id", "int"), ("created_at", "timestamp(6)")], zone)


def spec(partitioning=None, left=()) -> MergeSpec:
    plan = table_plan()
    plan = plan.model_copy(update={"table": plan.table.model_copy(update={"partitioning": partitioning})})
    return merge_spec(plan, merge_input().model_copy(update={"left_partitions": left}), WAREHOUSE, None, 3)


def test_a_merge_spec_carries_the_layout_and_the_partitions_rows_left():
    made = spec(layout("truncate(id, 100)"), ("0", "__HIVE_DEFAULT_PARTITION__"))
    assert made.partitioning == layout("truncate(id, 100)")
    assert made.left_partitions == ("0", "__HIVE_DEFAULT_PARTITION__")
    assert MergeSpec.from_text(made.to_text()) == made
    # An unpartitioned table's spec holds none, whatever the input says.
    assert spec(None, ("0",)).left_partitions == ()


@pytest.mark.parametrize(("changes", "says"), [
    ({"target": {"kind": "plain", "left_partitions": ["0"]}}, "target.plain.left_partitions"),
    ({"target": {"kind": "partitioned", "left_partitions": ["0"]}}, "target.partitioned.partitioning"),
    ({"target": {"kind": "shard", "shard": {"source_schema": "s", "source_table": "t"}, "changelog": None}},
     "target.shard.changelog"),
])
def test_a_spec_whose_target_cannot_be_is_refused(changes, says):
    # Partitions rows left of a table that is not partitioned, a partitioned table without its layout, a shard
    # with a changelog: the target's kinds do not hold them.
    with pytest.raises(ValidationError, match=says):
        MergeSpec.from_text(json.dumps({**json.loads(spec().to_text()), **changes}))


def test_a_partition_column_named_like_a_column_of_the_table_is_refused_in_the_spec():
    text = json.loads(spec(layout("truncate(id, 100)")).to_text())
    text["target"]["partitioning"]["spec"]["column"] = "id"
    with pytest.raises(ValidationError):
        MergeSpec.from_text(json.dumps(text))


def test_a_changed_layout_is_refused_unless_the_run_is_a_snapshot():
    day = layout("day(created_at)")
    check_layout(day, spec(day), load=False)  # the same layout merges
    for before, after in ((None, day), (day, None), (day, layout("month(created_at)")),
                          (day, layout("day(created_at)", "Asia/Shanghai"))):
        check_layout(before, spec(after), load=True)  # a snapshot lays the table out anew
        with pytest.raises(LedgerConflict) as refused:
            check_layout(before, spec(after), load=False)
        message = str(refused.value)
        assert f"is {layout_text(before)}, but its configuration now says {layout_text(after)}" in message
        assert "Nothing was changed" in message and "fresh_snapshot=true" in message
    assert layout_text(None) == "not partitioned"
    assert layout_text(day) == "partitioned by day(created_at) AS dt"
    assert layout_text(layout("day(created_at)", "Asia/Shanghai")).endswith("for readers in Asia/Shanghai")


def test_an_old_version_directory_keeps_only_the_partitions_newer_versions_still_read():
    referenced = {f"{TABLE}/v000001/dt=2026-11-23", f"{TABLE}/v000003/dt=2026-11-25",
                  f"{TABLE}/v000002/_empty/dt=2026-11-20"}
    assert retention(f"{TABLE}/v000001", referenced) == "descend"
    assert retention(f"{TABLE}/v000001/dt=2026-11-23", referenced) == "keep"
    assert retention(f"{TABLE}/v000001/dt=2026-11-24", referenced) == "delete"
    assert retention(f"{TABLE}/v000001/_cdc_version.json", referenced) == "delete"
    assert retention(f"{TABLE}/v000002", referenced) == "descend"
    assert retention(f"{TABLE}/v000002/_empty", referenced) == "descend"
    assert retention(f"{TABLE}/v000002/_empty/dt=2026-11-20", referenced) == "keep"
    assert retention(f"{TABLE}/v000004", referenced) == "delete"
    # A name that begins like a kept one is another directory.
    assert retention(f"{TABLE}/v000001/dt=2026-11-2", referenced) == "delete"
    # file:/ and file:/// name the same place; an unpartitioned table's old version goes whole.
    assert retention("file:///srv/cdc/warehouse/ods.db/orders/v000001/dt=2026-11-23", referenced) == "keep"
    assert retention(f"{TABLE}/v000001", set()) == "delete"
