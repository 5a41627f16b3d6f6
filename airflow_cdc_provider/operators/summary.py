"""The run's last task: one short line per table a person reads (``core.summary``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.contract import TableOutcome
from airflow_cdc_provider.core.metrics import table_metrics
from airflow_cdc_provider.core.summary import summary_line
from airflow_cdc_provider.operators.metrics import send_metrics


class CdcRunSummaryOperator(BaseOperator):
    """Log the run's summary, one line per table (mode, range, rows inserted/updated/deleted, version, lag, time
    per stage), and return it as XCom (``{source table: line}``), where the UI shows it. Each table's figures go
    to Airflow's ``Stats`` too (``core.metrics``): rows read, seconds per stage, lag.

    :param outcomes: every table's ``TableOutcome`` of the run (templated: the merge task's ``outcomes`` XCom).
    """

    template_fields = ("outcomes",)

    def __init__(self, *, outcomes: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outcomes = outcomes

    def execute(self, context: Any) -> dict[str, str]:
        if self.outcomes is None:
            self.log.warning("The merge task did not finish: this run has no outcome per table (see its log).")
            return {}
        now = dt.datetime.now(dt.timezone.utc)
        lines = {}
        for outcome in (TableOutcome.model_validate(o) for o in self.outcomes):
            lines[outcome.source] = summary_line(outcome, now)
            self.log.info("%s", lines[outcome.source])
            send_metrics(table_metrics(outcome, now))
        return lines
