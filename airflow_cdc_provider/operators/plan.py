"""The plan task: take the lock of every table of the run, decide what the run does to each, and record it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.catalog import StoredCatalog
from airflow_cdc_provider.core.config import RunConfig, SourceConfig, WorkConfig
from airflow_cdc_provider.core.contract import CapturedTable, CheckResult, Reread, SourcePlan, TablePlan
from airflow_cdc_provider.core.holder import Owner
from airflow_cdc_provider.core.ledger import Committed, Ledger, RunPlan, RunRef, plan_run, run_target
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.planning import fresh_snapshot_of, may_snapshot_instead, snapshots_instead, take_locks
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.reread import read_whole_by_snapshot, reread_conditions, reread_for
from airflow_cdc_provider.core.resume import read_positions
from airflow_cdc_provider.core.workdir import SourceDir, TableDir
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.hooks.processes import look
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.lease import hand_over, task_owner
from airflow_cdc_provider.operators.params import parse_flag
from airflow_cdc_provider.operators.source import ReadsSource
from airflow_cdc_provider.stages.reread import validate_where
from airflow_cdc_provider.stages.verify import pending_repair
from airflow_cdc_provider.storage import WorkStore


class CdcPlanOperator(ReadsSource, BaseOperator):
    """Lock each table of the run, plan what the run does to it, and record the plan in its ledger.

    - A table's first run, or one with ``fresh_snapshot``, loads a snapshot.
    - A scheduled or backfill run reads the binlog from each table's committed watermark to its data interval
      end; a manual run to the moment its extraction starts.
    - A table whose committed version already reflects this run's interval end is left as it is.
    - A re-run (a cleared run) repeats what it planned for the tables it did not commit, and leaves the ones it
      committed.
    - While another run holds one of the tables, this run fails and changes nothing (the locks are taken in
      one order, so two runs never end up holding half each). A holder counts as alive while its run is
      running and its lease is renewed (``operators.lease``); a dead one's lock is taken over, at once when the
      process that held it is on this host and gone (``core.holder``).

    Returns (XCom) a ``SourcePlan``.

    :param check: the check task's ``CheckResult`` (templated: pass ``check_task.output``).
    :param source: the configuration's ``source:`` (``SourceConfig``): the connection of the capture user and its
        time limits (asked only when an ``on_…`` option is ``snapshot``).
    :param work: the configuration's ``work:`` (``WorkConfig``): the base directory of run files and ledgers
        (shared by the workers), and its connection.
    :param run: the configuration's ``run:`` (``RunConfig``): the lock lease; ``on_purged_binlog`` (``fail``: a
        table whose binlog from its watermark was purged fails in the extraction, naming the file; ``snapshot``:
        it takes a fresh snapshot in this run, with a warning; ``heal``: the heal task brings it level);
        ``on_server_change`` (``fail``: a table whose watermark was taken on another server, and cannot be found on
        this one by its GTID position, fails in the extraction, naming both servers; ``snapshot``: it takes a
        fresh snapshot in this run, with a warning); ``allow_reread``, whether a run may be triggered with
        ``reread`` at all (off by default): a run asked for it while it is off is refused before any lock is
        taken.
    :param fresh_snapshot: take a fresh snapshot of every table even though a version is committed (templated).
    :param fresh_snapshot_tables: the tables (``schema.table``) to take a fresh snapshot of, the others going on as
        they would: ``["shop.orders"]`` (templated: the ``fresh_snapshot_tables`` parameter). A name that is not one
        of the run's tables is refused before any lock is taken.
    :param repair: read again the buckets the tables' last verify found different (templated: the ``repair``
        parameter, or ``verify: repair:``).
    :param reread: tables to read again, each with a condition (as after WHERE; empty for the whole table), as
        the ``reread`` parameter gives them: ``{"shop.orders": "id BETWEEN 10 AND 20"}`` (templated). Only plain
        conditions on the table's own columns are accepted (``core.condition``); the SQL sent is the provider's.
    """

    template_fields = ("check", "fresh_snapshot", "fresh_snapshot_tables", "repair", "reread")

    def __init__(self, *, check: Any, source: SourceConfig, work: WorkConfig, run: RunConfig,
                 fresh_snapshot: Any = False, fresh_snapshot_tables: Any = None, repair: Any = False,
                 reread: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check, self.source, self.work, self.run = check, source, work, run
        self.fresh_snapshot, self.fresh_snapshot_tables = fresh_snapshot, fresh_snapshot_tables
        self.repair, self.reread = repair, reread

    @final_on_cdc_error  # a busy table, a bad parameter: a retry would be refused the same way
    def execute(self, context: Any) -> dict[str, Any]:
        check = CheckResult.model_validate(self.check)
        dag_run = context["dag_run"]
        run = RunRef(dag_id=dag_run.dag_id, run_id=dag_run.run_id)
        owner = task_owner(context, self.task_id)
        tables = sorted(check.tables, key=lambda t: t.ledger_id)
        conditions = self._conditions(tables)  # checked before any lock is taken: a bad one changes nothing
        reload = fresh_snapshot_of(self.fresh_snapshot_tables, tables)
        store = work_store(self.work.dir, self.work.conn_id)
        ledgers = {t.ledger_id: Ledger(t.table_dir(self.work.dir), store, log=self.log.warning) for t in tables}
        taken = self._lock(context, run, owner, tables, ledgers)
        failpoint("plan.locked")
        try:  # the locks are handed over however planning ends: the run goes on in its next tasks
            target = run_target(dag_run.run_type, dag_run.data_interval_end)
            fresh = parse_flag(self.fresh_snapshot, "fresh_snapshot")
            committed = {name: ledger.committed() for name, ledger in ledgers.items()}
            by_name = {t.ledger_id: t for t in tables}
            plans = {name: plan_run(run, committed[name], ledger.run_plan(run), target, fresh or name in reload,
                                    by_name[name].capture,
                                    by_name[name].columns)
                     for name, ledger in ledgers.items()}
            plans.update(self._snapshots_instead(run, plans))
            planned = [self._record(run, table, ledgers[table.ledger_id], plans[table.ledger_id],
                                    committed[table.ledger_id], conditions.get(table.source), store)
                       for table in tables]
            # Kept, so that the next run can tell which tables are gone.
            store.write(SourceDir.of_task(self.work.dir, self.dag_id, self.task_id).catalog,
                        StoredCatalog(tables={t.source: t.hive_table for t in check.tables}))
            result = SourcePlan(run=run, tables=tuple(planned), skipped=check.skipped, gone=check.gone)
            self.log.info("%d tables: %d by snapshot, %d from the binlog, %d by a diff, %d left as they are; %d left "
                          "out, %d gone", len(planned), len(result.snapshots), len(result.incrementals),
                          len(result.diffs), len(result.of_mode(Mode.NOTHING)), len(check.skipped), len(check.gone))
            return result.to_xcom()
        finally:
            hand_over(taken, run, self.run.lock_lease_seconds, owner, self.log)

    def _lock(self, context: Any, run: RunRef, owner: Owner, tables: list[CapturedTable],
              ledgers: dict[str, Ledger]) -> list[Ledger]:
        """Take every table's lock for the run, or none (``core.planning.take_locks``). A holder counts as alive
        while Airflow says its run is queued or running (and its lease lasts: ``Ledger.acquire``)."""
        ti = context["ti"]
        now = dt.datetime.now(dt.UTC)
        lease = dt.timedelta(seconds=self.run.lock_lease_seconds)

        def is_running(holder: RunRef) -> bool:
            try:
                state = ti.get_dagrun_state(dag_id=holder.dag_id, run_id=holder.run_id)
            except Exception as exc:  # the run was deleted: it is not running
                self.log.info("Could not read the state of %s (%s): taken as not running", holder, exc)
                return False
            return str(state).lower().rsplit(".", 1)[-1] in ("queued", "running")

        return take_locks(tables, ledgers, lambda ledger: ledger.acquire(run, is_running, now, lease, owner, look),
                          lambda ledger: ledger.release(run))

    def _record(self, run: RunRef, table: CapturedTable, ledger: Ledger, plan: RunPlan, committed: Committed | None,
                where: str | None, store: WorkStore) -> TablePlan:
        """Say the table's plan, record it in its ledger (a table left as it is is let go at once), and add what
        the run reads of it again."""
        if plan.warning:
            self.log.warning("%s → %s: %s", table.source, table.hive_table, plan.warning)
        self.log.info("Plan for %s → %s: %s (%s)", table.source, table.hive_table, plan.mode, plan.reason)
        if plan.mode == Mode.NOTHING:
            ledger.release(run)
        else:
            ledger.save_run_plan(plan)
        reread = self._reread(table, plan, ledger.table, where, store)
        return TablePlan(table=table, plan=plan, table_dir=ledger.table, committed=committed, reread=reread)

    def _conditions(self, tables: list[CapturedTable]) -> dict[str, str]:
        """The ``reread`` parameter: each table it names (one of this run's) and its condition, allowed by the
        configuration and parsed into a plain condition on the table's columns (``core.reread.reread_conditions``),
        then the statement written from it planned by the server in a read-only transaction."""
        conditions = reread_conditions(self.reread, tables, self.run.allow_reread)
        if not any(conditions.values()):
            return conditions
        known = {t.source: t for t in tables}
        hook = self._source_hook()
        for source, where in conditions.items():
            if where:
                table = known[source]
                with hook.streaming_reads() as reads:
                    validate_where(reads, RawHeader(source, table.columns, table.key), where)
        return conditions

    def _reread(self, table: CapturedTable, plan: RunPlan, table_dir: TableDir, where: str | None,
                store: WorkStore) -> Reread | None:
        """What the run reads of the table again (``core.reread.reread_for``): the rows the reread parameter
        selects, the buckets its last verify found different (with the repair parameter or ``verify: repair:``),
        or nothing."""
        repair = pending_repair(store, table_dir) if parse_flag(self.repair, "repair") else None
        if read_whole_by_snapshot(plan.mode, repair, where):
            self.log.info("%s is read whole by a snapshot in this run: no rows are read again apart", table.source)
        reread = reread_for(plan.mode, repair, where)
        if reread is not None:
            self.log.info("%s: read again in this run: %s", table.source, reread.reason)
        return reread

    def _snapshots_instead(self, run: RunRef, plans: dict[str, RunPlan]) -> dict[str, RunPlan]:
        """``on_purged_binlog: snapshot`` / ``on_server_change: snapshot`` (``core.planning.snapshots_instead``):
        the server is asked where each incremental table's binlog goes on only when an option may act on it."""
        if not may_snapshot_instead(self.run.on_purged_binlog, self.run.on_server_change):
            return {}
        watermarks = {name: plan.resume_from for name, plan in plans.items() if plan.mode == Mode.INCREMENTAL}
        if not watermarks:
            return {}
        facts = self._source_hook().binlog_facts(list(watermarks.values()))
        found = dict(zip(watermarks, read_positions(list(watermarks.values()), facts)))
        return snapshots_instead(run, plans, found, self.run.on_purged_binlog, self.run.on_server_change)
