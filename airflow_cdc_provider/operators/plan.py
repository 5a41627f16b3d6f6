"""The plan task: take the lock of every table of the run, decide what the run does to each, and record it."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.catalog import StoredCatalog
from airflow_cdc_provider.core.config import ConfigError
from airflow_cdc_provider.core.contract import CheckResult, Reread, SourcePlan, TablePlan
from airflow_cdc_provider.core.ledger import (
    INCREMENTAL,
    NOTHING,
    SNAPSHOT,
    Ledger,
    RunPlan,
    RunRef,
    TableBusy,
    plan_run,
    run_target,
)
from airflow_cdc_provider.core.resume import Unreadable, UnreadableKind, read_positions
from airflow_cdc_provider.core.workdir import SourceDir, TableDir
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.hooks.processes import look
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.lease import DEFAULT_LEASE_SECONDS, hand_over, task_owner
from airflow_cdc_provider.operators.params import parse_flag
from airflow_cdc_provider.operators.verify import pending_repair
from airflow_cdc_provider.stages.reread import validate_where


class CdcPlanOperator(BaseOperator):
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
    :param work_dir: the base directory of run files and ledgers (shared by the workers): a path or a URI.
    :param work_conn_id: the connection of an object-store ``work_dir`` (see ``hooks.work_store``).
    :param lock_lease_seconds: how long the run's table locks count as alive unrenewed (see ``operators.lease``).
    :param on_purged_binlog: ``fail`` (a table whose binlog from its watermark was purged fails in the extraction,
        naming the file) or ``snapshot`` (it takes a fresh snapshot in this run, with a warning).
    :param on_server_change: ``fail`` (a table whose watermark was taken on another server, and cannot be found
        on this one by its GTID position, fails in the extraction, naming both servers) or ``snapshot`` (it takes a
        fresh snapshot in this run, with a warning).
    :param mysql_conn_id: Airflow connection of the capture user (asked only when an ``on_…`` option is
        ``snapshot``).
    :param fresh_snapshot: take a fresh snapshot of every table even though a version is committed (templated).
    :param repair: read again the buckets the tables' last verify found different (templated: the ``repair``
        parameter, or ``verify: repair:``).
    :param reread: tables to read again, each with a condition (as after WHERE; empty for the whole table), as
        the ``reread`` parameter gives them: ``{"shop.orders": "id BETWEEN 10 AND 20"}`` (templated).
    """

    template_fields = ("check", "fresh_snapshot", "repair", "reread")

    def __init__(self, *, check: Any, work_dir: str, fresh_snapshot: Any = False, work_conn_id: str | None = None,
                 lock_lease_seconds: int | None = DEFAULT_LEASE_SECONDS, on_purged_binlog: str = "fail",
                 on_server_change: str = "fail", mysql_conn_id: str = MySqlSourceHook.default_conn_name,
                 repair: Any = False, reread: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check, self.work_dir, self.fresh_snapshot = check, work_dir, fresh_snapshot
        self.work_conn_id, self.lock_lease_seconds = work_conn_id, lock_lease_seconds
        self.on_purged_binlog, self.on_server_change = on_purged_binlog, on_server_change
        self.mysql_conn_id, self.repair, self.reread = mysql_conn_id, repair, reread

    @final_on_cdc_error  # a busy table, a bad parameter: a retry would be refused the same way
    def execute(self, context: Any) -> dict[str, Any]:
        check = CheckResult.model_validate(self.check)
        dag_run, ti = context["dag_run"], context["ti"]
        run = RunRef(dag_id=dag_run.dag_id, run_id=dag_run.run_id)
        now = dt.datetime.now(dt.UTC)
        lease = dt.timedelta(seconds=self.lock_lease_seconds) if self.lock_lease_seconds else None
        owner = task_owner(context, self.task_id)

        def is_running(holder: RunRef) -> bool:
            try:
                state = ti.get_dagrun_state(dag_id=holder.dag_id, run_id=holder.run_id)
            except Exception as exc:  # the run was deleted: it is not running
                self.log.info("Could not read the state of %s (%s): taken as not running", holder, exc)
                return False
            return str(state).lower().rsplit(".", 1)[-1] in ("queued", "running")

        tables = sorted(check.tables, key=lambda t: t.hive_table)
        conditions = self._conditions(tables)  # checked before any lock is taken: a bad one changes nothing
        store = work_store(self.work_dir, self.work_conn_id)
        ledgers = {t.hive_table: Ledger(TableDir(work_dir=self.work_dir, hive_table=t.hive_table), store,
                                        log=self.log.warning)
                   for t in tables}
        taken: list[Ledger] = []
        try:
            for table in tables:
                ledger = ledgers[table.hive_table]
                try:
                    ledger.acquire(run, is_running, now, lease, owner, look)
                except TableBusy as busy:
                    raise TableBusy(f"{table.hive_table} (from {table.source}): {busy}") from None
                taken.append(ledger)
        except BaseException:
            for ledger in taken:  # this run does nothing: it holds no table
                ledger.release(run)
            raise
        failpoint("plan.locked")
        try:  # the locks are handed over however planning ends: the run goes on in its next tasks
            target = run_target(dag_run.run_type, dag_run.data_interval_end)
            fresh = parse_flag(self.fresh_snapshot, "fresh_snapshot")
            committed = {t.hive_table: ledgers[t.hive_table].committed() for t in tables}
            plans = {t.hive_table: plan_run(run, committed[t.hive_table], ledgers[t.hive_table].run_plan(run), target,
                                            fresh) for t in tables}
            if "snapshot" in (self.on_purged_binlog, self.on_server_change):
                plans.update(self._snapshots_instead(run, tables, plans))
            planned = []
            for table in tables:
                ledger, plan = ledgers[table.hive_table], plans[table.hive_table]
                if plan.warning:
                    self.log.warning("%s → %s: %s", table.source, table.hive_table, plan.warning)
                self.log.info("Plan for %s → %s: %s (%s)", table.source, table.hive_table, plan.mode, plan.reason)
                if plan.mode == NOTHING:
                    ledger.release(run)
                else:
                    ledger.save_run_plan(plan)
                reread = self._reread(table, plan, ledger.table, conditions.get(table.source), store)
                planned.append(TablePlan(table=table, plan=plan, table_dir=ledger.table,
                                         committed=committed[table.hive_table], reread=reread))
            # Kept, so that the next run can tell which tables are gone.
            store.write(SourceDir.of_task(self.work_dir, self.dag_id, self.task_id).catalog,
                        StoredCatalog(tables={t.source: t.hive_table for t in check.tables}))
            result = SourcePlan(run=run, tables=tuple(planned), skipped=check.skipped, gone=check.gone)
            self.log.info("%d tables: %d by snapshot, %d from the binlog, %d left as they are; %d left out, %d gone",
                          len(planned), len(result.snapshots), len(result.incrementals), len(result.of_mode(NOTHING)),
                          len(check.skipped), len(check.gone))
            return result.to_xcom()
        finally:
            hand_over(taken, run, self.lock_lease_seconds, owner, self.log)

    def _conditions(self, tables: list[Any]) -> dict[str, str]:
        """The ``reread`` parameter: each table it names (one of this run's) and its condition, validated by the
        server in a read-only transaction."""
        asked = self.reread
        if isinstance(asked, str):
            try:
                asked = json.loads(asked) if asked.strip() not in ("", "None") else None
            except ValueError:
                pass  # refused below, as any other form
        if not asked:
            return {}
        example = '{"shop.orders": "id BETWEEN 100 AND 200", "shop.customers": ""}'
        if not isinstance(asked, dict) or not all(isinstance(v, str) or v is None for v in asked.values()):
            raise ConfigError(f"The parameter reread must map tables to conditions, like {example} (an empty "
                              f"condition reads the whole table), got {self.reread!r}. Nothing was changed.")
        known = {t.source: t for t in tables}
        unknown = sorted(set(asked) - set(known))
        if unknown:
            raise ConfigError(f"The parameter reread names {', '.join(unknown)}, which this run does not capture; "
                              f"its tables are {', '.join(sorted(known))}. Nothing was changed.")
        hook = MySqlSourceHook(self.mysql_conn_id)
        conditions = {}
        for source, where in asked.items():
            where = (where or "").strip()
            if where:
                with hook.streaming_reads() as reads:
                    validate_where(reads, known[source].name, where)
            conditions[source] = where
        return conditions

    def _reread(self, table: Any, plan: RunPlan, table_dir: TableDir, where: str | None,
                store: Any) -> Reread | None:
        """What the run reads of the table again: the rows the reread parameter selects, the buckets its last
        verify found different (with the repair parameter or ``verify: repair:``), or nothing."""
        repair = pending_repair(store, table_dir) if parse_flag(self.repair, "repair") else None
        if plan.mode != INCREMENTAL or (repair is None and where is None):
            if plan.mode == SNAPSHOT and (repair is not None or where is not None):
                self.log.info("%s is read whole by a snapshot in this run: no rows are read again apart", table.source)
            return None
        reasons = []
        if repair is not None:
            reasons.append(f"a repair of the {len(repair.which)} buckets that verify found different in version "
                           f"{repair.version}")
        if where is not None:
            reasons.append(f"the reread parameter: {where or 'the whole table'}")
        reread = Reread(buckets=repair.buckets if repair else 0, which=repair.which if repair else (),
                        where=where, reason="; ".join(reasons))
        self.log.info("%s: read again in this run: %s", table.source, reread.reason)
        return reread

    def _snapshots_instead(self, run: RunRef, tables: list[Any], plans: dict[str, RunPlan]) -> dict[str, RunPlan]:
        """``on_purged_binlog: snapshot`` / ``on_server_change: snapshot``: a table that cannot go on from its
        watermark on this server takes a fresh snapshot in this run instead of failing in the extraction."""
        incremental = [t for t in tables if plans[t.hive_table].mode == INCREMENTAL]
        if not incremental:
            return {}
        chosen = {UnreadableKind.PURGED: ("on_purged_binlog", self.on_purged_binlog,
                                          "the binlog from the watermark was purged"),
                  UnreadableKind.SERVER: ("on_server_change", self.on_server_change, "the source is another server"),
                  UnreadableKind.DIVERGED: ("on_server_change", self.on_server_change, "the source is another "
                                            "server, which lacks transactions of the watermark")}
        watermarks = [plans[t.hive_table].resume_from for t in incremental]
        found = read_positions(watermarks, MySqlSourceHook(self.mysql_conn_id).binlog_facts(watermarks))
        replanned = {}
        for table, why in zip(incremental, found):
            if not isinstance(why, Unreadable) or why.kind not in chosen or chosen[why.kind][1] != "snapshot":
                continue
            option, _, reason = chosen[why.kind]
            warning = f"this run takes a fresh snapshot ({option}: snapshot): {why.reason}"
            replanned[table.hive_table] = RunPlan(run=run, mode=SNAPSHOT, reason=f"a fresh snapshot: {reason}",
                                                  warning=warning)
        return replanned
