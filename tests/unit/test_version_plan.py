"""What the merge does to one table, decided without Spark (``core.version_plan.plan_version``): over each action,
layout, shard and change of columns the configuration allows."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.ledger import LedgerConflict, VersionInfo
from airflow_cdc_provider.core.merge import MergeSpec, PartitionedTarget, PlainTarget, ShardTarget, merge_spec
from airflow_cdc_provider.core.modes import Action, Mode
from airflow_cdc_provider.core.partitioning import Partitioning, PartitionSpec
from airflow_cdc_provider.core.shards import Shard
from airflow_cdc_provider.core.version_plan import Switch, plan_version
from tests.unit.test_contract import RUN, merge_input, table_plan, wm

# The spec's columns in Hive: id int, price decimal(10,2), at timestamp (test_contract's COLUMNS).
LAYOUT = Partitioning(spec=PartitionSpec.parse("truncate(id, 10)"), source_column="id", source_type="int(11)")
OTHER_LAYOUT = Partitioning(spec=PartitionSpec.parse("bucket(id, 4)"), source_column="id", source_type="int(11)")


def spec(mode: Mode = Mode.INCREMENTAL, partitioning: Partitioning | None = None, shard: Shard | None = None,
         **update) -> MergeSpec:
    made = merge_spec(table_plan(mode), merge_input(mode), "/wh", None, 3)
    target = (ShardTarget(shard=shard) if shard else PartitionedTarget(partitioning=partitioning) if partitioning
              else PlainTarget())
    return made.model_copy(update={**update, "target": target})


def version(position: int = 100, number: int = 2, **fields) -> VersionInfo:
    return VersionInfo(version=number, watermark=wm(position), run=RUN, **fields)


def test_a_first_load_creates_the_table_with_the_sources_columns_and_starts_what_is_beside_it():
    load = spec(Mode.SNAPSHOT)
    plan = plan_version(load, None, ())
    assert (plan.action, plan.switch, plan.columns, plan.added, plan.redefine, plan.anew) == (
        Action.LOAD, Switch.CREATE, tuple(load.hive_columns), (), False, True)
    assert plan.writes and not plan.merges and not plan.every_partition


@pytest.mark.parametrize("held, layout, redefine, anew", [
    ("same", None, False, False),  # the table as it was: pointed at the new version, compared with the one before
    ("retyped", None, True, True),  # a column's type changed: defined again, its changelog and history anew
    ("same", LAYOUT, True, False),  # laid out anew: defined again, but compared with the version before
    ("fewer", None, True, True),  # a column dropped at the source: defined again without it, and anew
])
def test_a_snapshot_onto_a_table_defines_it_again_only_when_its_columns_or_layout_change(held, layout, redefine,
                                                                                          anew):
    load = spec(Mode.SNAPSHOT, partitioning=layout)
    columns = tuple(load.hive_columns)
    table_columns = {"same": columns, "retyped": ((columns[0][0], "string"), *columns[1:]),
                     "fewer": (*columns, ("gone", "int"))}[held]
    plan = plan_version(load, version(), table_columns)
    assert (plan.action, plan.redefine, plan.anew, plan.added) == (Action.LOAD, redefine, anew, ())
    assert plan.switch is (Switch.CREATE if redefine else Switch.ALTER) and plan.columns == columns
    assert plan.every_partition is (layout is not None)


def test_a_merge_keeps_the_tables_columns_and_adds_those_added_in_its_range_after_the_switch():
    merged = spec(fill_sources=(("At", ("At",)),), fills_file="/w/fills.parquet", partitioning=LAYOUT)
    columns = tuple(merged.hive_columns)
    plan = plan_version(merged, version(partitioning=LAYOUT), (*columns[:2], ("kept", "string")))
    assert (plan.action, plan.origin_version, plan.switch, plan.redefine, plan.anew) == (
        Action.MERGE, 2, Switch.ALTER, False, False)
    # A column the source dropped (kept by evolve) stays; the added one goes at the end, in place.
    assert plan.columns == (*columns[:2], ("kept", "string"), columns[2]) and plan.added == (columns[2],)
    assert plan.filled == (("at", ("at",)),) and plan.every_partition, "filled in every row: every partition"
    quiet = plan_version(spec(partitioning=LAYOUT), version(partitioning=LAYOUT), columns)
    assert (quiet.added, quiet.filled, quiet.every_partition) == ((), (), False), "only the partitions touched"


def test_a_heals_added_columns_have_no_fills_file_and_are_filled_all_the_same():
    healed = spec(Mode.INCREMENTAL, fill_sources=(("at", ()),)).model_copy(
        update={"plan": table_plan().plan.model_copy(update={"mode": Mode.HEAL})})
    columns = tuple(healed.hive_columns)
    plan = plan_version(healed, version(), columns[:2])
    assert plan.filled == (("at", ()),) and plan.added == (columns[2],)
    # Without a fills file a replay's merge fills nothing: a column it did not see added is refused.
    with pytest.raises(LedgerConflict, match="did not see them added"):
        plan_version(spec(fill_sources=(("at", ()),)), version(), columns[:2])


@pytest.mark.parametrize("current, table_columns, refused", [
    (version(), "retyped", "Hive cannot change a column's type in place"),
    (version(), "unexplained", "this run did not see them added"),
    (version(partitioning=LAYOUT), "same", "but its configuration now says"),
    (version(datetime_zone="Asia/Shanghai"), "same", "were written for readers in Asia/Shanghai"),
    (version(position=50, number=1), "same", "before this run's start"),
])
def test_a_merge_it_cannot_do_in_place_is_refused_before_anything_is_written(current, table_columns, refused):
    merged = spec(datetime_columns=("at",))
    columns = tuple(merged.hive_columns)
    held = {"same": columns, "retyped": ((columns[0][0], "bigint"), *columns[1:]), "unexplained": columns[:2]}
    with pytest.raises(LedgerConflict, match=refused):
        plan_version(merged, current, held[table_columns])


def test_a_table_past_the_run_is_left_as_it_is():
    plan = plan_version(spec(), version(position=1000, number=5), ())
    assert plan.action is Action.SKIP and not plan.writes and "later than this run's end" in plan.reason
    later = plan_version(spec(Mode.SNAPSHOT), version(position=1000, number=5), ())
    assert later.action is Action.SKIP


def test_a_shards_load_never_defines_the_shared_table_again():
    shard = Shard(source_schema="shop_1", source_table="orders")
    load = spec(Mode.SNAPSHOT, shard=shard)
    columns = tuple(load.hive_columns)
    plan = plan_version(load, version(), ((columns[0][0], "string"), *columns[1:]))
    assert (plan.action, plan.switch, plan.redefine) == (Action.LOAD, Switch.SHARD, False)
    assert plan_version(load, None, ()).switch is Switch.SHARD


def test_a_diff_merges_onto_the_version_it_compared_whatever_the_metastore_points_at():
    diffed = spec().model_copy(
        update={"plan": table_plan().plan.model_copy(update={"mode": Mode.DIFF, "input_version": 2})})
    plan = plan_version(diffed, version(number=3), tuple(diffed.hive_columns))
    assert (plan.action, plan.origin_version) == (Action.MERGE, 2)


@pytest.mark.parametrize("changelog", [False, True])
@pytest.mark.parametrize(("daily", "scd2"), [(False, False), (True, False), (False, True), (True, True)])
def test_the_tables_beside_a_table_are_the_merges_participants_in_the_order_they_write(changelog, daily, scd2):
    """What the settings turn on writes its part of each version and lists it after the commit (spark.participants);
    a shard keeps none."""
    from airflow_cdc_provider.core.changelog import ChangelogSpec
    from airflow_cdc_provider.core.history import HistorySettings, HistorySpec
    from airflow_cdc_provider.spark.participants import has_beside, participants_of

    history = HistorySpec.of("orders", HistorySettings(daily=daily, scd2=scd2)) if daily or scd2 else None
    beside = {"changelog": ChangelogSpec(table="orders_changelog") if changelog else None, "history": history}
    for target in (PlainTarget(**beside), PartitionedTarget(partitioning=LAYOUT, **beside)):
        made = spec().model_copy(update={"target": target})
        expected = [name for name, on in (("Changelog", changelog), ("History", scd2), ("Snapshots", daily)) if on]
        assert [type(p).__name__ for p in participants_of(made)] == expected
        assert has_beside(made) == bool(expected)
    shard = spec(shard=Shard(source_schema="shop_1", source_table="orders"))
    assert participants_of(shard) == [] and not has_beside(shard)
