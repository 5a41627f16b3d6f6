"""MySQL column types to Arrow types: what the upsert and delete files, and so Spark and Hive, hold.

Values from either way in (the snapshot SELECT and the binlog) are Python values that ``pyarrow.array`` takes
as they are for these types: ints, Decimal, str, bytes, date, naive datetime (TIMESTAMP: naive UTC, which Arrow
stores as the UTC instant) and timedelta.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from airflow_cdc_provider.core.records import RawHeader

HEADER_METADATA = "cdc.header"

_TYPE = re.compile(r"^\s*([a-z ]+?)\s*(?:\(([^)]*)\))?\s*(unsigned)?\s*(zerofill)?\s*$", re.I)
_INTS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}
_STRINGS = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
_BINARIES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit", "geometry", "point",
             "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection"}


def arrow_type(column_type: str) -> pa.DataType:
    """The Arrow type for a MySQL COLUMN_TYPE such as ``int(10) unsigned`` or ``decimal(12,2)``."""
    match = _TYPE.match(column_type or "")
    if not match:
        raise ValueError(f"Cannot read the column type {column_type!r}.")
    base, args, unsigned = match[1].lower(), match[2], bool(match[3])
    if base in _INTS:
        bits = _INTS[base] + (1 if unsigned else 0)
        if bits > 64:
            return pa.decimal128(20, 0)  # BIGINT UNSIGNED reaches 18446744073709551615
        return pa.int8() if bits <= 8 else pa.int16() if bits <= 16 else pa.int32() if bits <= 32 else pa.int64()
    if base in ("decimal", "numeric", "dec", "fixed"):
        precision, _, scale = (args or "10,0").partition(",")
        precision, scale = int(precision), int(scale or 0)
        return pa.decimal128(precision, scale) if precision <= 38 else pa.string()
    if base in ("float",):
        return pa.float32()
    if base in ("double", "real", "double precision"):
        return pa.float64()
    if base in _STRINGS:
        return pa.string()
    if base in _BINARIES:
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
    raise ValueError(f"The column type {column_type!r} has no mapping yet.")


def arrow_schema(columns: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> pa.Schema:
    return pa.schema([pa.field(name, arrow_type(ctype)) for name, ctype in columns])


def file_schema(header: RawHeader) -> pa.Schema:
    """The schema of an upsert file: the Arrow types, with the table's header (MySQL types, key) as metadata.

    The merge reads the header from the file it merges, not from the table as it is by then.
    """
    return arrow_schema(header.columns).with_metadata({HEADER_METADATA: header.format().strip()})


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
    return _HIVE.get(str(arrow_type(column_type)), None) or _hive_of(arrow_type(column_type))


_HIVE = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint", "float": "float",
         "double": "double", "string": "string", "binary": "binary", "date32[day]": "date",
         "timestamp[us]": "timestamp", "timestamp[us, tz=UTC]": "timestamp", "duration[us]": "bigint"}


def _hive_of(arrow: pa.DataType) -> str:
    if pa.types.is_decimal(arrow):
        return f"decimal({arrow.precision},{arrow.scale})"
    raise ValueError(f"The Arrow type {arrow} has no Hive type.")


def arrow_table(rows: Sequence[Sequence[Any]], schema: pa.Schema) -> pa.Table:
    """Rows (value lists in the schema's column order) as an Arrow table of that schema."""
    columns = zip(*rows) if rows else [()] * len(schema)
    return pa.Table.from_arrays([pa.array(col, type=f.type) for col, f in zip(columns, schema)], schema=schema)
