"""A table's changelog: what each committed version changed, as rows of a plain Hive table.

``<table>_changelog`` holds the table's columns and, per row, what happened to it::

    _change_type       insert | update_preimage | update_postimage | delete  (Delta's change data feed's words)
    _change_ordinal    the change's order in its version (by binlog position); a pre- and post-image share it
    _commit_timestamp  when the version was committed
    _source_file, _source_position, _source_row
                       the binlog file, end position of the row event and the row's index in it, of the key's
                       last change in the range; NULL for rows a snapshot or a re-read gives
    dt, _commit_version
                       the partition: the day the version belongs to (``version_day``), then the version

A version's changes are its net changes (``net``): one per key that differs between the version the table was
at before the commit and the version committed, the pre-image looked up in the former. An insert then an update
of a key within one range is one ``insert``; an update back to the old value, or an insert then a delete, is
nothing. A first load writes every row as an ``insert`` (or nothing: ``snapshot: none``).

With ``mode: all`` a version's changes are every row event of its binlog range instead, in binlog order: the
extraction keeps each update's before image (raw op ``B``) and the capture writes them as an events file
(``stages.events``), an update's pre- and post-image sharing one ordinal.

Commit order (``spark.merge_job``): the changes are written into ``<table>_changelog/vNNNNNN`` first, then the
table is committed, then that directory is added as the version's partition. A job killed in between leaves a
version whose version file names its changelog partition; every later merge of the table adds it first (it is
idempotent), so no run's changes are lost or written twice, and a changelog partition never shows changes of a
version that was not committed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Literal
from zoneinfo import ZoneInfo

from pydantic import field_validator, model_validator

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.identifiers import validate_hive_name
from airflow_cdc_provider.core.model import Instant, Model

CHANGELOG_SUFFIX = "_changelog"

INSERT, UPDATE_PREIMAGE, UPDATE_POSTIMAGE, DELETE = "insert", "update_preimage", "update_postimage", "delete"
CHANGE_TYPES = (INSERT, UPDATE_PREIMAGE, UPDATE_POSTIMAGE, DELETE)

VERSION_COLUMN = "_commit_version"
# The columns a changelog row has besides the table's, in their order (Hive names and types).
CHANGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("_change_type", "string"),
    ("_change_ordinal", "bigint"),
    ("_commit_timestamp", "timestamp"),
    ("_source_file", "string"),
    ("_source_position", "bigint"),
    ("_source_row", "int"),
)

# The columns replay adds to its upsert and delete files for a table with a changelog: the coordinate of each key's
# last record (binlog file sequence number, end position of the row event, row index). A comma can be in no column
# of a captured table (``hive_column_problem``), so these never meet one of the table's own.
POSITION_COLUMNS = ("cdc,seq", "cdc,pos", "cdc,row")


class ChangelogSettings(Model):
    """What a table's ``changelog:`` says (``true`` is every default)."""

    mode: Literal["net", "all"] = "net"  # net changes per key, or every row event of the range (``all``)
    snapshot: Literal["insert", "none"] = "insert"  # what a first load writes
    day_column: str = "dt"  # the name of the day partition column

    @field_validator("day_column")
    @classmethod
    def _day_column(cls, value: str) -> str:
        name = validate_hive_name(value, "changelog day column")
        if name != value:
            raise ValueError(f"the changelog day column {value!r} must be in lower case, as the metastore keeps it")
        return name

    @classmethod
    def of(cls, value: Any) -> ChangelogSettings | None:
        """The settings a ``changelog:`` value gives: ``true`` the defaults, ``false`` or null none, a mapping its
        keys. ValueError says what is wrong with any other value."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, dict):
            return cls.model_validate(value)
        raise ValueError(f"must be true, false or a mapping such as {{mode: net, snapshot: none}}, got {value!r} "
                         f"({type(value).__name__})")

    def partition_columns(self) -> tuple[tuple[str, str], ...]:
        return ((self.day_column, "string"), (VERSION_COLUMN, "bigint"))

    def fields(self, columns: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        """The changelog table's columns as readers see them, given the table's (Hive names and types)."""
        return (*columns, *CHANGE_COLUMNS, *self.partition_columns())

    def clash(self, columns: list[str] | tuple[str, ...]) -> str | None:
        """Why a table with these columns (any case) cannot have this changelog, or None: a column of its own
        would have the name of a changelog column."""
        own = {name.lower() for name in columns}
        taken = sorted(own & {name for name, _ in (*CHANGE_COLUMNS, *self.partition_columns())})
        if not taken:
            return None
        hint = (" Name the day column otherwise (`changelog: {day_column: ...}`)." if self.day_column in taken
                else " Set `changelog: false` for this table.")
        return f"the table has the column(s) {', '.join(taken)}, which its changelog table adds itself.{hint}"


class BadChangelog(CdcError, ValueError):
    """A table's ``changelog:`` that does not fit its columns."""


def table_changelog(table: str, settings: ChangelogSettings | None,
                    columns: Sequence[tuple[str, str]]) -> ChangelogSettings | None:
    """The changelog of ``table`` (schema.table) with these columns (name, type), None for none; or BadChangelog
    naming the table and what to do, so that the check refuses it before anything of it is read."""
    if settings is None:
        return None
    problem = settings.clash([name for name, _ in columns])
    if problem:
        raise BadChangelog(
            f"The table {table} cannot have the changelog its `changelog:` (or `hive: changelog:`) asks for: "
            f"{problem} A table a pattern selects can be given an entry of its own, which wins; until then the table "
            "is not captured.")
    return settings


class ChangelogSpec(Model):
    """The changelog the merge writes for one table: its Hive table (in the table's database) and settings."""

    table: str
    settings: ChangelogSettings = ChangelogSettings()

    @model_validator(mode="after")
    def _valid(self) -> ChangelogSpec:
        if validate_hive_name(self.table, "Hive table name") != self.table:
            raise ValueError(f"The changelog table name {self.table!r} must be in lower case.")
        return self


class ChangelogCommit(Model):
    """A version's changelog partition, as its version file records it: written before the version was
    committed, added to the changelog table after (again by any later merge, until it is there)."""

    table: str  # the changelog table's name, in the table's database
    day: str  # the day partition's value (``version_day``)
    day_column: str = "dt"
    location: str  # ``<table>_changelog/vNNNNNN``
    rows: int
    committed_at: Instant


def changelog_table(target: str) -> str:
    """The changelog table's name of the Hive table ``target``."""
    return f"{target}{CHANGELOG_SUFFIX}"


def version_day(as_of: dt.datetime, previous_as_of: dt.datetime | None, zone: str) -> str:
    """The day (``YYYY-MM-DD`` in ``zone``) a version's changes belong to: the first day whose daily snapshot (the
    first version at or after the day's end, ``core.history``) holds them. That is the day the version before it
    reflects a moment of (a moment at midnight is of the day it starts); for a table's first version, the day its
    own moment ends (a moment at midnight is of the day it ends). So the changes filed under day D are exactly
    those between the snapshots of D - 1 and D, and a run scheduled daily files its changes under their day."""
    if previous_as_of is None:
        local = as_of.astimezone(ZoneInfo(zone)) - dt.timedelta(microseconds=1)
    else:
        local = previous_as_of.astimezone(ZoneInfo(zone))
    return local.date().isoformat()
