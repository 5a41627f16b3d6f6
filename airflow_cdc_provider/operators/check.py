"""The check stage: resolve the configured tables at the source, and refuse what cannot be captured correctly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.catalog import StoredCatalog
from airflow_cdc_provider.core.config import HiveConfig, RunConfig, SourceConfig, TableConfig, TablePattern, WorkConfig
from airflow_cdc_provider.core.contract import CheckResult
from airflow_cdc_provider.core.workdir import SourceDir
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.source import ReadsSource
from airflow_cdc_provider.stages.check import CheckDefaults, how_captured, inspect


class CaptureCheckOperator(ReadsSource, BaseOperator):
    """Find the tables to capture now, and check that they can be: the server's binlog settings, the capture
    user's privileges, each table's key and column types.

    Patterns (``TablePattern``) are resolved against the tables the server has now. What stops every table (the
    binlog's settings, the replication privileges) fails the task, with each fix. A table named in the
    configuration that cannot be captured (it is not at the source, the user may not read it, an unsupported type,
    no usable key, a `partition_by:`, `changelog:`, `history:` or `shards:` that does not fit its columns, the child
    of a foreign key with a cascading action whose entry sets `capture: binlog`) is stopped with its reason: the
    other tables go on, and the run fails for it at its end (its table task), so that alerts fire. A table a
    pattern matched that cannot be captured (for those reasons, or a changelog, snapshots or history table that
    would be another table's) is reported and left out. A table with no key is captured by a diff, its whole row its
    identity (``core.keys``); so is the child of a foreign key with a cascading action whose entry does not set
    `capture:` (``core.foreign_keys``). The binlog's compression is logged, with what it means
    (``core.settings.compression_notes``).
    A table the last run captured that is gone from the source is reported; its Hive table is kept.

    Returns (XCom) a ``CheckResult``: the flavor, the server's watermark, each table with its key and columns, and
    the tables stopped, each with its reason.

    :param tables: the configuration's table entries (``CdcConfig.tables``).
    :param source: the configuration's ``source:`` (``SourceConfig``): the connection and its time limits, and how
        the changes of tables whose entry sets none are found (``capture``: ``binlog`` or ``diff``).
    :param work: the configuration's ``work:`` (``WorkConfig``): the base directory of run files and ledgers,
        where the last run's tables are kept, and its connection.
    :param run: the configuration's ``run:`` (``RunConfig``): the ``schema_changes`` policy of tables whose entry
        sets none.
    :param hive: the configuration's ``hive:`` (``HiveConfig``): the targets' database; the readers' zone, which
        dates a partition; the changelog and history of tables whose entry sets none.
    """

    ui_color = "#e8f4fd"

    def __init__(self, *, tables: Sequence[TableConfig | TablePattern], source: SourceConfig, work: WorkConfig,
                 run: RunConfig, hive: HiveConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tables, self.source, self.work, self.run, self.hive = tuple(tables), source, work, run, hive

    @property
    def defaults(self) -> CheckDefaults:
        return CheckDefaults(hive=self.hive, schema_changes=self.run.schema_changes, capture=self.source.capture)

    @final_on_cdc_error  # a setting, a privilege, a key, a refused login: a retry would find the same
    def execute(self, context: Any) -> dict[str, Any]:
        return self._check().to_xcom()

    def _check(self) -> CheckResult:
        hook = self._source_hook()
        kept = work_store(self.work.dir, self.work.conn_id).read_text(
            SourceDir.of_task(self.work.dir, self.dag_id, self.task_id).catalog)
        found = inspect(hook, self.tables, self.defaults, StoredCatalog.parse(kept).previous() if kept else {})
        for warning in found.warnings:
            self.log.warning("%s", warning)
        for note in found.notes:
            self.log.info("%s", note)
        if found.refused is not None:
            raise found.refused
        for left_out in found.skipped:
            self.log.warning("Left out (matched by a pattern, but cannot be captured): %s", left_out.reason)
        for stopped in found.stopped:
            self.log.error("Stopped in this run (named in the configuration, but cannot be captured; the other "
                           "tables go on, and the run fails for it at its end): %s", stopped.reason)
        for lost in found.gone:
            self.log.warning("The table %s is no longer at the source (or the capture user cannot see it): its Hive "
                             "table %s is kept as it is, and no longer updated.", lost.source, lost.hive_table)
        watermark = hook.current_watermark() if found.binlog else None
        for ready in found.captured:
            self.log.info("%s can be captured into %s%s: %s", ready.source, ready.hive_table,
                          f" (the shard {ready.shard.name})" if ready.shard else "", how_captured(ready))
        self.log.info("%d tables on %s can be captured (%d stopped, %d left out); server watermark %s",
                      len(found.captured), hook.flavor, len(found.stopped), len(found.skipped), watermark)
        return CheckResult(flavor=hook.flavor.flavor.value, watermark=watermark, tables=tuple(found.captured),
                           skipped=tuple(found.skipped), gone=tuple(found.gone), refused=tuple(found.stopped))
