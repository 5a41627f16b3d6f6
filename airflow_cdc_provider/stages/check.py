"""The check stage: resolve the configured tables at the source, and find what cannot be captured correctly.

Everything is found, refused or not (``inspect``): the check task raises on what stops every table (the server's
settings, the privileges every table needs) and stops each named table that cannot be captured, the others going
on; the pre-flight lists it all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from airflow_cdc_provider.core.catalog import resolve
from airflow_cdc_provider.core.changelog import BadChangelog, table_changelog
from airflow_cdc_provider.core.config import HiveConfig, TableConfig, TablePattern
from airflow_cdc_provider.core.contract import CapturedTable, GoneTable, RefusedTable, SkippedTable
from airflow_cdc_provider.core.errors import CaptureNotPossible, CdcError, NoUsableKey
from airflow_cdc_provider.core.foreign_keys import (
    CascadingForeignKey,
    ForeignKeyColumn,
    cascade_captures,
    counted_keys,
)
from airflow_cdc_provider.core.grants import CaptureGrants
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

    def check_capture(self, tables: Iterable[TableName] = (), binlog: bool = True) -> CaptureGrants: ...

    def binlog_notes(self) -> list[str]: ...


@dataclass(frozen=True)
class CheckDefaults:
    """What applies to a table whose entry does not say: the configuration's sections."""

    hive: HiveConfig  # the targets' database; the readers' zone, which dates a partition; changelog and history
    schema_changes: str  # `run: schema_changes`
    capture: str  # `source: capture`


def inspect(source: CheckSource, tables: Sequence[TableConfig | TablePattern], defaults: CheckDefaults,
        previous: Mapping[TableName, str]) -> Inspection:
    """Everything the check finds, refused or not: the run's task raises on what stops every table and stops the
    named tables that cannot be captured; the pre-flight lists it all.

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
    ready = {t.source: _captured(t, headers[t.source], defaults) for t in resolution.tables}
    # A table read from the binlog that a cascading foreign key changes would drift: the server logs no row event
    # for those changes (``core.foreign_keys``). It is captured by a diff instead, as a table with no key is, unless
    # its entry sets `capture: binlog` itself. One statement for all of them; none when all are diffs.
    ways = {name: table for name, table in ready.items() if isinstance(table, CapturedTable)}
    from_binlog = [name for name, table in ways.items() if table.capture == Capture.BINLOG]
    if from_binlog:
        insisted = [t.source for t in resolution.tables if t.settings.capture == Capture.BINLOG.value]
        for name, decided in cascade_captures(source.foreign_key_columns(from_binlog),
                                              {name: table.capture for name, table in ways.items()},
                                              insisted).items():
            ready[name] = decided if isinstance(decided, CascadingForeignKey) else ways[name].model_copy(
                update={"capture": Capture.DIFF, "cascades": tuple(str(key) for key in decided.keys)})
    # The binlog's settings and privileges count when a table is read from it (or when none can be captured and
    # the source's own way is the binlog).
    ways_now: set[str] = {t.capture for t in ready.values() if isinstance(t, CapturedTable)}
    binlog = Capture.BINLOG in (ways_now or {defaults.capture})
    grants, refused = CaptureGrants(warnings=[], unreadable={}), None
    try:
        grants = source.check_capture([t.source for t in resolution.tables], binlog)
    except CaptureNotPossible as exc:  # no table can be captured
        refused = exc
    notes = source.binlog_notes() if binlog else []
    captured: list[CapturedTable] = []
    skipped = [SkippedTable(source=str(name), reason=why) for name, why in resolution.unusable]
    entries = {entry.source: entry for entry in tables if isinstance(entry, TableConfig)}
    stopped = [_refused(entries[m], str(source.raw_headers([m])[m]), defaults) for m in resolution.missing]
    for table in resolution.tables:
        # A table the user may not read: whatever else was found of it, that is what to fix first.
        found_table = grants.unreadable.get(table.source) or ready[table.source]
        if isinstance(found_table, CapturedTable):
            captured.append(found_table)
        elif table.source in resolution.named:
            stopped.append(_refused(table, str(found_table), defaults))
        else:
            skipped.append(SkippedTable(source=str(table.source), reason=str(found_table)))
    gone = [GoneTable(source=str(source), hive_table=hive_table) for source, hive_table in resolution.gone]
    return Inspection(binlog=binlog, warnings=grants.warnings, refused=refused, captured=captured, skipped=skipped,
                      stopped=sorted(stopped, key=lambda t: t.source), gone=gone, notes=notes)


def _refused(table: TableConfig, reason: str, defaults: CheckDefaults) -> RefusedTable:
    """A named table the check refuses: stopped with ``reason``, under the Hive table (and shard) its entry makes."""
    return RefusedTable(source=str(table.source), hive_table=table.hive_table(defaults.hive), reason=reason,
                        shard=_shard(table))


def _shard(table: TableConfig) -> Shard | None:
    """The shard of a Hive table the table's entry makes it (``shards:``), or None."""
    if table.settings.shards is None:
        return None
    return Shard(server=table.settings.shards.server, source_schema=table.source.schema,
                 source_table=table.source.table)

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
        shard = _shard(table)
        if shard is not None:
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
    stopped: list[RefusedTable]  # tables named on their own that cannot be captured, each with its fix
    gone: list[GoneTable]  # captured by the last run, no longer at the source
    notes: list[str]  # what the binlog's settings that are no problem mean for capture (its compression)


def how_captured(table: CapturedTable) -> str:
    """The table's key and its way in, as the check's log line and the pre-flight say them."""
    way = ("from the binlog" if table.capture == Capture.BINLOG else
           "by a diff with its last version's row digests (capture: diff)")
    if table.cascades:
        which = counted_keys(len(table.cascades))
        way += (f", since it is the child of {which} with a cascading action ({'; '.join(table.cascades)}): the "
                "server changes its rows for those without a row event in the binlog, and a diff is exact for it")
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
