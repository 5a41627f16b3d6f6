"""The run's last task: one short line per table a person reads (``core.summary``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.contract import OUTCOMES_KEY, VERIFICATION_KEY, TableOutcome, Verification
from airflow_cdc_provider.core.metrics import table_metrics, verify_metrics
from airflow_cdc_provider.core.summary import summary_line, verify_note
from airflow_cdc_provider.operators.metrics import send_metrics


class CdcRunSummaryOperator(BaseOperator):
    """Log the run's summary, one line per table (mode, range, rows inserted/updated/deleted, version, lag, time
    per stage, and what the run's verify found), and return it as XCom (``{source table: line}``), where the UI
    shows it. Each table's figures go to Airflow's ``Stats`` too (``core.metrics``): rows read, seconds per stage,
    lag, verify's checks and differences.

    :param merge_task_id: the merge task whose ``outcomes`` XCom holds every table's ``TableOutcome``. Pulled
        here rather than templated: a merge that never ran leaves none, and the summary still runs and says so.
    :param verify_task_id: the verify task, whose XCom is the run's ``Verification`` (none when it did not
        finish).
    """

    def __init__(self, *, merge_task_id: str, verify_task_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.merge_task_id, self.verify_task_id = merge_task_id, verify_task_id

    def execute(self, context: Any) -> dict[str, str]:
        outcomes = context["ti"].xcom_pull(task_ids=self.merge_task_id, key=OUTCOMES_KEY)
        if outcomes is None:
            self.log.warning("The merge task did not finish: this run has no outcome per table (see the log of "
                             "%s, or of the tasks before it).", self.merge_task_id)
            return {}
        now = dt.datetime.now(dt.UTC)
        # Under its key too when a difference failed the task (``on_difference: fail``), which then returns nothing.
        verified = (context["ti"].xcom_pull(task_ids=self.verify_task_id, key=VERIFICATION_KEY)
                    or context["ti"].xcom_pull(task_ids=self.verify_task_id)) if self.verify_task_id else None
        found = {t.source: t for t in Verification.model_validate(verified or {}).tables}
        lines = {}
        for outcome in (TableOutcome.model_validate(o) for o in outcomes):
            lines[outcome.source] = summary_line(outcome, now)
            if outcome.source in found:
                lines[outcome.source] += "; " + verify_note(found[outcome.source])
                send_metrics(verify_metrics(found[outcome.source]))
            self.log.info("%s", lines[outcome.source])
            send_metrics(table_metrics(outcome, now))
        return lines
