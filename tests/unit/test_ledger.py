"""The run ledger: planning, the origin a merge starts from, the lock, and version retention."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from airflow_cdc_provider.core.ledger import (
    Committed,
    Ledger,
    LedgerConflict,
    RunPlan,
    RunRef,
    TableBusy,
    VersionInfo,
    choose_origin,
    plan_run,
)
from airflow_cdc_provider.core.merge import next_columns, parse_version_dir, version_dir_name, versions_to_remove
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.storage import WorkStore

UTC = dt.UTC
T0 = dt.datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
RUN = RunRef("mysql_binlog_to_hive", "scheduled__2026-03-01T11:00:00+00:00")
OTHER = RunRef("mysql_binlog_to_hive", "manual__2026-03-01T10:30:00+00:00")


def ledger_in(work_dir, **kwargs) -> Ledger:
    """The ledger of the Hive table ods.t in the work directory ``work_dir``, on the local disk."""
    return Ledger(TableDir(work_dir=str(work_dir), hive_table="ods.t"), WorkStore(), **kwargs)


def wm(position: int, seq: int = 1) -> Watermark:
    return Watermark(f"binlog.{seq:06d}", position, server_id=1)


def committed(version=3, position=400, as_of=T0, run=OTHER) -> Committed:
    return Committed(version, f"/wh/ods.db/t/{version_dir_name(version)}", wm(position), as_of, run, Mode.INCREMENTAL)


def test_first_run_loads_a_snapshot():
    plan = plan_run(RUN, None, None, T0)
    assert plan.mode == Mode.SNAPSHOT and plan.input_version is None and "initial load" in plan.reason


def test_later_run_reads_changes_from_the_committed_watermark_to_its_interval_end():
    end = T0 + dt.timedelta(hours=1)
    plan = plan_run(RUN, committed(), None, end)
    assert (plan.mode, plan.input_version, plan.start, plan.stop_before) == (Mode.INCREMENTAL, 3, wm(400), end)


def test_manual_run_has_no_stop_time():
    plan = plan_run(OTHER, committed(), None, None)
    assert plan.mode == Mode.INCREMENTAL and plan.stop_before is None


def test_run_for_an_interval_already_committed_does_nothing():
    plan = plan_run(RUN, committed(as_of=T0), None, T0 - dt.timedelta(hours=1))
    assert plan.mode == Mode.NOTHING
    assert "already committed" in plan.reason and "2026-03-01T10:00:00+00:00" in plan.reason
    assert plan_run(RUN, committed(as_of=T0), None, T0).mode == Mode.NOTHING  # the same instant too


def test_fresh_snapshot_parameter_wins_over_incremental():
    assert plan_run(RUN, committed(), None, T0 + dt.timedelta(hours=1), fresh_snapshot=True).mode == Mode.SNAPSHOT


def test_rerun_repeats_the_recorded_plan_until_it_commits():
    recorded = RunPlan(RUN, Mode.INCREMENTAL, "x", input_version=2, start=wm(100), stop_before=T0)
    plan = plan_run(RUN, committed(version=5, position=900), recorded, T0 + dt.timedelta(days=1))
    assert (plan.mode, plan.input_version, plan.start, plan.stop_before) == (Mode.INCREMENTAL, 2, wm(100), T0)
    assert "re-run" in plan.reason


def test_rerun_of_a_run_that_committed_leaves_the_table():
    recorded = RunPlan(RUN, Mode.INCREMENTAL, "x", input_version=2, start=wm(100), end=wm(300), output_version=3,
                       as_of=T0)
    plan = plan_run(RUN, committed(version=3, position=300, run=RUN), recorded, None, fresh_snapshot=True)
    assert plan.mode == Mode.NOTHING and "already committed by this run: version 3" in plan.reason


def test_commit_records_the_version_then_fills_in_the_runs_plan(tmp_path):
    ledger = ledger_in(tmp_path)
    plan = incremental()
    ledger.save_run_plan(plan)
    ledger.commit(plan, Committed(4, "/wh/v000004", wm(900), T0, RUN, Mode.INCREMENTAL, (("id", "int(11)"),)))
    assert ledger.committed().version == 4 and ledger.committed().columns == (("id", "int(11)"),)
    recorded = ledger.run_plan(RUN)
    assert (recorded.output_version, recorded.end, recorded.as_of) == (4, wm(900), T0)
    assert plan_run(RUN, ledger.committed(), recorded, None).mode == Mode.NOTHING


def test_a_run_starts_from_the_columns_its_input_version_recorded_and_a_rerun_keeps_them():
    columns = (("id", "int(11)"), ("label", "varchar(20)"))
    c = committed().model_copy(update={"columns": columns})
    assert Committed.from_text(c.to_text()) == c
    plan = plan_run(RUN, c, None, T0 + dt.timedelta(hours=1))
    assert plan.start_columns == columns
    # The first attempt committed with other columns: the re-run still starts from the ones it planned with.
    later = c.model_copy(update={"version": 4, "columns": (*columns, ("note", "text"))})
    assert plan_run(RUN, later, RunPlan.from_text(plan.to_text()), None).start_columns == columns
    assert plan_run(RUN, committed(), None, None).start_columns is None, "a ledger from before columns were kept"


def test_plan_round_trips_through_json():
    plan = RunPlan(RUN, Mode.INCREMENTAL, "why", input_version=2, start=wm(100), end=wm(300, 2), stop_before=T0,
                   output_version=3, as_of=T0)
    assert RunPlan.from_text(plan.to_text()) == plan
    c = committed()
    assert Committed.from_text(c.to_text()) == c


def test_naive_times_are_refused():
    with pytest.raises(ValueError, match="no time zone"):
        plan_run(RUN, committed(), None, dt.datetime(2026, 3, 1))


def incremental(input_version=3, start=400, run=RUN) -> RunPlan:
    return RunPlan(run, Mode.INCREMENTAL, "", input_version=input_version, start=wm(start))


def current(version, position, run=OTHER, input_version=None) -> VersionInfo:
    return VersionInfo(version, wm(position), run, input_version)


def test_origin_is_the_planned_input_version():
    origin = choose_origin(current(3, 400), incremental(), wm(900))
    assert (origin.action, origin.version) == ("merge", 3)


def test_rerun_after_its_own_commit_merges_onto_its_input_again():
    origin = choose_origin(current(4, 900, run=RUN, input_version=3), incremental(), wm(900))
    assert (origin.action, origin.version) == ("merge", 3)


def test_a_commit_the_ledger_missed_inside_the_range_becomes_the_origin():
    origin = choose_origin(current(4, 600), incremental(), wm(900))
    assert (origin.action, origin.version) == ("merge", 4) and "overlap" in origin.reason


def test_a_table_already_past_the_range_is_left_alone():
    origin = choose_origin(current(5, 1200), incremental(), wm(900))
    assert origin.action == "skip" and "left as it is" in origin.reason


def test_a_table_before_the_range_is_a_gap_and_an_error():
    with pytest.raises(LedgerConflict, match="before this run's start"):
        choose_origin(current(2, 100), incremental(), wm(900))


def test_a_dropped_table_is_an_error_naming_the_fix():
    with pytest.raises(LedgerConflict, match="fresh_snapshot=true"):
        choose_origin(None, incremental(), wm(900))


def test_snapshot_loads_unless_the_table_is_already_later():
    snap = RunPlan(RUN, Mode.SNAPSHOT, "")
    assert choose_origin(None, snap, wm(500)).action == "load"
    assert choose_origin(current(3, 400), snap, wm(500)).action == "load"
    assert choose_origin(current(3, 600), snap, wm(500)).action == "skip"
    # After a failover to a replica that lacked the table's last changes, its GTID sequence numbers are behind:
    # a snapshot of it replaces the table all the same.
    behind = Watermark("binlog.000003", 900, server_id=11, gtid="0-11-40")
    ahead = VersionInfo(3, Watermark("binlog.000009", 100, server_id=12, gtid="0-12-55"), OTHER, None)
    assert choose_origin(ahead, snap, behind).action == "load"


def test_after_a_failover_the_ranges_order_by_gtid():
    # The version and the run's start on the old primary, the run's end on the promoted replica.
    start = Watermark("binlog.000007", 400, server_id=11, gtid="0-11-20")
    inside = VersionInfo(4, Watermark("binlog.000007", 600, server_id=11, gtid="0-11-25"), OTHER, None)
    end = Watermark("binlog.000002", 355, server_id=12, gtid="0-12-31")
    origin = choose_origin(inside, RunPlan(RUN, Mode.INCREMENTAL, "", input_version=3, start=start), end)
    assert (origin.action, origin.version) == ("merge", 4) and "overlap" in origin.reason


def test_lock_refuses_a_second_running_run_and_changes_nothing(tmp_path):
    ledger = ledger_in(tmp_path)
    ledger.acquire(OTHER, lambda holder: True, T0)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(TableBusy, match="manual__2026-03-01T10:30:00.*this run changed nothing"):
        ledger.acquire(RUN, lambda holder: holder == OTHER, T0)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert ledger.holder() == OTHER


def test_lock_is_reentrant_for_the_same_run_and_taken_over_from_a_finished_one(tmp_path):
    messages = []
    ledger = ledger_in(tmp_path, log=messages.append)
    ledger.acquire(OTHER, lambda holder: True, T0)
    ledger.acquire(OTHER, lambda holder: True, T0)  # its retry
    ledger.acquire(RUN, lambda holder: False, T0)  # OTHER failed and ended
    assert ledger.holder() == RUN and "not running any more" in messages[0]
    assert not ledger.release(OTHER) and ledger.release(RUN) and ledger.holder() is None


def test_lock_admits_exactly_one_of_many_racing_runs(tmp_path):
    from tests.lock_races import race

    ledger = ledger_in(tmp_path)
    won = race(lambda: ledger, [RunRef("d", f"r{i}") for i in range(16)], lambda holder: True)
    assert len(won) == 1 and ledger.holder() == won[0]


def test_run_keys_are_safe_names_and_distinct():
    a, b = RunRef("d", "manual__2026-03-01T10:30:00+00:00"), RunRef("d", "manual__2026-03-01T10:30:00 00:00")
    assert a.key != b.key and "/" not in a.key and ":" not in a.key and "+" not in a.key


def test_version_directories_and_retention():
    assert version_dir_name(12) == "v000012" and parse_version_dir("file:/wh/ods.db/t/v000012") == 12
    assert parse_version_dir("/wh/t/other") is None
    versions = {1: True, 2: True, 3: False, 4: True, 5: True}
    assert versions_to_remove(versions, 5, 3) == [1, 2, 3]  # 3 was a killed attempt
    assert versions_to_remove(versions, 5, 2) == [1, 2, 3]
    assert versions_to_remove({**versions, 6: False}, 5, 3) == [1, 2, 3]  # a newer attempt may be running
    # A run merging onto 2 whose attempts were killed with 3 half written and after committing 4: its attempt
    # that commits 5 keeps 2, which the ledger still names as the run's input until it records the run.
    assert versions_to_remove(versions, 5, 3, merged_onto=2) == [1, 3]
    assert versions_to_remove(versions, 5, 2, merged_onto=4) == [1, 2, 3]
    with pytest.raises(ValueError, match="at least 2"):
        versions_to_remove(versions, 5, 1)


def test_scheduled_and_backfill_runs_target_their_interval_end_manual_runs_now():
    from airflow.utils.types import DagRunType

    from airflow_cdc_provider.core.ledger import run_target

    end = T0 + dt.timedelta(hours=1)
    assert run_target(DagRunType.SCHEDULED, end) == end
    assert run_target(DagRunType.BACKFILL_JOB, end) == end
    assert run_target(DagRunType.MANUAL, end) is None
    assert run_target(DagRunType.ASSET_TRIGGERED, end) is None
    assert run_target("scheduled", None) is None


def test_next_columns_appends_added_ones_keeps_dropped_ones_and_refuses_the_rest():
    table = [("id", "int"), ("label", "string")]
    assert next_columns(table, [("id", "int"), ("note", "string"), ("label", "string")], {"note"}, "ods.t") == [
        ("id", "int"), ("label", "string"), ("note", "string")]
    assert next_columns(table, [("id", "int")], set(), "ods.t") == table, "evolve: a dropped column stays"
    with pytest.raises(LedgerConflict, match="label of the Hive table ods.t is string, but this run gives it as int"):
        next_columns(table, [("id", "int"), ("label", "int")], set(), "ods.t")
    with pytest.raises(LedgerConflict, match=r"\['note'\] are not in the Hive table ods.t, and this run did not see"):
        next_columns(table, [*table, ("note", "string")], set(), "ods.t")


def test_one_of_many_racing_runs_takes_over_a_dead_runs_lock(tmp_path):
    from tests.lock_races import assert_one_winner_when_free_and_when_taking_over

    assert_one_winner_when_free_and_when_taking_over(lambda: ledger_in(tmp_path))


def test_a_live_holder_is_refused_naming_it_its_task_and_its_lease(tmp_path):
    from airflow_cdc_provider.core.holder import Owner

    ledger, lease = ledger_in(tmp_path), dt.timedelta(minutes=10)
    ledger.acquire(OTHER, lambda holder: True, T0, lease, Owner("worker-3", 4242, "cdc.plan"))
    later = T0 + dt.timedelta(minutes=4)
    assert ledger.renew(OTHER, later, lease, Owner("worker-3", 4343, "cdc.merge"))
    with pytest.raises(TableBusy) as refused:
        ledger.acquire(RUN, lambda holder: True, later + dt.timedelta(minutes=9), lease)
    message = str(refused.value)
    for part in ("manual__2026-03-01T10:30:00", "since 2026-03-01T10:00:00+00:00", "looks alive",
                 "task cdc.merge (process 4343 on worker-3) renewed the lock at 2026-03-01T10:04:00+00:00",
                 "lasts until 2026-03-01T10:14:00+00:00", "mark it failed in the UI",
                 "or wait until 2026-03-01T10:14:00+00:00", f"delete {tmp_path}/ods.t/ledger/lock.json", "this run changed nothing"):
        assert part in message, (part, message)
    assert ledger.holder() == OTHER


def test_a_holder_whose_run_still_looks_running_is_taken_over_once_its_lease_ends(tmp_path):
    messages, lease = [], dt.timedelta(minutes=10)
    ledger = ledger_in(tmp_path, log=messages.append)
    ledger.acquire(OTHER, lambda holder: True, T0, lease)
    # Killed: its run stays "running" in Airflow, but nothing renews the lock any more.
    ledger.acquire(RUN, lambda holder: True, T0 + dt.timedelta(minutes=10), lease)
    assert ledger.holder() == RUN and "its lease ended" in messages[0]
    assert not ledger.renew(OTHER, T0 + dt.timedelta(minutes=11), lease), "the old run learns it lost the lock"
    assert ledger.lock().lease_until == T0 + dt.timedelta(minutes=20)


def test_a_lock_without_a_lease_counts_as_alive_while_its_run_runs(tmp_path):
    ledger = ledger_in(tmp_path)
    (tmp_path / "ods.t" / "ledger").mkdir(parents=True)
    (tmp_path / "ods.t" / "ledger" / "lock.json").write_text(json.dumps(
        {"dag_id": OTHER.dag_id, "run_id": OTHER.run_id, "since": T0.isoformat()}))
    with pytest.raises(TableBusy, match="its run is running \\(the lock has no lease\\)"):
        ledger.acquire(RUN, lambda holder: True, T0 + dt.timedelta(days=30), dt.timedelta(minutes=10))
    ledger.acquire(RUN, lambda holder: False, T0 + dt.timedelta(days=30), dt.timedelta(minutes=10))
    assert ledger.holder() == RUN


# A lock holder on the host that checks: whether it is known to be dead decides at once (core.holder).
BOOT, NS = "e727a271-310e-44af-bc53-3fffe32b3b70", "pid:[4026531836]"


def holder_owner(pid=20438, started=5000, host="vm", boot=BOOT, ns=NS, group=20438, task="source.merge try 1",
                 group_started=None):
    from airflow_cdc_provider.core.holder import Owner

    return Owner(host, pid, task, boot, ns, started, group, group_started)


def seen(process=None, *group, checker=30000, leader=None):
    from airflow_cdc_provider.core.holder import HolderSeen, Proc

    return HolderSeen(checker, Proc(*process) if process else None, tuple(Proc(*p) for p in group),
                      Proc(*leader) if leader else None)


HERE = holder_owner(pid=30000, started=9000, group=29990, task="source.plan try 1")


def test_a_holder_on_this_host_whose_process_is_gone_is_known_dead():
    from airflow_cdc_provider.core.holder import holder_gone

    why = holder_gone(holder_owner(), HERE, seen(None))  # and no process is left in its group
    assert why == ("its process 20438 on vm (task source.merge try 1) is gone: no process has that id on this "
                   "host now (the same kernel boot and pid namespace), and none it started is left")


def test_a_holder_whose_id_now_belongs_to_a_later_process_is_known_dead():
    from airflow_cdc_provider.core.holder import holder_gone

    why = holder_gone(holder_owner(), HERE, seen((20438, 1, 7000)))
    assert "that id now belongs to another process, which started at tick 7000 after boot, not 5000" in why


def test_a_live_holder_on_this_host_is_not_dead():
    from airflow_cdc_provider.core.holder import holder_gone

    assert holder_gone(holder_owner(), HERE, seen((20438, 1, 5000), (20438, 1, 5000))) is None


def test_a_holder_is_not_dead_while_a_process_it_started_runs():
    from airflow_cdc_provider.core.holder import holder_gone

    holder = holder_owner()
    # Its spark-submit, reparented when it was killed, still merges in its process group.
    assert holder_gone(holder, HERE, seen(None, (20501, 1, 5100))) is None
    # An older process of the group (the shell that started both), the checker, and what the checker started
    # are not the holder's.
    shared = holder_owner(group=29990)
    assert holder_gone(shared, HERE, seen(None, (29990, 1, 4000), (30000, 29990, 9000), (30010, 30000, 9100)))
    assert holder_gone(shared, HERE, seen(None, (29990, 1, 4000), (30020, 1, 9200))) is None


def test_a_group_whose_id_went_to_a_later_process_holds_nothing_of_the_holders():
    from airflow_cdc_provider.core.holder import holder_gone

    # The holder led its group; a session leader started since has its id (ids wrap), and a child of that one.
    squatter, its_child = (20438, 1, 7000), (20440, 20438, 7001)
    assert holder_gone(holder_owner(), HERE, seen(squatter, squatter, its_child, leader=squatter))
    # The holder was not its group's leader: the recorded leader's start tells the group apart.
    member = holder_owner(group=20400, group_started=4900)
    later = (20400, 1, 7000)
    assert holder_gone(member, HERE, seen(None, later, leader=later))
    # The group's leader still runs, or has ended (the group may live on without it): what it holds counts.
    assert holder_gone(member, HERE, seen(None, (20400, 1, 4900), (20501, 1, 5100), leader=(20400, 1, 4900))) is None
    assert holder_gone(member, HERE, seen(None, (20501, 1, 5100))) is None
    # Without the leader's start recorded (its leader had ended, or an older lock), a later process with the
    # group's id cannot be told from the group's own.
    assert holder_gone(holder_owner(group=20400), HERE, seen(None, later, leader=later)) is None


@pytest.mark.parametrize("holder, here", [
    (holder_owner(host="worker-3"), HERE),  # another host: its lease decides
    (holder_owner(boot="another-boot"), HERE),  # this host rebooted since: the id counts again from 1
    (holder_owner(ns="pid:[4026532000]"), HERE),  # another container on this kernel
    (holder_owner(started=None), HERE),  # written before start times were recorded, or its task ended
    (holder_owner(boot=None, ns=None, started=None, group=None), HERE),
    (holder_owner(), holder_owner(pid=30000, boot=None)),  # the checker cannot tell its own boot
    (None, HERE),
], ids=["other-host", "other-boot", "other-pid-namespace", "no-start-time", "old-lock", "checker-unsure", "no-owner"])
def test_a_holder_this_host_cannot_look_up_is_left_to_the_lease(holder, here):
    from airflow_cdc_provider.core.holder import holder_gone, same_pid_space

    assert not same_pid_space(holder, here)
    assert holder_gone(holder, here, seen(None)) is None


def test_a_holder_this_host_cannot_see_is_left_to_the_lease():
    from airflow_cdc_provider.core.holder import holder_gone

    assert holder_gone(holder_owner(), HERE, None) is None  # /proc could not be read


def test_acquire_takes_over_from_a_gone_holder_at_once_and_refuses_a_live_one(tmp_path):
    from airflow_cdc_provider.core.holder import Owner

    messages, lease, looked = [], dt.timedelta(minutes=10), []
    ledger = ledger_in(tmp_path, log=messages.append)
    ledger.acquire(OTHER, lambda holder: True, T0, lease, holder_owner())

    def alive(owner: Owner):
        looked.append(owner)
        return seen((owner.pid, 1, owner.started))

    with pytest.raises(TableBusy, match="looks alive: task source.merge try 1 \\(process 20438 on vm\\)"):
        ledger.acquire(RUN, lambda holder: True, T0 + dt.timedelta(minutes=1), lease, HERE, alive)
    assert looked == [holder_owner()]
    elsewhere = HERE.model_copy(update={"host": "worker-3"})
    with pytest.raises(TableBusy):  # another host does not look, and waits for the lease
        ledger.acquire(RUN, lambda holder: True, T0 + dt.timedelta(minutes=1), lease, elsewhere, lambda o: seen(None))
    ledger.acquire(RUN, lambda holder: True, T0 + dt.timedelta(minutes=1), lease, HERE, lambda owner: seen(None))
    assert ledger.lock().run == RUN and ledger.lock().owner == HERE
    assert messages == [(f"Took over the lock left by {OTHER}: its process 20438 on vm (task source.merge try 1) is "
                         "gone: no process has that id on this host now (the same kernel boot and pid namespace), "
                         "and none it started is left.")]


def test_an_owner_round_trips_and_a_lock_of_the_previous_format_reads_without_its_process(tmp_path):
    from airflow_cdc_provider.core.ledger import Lock

    ledger = ledger_in(tmp_path)
    ledger.acquire(OTHER, lambda holder: True, T0, dt.timedelta(minutes=10), holder_owner())
    assert ledger.lock().owner == holder_owner()
    assert holder_owner().finished() == holder_owner(started=None)
    old = {"dag_id": OTHER.dag_id, "run_id": OTHER.run_id, "since": T0.isoformat(), "renewed": T0.isoformat(),
           "lease_until": (T0 + dt.timedelta(minutes=10)).isoformat(),
           "owner": {"host": "vm", "pid": 20438, "task": "source.merge try 1"}}
    owner = Lock.model_validate(old).owner
    assert (owner.pid, owner.boot_id, owner.started, owner.group) == (20438, None, None, None)


def test_ledger_files_the_previous_release_wrote_still_load(tmp_path):
    # As its hand-written codecs wrote them: the lock's run at the top level, times with +00:00, lists.
    ledger = ledger_in(tmp_path)
    files = {
        "lock.json": {"dag_id": OTHER.dag_id, "run_id": OTHER.run_id, "since": T0.isoformat(),
                      "renewed": T0.isoformat(), "lease_until": (T0 + dt.timedelta(minutes=4)).isoformat(),
                      "owner": {"host": "worker-1", "pid": 4242, "task": "source.plan try 1"}},
        "committed.json": {"version": 3, "location": "file:/w/ods.db/t/v000003", "as_of": T0.isoformat(),
                           "watermark": {"file": "binlog.000001", "position": 400, "server_id": 1, "gtid": None,
                                         "server_uuid": None},
                           "run": {"dag_id": OTHER.dag_id, "run_id": OTHER.run_id}, "mode": "incremental",
                           "columns": [["id", "int(11)"]]},
        f"runs/{OTHER.key}.json": {"run": {"dag_id": OTHER.dag_id, "run_id": OTHER.run_id}, "mode": "incremental",
                                   "reason": "why", "input_version": 2, "start": None, "end": None,
                                   "stop_before": None, "output_version": 3, "as_of": T0.isoformat(),
                                   "start_columns": None, "warning": None},
    }
    for name, data in files.items():
        (tmp_path / "ods.t" / "ledger" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ods.t" / "ledger" / name).write_text(json.dumps(data, indent=1, sort_keys=True))
    lock = ledger.lock()
    assert (lock.run, lock.lease_until, lock.owner.pid) == (OTHER, T0 + dt.timedelta(minutes=4), 4242)
    assert ledger.committed() == Committed(3, "file:/w/ods.db/t/v000003", wm(400), T0, OTHER, Mode.INCREMENTAL,
                                           (("id", "int(11)"),))
    assert ledger.run_plan(OTHER).output_version == 3
    # Written back, each keeps the shape it was read in (the lock's run still at the top level).
    ledger.renew(OTHER, T0 + dt.timedelta(minutes=1), dt.timedelta(minutes=4))
    written = json.loads((tmp_path / "ods.t" / "ledger" / "lock.json").read_text())
    assert (written["dag_id"], written["run_id"], written["owner"]["host"]) == (OTHER.dag_id, OTHER.run_id,
                                                                              "worker-1")


# Diff mode (capture: diff): no binlog, changes by the rows' digests (core.diff).

def test_a_diff_mode_table_is_compared_with_its_version_once_it_has_digests():
    digested = committed().model_copy(update={"watermark": None, "digests": "/work/ods.t/digests/r.parquet"})
    plan = plan_run(RUN, digested, None, T0 + dt.timedelta(hours=1), capture="diff")
    assert (plan.mode, plan.input_version, plan.start, plan.stop_before) == (Mode.DIFF, 3, None, None)
    # Captured from the binlog before: its version has no digests, which a snapshot reads.
    plan = plan_run(RUN, committed(), None, None, capture="diff")
    assert plan.mode == Mode.SNAPSHOT and "no row digests" in plan.reason
    # And back to the binlog: a diff-mode version has no watermark to read it from.
    plan = plan_run(RUN, digested, None, None, capture="binlog")
    assert plan.mode == Mode.SNAPSHOT and "no watermark" in plan.reason
    assert plan_run(RUN, digested, None, None, True, capture="diff").mode == Mode.SNAPSHOT, "fresh_snapshot wins"
    assert plan_run(RUN, digested, None, T0, capture="diff").mode == Mode.NOTHING, "an interval already reflected"


def test_a_diff_mode_table_whose_columns_changed_is_read_whole_again():
    columns = (("at", "datetime"), ("line", "text"))
    digested = committed().model_copy(update={"watermark": None, "digests": "/work/ods.t/digests/r.parquet",
                                              "columns": columns})
    assert plan_run(RUN, digested, None, None, capture="diff", columns=columns).mode == Mode.DIFF
    plan = plan_run(RUN, digested, None, None, capture="diff", columns=(*columns, ("host", "varchar(20)")))
    assert plan.mode == Mode.SNAPSHOT and "every row's digest changes with them" in plan.reason
    assert plan.start_columns == columns, "what they were, for the table's policy to judge the change"
    assert plan_run(RUN, digested, None, None, capture="diff").mode == Mode.DIFF, "columns not known: as before"


def test_a_diff_merges_onto_the_version_it_compared_with_whatever_the_metastore_points_at():
    diff = RunPlan(RUN, Mode.DIFF, "", input_version=3)
    newer = VersionInfo(4, None, OTHER, 3)  # a diff run that died before its ledger was written
    for found in (current(3, 400), newer, current(5, 1200)):
        origin = choose_origin(found, diff, None)
        assert (origin.action, origin.version) == ("merge", 3), found
    with pytest.raises(LedgerConflict, match="fresh_snapshot=true"):
        choose_origin(None, diff, None)
    # A snapshot of a diff-mode table has no position: it loads.
    assert choose_origin(newer, RunPlan(RUN, Mode.SNAPSHOT, ""), None).action == "load"
    # The binlog read onto a version read without it: the two cannot be ordered.
    with pytest.raises(LedgerConflict, match="read without the binlog"):
        choose_origin(newer, incremental(), wm(900))
