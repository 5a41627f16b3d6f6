"""The check stage: resolve the configured tables at the source, and find what cannot be captured correctly.

Everything is found, refused or not (``inspect``): the check task raises on it, the pre-flight lists it all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from airflow_cdc_provider.core.catalog import resolve
from airflow_cdc_provider.core.changelog import BadChangelog, table_changelog
from airflow_cdc_provider.core.config import HiveConfig, TableConfig, TablePattern
from airflow_cdc_provider.core.contract import CapturedTable, GoneTable, SkippedTable
from airflow_cdc_provider.core.errors import CaptureNotPossible, CdcError, NoUsableKey
from airflow_cdc_provider.core.foreign_keys import ForeignKeyColumn, cascade_refusals
from airflow_cdc_provider.core.history import BadHistory, table_history
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.keys import whole_row_table
from airflow_cdc_provider.core.modes import Capture
from airflow_cdc_provider.core.partitioning import BadPartitionSpec, table_partitioning
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.shards import BadShards, Shard, shard_problem


class CheckSource(Protocol):
    """What the check reads at the source (``hooks.mysql_source.MySqlSourceHook``)."""

    def base_tables(self, schemas: Iterable[str] | None = None) -> list[TableName]: ...

    def raw_headers(self, tables: Sequence[TableName], declared: Mapping[TableName, Sequence[str]] | None = None
                    ) -> Mapping[TableName, RawHeader | CdcError]: ...

    def foreign_key_columns(self, tables: Iterable[TableName]) -> list[ForeignKeyColumn]: ...

    def check_capture(self, tables: Iterable[TableName] = (), binlog: bool = True) -> list[str]: ...

    def binlog_notes(self) -> list[str]: ...


@dataclass(frozen=True)
class CheckDefaults:
    """What applies to a table whose entry does not say: the configuration's sections."""

    hive: HiveConfig  # the targets' database; the readers' zone, which dates a partition; changelog and history
    schema_changes: str  # `run: schema_changes`
    capture: str  # `source: capture`


def inspect(source: CheckSource, tables: Sequence[TableConfig | TablePattern], defaults: CheckDefaults,
        previous: Mapping[TableName, str]) -> Inspection:
    """Everything the check finds, refused or not: the run's task raises on it, the pre-flight lists it all.

    ``previous``: the tables the last run captured, with their Hive tables (for the tables gone since).
    """
    literals = [entry.source.schema if isinstance(entry, TableConfig) else _literal_schema(entry)
                for entry in tables]
    # A pattern over schemas (no literal schema): every schema the user can see.
    schemas = None if None in literals else {t.schema for t in previous} | {s for s in literals if s}
    found = source.base_tables(schemas)
    resolution = resolve(tables, found, previous, defaults.hive)
    headers = source.raw_headers([t.source for t in resolution.tables],
                               {t.source: t.settings.key for t in resolution.tables if t.settings.key})
    # The binlog's settings and privileges count when a table is read from it (or when none is found yet and
    # the source's own way is the binlog).
    ways = {t.source: _capture(t, h, defaults) for t in resolution.tables
            if isinstance(h := headers[t.source], RawHeader)}
    binlog = Capture.BINLOG in (set(ways.values()) or {defaults.capture})
    # A table read from the binlog that a cascading foreign key changes would drift: the server logs no row
    # event for those changes (``core.foreign_keys``). One statement for all of them; none when all are diffs.
    from_binlog = [table for table, way in ways.items() if way == Capture.BINLOG]
    cascades = cascade_refusals(source.foreign_key_columns(from_binlog), ways) if from_binlog else {}
    warnings: list[str] = []
    refused = None
    try:
        warnings = source.check_capture([*(t.source for t in resolution.tables), *resolution.missing], binlog)
    except CaptureNotPossible as exc:
        refused = exc
    notes = source.binlog_notes() if binlog else []
    captured: list[CapturedTable] = []
    skipped = [SkippedTable(source=str(name), reason=why) for name, why in resolution.unusable]
    problems = [str(source.raw_headers([m])[m]) for m in resolution.missing]
    for table in resolution.tables:
        ready = _captured(table, headers[table.source], defaults)
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

def _captured(table: TableConfig, header: RawHeader | CdcError, defaults: CheckDefaults) -> CapturedTable | CdcError:
    """The table as this run captures it, or why it cannot be: its key or types (``header``), or a
    `partition_by:`, `changelog:` or `history:` that does not fit its columns, found here before anything of it
    is read."""
    if isinstance(header, CdcError):
        return header
    try:
        partitioning = table_partitioning(str(table.source), table.settings.partition_by, header.columns,
                                          defaults.hive.time_zone)
        changelog = table_changelog(str(table.source), table.changelog_settings(defaults.hive.changelog),
                                    header.columns)
        history = table_history(str(table.source), table.history_settings(defaults.hive.history), header.columns,
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
    return CapturedTable(source=str(table.source), hive_table=table.hive_table(defaults.hive),
                         schema_changes=table.settings.schema_changes or defaults.schema_changes, key=header.key,
                         key_declared=bool(table.settings.key), capture=_capture(table, header, defaults),
                         columns=header.columns, spark_conf=table.settings.spark_conf, partitioning=partitioning,
                         changelog=changelog, history=history, shard=shard)

def _capture(table: TableConfig, header: RawHeader, defaults: CheckDefaults) -> str:
    """How the table's changes are found: its entry's way, else the source's; by a diff when it has no key."""
    return Capture.DIFF if header.whole_row else table.settings.capture or defaults.capture


@dataclass(frozen=True)
class Inspection:
    """What the check found at the source (``inspect``)."""

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
