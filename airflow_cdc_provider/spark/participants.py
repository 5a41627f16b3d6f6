"""The tables beside a Hive table that each version adds to, as participants of the merge: its changelog
(``core.changelog``), its SCD2 history and its daily snapshots (``core.history``).

Each participant has one protocol (``Participant``):

- ``write``: its part of the version, before the commit (the changelog's directory of the version's changes, the
  history's new open and closed rows, the days the version is the snapshot of), returned as the fields of the
  version file it records them in (``VersionInfo``);
- ``publish``: list the committed version in its table (a partition added or switched), idempotently: a merge
  that finds the version the table is at unpublished (its job died after the commit) publishes it again, by the
  same call (``publish``);
- ``prune``: remove what no kept version needs once the table's old versions go.

A new kind of table beside (say, a copy in another format) is a class here with those three methods, a setting
that turns it on (``MergeSpec``, from the table's configuration), and its line in ``participants_of``; its field
in ``VersionInfo`` if the version file must record what it wrote. ``merge_job.merge`` does not change.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_cdc_provider.core.changelog import POSITION_COLUMNS, ChangelogCommit, version_day
from airflow_cdc_provider.core.history import (
    HISTORY_PARTITION,
    OPEN_END,
    HistoryCommit,
    days_served,
    history_columns,
    history_dirs_to_prune,
    next_days,
)
from airflow_cdc_provider.core.ledger import VERSION_FILE, LedgerConflict, VersionInfo
from airflow_cdc_provider.core.merge import (
    LISTED_FILE,
    MergeSpec,
    history_partition_problem,
    parse_version_dir,
    version_dir_name,
    version_dir_problem,
)
from airflow_cdc_provider.core.modes import Action, Mode
from airflow_cdc_provider.core.partition_commit import PartitionChange
from airflow_cdc_provider.core.partitioning import Partitioning
from airflow_cdc_provider.core.version_plan import VersionPlan
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.spark.beside_tables import ensure_beside_table
from airflow_cdc_provider.spark.changelog import changelog_root, changelog_rows, register, registered
from airflow_cdc_provider.spark.files import HadoopFiles, prune
from airflow_cdc_provider.spark.history import initial_open, open_values, scd2_step
from airflow_cdc_provider.spark.merge_rows import hive_frame, rows_before, upserts_of, version_net
from airflow_cdc_provider.spark.names import column
from airflow_cdc_provider.spark.partition_commit import commit_partitions
from airflow_cdc_provider.spark.snapshots import day_partitions, ensure_table, sync_days


@dataclass
class Step:
    """One version's merge, as the participants see it: what it writes, onto what, with which rows."""

    spark: Any
    spec: MergeSpec
    plan: VersionPlan
    files: HadoopFiles  # the table's versions
    existing: dict[int, bool]  # the table's versions before this one, and whether each is complete
    version: int
    columns: list[tuple[str, str]]
    fills: tuple[Any, dict[str, list[str]]]
    current: VersionInfo | None  # the version the table is at
    location: str | None  # its location
    touched: set[str] = field(default_factory=set)  # the partitions the version rewrites
    _net: tuple[Any, tuple[Any, ...]] | None = field(default=None, init=False, repr=False)

    def net(self) -> Any:
        """The version's net changes, from the version the table is at now to this one: computed at the first
        call, and kept until ``release`` (the changelog and the history are both written from them)."""
        if self._net is None:
            spec, plan, current = self.spec, self.plan, self.current
            before = None if plan.anew or current is None else rows_before(
                self.spark, spec, current, self.location or "", None if plan.action is Action.LOAD else self.touched,
                self.columns, self.fills, plan.origin_version)
            self._net = version_net(self.spark, spec, before, self.columns, first_load=True)
        return self._net[0]

    def release(self) -> None:
        if self._net is not None:
            for frame in (self._net[0], *self._net[1]):
                frame.unpersist()


class Participant(Protocol):
    """A table beside the Hive table that each version adds to."""

    phase: str | None  # the phase its write is timed as in the merge's log, or None

    def write(self, step: Step) -> dict[str, Any]:
        """Its part of ``step``'s version, before the commit; the ``VersionInfo`` fields that record it."""

    def publish(self, spark: Any, spec: MergeSpec, info: VersionInfo, location: str,
                columns: list[tuple[str, str]]) -> None:
        """List the committed version ``info`` (at ``location``, with ``columns``) in its table; idempotent."""

    def prune(self, step: Step, info: VersionInfo, expired: list[int], removed: list[int]) -> None:
        """After the commit of ``info``: remove its own files of the versions ``removed`` (``expired``: those past
        ``keep_versions``, before the days the snapshots keep were left out)."""


class Changelog:
    """The changelog (``core.changelog``): each version's changes in a directory of their own, the version's
    partition of the changelog table once it is committed."""

    phase: str | None = "changes"

    def write(self, step: Step) -> dict[str, Any]:
        return {"changelog": _write_changes(step)}

    def publish(self, spark: Any, spec: MergeSpec, info: VersionInfo, location: str,
                columns: list[tuple[str, str]]) -> None:
        if info.changelog is not None:
            _add_changes(spark, spec, info.changelog, info.version, location, columns)

    def prune(self, step: Step, info: VersionInfo, expired: list[int], removed: list[int]) -> None:
        _remove_unlisted_changes(step.spark, step.spec, step.files, removed)


class History:
    """The SCD2 history (``core.history``): the open rows after each version, and the rows it closed on its day,
    in partitions switched once the version is committed."""

    phase: str | None = "history"

    def write(self, step: Step) -> dict[str, Any]:
        return {"history": _write_history(step)}

    def publish(self, spark: Any, spec: MergeSpec, info: VersionInfo, location: str,
                columns: list[tuple[str, str]]) -> None:
        if info.history is not None:
            _switch_history(spark, spec, info.history, files_of=HadoopFiles(spark, location), columns=columns)

    def prune(self, step: Step, info: VersionInfo, expired: list[int], removed: list[int]) -> None:
        if info.history is not None:
            _remove_history_versions(step.files, step.spec, expired, {*step.existing, step.version}, info.history)


class Snapshots:
    """The daily snapshots (``core.history``): each day the version the table was at when it ended, listed as
    that day's partition. The versions a kept day is stay, whatever their age (``merge_job.merge``)."""

    phase: str | None = None

    def write(self, step: Step) -> dict[str, Any]:
        spec, current = step.spec, step.current
        assert spec.history is not None
        # The days this version is the snapshot of, beside those older versions are; a table defined anew (other
        # column types, another layout) starts its days again.
        known = current is not None and current.as_of is not None and not step.plan.redefine
        served = days_served(spec.as_of, current.as_of if known and current else None, spec.datetime_zone)
        days, dropped = next_days(current.snapshot_days if known and current else (), served, step.version,
                                  spec.history.settings.keep_days, spec.as_of, spec.datetime_zone)
        return {"snapshot_days": days, "dropped_days": dropped}

    def publish(self, spark: Any, spec: MergeSpec, info: VersionInfo, location: str,
                columns: list[tuple[str, str]]) -> None:
        _sync_snapshots(spark, spec, info.version, location, info.partitions, info.snapshot_days, info.dropped_days,
                        columns, info.partitioning)

    def prune(self, step: Step, info: VersionInfo, expired: list[int], removed: list[int]) -> None:
        """Nothing of its own: a day's partition is a directory of the version it is, which stays."""


def participants_of(spec: MergeSpec) -> list[Participant]:
    """The tables beside ``spec``'s table, in the order they write and publish."""
    found: list[Participant] = []
    if spec.changelog is not None:
        found.append(Changelog())
    if spec.history is not None and spec.history.history is not None:
        found.append(History())
    if spec.history is not None and spec.history.snapshots is not None:
        found.append(Snapshots())
    return found


def has_beside(spec: MergeSpec) -> bool:
    """Whether the table has tables beside it that list each version after its commit."""
    return spec.changelog is not None or spec.history is not None


def publish(spark: Any, spec: MergeSpec, info: VersionInfo, location: str, columns: list[tuple[str, str]]) -> None:
    """List the committed version ``info`` (at ``location``, with ``columns``) in the tables beside the table: its
    changelog partition, the history partitions it switches, the days it is the snapshot of; then mark it listed.
    Each step is idempotent: a merge that finds the version the table is at not marked (its job died after the
    commit) calls this again before anything else, and the mark saves the metastore calls after that."""
    for participant in participants_of(spec):
        participant.publish(spark, spec, info, location, columns)
    HadoopFiles(spark, location).write_text(f"{location}/{LISTED_FILE}", "", overwrite=True)


def _write_changes(step: Step) -> ChangelogCommit:
    """Write the version's changes into its changelog directory (``core.changelog``); returns what its version
    file records of them: its net changes (``Step.net``), or every row event of the range (``mode: all``). A
    version that starts the table (or its changelog) anew holds no change unless the changelog keeps its
    snapshot."""
    from pyspark.sql import Observation
    from pyspark.sql.functions import count, lit

    spark, spec, files, version, columns, current = (step.spark, step.spec, step.files, step.version, step.columns,
                                                     step.current)
    assert spec.changelog is not None
    settings = spec.changelog.settings
    if settings.mode == "all" and spec.events_file and spec.plan.mode != Mode.SNAPSHOT and not (
            spec.reread_rows or spec.replaced):
        changes = _every_event(spark, spec, columns, current)
    else:
        if settings.mode == "all" and spec.plan.mode != Mode.SNAPSHOT:
            print("cdc-merge: rows read again from the source are no binlog events: this version's changelog holds "
                  "its net changes", flush=True)
        net = step.net()
        changes = net.where(lit(False)) if step.plan.anew and settings.snapshot == "none" else net
    committed_at = dt.datetime.now(dt.UTC)
    rows = changelog_rows(changes, columns, spec.end.file if spec.end else None, committed_at)
    root = changelog_root(files, files.root, spec.changelog)
    path = f"{root}/{version_dir_name(version)}"
    problem = version_dir_problem(path, spec.warehouse_dir, spec.changelog.table)
    if problem:
        raise LedgerConflict(f"The changes of {spec.database}.{spec.table} were not written: {problem}")
    if files.exists(path):
        files.delete(path)  # a killed attempt's: its version was never committed (a committed one is older)
    written = Observation("changes")
    rows.observe(written, count(lit(1)).alias("rows")).write.mode("errorifexists").parquet(path)
    failpoint("merge.changes.written")
    previous_as_of = current.as_of if current is not None else None
    return ChangelogCommit(table=spec.changelog.table, day=version_day(spec.as_of, previous_as_of, spec.datetime_zone),
                           day_column=settings.day_column, location=path, rows=int(written.get["rows"]),
                           committed_at=committed_at)


def _every_event(spark: Any, spec: MergeSpec, columns: list[tuple[str, str]], current: VersionInfo | None) -> Any:
    """The range's row events (``stages.events``) as changelog rows, in binlog order (``_change_ordinal``). Those
    at or before the position the table's version already reflects are left out: a re-run whose first attempt
    committed, or a version inside the range (a run killed between its commit and its ledger), holds them already.
    The ones kept are numbered from 1 again, as every version's are."""
    from pyspark.sql.functions import lit
    from pyspark.sql.functions import min as min_

    extra = ("_change_type", "_change_ordinal", *POSITION_COLUMNS)
    events = hive_frame(spark, [spec.events_file or ""], spec.hive_columns, spec, extra)
    have = set(events.columns)
    events = events.select([column(name) if name in have else lit(None).cast(hive).alias(name)
                            for name, hive in columns] + [column(name) for name in extra])
    if current is not None and current.watermark is not None and spec.end is not None \
            and current.watermark.same_server(spec.end):
        seq, pos = current.watermark.coordinate
        at_seq, at_pos = column(POSITION_COLUMNS[0]), column(POSITION_COLUMNS[1])
        events = events.where((at_seq > seq) | ((at_seq == seq) & (at_pos > pos)))
        # Ordinals follow binlog order, so those kept are the last ones: n+1, n+2, … become 1, 2, …
        first = events.agg(min_("_change_ordinal")).first()[0]
        if first is not None and first > 1:
            events = events.withColumn("_change_ordinal", column("_change_ordinal") - (first - 1))
    return events


def _add_changes(spark: Any, spec: MergeSpec, changes: ChangelogCommit, version: int, location: str,
                 columns: list[tuple[str, str]]) -> None:
    """Add the changelog partition of the committed ``version`` (at ``location``), checked to be that version's
    own changelog directory: a version file names it, and only that directory may become a partition."""
    assert spec.changelog is not None
    problem = version_dir_problem(changes.location, spec.warehouse_dir, changes.table)
    if problem is None and (parse_version_dir(changes.location) != version or changes.table != spec.changelog.table):
        problem = f"{changes.location} is not the changelog directory of version {version} in {spec.changelog.table}"
    if problem:
        raise LedgerConflict(f"The changelog partition of {spec.database}.{spec.table} was not added: {problem}.")
    versions = HadoopFiles(spark, location).parent(location)
    register(spark, spec.database, changes, changelog_root(HadoopFiles(spark, versions), versions, spec.changelog),
             columns, version)


def _sync_snapshots(spark: Any, spec: MergeSpec, version: int, location: str, partitions: tuple[tuple[str, str], ...],
                    days: tuple[tuple[str, int], ...], dropped: tuple[str, ...], columns: list[tuple[str, str]],
                    layout: Partitioning | None) -> None:
    """Make the snapshots table list the days the committed ``version`` (at ``location``, with ``partitions``) is
    the snapshot of, and no longer list the days ``dropped``: after the commit, and again by any later merge
    (both idempotent), so that a job killed in between leaves nothing undone for good."""
    assert spec.history is not None and spec.history.snapshots is not None
    settings = spec.history.settings
    versions = HadoopFiles(spark, location).parent(location)
    root = f"{HadoopFiles(spark, versions).parent(versions)}/{spec.history.snapshots}"
    ensure_table(spark, spec.database, spec.history.snapshots, columns, settings.day_column, layout, root)
    added = [partition for day, number in days if number == version
             for partition in day_partitions(settings.day_column, day, layout, location, partitions)]
    sync_days(spark, spec.database, spec.history.snapshots, settings.day_column, added, dropped, spec.warehouse_dir)
    if added or dropped:
        mine = sorted(day for day, number in days if number == version)
        print(f"cdc-merge: {spec.database}.{spec.history.snapshots}: the days {mine} are version {version}; dropped "
              f"{list(dropped)}", flush=True)


def _write_history(step: Step) -> HistoryCommit:
    """Write what the version does to the SCD2 history (``spark.history``) into the history table's directory
    ``vNNNNNN``: the open rows after it, and the closed rows of its day (those closed before on the same day with
    them); returns what its version file records. Switched after the commit (``_switch_history``).

    The history starts with the table's first version, or, turned on later, with the version the table is at
    (its rows open from that version's day); a fresh snapshot that changes a column's type starts it again."""
    from pyspark.sql import Observation
    from pyspark.sql.functions import count, lit

    spark, spec, files, version, columns, fills, current, location = (
        step.spark, step.spec, step.files, step.version, step.columns, step.fills, step.current, step.location)
    anew, load = step.plan.anew, step.plan.action is Action.LOAD
    assert spec.history is not None and spec.history.history is not None
    settings, table = spec.history.settings, spec.history.history
    zone = spec.datetime_zone
    day = version_day(spec.as_of, current.as_of if current is not None else None, zone)
    earlier = None if anew or current is None else current.history
    previous = dict(earlier.partitions) if earlier is not None else {}
    closed = None
    own: tuple[Any, ...] = ()  # the changes computed here (a fresh snapshot's), released here
    if anew or current is None:
        open_rows = initial_open(upserts_of(spark, spec, columns), columns, settings, day, spec.as_of, version)
    else:
        if earlier is None:  # turned on now: the rows of the version the table is at are open from its day
            moment = current.as_of or spec.as_of
            rows = rows_before(spark, spec, current, location or "", None, columns, (None, {}), None)
            held = initial_open(rows, columns, settings, version_day(moment, None, zone), moment, current.version)
        else:
            held = _history_rows(spark, spec, previous[OPEN_END], columns, fills)
        if load and earlier is not None:
            # A fresh snapshot brings the history level with the source whatever its open rows hold (verify
            # compares them with the table): its step's changes are from those rows, not from the table's version,
            # to the snapshot. They are the same changes while the history agrees with the table.
            changes, kept = version_net(spark, spec, open_values(held, columns), columns, first_load=False)
            own = (changes, *kept)
        else:
            changes = step.net()
        open_rows, closed = scd2_step(held, changes, spec.hive_key, columns, settings, day, spec.as_of, version)
    root = f"{files.parent(files.root)}/{table}"
    path = f"{root}/{version_dir_name(version)}"
    problem = version_dir_problem(path, spec.warehouse_dir, table)
    if problem:
        raise LedgerConflict(f"The history of {spec.database}.{spec.table} was not written: {problem}")
    if files.exists(path):
        files.delete(path)  # a killed attempt's: never switched (a switched one is of an older version)
    opened, shut = Observation("opened"), Observation("closed")
    open_dir = f"{path}/{HISTORY_PARTITION}={OPEN_END}"
    open_rows.observe(opened, count(lit(1)).alias("rows")).write.mode("errorifexists").parquet(open_dir)
    partitions, switched, closed_rows = {**previous, OPEN_END: open_dir}, [OPEN_END], 0
    if closed is not None:
        closed = closed.drop(HISTORY_PARTITION).observe(shut, count(lit(1)).alias("rows"))
        if day in previous:  # closed before on the same day: kept beside
            closed = closed.unionByName(_history_rows(spark, spec, previous[day], columns, (None, {})))
        closed_dir = f"{path}/{HISTORY_PARTITION}={day}"
        closed.write.mode("errorifexists").parquet(closed_dir)
        closed_rows = int(shut.get["rows"])
        if closed_rows or day in previous:
            partitions[day] = closed_dir
            switched.append(day)
        else:
            files.delete(closed_dir)
    for frame in own:
        frame.unpersist()
    failpoint("merge.history.written")
    return HistoryCommit(table=table, day=day, partitions=tuple(sorted(partitions.items())),
                         switched=tuple(switched), opened=int(opened.get["rows"]), closed=closed_rows)


def _history_rows(spark: Any, spec: MergeSpec, location: str, columns: list[tuple[str, str]],
                  fills: tuple[Any, dict[str, list[str]]]) -> Any:
    """The rows of a history partition at ``location`` as the history's columns now: a column the table gained
    since they were written gets its fill (``fills``: open rows hold the table's values now) or NULL."""
    from pyspark.sql.functions import broadcast, lit
    from pyspark.sql.types import StructType

    assert spec.history is not None and spec.history.history is not None
    settings = spec.history.settings
    schema = StructType([f for f in spark.table(f"{spec.database}.{spec.history.history}").schema
                         if f.name != HISTORY_PARTITION])
    rows = spark.read.schema(schema).parquet(location)
    held = set(rows.columns)
    fill_row, sources = fills
    if fill_row is not None:
        rows = rows.crossJoin(broadcast(fill_row))

    def value(name: str, hive: str) -> Any:
        if name in held:
            found = column(name)
        elif name in sources:
            source = next((s for s in sources[name] if s in held), None)
            found = column(source) if source else column(f"__fill_{name}")
        else:
            found = lit(None)
        return found.cast(hive).alias(name)

    return rows.select([value(name, hive) for name, hive in history_columns(columns, settings)])


def _switch_history(spark: Any, spec: MergeSpec, commit: HistoryCommit, files_of: HadoopFiles,
                    columns: list[tuple[str, str]]) -> None:
    """Point the history table's partitions the commit switches (the open one, its day's) at their new
    directories, in one metastore transaction; the table made if missing. Idempotent: any later merge does it
    again until it is done. Each location is checked to be a directory of this table's history."""
    assert spec.history is not None and spec.history.history is not None
    table, settings = spec.history.history, spec.history.settings
    where = dict(commit.partitions)
    changes = []
    for value in commit.switched:
        location = where.get(value, "")
        problem = history_partition_problem(location, value, table, spec.warehouse_dir)
        if problem is None and commit.table != table:
            problem = f"{location} is not the directory of the partition {HISTORY_PARTITION}={value} of {table}"
        if problem:
            raise LedgerConflict(f"The history of {spec.database}.{spec.table} was not switched: {problem}.")
        changes.append(PartitionChange(values=((HISTORY_PARTITION, value),), location=location))
    versions = files_of.parent(where[OPEN_END].rstrip("/"))
    root = files_of.parent(versions)
    # A table defined anew (its column types changed) goes with the merge that started the history again.
    ensure_beside_table(spark, spec.database, table, history_columns(columns, settings),
                        [(HISTORY_PARTITION, "string")], root)
    commit_partitions(spark, spec.database, table, changes, spec.warehouse_dir, f"{versions}/_empty")


def _remove_history_versions(files: HadoopFiles, spec: MergeSpec, expired: list[int], versions: set[int],
                             recorded: HistoryCommit) -> None:
    """Prune the history's version directories that ``history_dirs_to_prune`` names (one listing of the history's
    directory), keeping any partition the history lists now or a kept version's commit listed: a day's closed rows
    stay where the version that last wrote them put them."""
    referenced = {location for _, location in recorded.partitions}
    for number in sorted(versions - set(expired)):
        text = files.read_text(f"{files.version_path(number)}/{VERSION_FILE}")
        kept = VersionInfo.from_text(text).history if text is not None else None
        referenced |= {location for _, location in kept.partitions} if kept is not None else set()
    found: dict[int, str] = {}
    for child in files.children(f"{files.parent(files.root)}/{recorded.table}"):
        held = parse_version_dir(child.rstrip("/").rsplit("/", 1)[-1])
        if held is not None:
            found[held] = child
    for pruned in history_dirs_to_prune(found, versions, expired):
        prune(files, found[pruned], referenced)


def _remove_unlisted_changes(spark: Any, spec: MergeSpec, files: HadoopFiles, removed: list[int]) -> None:
    """Delete the changelog directories of the versions ``removed`` whose partition the changelog table does not
    list: attempts killed before their commit. A committed version's changes stay after its own files go."""
    assert spec.changelog is not None
    root = changelog_root(files, files.root, spec.changelog)
    for number in removed:
        path = f"{root}/{version_dir_name(number)}"
        if not files.exists(path):
            continue
        text = files.read_text(f"{files.version_path(number)}/{VERSION_FILE}")
        listed = VersionInfo.from_text(text).changelog if text is not None else None
        if listed is None or not registered(spark, spec.database, listed, number):
            files.delete(path)
