"""A table's state at a glance (``core.status``): from its ledger, its latest run's outcome and its lock."""

import datetime as dt

from airflow_cdc_provider.core.contract import TableOutcome
from airflow_cdc_provider.core.ledger import Committed, Lock, RunRef
from airflow_cdc_provider.core.modes import Mode, Status
from airflow_cdc_provider.core.status import TableState, TableStatus, table_status
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


def status(committed_version: Committed | None, latest: TableOutcome | None = None, lock: Lock | None = None,
           max_lag: dt.timedelta = HOUR) -> TableStatus:
    return table_status("shop.orders", "ods.orders", committed_version, latest, lock, NOW, max_lag)


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


def test_the_status_serialises_its_state_and_moments_as_plain_json():
    row = status(committed(NOW - HOUR * 2), outcome(Status.FAILED, error="stopped")).to_xcom()
    assert row["state"] == "stopped" and row["latest_status"] == "failed" and row["mode"] == "incremental"
    assert row["as_of"] == "2026-11-29T10:00:00Z"
    assert TableStatus.from_text(status(None).to_text()).state is TableState.NOT_LOADED
