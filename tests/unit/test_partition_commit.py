"""What a partition commit checks before it touches anything (``core.partition_commit.commit_problems``)."""

from __future__ import annotations

from airflow_cdc_provider.core.partition_commit import PartitionChange, commit_problems

WAREHOUSE = "/srv/warehouse"
EMPTY = "/srv/warehouse/ods.db/orders/v000002/_empty"


def change(value: str, location: str | None = "/srv/warehouse/ods.db/orders/v000002/dt=x",
           column: str = "dt") -> PartitionChange:
    return PartitionChange(values=((column, value),), location=location)


def problems(*changes: PartitionChange, columns: tuple[str, ...] = ("dt",), empty_root: str = EMPTY) -> list[str]:
    return commit_problems(changes, columns, WAREHOUSE, empty_root, "ods.orders")


def test_rewritten_new_and_emptied_partitions_under_the_warehouse_are_accepted():
    assert problems(change("2026-11-25"), change("2026-11-26"), change("2026-11-24", None),
                    change("__HIVE_DEFAULT_PARTITION__")) == []
    assert problems(change("a", "file:/srv/warehouse/ods.db/orders/v2/dt=a")) == []


def test_a_location_outside_the_warehouse_or_unusable_is_refused_with_the_value():
    [outside] = problems(change("a", "/srv/elsewhere/dt=a"))
    assert "/srv/elsewhere/dt=a is not under the warehouse /srv/warehouse" in outside
    [dots] = problems(change("a", "/srv/warehouse/../etc/dt=a"))
    assert "`.` or `..` segment" in dots
    [relative] = problems(change("a", "warehouse/dt=a"))
    assert "neither an absolute path nor a URI" in relative
    [root] = problems(change("a"), empty_root="/tmp/_empty")
    assert "empty-directory root /tmp/_empty is not under the warehouse" in root


def test_partition_values_must_name_the_tables_partition_columns_once_and_not_be_empty():
    [other] = problems(change("a", column="day"))
    assert "names the columns ['day']; the table is partitioned by ['dt']" in other
    [empty] = problems(change(""))
    assert "empty value for dt: write __HIVE_DEFAULT_PARTITION__" in empty
    [twice] = problems(change("a"), change("a", None))
    assert "dt=a of ods.orders is named twice" in twice
    assert problems(columns=()) == ["The table ods.orders is not partitioned: a partition commit needs a partitioned "
                                    "table.", "The commit to ods.orders names no partition: give at least one "
                                    "partition to change."]
