"""Send a run's figures (``core.metrics``) through Airflow's ``Stats``: to StatsD, Datadog or OpenTelemetry as
the ``[metrics]`` section of Airflow's configuration says, or nowhere when it turns none on."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from airflow_cdc_provider.compat import Stats
from airflow_cdc_provider.core.metrics import Metric


def send_metrics(metrics: Iterable[Metric]) -> None:
    for metric in metrics:
        if metric.kind == "timing":
            Stats.timing(metric.name, dt.timedelta(seconds=metric.value), tags=metric.tags)
        elif metric.kind == "gauge":
            Stats.gauge(metric.name, metric.value, tags=metric.tags)
        else:
            Stats.incr(metric.name, int(metric.value), tags=metric.tags)
