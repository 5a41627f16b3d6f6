"""The typed values the tasks of a run hand each other, one per task, serialised once (pydantic) into XCom.

    check ── CheckResult ──► plan ── SourcePlan ──► snapshot ── Captured ──────────────┐
                                              └──► extract ── Extraction ──► replay ── Captured ──► merge
                                                                        └──► heal ── Captured ───────┘
                                                                   list[TableOutcome] ──► one task per table

A value stands for "none" by ``None`` or an empty tuple, never by an empty string or mapping.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import model_validator

from airflow_cdc_provider.core.changelog import ChangelogCommit, ChangelogSettings
from airflow_cdc_provider.core.history import HistoryCommit, HistorySettings
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import Committed, RunPlan, RunRef
from airflow_cdc_provider.core.model import Model
from airflow_cdc_provider.core.modes import Capture, Mode, Status, VerifyStatus
from airflow_cdc_provider.core.partitioning import Partitioning
from airflow_cdc_provider.core.shards import Shard
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import RunDir, TableDir

Columns = tuple[tuple[str, str], ...]  # (name, MySQL COLUMN_TYPE), in the table's order


class CapturedTable(Model):
    """A table this run captures, as the check found it: its Hive target, policy, key and columns now."""

    source: str  # schema.table, as TableName prints it
    hive_table: str  # database.table
    schema_changes: str
    key: tuple[str, ...]  # empty: the table has no key, its whole row is its identity (``core.keys``)
    columns: Columns
    capture: Capture = Capture.BINLOG  # how its changes are found (``capture:``)
    key_declared: bool = False  # the key is the one `key:` names: each snapshot checks its values unique
    spark_conf: tuple[tuple[str, str], ...] = ()  # runtime SQL settings of the merge while it handles this table
    partitioning: Partitioning | None = None  # how its Hive table is partitioned (``partition_by:``); None: not
    changelog: ChangelogSettings | None = None  # its changelog table's settings (``changelog:``); None: none
    history: HistorySettings | None = None  # its snapshots' and history's settings (``history:``); None: none
    shard: Shard | None = None  # a shard of its Hive table (``shards:``); None: the Hive table is its alone
    # The foreign keys with a cascading action it is the child of, as ``core.foreign_keys.ForeignKey`` prints them:
    # why it is captured by a diff though its entry does not say so (the binlog does not hold their changes).
    cascades: tuple[str, ...] = ()

    @property
    def name(self) -> TableName:
        return TableName.parse(self.source)

    @property
    def ledger_id(self) -> str:
        """What one ledger records: the Hive table, or one shard of it."""
        return f"{self.hive_table}#{self.shard.name}" if self.shard is not None else self.hive_table

    def table_dir(self, work_dir: str) -> TableDir:
        return _table_dir(work_dir, self.hive_table, self.shard)


def _table_dir(work_dir: str, hive_table: str, shard: Shard | None) -> TableDir:
    return TableDir(work_dir=work_dir, hive_table=hive_table, shard=shard.path if shard is not None else None)


class RefusedTable(Model):
    """A table named in the configuration that the check refuses (it is not at the source, has no usable key, an
    option that does not fit it…): it is stopped with ``reason``, which says the fix, and the other tables go on. Its
    table task fails for it after the others committed, so the run fails and its alerts fire."""

    source: str
    hive_table: str
    reason: str
    shard: Shard | None = None  # the shard of the Hive table its entry makes it (``shards:``)

    def table_dir(self, work_dir: str) -> TableDir:
        return _table_dir(work_dir, self.hive_table, self.shard)


class SkippedTable(Model):
    """A table a pattern matched that cannot be captured; the others go on without it."""

    source: str
    reason: str


class GoneTable(Model):
    """A table the previous run captured that is no longer at the source; its Hive table is kept as it is."""

    source: str
    hive_table: str


class CheckResult(Model):
    flavor: str
    watermark: Watermark | None  # the server's position at the check; None when no table is read from the binlog
    tables: tuple[CapturedTable, ...]
    skipped: tuple[SkippedTable, ...] = ()
    gone: tuple[GoneTable, ...] = ()
    refused: tuple[RefusedTable, ...] = ()  # named, but cannot be captured: stopped in this run


class Reread(Model):
    """Rows of a table the run reads again from the source besides its binlog range (``stages.reread``): the
    buckets verify found different (replaced whole in the new version), or the rows a condition selects."""

    buckets: int = 0  # how many buckets the table was verified in
    which: tuple[int, ...] = ()  # the buckets read again and replaced
    # A condition as the ``reread`` parameter gave it ("" for the whole table), as text: each task that sends SQL
    # parses it again (``core.condition``) and sends only what it writes from it.
    where: str | None = None
    reason: str = ""


class TablePlan(Model):
    """What this run does to one table (``plan``, recorded in its ledger), and where its files go."""

    table: CapturedTable
    plan: RunPlan
    table_dir: TableDir
    committed: Committed | None = None  # the ledger's committed version when planned
    reread: Reread | None = None

    @property
    def source(self) -> str:
        return self.table.source

    @property
    def mode(self) -> Mode:
        return self.plan.mode

    @property
    def run_dir(self) -> RunDir:
        """This run's files of the table."""
        return self.table_dir.run(self.plan.run.key)


class StoppedTable(Model):
    """A table the check refused, as the plan carries it: the merge fails it with the check's reason, and the status
    reads its work state where its ledger is (it may have versions from before)."""

    table: RefusedTable
    table_dir: TableDir

    @property
    def source(self) -> str:
        return self.table.source


class SourcePlan(Model):
    """The plan of one run over a source: every table with its mode, the tables stopped and the tables left out,
    with why."""

    run: RunRef
    tables: tuple[TablePlan, ...]
    skipped: tuple[SkippedTable, ...] = ()
    gone: tuple[GoneTable, ...] = ()
    stopped: tuple[StoppedTable, ...] = ()  # the tables the check refused (``CheckResult.refused``)
    # The Airflow connection of the tables' work directory (``work_conn_id:``; None: the local disk, or the default
    # credentials): what a reader of their ledgers needs besides ``TablePlan.table_dir`` (``airflow cdc status``).
    work_conn_id: str | None = None

    def of_mode(self, mode: Mode) -> list[TablePlan]:
        return [t for t in self.tables if t.mode == mode]

    @property
    def snapshots(self) -> list[TablePlan]:
        return self.of_mode(Mode.SNAPSHOT)

    @property
    def incrementals(self) -> list[TablePlan]:
        return self.of_mode(Mode.INCREMENTAL)

    @property
    def diffs(self) -> list[TablePlan]:
        return self.of_mode(Mode.DIFF)

    def table(self, source: str) -> TablePlan:
        for table in self.tables:
            if table.source == source:
                return table
        raise KeyError(f"{source} is not in this run's plan")


class TableFailure(Model):
    """A table whose stage failed; the run goes on with the others, then fails naming it."""

    source: str
    stage: str
    error: str


class BrokenChain(Model):
    """A table whose binlog chain broke in the run's range (``stages.extract.ChainBroken``, or a purged binlog):
    the binlog cannot bring it level from its watermark, and the heal task brings it level by a diff."""

    source: str
    why: str  # what happened and where, as the pass or the resume found it
    # A change of its columns only a load anew follows (``stages.extract.ColumnsRetyped``): ``why`` says which.
    reload: bool = False


class Healed(Model):
    """Why a table was healed and what the heal's diff did (``stages.heal``), as the outcome, the run summary, the
    asset event and the metrics report it."""

    why: str
    upserts: int = 0  # rows the diff found changed or new, read in full
    deletes: int = 0  # rows the copy had and the source has no longer
    compared_rows: int = 0  # rows whose hash and digest the server sent, in the buckets whose sums differed
    bytes_sent: int = 0  # what the server sent for the diff, by its own counter
    rows: int = 0  # the table's rows, by the copy's version
    # Loaded anew instead (a snapshot, committed as the next version): a change of its columns no merge onto the
    # version can follow, a column whose Hive type changed or another key (``core.schema.reload_reason``).
    reloaded: bool = False


class ColumnChange(Model):
    """A change of a table's columns met in the range (``core.schema.SchemaChange``), as the run reports it."""

    table: str
    at: str  # where the new columns were first seen
    ddl: str | None  # the statement that changed the table, as logged, with its position
    before: Columns
    after: Columns
    renames: tuple[tuple[str, str], ...] = ()  # (old, new) as the DDL statements name them
    change: str  # in words


class AddedColumn(Model):
    """What a column added in the range holds in the rows that predate it (``core.schema.Fill``)."""

    column: str
    sources: tuple[str, ...] = ()  # the columns it was renamed from, newest first
    value: str  # the constant, in the raw records' encoding (``core.records``), which keeps its type
    needs_value: bool = True


class TableExtraction(Model):
    """One table's part of the run's binlog pass: its range, raw files, counts and schema changes."""

    source: str
    start: Watermark
    end: Watermark
    counts: dict[str, int]  # raw records per operation: I, U, D
    files: tuple[str, ...]
    columns: Columns  # the source's columns at ``end``
    schema_changes: tuple[ColumnChange, ...] = ()
    fills: tuple[AddedColumn, ...] = ()  # what added columns hold in earlier rows
    reread: Reread | None = None  # rows read again into the range (their raw file is the first of ``files``)
    reread_rows: int = 0
    seconds: float = 0.0  # the run's binlog pass, which every table of the run shares
    # A partitioned table's partitions rows left in the range (a delete's, or an update's that moved the row), as
    # the metastore writes their values (``core.partitioning.metastore_value``), sorted: the merge rewrites them.
    left_partitions: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the range holds anything for this table: a row event, a change of its columns, or rows (or
        buckets) read again."""
        return bool(sum(self.counts.values()) or self.schema_changes or self.reread is not None)


class Extraction(Model):
    """The run's one binlog pass: the range read and each incremental table's part of it."""

    start: Watermark | None = None  # None when no table needed the binlog
    end: Watermark | None = None
    as_of: dt.datetime | None = None  # the moment the range reflects: the interval end, or when it started
    events: int = 0
    tables: tuple[TableExtraction, ...] = ()
    failed: tuple[TableFailure, ...] = ()
    broken: tuple[BrokenChain, ...] = ()  # tables left out of the range, to be healed (``run: on_broken_chain``)

    @property
    def changed(self) -> list[TableExtraction]:
        return [t for t in self.tables if t.changed]

    @property
    def idle(self) -> list[TableExtraction]:
        return [t for t in self.tables if not t.changed]


class MergeInput(Model):
    """What the merge takes for one table, made by the snapshot or by the replay."""

    source: str
    mode: Literal[Mode.SNAPSHOT, Mode.INCREMENTAL, Mode.DIFF, Mode.HEAL]
    upsert_files: tuple[str, ...]
    delete_file: str | None = None  # None for a snapshot
    fills_file: str | None = None  # what columns added in the range hold in the table's other rows
    # Each added column of the fills file and the columns it takes its values from (a rename's old name).
    fill_sources: tuple[tuple[str, tuple[str, ...]], ...] = ()
    columns: Columns  # the upsert files' columns
    key: tuple[str, ...]  # the columns that identify a row: every column of a table with no key
    end: Watermark | None  # None: read without the binlog (diff mode, or a snapshot of a diff-mode table)
    as_of: dt.datetime
    source_columns: Columns  # the source's columns at ``end``: where the next run starts
    upserts: int = 0
    deletes: int = 0
    reread: Reread | None = None  # its ``which`` buckets are replaced whole: the origin's rows in them go
    changes: dict[str, int] = {}  # row changes read per operation: I, U, D (a snapshot's rows count as I)
    start: Watermark | None = None  # where the range began (None for a snapshot)
    seconds: dict[str, float] = {}  # per stage so far: snapshot, or extract and replay
    left_partitions: tuple[str, ...] = ()  # ``TableExtraction.left_partitions``
    # Every row event of the range (``stages.events``), for a table whose changelog has ``mode: all``; else None.
    events_file: str | None = None
    digests_file: str | None = None  # the row digests of the version it makes (diff mode, ``stages.diff``)
    healed: Healed | None = None  # a heal's (mode ``heal``): why, and what its diff did


class Captured(Model):
    """A capture stage's result: a merge input per table it finished, and the tables that failed."""

    inputs: tuple[MergeInput, ...] = ()
    failed: tuple[TableFailure, ...] = ()


class TableOutcome(Model):
    """What the run did to one table, as the UI shows it (one task per table) and the ledger records it.

    ``committed``: a new version; ``idle``: no change in the range, the watermark advanced on the same version;
    ``unchanged``: the merge found the table already past this run; ``nothing``: the plan had nothing to do;
    ``failed``: see ``error``.
    """

    source: str
    hive_table: str
    mode: Mode
    status: Status
    reason: str = ""
    shard: Shard | None = None  # the shard of the Hive table it is (``shards:``)
    version: int | None = None
    location: str | None = None
    rows: int | None = None
    upserts: int = 0
    deletes: int = 0
    watermark: Watermark | None = None
    added_columns: tuple[str, ...] = ()  # columns the Hive table gained in this run
    error: str | None = None
    healed: Healed | None = None  # the table's chain broke in the range and a diff brought it level
    warnings: tuple[str, ...] = ()  # what the run did that a reader should know (e.g. DATETIMEs in a DST gap)
    seconds: dict[str, float] = {}  # per stage: snapshot, or extract, replay; merge
    changes: dict[str, int] = {}  # row changes read per operation: I, U, D (a snapshot's rows count as I)
    start: Watermark | None = None  # where the range began (None for a snapshot)
    as_of: dt.datetime | None = None  # the moment the version reflects
    # A partitioned table's commit: its partitions, and those rewritten (new ones included) and emptied.
    partitions: int | None = None
    rewritten_partitions: int = 0
    emptied_partitions: int = 0
    changelog: ChangelogCommit | None = None  # the commit's changelog partition (``core.changelog``)
    snapshot_days: tuple[str, ...] = ()  # the days whose daily snapshot the commit is (``core.history``)
    history: HistoryCommit | None = None  # its commit to the SCD2 history


class KeyDifference(Model):
    """A key whose row differs: ``missing`` from the copy, ``extra`` in the copy, or ``different`` in value."""

    key: str  # the key's text: its columns' values joined by #
    kind: Literal["missing", "extra", "different"]




class VerifySlice(Model):
    """The part of a table a rolling verify checks in one run, ``index`` of ``of``.

    For a one-column integer key, a range of its values (``key_range``: from the first, included, to the second,
    excluded; None an open end): both sides order integers alike, and the server reads just that range through the
    key's index. For any other key, the buckets ``b`` with ``b % of == index``: a string key is ordered by its
    collation on the server and by its bytes in Spark, so a range would not hold the same rows on both sides (the
    reason verify has buckets); the server then reads each row's key to tell its bucket, and builds the text and
    digest of the slice's rows only."""

    index: int
    of: int
    key_range: tuple[int | None, int | None] | None = None

    @model_validator(mode="after")
    def _valid(self) -> VerifySlice:
        if not 0 <= self.index < self.of:
            raise ValueError(f"A verify slice's index must be in 0..{self.of - 1}, not {self.index}.")
        return self

    def __str__(self) -> str:
        return f"slice {self.index + 1} of {self.of}"


class TableVerification(Model):
    """What verify found for one table: its committed version against the source.

    ``different``: rows differ that the binlog did not change since the version's watermark (``keys`` lists up to
    ``KEYS_LISTED`` of them; ``buckets`` all the buckets they are in); ``not_verified``: see ``reason``.
    """

    source: str
    hive_table: str
    status: VerifyStatus
    reason: str = ""
    version: int | None = None
    watermark: Watermark | None = None  # the version's
    rows: int = 0  # rows at the source when summed
    buckets: int = 0
    differing_buckets: tuple[int, ...] = ()  # with a real difference
    unexamined_buckets: int = 0  # differing sums beyond the detail limit: not looked into
    repair_buckets: tuple[int, ...] = ()  # what a repair reads again: the differences' buckets, the unexamined ones
    differences: int = 0  # keys that differ
    keys: tuple[KeyDifference, ...] = ()
    in_flight: int = 0  # keys that differ because the binlog changed them after the version: not a fault
    # The buckets in which the SCD2 history's open rows differ from the version's rows (``core.history``): the
    # history no longer says what the table holds, whatever the source does.
    history_buckets: tuple[int, ...] = ()
    seconds: dict[str, float] = {}
    slice: VerifySlice | None = None  # a rolling verify's part of the table; None: the whole table


KEYS_LISTED = 100

# The XCom keys the tasks push under besides their return values, which the status and the tables page read
# (``hooks.run_records``): the merge's outcomes (one per table), a verify's findings when it checked any table, the
# plan's tables in short (``core.status.SourceTables``).
OUTCOMES_KEY = "outcomes"
VERIFICATION_KEY = "verification"
TABLES_KEY = "tables"


class Verification(Model):
    """The verify task's result: one entry per table of the run it looked at."""

    tables: tuple[TableVerification, ...] = ()

    @property
    def different(self) -> list[TableVerification]:
        """The tables that differ from the source, or whose history differs from them."""
        return [t for t in self.tables if t.status == VerifyStatus.DIFFERENT or t.history_buckets]


__all__ = [
    "AddedColumn", "BrokenChain", "ColumnChange", "Healed", "KEYS_LISTED", "KeyDifference", "OUTCOMES_KEY", "Reread",
    "TABLES_KEY", "VERIFICATION_KEY",
    "TableVerification", "Verification",
    "Captured", "CapturedTable", "CheckResult", "Columns", "Extraction",
    "GoneTable", "MergeInput", "RefusedTable", "SkippedTable", "SourcePlan", "StoppedTable", "TableExtraction",
    "TableFailure", "TableOutcome",
    "TablePlan",
]
