"""Every table's status, one table's runs and one DAG run's tables: the metadata DB's records (``RunRecordsHook``)
and the tables' work state (their ledgers, locks and verify states, through the work store) read together and
turned into the rows of ``core.status``. Read-only; what the status command prints and the tables page shows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from airflow_cdc_provider.core.contract import OUTCOMES_KEY, VERIFICATION_KEY, TableOutcome, TableVerification
from airflow_cdc_provider.core.ledger import Committed, Lock, RunRef
from airflow_cdc_provider.core.status import (
    Commit,
    PlannedTable,
    RunPoint,
    RunTable,
    RunTables,
    RunTimes,
    TableDetail,
    TableRecords,
    TableStatus,
    table_status,
)
from airflow_cdc_provider.core.verify import VerifyMark, VerifyState
from airflow_cdc_provider.core.workdir import LOCAL_SCHEMES, TableDir, scheme_of
from airflow_cdc_provider.hooks.run_records import (
    Outcomes,
    RunRecordsHook,
    SourceRecord,
    group_task,
)
from airflow_cdc_provider.storage import WorkStore

# How many runs a table's own view goes back.
DETAIL_RUNS = 60
# Object stores answer each read in tens of milliseconds: their tables are read this many at a time.
_READERS = 16


@dataclass(frozen=True)
class WorkState:
    """What a table's work directory holds of it, for its row."""

    committed: Committed | None = None
    lock: Lock | None = None
    verify: VerifyMark | None = None
    repair_pending: bool = False
    unread: str = ""  # why it could not be read


def read_only_store(work_dir: str, conn_id: str | None) -> WorkStore:
    """A store that reads the work directory without making it (the reader may be another host's api-server)."""
    if scheme_of(work_dir) in LOCAL_SCHEMES:
        return WorkStore()
    from airflow_cdc_provider.hooks.work_store import work_store

    return work_store(work_dir, conn_id)


def work_states(tables: Collection[tuple[TableDir, str | None]]) -> list[WorkState]:
    """The work state of each table (its directory, and its work directory's connection), in order."""
    stores: dict[tuple[str, str | None], WorkStore | str] = {}
    for table_dir, conn_id in tables:
        if (table_dir.work_dir, conn_id) not in stores:
            try:
                stores[table_dir.work_dir, conn_id] = read_only_store(table_dir.work_dir, conn_id)
            except Exception as error:  # noqa: BLE001 - shown on the table's row: the rest still read
                stores[table_dir.work_dir, conn_id] = f"{type(error).__name__}: {error}"

    def read(item: tuple[TableDir, str | None]) -> WorkState:
        store = stores[item[0].work_dir, item[1]]
        return _work_state(store, item[0]) if isinstance(store, WorkStore) else WorkState(unread=store)

    if all(isinstance(s, WorkStore) and s.is_local for s in stores.values()):
        return [read(item) for item in tables]
    with ThreadPoolExecutor(_READERS) as pool:
        return list(pool.map(read, tables))


def _work_state(store: WorkStore, table: TableDir) -> WorkState:
    try:
        state = store.read(table.verify_state, VerifyState)
        return WorkState(committed=store.read(table.committed, Committed), lock=store.read(table.lock, Lock),
                         verify=state.last if state is not None else None,
                         repair_pending=store.exists(table.repair))
    except Exception as error:  # noqa: BLE001 - unreadable here (another user's, another host's): said on the row
        return WorkState(unread=f"{type(error).__name__}: {error}")


def table_rows(records: RunRecordsHook, dag_ids: Collection[str] | None, now: dt.datetime,
               max_lag: dt.timedelta) -> list[TableStatus]:
    """The row of every table the sources of ``dag_ids`` (None: every DAG) captured in their latest plan."""
    sources = records.latest_plans(dag_ids)
    keys = [(s.dag_id, s.group) for s in sources]
    latest = {key: found[0] for key, found in records.outcomes(keys, runs=1).items() if found}
    failed = records.failed_before_outcome(keys)
    tables = [(source, table) for source in sources for table in source.tables.tables]
    states = work_states([(table.table_dir, source.tables.work_conn_id) for source, table in tables])
    return rows_of(tables, states, latest, failed, running_holders(records, states), now, max_lag)


def running_holders(records: RunRecordsHook, states: Iterable[WorkState]) -> set[RunRef]:
    """The runs holding the tables' locks that are still queued or running: one read for them all."""
    return records.running(state.lock.run for state in states if state.lock is not None)


def rows_of(tables: Sequence[tuple[SourceRecord, PlannedTable]], states: Sequence[WorkState],
            latest: Mapping[tuple[str, str], Outcomes], failed: Mapping[tuple[str, str], tuple[str, str]],
            running: Collection[RunRef], now: dt.datetime, max_lag: dt.timedelta) -> list[TableStatus]:
    """Each table's row, from its work state, its source's latest outcomes, the task that failed its source's
    latest run before any outcome (each by (dag_id, group)), and the runs holding locks still running."""
    rows = []
    for (source, table), state in zip(tables, states):
        key = (source.dag_id, source.group)
        outcomes = latest.get(key)
        outcome = _outcome_of(outcomes.outcomes, table) if outcomes is not None else None
        rows.append(table_status(_records(table, state, outcome, outcomes.run_id if outcomes else None,
                                          failed.get(key), running), now, max_lag))
    return rows


def _records(table: PlannedTable, state: WorkState, outcome: TableOutcome | None, latest_run: str | None,
             failed: tuple[str, str] | None, running: Collection[RunRef]) -> TableRecords:
    return TableRecords(
        kind=table.kind, committed=state.committed, lock=state.lock,
        lock_run_running=state.lock.run in running if state.lock is not None else None,
        latest=outcome, latest_run=latest_run if outcome is not None else None,
        failed_task=failed[0] if failed else None, failed_run=failed[1] if failed else None,
        verify=state.verify, repair_pending=state.repair_pending, unread=state.unread)


def _outcome_of(outcomes: Iterable[TableOutcome], table: PlannedTable) -> TableOutcome | None:
    return next((o for o in outcomes if o.source == table.kind.source), None)


def table_detail(records: RunRecordsHook, dag_id: str, group: str, source_table: str, now: dt.datetime,
                 max_lag: dt.timedelta, runs: int = DETAIL_RUNS) -> TableDetail | None:
    """One table's row and its latest ``runs`` runs (newest first); None if no plan of the source names it."""
    source = next((s for s in records.latest_plans([dag_id]) if s.group == group), None)
    table = next((t for t in source.tables.tables if t.kind.source == source_table), None) if source else None
    if source is None or table is None:
        return None
    key = (dag_id, group)
    history = records.outcomes([key], runs=runs).get(key, [])
    (state,) = work_states([(table.table_dir, source.tables.work_conn_id)])
    latest = next(((o, found.run_id) for found in history[:1] for o in found.outcomes
                   if o.source == source_table), (None, None))
    row = table_status(_records(table, state, latest[0], latest[1], records.failed_before_outcome([key]).get(key),
                                running_holders(records, [state])), now, max_lag)
    times = records.run_times(dag_id, [found.run_id for found in history], group)
    points = tuple(RunPoint.of(outcome, times.get(found.run_id) or RunTimes(run_id=found.run_id))
                   for found in history for outcome in found.outcomes if outcome.source == source_table)
    commits = tuple(Commit.of(extra, at, run_id, task_id, map_index) for extra, at, run_id, task_id, map_index
                    in records.commits(dag_id, table.kind.hive_table, source_table, runs))
    return TableDetail(status=row, commits=commits, runs=points)


def run_tables(records: RunRecordsHook, dag_id: str, run_id: str) -> RunTables:
    """What one DAG run did to each table of its sources, and what its verify found."""
    outcomes = records.run_values(dag_id, run_id, OUTCOMES_KEY)
    verifications = records.run_values(dag_id, run_id, VERIFICATION_KEY)
    tables = []
    for source in records.plans_of_run(dag_id, run_id):
        times = records.run_times(dag_id, [run_id], source.group).get(run_id) or RunTimes(run_id=run_id)
        given = [TableOutcome.model_validate(o) for o in outcomes.get(group_task(source.group, "merge")) or ()]
        found = {v["source"]: v for v in
                 (verifications.get(group_task(source.group, "verify")) or {}).get("tables", ())}
        for table in source.tables.tables:
            outcome = _outcome_of(given, table)
            verified = found.get(table.kind.source)
            mark = None
            if verified is not None:
                mark = VerifyMark.of(TableVerification.model_validate(verified), source.tables.run,
                                     times.end or times.merge_end or dt.datetime.now(dt.UTC))
            tables.append(RunTable(kind=table.kind,
                                   point=RunPoint.of(outcome, times) if outcome is not None else None, verify=mark))
    state = records.run_times(dag_id, [run_id], "").get(run_id)
    return RunTables(dag_id=dag_id, run_id=run_id, state=state.state if state else None, tables=tuple(tables),
                     failed_tasks=tuple(records.failed_tasks(dag_id, run_id)))
