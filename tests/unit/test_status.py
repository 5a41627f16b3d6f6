"""A table's state at a glance (``core.status``): from its ledger, its latest run's outcome and its lock."""

import datetime as dt

from airflow_cdc_provider.core.contract import TableOutcome
from airflow_cdc_provider.core.ledger import Committed, Lock, RunRef
from airflow_cdc_provider.core.modes import Mode, Status
from airflow_cdc_provider.core.status import TableKind, TableRecords, TableState, TableStatus, table_status
from airflow_cdc_provider.core.watermark import Watermark

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
RUN = RunRef(dag_id="cdc", run_id="scheduled__2026-11-29T11:00:00+00:00")
LATER = RunRef(dag_id="cdc", run_id="scheduled__2026-11-29T12:00:00+00:00")


def committed(as_of: dt.datetime, version: int = 4) -> Committed:
    return Committed(version=version, location=f"file:/warehouse/ods.db/orders/v{version:06d}",
                     watermark=Watermark("binlog.000002", 1234, server_id=1), as_of=as_of, run=RUN,
                     mode=Mode.INCREMENTAL)


def outcome(status: Status, **fields) -> TableOutcome:
    return TableOutcome(source="shop.orders", hive_table="ods.orders", mode=Mode.INCREMENTAL, status=status, **fields)


KIND = TableKind(dag_id="cdc", group="shop", source="shop.orders", hive_table="ods.orders")


def status(committed_version: Committed | None, latest: TableOutcome | None = None, lock: Lock | None = None,
           max_lag: dt.timedelta = HOUR, **records) -> TableStatus:
    return table_status(TableRecords(kind=KIND, committed=committed_version, latest=latest, lock=lock, **records),
                        NOW, max_lag)


def test_a_table_never_loaded_is_not_loaded_and_one_within_the_lag_is_current_with_its_latest_changes():
    never = status(None)
    assert (never.state, never.version, never.lag_seconds) == (TableState.NOT_LOADED, None, None)
    assert never.reason == "no version committed yet"

    latest = outcome(Status.COMMITTED, version=4, rows=120, upserts=7, deletes=2)
    current = status(committed(NOW - dt.timedelta(minutes=10)), latest)
    assert current.state == TableState.CURRENT and current.reason == ""
    assert (current.version, current.mode, current.lag_seconds) == (4, Mode.INCREMENTAL, 600.0)
    assert (current.latest_status, current.upserts, current.deletes, current.rows) == (Status.COMMITTED, 7, 2, 120)
    # An idle run (no change: the watermark advanced on the same version) changed nothing and counted no rows.
    idle = status(committed(NOW - dt.timedelta(minutes=1)), outcome(Status.IDLE))
    assert (idle.state, idle.latest_status, idle.upserts, idle.rows) == (TableState.CURRENT, Status.IDLE, 0, None)


def test_a_table_reflecting_the_source_longer_ago_than_the_lag_allowed_is_behind_and_says_since_when():
    behind = status(committed(NOW - dt.timedelta(hours=3)), max_lag=dt.timedelta(minutes=90))
    assert behind.state == TableState.BEHIND and behind.lag_seconds == 3 * 3600
    assert behind.reason == "reflects the source as of 2026-11-29 09:00:00 UTC, more than 90 min ago"
    assert status(committed(NOW - HOUR), max_lag=HOUR).state == TableState.CURRENT, "at the limit: still current"


def test_a_table_its_latest_run_failed_is_stopped_with_the_runs_message_and_keeps_its_version():
    error = ("extract: the binlog of shop.orders holds a statement the capture cannot follow: TRUNCATE TABLE; "
             "set `fresh_snapshot: true` for the next run")
    stopped = status(committed(NOW - dt.timedelta(minutes=5)), outcome(Status.FAILED, error=error))
    assert (stopped.state, stopped.reason, stopped.version) == (TableState.STOPPED, error, 4)
    assert stopped.lag_seconds == 300.0, "its lag still shows how far behind it is"
    # Failed before any version: stopped, not merely not loaded.
    first = status(None, outcome(Status.FAILED, reason="its capture did not finish"))
    assert (first.state, first.reason) == (TableState.STOPPED, "its capture did not finish")


def test_a_live_lock_names_the_run_holding_the_table_and_an_expired_one_does_not():
    live = Lock.taken(LATER, NOW - dt.timedelta(minutes=2), dt.timedelta(minutes=10), None)
    assert status(committed(NOW - HOUR / 2), lock=live).running == LATER.run_id
    expired = Lock.taken(LATER, NOW - HOUR, dt.timedelta(minutes=10), None)
    assert status(committed(NOW - HOUR / 2), lock=expired).running is None


def test_a_lock_whose_run_has_ended_holds_nothing_even_inside_its_lease_and_one_whose_run_runs_does():
    # As the plan task judges a lock (``Ledger.acquire``): a failed run's lock is taken over at once, so its table
    # is not shown running for the rest of the lease.
    live = Lock.taken(LATER, NOW - dt.timedelta(minutes=2), dt.timedelta(minutes=10), None)
    error = "extract: the binlog holds a TRUNCATE TABLE"
    ended = status(committed(NOW - HOUR / 2), outcome(Status.FAILED, error=error), lock=live,
                   lock_run_running=False)
    assert (ended.state, ended.running, ended.reason) == (TableState.STOPPED, None, error)
    running = status(committed(NOW - HOUR / 2), lock=live, lock_run_running=True)
    assert running.running == LATER.run_id
    expired = Lock.taken(LATER, NOW - HOUR, dt.timedelta(minutes=10), None)
    assert status(committed(NOW - HOUR / 2), lock=expired, lock_run_running=True).running is None, \
        "a running run whose tasks stopped renewing its lease holds nothing either"


def test_a_stopped_table_shows_its_committed_versions_rows():
    recorded = committed(NOW - dt.timedelta(minutes=5)).model_copy(update={"rows": 120})
    stopped = status(recorded, outcome(Status.FAILED, error="stopped"))
    assert (stopped.state, stopped.version, stopped.rows) == (TableState.STOPPED, 4, 120)
    # An idle run since counted no rows: the version's still show.
    assert status(recorded, outcome(Status.IDLE, version=4)).rows == 120
    # A ledger written before its rows were recorded: the latest outcome's, when it made that version.
    assert status(committed(NOW), outcome(Status.COMMITTED, version=4, rows=90)).rows == 90
    assert status(committed(NOW), outcome(Status.FAILED, error="stopped")).rows is None


def test_the_status_serialises_its_state_and_moments_as_plain_json():
    row = status(committed(NOW - HOUR * 2), outcome(Status.FAILED, error="stopped")).to_xcom()
    assert row["state"] == "stopped" and row["latest_status"] == "failed" and row["mode"] == "incremental"
    assert row["as_of"] == "2026-11-29T10:00:00Z"
    assert TableStatus.from_text(status(None).to_text()).state is TableState.NOT_LOADED


def test_a_run_that_failed_before_any_outcome_stops_its_tables_naming_the_task_and_the_run():
    stopped = status(committed(NOW - dt.timedelta(minutes=5)), outcome(Status.IDLE), failed_task="shop.check",
                     failed_run="manual__1")
    assert stopped.state == TableState.STOPPED and stopped.version == 4
    assert stopped.reason == "the task shop.check failed in the run manual__1 before the table's outcome: its log says why"


def test_where_the_work_directory_cannot_be_read_the_version_and_lag_come_from_the_latest_outcome():
    latest = outcome(Status.COMMITTED, version=7, rows=10, as_of=NOW - dt.timedelta(minutes=3))
    row = status(None, latest, unread="permission denied: /work")
    assert (row.state, row.version, row.lag_seconds, row.rows, row.unread) == (
        TableState.CURRENT, 7, 180.0, 10, "permission denied: /work")
    # Readable and without a ledger: not loaded, whatever an outcome says.
    assert status(None, latest).state == TableState.NOT_LOADED


def test_a_verify_difference_is_pending_while_its_request_waits_and_repaired_once_a_later_version_read_it_again():
    from airflow_cdc_provider.core.modes import VerifyStatus
    from airflow_cdc_provider.core.status import Repair
    from airflow_cdc_provider.core.verify import VerifyMark

    mark = VerifyMark(run=RUN, at=NOW, version=4, status=VerifyStatus.DIFFERENT, buckets=16, differing_buckets=2,
                      differences=3)
    assert status(committed(NOW), verify=mark, repair_pending=True).repair == Repair.PENDING
    assert status(committed(NOW, version=5), verify=mark).repair == Repair.REPAIRED
    assert status(committed(NOW, version=4), verify=mark).repair is None, "nothing read it again yet"
    clean = mark.model_copy(update={"status": VerifyStatus.CLEAN, "differing_buckets": 0, "differences": 0})
    assert status(committed(NOW, version=5), verify=clean).repair is None


def test_a_tables_kind_says_how_it_is_captured_and_names_the_tables_beside_it():
    from airflow_cdc_provider.core.changelog import ChangelogSettings
    from airflow_cdc_provider.core.contract import CapturedTable
    from airflow_cdc_provider.core.history import HistorySettings
    from airflow_cdc_provider.core.modes import Capture
    from airflow_cdc_provider.core.shards import Shard

    table = CapturedTable(source="shop_3.orders", hive_table="ods.orders", schema_changes="fail", key=(),
                          columns=(("id", "int"),), capture=Capture.DIFF, changelog=ChangelogSettings(),
                          history=HistorySettings(daily=True, scd2=True),
                          shard=Shard(source_schema="shop_3", source_table="orders"))
    kind = TableKind.of("cdc", "shards", table)
    assert kind.capture == ("diff", "keyless", "shard") and kind.shard == "shop_3/orders"
    assert kind.beside == ("ods.orders_changelog", "ods.orders_snapshots", "ods.orders_history")
    assert kind.key == "cdc/shards/shop_3.orders"


def test_a_table_the_check_refused_is_among_its_sources_tables_and_stopped_with_the_checks_reason():
    from airflow_cdc_provider.core.contract import CapturedTable, RefusedTable, SourcePlan, StoppedTable, TablePlan
    from airflow_cdc_provider.core.ledger import RunPlan
    from airflow_cdc_provider.core.outcomes import stopped_outcome
    from airflow_cdc_provider.core.status import SourceTables
    from airflow_cdc_provider.core.workdir import TableDir

    orders = TablePlan(table=CapturedTable(source="shop.orders", hive_table="ods.orders", schema_changes="fail",
                                           key=("id",), columns=(("id", "int"),)),
                       plan=RunPlan(RUN, Mode.SNAPSHOT, "initial load"),
                       table_dir=TableDir(work_dir="/w", hive_table="ods.orders"))
    refused = RefusedTable(source="shop.lines", hive_table="ods.lines", reason="The table shop.lines is the child of "
                           "a foreign key with a cascading action: … Its entry sets `capture: binlog`: remove that")
    stopped = StoppedTable(table=refused, table_dir=TableDir(work_dir="/w", hive_table="ods.lines"))
    tables = SourceTables.of("cdc", "shop", SourcePlan(run=RUN, tables=(orders,), stopped=(stopped,))).tables
    assert [(t.kind.source, t.kind.hive_table, t.kind.capture, t.table_dir) for t in tables] == [
        ("shop.orders", "ods.orders", ("binlog",), orders.table_dir), ("shop.lines", "ods.lines", (),
                                                                       stopped.table_dir)]
    # Its version from before the check refused it stays, and the run's outcome says why it stopped.
    row = table_status(TableRecords(kind=tables[1].kind, committed=committed(NOW - HOUR),
                                    latest=stopped_outcome(stopped)), NOW, HOUR)
    assert (row.state, row.version, row.latest_status) == (TableState.STOPPED, 4, Status.FAILED)
    assert row.reason == f"check: {refused.reason}"
    # Its summary line: stopped with the check's reason, no way in (the run did nothing to it).
    from airflow_cdc_provider.core.summary import summary_line
    assert summary_line(stopped_outcome(stopped), NOW) == f"shop.lines → ods.lines: failed; check: {refused.reason}"


def test_the_commands_lag_takes_seconds_or_a_unit_and_refuses_anything_else_saying_how():
    import pytest

    from airflow_cdc_provider.overview.command import UsageError, parse_lag

    assert [parse_lag(t).total_seconds() for t in ("90", "45s", "90m", "2h", "1.5d")] == [90, 45, 5400, 7200, 129600]
    for bad in ("", "1w", "-5m", "two hours"):
        with pytest.raises(UsageError, match="give seconds"):
            parse_lag(bad)


def test_the_commands_table_puts_stopped_tables_first_with_their_reason_under_them_and_counts_the_states():
    from airflow_cdc_provider.overview.command import render

    error = "extract: the binlog holds a statement the capture cannot follow; set `fresh_snapshot: true`"
    rows = [status(committed(NOW - dt.timedelta(minutes=5)), outcome(Status.COMMITTED, version=4, rows=9,
                                                                     upserts=3, deletes=1)),
            status(committed(NOW - dt.timedelta(minutes=5)), outcome(Status.FAILED, error=error)),
            status(None)]
    lines = render(rows, HOUR).splitlines()
    assert lines[0].split()[:3] == ["STATE", "DAG", "/"]
    assert lines[1].startswith("stopped") and lines[2] == f"    └ {error}"
    assert lines[3].startswith("not loaded") and lines[4].startswith("current")
    assert "committed +3 -1" in lines[4] and " 4 " in lines[4] and "5 min" in lines[4]
    assert lines[-1] == "1 current, 1 stopped, 1 not loaded (behind: reflecting the source more than 1 h ago)"
