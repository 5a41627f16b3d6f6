"""The check stage: resolve the configured tables at the source, and refuse what cannot be captured correctly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.catalog import StoredCatalog, resolve
from airflow_cdc_provider.core.changelog import BadChangelog, table_changelog
from airflow_cdc_provider.core.config import HiveConfig, TableConfig, TablePattern
from airflow_cdc_provider.core.contract import CapturedTable, CheckResult, GoneTable, SkippedTable
from airflow_cdc_provider.core.errors import CaptureNotPossible, CdcError, NoUsableKey
from airflow_cdc_provider.core.foreign_keys import cascade_refusals
from airflow_cdc_provider.core.history import BadHistory, table_history
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.keys import whole_row_table
from airflow_cdc_provider.core.modes import Capture
from airflow_cdc_provider.core.partitioning import BadPartitionSpec, table_partitioning
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.shards import BadShards, Shard, shard_problem
from airflow_cdc_provider.core.workdir import SourceDir
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.source import DEFAULT_READ_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT, ReadsSource


class CaptureCheckOperator(ReadsSource, BaseOperator):
    """Find the tables to capture now, and check that they can be: the server's binlog settings, the capture
    user's privileges, each table's key and column types.

    Patterns (``TablePattern``) are resolved against the tables the server has now. A table named in the
    configuration that cannot be captured fails the task with every problem found, each with its fix; a table
    a pattern matched that cannot be captured (an unsupported type, a `partition_by:`, `changelog:` or `history:`
    that does not fit its columns or a table with no key, a changelog, snapshots or history table that would be
    another table's, the child of a foreign key with a cascading action read from the binlog) is reported and left
    out. A table with no key is captured by a diff, its whole row its identity (``core.keys``). The binlog's
    compression is logged, with what it means (``core.settings.compression_notes``).
    A table the last run captured that is gone from the source is reported; its Hive table is kept.

    Returns (XCom) a ``CheckResult``: the flavor, the server's watermark, and each table with its key and
    columns.

    :param tables: the configuration's table entries (``CdcConfig.tables``).
    :param hive: the Hive settings (the targets' database; the readers' zone, which dates a partition; the
        changelog and history of tables whose entry sets none).
    :param work_dir: the base directory of run files and ledgers; the last run's tables are kept there.
    :param work_conn_id: the connection of an object-store ``work_dir`` (see ``hooks.work_store``).
    :param mysql_conn_id: Airflow connection (conn_type ``mysql``) of the capture user.
    :param schema_changes: the policy of tables whose entry sets none.
    :param capture: how the changes of tables whose entry sets none are found (``binlog`` or ``diff``).
    :param statement_timeout_seconds: the longest a statement may run on the source before the server stops it
        (``source: statement_timeout_seconds``).
    :param read_timeout_seconds: the longest the source may stay silent (``source: read_timeout_seconds``).
    """

    ui_color = "#e8f4fd"

    def __init__(self, *, tables: Sequence[TableConfig | TablePattern], hive: HiveConfig, work_dir: str,
                 mysql_conn_id: str = MySqlSourceHook.default_conn_name, schema_changes: str = "strict",
                 capture: str = Capture.BINLOG, work_conn_id: str | None = None,
                 statement_timeout_seconds: int = DEFAULT_STATEMENT_TIMEOUT,
                 read_timeout_seconds: int = DEFAULT_READ_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.statement_timeout_seconds, self.read_timeout_seconds = statement_timeout_seconds, read_timeout_seconds
        self.tables, self.hive, self.work_dir = tuple(tables), hive, work_dir
        self.work_conn_id = work_conn_id
        self.mysql_conn_id, self.schema_changes, self.capture = mysql_conn_id, schema_changes, capture

    @final_on_cdc_error  # a setting, a privilege, a key, a refused login: a retry would find the same
    def execute(self, context: Any) -> dict[str, Any]:
        return self._check().to_xcom()

    def _check(self) -> CheckResult:
        hook = self._source_hook()
        kept = work_store(self.work_dir, self.work_conn_id).read_text(
            SourceDir.of_task(self.work_dir, self.dag_id, self.task_id).catalog)
        found = self.inspect(hook, StoredCatalog.parse(kept).previous() if kept else {})
        for warning in found.warnings:
            self.log.warning("%s", warning)
        for note in found.notes:
            self.log.info("%s", note)
        if found.refused is not None:
            raise found.refused
        for left_out in found.skipped:
            self.log.warning("Left out (matched by a pattern, but cannot be captured): %s", left_out.reason)
        if found.problems:
            raise _TablesRefused(found.problems)
        for lost in found.gone:
            self.log.warning("The table %s is no longer at the source (or the capture user cannot see it): its Hive "
                             "table %s is kept as it is, and no longer updated.", lost.source, lost.hive_table)
        watermark = hook.current_watermark() if found.binlog else None
        for ready in found.captured:
            self.log.info("%s can be captured into %s%s: %s", ready.source, ready.hive_table,
                          f" (the shard {ready.shard.name})" if ready.shard else "", how_captured(ready))
        self.log.info("%d tables on %s can be captured (%d left out); server watermark %s", len(found.captured),
                      hook.flavor, len(found.skipped), watermark)
        return CheckResult(flavor=hook.flavor.flavor.value, watermark=watermark, tables=tuple(found.captured),
                           skipped=tuple(found.skipped), gone=tuple(found.gone))

    def inspect(self, hook: MySqlSourceHook, previous: Mapping[TableName, str]) -> Inspection:
        """Everything the check finds, refused or not: the run's task raises on it, the pre-flight lists it all.

        ``previous``: the tables the last run captured, with their Hive tables (for the tables gone since).
        """
        literals = [entry.source.schema if isinstance(entry, TableConfig) else _literal_schema(entry)
                    for entry in self.tables]
        # A pattern over schemas (no literal schema): every schema the user can see.
        schemas = None if None in literals else {t.schema for t in previous} | {s for s in literals if s}
        found = hook.base_tables(schemas)
        resolution = resolve(self.tables, found, previous, self.hive)
        headers = hook.raw_headers([t.source for t in resolution.tables],
                                   {t.source: t.settings.key for t in resolution.tables if t.settings.key})
        # The binlog's settings and privileges count when a table is read from it (or when none is found yet and
        # the source's own way is the binlog).
        ways = {t.source: self._capture(t, h) for t in resolution.tables
                if isinstance(h := headers[t.source], RawHeader)}
        binlog = Capture.BINLOG in (set(ways.values()) or {self.capture})
        # A table read from the binlog that a cascading foreign key changes would drift: the server logs no row
        # event for those changes (``core.foreign_keys``). One statement for all of them; none when all are diffs.
        from_binlog = [table for table, way in ways.items() if way == Capture.BINLOG]
        cascades = cascade_refusals(hook.foreign_key_columns(from_binlog), ways) if from_binlog else {}
        warnings: list[str] = []
        refused = None
        try:
            warnings = hook.check_capture([*(t.source for t in resolution.tables), *resolution.missing], binlog)
        except CaptureNotPossible as exc:
            refused = exc
        notes = hook.binlog_notes() if binlog else []
        captured: list[CapturedTable] = []
        skipped = [SkippedTable(source=str(name), reason=why) for name, why in resolution.unusable]
        problems = [str(hook.raw_headers([m])[m]) for m in resolution.missing]
        for table in resolution.tables:
            ready = self._captured(table, headers[table.source])
            if isinstance(ready, CapturedTable) and table.source in cascades:
                ready = cascades[table.source]
            if isinstance(ready, CapturedTable):
                captured.append(ready)
            elif table.source in resolution.named:
                problems.append(str(ready))
            else:
                skipped.append(SkippedTable(source=str(table.source), reason=str(ready)))
        gone = [GoneTable(source=str(source), hive_table=hive_table) for source, hive_table in resolution.gone]
        return Inspection(binlog=binlog, warnings=warnings, refused=refused, captured=captured, skipped=skipped,
                          problems=problems, gone=gone, notes=notes)

    def _captured(self, table: TableConfig, header: RawHeader | CdcError) -> CapturedTable | CdcError:
        """The table as this run captures it, or why it cannot be: its key or types (``header``), or a
        `partition_by:`, `changelog:` or `history:` that does not fit its columns, found here before anything of it
        is read."""
        if isinstance(header, CdcError):
            return header
        try:
            partitioning = table_partitioning(str(table.source), table.settings.partition_by, header.columns,
                                              self.hive.time_zone)
            changelog = table_changelog(str(table.source), table.changelog_settings(self.hive.changelog),
                                        header.columns)
            history = table_history(str(table.source), table.history_settings(self.hive.history), header.columns,
                                    partitioning.column if partitioning else None)
            if header.whole_row:
                whole_row_table(str(table.source), table.settings.capture, changelog is not None, history is not None)
            shard = None
            if table.settings.shards is not None:
                shard = Shard(server=table.settings.shards.server, source_schema=table.source.schema,
                              source_table=table.source.table)
                shard_problem(str(table.source), shard, header.columns, partitioning is not None,
                              changelog is not None, history is not None)
        except (BadPartitionSpec, BadChangelog, BadHistory, NoUsableKey, BadShards) as exc:
            return exc
        return CapturedTable(source=str(table.source), hive_table=table.hive_table(self.hive),
                             schema_changes=table.settings.schema_changes or self.schema_changes, key=header.key,
                             key_declared=bool(table.settings.key), capture=self._capture(table, header),
                             columns=header.columns, spark_conf=table.settings.spark_conf, partitioning=partitioning,
                             changelog=changelog, history=history, shard=shard)
    def _capture(self, table: TableConfig, header: RawHeader) -> str:
        """How the table's changes are found: its entry's way, else the source's; by a diff when it has no key."""
        return Capture.DIFF if header.whole_row else table.settings.capture or self.capture


@dataclass(frozen=True)
class Inspection:
    """What the check found at the source (``CaptureCheckOperator.inspect``)."""

    binlog: bool  # whether a table is read from the binlog: its settings and privileges count
    warnings: list[str]  # privileges the capture user holds beyond what capture needs
    refused: CaptureNotPossible | None  # the server's settings or the user's privileges that do not serve
    captured: list[CapturedTable]
    skipped: list[SkippedTable]  # matched by a pattern, but cannot be captured
    problems: list[str]  # tables named on their own that cannot be captured, each with its fix
    gone: list[GoneTable]  # captured by the last run, no longer at the source
    notes: list[str]  # what the binlog's settings that are no problem mean for capture (its compression)


def how_captured(table: CapturedTable) -> str:
    """The table's key and its way in, as the check's log line and the pre-flight say them."""
    way = ("from the binlog" if table.capture == Capture.BINLOG else
           "by a diff with its last version's row digests (capture: diff)")
    return f"{_key_told(table)}, {way}"


def _key_told(table: CapturedTable) -> str:
    if not table.key:
        return "no key (each row identified by all its values, equal rows counted)"
    declared = " (declared by `key:`; each snapshot checks it unique)" if table.key_declared else ""
    return f"key {', '.join(table.key)}{declared}"


def _literal_schema(pattern: TablePattern) -> str | None:
    """The one schema a glob pattern can match, or None when it may match several (or is a regex)."""
    if pattern.regex is not None or pattern.schema is None or any(ch in pattern.schema for ch in "*?["):
        return None
    return pattern.schema


class _TablesRefused(CdcError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems) if len(problems) == 1 else
                         f"{len(problems)} tables named in the configuration cannot be captured:\n- " +
                         "\n- ".join(problems))
