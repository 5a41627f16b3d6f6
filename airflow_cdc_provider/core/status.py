"""Where each table stands, for ``airflow cdc status`` and the CDC tables page: what its runs recorded, read at one
moment, turned into a row, a table's history and a run's tables.

Pure: the reader (``status.records``) reads the records and hands them in. Which record is authoritative for what:

- the committed version, the source moment it reflects and so the lag: the table's ledger (``Committed``, in the
  work directory), which the merge writes with the version and an idle run advances on the same version. Where the
  work directory cannot be read (another host, another user), the latest outcome that committed or advanced it;
- a run in progress: the ledger's lock, while its DAG run is queued or running in the metadata DB and its lease
  lasts (as ``Ledger.acquire`` judges a lock: one whose run has ended is taken over at once);
- stopped or not, and why: the table's outcome in its source's latest run (``TableOutcome``, the merge task's
  ``outcomes`` XCom), whose failure names what stopped it and the way out, as the run's log and summary do; or,
  when that run ended before any outcome, the task that failed it;
- the last verify: the table's verify state (``VerifyState.last``); a repair pending: its repair request;
- the versions and what each changed (the charts of changes, lag at commit and rows): the Hive table's asset events,
  whose extras the commits wrote, and which outlive a cleared run (whose outcome the run's next try replaces);
- what each run did (durations, idle runs, failures): the outcomes of the source's runs, with their DAG runs' and
  merge tasks' times from the metadata DB.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any

from airflow_cdc_provider.core.changelog import changelog_table
from airflow_cdc_provider.core.contract import CapturedTable, RefusedTable, SourcePlan, TableOutcome
from airflow_cdc_provider.core.history import history_table, snapshots_table
from airflow_cdc_provider.core.ledger import Committed, Lock, RunRef
from airflow_cdc_provider.core.model import Instant, Model
from airflow_cdc_provider.core.modes import Mode, Status
from airflow_cdc_provider.core.verify import VerifyMark
from airflow_cdc_provider.core.workdir import TableDir


class TableState(StrEnum):
    """Where a table stands."""

    CURRENT = "current"  # a committed version, within the lag allowed
    BEHIND = "behind"  # a committed version, reflecting a source moment older than the lag allowed
    STOPPED = "stopped"  # its latest run failed it: ``reason`` says why and the way out
    NOT_LOADED = "not loaded"  # no version committed yet, and no run failed it


class Repair(StrEnum):
    """Where the difference a verify found stands."""

    PENDING = "pending"  # the buckets it found different wait for a run to read them again
    REPAIRED = "repaired"  # a later run read them again


class TableKind(Model):
    """Which table it is and how it is captured: the columns of a row that say what, not how it stands."""

    dag_id: str
    group: str  # the task group of its source; "" outside any
    source: str  # schema.table
    hive_table: str  # database.table
    capture: tuple[str, ...] = ("binlog",)  # binlog or diff, and keyless, shard where they apply; none: refused
    shard: str | None = None  # the shard's directory (``Shard.path``), for a shard of a Hive table
    beside: tuple[str, ...] = ()  # its changelog, snapshots and history tables (database.table)

    @classmethod
    def of(cls, dag_id: str, group: str, table: CapturedTable) -> TableKind:
        database, name = table.hive_table.split(".", 1)
        capture = [str(table.capture)]
        if not table.key:
            capture.append("keyless")
        if table.shard is not None:
            capture.append("shard")
        beside = []
        if table.changelog is not None:
            beside.append(changelog_table(name))
        if table.history is not None and table.history.daily:
            beside.append(snapshots_table(name))
        if table.history is not None and table.history.scd2:
            beside.append(history_table(name))
        return cls(dag_id=dag_id, group=group, source=table.source, hive_table=table.hive_table,
                   capture=tuple(capture), shard=table.shard.path if table.shard is not None else None,
                   beside=tuple(f"{database}.{b}" for b in beside))

    @classmethod
    def stopped(cls, dag_id: str, group: str, table: RefusedTable) -> TableKind:
        """A table the check refused: not captured in any way."""
        return cls(dag_id=dag_id, group=group, source=table.source, hive_table=table.hive_table, capture=(),
                   shard=table.shard.path if table.shard is not None else None)

    @property
    def key(self) -> str:
        """The row's identity among every DAG's tables."""
        return f"{self.dag_id}/{self.group}/{self.source}"


class PlannedTable(Model):
    """A table of a source's plan, as the status reads it: what it is, and where its work state is."""

    kind: TableKind
    table_dir: TableDir


class SourceTables(Model):
    """The tables of one run's plan of a source, in short (the plan task's ``tables`` XCom): what the status and
    the tables page read for every table, instead of the whole plan (each table's columns, its run plan, its
    committed version), which is ten times the size."""

    run: RunRef
    work_conn_id: str | None = None  # ``SourcePlan.work_conn_id``
    tables: tuple[PlannedTable, ...] = ()

    @classmethod
    def of(cls, dag_id: str, group: str, plan: SourcePlan) -> SourceTables:
        """The plan's tables, and the tables the check stopped (shown stopped, with why, by their outcomes)."""
        return cls(run=plan.run, work_conn_id=plan.work_conn_id,
                   tables=(*(PlannedTable(kind=TableKind.of(dag_id, group, t.table), table_dir=t.table_dir)
                             for t in plan.tables),
                           *(PlannedTable(kind=TableKind.stopped(dag_id, group, t.table), table_dir=t.table_dir)
                             for t in plan.stopped)))


class TableRecords(Model):
    """What the runs recorded of one table, read at one moment: the input of ``table_status``."""

    kind: TableKind
    committed: Committed | None = None  # the ledger's
    lock: Lock | None = None
    # Whether the lock's DAG run is queued or running in the metadata DB; None: not asked (the lease alone decides).
    lock_run_running: bool | None = None
    latest: TableOutcome | None = None  # its outcome in its source's latest run that gave one
    latest_run: str | None = None  # that run's id
    # The task that failed the source's latest run before it gave any outcome (the check, the plan, the merge
    # itself), and that run: the table did not move in it.
    failed_task: str | None = None
    failed_run: str | None = None
    verify: VerifyMark | None = None
    repair_pending: bool = False
    unread: str = ""  # why its work directory could not be read: then the ledger's columns come from the outcome


class TableStatus(Model):
    """One table's row: what it is, the state, the version and the moment it reflects, the latest run's changes,
    the last verify."""

    kind: TableKind
    state: TableState
    reason: str = ""
    version: int | None = None
    mode: Mode | None = None  # how the committed version was made
    as_of: Instant | None = None  # the source moment the committed version reflects
    lag_seconds: float | None = None  # now minus ``as_of``
    running: str | None = None  # the run holding the table now, if one does
    latest_status: Status | None = None  # what the latest run did to the table
    latest_run: str | None = None
    upserts: int = 0  # the latest run's changes
    deletes: int = 0
    rows: int | None = None  # rows in the committed version, as the run that committed it counted them
    verify: VerifyMark | None = None
    repair: Repair | None = None
    unread: str = ""


class TableRows(Model):
    """Every table's row at one moment: the tables page's and ``airflow cdc status --json``'s answer."""

    now: Instant
    max_lag_seconds: float
    tables: tuple[TableStatus, ...] = ()


def table_status(records: TableRecords, now: dt.datetime, max_lag: dt.timedelta) -> TableStatus:
    """The table's status at ``now``; ``max_lag``: how far behind the source a table may be and still be
    current."""
    latest, lock = records.latest, records.lock
    committed = ((records.committed.version, records.committed.mode, records.committed.as_of)
                 if records.committed is not None else _committed_by(latest) if records.unread else None)
    running = lock.run.run_id if lock is not None and lock.alive(now, records.lock_run_running is not False) \
        else None
    common: dict[str, Any] = {
        "kind": records.kind, "running": running, "latest_run": records.latest_run, "unread": records.unread,
        "latest_status": latest.status if latest is not None else None, "verify": records.verify,
        "repair": _repair(records)}
    if latest is not None:
        common.update(upserts=latest.upserts, deletes=latest.deletes)
    if committed is not None:
        version, mode, as_of = committed
        common.update(version=version, mode=mode, as_of=as_of, lag_seconds=(now - as_of).total_seconds(),
                      rows=_rows(records, version))
    if records.failed_task is not None:
        return TableStatus(state=TableState.STOPPED, reason=f"the task {records.failed_task} failed in the run "
                           f"{records.failed_run} before the table's outcome: its log says why", **common)
    if latest is not None and latest.status == Status.FAILED:
        return TableStatus(state=TableState.STOPPED, reason=latest.error or latest.reason, **common)
    if committed is None:
        return TableStatus(state=TableState.NOT_LOADED, reason="no version committed yet", **common)
    as_of = committed[2]
    if now - as_of > max_lag:
        moment = as_of.strftime("%Y-%m-%d %H:%M:%S")
        return TableStatus(state=TableState.BEHIND, reason=f"reflects the source as of {moment} UTC, more than "
                           f"{duration(max_lag)} ago", **common)
    return TableStatus(state=TableState.CURRENT, **common)


def _rows(records: TableRecords, version: int) -> int | None:
    """The committed version's rows: as its ledger recorded them, or as the latest outcome counted them when it
    made that version (a ledger written before they were recorded, or unread)."""
    if records.committed is not None and records.committed.rows is not None:
        return records.committed.rows
    latest = records.latest
    return latest.rows if latest is not None and latest.version == version else None


def _committed_by(latest: TableOutcome | None) -> tuple[int, Mode, dt.datetime] | None:
    if latest is None or latest.version is None or latest.as_of is None or latest.status == Status.FAILED:
        return None
    return latest.version, latest.mode, latest.as_of


def _repair(records: TableRecords) -> Repair | None:
    if records.repair_pending:
        return Repair.PENDING
    mark = records.verify
    if mark is not None and mark.differing_buckets and records.committed is not None and \
            mark.version is not None and records.committed.version > mark.version:
        return Repair.REPAIRED  # its request is gone, and a later version was committed: that run read them again
    return None


def duration(span: dt.timedelta) -> str:
    """A span as people write it: "90 min", "2 h", "3 d", "45 s"."""
    seconds = int(span.total_seconds())
    if seconds and seconds % 86400 == 0:
        return f"{seconds // 86400} d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


class RunTimes(Model):
    """A DAG run's times, and its merge task's, from the metadata DB."""

    run_id: str
    state: str | None = None
    start: Instant | None = None
    end: Instant | None = None
    merge_end: Instant | None = None  # when the merge task ended: the commit's moment
    merge_try: int | None = None  # its try number, for the log's link


class RunPoint(Model):
    """What one run did to one table: a point of its charts, a row of its runs."""

    run_id: str
    status: Status
    mode: Mode
    version: int | None = None
    location: str | None = None  # where that version's files are
    as_of: Instant | None = None
    committed_at: Instant | None = None  # when the run's merge ended
    lag_at_commit: float | None = None  # seconds between the moment the version reflects and its commit
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    upserts: int = 0
    deletes: int = 0
    rows: int | None = None
    run_seconds: float | None = None  # the DAG run, start to end
    merge_seconds: float | None = None  # the table's merge (``TableOutcome.seconds``)
    seconds: dict[str, float] = {}  # per stage
    error: str | None = None
    reason: str = ""
    warnings: tuple[str, ...] = ()
    healed: bool = False
    reloaded: bool = False  # loaded anew by the run (``Healed.reloaded``): the Hive table defined again

    @classmethod
    def of(cls, outcome: TableOutcome, times: RunTimes) -> RunPoint:
        lag = None
        if outcome.as_of is not None and times.merge_end is not None and outcome.status == Status.COMMITTED:
            lag = max(0.0, (times.merge_end - outcome.as_of).total_seconds())
        run_seconds = (times.end - times.start).total_seconds() if times.start and times.end else None
        return cls(run_id=times.run_id, status=outcome.status, mode=outcome.mode, version=outcome.version,
                   location=outcome.location, as_of=outcome.as_of, committed_at=times.merge_end,
                   lag_at_commit=lag, inserted=outcome.changes.get("I", 0), updated=outcome.changes.get("U", 0),
                   deleted=outcome.changes.get("D", 0), upserts=outcome.upserts, deletes=outcome.deletes,
                   rows=outcome.rows, run_seconds=run_seconds, merge_seconds=outcome.seconds.get("merge"),
                   seconds=outcome.seconds, error=outcome.error, reason=outcome.reason, warnings=outcome.warnings,
                   healed=outcome.healed is not None,
                   reloaded=outcome.healed is not None and outcome.healed.reloaded)


class Commit(Model):
    """A version as its commit announced it: the asset event of the Hive table (``core.assets.event_extra``), which
    stays when the run that made it is cleared and its outcome replaced."""

    run_id: str | None  # the DAG run that committed it
    task_id: str | None  # the task that announced it, and its map index: the log to open
    map_index: int | None = None
    at: Instant  # when it was announced
    version: int | None = None
    mode: str | None = None
    as_of: Instant | None = None
    lag_at_commit: float | None = None  # seconds from the moment it reflects to its announcement
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    rows: int | None = None
    location: str | None = None
    healed: bool = False
    reloaded: bool = False  # loaded anew by its run: the Hive table defined again

    @classmethod
    def of(cls, extra: dict[str, Any], at: dt.datetime, run_id: str | None, task_id: str | None,
           map_index: int | None) -> Commit:
        as_of = dt.datetime.fromisoformat(extra["as_of"]) if extra.get("as_of") else None
        lag = max(0.0, (at - as_of).total_seconds()) if as_of is not None else None
        return cls(run_id=run_id, task_id=task_id, map_index=map_index, at=at, version=extra.get("version"),
                   mode=extra.get("mode"), as_of=as_of, lag_at_commit=lag, inserted=extra.get("inserted") or 0,
                   updated=extra.get("updated") or 0, deleted=extra.get("deleted") or 0, rows=extra.get("rows"),
                   location=extra.get("location"), healed=bool(extra.get("healed")),
                   reloaded=bool((extra.get("healed") or {}).get("reloaded")))


class TableDetail(Model):
    """A table's own view: its row, its versions as their commits announced them, and what its runs did; newest
    first."""

    status: TableStatus
    commits: tuple[Commit, ...] = ()
    runs: tuple[RunPoint, ...] = ()


class RunTable(Model):
    """One table in one DAG run: what the run did to it, and what its verify found."""

    kind: TableKind
    point: RunPoint | None = None  # None: the run gave it no outcome (see the run's failed tasks)
    verify: VerifyMark | None = None


class RunTables(Model):
    """A DAG run's tables, for the view on the run."""

    dag_id: str
    run_id: str
    state: str | None = None
    tables: tuple[RunTable, ...] = ()
    failed_tasks: tuple[str, ...] = ()  # the run's tasks that failed (of the provider's groups)
