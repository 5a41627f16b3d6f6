"""The binlog pass of a run: every incremental table's row events read in one pass, into raw files per table.

Where each table is read from (its watermark, or the same GTID position after a failover), the rows its plan
asks to read again (before the range's high watermark is taken), the one pass (``stages.extract``), a second
short pass when the range ended before those rows were read, and what the pass made of each table: its raw
files, a failure, or a broken chain for the heal task. The extract task runs it and reports it; its tests call it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_cdc_provider.core.batches import DEFAULT_READ_BUFFER
from airflow_cdc_provider.core.contract import BrokenChain, Extraction, TableExtraction, TableFailure, TablePlan
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.flavor import ServerFlavor
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.merge import layout_problem
from airflow_cdc_provider.core.planning import HEALS
from airflow_cdc_provider.core.progress import Progress, binlog_offset, binlog_share
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.reread import (
    held_buckets,
    replaced,
    replay_order,
    reread_clause,
    reread_waits,
    second_pass_needed,
)
from airflow_cdc_provider.core.resume import BinlogFacts, BinlogFile, Unreadable, UnreadableKind, read_positions
from airflow_cdc_provider.core.watermark import Watermark, split_binlog_file
from airflow_cdc_provider.stages.extract import (
    BinlogSource,
    ChainBroken,
    ColumnsRetyped,
    ExtractResult,
    TableRange,
    added_columns_of,
    extract,
    in_one_directory,
    reported,
)
from airflow_cdc_provider.stages.reread import Reads, RereadResult, buckets_of, drop_keys, raw_uids, reread
from airflow_cdc_provider.stages.task_log import TaskLog
from airflow_cdc_provider.storage import WorkStore


class PassSource(BinlogSource, Protocol):
    """What the pass asks of the source (``MySqlSourceHook``) besides the binlog stream."""

    @property
    def flavor(self) -> ServerFlavor: ...

    def binlog_facts(self, watermarks: Sequence[Watermark] = ()) -> BinlogFacts: ...

    def binlogs(self) -> list[BinlogFile]: ...

    def current_watermark(self) -> Watermark: ...

    def watermark_at(self, file: str, position: int) -> Watermark: ...

    def added_column_defaults(self, table: TableName | str, columns: Sequence[str]) -> dict[str, Any]: ...

    def column_charsets(self, table: TableName | str) -> dict[str, str]: ...

    def streaming_reads(self) -> contextlib.AbstractContextManager[Reads]: ...


@dataclass(frozen=True)
class PassSettings:
    """How the pass goes (the extract task's arguments, from `source:` and `run:`)."""

    on_broken_chain: str = HEALS  # heal: a table whose chain broke goes to the heal task; stop: it fails
    on_purged_binlog: str = HEALS  # heal: a table whose binlog from its watermark was purged goes there too
    decoders: int = 0  # processes decoding row events beside the pass (``stages.decode_workers``)
    read_buffer: int = DEFAULT_READ_BUFFER  # bytes of rows a re-read holds before writing them
    progress_seconds: float = 10.0  # how often the pass logs how far it is


@dataclass(frozen=True)
class PassDone:
    """The run's extraction, and what the pass read (for the metrics): none when no table read the binlog."""

    extraction: Extraction
    read_bytes: int = 0


def binlog_pass(source: PassSource, tables: Sequence[TablePlan], store: Callable[[str], WorkStore],
                settings: PassSettings, log: TaskLog) -> PassDone:
    """The binlog pass of ``tables`` (a run's incremental ones); ``store`` gives the work store of a run
    directory's root. Each table's own failure is returned with the others' results."""
    if not tables:
        log.info("No table reads the binlog in this run.")
        return PassDone(Extraction())
    failed: list[TableFailure] = []
    broken: list[BrokenChain] = []
    starts = _starts(source, tables, failed, broken, settings, log)
    readable = [t for t in tables if t.source in starts]
    if not readable:
        return PassDone(Extraction(failed=tuple(failed), broken=tuple(broken)))
    start = min(starts.values())
    started = dt.datetime.now(dt.UTC)
    clock = time.monotonic()
    # Every table of a run shares its target moment.
    stop_before = min((t.plan.stop_before for t in readable if t.plan.stop_before), default=None)
    as_of = min(stop_before, started) if stop_before else started
    work = store(readable[0].run_dir.root)
    targets = {t.source: t.run_dir.raw for t in readable}
    with contextlib.ExitStack() as staged:  # on an object store, uploaded when the pass has ended
        local = {name: staged.enter_context(work.staging(target)) for name, target in targets.items()}
        # Read again before the range's high watermark is taken, after the tables' watermarks: inside the range.
        rereads = read_again(source, readable, local, failed, settings, log)
        readable = [t for t in readable if not any(f.source == t.source for f in failed)]
        result, high, sizes = _pass(source, readable, start, starts, stop_before, local, settings, log)
        if second_pass_needed(result.end, high, rereads):
            _drop_newer(source, readable, rereads, result.end, high, log)
    # The range's end with its GTID state: a pass cut at ``stop_before`` ends at a position whose GTID state the
    # server is asked for; one that ran to the high watermark has it already.
    end = result.end if result.end == high else source.watermark_at(result.end.file, result.end.position)
    read_bytes = binlog_offset(end.coordinate, sizes) - binlog_offset(start.coordinate, sizes)
    log.info("One binlog pass from %s to %s for %d tables: %d row events in %d bytes", start, end, len(readable),
             result.events, read_bytes)
    outcomes = [_outcome(t, result, rereads.get(t.source), starts[t.source], end, clock,
                         functools.partial(work.location_of, staging_dir=local[t.source], location=targets[t.source]),
                         settings, log)
                for t in readable]
    extracted = [o for o in outcomes if isinstance(o, TableExtraction)]
    failed += [o for o in outcomes if isinstance(o, TableFailure)]
    broken += [o for o in outcomes if isinstance(o, BrokenChain)]
    changed = sum(1 for t in extracted if t.changed)
    log.info("%d tables changed in the range, %d idle, %d failed, %d to heal", changed, len(extracted) - changed,
             len(failed), len(broken))
    return PassDone(Extraction(start=start, end=end, as_of=as_of, events=result.events, tables=tuple(extracted),
                               failed=tuple(failed), broken=tuple(broken)), read_bytes)


def _header(table: TablePlan) -> RawHeader:
    return RawHeader(table.source, table.table.columns, table.table.key)


def every_event(tables: Iterable[TablePlan]) -> set[str]:
    """The tables whose changelog has every row event (``mode: all``): their updates' before images are kept."""
    return {t.source for t in tables if t.table.changelog is not None and t.table.changelog.mode == "all"}


def _starts(source: PassSource, tables: Sequence[TablePlan], failed: list[TableFailure], broken: list[BrokenChain],
            settings: PassSettings, log: TaskLog) -> dict[str, Watermark]:
    """Where the binlog is read from for each table (``core.resume``): its watermark, or the same GTID
    position on this server after a failover. A table that cannot be read from its watermark goes into
    ``failed``, or into ``broken`` when its binlog was purged and ``on_purged_binlog`` heals."""
    starts = {}
    for table in tables:  # a layout that changed needs a fresh snapshot, and no reading of the binlog
        if table.committed is None:  # nothing recorded to compare with: the merge checks the version it finds
            continue
        problem = layout_problem(table.table.hive_table, table.committed.partitioning, table.table.partitioning)
        if problem:
            log.error("%s is left out of this run: %s", table.source, problem)
            failed.append(TableFailure(source=table.source, stage="extract", error=problem))
    tables = [t for t in tables if not any(f.source == t.source for f in failed)]
    watermarks = [t.plan.resume_from for t in tables]
    for table, where in zip(tables, read_positions(watermarks, source.binlog_facts(watermarks))):
        if isinstance(where, Unreadable) and where.kind is UnreadableKind.PURGED and settings.on_purged_binlog == HEALS:
            log.warning("%s cannot be read from its watermark, and is healed by a diff (on_purged_binlog: heal): %s",
                        table.source, where.reason)
            broken.append(BrokenChain(source=table.source, why=where.reason))
            continue
        if isinstance(where, Unreadable):
            log.error("%s cannot be read from its watermark: %s", table.source, where.message)
            failed.append(TableFailure(source=table.source, stage="extract", error=where.message))
            continue
        if where != table.plan.resume_from:
            log.warning("%s: the watermark %s was taken on another server (server id %s); its GTID position is at "
                        "%s on this one (server id %s), and the binlog is read from there", table.source,
                        table.plan.resume_from, table.plan.resume_from.server_id, where, where.server_id)
        starts[table.source] = where
    return starts


def _pass(source: PassSource, tables: list[TablePlan], start: Watermark, starts: dict[str, Watermark],
          stop_before: dt.datetime | None, local: Mapping[str, Any], settings: PassSettings,
          log: TaskLog) -> tuple[ExtractResult, Watermark, list[tuple[int, int]]]:
    """The one binlog pass (``stages.extract``) from ``start`` to the server's position now (the range's high
    watermark, taken here), or to ``stop_before``; with the binlog files' sizes, by which its progress and the
    bytes read are measured."""
    every = every_event(tables)
    ranges = [TableRange(RawHeader(t.source, t.plan.start_columns or t.table.columns, t.table.key), local[t.source],
                         _header(t), starts.get(t.source), t.table.schema_changes, t.table.partitioning,
                         t.source in every) for t in tables]
    high = source.current_watermark()
    sizes = [(split_binlog_file(f.name)[1], f.size) for f in source.binlogs()]
    progress = Progress(f"binlog pass for {len(tables)} tables", log.info, every=settings.progress_seconds,
                        unit="row events")
    result = extract(source, ranges, start, high, stop_before=stop_before,
                     defaults=source.added_column_defaults, charsets=source.column_charsets, decoders=settings.decoders,
                     progress=lambda events, at: progress.update(
                         events, binlog_share(start.coordinate, at, high.coordinate, sizes)))
    progress.finish(result.events)
    return result, high, sizes


def _outcome(table: TablePlan, result: ExtractResult, done: RereadResult | None, start: Watermark, end: Watermark,
             clock: float, located: Callable[[str], str], settings: PassSettings,
             log: TaskLog) -> TableExtraction | TableFailure | BrokenChain:
    """What the pass made of one table: its raw files (the re-read rows first) and counts, or why the range
    left it out: a failure, or a broken chain for the heal task (``on_broken_chain: heal``)."""
    name = table.source
    error = result.failed.get(name)
    if isinstance(error, ChainBroken) and settings.on_broken_chain == HEALS:
        reload = isinstance(error, ColumnsRetyped)
        log.warning("%s: its binlog chain broke in the range, and the heal task %s: %s", name,
                    "loads it anew" if reload else "brings it level by a diff", error.why)
        return BrokenChain(source=name, why=error.why, reload=reload)
    if name in result.failed:
        log.error("%s is left out of this run: %s", name, result.failed[name])
        return TableFailure(source=name, stage="extract", error=str(result.failed[name]))
    for change in result.schema_changes[name]:
        log.warning("Schema change taken on (schema_changes: %s): %s", table.table.schema_changes, change.headline())
    files = replay_order(done.files if done else [], result.files[name])
    return TableExtraction(
        source=name, start=start, end=end, counts=result.counts[name],
        files=tuple(located(f) for f in files), columns=result.headers[name].columns,
        schema_changes=tuple(reported(c) for c in result.schema_changes[name]),
        fills=added_columns_of(result.fills[name]), reread=replaced(table.reread, done.held if done else None),
        reread_rows=done.rows if done else 0, seconds=round(time.monotonic() - clock, 3),
        left_partitions=result.left_partitions[name])


def read_again(source: PassSource, tables: list[TablePlan], local: Mapping[str, Any], failed: list[TableFailure],
               settings: PassSettings, log: TaskLog) -> dict[str, RereadResult]:
    """Read the rows each table's plan asks for again (``stages.reread``) into its raw directory (``local``, by
    table). A table whose condition is refused goes into ``failed``: parsed again here from the plan's text, so a
    plan written by hand cannot reach the server with anything but the provider's SQL."""
    done: dict[str, RereadResult] = {}
    for table in tables:
        ask = table.reread
        if ask is None:
            continue
        if reread_waits(table):
            log.warning("%s: its columns changed since its version, so the rows asked for (%s) are read again by the "
                        "next run, once this one has merged the change", table.source, ask.reason)
            continue
        header = _header(table)
        with source.streaming_reads() as reads:
            try:
                # Parsed again here from the plan's text: what reaches the server is only ever the provider's SQL.
                condition = reread_clause(header, ask.buckets, ask.which, ask.where, source.flavor.is_mariadb)
                done[table.source] = reread(reads, header, condition, local[table.source], settings.read_buffer)
            except CdcError as exc:
                log.error("%s: %s", table.source, exc)
                failed.append(TableFailure(source=table.source, stage="reread", error=str(exc)))
                continue
        log.info("%s: %d rows read again from the source (%s)", table.source, done[table.source].rows, ask.reason)
    return done


def _drop_newer(source: PassSource, tables: list[TablePlan], rereads: dict[str, RereadResult], end: Watermark,
                high: Watermark, log: TaskLog) -> None:
    """The range ends before the rows were read again (at its ``stop_before``): a re-read row the binlog
    changed after the range's end is newer than the range, and is dropped; the next run's range has it. A
    bucket to replace that holds such a key is held back (``core.reread.held_buckets``)."""
    plans = {t.source: t for t in tables}
    headers = [RawHeader(t.source, t.table.columns, t.table.key) for t in tables if t.source in rereads]
    with tempfile.TemporaryDirectory(prefix="cdc-reread-") as scratch:
        after = extract(source, in_one_directory(headers, os.path.join(scratch, "raw"), headers, "evolve"), end,
                        high, charsets=source.column_charsets)
        for n, header in enumerate(headers):
            newer_files = after.files.get(header.table, [])
            dropped = drop_keys(rereads[header.table].files, raw_uids(newer_files))
            rereads[header.table].rows -= dropped
            log.info("%s: %d re-read rows were changed after the range's end and are left to the next run",
                     header.table, dropped)
            ask = plans[header.table].reread
            if ask is not None and ask.which:  # only buckets asked for are looked for: the others cost nothing
                changed = buckets_of(newer_files, header, ask.buckets, os.path.join(scratch, str(n)))
                held = rereads[header.table].held = held_buckets(ask, changed)
                if held:
                    log.info("%s: buckets %s changed after the range's end and are repaired by a later run",
                             header.table, sorted(held))
