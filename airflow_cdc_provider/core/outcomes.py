"""What the merge task decides for each table of a run: its outcome, or that its watermark advances on the same
version, or that it goes to Spark; and, once Spark is done, what its result means for the table and its ledger.

Every rule here is a pure function of the run's typed values (``core.contract``); what the ledger says is asked
through callables, so that the merge task keeps every read and write and these rules can be tested alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airflow_cdc_provider.core.contract import (
    Captured,
    Extraction,
    MergeInput,
    SourcePlan,
    StoppedTable,
    TableExtraction,
    TableOutcome,
    TablePlan,
)
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.ledger import Committed, RunPlan, RunRef
from airflow_cdc_provider.core.merge import MergeSpec, TableMerge
from airflow_cdc_provider.core.modes import Mode, Status
from airflow_cdc_provider.core.verify import Replaced

EARLIER_ATTEMPT = "committed by an earlier attempt of this task"
NO_CAPTURE = "its capture did not finish: see the snapshot, extract, replay or heal task's log"
T = TypeVar("T")


def deal(items: list[T], count: int) -> list[list[T]]:
    """``items`` dealt into at most ``count`` batches of nearly equal size, in order."""
    count = max(1, min(count, len(items)))
    size, extra = divmod(len(items), count)
    batches, at = [], 0
    for n in range(count):
        end = at + size + (1 if n < extra else 0)
        batches.append(items[at:end])
        at = end
    return [b for b in batches if b]


def table_task_batches(written: list[T], max_map_length: int) -> list[list[T]]:
    """The tables each mapped table task takes: one table per task, as long as their number fits in Airflow's
    ``max_map_length``; beyond, the tables dealt into that many tasks in order, so that a source with more tables
    than the limit still runs (a longer list would fail to expand after every commit, on each run and retry)."""
    if len(written) <= max_map_length:
        return [[item] for item in written]
    return deal(written, max(1, max_map_length))


def outcome(table: TablePlan, status: Status, **fields: Any) -> TableOutcome:
    """The table's outcome with ``status``: the table's names and mode come from its plan."""
    fields.setdefault("mode", table.mode)
    return TableOutcome(source=table.source, hive_table=table.table.hive_table, status=status,
                        shard=table.table.shard, **fields)


def stopped_outcome(table: StoppedTable) -> TableOutcome:
    """A table the check refused: failed with the check's reason (which says the fix); the run did nothing to it."""
    refused = table.table
    return TableOutcome(source=refused.source, hive_table=refused.hive_table, mode=Mode.NOTHING, status=Status.FAILED,
                        shard=refused.shard, error=f"check: {refused.reason}")


@dataclass
class Sorted:
    """A run's tables as the merge task finds them before Spark.

    ``decided``: the outcome of each table that needs no Spark work, in the order they were decided;
    ``advances``: the commit each idle table records (its outcome, in ``decided``, holds only once it is
    recorded); ``merging``: each table that goes to Spark, with its input and its spec.
    """

    decided: dict[str, TableOutcome] = field(default_factory=dict)
    advances: list[tuple[TablePlan, Committed]] = field(default_factory=list)
    merging: list[tuple[TablePlan, MergeInput, MergeSpec]] = field(default_factory=list)


def sort_tables(plan: SourcePlan, snapshot: Captured | None, extraction: Extraction | None, replay: Captured | None,
                recorded: Callable[[TablePlan], RunPlan | None], holder: Callable[[TablePlan], RunRef | None],
                spec: Callable[[TablePlan, MergeInput], MergeSpec], heal: Captured | None = None) -> Sorted:
    """Sort the run's tables into decided outcomes, idle tables to advance, and inputs to merge.

    A table the check refused (``SourcePlan.stopped``) is failed with its reason. A capture value is None when its
    task failed as a whole: its tables end up failed, the others go on. ``heal``
    is the heal task's: the tables whose chain broke in the range, brought level by a diff.
    ``recorded`` gives the run's plan as the table's ledger holds it (an earlier attempt of the task may have
    committed it), ``holder`` the run holding the table's lock, ``spec`` the merge spec of an input (raising
    ``CdcError`` or ``ValueError`` when the input cannot be merged). Each is asked only of a table that gets so far.
    """
    found = Sorted()
    decided = found.decided
    for stopped in plan.stopped:
        decided[stopped.source] = stopped_outcome(stopped)
    for table in plan.of_mode(Mode.NOTHING):
        decided[table.source] = outcome(table, Status.NOTHING, reason=table.plan.reason)
    for failure in (f for part in (snapshot, extraction, replay, heal) if part is not None for f in part.failed):
        decided[failure.source] = outcome(plan.table(failure.source), Status.FAILED,
                                          error=f"{failure.stage}: {failure.error}")
    if extraction is not None:
        for part in extraction.idle:
            table = plan.table(part.source)
            advanced = advance(table, part, extraction)
            decided[table.source] = advanced.outcome
            if advanced.committed is not None:
                found.advances.append((table, advanced.committed))
    inputs = [i for part in (snapshot, replay, heal) if part is not None for i in part.inputs
              if i.source not in decided]
    for merge_input in inputs:
        table = plan.table(merge_input.source)
        if merge_input.mode == Mode.DIFF and not (merge_input.upserts or merge_input.deletes):
            advanced = advance_diff(table, merge_input)
            decided[table.source] = advanced.outcome
            if advanced.committed is not None:
                found.advances.append((table, advanced.committed))
            continue
        earlier = recorded(table)
        if earlier is not None and earlier.output_version is not None:
            # A retry after the commit: the table already is what this run makes of it.
            decided[table.source] = outcome(
                table, Status.COMMITTED, reason=EARLIER_ATTEMPT, version=earlier.output_version, watermark=earlier.end,
                upserts=merge_input.upserts, deletes=merge_input.deletes)
            continue
        held_by = holder(table)
        if held_by != plan.run:  # its lock was taken over: another run may be writing the table
            decided[table.source] = outcome(table, Status.FAILED, error=f"This run does not hold the table's lock "
                                            f"(held by {held_by}); nothing was changed.")
            continue
        try:
            found.merging.append((table, merge_input, spec(table, merge_input)))
        except (CdcError, ValueError) as exc:
            decided[table.source] = outcome(table, Status.FAILED, error=f"merge: {exc}")
    merging = {table.source for table, _, _ in found.merging}
    for table in plan.tables:  # planned for work, but its input never came: its stage's task failed as a whole
        if table.source not in decided and table.source not in merging:
            decided[table.source] = outcome(table, Status.FAILED, error=NO_CAPTURE)
    return found


@dataclass(frozen=True)
class Advance:
    """An idle table's step: the commit to record (None when there is none to make), and the table's outcome."""

    outcome: TableOutcome
    committed: Committed | None = None


def advance(table: TablePlan, part: TableExtraction, extraction: Extraction) -> Advance:
    """An idle table: the same version now reflects the source as of the range's end too.

    The data did not change, so the commit is the ledger's alone, one atomic write. No metastore switch can be
    pending from an earlier run: such a run had changes in this table's range, and so would this one.
    """
    committed, as_of = table.committed, extraction.as_of
    if committed is None or as_of is None:
        return Advance(outcome(table, Status.FAILED, error="an incremental plan without a committed version, or a "
                                                      "range without its moment"))
    advanced = Committed(version=committed.version, location=committed.location, watermark=part.end, as_of=as_of,
                         run=table.plan.run, mode=table.plan.mode, columns=part.columns,
                         partitioning=committed.partitioning, rows=committed.rows)
    return Advance(outcome(table, Status.IDLE,
                           reason=f"no change in the range: version {committed.version} now reflects the source as "
                           f"of {as_of.isoformat()}", version=committed.version,
                           location=committed.location, watermark=part.end, start=committed.watermark, as_of=as_of,
                           seconds={"extract": part.seconds}), advanced)


def advance_diff(table: TablePlan, found: MergeInput) -> Advance:
    """A diff-mode table whose diff found no change: the same version now reflects the source as of the diff's
    read, and its digests are the diff's (the same rows')."""
    committed = table.committed
    if committed is None:
        return Advance(outcome(table, Status.FAILED, error="a diff without a committed version"))
    advanced = committed.model_copy(update={"as_of": found.as_of, "run": table.plan.run, "mode": table.plan.mode,
                                            "columns": found.source_columns, "digests": found.digests_file})
    return Advance(outcome(table, Status.IDLE, reason=f"no change found by the diff: version {committed.version} now "
                           f"reflects the source as of {found.as_of.isoformat()}", version=committed.version,
                           location=committed.location, as_of=found.as_of, seconds=found.seconds), advanced)


def gap_warning(result: TableMerge, spec: MergeSpec) -> str | None:
    """What a reader of the table should know of DATETIMEs that fell in a daylight-saving gap, or None."""
    if not result.datetimes_in_gaps:
        return None
    return (f"{result.datetimes_in_gaps} rows hold a DATETIME that does not exist in {spec.datetime_zone} (a "
            "daylight-saving gap): written as the time after the gap")


def merge_commit(table: TablePlan, spec: MergeSpec, result: TableMerge) -> Committed:
    """What the ledger records for a table the merge job committed."""
    if result.version is None or result.location is None:
        raise ValueError(f"The merge job says it committed {table.source} without the version it wrote.")
    return spec.committed(result.version, result.location, result.rows)


def merged(table: TablePlan, merge_input: MergeInput, spec: MergeSpec, result: TableMerge) -> TableOutcome:
    """The outcome of a table the merge job handled: its result, what the run read, and the run's warnings."""
    warnings = [table.plan.warning] if table.plan.warning else []
    gap = gap_warning(result, spec)
    if gap is not None:
        warnings.append(gap)
    committed = result.status == Status.COMMITTED
    return outcome(
        table, result.status, mode=merge_input.mode, healed=merge_input.healed, reason=result.reason,
        version=result.version, location=result.location,
        rows=result.rows, upserts=merge_input.upserts, deletes=merge_input.deletes,
        watermark=spec.end if committed else None, added_columns=result.added_columns, error=result.error,
        warnings=tuple(warnings), seconds={**merge_input.seconds, "merge": result.seconds},
        changes=merge_input.changes, start=merge_input.start, as_of=spec.as_of if committed else None,
        partitions=result.partitions, rewritten_partitions=result.rewritten_partitions,
        emptied_partitions=result.emptied_partitions, changelog=result.changelog,
        snapshot_days=result.snapshot_days, history=result.history)


def repair_settled_by(table: TablePlan, merge_input: MergeInput) -> Replaced | None:
    """What a committed table's new version read again from the source, settling a pending repair: the whole
    table for a snapshot and for a heal (its diff compared every row), the re-read buckets otherwise; None when
    it read nothing again (a repair stays)."""
    if table.mode == Mode.SNAPSHOT or merge_input.mode in (Mode.SNAPSHOT, Mode.HEAL):
        return Replaced()
    reread = merge_input.reread
    if reread is not None and reread.which:
        return Replaced(reread.which)
    return None
