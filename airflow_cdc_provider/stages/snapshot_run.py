"""The snapshot stage of a run: each table that is read whole (a first load, a fresh snapshot) or, in diff mode,
compared with its committed version's row digests, a few at a time; what the capture stages hand the merge.

The snapshot task runs it; the replay task shares its ending (``finish_stage``) and its digests' place.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from airflow_cdc_provider.core.batches import DEFAULT_READ_BUFFER
from airflow_cdc_provider.core.config import SourceConfig
from airflow_cdc_provider.core.contract import Captured, MergeInput, TableFailure, TablePlan
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.modes import Capture, Mode
from airflow_cdc_provider.core.progress import Progress, key_share
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.schema import SchemaChange, check_changes
from airflow_cdc_provider.core.workdir import DIGESTS_FILE
from airflow_cdc_provider.stages.diff import DiffSource, diff_table
from airflow_cdc_provider.stages.snapshot import SnapshotResult, Source, snapshot
from airflow_cdc_provider.stages.task_log import TaskLog
from airflow_cdc_provider.storage import WorkStore


class SnapshotSource(Source, DiffSource, Protocol):
    """What the stage asks of the source (``MySqlSourceHook``) besides a table's read or diff: for the progress."""

    @property
    def address(self) -> tuple[str, int]: ...

    def integer_key_bounds(self, header: RawHeader) -> tuple[int, int] | None: ...

    def estimated_rows(self, table: Any) -> int: ...


@dataclass(frozen=True)
class SnapshotSettings:
    """How the tables are read (the snapshot task's arguments, from `source:`)."""

    concurrency: int = 4  # tables read at the same time
    chunk_rows: int = 50_000  # rows per keyset chunk
    readers: int = 1  # connections each table is read on at once, in key ranges
    read_buffer: int = DEFAULT_READ_BUFFER  # bytes of rows each table's read holds before writing them
    progress_seconds: float = 10.0  # how often each table's read logs how far it is


def snapshot_settings(source: SourceConfig) -> SnapshotSettings:
    """How the tables of ``source:`` are read whole."""
    return SnapshotSettings(concurrency=source.snapshot_concurrency, chunk_rows=source.snapshot_chunk_rows,
                            readers=source.snapshot_readers, read_buffer=source.read_buffer,
                            progress_seconds=source.progress_seconds)


class TablesFailed(Exception):
    """Some tables failed for a reason a retry may cure; the task's retry redoes just them."""


def finish_stage(log: TaskLog, stage: str, results: list[MergeInput | TableFailure], transient: list[str]) -> Captured:
    """The stage's value: its tables' merge inputs and failures; or, when a table failed for a reason a retry may
    cure, ``TablesFailed`` naming them."""
    if transient:
        raise TablesFailed(f"The {stage} of {', '.join(transient)} failed (see above); the task's retry redoes "
                           "only these tables.")
    return Captured(inputs=tuple(r for r in results if isinstance(r, MergeInput)),
                    failed=tuple(r for r in results if isinstance(r, TableFailure)))


def plan_header(table: TablePlan) -> RawHeader:
    """The table's columns and key as the run's plan has them."""
    return RawHeader(table.source, table.table.columns, table.table.key)


def snapshot_run(hook: SnapshotSource, tables: Sequence[TablePlan], store: Callable[[str], WorkStore],
                 settings: SnapshotSettings, log: TaskLog) -> Captured:
    """Each of ``tables`` (a run's snapshots and diffs) read whole or diffed, ``settings.concurrency`` at a time;
    ``store`` gives the work store of a run directory's root. A table's own failure is returned with the others'
    results; an error a retry may cure fails the stage once the other tables are done (``TablesFailed``)."""
    if not tables:
        log.info("No table needs a snapshot or a diff in this run.")
        return Captured()
    # The connection and the server's flavor looked up once, here, rather than by each thread.
    _ = hook.address, hook.flavor
    transient: list[str] = []

    def load(table: TablePlan) -> MergeInput | TableFailure:
        started = time.monotonic()
        try:
            if table.mode == Mode.DIFF:
                return _diff(hook, table, started, store, settings, log)
            header = plan_header(table)
            if table.plan.start_columns is not None:
                # A diff-mode table whose columns changed (``core.ledger.plan_run``): its policy takes the change
                # on, or refuses it before anything is read, as the binlog's extraction does.
                check_changes([SchemaChange(table=table.source, at="this run's check of the source", ddl=None,
                                            before=table.plan.start_columns, after=header.columns)],
                              table.table.schema_changes, header.key)
            work, target = store(table.run_dir.root), table.run_dir.snapshot
            diff_mode = table.table.capture == Capture.DIFF
            digests = table.table_dir.digests_file(table.plan.run.key) if diff_mode else None
            with work.staging(target) as local, digests_staging(work, table) as digests_dir:
                result = snapshot(hook, header, local, settings.chunk_rows,
                                  snapshot_progress(hook, header, settings, log), settings.read_buffer,
                                  key_declared=table.table.key_declared, readers=settings.readers,
                                  digests=digests_dir / DIGESTS_FILE if digests_dir else None)
            files = tuple(work.location_of(f, local, target) for f in result.files)
        except CdcError as exc:
            log.error("Snapshot of %s failed: %s", table.source, exc)
            return TableFailure(source=table.source, stage="snapshot", error=str(exc))
        except Exception:
            log.exception("Snapshot of %s failed", table.source)
            transient.append(table.source)
            return TableFailure(source=table.source, stage="snapshot", error="see the task log")
        log.info("Snapshot of %s: %d rows in %d chunks (resumed after chunk %d), watermark %s",
                      table.source, result.rows, result.chunks, result.resumed_after_chunk, result.watermark)
        if result.ranges:
            log.info("Snapshot of %s: read in %d key ranges on %d connections at once", table.source,
                          result.ranges, result.readers)
        return MergeInput(source=table.source, mode=Mode.SNAPSHOT, upsert_files=files,
                          columns=header.columns, key=header.identity, end=result.watermark,
                          as_of=taken_at(result), source_columns=header.columns,
                          upserts=result.rows, changes={"I": result.rows}, digests_file=digests,
                          seconds={"snapshot": round(time.monotonic() - started, 3)})

    with ThreadPoolExecutor(max_workers=max(1, settings.concurrency), thread_name_prefix="snapshot") as pool:
        results = list(pool.map(load, tables))
    return finish_stage(log, "snapshot", results, transient)

def _diff(hook: SnapshotSource, table: TablePlan, started: float, store: Callable[[str], WorkStore],
          settings: SnapshotSettings, log: TaskLog) -> MergeInput:
    """A diff-mode table's changes since its committed version, found by its rows' digests (``stages.diff``)."""
    header = plan_header(table)
    committed = table.committed
    if committed is None or committed.digests is None:
        raise CdcError(f"{table.source} was planned for a diff, but its committed version has no row digests. "
                       "Trigger a run with fresh_snapshot=true.")
    work, target = store(table.run_dir.root), table.run_dir.root
    digests = table.table_dir.digests_file(table.plan.run.key)
    with work.fetched([committed.digests]) as (kept,), work.staging(target) as local, \
            digests_staging(work, table) as digests_dir:
        assert digests_dir is not None
        found = diff_table(hook, header, kept, local, settings.read_buffer, digests_out=digests_dir / DIGESTS_FILE)
    if found.other_hash:
        log.info("The digests of %s's version %d are of %s, not of the hash the server computes now: every row "
                 "is read again and replaces the version's, once", table.source, committed.version, found.other_hash)
    log.info("Diff of %s with version %d: %d rows changed or new, %d deleted; %d rows' digests compared in "
                  "levels %s; %d bytes sent by the server; as of %s", table.source, committed.version,
                  found.upserts, found.deletes, found.compared_rows, found.levels, found.bytes_sent,
                  found.as_of.isoformat())
    return MergeInput(source=table.source, mode=Mode.DIFF,
                      upsert_files=(work.location_of(found.upsert_file, local, target),),
                      delete_file=work.location_of(found.delete_file, local, target), columns=header.columns,
                      key=header.identity, end=None, as_of=found.as_of, source_columns=header.columns,
                      upserts=found.upserts, deletes=found.deletes, digests_file=digests, changes=found.changes,
                      start=None, seconds={"diff": round(time.monotonic() - started, 3)})

def snapshot_progress(hook: SnapshotSource, header: RawHeader, settings: SnapshotSettings, log: TaskLog) -> Any:
    """Each chunk's report to the table's ``Progress``: the share by the integer key's range, else by the
    server's estimate of the rows."""
    bounds = hook.integer_key_bounds(header)
    estimate = hook.estimated_rows(header.table) if bounds is None else 0
    progress = Progress(f"snapshot of {header.table}", log.info, every=settings.progress_seconds)

    def chunk_done(rows: int, last_key: list[Any] | None) -> None:
        if bounds is not None:
            share = key_share(*bounds, int(last_key[0]) if last_key else None)
        else:
            share = rows / estimate if estimate else None
        progress.update(rows, share)

    return chunk_done


@contextlib.contextmanager
def digests_staging(store: WorkStore, table: TablePlan) -> Iterator[Path | None]:
    """Where a diff-mode table's row digests are written this run (``TableDir.digests_file``; renamed there from
    ``DIGESTS_FILE`` once written), or None for a table read from the binlog."""
    if table.table.capture != Capture.DIFF:
        yield None
        return
    name = table.table_dir.digests_file(table.plan.run.key).rsplit("/", 1)[-1]
    with store.staging(table.table_dir.digests) as local:
        yield local
        written = local / DIGESTS_FILE
        if written.exists():
            os.replace(written, local / name)


def taken_at(result: SnapshotResult) -> dt.datetime:
    """The moment a snapshot reflects: when its watermark was taken."""
    if result.taken_at is None:  # a snapshot resumed from progress an earlier release kept
        raise CdcError(f"The snapshot's progress file does not say when its watermark {result.watermark} was taken, "
                       "so the moment its rows reflect is not known. Trigger a run with fresh_snapshot=true.")
    return dt.datetime.fromisoformat(result.taken_at)
