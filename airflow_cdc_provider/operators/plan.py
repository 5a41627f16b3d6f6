"""The plan task: take the lock of every table of the run, decide what the run does to each, and record it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.config import RunConfig, SourceConfig, WorkConfig
from airflow_cdc_provider.core.contract import TABLES_KEY, CapturedTable, CheckResult
from airflow_cdc_provider.core.holder import Owner
from airflow_cdc_provider.core.ledger import Ledger, RunRef, run_target
from airflow_cdc_provider.core.planning import fresh_snapshot_of, take_locks
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.reread import reread_conditions
from airflow_cdc_provider.core.status import SourceTables
from airflow_cdc_provider.core.workdir import SourceDir, task_group
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.hooks.processes import look
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.lease import hand_over, task_owner
from airflow_cdc_provider.operators.params import parse_flag
from airflow_cdc_provider.operators.source import ReadsSource
from airflow_cdc_provider.stages.plan_tables import PlanAsk, plan_tables
from airflow_cdc_provider.stages.reread import validate_where


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
            ask = PlanAsk(target=run_target(dag_run.run_type, dag_run.data_interval_end),
                          fresh=parse_flag(self.fresh_snapshot, "fresh_snapshot"), reload=reload,
                          repair=parse_flag(self.repair, "repair"), conditions=conditions)
            catalog = SourceDir.of_task(self.work.dir, self.dag_id, self.task_id).catalog
            plan = plan_tables(run, check, tables, ledgers, store, ask, self.run, self._source_hook, catalog,
                               self.log, self.work.dir, self.work.conn_id)
            # The plan's tables in short, for the status command and the tables page (``core.status``).
            context["ti"].xcom_push(key=TABLES_KEY,
                                    value=SourceTables.of(self.dag_id, task_group(self.task_id), plan).to_xcom())
            return plan.to_xcom()
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
