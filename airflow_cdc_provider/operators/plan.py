"""The plan task: take the table's lock, decide what this run does, record it, and branch to it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.branch import BaseBranchOperator

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import INCREMENTAL, NOTHING, SNAPSHOT, Ledger, RunRef, plan_run, run_target

def table_dir(work_dir: str, hive_table: str) -> Path:
    """The directory of one Hive table's ledger and run files."""
    return Path(work_dir) / hive_table


def _true(value: Any) -> bool:
    if isinstance(value, str):
        if value.strip().lower() not in ("true", "false", "1", "0", "", "none"):
            raise ValueError(f"fresh_snapshot must be true or false, got {value!r}.")
        return value.strip().lower() in ("true", "1")
    return bool(value)


class CdcPlanOperator(BaseBranchOperator):
    """Lock the Hive table for this run, plan the run, and follow the snapshot or the incremental branch.

    - The first run, or one with ``fresh_snapshot``, loads a snapshot.
    - A scheduled or backfill run reads the binlog from the committed watermark to its data interval end;
      a manual run to the moment its extraction starts.
    - A run whose interval is already committed does nothing and says so.
    - A re-run (a cleared run) repeats the plan it recorded.
    - While another run of the same table is running, this one fails and changes nothing.

    Pushes the plan under the XCom key ``plan`` and the run's directory under ``run_dir``; for an incremental
    run also ``start``, ``end`` (empty unless repeated), ``stop_before`` (empty for a manual run) and
    ``start_columns`` (the source's columns at ``start``, as committed; empty if the ledger did not record them).

    :param source: the source table, ``schema.table``.
    :param hive_table: the target, ``database.table``: the lock and the ledger are per target.
    :param work_dir: the base directory of run files and ledgers (shared by the workers).
    :param snapshot_task_ids: the tasks of the snapshot branch.
    :param incremental_task_ids: the tasks of the incremental branch.
    :param fresh_snapshot: take a fresh snapshot even though a version is committed (templated).
    """

    template_fields = ("fresh_snapshot",)

    def __init__(self, *, source: str, hive_table: str, work_dir: str, snapshot_task_ids: list[str],
                 incremental_task_ids: list[str], fresh_snapshot: Any = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source, self.hive_table, self.work_dir = str(TableName.parse(source)), hive_table, work_dir
        self.snapshot_task_ids, self.incremental_task_ids = snapshot_task_ids, incremental_task_ids
        self.fresh_snapshot = fresh_snapshot

    def choose_branch(self, context: Any) -> list[str]:
        dag_run, ti = context["dag_run"], context["ti"]
        run = RunRef(dag_run.dag_id, dag_run.run_id)
        root = table_dir(self.work_dir, self.hive_table)
        ledger = Ledger(root / "ledger", log=self.log.warning)

        def is_running(holder: RunRef) -> bool:
            try:
                state = ti.get_dagrun_state(dag_id=holder.dag_id, run_id=holder.run_id)
            except Exception as exc:  # the run was deleted: it is not running
                self.log.info("Could not read the state of %s (%s): taken as not running", holder, exc)
                return False
            return str(state).lower().rsplit(".", 1)[-1] in ("queued", "running")

        ledger.acquire(run, is_running, dt.datetime.now(dt.timezone.utc))
        target = run_target(dag_run.run_type, dag_run.data_interval_end)
        plan = plan_run(run, ledger.committed(), ledger.run_plan(run), target, _true(self.fresh_snapshot))
        self.log.info("Plan for %s → %s: %s (%s)", self.source, self.hive_table, plan.mode, plan.reason)
        run_dir = root / "runs" / run.key
        if plan.mode != NOTHING:
            ledger.save_run_plan(plan)
        ti.xcom_push(key="run_dir", value=str(run_dir))
        ti.xcom_push(key="plan", value={**plan.to_dict(), "run_dir": str(run_dir), "ledger_dir": str(ledger.root)})
        if plan.mode == NOTHING:
            return []
        if plan.mode == SNAPSHOT:
            return list(self.snapshot_task_ids)
        assert plan.mode == INCREMENTAL and plan.start is not None
        # XCom cannot hold a None (it reads as missing), so an absent end or stop is pushed empty.
        ti.xcom_push(key="start", value=plan.start.to_dict())
        ti.xcom_push(key="end", value=plan.end.to_dict() if plan.end else {})
        ti.xcom_push(key="stop_before", value=plan.stop_before.isoformat() if plan.stop_before else "")
        ti.xcom_push(key="start_columns", value=[list(c) for c in plan.start_columns or ()])
        return list(self.incremental_task_ids)
