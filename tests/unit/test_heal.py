"""What the core decides for a heal (``stages.heal``, ``docs/runs.md``): the merge's origin and spec of a healed
table, its outcome and what the summary, the asset event and the metrics say of it, the server's digest, and which
tables can be healed at all."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_cdc_provider.core.assets import event_extra
from airflow_cdc_provider.core.contract import BrokenChain, Captured, Extraction, Healed, MergeInput, TableFailure
from airflow_cdc_provider.core.diff import heal_digest, row_digest
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.ledger import LedgerConflict, RunRef, VersionInfo, choose_origin
from airflow_cdc_provider.core.merge import TableMerge, merge_spec
from airflow_cdc_provider.core.metrics import table_metrics
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.outcomes import NO_CAPTURE, merged, repair_settled_by, sort_tables
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.summary import summary_line
from airflow_cdc_provider.core.verify import Replaced
from airflow_cdc_provider.stages.heal import HealNotPossible, target
from tests.unit.test_outcomes import COLUMNS, RUN, T1, Ledgers, table_plan, wm

HEALED = Healed(why="The table shop.items was changed by `TRUNCATE TABLE items` (at binlog.000001:500)",
                upserts=2, deletes=1999, compared_rows=40, bytes_sent=16000, rows=2001)


W950 = wm(950)


def heal_input(table, end=W950, healed=HEALED) -> MergeInput:
    return MergeInput(source=table.source, mode=Mode.HEAL, upsert_files=(f"{table.run_dir.heal}/upsert.parquet",),
                      delete_file=f"{table.run_dir.heal}/delete.parquet", columns=COLUMNS, key=("id",), end=end,
                      as_of=T1, source_columns=COLUMNS, upserts=2, deletes=1999, changes={"I": 1, "U": 1, "D": 1999},
                      start=wm(100), seconds={"heal": 3.5}, healed=healed)


def test_a_healed_table_merges_onto_the_version_its_diff_compared_with_and_is_recorded_as_healed():
    table = table_plan("items")
    spec = merge_spec(table, heal_input(table), "/wh", None, 3)
    assert (spec.plan.mode, spec.end, spec.plan.input_version) == (Mode.HEAL, wm(950), 2)
    assert spec.plan.reason == f"healed by a diff: {HEALED.why}"
    # Its diff's deletes are keys alone: a partitioned table looks up the partitions they were in.
    assert spec.reread_rows
    committed = spec.committed(3, "/wh/ods.db/items/v000003")
    assert (committed.mode, committed.watermark, committed.version) == (Mode.HEAL, wm(950), 3)
    # Onto version 2 whatever the metastore points at: a later version (a run killed between its commit and its
    # ledger) holds changes the diff compared away.
    later = VersionInfo(version=3, watermark=wm(700), run=RunRef("d", "x"), input_version=2)
    origin = choose_origin(later, spec.plan, spec.end)
    assert (origin.action, origin.version) == ("merge", 2)


@pytest.mark.parametrize("mode, end, healed", [(Mode.SNAPSHOT, wm(950), HEALED), (Mode.INCREMENTAL, None, HEALED),
                                               (Mode.INCREMENTAL, wm(950), None)],
                         ids=["planned-as-a-snapshot", "no-binlog-moment", "no-reason"])
def test_a_heal_input_that_cannot_be_one_is_refused(mode, end, healed):
    table = table_plan("items", mode=mode)
    with pytest.raises(ValueError, match="heal"):
        merge_spec(table, heal_input(table, end=end, healed=healed), "/wh", None, 3)


def test_the_merge_task_merges_heals_and_fails_the_tables_a_heal_could_not_bring_level():
    plan_items, plan_parts, plan_gone = table_plan("items"), table_plan("parts"), table_plan("gone")
    from airflow_cdc_provider.core.contract import SourcePlan

    plan = SourcePlan(run=RUN, tables=(plan_items, plan_parts, plan_gone))
    extraction = Extraction(start=wm(100), end=wm(900), as_of=T1,
                            broken=tuple(BrokenChain(source=t.source, why="w") for t in plan.tables))
    heal = Captured(inputs=(heal_input(plan_items),),
                    failed=(TableFailure(source=plan_parts.source, stage="heal", error="its key changed"),))
    ledgers = Ledgers()
    found = sort_tables(plan, None, extraction, None, ledgers.run_plan, ledgers.holder,
                        lambda t, i: merge_spec(t, i, "/wh", None, 3), heal=heal)
    assert [(t.source, i.mode) for t, i, _ in found.merging] == [("shop.items", Mode.HEAL)]
    assert found.decided["shop.parts"].error == "heal: its key changed"
    # Its heal never came (the heal task failed as a whole): failed, not left out.
    assert found.decided["shop.gone"].error == NO_CAPTURE
    assert not found.advances


def test_a_healed_commit_says_so_in_its_outcome_summary_asset_event_and_metrics():
    table = table_plan("items")
    given = heal_input(table)
    spec = merge_spec(table, given, "/wh", None, 3)
    outcome = merged(table, given, spec, TableMerge(status="committed", version=3, location="/wh/v3", rows=2001,
                                                    reason="onto version 2", seconds=8.0))
    assert (outcome.mode, outcome.healed, outcome.watermark) == (Mode.HEAL, HEALED, wm(950))
    line = summary_line(outcome, T1 + dt.timedelta(seconds=30))
    assert line.startswith("shop.items → ods.items: committed heal binlog.000001:100 → binlog.000001:950, +1 ~1 "
                           "-1,999, version 3"), line
    assert "heal 3.5 s, merge 8.0 s; healed by a diff (2 rows read, 1,999 gone, 16,000 bytes from the server): The " \
           "table shop.items was changed by `TRUNCATE TABLE items`" in line, line
    assert event_extra(outcome)["healed"] == HEALED.to_xcom()
    # Its diff compared every row: a repair verify left pending is settled, as by a snapshot.
    assert repair_settled_by(table, given) == Replaced()
    sent = {m.name: m.value for m in table_metrics(outcome, T1)}
    assert (sent["cdc.heal.tables.ods.items"], sent["cdc.heal.upserts.ods.items"], sent["cdc.heal.deletes.ods.items"],
            sent["cdc.heal.bytes_sent.ods.items"]) == (1, 2, 1999, 16000)
    # A commit that is no heal carries none of it.
    plain = merged(table, heal_input(table).model_copy(update={"mode": Mode.INCREMENTAL, "healed": None}),
                   merge_spec(table, heal_input(table).model_copy(update={"mode": Mode.INCREMENTAL, "healed": None}),
                              "/wh", None, 3),
                   TableMerge(status="committed", version=3, location="/wh/v3", rows=2001))
    assert event_extra(plain)["healed"] is None and "healed" not in summary_line(plain, T1)
    assert not [m for m in table_metrics(plain, T1) if m.name.startswith("cdc.heal.")]


def test_the_servers_heal_digest_is_verifys_text_of_the_shared_columns_and_marks_a_value_in_an_added_one():
    columns = [("id", "int(11)"), ("doc", "json"), ("n", "int(11)")]
    # MySQL: JSON by its NULL flag, as Spark's side can compute it; a diff-mode table's digest prints it.
    assert "JSON" not in heal_digest(columns, [], mariadb=False) and "doc" in heal_digest(columns, [], False)
    assert heal_digest(columns, [], mariadb=True) == row_digest(columns, mariadb=True)
    marked = heal_digest(columns, ["note", "odd`name"], mariadb=True)
    assert "IF(`note` IS NULL AND `odd``name` IS NULL, '', '#added')" in marked


class Source:
    """The source as a heal sees it: the table's columns and key now."""

    def __init__(self, columns, key=("id",)):
        self.header = RawHeader("shop.items", tuple(columns), tuple(key))

    def raw_header(self, table, declared=None):
        return self.header


def test_a_table_is_healed_over_the_columns_its_version_and_the_source_share_when_its_policy_takes_the_change():
    table = table_plan("items")  # version 2: id, price, at
    added = target(table, "w", Source([*COLUMNS, ("note", "varchar(20)")]))
    assert (added.compared, added.added) == (COLUMNS, ("note",))
    # A dropped column: the strict policy refuses it, named; evolve takes it on, and the digests leave it out.
    dropped = [c for c in COLUMNS if c[0] != "price"]
    with pytest.raises(CdcError, match="price"):
        target(table, "w", Source(dropped))
    evolve = table.model_copy(update={"table": table.table.model_copy(update={"schema_changes": "evolve"})})
    assert target(evolve, "w", Source(dropped)).compared == tuple(dropped)
    assert target(table, "w", Source(COLUMNS)).reload is None
    # A key that changed cannot match rows across the break: a new table, loaded anew whatever the policy.
    for policy in (table, evolve):
        assert target(policy, "w", Source(COLUMNS, key=("id", "at"))).reload == (
            "Its key is (id, at) at the source now, and was (id) in the version: rows cannot be matched, it is a new "
            "table")
    # So is a column whose Hive type changed: a widening (strict takes it on too), or the key's own type.
    widened = [("id", "int(11)"), ("price", "decimal(20,4)"), ("at", "datetime(3)")]
    assert "price (decimal(10,2) → decimal(20,4)) land as another Hive type" in target(table, "w",
                                                                                   Source(widened)).reload
    # A shard's columns are every shard's: it is not loaded anew with other types, and says what to do.
    from airflow_cdc_provider.core.shards import Shard
    shard = Shard(server="s1", source_schema="shop", source_table="items")
    sharded = table.model_copy(update={"table": table.table.model_copy(update={"shard": shard})})
    with pytest.raises(HealNotPossible, match=r"is a shard of ods.items.*drop the Hive table ods.items"):
        target(sharded, "w", Source(widened))
    # Where the pass met the change, its words say it; where the break hid it (a swap), the heal's are added.
    met = target(table, "w: it changed", Source(widened), said=True)
    assert (met.reloaded_because, target(table, "w.", Source(widened)).reloaded_because) == (
        "w: it changed", f"w. {met.reload}.")
    wider_key = [("id", "bigint(20)"), *COLUMNS[1:]]
    assert "key column(s) id (int(11) → bigint(20))" in target(table, "w", Source(wider_key)).reload
    # A type that lands as the same Hive type is compared as before; strict still refuses a drop beside a retype.
    assert target(table, "w", Source([("id", "mediumint(9)"), *COLUMNS[1:]])).reload is None
    with pytest.raises(CdcError, match="strict` takes on added columns only"):
        target(table, "w", Source([("id", "int(11)"), ("price", "double")]))
    # Without a version whose columns are recorded there is nothing to compare with.
    with pytest.raises(HealNotPossible, match="fresh_snapshot=true"):
        target(table.model_copy(update={"committed": None}), "w", Source(COLUMNS))



def test_the_heal_stage_fails_each_table_it_cannot_heal_by_name_and_starts_no_spark_for_none(caplog):
    import logging

    from airflow_cdc_provider.core.config import HiveConfig
    from airflow_cdc_provider.stages.heal import heal_broken
    from airflow_cdc_provider.stages.snapshot_run import SnapshotSettings
    from airflow_cdc_provider.storage import WorkStore

    submitted: list[str] = []
    refused, unrecorded = table_plan("items"), table_plan("items").model_copy(update={"committed": None})
    found = heal_broken([(refused, BrokenChain(source=refused.source, why="TRUNCATE")),
                         (unrecorded, BrokenChain(source=unrecorded.source, why="purged"))], Source(COLUMNS[:2]), True, WorkStore(),
                        HiveConfig(warehouse_dir="/nowhere"), SnapshotSettings(), submitted.append,
                        logging.getLogger("heal"))
    assert found.inputs == () and submitted == []
    assert [(f.source, f.stage) for f in found.failed] == [("shop.items", "heal")] * 2
    assert "dropped at" in found.failed[0].error and "strict` takes on added columns only" in found.failed[0].error
    assert "fresh_snapshot=true" in found.failed[1].error
    assert "shop.items: its chain broke (TRUNCATE), and it cannot be healed: The table shop.items changed" in \
        caplog.text


RELOADED = Healed(why="The table shop.items changed by `ALTER TABLE items MODIFY id BIGINT` (at binlog.000001:500): "
                      "id changed from int(11) to bigint(20). It changes the key column(s) id (int(11) → bigint(20)).",
                  upserts=2001, rows=2001, reloaded=True)


def reload_input(table, end=W950) -> MergeInput:
    columns = (("id", "bigint(20)"), *COLUMNS[1:])
    return MergeInput(source=table.source, mode=Mode.SNAPSHOT, upsert_files=(f"{table.run_dir.reload}/s.parquet",),
                      columns=columns, key=("id",), end=end, as_of=T1, source_columns=columns, upserts=2001,
                      changes={"I": 2001}, start=wm(100), seconds={"heal": 4.0}, healed=RELOADED)


def test_a_table_loaded_anew_replaces_its_hive_table_and_says_so_everywhere_a_commit_is_told():
    from airflow_cdc_provider.core.status import Commit, RunPoint, RunTimes
    from airflow_cdc_provider.core.version_plan import plan_version

    table = table_plan("items")
    given = reload_input(table)
    spec = merge_spec(table, given, "/wh", None, 3)
    # A new key type: a new table, whose Hive columns are not kept.
    assert (spec.plan.mode, spec.end, spec.keep_hive_columns) == (Mode.SNAPSHOT, W950, False)
    assert spec.plan.reason == f"loaded anew: {RELOADED.why}"
    assert spec.committed(3, "/wh/ods.db/items/v000003").mode == Mode.SNAPSHOT  # the next run reads on from W950
    # The Hive table holds id as int: defined again with the source's columns, its changelog and history anew.
    current = VersionInfo(version=2, watermark=wm(100), run=RunRef("d", "x"))
    hive = (("id", "int"), ("price", "decimal(10,2)"), ("at", "timestamp"))
    plan = plan_version(spec, current, hive)
    assert (plan.action, plan.redefine, plan.anew, plan.columns[0]) == ("load", True, True, ("id", "bigint"))
    assert plan_version(spec, current, (*hive, ("note", "string"))).columns == plan.columns
    # A column's type changed, the key's kept: the columns `schema_changes: evolve` keeps in Hive would go with a
    # reload, which is refused, named, before anything is written.
    retyped = reload_input(table).model_copy(update={"columns": (COLUMNS[0], ("price", "double"), COLUMNS[2])})
    kept = merge_spec(table, retyped, "/wh", None, 3)
    assert kept.keep_hive_columns and plan_version(kept, current, hive).redefine
    with pytest.raises(LedgerConflict, match=r"keeps the columns \['note'\].*fresh_snapshot=true"):
        plan_version(kept, current, (*hive, ("note", "string")))
    # Not a reload of a table that is not read from the binlog.
    with pytest.raises(ValueError, match="load anew"):
        merge_spec(table_plan("items", mode=Mode.SNAPSHOT), given, "/wh", None, 3)

    outcome = merged(table, given, spec, TableMerge(status="committed", version=3, location="/wh/v3", rows=2001,
                                                    reason="a snapshot replaces the table", seconds=8.0))
    assert (outcome.mode, outcome.healed, outcome.watermark) == (Mode.SNAPSHOT, RELOADED, W950)
    line = summary_line(outcome, T1)
    assert f"; loaded anew (2,001 rows read, the Hive table defined again): {RELOADED.why}" in line, line
    assert "healed by a diff" not in line
    extra = event_extra(outcome)
    assert extra["healed"]["reloaded"] is True and extra["healed"]["why"] == RELOADED.why
    assert Commit.of(extra, T1, "r", "t", None).reloaded
    assert RunPoint.of(outcome, RunTimes(run_id="r")).reloaded
    # It read every row again: a pending repair is settled.
    assert repair_settled_by(table, given) == Replaced()
