"""The digests of a Hive version, for a heal: what a diff (``core.diff``) needs of a binlog-mode table's committed
version to compare it with its source, computed by Spark from the version's rows (``spark.digests_job``).

A diff-mode table's digests come from the server at each snapshot (``stages.diff.digests_schema``): each row's
identity columns as the capture files type them, its ``_hash`` (the first 64 bits of the hash of its key's text)
and its ``_digest`` (the same of its row's text). A binlog-mode table keeps none, so Spark computes them over the
Hive version from the same texts verify sums (``core.checksum``; ``spark.row_texts``). The digest is verify's: a
JSON column on MySQL counts by its NULL flag only, for Spark cannot print JSON as MySQL does; the server's side
of a heal is then ``core.diff.row_digest(..., every_json=False)``.

The key columns go from Spark to the digests file by ``key_carriage``: as their Hive values where those are the
capture files' values (a TIME's microseconds become a duration again), as their checksum texts where the Hive value
is an instant (a DATETIME's wall clock in ``hive.time_zone``, a TIMESTAMP's in UTC), and not at all where the value
would not come back exactly: such a table is not healed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
from pydantic import model_validator

from airflow_cdc_provider.core.checksum import kind_of
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.identifiers import validate_hive_name, validate_identifier
from airflow_cdc_provider.core.merge import version_dir_problem
from airflow_cdc_provider.core.model import Model
from airflow_cdc_provider.core.shards import Shard
from airflow_cdc_provider.core.types import ColumnType, UnsupportedType, arrow_type, hive_type
from airflow_cdc_provider.core.workdir import location_problem, within
from airflow_cdc_provider.core.zones import zone_problem

# The Spark job's output columns beside the key's: named as a digests file names them (``stages.diff``).
SPARK_HASH, SPARK_DIGEST = "_hash", "_digest"
# In the job's output directory: Hadoop's mark of a write committed whole, or, instead of any rows, why the version
# was not read (``core.merge.VersionRefused``'s message). Readers of Parquet skip names starting with _.
COMPLETE_FILE, REFUSED_FILE = "_SUCCESS", "_refused"


def spark_key_column(index: int) -> str:
    """The name of the ``index``-th key column in the Spark job's output: by position, for a source column's name
    may hold what a Parquet column name should not (dots, spaces, commas)."""
    return f"_key{index}"


# --- the key columns' carriage ------------------------------------------------------------------------------

Carried = Literal["value", "wall_clock_text", "utc_text"]


@dataclass(frozen=True)
class Carriage:
    """How a key column's value goes from the Hive version to the digests file.

    ``value``: the Hive value, cast to ``file_type`` (the same value; a TIME's microseconds become a duration);
    ``wall_clock_text``: a DATETIME's digits in ``hive.time_zone`` (``yyyy-MM-dd HH:mm:ss.SSSSSS``), the digits
    the source holds, read back as a timestamp without zone; ``utc_text``: a TIMESTAMP's digits in UTC, read back
    as a UTC instant. The texts are the column's checksum texts (``core.checksum.spark_text``), microseconds kept.
    """

    how: Carried
    spark_type: str  # the type the Spark job writes the column as: the Hive type, or string for a text
    file_type: pa.DataType  # the digests file's, the capture files' type (``core.types.arrow_type``)


class KeyNotCarried(CdcError, ValueError):
    """A key column whose value cannot go from the Hive version into a digests file exactly."""


# The kinds (``core.checksum.kind_of``) whose Hive value is the capture files' value: of the same type (``hive_type``
# follows ``arrow_type``), but a TIME's, whose microseconds are cast to a duration.
_AS_VALUES = {"int", "decimal", "decimal_text", "year", "float", "double", "bit1", "bits", "text", "binary",
              "geometry", "date", "time"}


def key_carriage(column_type: str) -> Carriage:
    """How a key column of ``column_type`` (a MySQL type) goes from the Hive version to the digests file; raises
    KeyNotCarried, naming the type, for one that would not come back as the value the server's digests file
    holds. Every kind not named here is refused: a new type is carried only once it is shown to come back."""
    try:
        kind = kind_of(column_type)
        file_type = arrow_type(column_type)
    except UnsupportedType as exc:
        raise KeyNotCarried(f"the type {column_type!r} has no Hive mapping ({exc})") from None
    if kind in _AS_VALUES:
        return Carriage("value", hive_type(column_type), file_type)
    if kind == "datetime":
        return Carriage("wall_clock_text", "string", file_type)
    if kind == "timestamp":
        return Carriage("utc_text", "string", file_type)
    if kind == "json":
        # Its text is not one on both sides: MySQL prints no normalised JSON (verify counts it by its NULL flag),
        # MariaDB's JSON_NORMALIZE keeps a string's escapes as they were written, which the copy does not remember.
        raise KeyNotCarried(f"the type {column_type!r} (JSON) has no text the server and the copy both give, and a "
                            "key's hash is made of its text")
    raise KeyNotCarried(f"the type {column_type!r} (a {kind}) is not known to come back exactly")


def carriage_problem(table: str, columns: Sequence[tuple[str, str]], key: Sequence[str]) -> str | None:
    """Why ``table``'s Hive version cannot be described by a digests file (its key empty, or a key column that
    ``key_carriage`` refuses), for the heal to stop with; None when every key column is carried."""
    if not key:
        return (f"The table {table} has no key: a heal compares rows by their key's hash, and a table whose whole "
                "row is its identity is compared whole by a diff-mode capture instead (`capture: diff`).")
    types = dict(columns)
    problems = []
    for name in key:
        if name not in types:
            problems.append(f"{name}: not one of the table's columns")
            continue
        try:
            key_carriage(types[name])
        except KeyNotCarried as exc:
            problems.append(f"{name}: {exc}")
    if not problems:
        return None
    return (f"The table {table} cannot be healed: its key columns' values cannot be carried from the Hive version "
            f"into a digests file exactly ({'; '.join(problems)}). Load it anew instead: a run triggered with "
            "fresh_snapshot=true.")


# --- the job ----------------------------------------------------------------------------------------------

def versions_of(table: str, shard: Shard | None) -> str:
    """Whose version directories a job over the Hive table ``table`` (database.table) may read: the table's, or
    its shard's partition's (``core.merge.version_dir_problem``)."""
    name = table.partition(".")[2]
    return f"{name}/{shard.partition_dir}" if shard is not None else name


def check_version_job(table: str, columns: Sequence[tuple[str, str]], key: Sequence[str], warehouse_dir: str,
                      location: str | None, versions_of: str, time_zone: str) -> None:
    """Raise ValueError unless a Spark job over a version may take these: its names and zone go into Spark
    expressions, its location is read as the table (``core.merge``). Verify's job (``core.verify.VerifyJob``)
    makes the same checks."""
    database, _, name = table.partition(".")
    for part, what in ((database, "Hive database name"), (name, "Hive table name")):
        if validate_hive_name(part, what) != part:
            raise ValueError(f"The {what} {part!r} must be in lower case, as the metastore keeps it.")
    for column, column_type in columns:
        validate_identifier(column, "column name")
        ColumnType.parse(column_type)
    if not key or len(set(key)) != len(key) or set(key) - {column for column, _ in columns}:
        raise ValueError(f"The key {list(key)} must be a non-empty subset of the columns.")
    problem = (location_problem(warehouse_dir, "warehouse directory")
               or (version_dir_problem(location, warehouse_dir, versions_of) if location else None)
               or zone_problem(time_zone))
    if problem:
        raise ValueError(problem)


class DigestsJob(Model):
    """What the heal's Spark job (``spark/digests_job.py``) computes for one table: the digests of the committed
    version at ``location``, written as Parquet part files to the directory ``out`` (``_key<n>`` for the n-th key
    column as ``key_carriage`` carries it, ``_hash``, ``_digest`` as signed bigints: the same bits), which
    ``stages.version_digests`` turns into a digests file."""

    warehouse_dir: str
    metastore_uri: str | None
    table: str  # database.table in Hive
    columns: tuple[tuple[str, str], ...]  # (source column name, MySQL type) of the version, in the source's order
    key: tuple[str, ...]  # the identity's columns, in the order of the table's header (``RawHeader.key``)
    mariadb: bool
    time_zone: str  # hive.time_zone: the zone whose digits a DATETIME's instant holds
    location: str  # the committed version's directory
    out: str  # the directory the job writes, replaced whole: never the warehouse's nor holding it
    shard: Shard | None = None  # the shard of the Hive table it is (``core.shards``): its versions are its own

    @property
    def versions_of(self) -> str:
        return versions_of(self.table, self.shard)

    @model_validator(mode="after")
    def _valid(self) -> DigestsJob:
        check_version_job(self.table, self.columns, self.key, self.warehouse_dir, self.location, self.versions_of,
                          self.time_zone)
        problem = location_problem(self.out, "digests directory") or carriage_problem(self.table, self.columns,
                                                                                         self.key)
        # The job replaces ``out`` whole: a place in the warehouse, or above it, would lose the tables' files.
        if problem is None and (within(self.out, self.warehouse_dir) or within(self.warehouse_dir, self.out)):
            problem = (f"The digests directory {self.out} is in the warehouse {self.warehouse_dir} or holds it: the "
                       "job replaces the directory whole. Name one in the run's work directory.")
        if problem:
            raise ValueError(problem)
        return self

    def version_zone_problem(self, version_zone: str) -> str | None:
        """Why the version, whose DATETIMEs were written for readers in ``version_zone`` (its version file's
        ``datetime_zone``), cannot be described in ``time_zone``, or None: its values hold that zone's digits, and
        read for another, every DATETIME would differ from the source's."""
        if version_zone == self.time_zone or not any(kind_of(t) == "datetime" for _, t in self.columns):
            return None
        return (f"The DATETIME columns of {self.table}'s version at {self.location} were written for readers in "
                f"{version_zone}, but `hive: time_zone:` is now {self.time_zone}. Nothing was healed. Set it back, or "
                "trigger a run with fresh_snapshot=true to write the whole table again for the new zone.")


class DigestsJobs(Model):
    """One Spark application's digests jobs, as its job file holds them."""

    jobs: tuple[DigestsJob, ...]
