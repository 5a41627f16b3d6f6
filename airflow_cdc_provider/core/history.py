"""What a table was: daily snapshot partitions (``<table>_snapshots``) and an SCD2 history (``<table>_history``).

Both are told by a table's ``history:`` (``HistorySettings``) and kept by the merge, beside the table's versions:

- **Daily snapshots.** Partition ``dt=D`` of ``<table>_snapshots`` holds the table as of the end of day D in the
  readers' zone: the first version whose moment (``as_of``) is at or after D's end. Its location is that
  version's own directory (or, for a partitioned table, a partition ``(dt, <partition column>)`` per partition of
  that version, at the partition's own directory): no row is copied. A version serving a kept day is kept.
- **SCD2 history.** ``<table>_history`` holds one row per version of each row, with the day (or moment) it became
  the row's value and the day it stopped being it, partitioned by that end (``9999-12-31`` while open).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal
from zoneinfo import ZoneInfo

from pydantic import Field, field_validator

from airflow_cdc_provider.core.identifiers import validate_hive_name
from airflow_cdc_provider.core.model import Model

SNAPSHOTS_SUFFIX = "_snapshots"
HISTORY_SUFFIX = "_history"
OPEN_END = "9999-12-31"


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

    @classmethod
    def of(cls, value: Any) -> HistorySettings | None:
        """The settings a ``history:`` value gives: a mapping its keys, null or ``false`` none. ValueError says
        what is wrong with any other value."""
        if value is None or value is False:
            return None
        if isinstance(value, dict):
            settings = cls.model_validate(value)
            return settings if settings.daily or settings.scd2 else None
        raise ValueError(f"must be a mapping such as {{daily: true, scd2: true, keep_days: 400}}, got {value!r} "
                         f"({type(value).__name__})")


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
