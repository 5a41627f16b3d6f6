"""Verify: a Hive version against its source, bucket by bucket, with writes in flight told from real differences.

Both sides put each row in a bucket, CRC32 of the text of its key (``core.checksum``) modulo the number of
buckets, and sum each bucket: its row count and the XOR of its rows' digests (the first 64 bits of each row
text's hash). Buckets, not key ranges: the server orders a string key by its collation (``'a' = 'A'`` in most),
Spark by its bytes, so a range of keys would not hold the same rows on both sides; a bucket does. The server still
reads in key order, a range of keys at a time, each range adding to every bucket (so no query runs long on a busy
primary).

A bucket whose sums differ is looked into: both sides list its rows' key texts with their rows' hashes, and the keys
that differ are the difference, less the keys whose rows the binlog changed between the Hive version's
watermark and the end of the check (the copy has not had those changes yet: they are not a fault).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import model_validator

from airflow_cdc_provider.core.checksum import bucket_of
from airflow_cdc_provider.core.contract import (
    KEYS_LISTED,
    KeyDifference,
    SourcePlan,
    TableOutcome,
    TablePlan,
    TableVerification,
    VerifySlice,
)
from airflow_cdc_provider.core.history import history_table
from airflow_cdc_provider.core.identifiers import validate_hive_name, validate_identifier
from airflow_cdc_provider.core.ledger import Committed, RunRef
from airflow_cdc_provider.core.merge import version_dir_problem
from airflow_cdc_provider.core.model import Instant, Model
from airflow_cdc_provider.core.modes import Status, VerifyStatus
from airflow_cdc_provider.core.shards import Shard
from airflow_cdc_provider.core.types import ColumnType
from airflow_cdc_provider.core.workdir import location_problem
from airflow_cdc_provider.core.zones import zone_problem


@dataclass(frozen=True)
class BucketSum:
    """A bucket's row count and the XOR of its rows' digests (the first 64 bits of each row text's hash, unsigned)."""

    rows: int
    digest: int

    def plus(self, other: BucketSum) -> BucketSum:
        """Two parts of one bucket (two ranges of keys read apart) as one."""
        return BucketSum(self.rows + other.rows, self.digest ^ other.digest)


EMPTY = BucketSum(0, 0)


def bucket_count(rows: int, bucket_rows: int) -> int:
    """How many buckets a table of ``rows`` rows gets, ``bucket_rows`` rows each on average."""
    return max(1, math.ceil(rows / max(1, bucket_rows)))


def differing_buckets(source: Mapping[int, BucketSum], copy: Mapping[int, BucketSum]) -> list[int]:
    """The buckets whose sums differ (a bucket absent on one side is empty there)."""
    return sorted(b for b in set(source) | set(copy) if source.get(b, EMPTY) != copy.get(b, EMPTY))


@dataclass(frozen=True)
class RowDifference:
    """A key whose row differs: ``missing`` from the copy, ``extra`` in the copy, or ``different``."""

    key: str
    kind: str


def row_differences(source: Mapping[str, str], copy: Mapping[str, str],
                    changed: Collection[str] = ()) -> list[RowDifference]:
    """The rows of looked-into buckets that differ, by key text (each side's key text → row text's hash), less the keys
    the binlog changed since the copy's watermark."""
    found = []
    for key in sorted(set(source) | set(copy)):
        if key in changed or source.get(key) == copy.get(key):
            continue
        kind = "missing" if key not in copy else "extra" if key not in source else "different"
        found.append(RowDifference(key, kind))
    return found


Sums = dict[int, tuple[int, int]]  # (rows, digest) by bucket


def sums_of(sums: Mapping[int, BucketSum]) -> Sums:
    return {b: (s.rows, s.digest) for b, s in sums.items()}


def bucket_sums(sums: Sums) -> dict[int, BucketSum]:
    return {int(b): BucketSum(*s) for b, s in sums.items()}


def slice_buckets(rows: int, bucket_rows: int, part: VerifySlice | None) -> int:
    """How many buckets a table of ``rows`` rows is checked in: ``bucket_count``, as a whole verify's (a range of
    keys then holds a part of each, and a repair reads again a bucket of the table's usual size); a slice of
    buckets, at least one bucket per slice, so that no slice is empty while another holds the table."""
    if part is not None and part.key_range is not None:
        return bucket_count(rows, bucket_rows)
    return max(bucket_count(rows, bucket_rows), part.of if part is not None else 1)


def key_slice(index: int, of: int, low: int, high: int) -> VerifySlice:
    """Slice ``index`` of ``of`` of a one-column integer key whose values run from ``low`` to ``high`` (the server's
    MIN and MAX now): equal ranges of values, the first open below and the last open above, so that a key the copy
    still holds outside them (gone from the source since) is in a slice too."""
    width = max(1, -(-(high - low + 1) // of))
    start = None if index == 0 else low + index * width
    end = None if index == of - 1 else low + (index + 1) * width
    return VerifySlice(index=index, of=of, key_range=(start, end))


def key_range_condition(name: str, part: VerifySlice | None) -> tuple[str, list[int]]:
    """The SQL condition (with ``%s`` placeholders, ``name`` quoted and formatted) and arguments of a slice's range
    of keys; ("", []) for no range."""
    if part is None or part.key_range is None:
        return "", []
    start, end = part.key_range
    terms = [(f"{name} >= %s", start), (f"{name} < %s", end)]
    return " AND ".join(t for t, v in terms if v is not None), [v for _, v in terms if v is not None]


class VerifyJob(Model):
    """What the Spark half of verify (``spark/verify_job.py``) sums for one table, and where it writes the result.

    With ``source`` (the server's sums), the job compares and lists the rows of the buckets that differ, at most
    ``detail_limit`` of them; ``detail`` names buckets to list whatever the sums.
    """

    warehouse_dir: str
    metastore_uri: str | None
    table: str  # database.table in Hive
    columns: tuple[tuple[str, str], ...]  # (source column name, MySQL type), in the source's order
    key: tuple[str, ...]
    mariadb: bool
    buckets: int
    result_file: str
    detail: tuple[int, ...] = ()  # buckets whose rows are listed
    # The version's directory (its version file lists a partitioned version's partitions: see
    # core.merge.version_locations); None: the table as the metastore has it now.
    location: str | None = None
    time_zone: str = "UTC"  # hive.time_zone: the zone whose digits a DATETIME's instant holds
    source: Sums | None = None  # the server's sums
    source_file: str | None = None  # where the server's sums appear while the job runs (a ``SourceSums``)
    detail_limit: int = 1000
    shard: Shard | None = None  # the shard of the Hive table it is (``core.shards``): its versions are its own
    slice: VerifySlice | None = None  # a rolling verify's part of the buckets; None: every bucket

    @property
    def versions_of(self) -> str:
        """Whose version directories ``location`` must be one of: the table's, or its shard's partition's."""
        table = self.table.partition(".")[2]
        return f"{table}/{self.shard.partition_dir}" if self.shard is not None else table

    @model_validator(mode="after")
    def _valid(self) -> VerifyJob:
        # Checked where the Spark half reads it too: its names and zone go into Spark expressions, its location is
        # read as the table (see core.merge).
        database, _, table = self.table.partition(".")
        for name, what in ((database, "Hive database name"), (table, "Hive table name")):
            if validate_hive_name(name, what) != name:
                raise ValueError(f"The {what} {name!r} must be in lower case, as the metastore keeps it.")
        for name, column_type in self.columns:
            validate_identifier(name, "column name")
            ColumnType.parse(column_type)
        if not self.key or set(self.key) - {name for name, _ in self.columns}:
            raise ValueError(f"The key {list(self.key)} must be a non-empty subset of the columns.")
        problem = (location_problem(self.warehouse_dir, "warehouse directory")
                   or location_problem(self.result_file, "result file")
                   or (location_problem(self.source_file, "source sums file") if self.source_file else None)
                   or (version_dir_problem(self.location, self.warehouse_dir, self.versions_of) if self.location
                       else None)
                   or zone_problem(self.time_zone))
        if problem:
            raise ValueError(problem)
        return self

    def source_sums(self) -> dict[int, BucketSum]:
        return bucket_sums(self.source or {})


class VerifyJobs(Model):
    """One Spark application's verify jobs, as its job file (``RunDir.verify_jobs``) holds them."""

    jobs: tuple[VerifyJob, ...]


class SourceSums(Model):
    """The server's sums of a table, written to a job's ``source_file`` while the application runs; or why
    there are none (the application then gives up on the table rather than wait)."""

    sums: Sums | None = None
    error: str | None = None


class VerifyResult(Model):
    """What the Spark half found for one table (its job's ``result_file``): each bucket's sums over the copy, the
    buckets that differ from the server's (when ``compared``), and the rows (key text, row text's hash) listed by
    bucket; or why the version was not read (``refused``, ``core.merge.VersionRefused``'s message)."""

    buckets: Sums
    differing: tuple[int, ...] = ()
    rows: dict[int, tuple[tuple[str, str], ...]] = {}
    compared: bool = False
    # The buckets in which the SCD2 history's open rows differ from the version's rows; None: no history.
    history_differing: tuple[int, ...] | None = None
    seconds: float = 0.0
    refused: str = ""


class VerifyMark(Model):
    """What a table's last check found, in short (``VerifyState.last``): for the status command and the tables
    page, which show when each table was last verified and how it stood, without the keys (row values) the full
    report (``TableDir.verify_report``) lists."""

    run: RunRef
    at: Instant  # when the check completed
    version: int | None
    status: VerifyStatus
    slice: str | None = None  # a rolling verify's part ("slice 2 of 8"); None: the whole table
    buckets: int = 0
    differing_buckets: int = 0  # buckets with a real difference, or left unexamined
    differences: int = 0  # keys that differ
    history_buckets: int = 0  # buckets where the SCD2 history's open rows differ from the version
    reason: str = ""  # why not verified

    @classmethod
    def of(cls, found: TableVerification, run: RunRef, at: dt.datetime) -> VerifyMark:
        return cls(run=run, at=at, version=found.version, status=found.status,
                   slice=str(found.slice) if found.slice is not None else None, buckets=found.buckets,
                   differing_buckets=len(found.repair_buckets) or len(found.differing_buckets),
                   differences=found.differences, history_buckets=len(found.history_buckets), reason=found.reason)


class VerifyState(Model):
    """A table's verify state (``TableDir.verify_state``): the runs since its last completed verify of the whole
    table, the slice the rolling verify checks next (``VerifySlice.index``; taken modulo ``verify.slices``, so
    that a changed setting goes on from where it is), the runs since its last check of either kind (the
    tables a run checks, when it checks fewer than all, are those waiting longest), and what that check found."""

    runs_since: int = 0
    next_slice: int = 0
    waiting: int = 0
    last: VerifyMark | None = None  # None: never checked since this field was recorded


class RepairRequest(Model):
    """The buckets a table's last verify found different (``TableDir.repair``), for a run to read again."""

    buckets: int  # how many buckets the table was verified in
    which: tuple[int, ...]
    version: int | None  # the version verified
    run: str  # the key of the run that verified it


@dataclass(frozen=True)
class Replaced:
    """What a commit read again from the source: the whole table (``buckets`` None), or these buckets of the key."""

    buckets: tuple[int, ...] | None = None

    def covers(self, pending: RepairRequest) -> bool:
        """Whether nothing of ``pending`` is left once this was read again: a repair is settled only when every
        bucket it asks for was replaced, so that a run that re-read fewer leaves the rest for the next."""
        return self.buckets is None or set(pending.which) <= set(self.buckets)


# The outcomes whose table has a committed version that reflects the run's end: the ones worth verifying. A
# failed table's version is behind the source by what the run did not merge.
VERIFIABLE = (Status.COMMITTED, Status.IDLE, Status.UNCHANGED, Status.NOTHING)


@dataclass(frozen=True)
class Count:
    """A verifiable table of the run: the runs since its last verify of the whole table, this one included; whether
    the whole table is due; and otherwise the slice the rolling verify checks (None: nothing this run)."""

    table: TablePlan
    runs: int
    due: bool
    slice: VerifySlice | None = None
    recorded: VerifyState = VerifyState()

    @property
    def checked(self) -> bool:
        return self.due or self.slice is not None

    def state_after(self, found: VerifyMark | None = None) -> VerifyState:
        """The table's verify state once this run's check of it (``found``, when it was checked) has completed. A
        whole check restarts the count; a slice moves the rolling verify on to the next slice (a whole check
        leaves it where it was: the slices go on in turn); a table not checked waits one run more."""
        next_slice = (self.slice.index + 1) % self.slice.of if self.slice is not None else self.recorded.next_slice
        return VerifyState(runs_since=0 if self.due else self.runs, next_slice=next_slice,
                           waiting=0 if self.checked else self.recorded.waiting + 1,
                           last=found if self.checked and found is not None else self.recorded.last)


def count_runs(plan: SourcePlan, outcomes: Mapping[str, TableOutcome], force: bool, every: int,
               state: Callable[[TablePlan], VerifyState], slices: int = 0, tables_per_run: int = 0) -> list[Count]:
    """Each verifiable table of the run, counted: the whole table due when ``force``d, or when ``every`` runs have
    passed since its last whole verify (``state`` gives its recorded count); otherwise, with ``slices`` above 1,
    its next slice of the rolling verify (``slices`` 1: the whole table every run). Tables whose run changed
    nothing are counted and checked in turn like the others: drift no event announced is what the rolling verify
    is for. With ``tables_per_run`` (0: no limit), the rolling verify checks at most that many tables, those that
    have waited longest since their last check (then by name): each run's cost is bounded, and every table still
    comes round. With none of ``force``, ``every`` and ``slices``, nothing is counted at all."""
    if not force and not every and not slices:
        return []
    counted = []
    for table in plan.tables:
        outcome = outcomes.get(table.source)
        if outcome is None or outcome.status not in VERIFIABLE:
            continue
        recorded = state(table)
        runs = recorded.runs_since + 1
        due = force or bool(every and runs >= every) or slices == 1
        part = VerifySlice(index=recorded.next_slice % slices, of=slices) if slices > 1 and not due else None
        counted.append(Count(table, runs, due, part, recorded))
    sliced = [c for c in counted if c.slice is not None]
    if tables_per_run and len(sliced) > tables_per_run:
        waiting = sorted(sliced, key=lambda c: (-c.recorded.waiting, c.table.source))[tables_per_run:]
        left = {id(c) for c in waiting}
        counted = [replace(c, slice=None) if id(c) in left else c for c in counted]
    return counted


def verifiable(table: TablePlan, committed: Committed | None) -> Committed | TableVerification:
    """The table's committed version to verify, or why it cannot be verified now."""
    base: dict[str, Any] = {"source": table.source, "hive_table": table.table.hive_table}
    if committed is None:
        return TableVerification(**base, status=VerifyStatus.NOT_VERIFIED, reason="no committed version")
    if not table.table.key:
        # Buckets are by key, summed a range of keys at a time; each diff compares the whole table anyway.
        return TableVerification(**base, version=committed.version, status=VerifyStatus.NOT_VERIFIED, reason=(
            "the table has no key: its buckets cannot be summed by key ranges. Each run compares it whole with its "
            "last version's row digests (capture: diff)."))
    if committed.columns is not None and tuple(committed.columns) != tuple(table.table.columns):
        # Both sides would sum rows of different columns: every bucket would differ.
        return TableVerification(**base, version=committed.version, watermark=committed.watermark,
                                 status=VerifyStatus.NOT_VERIFIED,
                                 reason="the source's columns changed since the version; it is verified once a run "
                                 "has merged the change")
    return committed


# MySQL's client errors (2000-2999: the connection lost, refused, timed out; PyMySQL's own as 0) and the server's
# errors about the connection rather than a statement: not one table's trouble, they fail the task, whose retry
# may get through. Any other error the server gives refused one table's statement (a privilege, a table gone, a
# lock or time limit): that table is not verified, and the others are.
CONNECTION_ERRORS = frozenset({
    1040,  # too many connections
    1053,  # server shutdown in progress
    1077, 1079, 1080,  # normal shutdown, shutdown complete, forcing close of a thread
    1152, 1153, 1184,  # aborted connection, packet too big, aborted new connection
    1203, 1226,  # the user's connection or resource limit
    1317,  # query interrupted (KILL QUERY)
    1927,  # connection killed (MariaDB)
    3169,  # session killed (MySQL)
    4031,  # disconnected by the server for inactivity (MySQL)
})
# The server's refusals for a missing privilege: on a database, a table, a column, a routine, or a global one
# (SUPER, BINLOG MONITOR, REPLICATION CLIENT).
PRIVILEGE_ERRORS = frozenset({1044, 1142, 1143, 1227, 1370})


def table_error(code: int | None) -> bool:
    """Whether a MySQL error ``code`` is the server refusing one table's statement, not the connection failing."""
    return code is not None and code >= 1000 and not 2000 <= code < 3000 and code not in CONNECTION_ERRORS


def refused(checked: TableVerification, said: str, code: int | None = None) -> TableVerification | None:
    """A table whose check the server refused: ``checked`` (what is known of it so far) not verified, naming the
    error and the way out, so that the run goes on with the other tables and says it on this one. ``said``: the
    server's words for MySQL error ``code``; without a code, an error the hook already named (the statement time
    limit), whose words say what to do. None when ``code`` is not one table's (``table_error``): it fails the task."""
    if code is not None and not table_error(code):
        return None
    if code is None:
        reason = f"{said.rstrip('.')}; a later run checks it again"
    elif code in PRIVILEGE_ERRORS:
        reason = (f"the server refused its check (MySQL error {code}: {said}): grant the capture user what it "
                  "names (a table captured by diffs needs SELECT alone; one captured from the binlog, what its "
                  "capture needs), and a later run checks it again")
    else:
        reason = (f"the server refused its check (MySQL error {code}: {said}): a later run checks it again; if "
                  "the error stays, see the server's error log")
    return checked.model_copy(update={"status": VerifyStatus.NOT_VERIFIED,
                                      "reason": f"{reason}. `verify: slices: 0` stops the rolling verify."})


def judged(checked: TableVerification, differing: Sequence[int], detail_limit: int, source: Mapping[str, str],
           copy: Mapping[str, str], changed: Collection[str]) -> TableVerification:
    """The verdict on a table whose ``differing`` buckets' rows were listed, at most ``detail_limit`` of them
    (each side's key text → row text's hash in ``source`` and ``copy``; ``changed``: the keys the binlog wrote since the
    version's watermark). ``checked`` is the table's check so far.

    Different when a row differs that the binlog did not write since, or when buckets differ that were not
    looked into (nothing says they are clean); clean otherwise. A repair reads both kinds of bucket again.
    """
    real = row_differences(source, copy, changed)
    unexamined = len(differing[detail_limit:])
    buckets = sorted({bucket_of(d.key, checked.buckets) for d in real})
    return checked.model_copy(update={
        "status": VerifyStatus.DIFFERENT if real or unexamined else VerifyStatus.CLEAN,
        "differing_buckets": tuple(buckets),
        "unexamined_buckets": unexamined, "repair_buckets": tuple(sorted({*buckets, *differing[detail_limit:]})),
        "differences": len(real),
        "keys": tuple(KeyDifference(key=d.key, kind=d.kind) for d in real[:KEYS_LISTED]),
        "in_flight": len(row_differences(source, copy)) - len(real),
        "reason": f"{unexamined} more buckets differ than verify.detail_buckets looks into" if unexamined else ""})


def repair_request(found: TableVerification, run: str) -> RepairRequest | None:
    """What a verify leaves for a run to read again (``TableDir.repair``): the buckets of a different table."""
    if found.status != VerifyStatus.DIFFERENT or not found.repair_buckets:
        return None
    return RepairRequest(buckets=found.buckets, which=found.repair_buckets, version=found.version, run=run)


def difference_message(different: Sequence[TableVerification]) -> str:
    """Why verify fails: each table that differs, how much, its first keys, and what to do; each history that
    differs from its table."""
    tables = [t for t in different if t.status == VerifyStatus.DIFFERENT]
    histories = [t for t in different if t.history_buckets]
    parts = []
    if tables:
        parts.append(f"{len(tables)} tables differ from the source: " + "; ".join(
            f"{t.source} → {t.hive_table} version {t.version}: {t.differences} keys in "
            f"{len(t.repair_buckets)} of {t.buckets} buckets"
            + (f" (first: {', '.join(k.key for k in t.keys[:5])})" if t.keys else "") for t in tables)
            + ". See the log above for the keys; a repair re-reads them (`verify: repair: true` or the repair "
            "parameter), a fresh snapshot reloads the table.")
    if histories:
        parts.append(f"{len(histories)} SCD2 histories differ from their tables: " + "; ".join(
            f"the open rows of {history_table(t.hive_table)} differ from {t.hive_table} version {t.version} in "
            f"{len(t.history_buckets)} of {t.buckets} buckets" for t in histories)
            + ". A run with fresh_snapshot=true brings a history level with the source: it closes and opens "
            "again every open row that differs from the snapshot.")
    return " ".join(parts)


def key_range(key: tuple[str, ...] | list[str], after: tuple[Any, ...] | None,
              until: tuple[Any, ...] | None) -> tuple[str, list[Any]]:
    """The SQL condition (and its arguments) of a range of keys, ``after`` < key <= ``until`` (either end open
    when None), spelt out for composite keys as an index range: ``(a, b) > (x, y)`` is ``a > x OR (a = x AND
    b > y)``. The condition is for a statement run with its arguments: a ``%`` of a name is doubled."""
    from airflow_cdc_provider.core.identifiers import formatted, quote_identifier

    names = [formatted(quote_identifier(k)) for k in key]
    parts, args = [], []
    for bound, last, first in ((after, ">", ">"), (until, "<=", "<")):
        if bound is None:
            continue
        terms = []
        for i, name in enumerate(names):
            equal = [f"{n} = %s" for n in names[:i]]
            terms.append("(" + " AND ".join([*equal, f"{name} {last if i == len(names) - 1 else first} %s"]) + ")")
            args += [*bound[:i], bound[i]]
        parts.append("(" + " OR ".join(terms) + ")")
    return " AND ".join(parts), args
