"""What a table was: daily snapshot partitions (``<table>_snapshots``) and an SCD2 history (``<table>_history``).

Both are told by a table's ``history:`` (``HistorySettings``) and kept by the merge, beside the table's versions:

- **Daily snapshots.** Partition ``dt=D`` of ``<table>_snapshots`` holds the table as of the end of day D in the
  readers' zone: the first version whose moment (``as_of``) is at or after D's end. Its location is that
  version's own directory (or, for a partitioned table, a partition ``(dt, <partition column>)`` per partition of
  that version, at the partition's own directory): no row is copied. A version serving a kept day is kept.
- **SCD2 history.** ``<table>_history`` holds one row per version of each row, with the day (or moment) it became
  the row's value and the day it stopped being it, partitioned by that end (``9999-12-31`` while open).

The history's rows (``history_columns``): the table's columns, then ``start_date`` (``YYYY-MM-DD``, the day the
value began), with ``granularity: run`` ``start_time`` and ``end_time`` (the moments of the versions that opened and
closed it; ``end_time`` NULL while open), ``is_current``, with ``hard_deletes: new_record`` ``is_deleted`` (a row
that marks the key deleted from its start), and ``_start_version`` (the version that opened it); the partition
column ``end_date`` (``OPEN_END`` while open). So the table as of day D is the rows with
``start_date <= D < end_date`` that are not ``is_deleted``. With ``granularity: day`` a value that began and ended
within one day is no row: it was never the value at a day's end.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any, Literal
from zoneinfo import ZoneInfo

from pydantic import Field, field_validator, model_validator

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.identifiers import validate_hive_name
from airflow_cdc_provider.core.model import Model

SNAPSHOTS_SUFFIX = "_snapshots"
HISTORY_SUFFIX = "_history"
OPEN_END = "9999-12-31"
HISTORY_PARTITION = "end_date"  # the history's partition column: the day a row stopped being the value


class HistorySettings(Model):
    """What a table's ``history:`` says."""

    daily: bool = False  # ``<table>_snapshots``: the table as of each day's end
    keep_days: int | None = Field(None, ge=1)  # days of snapshots kept (None: every day)
    scd2: bool = False  # ``<table>_history``
    granularity: Literal["day", "run"] = "day"  # a version of a row lasts whole days, or from commit to commit
    hard_deletes: Literal["invalidate", "new_record"] = "invalidate"  # a delete closes the row, or also opens a marker
    day_column: str = "dt"  # the snapshots' partition column

    @field_validator("day_column")
    @classmethod
    def _day_column(cls, value: str) -> str:
        name = validate_hive_name(value, "snapshot day column")
        if name != value:
            raise ValueError(f"the snapshot day column {value!r} must be in lower case, as the metastore keeps it")
        return name

    @model_validator(mode="after")
    def _asks_for_one(self) -> HistorySettings:
        # A mapping of options alone (``{keep_days: 400}``) would keep nothing, silently: it must say which.
        if not {"daily", "scd2"} & self.model_fields_set:
            raise ValueError("turns on neither `daily` nor `scd2`: give `daily: true`, `scd2: true` or both")
        return self

    @classmethod
    def of(cls, value: Any) -> HistorySettings | None:
        """The settings a ``history:`` value gives: a mapping its keys (none when it turns off both ``daily`` and
        ``scd2``), null or ``false`` none. ValueError says what is wrong with any other value."""
        if value is None or value is False:
            return None
        if isinstance(value, dict):
            settings = cls.model_validate(value)
            return settings if settings.daily or settings.scd2 else None
        raise ValueError(f"must be false or a mapping such as {{daily: true, scd2: true, keep_days: 400}}, got "
                         f"{value!r} ({type(value).__name__})")

    def added_columns(self) -> tuple[tuple[str, str], ...]:
        """The columns the history table has besides the table's own, partition column last (Hive names, types)."""
        added = [("start_date", "string")]
        if self.granularity == "run":
            added += [("start_time", "timestamp"), ("end_time", "timestamp")]
        added.append(("is_current", "boolean"))
        if self.hard_deletes == "new_record":
            added.append(("is_deleted", "boolean"))
        added.append((START_VERSION, "bigint"))
        return (*added, (HISTORY_PARTITION, "string"))

    def clash(self, columns: Sequence[str]) -> str | None:
        """Why a table with these columns (any case) cannot have this history, or None: a column of its own would
        have the name of one its snapshots' or history's table adds."""
        own = {name.lower() for name in columns}
        added = ({name for name, _ in self.added_columns()} if self.scd2 else set()) | (
            {self.day_column} if self.daily else set())
        taken = sorted(own & added)
        if not taken:
            return None
        hint = (" Name the snapshots' day column otherwise (`history: {day_column: ...}`)."
                if self.daily and self.day_column in taken else " Set `history: false` for this table.")
        return f"the table has the column(s) {', '.join(taken)}, which its history tables add themselves.{hint}"


START_VERSION = "_start_version"


def history_columns(columns: Sequence[tuple[str, str]], settings: HistorySettings) -> list[tuple[str, str]]:
    """The history table's file columns (name, Hive type): the table's ``columns``, then those the history adds
    (``HistorySettings.added_columns``) but the partition column ``end_date``."""
    return [*columns, *settings.added_columns()[:-1]]


class BadHistory(CdcError, ValueError):
    """A table's ``history:`` that does not fit its columns."""


def table_history(table: str, settings: HistorySettings | None, columns: Sequence[tuple[str, str]],
                  partition_column: str | None = None) -> HistorySettings | None:
    """The history of ``table`` (schema.table) with these columns (name, type) and partition column (None: not
    partitioned), None for none; or BadHistory naming the table and what to do, so that the check refuses it
    before anything of it is read."""
    if settings is None:
        return None
    problem = settings.clash([name for name, _ in columns])
    if problem is None and settings.daily and partition_column == settings.day_column:
        problem = (f"its partition column is named {partition_column}, as its daily snapshots' day column is: name "
                   "the day column otherwise (`history: {day_column: snapshot_dt}`) or the partition column (`AS`).")
    if problem:
        raise BadHistory(
            f"The table {table} cannot have the history its `history:` (or `hive: history:`) asks for: {problem} "
            "A table a pattern selects can be given an entry of its own, which wins; until then the table is not "
            "captured.")
    return settings


class HistorySpec(Model):
    """The history the merge keeps for one table: its tables' names (in the table's database) and settings."""

    snapshots: str | None = None  # ``<table>_snapshots`` when ``daily``
    history: str | None = None  # ``<table>_history`` when ``scd2``
    settings: HistorySettings

    @model_validator(mode="after")
    def _valid(self) -> HistorySpec:
        for name, wanted in ((self.snapshots, self.settings.daily), (self.history, self.settings.scd2)):
            if (name is not None) != wanted:
                raise ValueError(f"The history spec names {name!r} where its settings ask for {wanted}.")
            if name is not None and validate_hive_name(name, "Hive table name") != name:
                raise ValueError(f"The history table name {name!r} must be in lower case.")
        return self

    @classmethod
    def of(cls, target: str, settings: HistorySettings) -> HistorySpec:
        """The history of the Hive table ``target`` (its name, without the database)."""
        return cls(snapshots=snapshots_table(target) if settings.daily else None,
                   history=history_table(target) if settings.scd2 else None, settings=settings)


class HistoryCommit(Model):
    """A version's commit to the SCD2 history table, as its version file records it: written before the version
    was committed, switched in the metastore after (again by any later merge, until it is)."""

    table: str  # the history table's name, in the table's database
    day: str  # the day the version's changes belong to (``core.changelog.version_day``)
    # Every partition of the history table once this commit is switched (its ``end_date`` and location), and those
    # this commit switches: the open one and its day's.
    partitions: tuple[tuple[str, str], ...]
    switched: tuple[str, ...]
    opened: int = 0  # rows opened by the version
    closed: int = 0  # rows it closed


def snapshots_table(target: str) -> str:
    return f"{target}{SNAPSHOTS_SUFFIX}"


def history_table(target: str) -> str:
    return f"{target}{HISTORY_SUFFIX}"


def day_end(day: str, zone: str) -> dt.datetime:
    """The moment day ``day`` (``YYYY-MM-DD``) ends in ``zone``: the next day's midnight there, in UTC."""
    next_day = dt.date.fromisoformat(day) + dt.timedelta(days=1)
    return dt.datetime.combine(next_day, dt.time(), ZoneInfo(zone)).astimezone(dt.UTC)


def days_served(as_of: dt.datetime, previous_as_of: dt.datetime | None, zone: str) -> tuple[str, ...]:
    """The days whose snapshot a version reflecting ``as_of`` is, when the version before it reflected
    ``previous_as_of`` (None: it is the table's first): every day whose end is after ``previous_as_of`` and at or
    before ``as_of``. None for a version inside a day; several when runs skipped days (each of them is then this
    version: the first whose moment covers its end). A first version serves only the day it ends in, if that is
    its own moment's day end: the days before it were not copied."""
    # The last day that has ended by as_of: the day before as_of's own (whose end is after it).
    last = as_of.astimezone(ZoneInfo(zone)).date() - dt.timedelta(days=1)
    if previous_as_of is None:
        return (last.isoformat(),) if day_end(last.isoformat(), zone) == as_of else ()
    days = []
    day = last
    while day_end(day.isoformat(), zone) > previous_as_of:
        days.append(day.isoformat())
        day -= dt.timedelta(days=1)
        if len(days) > 3660:  # ten years between two versions: a bound, not a case
            break
    return tuple(reversed(days))


def next_days(previous: tuple[tuple[str, int], ...], served: tuple[str, ...], version: int,
              keep_days: int | None, as_of: dt.datetime, zone: str) -> tuple[tuple[tuple[str, int], ...],
                                                                              tuple[str, ...]]:
    """The snapshots table's days and the version each is, once ``version`` (serving the days ``served``) is
    committed over a table whose days were ``previous``; and the days dropped past ``keep_days`` (the last
    ``keep_days`` days that have ended by ``as_of`` stay). A version a kept day is stays on disk."""
    days = {**dict(previous), **{day: version for day in served}}
    dropped: tuple[str, ...] = ()
    if keep_days is not None:
        last = as_of.astimezone(ZoneInfo(zone)).date() - dt.timedelta(days=1)
        cutoff = (last - dt.timedelta(days=keep_days - 1)).isoformat()
        dropped = tuple(sorted(day for day in days if day < cutoff))
        days = {day: v for day, v in days.items() if day >= cutoff}
    return tuple(sorted(days.items())), dropped


def history_dirs_to_prune(found: Collection[int], versions: Collection[int], expired: Collection[int]) -> list[int]:
    """The history's version directories (``found``) to prune once a commit is done: those of every version
    whose retention ran out (``expired``, as ``versions_to_remove`` gives them before kept days pin any) and
    of versions whose directory is gone (not in ``versions``, the table's version directories and the new
    one). Pruning keeps any partition the history or a kept version still lists.

    A version a kept day pins stays for the snapshots table, which reads the table's version directory, never
    its history: the open partition it superseded goes with the other expired versions', or the history would
    keep a whole open partition per kept day."""
    return sorted(number for number in found if number in expired or number not in versions)

