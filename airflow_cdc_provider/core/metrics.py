"""What a run counts for StatsD (through Airflow's ``Stats``, which adds its prefix, ``airflow.`` by default).

Plain StatsD has no tags, so a metric's name holds what it is about, as Airflow's own per-task names do: the Hive
table (``<database>.<table>``, always two parts), or the task group's path in the DAG with each ``.`` made
``__`` (one part, however deep the group). The same values also go as tags (``table``, ``dag_id``, ``group``)
for a StatsD that takes them (Datadog, or ``statsd_influxdb_enabled``). ``docs/operations.md`` lists them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal

from airflow_cdc_provider.core.contract import TableOutcome, TableVerification
from airflow_cdc_provider.core.modes import Status, VerifyStatus

OPERATIONS = {"I": "insert", "U": "update", "D": "delete"}


@dataclass(frozen=True)
class Metric:
    kind: Literal["incr", "gauge", "timing"]
    name: str
    value: float  # a count, a gauge's value, or seconds for a timing (sent in milliseconds)
    tags: dict[str, str] = field(default_factory=dict)


def table_metrics(outcome: TableOutcome, now: dt.datetime) -> list[Metric]:
    """A table's figures at the end of its run: the rows read per operation and the seconds of each stage (for a
    new version), and the lag of what the table reflects (for a new version or an advanced watermark)."""
    if outcome.status not in (Status.COMMITTED, Status.IDLE):
        return []
    table, tags = outcome.hive_table, {"table": outcome.hive_table}
    metrics = []
    if outcome.status == Status.COMMITTED:
        metrics += [Metric("incr", f"cdc.rows_read.{OPERATIONS[op]}.{table}", outcome.changes.get(op, 0), tags)
                    for op in OPERATIONS]
        metrics += [Metric("timing", f"cdc.duration.{stage}.{table}", seconds, {**tags, "stage": stage})
                    for stage, seconds in outcome.seconds.items()]
    if outcome.healed is not None and outcome.status == Status.COMMITTED:
        # A heal: the table's chain broke, and a diff brought it level; what the diff found and shipped.
        healed = outcome.healed
        metrics += [Metric("incr", f"cdc.heal.tables.{table}", 1, tags),
                    Metric("incr", f"cdc.heal.upserts.{table}", healed.upserts, tags),
                    Metric("incr", f"cdc.heal.deletes.{table}", healed.deletes, tags),
                    Metric("incr", f"cdc.heal.bytes_sent.{table}", healed.bytes_sent, tags)]
    if outcome.as_of is not None:
        metrics.append(Metric("gauge", f"cdc.lag_seconds.{table}", round((now - outcome.as_of).total_seconds(), 3),
                              tags))
    return metrics


def verify_metrics(found: TableVerification) -> list[Metric]:
    """A table's verify in the run (whole or a slice; none sent for a table not verified): 1 checked, 1 different
    (the table or its history's open rows) or 0, and the keys found different."""
    if found.status == VerifyStatus.NOT_VERIFIED:
        return []
    table, tags = found.hive_table, {"table": found.hive_table}
    different = found.status == VerifyStatus.DIFFERENT or bool(found.history_buckets)
    return [Metric("incr", f"cdc.verify.checked.{table}", 1, tags),
            Metric("incr", f"cdc.verify.different.{table}", int(different), tags),
            Metric("incr", f"cdc.verify.differing_keys.{table}", found.differences, tags)]


def binlog_metrics(dag_id: str, group_id: str, read_bytes: int, events: int) -> list[Metric]:
    """A binlog pass's figures: the bytes of binlog it read, and the row events of the run's tables in them."""
    where = f"{_part(dag_id)}.{_part(group_id)}"
    tags = {"dag_id": dag_id, "group": group_id}
    return [Metric("incr", f"cdc.binlog.bytes.{where}", read_bytes, tags),
            Metric("incr", f"cdc.binlog.events.{where}", events, tags)]


def _part(name: str) -> str:
    """One part of a metric name: Airflow's ids may hold dots (a task group's path), StatsD splits on them."""
    return name.replace(".", "__") or "_"
