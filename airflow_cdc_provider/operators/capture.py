"""The capture stages as operators: snapshot (the initial select), extract (binlog to raw files), replay.

Each is a thin adapter: it reads its arguments, calls the hook and the stage, and returns a small XCom.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.schema import POLICIES
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import extract, fills_from_json, fills_to_json
from airflow_cdc_provider.stages.replay import replay
from airflow_cdc_provider.stages.snapshot import snapshot


def _watermark(value: Any) -> Watermark:
    if isinstance(value, Watermark):
        return value
    if isinstance(value, str):
        return Watermark.from_json(value)
    return Watermark.from_dict(value)


class MySqlSnapshotOperator(BaseOperator):
    """Read the whole table, with the binlog watermark taken before the read, into upsert files.

    Reads in key order in keyset chunks; a killed or retried task resumes after its last finished chunk.
    Returns (XCom) the watermark, the row count, the number of chunks and the files.

    :param table: the source table as ``schema.table`` (templated).
    :param work_dir: directory of this run's files for the table (templated); a retry must see the same one.
    :param mysql_conn_id: Airflow connection (conn_type ``mysql``) of the capture user.
    :param chunk_rows: rows per keyset chunk.
    """

    template_fields = ("table", "work_dir")

    def __init__(self, *, table: str, work_dir: str, mysql_conn_id: str = MySqlSourceHook.default_conn_name,
                 chunk_rows: int = 50_000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table, self.work_dir, self.mysql_conn_id, self.chunk_rows = table, work_dir, mysql_conn_id, chunk_rows

    def execute(self, context: Any) -> dict[str, Any]:
        hook = MySqlSourceHook(self.mysql_conn_id)
        header = hook.raw_header(TableName.parse(self.table))  # refuses a table without a usable key
        result = snapshot(hook, header, Path(self.work_dir) / "snapshot", self.chunk_rows)
        self.log.info("Snapshot of %s: %d rows in %d chunks (resumed after chunk %d), watermark %s",
                      self.table, result.rows, result.chunks, result.resumed_after_chunk, result.watermark)
        return {"table": header.table, "key": list(header.key), **result.to_dict()}


class MySqlBinlogExtractOperator(BaseOperator):
    """Read the table's row events from ``start_watermark`` to the end of the range into raw files.

    The range ends at ``end_watermark`` when given (a re-run repeating its range), else before the first
    transaction that began at or after ``stop_before`` when given (a scheduled run's data interval end), else
    at the server's position when the task starts. Returns (XCom) the range, the moment it reflects
    (``as_of``), the counts per operation, the raw files, the columns at the end, and the schema changes met
    with what added columns hold in earlier rows (``fills``).

    :param table: the source table as ``schema.table`` (templated).
    :param start_watermark: the committed watermark to read from, as a dict or JSON (templated).
    :param work_dir: directory of this run's files for the table (templated).
    :param end_watermark: optional fixed end, as a dict or JSON; empty for none (templated).
    :param stop_before: optional moment (ISO 8601 with a time zone, or a datetime); empty for none (templated).
    :param start_columns: the table's columns at ``start_watermark`` as ``[[name, column type], ...]``, as the
        committed version recorded them; empty to take the table's definition now (templated).
    :param schema_changes: ``strict`` (take on added columns only) or ``evolve`` (keep dropped and renamed
        columns too); see ``airflow_cdc_provider.core.schema``.
    :param mysql_conn_id: Airflow connection (conn_type ``mysql``) of the capture user.
    """

    template_fields = ("table", "start_watermark", "work_dir", "end_watermark", "stop_before", "start_columns")

    def __init__(self, *, table: str, start_watermark: Any, work_dir: str, end_watermark: Any = None,
                 stop_before: Any = None, start_columns: Any = None, schema_changes: str = "strict",
                 mysql_conn_id: str = MySqlSourceHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if schema_changes not in POLICIES:
            raise ValueError(f"schema_changes must be one of {POLICIES}, got {schema_changes!r}.")
        self.table, self.start_watermark, self.work_dir = table, start_watermark, work_dir
        self.end_watermark, self.stop_before, self.start_columns = end_watermark, stop_before, start_columns
        self.schema_changes, self.mysql_conn_id = schema_changes, mysql_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        hook = MySqlSourceHook(self.mysql_conn_id)
        definition = hook.raw_header(TableName.parse(self.table))
        header = definition
        if self.start_columns:
            header = RawHeader(definition.table, tuple((str(n), str(t)) for n, t in self.start_columns), definition.key)
        start = _watermark(self.start_watermark)
        hook.require_readable(start)  # a purged binlog fails here, before anything is written
        started = dt.datetime.now(dt.timezone.utc)
        stop_before = _moment(self.stop_before)
        if self.end_watermark:
            high, stop_before, as_of = _watermark(self.end_watermark), None, None
        else:
            high = hook.current_watermark()
            as_of = min(stop_before, started) if stop_before else started
        result = extract(hook.connection_settings(), [header], start, high, Path(self.work_dir) / "raw",
                         stop_before=stop_before, definitions=[definition], schema_changes=self.schema_changes,
                         defaults=hook.added_column_defaults)
        end = result.end
        if end != high:  # cut at stop_before: the GTID state at that position is looked up
            end = hook.watermark_at(end.file, end.position)
        table = header.table
        self.log.info("Extracted %s from %s to %s: %s", self.table, start, end, json.dumps(result.counts[table]))
        for change in result.schema_changes[table]:
            self.log.warning("Schema change taken on (schema_changes: %s): %s", self.schema_changes, change.headline())
        return {"table": table, "start": result.start.to_dict(), "end": end.to_dict(),
                "as_of": as_of.isoformat() if as_of else None,
                "counts": result.counts[table], "files": result.files[table],
                "columns": [list(c) for c in result.headers[table].columns],
                "schema_changes": [c.to_dict() for c in result.schema_changes[table]],
                "fills": fills_to_json(result.fills[table])}


def _moment(value: Any) -> dt.datetime | None:
    if not value:
        return None
    moment = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    if moment.tzinfo is None:
        raise ValueError(f"stop_before {value!r} has no time zone: give an instant, e.g. 2026-03-01T10:00:00+00:00.")
    return moment.astimezone(dt.timezone.utc)


class RawReplayOperator(BaseOperator):
    """Replay raw files newest first into one upsert file and one delete file (Parquet).

    Returns (XCom) the counts and the two files.

    :param extraction: the extract task's XCom (templated: pass ``extract_task.output``).
    :param work_dir: directory of this run's files for the table (templated).
    :param memory_budget: bytes of key memory before the work is split into hash partitions on disk.
    """

    template_fields = ("extraction", "work_dir")

    def __init__(self, *, extraction: Any, work_dir: str, memory_budget: int = 512 * 1024 * 1024,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.extraction, self.work_dir, self.memory_budget = extraction, work_dir, memory_budget

    def execute(self, context: Any) -> dict[str, Any]:
        out = Path(self.work_dir)
        result = replay(self.extraction["files"], out / "upsert.parquet", out / "delete.parquet",
                        memory_budget=self.memory_budget, fills=fills_from_json(self.extraction.get("fills") or []))
        self.log.info("Replayed %d raw records: %d upserts, %d deletes (%d partitions)", result.records,
                      result.upserts, result.deletes, result.partitions)
        return result.to_dict()
