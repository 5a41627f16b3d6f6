"""The type map: each MySQL and MariaDB column type to the Arrow type of the capture files and the Hive type.

``docs/types.md`` is this module as a table, with the reason for each awkward rule. Values reach
``pyarrow.array`` already normalised by ``core.values`` (the same Python value from the snapshot and from the
binlog): ints, bool, Decimal, str, bytes, date, naive datetime (TIMESTAMP: naive UTC, which Arrow stores as
the UTC instant) and timedelta.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.identifiers import hive_column_problem
from airflow_cdc_provider.core.records import RawHeader

HEADER_METADATA = "cdc.header"
SPARK_MAX_PRECISION = 38

_TYPE = re.compile(r"^\s*([a-z0-9 ]+?)\s*(?:\((.*)\))?\s*(unsigned)?\s*(zerofill)?\s*$", re.I | re.S)
_INTS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}
_TEXTS = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
_BLOBS = {"varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
GEOMETRIES = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
              "geometrycollection", "geomcollection"}


# Types whose values only max_allowed_packet bounds (up to 1 GB a value): a read measures them (``core.batches``),
# and a capture file keeps no Parquet statistics or dictionary of them, which for a 200 MB value cost seconds and a
# gigabyte more (its min and max are copies of it) and serve nothing: no one filters a merge's input on a document.
UNBOUNDED = frozenset({"text", "mediumtext", "longtext", "blob", "mediumblob", "longblob", "json", *GEOMETRIES})


class UnsupportedType(CdcError):
    """A column type with no Hive mapping: named with its column, found before anything is read."""


class UnsupportedColumnName(CdcError):
    """A column name a Hive table cannot hold: named with the character, found before anything is read."""


@dataclass(frozen=True)
class ColumnType:
    """A COLUMN_TYPE as information_schema spells it: ``int(10) unsigned``, ``set('a','b')``, ``decimal(65,30)``."""

    base: str
    args: str | None = None
    unsigned: bool = False

    @classmethod
    def parse(cls, text: str) -> ColumnType:
        match = _TYPE.match(text or "")
        if not match:
            raise UnsupportedType(f"Cannot read the column type {text!r}.")
        return cls(" ".join(match[1].lower().split()), match[2], bool(match[3]))

    def numbers(self) -> list[int]:
        """The numeric arguments: ``decimal(12,2)`` gives [12, 2], ``bit(9)`` [9], ``datetime(6)`` [6]."""
        return [int(a) for a in (self.args or "").split(",") if a.strip().isdigit()]

    def members(self) -> list[str]:
        """The members of an ENUM or SET, in definition order (quotes undone)."""
        return [m.replace("''", "'").replace("\\\\", "\\") for m in re.findall(r"'((?:[^']|'')*)'", self.args or "")]

    @property
    def decimal(self) -> tuple[int, int]:
        precision, scale = (self.numbers() + [10, 0])[:2] if self.args else (10, 0)
        return precision, scale

    @property
    def bits(self) -> int:
        return (self.numbers() or [1])[0]


def arrow_type(column_type: str) -> pa.DataType:
    """The Arrow type of the capture files for a MySQL COLUMN_TYPE."""
    t = ColumnType.parse(column_type)
    base = t.base
    if base in _INTS:
        bits = _INTS[base] + (1 if t.unsigned else 0)
        if bits > 64:
            return pa.decimal128(20, 0)  # BIGINT UNSIGNED reaches 18446744073709551615
        return pa.int8() if bits <= 8 else pa.int16() if bits <= 16 else pa.int32() if bits <= 32 else pa.int64()
    if base in ("decimal", "numeric", "dec", "fixed"):
        precision, scale = t.decimal
        # Spark's decimals stop at precision 38; wider ones land as their exact text.
        return pa.decimal128(precision, scale) if precision <= SPARK_MAX_PRECISION else pa.string()
    if base == "float":
        return pa.float32()
    if base in ("double", "real", "double precision"):
        return pa.float64()
    if base == "bit":
        return pa.bool_() if t.bits == 1 else pa.binary()
    if base in _TEXTS or base in ("enum", "set", "json", "inet4", "inet6", "uuid"):
        return pa.string()
    if base in _BLOBS or base == "binary" or base in GEOMETRIES:
        return pa.binary()
    if base == "date":
        return pa.date32()
    if base == "datetime":
        return pa.timestamp("us")
    if base == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if base == "time":
        return pa.duration("us")
    if base == "year":
        return pa.int16()
    raise UnsupportedType(f"The column type {column_type!r} has no Hive mapping (see docs/types.md).")


def check_columns(table: str, columns: Sequence[tuple[str, str]]) -> None:
    """Raise UnsupportedColumnName naming every column of ``table`` whose name Hive cannot hold, then
    UnsupportedType naming every column whose type has no mapping."""
    names = [f"{name!r} {problem}" for name, _ in columns if (problem := hive_column_problem(name))]
    if names:
        raise UnsupportedColumnName(
            f"The table {table} has columns the Hive table cannot hold: {'; '.join(names)}. Nothing was read. Rename "
            "the column at the source, or leave the table out of the configuration (see docs/types.md).")
    problems = []
    for name, column_type in columns:
        try:
            arrow_type(column_type)
        except UnsupportedType:
            problems.append(f"{name} {column_type}")
    if problems:
        raise UnsupportedType(
            f"The table {table} has columns whose type has no Hive mapping: {', '.join(problems)}. The mapped types "
            "are listed in docs/types.md. Change the column's type, or leave the table out of the configuration."
        )


_JSON_CHECK = re.compile(r"^\s*json_valid\(`((?:[^`]|``)+)`\)\s*$", re.I)


def json_checked_columns(check_clauses: Iterable[str]) -> set[str]:
    """The columns a MariaDB table declares JSON: each has the check ``json_valid(`name`)``."""
    return {m[1].replace("``", "`") for clause in check_clauses if (m := _JSON_CHECK.match(clause or ""))}


def arrow_schema(columns: Sequence[tuple[str, str]]) -> pa.Schema:
    return pa.schema([pa.field(name, arrow_type(ctype)) for name, ctype in columns])


def file_schema(header: RawHeader) -> pa.Schema:
    """The schema of an upsert file: the Arrow types, with the table's header (MySQL types, key) as metadata.

    The merge reads the header from the file it merges, not from the table as it is by then.
    """
    return arrow_schema(header.columns).with_metadata({HEADER_METADATA: header.format().strip()})


def unbounded(column_type: str) -> bool:
    """Whether the column's values have no bound but the server's packet size (TEXT, BLOB, JSON, geometry)."""
    return ColumnType.parse(column_type).base in UNBOUNDED


def parquet_options(columns: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The ParquetWriter options of a capture file of ``columns``: statistics and dictionaries for the bounded
    columns only."""
    bounded = [name for name, ctype in columns if not unbounded(ctype)]
    return {"use_dictionary": bounded, "write_statistics": bounded}


def header_of(schema: pa.Schema) -> RawHeader:
    text = (schema.metadata or {}).get(HEADER_METADATA.encode())
    if text is None:
        raise ValueError(f"The file schema has no {HEADER_METADATA!r} metadata: it was not written by a capture stage.")
    return RawHeader.parse(text.decode())


def hive_type(column_type: str) -> str:
    """The Hive column type (as Spark SQL writes it) for a MySQL COLUMN_TYPE.

    It follows the Arrow type, with two changes Hive needs: DATETIME lands as TIMESTAMP (Hive tables have no
    time-zone-less TIMESTAMP_NTZ; the merge writes the wall clock as a UTC instant, read back in UTC), and a
    TIME, held as a duration, lands as its count of microseconds (Hive tables have no interval type).
    """
    arrow = arrow_type(column_type)
    if pa.types.is_decimal(arrow):
        return f"decimal({arrow.precision},{arrow.scale})"
    return _HIVE[str(arrow)]


def is_hive_type(text: str) -> bool:
    """Whether ``text`` is a Hive type ``hive_type`` gives: the merge writes it into a CREATE TABLE."""
    return text in _HIVE.values() or re.fullmatch(r"decimal\((\d{1,2}),(\d{1,2})\)", text) is not None


_HIVE = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint", "float": "float",
         "double": "double", "bool": "boolean", "string": "string", "binary": "binary", "date32[day]": "date",
         "timestamp[us]": "timestamp", "timestamp[us, tz=UTC]": "timestamp", "duration[us]": "bigint"}


class ValueOfAnotherType(CdcError):
    """A value that does not fit its column's Arrow type: the same values would fail the same way again."""


def arrow_table(rows: Sequence[Sequence[Any]], schema: pa.Schema) -> pa.Table:
    """Rows (value lists in the schema's column order) as an Arrow table of that schema.

    Raises ValueOfAnotherType, naming the column, for a value that does not fit it (bytes in a string column):
    a failure of the table's own, which a retry would repeat, not one of the task.
    """
    return arrow_columns(list(zip(*rows)) if rows else [()] * len(schema), schema)


def arrow_columns(columns: Sequence[Sequence[Any]], schema: pa.Schema) -> pa.Table:
    """Columns of values (one per field of the schema, in its order) as an Arrow table of that schema; raises as
    ``arrow_table`` does."""
    arrays = []
    for col, f in zip(columns, schema):
        try:
            arrays.append(pa.array(col, type=f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueOfAnotherType(
                f"A value of the column {f.name} does not fit its type {f.type}: {str(exc)[:300]}. This is a "
                "fault of the capture, not of the data: report it with the column's type and character set.") from None
    return pa.Table.from_arrays(arrays, schema=schema)
