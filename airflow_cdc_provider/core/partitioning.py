"""A table's partition spec: the text a user writes, parsed into a typed value, and the partition value of a row.

**Spelling.** One transform of one column, in the vocabulary of Iceberg's partition transforms, spelt as Trino's
Iceberg connector spells them (``partitioning = ARRAY['day(created_at)', 'bucket(id, 64)']``): the column first,
the singular names of Iceberg's own transforms (``day``, not Spark's ``days``), a bare column for identity::

    created_at  |  year(created_at)  |  month(created_at)  |  day(created_at)  |  hour(created_at)
    truncate(id, 1000000)  |  bucket(id, 64)                       each optionally followed by  AS name

Why this one of the three spellings users meet: Iceberg's transforms are called ``year``, ``day``, ``bucket[N]``
in its specification and its metadata (pyiceberg's ``DayTransform`` prints ``day``), Trino users and Hive users
moving to Iceberg through Trino write them exactly like this, and every form reads as a function of its column
with the column first. Spark's DDL (``days(ts)``, ``bucket(16, id)``, ``truncate(10, id)``) puts the number first
and pluralises; accepting both orders would make ``bucket(16, id)`` and ``bucket(id, 16)`` the same spec and a
misread one silently wrong, so Spark's forms are refused with the spelling to use instead. ``AS name`` names the
partition column (the SQL habit of naming a derived column), so one text holds the whole spec.

**The partition column** is a column of its own, beside all of the table's columns (which stay as they are):
Hive cannot hold a partition column and a data column of one name, and an identity partition moved out of the
data files would reorder the table and change it for its readers. Its name is ``dt`` for the time transforms,
``<column>_trunc`` and ``<column>_bucket`` (Iceberg's default field names) and ``<column>_part`` for identity,
lower-case, letters, digits and ``_`` (it names directories too); ``AS name`` chooses another.

**Its values and Hive types:**

- ``year``, ``month``, ``day``, ``hour``: a ``string``, ``2026``, ``2026-11``, ``2026-11-25``, ``2026-11-25-13``
  (Iceberg's own text of these partitions). A string rather than a ``date``: Hive users filter
  ``WHERE dt = '2026-11-25'``, which Trino refuses on a ``date`` column (it does not compare a date with a
  string), the metastore's partition filter has handled string keys in every version, and ``month`` and ``hour`` have no
  date type at all. The fixed-width forms sort as the times do, so ``dt >= '2026-11-01'`` is a range.
  The value is the date and time a reader in the table's zone (``hive: time_zone``, default UTC) sees in the
  column: a DATETIME's digits as the Hive table holds them, a TIMESTAMP's instant shown in that zone (UTC by
  default, as Iceberg takes a timestamp's day in UTC). With a zone other than UTC, a DATETIME whose digits the
  zone skips (02:30 on the day clocks go forward) is held as the time after the gap (03:30, ``docs/types.md``),
  and its partition is that time's: the partition agrees with the value readers see.
- identity: the column's own Hive type (``core.types.hive_type``), for integers, YEAR, DATE, and CHAR, VARCHAR
  and ENUM of at most ``MAX_IDENTITY_CHARS`` characters: the metastore keeps a partition value in 256
  characters and its name (``column=value``, with up to 128 characters of column and each character of the
  value escaped to at most three) in 767.
- ``truncate(col, W)``: the lower bound of the value's range of width W, ``W * floor(v / W)``, so -1 lands in
  ``-W`` as in Iceberg (whose rule is ``v - (((v % W) + W) % W)``), never in 0 as truncation toward zero would:
  each range holds W values. ``bigint``, or ``decimal(20,0)`` for a BIGINT UNSIGNED column.
- ``bucket(col, N)``: an ``int`` from 0 to N - 1, the bucket verify already gives a key of this one column:
  CRC32 of the column's text (``core.checksum``: a TIMESTAMP's in UTC, a DATETIME's digits as Hive holds them),
  modulo N. The source server (``MOD(CRC32(text), N)``), Python
  (``core.verify.bucket_of``) and Spark (``spark.verify_job.bucket_of``) compute it alike, and that is tested
  already, so a later re-read of one bucket from the server is a condition the server evaluates. Iceberg's
  Murmur3 has no server function and no Spark function of that seed; its bucket numbers matter to no reader of
  a Hive table.

**NULL.** A NULL value (a zero date is NULL already, ``core.values``), an empty string for identity, and a
``truncate`` range whose lower bound a ``bigint`` cannot hold (within W of -2^63) have the partition value NULL:
the metastore's default partition, ``__HIVE_DEFAULT_PARTITION__``, which Spark and Trino read as NULL
(``WHERE dt IS NULL``; some Hive versions show a string column's as that name). Any explicit stand-in would be a
value a real row can have (``1970-01-01``, bucket 0, the string ``'null'``) or a lie in a typed column; NULL says
what the column itself says, and Hive and Spark already put an empty partition string there.

The spec is data: the text is parsed by this module into names and numbers, never passed to SQL or Spark; the
Spark job builds its expression from column objects (``spark.partitioning``).
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Sequence
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pydantic import model_validator

from airflow_cdc_provider.core.checksum import bucket_of, key_text, kind_of
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.model import Model
from airflow_cdc_provider.core.types import ColumnType, hive_type
from airflow_cdc_provider.core.zones import zone_problem


class BadPartitionSpec(CdcError, ValueError):
    """A ``partition_by`` text that is not one of the accepted forms, or that does not fit the table's columns."""


class Transform(StrEnum):
    IDENTITY = "identity"
    YEAR = "year"
    MONTH = "month"
    DAY = "day"
    HOUR = "hour"
    TRUNCATE = "truncate"
    BUCKET = "bucket"


TIME_TRANSFORMS = frozenset({Transform.YEAR, Transform.MONTH, Transform.DAY, Transform.HOUR})
# The text of each time partition, in Python's and in Spark's pattern letters: the same fixed-width forms.
TIME_FORMATS = {Transform.YEAR: "yyyy", Transform.MONTH: "yyyy-MM", Transform.DAY: "yyyy-MM-dd",
                Transform.HOUR: "yyyy-MM-dd-HH"}
DEFAULT_TIME_COLUMN = "dt"
_DEFAULT_SUFFIX = {Transform.IDENTITY: "part", Transform.TRUNCATE: "trunc", Transform.BUCKET: "bucket"}

# The name the metastore gives the partition of a NULL value (Hive's hive.exec.default.partition.name).
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
MAX_IDENTITY_CHARS = 200
MAX_WIDTH = 2**63 - 1  # a bigint literal in Spark
MAX_BUCKETS = 2**31 - 1  # the partition column is an int
_BIGINT_MIN = -(2**63)

FORMS = ("column", "year(column)", "month(column)", "day(column)", "hour(column)", "truncate(column, width)",
         "bucket(column, count)")
_ACCEPTED = (f"The accepted forms are {', '.join(FORMS)}, each optionally followed by `AS name` (the partition "
             "column's name); a column name with other characters than letters, digits, _ and $ is written "
             "between backticks (see docs/partitions.md).")

_INTS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
_STRINGS = frozenset({"char", "varchar", "enum"})
_BUCKET_KINDS = frozenset({"int", "decimal", "decimal_text", "year", "time", "text", "bit1", "bits", "binary",
                           "date", "datetime", "timestamp"})
ACCEPTED_TYPES = {
    Transform.IDENTITY: f"an integer type, YEAR, DATE, or CHAR, VARCHAR or ENUM of at most {MAX_IDENTITY_CHARS} "
                        "characters",
    Transform.YEAR: "DATE, DATETIME or TIMESTAMP",
    Transform.MONTH: "DATE, DATETIME or TIMESTAMP",
    Transform.DAY: "DATE, DATETIME or TIMESTAMP",
    Transform.HOUR: "DATETIME or TIMESTAMP",
    Transform.TRUNCATE: "an integer type (TINYINT to BIGINT, signed or unsigned)",
    Transform.BUCKET: "an integer, DECIMAL, a string (CHAR, VARCHAR, TEXT, ENUM, SET, INET, UUID), a binary "
                      "string, BIT, DATE, DATETIME, TIMESTAMP, TIME or YEAR",
}

# Spark's spellings, refused with the one to write instead.
_SPARK_NAMES = {"years": "year", "months": "month", "days": "day", "hours": "hour", "date": "day",
                "date_hour": "hour"}

_TOKEN = re.compile(r"\s*(?:(?P<quoted>`(?:[^`]|``)*`)|(?P<word>[A-Za-z_$][A-Za-z0-9_$]*)|(?P<number>[0-9]+)"
                    r"|(?P<punct>[(),]))")
_PARTITION_COLUMN = re.compile(r"[a-z0-9_]{1,128}")


class PartitionSpec(Model):
    """A table's partitioning as written: the transform, its source column (as written, matched to the table's
    columns without regard to case, as MySQL does), its width or bucket count, and the partition column's name."""

    transform: Transform
    source: str
    argument: int | None = None
    column: str

    @model_validator(mode="after")
    def _valid(self) -> PartitionSpec:
        takes = self.transform in (Transform.TRUNCATE, Transform.BUCKET)
        if takes != (self.argument is not None):
            raise ValueError(f"The transform {self.transform} {'takes' if takes else 'takes no'} number.")
        if self.argument is not None:
            limit = MAX_WIDTH if self.transform is Transform.TRUNCATE else MAX_BUCKETS
            if not 1 <= self.argument <= limit:
                raise ValueError(f"The {self.transform} number must be from 1 to {limit}, not {self.argument}.")
        if not self.source:
            raise ValueError("The partition spec names no source column.")
        if not _PARTITION_COLUMN.fullmatch(self.column):
            raise ValueError(f"The partition column {self.column!r} is not lower-case letters, digits and _.")
        return self

    @classmethod
    def parse(cls, text: str) -> PartitionSpec:
        """The spec a ``partition_by`` text says, or BadPartitionSpec naming the text and what is wrong there."""
        if not isinstance(text, str) or not text.strip():
            raise BadPartitionSpec(f"The partition spec {text!r} is empty. {_ACCEPTED}")
        tokens = _tokens(text)
        kinds = [kind for kind, _ in tokens]
        name = None
        if len(tokens) >= 2 and kinds[-2] == "word" and tokens[-2][1].lower() == "as":
            if kinds[-1] not in ("word", "quoted"):
                _refuse(text, f"`AS` is followed by {tokens[-1][1]!r}, not a name")
            name = _name(tokens[-1])
            if not _PARTITION_COLUMN.fullmatch(name):
                _refuse(text, f"the partition column's name {name!r} is not lower-case letters, digits and _ "
                              "(it names the partition's directories too)")
            tokens, kinds = tokens[:-2], kinds[:-2]
        if kinds in (["word"], ["quoted"]):
            transform, source, argument = Transform.IDENTITY, _name(tokens[0]), None
        elif kinds[:2] == ["word", "("] and kinds[-1:] == [")"]:
            transform, source, argument = _call(text, tokens)
        else:
            found = " ".join(value for _, value in tokens)
            _refuse(text, f"found {found!r}, which is neither a column nor a transform of one")
        column = name or _default_column(text, transform, source)
        return cls(transform=transform, source=source, argument=argument, column=column)

    @property
    def text(self) -> str:
        """The spec in its one spelling, the partition column named: for messages and the table's records."""
        source = self.source if re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", self.source) else (
            "`" + self.source.replace("`", "``") + "`")
        if self.transform is Transform.IDENTITY:
            call = source
        elif self.argument is None:
            call = f"{self.transform}({source})"
        else:
            call = f"{self.transform}({source}, {self.argument})"
        return f"{call} AS {self.column}"

    def resolve(self, columns: Sequence[tuple[str, str]], time_zone: str = "UTC") -> Partitioning:
        """The spec bound to the table's columns (name, MySQL COLUMN_TYPE) and its readers' zone (``hive:
        time_zone``), or BadPartitionSpec: an unknown column, a type the transform does not take, a partition
        column named like a column of the table."""
        problem = zone_problem(time_zone)
        if problem is None:
            try:
                zoneinfo.ZoneInfo(time_zone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                problem = f"The time zone {time_zone!r} is not a zone name such as UTC or Asia/Shanghai."
        if problem:
            raise BadPartitionSpec(problem)
        exact = [(name, ctype) for name, ctype in columns if name == self.source]
        found = exact or [(name, ctype) for name, ctype in columns if name.lower() == self.source.lower()]
        if len(found) != 1:
            names = ", ".join(name for name, _ in columns)
            raise BadPartitionSpec(f"The partition spec {self.text!r} names the column {self.source!r}, which the "
                                   f"table does not have (its columns: {names}). Name one of its columns.")
        name, column_type = found[0]
        refusal = _type_problem(self.transform, column_type)
        if refusal:
            raise BadPartitionSpec(
                f"The partition spec {self.text!r} cannot partition by the column {name!r} of type {column_type}: "
                f"{refusal}. {self.transform} takes {ACCEPTED_TYPES[self.transform]}.")
        clash = [n for n, _ in columns if n.lower() == self.column]
        if clash:
            raise BadPartitionSpec(
                f"The partition spec {self.text!r} names its partition column {self.column!r}, which the table "
                f"has as a column ({clash[0]!r}). Name the partition column otherwise: write "
                f"`{self.text.rsplit(' AS ', 1)[0]} AS another_name`.")
        # The zone is kept only where it changes a value (a TIMESTAMP's bucket is of its UTC text, as verify's),
        # so that two bindings are equal when their layouts are.
        kind = kind_of(column_type)
        zoned = kind == "datetime" or (kind == "timestamp" and self.transform in TIME_TRANSFORMS)
        return Partitioning(spec=self, source_column=name, source_type=column_type,
                            time_zone=time_zone if zoned else "UTC")


class Partitioning(Model):
    """A partition spec bound to its table: the source column as the table spells it, its MySQL type, and the
    readers' zone where it changes the partition (a DATETIME source; a TIMESTAMP under a time transform), else
    UTC. Two tables are laid out alike when these are equal."""

    spec: PartitionSpec
    source_column: str
    source_type: str
    time_zone: str = "UTC"

    @model_validator(mode="after")
    def _valid(self) -> Partitioning:
        problem = _type_problem(self.spec.transform, self.source_type) or zone_problem(self.time_zone)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def column(self) -> str:
        return self.spec.column

    @property
    def hive_type(self) -> str:
        """The partition column's Hive type, as Spark SQL writes it."""
        transform = self.spec.transform
        if transform in TIME_TRANSFORMS:
            return "string"
        if transform is Transform.BUCKET:
            return "int"
        source = hive_type(self.source_type)
        if transform is Transform.TRUNCATE:
            return source if source.startswith("decimal") else "bigint"
        return source

    @property
    def source_kind(self) -> str:
        """The source column's kind (``core.checksum.kind_of``): what decides its text and its time."""
        return kind_of(self.source_type)

    def value(self, value: Any) -> Any:
        """The partition value of a row whose source column holds ``value``, as the capture stages give it
        (``core.values``: int, Decimal or int for BIGINT UNSIGNED, str, bytes, bool, date, naive datetime: a
        DATETIME's wall clock, a TIMESTAMP's UTC; timedelta), or None for the NULL partition. The value is what
        PySpark collects from the partition column: str, int, Decimal or date."""
        if value is None:
            return None
        transform = self.spec.transform
        if transform is Transform.IDENTITY:
            if isinstance(value, str):
                return value or None  # Hive and Spark hold an empty partition string as the default partition
            if self.hive_type.startswith("decimal"):
                return Decimal(value)
            return value
        if transform is Transform.TRUNCATE:
            width = self.spec.argument or 1
            lower = int(value) // width * width  # floor: -1 lands in -width
            if self.hive_type.startswith("decimal"):
                return Decimal(lower)
            return lower if lower >= _BIGINT_MIN else None
        if transform is Transform.BUCKET:
            return bucket_of(key_text([self._held(value)], [self.source_type]), self.spec.argument or 1)
        return time_text(self._held(value), transform)

    def _held(self, value: Any) -> Any:
        """The value as Hive holds it, where its text or time depends on that: a DECIMAL with its column's scale
        (``1.5`` in a DECIMAL(12,2) is ``1.50``); a DATETIME or TIMESTAMP as a reader in the table's zone sees it
        (digits, naive)."""
        kind = self.source_kind
        if kind == "decimal":
            return Decimal(value).quantize(Decimal(1).scaleb(-ColumnType.parse(self.source_type).decimal[1]))
        if self.time_zone == "UTC" or not isinstance(value, dt.datetime):
            return value
        if kind == "timestamp":
            return shown_in_zone(value, self.time_zone) if self.spec.transform in TIME_TRANSFORMS else value
        if kind == "datetime":
            return wall_clock_held(value, self.time_zone)
        return value


def time_text(value: dt.date, transform: Transform) -> str:
    """A date or a naive datetime's partition text for a time transform: ``2026``, ``2026-11``, ``2026-11-25``,
    ``2026-11-25-13`` (years zero-padded to four digits, as Spark's ``yyyy`` prints them)."""
    text = f"{value.year:04d}"
    if transform in (Transform.MONTH, Transform.DAY, Transform.HOUR):
        text += f"-{value.month:02d}"
    if transform in (Transform.DAY, Transform.HOUR):
        text += f"-{value.day:02d}"
    if transform is Transform.HOUR:
        text += f"-{value.hour:02d}"  # type: ignore[attr-defined]  # hour takes only datetimes (_type_problem)
    return text


def shown_in_zone(instant: dt.datetime, zone: str) -> dt.datetime:
    """A TIMESTAMP (naive UTC) as a reader in ``zone`` sees it: its wall clock there."""
    return instant.replace(tzinfo=dt.UTC).astimezone(zoneinfo.ZoneInfo(zone)).replace(tzinfo=None)


def wall_clock_held(wall_clock: dt.datetime, zone: str) -> dt.datetime:
    """A DATETIME's digits as the Hive table holds them for readers in ``zone``: the same digits, except a time
    the zone skips, which the merge writes as the time after the gap (Java's rule, ``docs/types.md``). Python's
    rule for a skipped time (fold 0: the offset before the change) lands on the same instant."""
    tz = zoneinfo.ZoneInfo(zone)
    try:
        there = wall_clock.replace(tzinfo=tz).astimezone(dt.UTC).astimezone(tz)
    except OverflowError:  # within a day of year 1 or 9999: zones kept one fixed offset then, no gaps
        return wall_clock
    return there.replace(tzinfo=None)


def metastore_value(value: Any) -> str:
    """A partition value as the metastore holds it, a string: NULL as ``NULL_PARTITION``, a date in ISO form, a
    decimal without exponent."""
    if value is None:
        return NULL_PARTITION
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def table_partitioning(table: str, spec: PartitionSpec | None, columns: Sequence[tuple[str, str]],
                       time_zone: str) -> Partitioning | None:
    """The configured spec of ``table`` (schema.table) bound to its columns and the readers' zone (``hive:
    time_zone``), None for a table not partitioned; or BadPartitionSpec naming the table and what to do, so that
    the check refuses it before anything of it is read."""
    if spec is None:
        return None
    try:
        return spec.resolve(columns, time_zone)
    except BadPartitionSpec as exc:
        raise BadPartitionSpec(
            f"The table {table} cannot be partitioned as its `partition_by:` says: {exc} Change or remove the "
            "`partition_by:` of the table entry that selects it (a table a pattern selects can be given an entry "
            "of its own, which wins); until then the table is not captured.") from None


# --- parsing ----------------------------------------------------------------------------------------------

def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, at = [], 0
    while at < len(text.rstrip()):
        match = _TOKEN.match(text, at)
        if not match or match.end() == at:
            rest = text[at:].strip()
            _refuse(text, f"found {rest[:40]!r}, where a name, a number, a parenthesis or a comma was expected"
                    + (" (a backtick left open)" if rest.startswith("`") else ""))
            break
        kind = match.lastgroup or ""
        value = match[kind]
        tokens.append((value if kind == "punct" else kind, value))
        at = match.end()
    return tokens


def _name(token: tuple[str, str]) -> str:
    kind, value = token
    return value[1:-1].replace("``", "`") if kind == "quoted" else value


def _call(text: str, tokens: list[tuple[str, str]]) -> tuple[Transform, str, int | None]:
    function = tokens[0][1].lower()
    inner = tokens[2:-1]
    kinds = [kind for kind, _ in inner]
    if function in _SPARK_NAMES:
        _refuse(text, f"{tokens[0][1]}(…) is Spark's spelling: write {_SPARK_NAMES[function]}(column)")
    if function == "identity":
        _refuse(text, "an identity partition is the bare column: write the column's name alone")
    names = {t.value for t in Transform} - {Transform.IDENTITY.value}
    if function not in names:
        _refuse(text, f"{tokens[0][1]!r} is not a transform")
    transform = Transform(function)
    takes_number = transform in (Transform.TRUNCATE, Transform.BUCKET)
    if takes_number and kinds in (["number", ",", "word"], ["number", ",", "quoted"]):
        _refuse(text, f"the number comes after the column (Spark's order is the other way round): write "
                      f"{function}({inner[2][1]}, {inner[0][1]})")
    if not takes_number and kinds in (["word"], ["quoted"]):
        return transform, _name(inner[0]), None
    if takes_number and len(kinds) == 3 and kinds[0] in ("word", "quoted") and kinds[1:] == [",", "number"]:
        number = int(inner[2][1])
        what = "width" if transform is Transform.TRUNCATE else "number of buckets"
        limit = MAX_WIDTH if transform is Transform.TRUNCATE else MAX_BUCKETS
        if not 1 <= number <= limit:
            _refuse(text, f"the {what} is {number}; it must be from 1 to {limit}")
        return transform, _name(inner[0]), number
    wanted = f"{function}(column, {'width' if transform is Transform.TRUNCATE else 'count'})" if takes_number \
        else f"{function}(column)"
    found = " ".join(value for _, value in inner) or "nothing"
    _refuse(text, f"{function} takes {wanted}; found {found!r} between the parentheses")
    raise AssertionError  # _refuse raised


def _default_column(text: str, transform: Transform, source: str) -> str:
    if transform in TIME_TRANSFORMS:
        return DEFAULT_TIME_COLUMN
    name = f"{source.lower()}_{_DEFAULT_SUFFIX[transform]}"
    if not _PARTITION_COLUMN.fullmatch(name):
        _refuse(text, f"the partition column's default name would be {name!r}, which is not lower-case letters, "
                      "digits and _: name it with `AS name`")
    return name


def _refuse(text: str, problem: str) -> None:
    raise BadPartitionSpec(f"The partition spec {text!r} is not accepted: {problem}. {_ACCEPTED}")


# --- the types each transform takes -----------------------------------------------------------------------

def _type_problem(transform: Transform, column_type: str) -> str | None:
    """Why ``transform`` cannot partition by a column of ``column_type``, or None."""
    try:
        t = ColumnType.parse(column_type)
        kind = kind_of(column_type)
    except CdcError:
        return f"the type {column_type!r} has no Hive mapping"
    base = t.base
    if transform is Transform.IDENTITY:
        if base in _INTS or base in ("year", "date"):
            return None
        if base in _STRINGS:
            longest = max((len(m) for m in t.members()), default=0) if base == "enum" else (t.numbers() or [1])[0]
            if longest <= MAX_IDENTITY_CHARS:
                return None
            return (f"its values reach {longest} characters, more than a partition value may hold "
                    f"({MAX_IDENTITY_CHARS}); bucket(column, count) spreads such values instead")
        if base in ("datetime", "timestamp"):
            return "a partition per instant would hold a row or two each: partition by day(column) or hour(column)"
        return "its values are not exact, short or few enough to name partitions: bucket(column, count) spreads them"
    if transform in TIME_TRANSFORMS:
        accepted = ("datetime", "timestamp") if transform is Transform.HOUR else ("date", "datetime", "timestamp")
        if base in accepted:
            return None
        return "a DATE has no hour" if base == "date" else "the column holds no date"
    if transform is Transform.TRUNCATE:
        return None if base in _INTS else "the column is not an integer"
    if kind in _BUCKET_KINDS:
        return None
    return ("approximate numbers, JSON documents and geometries have no text that Spark and the source server "
            "compute alike")
