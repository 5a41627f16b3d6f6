"""The run ledger of one Hive table: which run is updating it, what each run planned, what is committed.

Its files live in one directory per Hive table, in the work directory the workers share (a disk or S3; see
``airflow_cdc_provider.storage``), each written whole:

    lock.json        the run updating the table now
    committed.json   the version the table was last switched to, and the watermark that version reflects
    runs/<run>.json  what each run planned: mode, input version, binlog range; a re-run repeats it

The metastore is the commit point: the table's location names a version directory, and that directory holds
the watermark it reflects (see ``VERSION_FILE``), so the two cannot disagree. ``committed.json`` is written
just after the switch; if a crash falls in between, the merge finds the newer version in the metastore and
works from it (``choose_origin``), which is safe because replaying a change twice is harmless.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import model_serializer, model_validator

from airflow_cdc_provider.core.changelog import ChangelogCommit
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.history import HistoryCommit
from airflow_cdc_provider.core.holder import HolderSeen, Owner, holder_gone, same_pid_space
from airflow_cdc_provider.core.model import Instant, M, Model
from airflow_cdc_provider.core.modes import Action, Capture, Mode
from airflow_cdc_provider.core.partitioning import Partitioning
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import TableDir

VERSION_FILE = "_cdc_version.json"  # in each version directory; Hive and Spark skip names starting with _


class TableBusy(CdcError):
    """Another run is updating the same Hive table."""


class LedgerConflict(CdcError):
    """The table and the ledger disagree in a way no run can repair on its own."""


def _utc(value: dt.datetime | str | None) -> dt.datetime | None:
    if value is None:
        return None
    return _instant(dt.datetime.fromisoformat(value) if isinstance(value, str) else value)


def _instant(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        raise ValueError(f"The time {value!r} has no time zone; ledger times are UTC instants.")
    return value.astimezone(dt.UTC)


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


class RunRef(Model):
    """One Airflow DAG run, the unit that plans, holds the lock and commits."""

    dag_id: str
    run_id: str

    @property
    def key(self) -> str:
        """A file and directory name for the run: readable, and unique even where the cleaning merges names."""
        digest = hashlib.sha1(f"{self.dag_id}\0{self.run_id}".encode()).hexdigest()[:10]
        clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.dag_id}__{self.run_id}")[:120]
        return f"{clean}-{digest}"

    def __str__(self) -> str:
        return f"run {self.run_id!r} of DAG {self.dag_id!r}"


Columns = tuple[tuple[str, str], ...]  # (name, MySQL COLUMN_TYPE), in the table's order


class Committed(Model):
    """A version of the table as committed: where it is and the source position and time it reflects."""

    version: int
    location: str
    watermark: Watermark | None  # None: read without the binlog (diff mode), as of ``as_of``
    as_of: Instant
    run: RunRef
    mode: Mode
    # The source table's columns (name, MySQL type) at the watermark: the next extraction starts from them.
    columns: Columns | None = None
    # The row digests of the version (``stages.diff``), where the next diff-mode run compares the source with it;
    # None for a table captured from the binlog.
    digests: str | None = None
    # How the Hive table is partitioned (``partition_by:``); None: not (and in ledgers written before it was
    # recorded, where no table was partitioned).
    partitioning: Partitioning | None = None
    # The version's rows, as its merge counted them: the status shows them whatever the runs since did. None: not
    # counted (a ledger written before they were recorded, a merge that did not count them).
    rows: int | None = None


class RunPlan(Model):
    """What one run does to the table, decided once and recorded, so that a re-run does the same.

    The extraction finds the range's end: the position at ``stop_before`` (a scheduled run's data interval end),
    or the server's position when it starts (a manual run, ``stop_before`` None). ``end``, ``output_version``
    and ``as_of`` are filled in at the commit; a re-run of a run that committed does nothing.
    """

    run: RunRef
    mode: Mode
    reason: str = ""
    input_version: int | None = None
    start: Watermark | None = None
    end: Watermark | None = None
    stop_before: Instant | None = None
    output_version: int | None = None
    as_of: Instant | None = None  # set at commit: the moment the output version reflects
    # The source's columns at ``start`` (the input version's); None when the ledger predates recording them.
    start_columns: Columns | None = None
    warning: str | None = None  # what a reader of the run's result should know (a snapshot instead of the binlog)

    @property
    def resume_from(self) -> Watermark:
        """Where an incremental run reads the binlog from: the watermark of its input version."""
        if self.start is None:
            raise LedgerConflict(f"The {self.mode} plan of {self.run} has no watermark to read the binlog from. "
                                 "Trigger a run with fresh_snapshot=true.")
        return self.start


# Run types whose data interval says what the table should reflect; any other (manual, asset-triggered)
# reflects the moment its extraction starts.
INTERVAL_RUN_TYPES = frozenset({"scheduled", "backfill"})


def run_target(run_type: str, data_interval_end: dt.datetime | None) -> dt.datetime | None:
    """The moment a run's table should reflect: its data interval end for a scheduled or backfill run, else
    None (the moment its extraction starts)."""
    kind = str(run_type).lower().rsplit(".", 1)[-1]  # DagRunType.SCHEDULED or "scheduled"
    return _utc(data_interval_end) if kind in INTERVAL_RUN_TYPES and data_interval_end is not None else None


def plan_run(
    run: RunRef,
    committed: Committed | None,
    recorded: RunPlan | None,
    target_time: dt.datetime | None,
    fresh_snapshot: bool = False,
    capture: Capture = Capture.BINLOG,
    columns: tuple[tuple[str, str], ...] | None = None,
) -> RunPlan:
    """Decide what ``run`` does.

    ``target_time`` is the moment the table should reflect: a scheduled or backfill run's data interval end,
    or None for a manual run (the moment its extraction starts). ``capture``: how the table's changes are found,
    from the binlog or by a diff (``capture:``). A diff-mode run reflects the moment it reads the table, which
    comes after a scheduled run's interval end: it cannot read the source as it was. ``columns``: the table's
    columns now, which a diff compares with its version's.
    """
    if recorded is not None and recorded.mode != Mode.NOTHING:
        if recorded.output_version is not None:
            # Its first attempt committed: the table is already what this run makes of it. A re-run redoes only
            # what did not commit; the source's changes since go to the next run.
            return RunPlan(run=run, mode=Mode.NOTHING,
                           reason=f"already committed by this run: version {recorded.output_version} reflects the "
                                  f"source as of {_iso(recorded.as_of)}; the table is left as it is")
        return recorded.model_copy(update={"reason": f"a re-run: it repeats what it planned ({recorded.reason})"})
    if committed is None:
        return RunPlan(run=run, mode=Mode.SNAPSHOT, reason="the table has no committed version yet: initial load")
    if fresh_snapshot:
        return RunPlan(run=run, mode=Mode.SNAPSHOT,
                       reason="a fresh snapshot was asked for (the fresh_snapshot or fresh_snapshot_tables parameter)")
    target_time = _utc(target_time)
    if target_time is not None and committed.as_of >= target_time:
        return RunPlan(run=run, mode=Mode.NOTHING,
                       reason=f"already committed: version {committed.version} reflects the source as of "
                       f"{committed.as_of.isoformat()}, not before this run's interval end {target_time.isoformat()}; "
                       "the table is left as it is")
    if capture == Capture.DIFF:
        if committed.digests is None:
            return RunPlan(run=run, mode=Mode.SNAPSHOT, reason=f"version {committed.version} was read from the binlog "
                           "and has no row digests to compare the source with (capture: diff): a snapshot reads them")
        if columns is not None and committed.columns is not None and tuple(committed.columns) != tuple(columns):
            # Every row's digest changes with the columns (and with them the identity of a row of a table with no
            # key): a diff would read every row again, a snapshot does it in one read. ``start_columns`` says what
            # the columns were, for the table's policy to take the change on or refuse it before the read.
            return RunPlan(run=run, mode=Mode.SNAPSHOT,
                           reason=f"the columns changed since version {committed.version}: every row's digest "
                           "changes with them, so the table is read whole by a snapshot",
                           start_columns=committed.columns)
        return RunPlan(run=run, mode=Mode.DIFF, reason=f"the source compared with version {committed.version} (as of "
                       f"{committed.as_of.isoformat()}) by its rows' digests", input_version=committed.version,
                       start_columns=committed.columns)
    if committed.watermark is None:
        return RunPlan(run=run, mode=Mode.SNAPSHOT, reason=f"version {committed.version} was read without the binlog "
                       "(capture: diff) and has no watermark to read it from: a snapshot takes one")
    return RunPlan(run=run, mode=Mode.INCREMENTAL,
                   reason=f"changes after version {committed.version} (as of {committed.as_of.isoformat()})",
                   input_version=committed.version, start=committed.watermark, stop_before=target_time,
                   start_columns=committed.columns)


class VersionInfo(Model):
    """A version's file (``VERSION_FILE`` in its directory): what the metastore points at, as the merge wrote it."""

    version: int
    watermark: Watermark | None  # None: read without the binlog (diff mode)
    run: RunRef
    input_version: int | None = None
    datetime_zone: str = "UTC"  # the zone its DATETIME values were written for (``hive.time_zone``)
    as_of: Instant | None = None
    mode: Mode | None = None
    source: str | None = None  # schema.table
    rows: int | None = None
    source_columns: Columns = ()
    # A partitioned table's layout, and every partition the version has: its value as the metastore writes it, and
    # its location (in this version's directory or an older one's). Verify reads a version by them, and an old
    # version directory goes only once no kept version names a location in it.
    partitioning: Partitioning | None = None
    partitions: tuple[tuple[str, str], ...] = ()
    # Its changelog partition (``core.changelog``), written before the commit and added to the metastore after.
    changelog: ChangelogCommit | None = None
    # The daily snapshots' days and the version each is, as this version leaves them (``core.history``), and the
    # days it dropped past their retention: each version a day names is kept on disk.
    snapshot_days: tuple[tuple[str, int], ...] = ()
    dropped_days: tuple[str, ...] = ()
    history: HistoryCommit | None = None  # its commit to the SCD2 history table (``core.history``)

    @model_validator(mode="before")
    @classmethod
    def _zone(cls, data: Any) -> Any:
        # Version files written before the zone was recorded hold null: their DATETIMEs were written for UTC.
        if isinstance(data, dict) and data.get("datetime_zone") is None:
            data = {**data, "datetime_zone": "UTC"}
        return data


@dataclass(frozen=True)
class Origin:
    """What the merge does: ``load`` (no origin), ``merge`` onto version ``version``, or ``skip``."""

    action: Action
    version: int | None
    reason: str


def _later(a: Watermark | None, b: Watermark | None) -> bool:
    # A version of another server is never later than a snapshot: the snapshot is of the server that is the
    # source now, and GTID sequence numbers of two servers whose histories parted do not order them. A version
    # read without the binlog (diff mode) has no position to order.
    return a is not None and b is not None and a.same_server(b) and a > b


def choose_origin(current: VersionInfo | None, plan: RunPlan, end: Watermark | None) -> Origin:
    """Pick the version the merge starts from, given the version the metastore points at now.

    Changes over a range [start, end] applied onto a version that reflects any position p with
    start <= p <= end give the table as of end: a change replayed onto a row that already has it is harmless.
    That rule decides every case below. A diff's changes are the difference between its input version and the
    source: they apply onto that version alone, whatever the metastore points at (a later version of a run that
    died before its ledger was written is left behind).
    """
    if plan.mode == Mode.SNAPSHOT:
        if current is not None and _later(current.watermark, end):
            return Origin(Action.SKIP, None, f"the table is at version {current.version}, which reflects "
                          f"{current.watermark}, later than this snapshot's {end}; the table is left as it is")
        return Origin(Action.LOAD, None, "a snapshot replaces the table")
    if current is None:
        raise LedgerConflict(
            f"The ledger says version {plan.input_version} is committed, but the Hive table does not exist: it was "
            "dropped outside this pipeline. Trigger a run with fresh_snapshot=true to load it again."
        )
    if plan.mode in (Mode.DIFF, Mode.HEAL):
        return Origin(Action.MERGE, plan.input_version,
                      f"onto version {plan.input_version}, which the diff compared the source with")
    if current.version == plan.input_version:
        return Origin(Action.MERGE, current.version, f"onto version {current.version}, as planned")
    if current.run == plan.run and current.input_version == plan.input_version:
        return Origin(Action.MERGE, plan.input_version,
                      f"a re-run: onto version {plan.input_version} again, as recorded (version {current.version} "
                      "is this run's earlier result)")
    if current.watermark is None or end is None:
        raise LedgerConflict(
            f"The table is at version {current.version}, read without the binlog (capture: diff), and this run "
            f"reads the binlog from version {plan.input_version}: the two do not order. Trigger a run with "
            "fresh_snapshot=true.")
    if plan.start is not None and plan.start <= current.watermark <= end:
        return Origin(Action.MERGE, current.version, f"onto version {current.version} ({current.watermark}), which is "
                      f"inside this run's range; the overlap is replayed harmlessly")
    if current.watermark > end:
        return Origin(Action.SKIP, None,
                      f"the table is at version {current.version}, which reflects {current.watermark}, later than "
                      f"this run's end {end}; the table is left as it is")
    raise LedgerConflict(
        f"The table is at version {current.version} ({current.watermark}), before this run's start {plan.start}: "
        "merging would leave out the changes in between. The table was changed outside this pipeline; trigger a "
        "run with fresh_snapshot=true."
    )


class Lock(Model):
    """The run updating a table, since when, and its lease: until when it counts as alive without a renewal.

    Its file holds the run's fields at the top level (``dag_id``, ``run_id``), beside the others."""

    run: RunRef
    since: str | None
    renewed: Instant | None = None
    lease_until: Instant | None = None
    owner: Owner | None = None

    @model_validator(mode="before")
    @classmethod
    def _run_inside(cls, data: Any) -> Any:
        if isinstance(data, dict) and "run" not in data and "dag_id" in data:
            data = {**data, "run": {"dag_id": data.get("dag_id"), "run_id": data.get("run_id")}}
            data.pop("dag_id"), data.pop("run_id", None)
        return data

    @model_serializer(mode="wrap")
    def _run_outside(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        return {**data.pop("run"), **data}

    @classmethod
    def taken(cls, run: RunRef, now: dt.datetime, lease: dt.timedelta | None, owner: Owner | None) -> Lock:
        return cls(run=run, since=_iso(now), renewed=now, lease_until=now + lease if lease else None, owner=owner)

    def renewed_by(self, now: dt.datetime, lease: dt.timedelta | None, owner: Owner | None) -> Lock:
        return self.model_copy(update={"renewed": now, "lease_until": now + lease if lease else None,
                                       "owner": owner or self.owner})

    def expired(self, now: dt.datetime) -> bool:
        """Whether the lease has ended unrenewed. A lock without a lease (written before leases) never expires."""
        return self.lease_until is not None and now >= self.lease_until

    def alive(self, now: dt.datetime, run_running: bool) -> bool:
        """Whether the lock still holds the table: its run is running (queued or running, as Airflow says:
        ``run_running``) and its lease lasts. A lock whose run has ended is stale at once, whatever its lease."""
        return run_running and not self.expired(now)

    def liveness(self, now: dt.datetime) -> str:
        by = (f"task {self.owner.task} (process {self.owner.pid} on {self.owner.host})" if self.owner
              else "a task of it")
        if self.renewed is None:
            return "its run is running (the lock has no lease)"
        left = "ended" if self.expired(now) else "lasts"
        return (f"{by} renewed the lock at {_iso(self.renewed)}; its lease {left} until {_iso(self.lease_until)}"
                if self.lease_until else f"{by} took it at {_iso(self.renewed)}, with no lease")

    def lease_hint(self) -> str:
        return f", or wait until {_iso(self.lease_until)}, when it is taken over unless renewed" \
            if self.lease_until else ""



class FileStore(Protocol):
    """The files the ledger is kept in (``airflow_cdc_provider.storage.WorkStore``): whole-file reads and writes
    and the two atomic operations its lock needs."""

    def read_text(self, location: str) -> str | None: ...
    def write_text(self, location: str, text: str) -> None: ...
    def create_text(self, location: str, text: str) -> bool: ...
    def swap_text(self, location: str, expected: str, text: str) -> bool: ...
    def delete(self, location: str) -> None: ...


@dataclass
class Ledger:
    """One table's ledger (``TableDir``'s ``ledger`` files), kept in ``store``."""

    table: TableDir
    store: FileStore
    log: Callable[[str], None] = field(default=lambda message: None, repr=False)

    def _read(self, location: str, model: type[M]) -> M | None:
        text = self.store.read_text(location)
        return model.from_text(text) if text else None

    def _write(self, value: Model, location: str) -> None:
        self.store.write_text(location, value.to_text())

    def committed(self) -> Committed | None:
        return self._read(self.table.committed, Committed)

    def record_commit(self, committed: Committed) -> None:
        self._write(committed, self.table.committed)

    def commit(self, plan: RunPlan, committed: Committed) -> None:
        """Record ``plan``'s commit: the table's version and watermark, then the run's plan filled in.

        A crash between the two leaves a plan without its output: a re-run merges again, which is harmless.
        """
        self.record_commit(committed)
        self.save_run_plan(plan.model_copy(update={"end": committed.watermark, "output_version": committed.version,
                                                   "as_of": committed.as_of}))

    def run_plan(self, run: RunRef) -> RunPlan | None:
        return self._read(self.table.run_plan(run.key), RunPlan)

    def save_run_plan(self, plan: RunPlan) -> None:
        self._write(plan, self.table.run_plan(plan.run.key))

    def holder(self) -> RunRef | None:
        lock = self.lock()
        return lock.run if lock else None

    def lock(self) -> Lock | None:
        return self._read(self.table.lock, Lock)

    def acquire(self, run: RunRef, is_running: Callable[[RunRef], bool], now: dt.datetime,
                lease: dt.timedelta | None = None, owner: Owner | None = None,
                look: Callable[[Owner], HolderSeen | None] | None = None) -> None:
        """Make ``run`` the one run updating the table, or raise TableBusy and change nothing.

        The lock is held for ``lease`` (None: until released), renewed by each task of the run while it works
        (``renew``). A lock is taken over when its run has ended (it failed, or was marked failed), or when no
        task of it has renewed it within its lease (its process was killed: its run may stay "running" for
        good), or at once when its task's process is on this host (``owner`` is the one asking) and ``look``
        shows it gone (``core.holder``). Both steps are atomic on every store (see
        ``airflow_cdc_provider.storage``): of two runs at once, one wins.
        """
        lock = self.table.lock
        now = _instant(now)
        body = Lock.taken(run, now, lease, owner).to_text()
        for _ in range(3):
            if self.store.create_text(lock, body):
                return
            text = self.store.read_text(lock)
            if text is None:
                continue  # released between the two calls
            held = Lock.from_text(text)
            if held.run == run:
                self.renew(run, now, lease, owner)  # a retry or a re-run of the run that holds it
                return
            running = is_running(held.run)
            alive, gone = held.alive(now, running), None
            if alive and look is not None and held.owner is not None and same_pid_space(held.owner, owner):
                gone = holder_gone(held.owner, owner, look(held.owner))
            if alive and gone is None:
                raise TableBusy(
                    f"The table is being updated by {held.run} (since {held.since}), which looks alive: "
                    f"{held.liveness(now)}. Only one run at a time may update a table; this run changed nothing. "
                    f"Run it again once that run has finished. If that run is dead, mark it failed in the UI (its "
                    f"lock is then taken over){held.lease_hint()}, or delete {lock} by hand once you are sure."
                )
            if self.store.swap_text(lock, text, body):  # only one taker can replace the stale lock
                why = ("its run is not running any more" if not running else gone if gone
                       else f"its lease ended ({held.liveness(now)})")
                self.log(f"Took over the lock left by {held.run}: {why}.")
                return
        raise TableBusy("Could not take the table's lock: other runs keep taking it. Nothing was changed.")

    def renew(self, run: RunRef, now: dt.datetime, lease: dt.timedelta | None, owner: Owner | None = None) -> bool:
        """Extend ``run``'s lease from ``now``; False (and nothing changed) when another run holds the lock."""
        lock = self.table.lock
        for _ in range(3):
            text = self.store.read_text(lock)
            if text is None:
                return False
            held = Lock.from_text(text)
            if held.run != run:
                return False
            renewed = held.renewed_by(_instant(now), lease, owner)
            if self.store.swap_text(lock, text, renewed.to_text()):
                return True
        return False

    def release(self, run: RunRef) -> bool:
        if self.holder() == run:
            self.store.delete(self.table.lock)
            return True
        return False
