"""What the runs recorded in Airflow's metadata DB, read for the status command and the tables page: each source's
latest plan (its tables, where their work state is), its runs' outcomes, its runs' and merges' times, and the
tasks that failed a run before it gave any outcome. Read-only.

A source is a task group the factory made (``task_groups``): its plan task is found by its operator, and its merge
and verify tasks are the group's ``merge`` and ``verify``. The values are the tasks' XComs, as the run left them.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from airflow_cdc_provider.core.contract import OUTCOMES_KEY, TABLES_KEY, SourcePlan, TableOutcome
from airflow_cdc_provider.core.ledger import RunRef
from airflow_cdc_provider.core.status import RunTimes, SourceTables
from airflow_cdc_provider.core.workdir import task_group

PLAN_OPERATOR = "CdcPlanOperator"
RETURN_VALUE = "return_value"


def group_task(group: str, task: str) -> str:
    """The task id of ``task`` in the source's group ("" outside any group)."""
    return f"{group}.{task}" if group else task


@dataclass(frozen=True)
class SourceRecord:
    """A source's plan of one run: its DAG, its group, the run that made it, and its tables."""

    dag_id: str
    group: str
    run_id: str
    tables: SourceTables


@dataclass(frozen=True)
class Outcomes:
    """The outcomes one run's merge gave a source's tables."""

    run_id: str
    outcomes: tuple[TableOutcome, ...]


class RunRecordsHook:
    """Reads the provider's records in the metadata DB through ``session`` (the caller's: the api-server's request
    or the CLI's)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def latest_plans(self, dag_ids: Collection[str] | None) -> list[SourceRecord]:
        """The tables of the latest plan of every source of ``dag_ids`` (None: of every DAG)."""
        from airflow.models.taskinstance import TaskInstance
        from airflow.models.xcom import XComModel

        # First which run is each plan task's latest (no value read), then the tables of those plans alone.
        latest = (select(XComModel.dag_id, XComModel.task_id, func.max(XComModel.dag_run_id))
                  .join(TaskInstance, and_(TaskInstance.dag_id == XComModel.dag_id,
                                           TaskInstance.run_id == XComModel.run_id,
                                           TaskInstance.task_id == XComModel.task_id,
                                           TaskInstance.map_index == XComModel.map_index))
                  .where(TaskInstance.operator == PLAN_OPERATOR, XComModel.key == RETURN_VALUE)
                  .group_by(XComModel.dag_id, XComModel.task_id))
        if dag_ids is not None:
            latest = latest.where(XComModel.dag_id.in_(list(dag_ids)))
        plans = {(task_id, dag_run_id): dag_id for dag_id, task_id, dag_run_id in self.session.execute(latest)}
        return sorted(self._tables_of(plans), key=lambda s: (s.dag_id, s.group))

    def plans_of_run(self, dag_id: str, run_id: str) -> list[SourceRecord]:
        """The tables of the plans of every source of one DAG run."""
        from airflow.models.taskinstance import TaskInstance
        from airflow.models.xcom import XComModel

        rows = self.session.execute(
            select(XComModel.task_id, XComModel.dag_run_id)
            .join(TaskInstance, and_(TaskInstance.dag_id == XComModel.dag_id,
                                     TaskInstance.run_id == XComModel.run_id,
                                     TaskInstance.task_id == XComModel.task_id,
                                     TaskInstance.map_index == XComModel.map_index))
            .where(XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == RETURN_VALUE,
                   TaskInstance.operator == PLAN_OPERATOR))
        return sorted(self._tables_of({(task_id, dag_run_id): dag_id for task_id, dag_run_id in rows}),
                      key=lambda s: s.group)

    def _tables_of(self, plans: dict[tuple[str, int], str]) -> list[SourceRecord]:
        """The tables of each plan ((plan task id, dag_run id): dag_id): the plan task's ``tables`` XCom; for a plan
        an earlier version of the provider made, which has none, its whole plan."""
        from airflow.models.xcom import XComModel

        found: dict[tuple[str, int], tuple[str, str, Any]] = {}
        for key in (TABLES_KEY, RETURN_VALUE):
            missing = [plan for plan in plans if plan not in found]
            if not missing:
                break
            for task_id, dag_run_id, run_id, value in self.session.execute(
                    select(XComModel.task_id, XComModel.dag_run_id, XComModel.run_id, XComModel.value).where(
                        XComModel.key == key, XComModel.map_index == -1,
                        XComModel.dag_run_id.in_({dag_run_id for _, dag_run_id in missing}),
                        XComModel.task_id.in_({task_id for task_id, _ in missing}))):
                if (task_id, dag_run_id) in plans and (task_id, dag_run_id) not in found:
                    found[task_id, dag_run_id] = (run_id, key, _value(value))
        records = []
        for (task_id, dag_run_id), (run_id, key, value) in found.items():
            dag_id = plans[task_id, dag_run_id]
            group = task_group(task_id)
            tables = (SourceTables.model_validate(value) if key == TABLES_KEY else
                      SourceTables.of(dag_id, group, SourcePlan.model_validate(value)))
            records.append(SourceRecord(dag_id, group, run_id, tables))
        return records

    def outcomes(self, sources: Iterable[tuple[str, str]], runs: int = 1) -> dict[tuple[str, str], list[Outcomes]]:
        """The outcomes of the latest ``runs`` runs of each source (dag_id, group) that gave any, newest first."""
        return {source: [Outcomes(run_id, tuple(TableOutcome.model_validate(o) for o in value or ()))
                         for run_id, value in values]
                for source, values in self._latest_values(sources, "merge", OUTCOMES_KEY, runs).items()}

    def _latest_values(self, sources: Iterable[tuple[str, str]], task: str, key: str,
                       runs: int) -> dict[tuple[str, str], list[tuple[str, Any]]]:
        from airflow.models.xcom import XComModel

        by_task = {(dag_id, group_task(group, task)): (dag_id, group) for dag_id, group in sources}
        if not by_task:
            return {}
        # Which runs first, without their values; then those values alone.
        ranked = (select(XComModel.dag_id, XComModel.task_id, XComModel.dag_run_id,
                         func.row_number().over(partition_by=(XComModel.dag_id, XComModel.task_id),
                                                order_by=XComModel.dag_run_id.desc()).label("n"))
                  .where(XComModel.key == key, XComModel.map_index == -1,
                         XComModel.dag_id.in_({dag_id for dag_id, _ in by_task}),
                         XComModel.task_id.in_({task_id for _, task_id in by_task}))).subquery()
        wanted = {(task_id, dag_run_id): (by_task[dag_id, task_id], n) for dag_id, task_id, dag_run_id, n in
                  self.session.execute(select(ranked).where(ranked.c.n <= runs)) if (dag_id, task_id) in by_task}
        found: dict[tuple[str, str], list[tuple[int, str, Any]]] = {source: [] for source in by_task.values()}
        if wanted:
            rows = self.session.execute(
                select(XComModel.task_id, XComModel.dag_run_id, XComModel.run_id, XComModel.value).where(
                    XComModel.key == key, XComModel.map_index == -1,
                    XComModel.dag_run_id.in_({dag_run_id for _, dag_run_id in wanted}),
                    XComModel.task_id.in_({task_id for task_id, _ in wanted})))
            for task_id, dag_run_id, run_id, value in rows:
                if (task_id, dag_run_id) in wanted:
                    source, n = wanted[task_id, dag_run_id]
                    found[source].append((n, run_id, _value(value)))
        return {source: [(run_id, value) for _, run_id, value in sorted(values, key=lambda v: v[0])]
                for source, values in found.items()}

    def failed_before_outcome(self, sources: Collection[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, str]]:
        """For each source (dag_id, group) whose DAG's latest finished run failed one of the group's tasks and gave
        no outcome for it: (the first task that failed, that run's id)."""
        from airflow.models.dagrun import DagRun
        from airflow.models.taskinstance import TaskInstance
        from airflow.models.xcom import XComModel
        from airflow.utils.state import DagRunState, TaskInstanceState

        dag_ids = {dag_id for dag_id, _ in sources}
        if not dag_ids:
            return {}
        ranked = (select(DagRun.dag_id, DagRun.run_id, DagRun.state,
                         func.row_number().over(partition_by=DagRun.dag_id, order_by=DagRun.id.desc()).label("n"))
                  .where(DagRun.dag_id.in_(dag_ids),
                         DagRun.state.in_((DagRunState.SUCCESS, DagRunState.FAILED)))).subquery()
        latest = {dag_id: run_id for dag_id, run_id, state, _ in
                  self.session.execute(select(ranked).where(ranked.c.n == 1)) if state == DagRunState.FAILED}
        if not latest:
            return {}
        failed = self.session.execute(
            select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id)
            .where(TaskInstance.dag_id.in_(latest), TaskInstance.run_id.in_(set(latest.values())),
                   TaskInstance.state == TaskInstanceState.FAILED)
            .order_by(TaskInstance.end_date))
        gave = {(d, r, t) for d, r, t in self.session.execute(
            select(XComModel.dag_id, XComModel.run_id, XComModel.task_id)
            .where(XComModel.dag_id.in_(latest), XComModel.run_id.in_(set(latest.values())),
                   XComModel.key == OUTCOMES_KEY))}
        found: dict[tuple[str, str], tuple[str, str]] = {}
        for dag_id, run_id, task_id in failed:
            if latest.get(dag_id) != run_id:
                continue
            for source in sources:
                group = source[1]
                if source[0] == dag_id and source not in found and (not group or task_id.startswith(f"{group}.")) \
                        and (dag_id, run_id, group_task(group, "merge")) not in gave:
                    found[source] = (task_id, run_id)
        return found

    def running(self, runs: Iterable[RunRef]) -> set[RunRef]:
        """Which of ``runs`` are queued or running now, in one statement for them all: the runs holding the locks of
        a page's tables. A run the metadata DB no longer has is not running (as the plan task judges a lock)."""
        from airflow.models.dagrun import DagRun
        from airflow.utils.state import DagRunState

        wanted = set(runs)
        if not wanted:
            return set()
        found = self.session.execute(
            select(DagRun.dag_id, DagRun.run_id)
            .where(DagRun.dag_id.in_({run.dag_id for run in wanted}), DagRun.run_id.in_({run.run_id for run in wanted}),
                   DagRun.state.in_((DagRunState.QUEUED, DagRunState.RUNNING))))
        return {RunRef(dag_id=dag_id, run_id=run_id) for dag_id, run_id in found} & wanted

    def run_times(self, dag_id: str, run_ids: Collection[str], group: str) -> dict[str, RunTimes]:
        """Each run's times, and its source's merge task's end and try."""
        from airflow.models.dagrun import DagRun
        from airflow.models.taskinstance import TaskInstance

        if not run_ids:
            return {}
        merges = {run_id: (end, number) for run_id, end, number in self.session.execute(
            select(TaskInstance.run_id, TaskInstance.end_date, TaskInstance.try_number)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id.in_(run_ids),
                   TaskInstance.task_id == group_task(group, "merge"), TaskInstance.map_index == -1))}
        return {run_id: RunTimes(run_id=run_id, state=state, start=start, end=end,
                                 merge_end=merges.get(run_id, (None, None))[0],
                                 merge_try=merges.get(run_id, (None, None))[1])
                for run_id, state, start, end in self.session.execute(
                    select(DagRun.run_id, DagRun.state, DagRun.start_date, DagRun.end_date)
                    .where(DagRun.dag_id == dag_id, DagRun.run_id.in_(run_ids)))}

    def commits(self, dag_id: str, hive_table: str, source: str, limit: int) -> list[tuple[Any, ...]]:
        """The latest ``limit`` asset events the source's commits gave its Hive table (any metastore's ``hive://``
        asset of that database and table), newest first: (extra, timestamp, run id, task id, map index)."""
        from airflow.models.asset import AssetEvent, AssetModel

        database, table = hive_table.split(".", 1)
        rows = self.session.execute(
            select(AssetEvent.extra, AssetEvent.timestamp, AssetEvent.source_run_id, AssetEvent.source_task_id,
                   AssetEvent.source_map_index)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.uri.like(f"hive://%/{_like(database)}/{_like(table)}", escape="\\"),
                   AssetEvent.source_dag_id == dag_id)
            .order_by(AssetEvent.timestamp.desc()).limit(limit * 4))
        return [tuple(row) for row in rows if (row[0] or {}).get("source") == source][:limit]

    def run_values(self, dag_id: str, run_id: str, key: str) -> dict[str, Any]:
        """The XComs under ``key`` of one DAG run's tasks (unmapped), by task id."""
        from airflow.models.xcom import XComModel

        return {task_id: _value(value) for task_id, value in self.session.execute(
            select(XComModel.task_id, XComModel.value).where(
                XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == key,
                XComModel.map_index == -1))}

    def failed_tasks(self, dag_id: str, run_id: str) -> list[str]:
        """The tasks of one DAG run that failed, or did not run because one upstream failed."""
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.state import TaskInstanceState

        return list(self.session.scalars(
            select(TaskInstance.task_id).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
                TaskInstance.state.in_((TaskInstanceState.FAILED, TaskInstanceState.UPSTREAM_FAILED)))
            .order_by(TaskInstance.end_date)).unique())


def _like(text: str) -> str:
    """``text`` matched literally by LIKE (escaped with a backslash)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _value(value: Any) -> Any:
    """An XCom's value as the task pushed it: the Execution API stores JSON, which older rows may hold as a string
    of JSON."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
