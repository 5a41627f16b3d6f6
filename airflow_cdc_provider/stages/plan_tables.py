"""The plan stage: what a run does to each of its tables, once their locks are taken.

Each table's plan is decided (``core.ledger.plan_run``; a table whose binlog cannot be followed takes a fresh
snapshot instead where the configuration says so, ``core.planning.snapshots_instead``), said in the task's log,
and recorded in its ledger (a table left as it is is let go at once), with what the run reads of it again
(``core.reread``). The tables the check found are kept, so that the next run can tell which are gone. The plan
task keeps what belongs to Airflow: the trigger parameters, the locks and their hand-over to the run's next tasks.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from airflow_cdc_provider.core.catalog import StoredCatalog
from airflow_cdc_provider.core.config import RunConfig
from airflow_cdc_provider.core.contract import (
    CapturedTable,
    CheckResult,
    Reread,
    SourcePlan,
    StoppedTable,
    TablePlan,
)
from airflow_cdc_provider.core.ledger import Ledger, RunPlan, RunRef, plan_run
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.planning import may_snapshot_instead, snapshots_instead
from airflow_cdc_provider.core.reread import read_whole_by_snapshot, reread_for
from airflow_cdc_provider.core.resume import BinlogFacts, read_positions
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.stages.task_log import TaskLog
from airflow_cdc_provider.stages.verify import pending_repair
from airflow_cdc_provider.storage import WorkStore


class PlanSource(Protocol):
    """What planning asks the source (``MySqlSourceHook``): where each table's binlog goes on, asked only when an
    ``on_…: snapshot`` option may act on it."""

    def binlog_facts(self, watermarks: Sequence[Watermark] = ()) -> BinlogFacts: ...


@dataclass(frozen=True)
class PlanAsk:
    """What the run asks of its tables, read from how it was made and its trigger parameters by the plan task."""

    target: dt.datetime | None  # the moment its tables should reflect (``core.ledger.run_target``)
    fresh: bool  # a fresh snapshot of every table
    reload: frozenset[str]  # the tables (ledger ids) to take a fresh snapshot of
    repair: bool  # read again the buckets the tables' last verify found different
    conditions: Mapping[str, str]  # the tables (sources) to read again, each with its checked condition


def plan_tables(run: RunRef, check: CheckResult, tables: Sequence[CapturedTable], ledgers: Mapping[str, Ledger],
                store: WorkStore, ask: PlanAsk, settings: RunConfig, source: Callable[[], PlanSource], catalog: str,
                log: TaskLog, work_dir: str, work_conn_id: str | None = None) -> SourcePlan:
    """The run's plan of ``tables`` (sorted by ledger id, each's lock held in ``ledgers``), recorded; ``catalog``
    is where the tables the check found are kept; ``work_dir`` and ``work_conn_id`` the tables' work directory and
    its connection, recorded."""
    committed = {name: ledger.committed() for name, ledger in ledgers.items()}
    by_name = {t.ledger_id: t for t in tables}
    plans = {name: plan_run(run, committed[name], ledger.run_plan(run), ask.target,
                            ask.fresh or name in ask.reload, by_name[name].capture, by_name[name].columns)
             for name, ledger in ledgers.items()}
    plans.update(_snapshots_instead(run, plans, settings, source))
    planned = []
    for table in tables:
        ledger, plan = ledgers[table.ledger_id], plans[table.ledger_id]
        if plan.warning:
            log.warning("%s → %s: %s", table.source, table.hive_table, plan.warning)
        log.info("Plan for %s → %s: %s (%s)", table.source, table.hive_table, plan.mode, plan.reason)
        if plan.mode == Mode.NOTHING:
            ledger.release(run)
        else:
            ledger.save_run_plan(plan)
        planned.append(TablePlan(table=table, plan=plan, table_dir=ledger.table, committed=committed[table.ledger_id],
                                 reread=_reread(table, plan, ledger, ask, store, log)))
    # Kept, so that the next run can tell which tables are gone.
    store.write(catalog, StoredCatalog(tables={t.source: t.hive_table for t in check.tables}))
    # The tables the check refused: the merge fails each with its reason, and the status reads their work state
    # where their ledger is, as the others'.
    stopped = tuple(StoppedTable(table=refused, table_dir=refused.table_dir(work_dir)) for refused in check.refused)
    result = SourcePlan(run=run, tables=tuple(planned), skipped=check.skipped, gone=check.gone, stopped=stopped,
                        work_conn_id=work_conn_id)
    log.info("%d tables: %d by snapshot, %d from the binlog, %d by a diff, %d left as they are; %d stopped, %d left "
             "out, %d gone", len(planned), len(result.snapshots), len(result.incrementals), len(result.diffs),
             len(result.of_mode(Mode.NOTHING)), len(stopped), len(check.skipped), len(check.gone))
    return result


def _reread(table: CapturedTable, plan: RunPlan, ledger: Ledger, ask: PlanAsk, store: WorkStore,
            log: TaskLog) -> Reread | None:
    """What the run reads of the table again (``core.reread.reread_for``): the rows the reread parameter
    selects, the buckets its last verify found different (with the repair parameter or ``verify: repair:``),
    or nothing."""
    repair = pending_repair(store, ledger.table) if ask.repair else None
    where = ask.conditions.get(table.source)
    if read_whole_by_snapshot(plan.mode, repair, where):
        log.info("%s is read whole by a snapshot in this run: no rows are read again apart", table.source)
    reread = reread_for(plan.mode, repair, where)
    if reread is not None:
        log.info("%s: read again in this run: %s", table.source, reread.reason)
    return reread


def _snapshots_instead(run: RunRef, plans: dict[str, RunPlan], settings: RunConfig,
                       source: Callable[[], PlanSource]) -> dict[str, RunPlan]:
    """``on_purged_binlog: snapshot`` / ``on_server_change: snapshot`` (``core.planning.snapshots_instead``):
    the server is asked where each incremental table's binlog goes on only when an option may act on it."""
    if not may_snapshot_instead(settings.on_purged_binlog, settings.on_server_change):
        return {}
    watermarks = {name: plan.resume_from for name, plan in plans.items() if plan.mode == Mode.INCREMENTAL}
    if not watermarks:
        return {}
    facts = source().binlog_facts(list(watermarks.values()))
    found = dict(zip(watermarks, read_positions(list(watermarks.values()), facts)))
    return snapshots_instead(run, plans, found, settings.on_purged_binlog, settings.on_server_change)
