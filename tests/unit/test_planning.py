"""The plan task's rules over a run's tables: every lock or none, and which tables take a fresh snapshot instead
of failing when their binlog cannot be read from their watermark."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_cdc_provider.core.config import ConfigError
from airflow_cdc_provider.core.contract import CapturedTable, RefusedTable, StoppedTable
from airflow_cdc_provider.core.gtid import GtidPositionLost
from airflow_cdc_provider.core.ledger import Ledger, RunPlan, RunRef, TableBusy
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.planning import fresh_snapshot_of, may_snapshot_instead, snapshots_instead, take_locks
from airflow_cdc_provider.core.resume import BinlogFacts, BinlogFile, read_positions
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.storage import WorkStore

T0 = dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.UTC)
RUN = RunRef("mysql_binlog_to_hive", "scheduled__2026-03-01T11:00:00+00:00")
OTHER = RunRef("mysql_binlog_to_hive", "manual__2026-03-01T10:30:00+00:00")


def table(name: str) -> CapturedTable:
    return CapturedTable(source=f"shop.{name}", hive_table=f"ods.{name}", schema_changes="strict", key=("id",),
                         columns=(("id", "int(11)"),))


def ledgers_in(work_dir, tables) -> dict[str, Ledger]:
    store = WorkStore()
    return {t.hive_table: Ledger(TableDir(work_dir=str(work_dir), hive_table=t.hive_table), store) for t in tables}


# --- the locks ------------------------------------------------------------------------------------------------

def lock_all(tables, ledgers, acquired):
    def acquire(ledger):
        acquired.append(ledger.table.hive_table)
        ledger.acquire(RUN, lambda holder: True, T0)

    return take_locks(tables, ledgers, acquire, lambda ledger: ledger.release(RUN))


def test_every_lock_is_taken_in_the_order_of_the_hive_tables(tmp_path):
    tables = [table("c"), table("a"), table("b")]
    ledgers = ledgers_in(tmp_path, tables)
    acquired: list[str] = []
    taken = lock_all(tables, ledgers, acquired)
    assert acquired == ["ods.a", "ods.b", "ods.c"]
    assert [ledger.table.hive_table for ledger in taken] == ["ods.a", "ods.b", "ods.c"]
    assert all(ledger.holder() == RUN for ledger in ledgers.values())


def test_a_busy_table_lets_go_of_the_locks_taken_and_names_the_table(tmp_path):
    tables = [table("a"), table("b"), table("c"), table("d")]
    ledgers = ledgers_in(tmp_path, tables)
    ledgers["ods.c"].acquire(OTHER, lambda holder: True, T0)  # another run, alive, holds the third
    acquired: list[str] = []
    with pytest.raises(TableBusy) as busy:
        lock_all(tables, ledgers, acquired)
    assert str(busy.value).startswith(f"ods.c (from shop.c): The table is being updated by {OTHER}")
    assert "this run changed nothing" in str(busy.value)
    assert acquired == ["ods.a", "ods.b", "ods.c"]  # the fourth is not even asked for
    assert [ledgers[name].holder() for name in ("ods.a", "ods.b", "ods.c", "ods.d")] == [None, None, OTHER, None]


def test_an_error_other_than_a_busy_table_lets_go_of_the_locks_too_and_goes_on_as_it_is(tmp_path):
    tables = [table("a"), table("b")]
    ledgers = ledgers_in(tmp_path, tables)

    def acquire(ledger):
        if ledger.table.hive_table == "ods.b":
            raise OSError("the work directory is not writable")
        ledger.acquire(RUN, lambda holder: True, T0)

    with pytest.raises(OSError, match="^the work directory is not writable$"):
        take_locks(tables, ledgers, acquire, lambda ledger: ledger.release(RUN))
    assert ledgers["ods.a"].holder() is None


# --- a fresh snapshot instead ---------------------------------------------------------------------------------

HERE = Watermark("binlog.000004", 800, server_id=1, gtid="0-1-20")  # the server's position now
FACTS_FILES = (BinlogFile("binlog.000003", 5000), BinlogFile("binlog.000004", 800))
KEPT = Watermark("binlog.000003", 120, server_id=1, gtid="0-1-9")
PURGED = Watermark("binlog.000001", 120, server_id=1, gtid="0-1-2")
MOVED = Watermark("binlog.000007", 900, server_id=11)  # another server, no GTID to find the place by
DIVERGED = Watermark("binlog.000007", 900, server_id=11, gtid="0-11-12")
FACTS = BinlogFacts(HERE, FACTS_FILES, (("binlog_expire_logs_seconds", "86400"),),
                    {DIVERGED: GtidPositionLost("diverged", "It lacks 0-11-12.")})


def incremental(start: Watermark) -> RunPlan:
    return RunPlan(run=RUN, mode=Mode.INCREMENTAL, reason="changes after version 3", input_version=3, start=start)


PLANS = {"ods.kept": incremental(KEPT), "ods.purged": incremental(PURGED), "ods.moved": incremental(MOVED),
         "ods.diverged": incremental(DIVERGED), "ods.new": RunPlan(run=RUN, mode=Mode.SNAPSHOT, reason="initial load"),
         "ods.idle": RunPlan(run=RUN, mode=Mode.NOTHING, reason="already committed")}


def found_for(plans):
    incrementals = {name: plan.resume_from for name, plan in plans.items() if plan.mode == Mode.INCREMENTAL}
    return dict(zip(incrementals, read_positions(list(incrementals.values()), FACTS)))


def test_the_server_is_asked_only_when_an_option_may_take_a_snapshot_instead():
    assert not may_snapshot_instead("fail", "fail")
    assert may_snapshot_instead("snapshot", "fail") and may_snapshot_instead("fail", "snapshot")


def test_with_both_options_fail_no_table_takes_a_snapshot_instead():
    assert snapshots_instead(RUN, PLANS, found_for(PLANS), "fail", "fail") == {}


def test_on_purged_binlog_snapshot_replans_only_the_table_whose_binlog_was_purged():
    replanned = snapshots_instead(RUN, PLANS, found_for(PLANS), "snapshot", "fail")
    assert list(replanned) == ["ods.purged"]
    plan = replanned["ods.purged"]
    assert (plan.run, plan.mode, plan.reason) == (RUN, Mode.SNAPSHOT, "a fresh snapshot: the binlog from the watermark was "
                                                  "purged")
    assert plan.start is None and plan.input_version is None
    assert plan.warning == (
        "this run takes a fresh snapshot (on_purged_binlog: snapshot): The binlog file binlog.000001 of the watermark "
        "binlog.000001:120 gtid=0-1-2 is no longer on the server (it keeps binlog.000003 … binlog.000004): it was "
        "purged. The server's retention setting is binlog_expire_logs_seconds=86400.")


def test_on_server_change_snapshot_replans_the_tables_of_another_server_with_why():
    replanned = snapshots_instead(RUN, PLANS, found_for(PLANS), "fail", "snapshot")
    assert sorted(replanned) == ["ods.diverged", "ods.moved"]
    moved, diverged = replanned["ods.moved"], replanned["ods.diverged"]
    assert moved.reason == "a fresh snapshot: the source is another server"
    assert moved.warning.startswith("this run takes a fresh snapshot (on_server_change: snapshot): The watermark "
                                    "binlog.000007:900 was taken on server id 11")
    assert "no GTID position to find the place by" in moved.warning
    assert diverged.reason == "a fresh snapshot: the source is another server, which lacks transactions of the watermark"
    assert diverged.warning.startswith("this run takes a fresh snapshot (on_server_change: snapshot): The watermark "
                                       "binlog.000007:900 gtid=0-11-12 was taken on server id 11")
    assert diverged.warning.endswith("looked for there. It lacks 0-11-12.")


def test_a_table_past_the_end_of_its_file_never_takes_a_snapshot_instead():
    # Its watermark does not belong to this server's binlog: no option covers that, the extraction fails on it.
    past = {"ods.past": incremental(Watermark("binlog.000003", 9000, server_id=1))}
    assert snapshots_instead(RUN, past, found_for(past), "snapshot", "snapshot") == {}


def test_only_incremental_plans_are_replanned_whatever_was_found():
    # A snapshot or a table left as it is reads no binlog, so a finding about it changes nothing.
    found = {**found_for(PLANS), "ods.new": found_for(PLANS)["ods.purged"], "ods.idle": found_for(PLANS)["ods.purged"]}
    assert sorted(snapshots_instead(RUN, PLANS, found, "snapshot", "snapshot")) == ["ods.diverged", "ods.moved",
                                                                                   "ods.purged"]


# --- fresh_snapshot_tables ------------------------------------------------------------------------------------

def test_fresh_snapshot_tables_names_the_tables_to_reload_as_the_template_renders_it():
    tables = [table("orders"), table("customers")]
    assert fresh_snapshot_of('["shop.orders"]', tables) == {"ods.orders"}
    assert fresh_snapshot_of([" shop.customers", "shop.orders"], tables) == {"ods.orders", "ods.customers"}
    for nothing in (None, "None", "", "[]", [], "null"):
        assert fresh_snapshot_of(nothing, tables) == frozenset()


def test_every_shard_of_a_named_table_is_reloaded():
    shard = [CapturedTable(source="shop.orders", hive_table="ods.orders", schema_changes="strict", key=("id",),
                           columns=(("id", "int(11)"),), shard={"server": server, "source_schema": "shop",
                                                                "source_table": "orders"})
             for server in ("eu", "us")]
    assert fresh_snapshot_of(["shop.orders"], shard) == {t.ledger_id for t in shard}
    assert len({t.ledger_id for t in shard}) == 2


@pytest.mark.parametrize(("asked", "told"), [
    ('["shop.nowhere", "shop.orders"]', "names shop.nowhere, which this run does not capture; its tables are "
                                        "shop.customers, shop.orders. Nothing was changed."),
    ('"shop.orders"', 'must list tables as schema.table, like ["shop.orders"], got \'"shop.orders"\''),
    ('{"shop.orders": true}', "must list tables as schema.table"),
    ("[1]", "must list tables as schema.table"),
])
def test_a_fresh_snapshot_asked_for_a_table_the_run_does_not_capture_is_refused(asked, told):
    with pytest.raises(ConfigError) as err:
        fresh_snapshot_of(asked, [table("orders"), table("customers")])
    assert told in str(err.value)


# --- the plan stage -------------------------------------------------------------------------------------------

def test_the_plan_stage_records_each_plan_lets_an_idle_table_go_and_keeps_what_the_check_found(tmp_path):
    """The plan task's planning without Airflow (``stages.plan_tables``), its locks taken: a new table loads by
    snapshot and its plan is recorded; a table whose version is past the run's moment is left as it is and let
    go at once; one asked for by name reloads; one committed before the run's moment reads the binlog. The source
    is asked nothing (no `on_…: snapshot`), and the tables found are kept for the next run."""
    from airflow_cdc_provider.core.catalog import StoredCatalog
    from airflow_cdc_provider.core.config import RunConfig
    from airflow_cdc_provider.core.contract import CheckResult
    from airflow_cdc_provider.core.ledger import Committed, plan_run
    from airflow_cdc_provider.stages.plan_tables import PlanAsk, plan_tables

    tables = [table("a"), table("b"), table("c"), table("d")]
    ledgers = ledgers_in(tmp_path, tables)
    moment = T0 + dt.timedelta(hours=1)
    for name, as_of in (("ods.b", moment), ("ods.c", moment), ("ods.d", T0)):  # committed by an earlier run
        earlier = plan_run(OTHER, None, None, None)
        ledgers[name].acquire(OTHER, lambda run: True, T0)
        ledgers[name].save_run_plan(earlier)
        ledgers[name].commit(earlier, Committed(version=1, location=f"file:/wh/{name}/v000001", as_of=as_of,
                                                watermark=Watermark("mysql-bin.000003", 1234, 1), run=OTHER,
                                                mode=Mode.SNAPSHOT, columns=(("id", "int(11)"),)))
        ledgers[name].release(OTHER)
    lock_all(tables, ledgers, [])
    said: list[str] = []

    class Log:
        def info(self, event, *args):
            said.append(event % args)

        warning = error = exception = info

    def no_source():
        raise AssertionError("the source is asked nothing when no `on_…: snapshot` may act")

    catalog = str(tmp_path / "catalog.json")
    ask = PlanAsk(target=moment, fresh=False, reload=frozenset({"ods.c"}), repair=False, conditions={})
    # A table the check refused is carried to the merge and the status, where its ledger would be; never locked.
    refused = RefusedTable(source="shop.gone", hive_table="ods.gone", reason="The table shop.gone does not exist")
    check = CheckResult(flavor="mariadb", watermark=None, tables=tuple(tables), refused=(refused,))
    plan = plan_tables(RUN, check, tables, ledgers, WorkStore(), ask, RunConfig(), no_source, catalog, Log(),
                       str(tmp_path))
    assert plan.stopped == (StoppedTable(table=refused, table_dir=TableDir(work_dir=str(tmp_path),
                                                                           hive_table="ods.gone")),)
    assert not (tmp_path / "ods.gone").exists()
    assert {p.table.source: p.plan.mode for p in plan.tables} == {
        "shop.a": Mode.SNAPSHOT, "shop.b": Mode.NOTHING, "shop.c": Mode.SNAPSHOT, "shop.d": Mode.INCREMENTAL}
    assert [ledgers[f"ods.{n}"].holder() for n in "abcd"] == [RUN, None, RUN, RUN]
    assert ledgers["ods.a"].run_plan(RUN).mode == Mode.SNAPSHOT and ledgers["ods.b"].run_plan(RUN) is None
    assert plan.table("shop.d").committed.version == 1 and plan.table("shop.d").reread is None
    assert StoredCatalog.parse(WorkStore().read_text(catalog)).tables == {f"shop.{n}": f"ods.{n}" for n in "abcd"}
    assert said[-1].startswith("4 tables: 2 by snapshot, 1 from the binlog, 0 by a diff, 1 left as they are; 1 "
                               "stopped"), said
