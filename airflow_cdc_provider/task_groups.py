"""The task group factories: a whole source (every table of one server, by name or pattern), or one table.

    check → plan ─┬─ snapshot ─────────────┬─ merge ─┬─ table (one mapped task per table written or failed) ─┬─ summary
                  └─ extract ─┬─ replay ───┤         └─ verify ──────────────────────────────────────────────┘
                              └─ heal ─────┘

``check`` resolves the configured tables at the source and checks them (a named table it refuses is stopped with
its reason, the others go on, and its ``table`` task fails the run at the end); ``plan`` takes each table's lock and
decides what the run does to it: a snapshot (first run, fresh snapshot), the binlog from its committed
watermark, or nothing. ``snapshot`` loads the new tables, a few at a time. ``extract`` reads the binlog once
for every incremental table, over one replication connection; ``replay`` turns each changed table's raw
files into upserts and deletes; ``heal`` brings each table whose binlog chain broke in the range level by a diff
(``docs/runs.md``). ``merge`` runs one Spark application for every table with changes (none when
none has), commits each table on its own, and records each commit in its ledger; an idle table's watermark
advances without Spark, and it gets no task of its own. ``table`` shows the outcome of each table the run
wrote (or failed), releases its lock, and fails for a table that failed, after the others have committed.
``verify`` checks the committed versions of the tables that are due against the source (``docs/verify.md``).
``summary`` logs one line per table, and returns them as its XCom.

Each task hands the next one typed value (``core.contract``), wired here as XComArgs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, AssetAlias, Param, TaskGroup, XComArg

from airflow_cdc_provider.core.assets import hive_asset_uri
from airflow_cdc_provider.core.catalog import resolve
from airflow_cdc_provider.core.config import CdcConfig, TableConfig, TablePattern
from airflow_cdc_provider.core.contract import OUTCOMES_KEY
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.operators.capture import MySqlBinlogExtractOperator, MySqlSnapshotOperator, RawReplayOperator
from airflow_cdc_provider.operators.check import CaptureCheckOperator
from airflow_cdc_provider.operators.heal import CdcHealOperator
from airflow_cdc_provider.operators.merge import CdcTableOperator, SparkMergeOperator
from airflow_cdc_provider.operators.plan import CdcPlanOperator
from airflow_cdc_provider.operators.summary import CdcRunSummaryOperator
from airflow_cdc_provider.operators.verify import CdcVerifyOperator

FRESH_SNAPSHOT_PARAM = "fresh_snapshot"
FRESH_SNAPSHOT_TABLES_PARAM = "fresh_snapshot_tables"
VERIFY_PARAM = "verify"
REPAIR_PARAM = "repair"
REREAD_PARAM = "reread"


def cdc_params() -> dict[str, Param]:
    """The trigger-form parameters the task groups read; pass them to your DAG's ``params``."""
    return {FRESH_SNAPSHOT_PARAM: Param(False, type="boolean", title="Fresh snapshot",
                                        description="Reload every table from a new snapshot instead of the binlog."),
            FRESH_SNAPSHOT_TABLES_PARAM: Param([], type="array", items={"type": "string"},
                                               title="Fresh snapshot of these tables",
                                               description="Reload only these tables (schema.table, one a line) "
                                                           "from a new snapshot; the others go on from the "
                                                           "binlog."),
            VERIFY_PARAM: Param(False, type="boolean", title="Verify",
                                description="Check every table of the run against the source after its merge."),
            REPAIR_PARAM: Param(False, type="boolean", title="Repair",
                                description="Read again the rows the tables' last verify found different."),
            REREAD_PARAM: Param({}, type="object", title="Read again",
                                description='Tables to read again, each with a condition as after WHERE (empty: '
                                            'the whole table), e.g. {"shop.orders": "id BETWEEN 10 AND 20"}. A '
                                            "condition may use only the table's own columns, literals (numbers, "
                                            "'strings', NULL, TRUE, FALSE; dates as strings), = <> != < <= > >= "
                                            "<=>, BETWEEN, IN (literals), IS [NOT] NULL, LIKE, AND, OR, NOT and "
                                            "parentheses. Refused unless the configuration sets "
                                            "`run: allow_reread: true`.")}


def cdc_source_group(config: CdcConfig, group_id: str = "cdc", **task_kwargs: Any) -> TaskGroup:
    """Build the task group that brings every table of ``config`` (one source server) up to date in Hive.

    Call it inside a DAG context; the DAG should carry ``cdc_params()``. ``task_kwargs`` go to every task
    (``pool``, ``queue``…). The group's ``outcomes`` attribute is every table's ``TableOutcome`` of the run (a
    list, as JSON; an XComArg), for a task of yours to take as its argument; its ``verification`` attribute the
    run's ``Verification`` (``docs/verify.md``).
    """
    names = ", ".join(str(t.source) if isinstance(t, TableConfig) else str(t) for t in config.tables)
    return _chain(config.tables, config, group_id, f"{names} → Hive {config.hive.database}", task_kwargs)


def cdc_table_group(table: TableConfig, config: CdcConfig, group_id: str | None = None,
                    **task_kwargs: Any) -> TaskGroup:
    """Build the task group that brings one table up to date in Hive: the source's chain over that table alone.

    Call it inside a DAG context; the DAG should carry ``cdc_params()``. ``task_kwargs`` go to every task.
    """
    if not isinstance(table, TableConfig):
        raise TypeError(f"cdc_table_group takes one named table, got the pattern {table}: use cdc_source_group.")
    return _chain((table,), config, group_id or table.group_id,
                  f"{table.source} → Hive {table.hive_table(config.hive)}", task_kwargs)


def asset_alias(config: CdcConfig, group_id: str) -> str:
    """The asset alias a group's commits are announced through: each event names the Hive table's own asset
    (``core.assets``), which a downstream DAG schedules on."""
    return f"cdc {config.hive.database} {group_id}"


def table_asset(config: CdcConfig, source: str) -> Asset:
    """The asset of the Hive table that ``source`` (``schema.table``, a table ``config`` names or matches) is
    copied to: each commit of that table emits an event on it, so a DAG scheduled on it runs after each new
    version, and reads the version, watermark, ``as_of`` and changes in the event's extra (``docs/operations.md``).
    """
    name = TableName.parse(source)
    # The run's own rule: a named entry first, else the first pattern that matches.
    resolution = resolve(config.tables, [name], hive=config.hive)
    if not resolution.tables:
        raise ValueError(resolution.unusable[0][1] if resolution.unusable else
                         f"The configuration selects no table {name}: name it under `tables:` "
                         f"(`- source: {name}`) or give a pattern that matches it.")
    table = resolution.tables[0]
    return Asset(uri=hive_asset_uri(config.hive.metastore_uri, table.hive_table(config.hive)))


def _chain(tables: Sequence[TableConfig | TablePattern], config: CdcConfig, group_id: str, tooltip: str,
           task_kwargs: dict[str, Any]) -> TaskGroup:
    retry: dict[str, Any] = {"retries": config.run.retries, "retry_delay": timedelta(minutes=1), **task_kwargs}
    # Each task takes the sections of the configuration it reads, whole.
    source, work, run, hive, spark = config.source, config.work, config.run, config.hive, config.spark
    with TaskGroup(group_id=group_id, tooltip=tooltip) as group:
        check = CaptureCheckOperator(task_id="check", tables=tables, source=source, work=work, run=run, hive=hive,
                                     **retry)
        plan = CdcPlanOperator(task_id="plan", check=check.output, source=source, work=work, run=run,
                               fresh_snapshot=f"{{{{ params.get('{FRESH_SNAPSHOT_PARAM}', False) }}}}",
                               fresh_snapshot_tables=f"{{{{ params.get('{FRESH_SNAPSHOT_TABLES_PARAM}') | tojson }}}}",
                               repair=f"{{{{ params.get('{REPAIR_PARAM}', False) or {config.verify.repair} }}}}",
                               reread=f"{{{{ params.get('{REREAD_PARAM}') | tojson }}}}", **retry)
        snapshot = MySqlSnapshotOperator(task_id="snapshot", plan=plan.output, source=source, work=work, run=run,
                                         **retry)
        extract = MySqlBinlogExtractOperator(task_id="extract", plan=plan.output, source=source, work=work, run=run,
                                             **retry)
        replay = RawReplayOperator(task_id="replay", plan=plan.output, extraction=extract.output, work=work, run=run,
                                   **retry)
        # The tables whose chain broke in the range, brought level by a diff (no Spark, when none broke).
        heal = CdcHealOperator(task_id="heal", plan=plan.output, extraction=extract.output, source=source, work=work,
                               run=run, spark=spark, hive=hive, **retry)
        # All done: one table's failed capture does not hold back the others' commits.
        merge = SparkMergeOperator(
            task_id="merge", plan=plan.output, snapshot=snapshot.output, extraction=extract.output,
            replay=replay.output, heal=heal.output, source=source, work=work, run=run, spark=spark, hive=hive,
            trigger_rule="all_done", **retry,
        )
        # The merge's outcomes, pushed under their own key (one per table, which the table tasks map over).
        outcomes = XComArg(merge, key=OUTCOMES_KEY)
        alias = asset_alias(config, group_id)
        table_tasks = CdcTableOperator.partial(
            task_id="table", work_dir=work.dir, keep_runs=hive.keep_versions, work_conn_id=work.conn_id,
            asset_alias=alias, outlets=[AssetAlias(alias)], metastore_uri=hive.metastore_uri,
            map_index_template="{{ task.outcomes | map(attribute='source') | join(', ') }}", **retry,
        ).expand(outcomes=merge.output)
        verify = CdcVerifyOperator(
            task_id="verify", plan=plan.output, outcomes=outcomes, verify=config.verify,
            force=f"{{{{ params.get('{VERIFY_PARAM}', False) }}}}", source=source, work=work, spark=spark, hive=hive,
            **retry,
        )
        # Last, whatever failed: one line per table for the person who opens the run. A teardown, so that the run's
        # state stays its tables' (a failed table fails the run) and a group `>>` a task of yours skips it.
        summary = CdcRunSummaryOperator(task_id="summary", merge_task_id=merge.task_id,
                                        verify_task_id=verify.task_id, **task_kwargs)
        [table_tasks, verify] >> summary.as_teardown()
    # What a task of the user's takes as its argument (the factories' docstrings); TaskGroup declares neither.
    group.outcomes = outcomes  # type: ignore[attr-defined]
    group.verification = verify.output  # type: ignore[attr-defined]
    return group
