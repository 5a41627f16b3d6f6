"""Row texts that the source server and Spark compute alike: the ground of a checksum of a Hive version.

To compare a Hive table with its source without shipping rows, both sides turn each row into the same text and
hash it. The server computes the text in SQL from the stored value (``source_text``); Spark from the value the
Hive table holds (``spark_text``), with Spark's functions where Spark can spell it the server's way, else with a
Python function over the Hive value (``hive_text``, which also gives every other type, for tests). The texts follow
the server's own printing where the Hive value allows it:

- integers, decimals, TIME (microseconds), strings, ENUM, SET, INET, UUID: their text; BIT(1) ``1``/``0``;
  binary strings, BIT(n) and geometries: upper-case hex (a geometry as the server stores it: SRID, then WKB);
- dates and times in one fixed form, ``YYYY-MM-DD`` and ``YYYY-MM-DD HH:MM:SS.ffffff`` (TIMESTAMP in UTC); the
  zero and invalid dates the copy holds as NULL are NULL on the server side too;
- FLOAT and DOUBLE as MariaDB prints a DOUBLE (``mariadb_double_text``; a FLOAT widened to DOUBLE, exactly);
- JSON on MariaDB as ``JSON_NORMALIZE`` prints it (``json_normalized``). It keeps a string's escapes as they
  were written (``\\u00e9`` stays so), which the copy's canonical JSON does not remember: such a row differs
  in its checksum though its value is the same, and is cleared by comparing the values themselves. MySQL has no
  ``JSON_NORMALIZE``: there a JSON column counts by its NULL flag only.

A row's text joins its columns' texts with ``#`` and ends with one flag per column, 1 for a NULL text, so
that NULL and an empty string differ. A bucket's checksum is its row count and the XOR, over its rows, of the
first 64 bits of the SHA-256 of each row's text (``text_hash_sql``): order-free. (Spark XORs them as signed 64-bit
integers: the same bits.) SHA-256, not MD5: MySQL 9 has no ``MD5()`` (nor ``SHA1()``); ``SHA2()`` is in every MySQL
from 5.5 and every MariaDB, and in Spark.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
import zlib
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Literal

from airflow_cdc_provider.core.identifiers import formatted, quote_identifier
from airflow_cdc_provider.core.types import GEOMETRIES, ColumnType, arrow_type
from airflow_cdc_provider.core.values import EWKB_SRID_FLAG, shortest_digits

_TEXTS = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "inet4", "inet6", "uuid"}
DATETIME_FORMAT_SQL = "%Y-%m-%d %H:%i:%s.%f"
DATE_FORMAT_SPARK = "yyyy-MM-dd"
DATETIME_FORMAT_SPARK = "yyyy-MM-dd HH:mm:ss.SSSSSS"


def kind_of(column_type: str) -> str:
    """What decides a column's text: int, decimal, decimal_text, float, double, bit1, bits, text, json, binary,
    geometry, date, datetime, timestamp, time or year."""
    t = ColumnType.parse(column_type)
    base = t.base
    if base == "year":
        return "year"
    if base in ("tinyint", "smallint", "mediumint", "int", "integer", "bigint"):
        return "int"
    if base in ("decimal", "numeric", "dec", "fixed"):
        return "decimal" if str(arrow_type(column_type)).startswith("decimal") else "decimal_text"
    if base == "float":
        return "float"
    if base in ("double", "real", "double precision"):
        return "double"
    if base == "bit":
        return "bit1" if t.bits == 1 else "bits"
    if base == "json":
        return "json"
    if base in _TEXTS:
        return "text"
    if base in GEOMETRIES:
        return "geometry"
    if base in ("date", "datetime", "timestamp", "time"):
        return base
    arrow_type(column_type)  # raises UnsupportedType for a type with no mapping
    return "binary"


# --- the server's side ------------------------------------------------------------------------------------

# The hash every digest of a row's or a key's text is cut from, on both sides (``text_hash_sql``; Spark's
# ``spark.row_texts.text_hash``). Its name is kept in each digests file (``stages.diff``), so that one written
# with another hash is known as such.
TEXT_HASH = "sha256"


def text_hash_sql(text: str) -> str:
    """The SQL expression of the hash of a text, in hex digits (``TEXT_HASH``): a function both servers have."""
    return f"SHA2({text}, 256)"


def source_text(name: str, column_type: str, mariadb: bool, every_json: bool = False) -> str | None:
    """The SQL expression of a column's text on the server (NULL for NULL), or None for a column counted by its
    NULL flag only (JSON on MySQL, unless ``every_json``: then its print, for texts compared only with texts of
    the same server). The session reads times in UTC (``MySqlSourceHook`` sets it)."""
    col = quote_identifier(name)
    kind = kind_of(column_type)
    if kind == "json" and every_json and not mariadb:
        return f"CAST({col} AS CHAR)"
    if kind in ("int", "decimal", "decimal_text"):
        return f"CAST({col} + 0 AS CHAR)"  # + 0: ZEROFILL pads only what is displayed
    if kind == "year":
        return f"CAST(NULLIF({col} + 0, 0) AS CHAR)"  # the zero year is NULL in the copy
    if kind in ("float", "double"):
        # Through a DOUBLE expression: a column's ZEROFILL pads what CAST prints (the copy holds the number).
        return f"CAST(CAST({col} AS DOUBLE) AS CHAR)"
    if kind == "bit1":
        return f"CAST({col} + 0 AS CHAR)"
    if kind == "bits":
        width = 2 * ((ColumnType.parse(column_type).bits + 7) // 8)
        return f"LPAD(HEX({col}), {width}, '0')"
    if kind == "text":
        return f"CONVERT(CAST({col} AS CHAR) USING utf8mb4)"
    if kind == "json":
        return f"JSON_NORMALIZE({col})" if mariadb else None
    if kind in ("binary", "geometry"):
        return f"HEX({col})"
    if kind == "date":
        return f"IF({_invalid_date(col)}, NULL, DATE_FORMAT({col}, '%Y-%m-%d'))"
    if kind in ("datetime", "timestamp"):
        return f"IF({_invalid_date(col)}, NULL, DATE_FORMAT({col}, '{DATETIME_FORMAT_SQL}'))"
    if kind == "time":
        # From its parts, which both servers give alike (absolute, the sign apart): MySQL's TIME_TO_SEC drops the
        # fraction of a second, where MariaDB's keeps it.
        return (f"CAST(IF(LEFT(CAST({col} AS CHAR), 1) = '-', -1, 1) * ((((HOUR({col}) * 60 + MINUTE({col})) * 60 "
                f"+ SECOND({col})) * 1000000 + MICROSECOND({col}))) AS CHAR)")
    raise AssertionError(kind)


def _invalid_date(col: str) -> str:
    # A zero date, a zero month or day, year 0: the copy holds NULL (core.values).
    return f"(YEAR({col}) = 0 OR MONTH({col}) = 0 OR DAYOFMONTH({col}) = 0)"


def source_row_text(columns: Sequence[tuple[str, str]], mariadb: bool, every_json: bool = False) -> str:
    """The SQL expression of a row's text (``every_json``: as ``source_text`` takes it)."""
    texts = [source_text(name, ctype, mariadb, every_json) for name, ctype in columns]
    flags = ", ".join(_null_flag(name, ctype) for name, ctype in columns)
    return "CONCAT_WS('#', " + ", ".join(t for t in texts if t is not None) + f", CONCAT({flags}))"


def _null_flag(name: str, column_type: str) -> str:
    """1 where the column's text is NULL, else 0: the flag of the text, not of the column (a zero date is a value
    on the server and NULL in the copy), computed from the column, which costs less than the text again."""
    col = quote_identifier(name)
    kind = kind_of(column_type)
    if kind in ("date", "datetime", "timestamp"):
        return f"({col} IS NULL OR {_invalid_date(col)})"
    if kind == "year":
        return f"({col} IS NULL OR {col} + 0 = 0)"
    return f"ISNULL({col})"


# The text of a key part the copy holds as NULL. Key columns are NOT NULL at the source (``core.keys``), but a zero
# date in one is NULL in the copy. CONCAT_WS would skip it, and two keys, (zero date, 2020-01-01) and (2020-01-01,
# zero date), would have one text: verify would list them as one row. A key part that can be NULL here is a date,
# a time of day or a year, whose texts are digits and punctuation: none of them can be this word.
NULL_KEY_TEXT = "NULL"


def source_key_text(columns: Sequence[tuple[str, str]], key: Sequence[str], mariadb: bool) -> str:
    """The SQL expression of a row's key text: its parts' texts joined by ``#``, NULL_KEY_TEXT for a NULL one."""
    types = dict(columns)
    return "CONCAT_WS('#', " + ", ".join(f"IFNULL({source_text(name, types[name], mariadb)}, '{NULL_KEY_TEXT}')"
                                         for name in key) + ")"


def source_bucket_sums(table: str, columns: Sequence[tuple[str, str]], key: Sequence[str], mariadb: bool,
                       buckets: int, where: str = "", part: tuple[int, int] | None = None) -> str:
    """The statement that sums each bucket on the server (``table`` quoted; ``where`` a condition on the key with
    ``%s`` placeholders, to read one range of keys): rows (bucket, row count, XOR of the rows' digests: the first
    64 bits of the hash of each row's text, unsigned). ``part`` (index, of): only the buckets ``b % of == index``
    (a rolling verify's slice); the others' rows are read for their key but build no text and no digest. Run it
    with arguments (a list, perhaps empty): its own ``%`` are doubled for them (in the table's name too)."""
    row = formatted(source_row_text(columns, mariadb))
    bucket = f"MOD(CRC32({formatted(source_key_text(columns, key, mariadb))}), {int(buckets)})"
    conditions = [where] if where else []
    if part is not None:
        conditions.append(f"MOD({bucket}, {int(part[1])}) = {int(part[0])}")
    return (f"SELECT {bucket} AS bucket, COUNT(*), BIT_XOR(CONV(SUBSTRING({text_hash_sql(row)}, 1, 16), 16, 10)) "
            f"FROM {formatted(table)}{' WHERE ' + ' AND '.join(f'({c})' for c in conditions) if conditions else ''}"
            " GROUP BY bucket")


# --- Spark's side -----------------------------------------------------------------------------------------

SparkText = Literal["string", "bit1", "hex", "date", "datetime", "zoned_datetime", "python"]


def spark_text(column_type: str, mariadb: bool, time_zone: str = "UTC") -> SparkText | None:
    """How Spark spells a column's text over the Hive table, or None for a column counted by its NULL flag only.
    The Spark job (``spark.verify_job``) builds each from the column object, never from an expression string:

    - ``string``: the value cast to a string; ``bit1``: a boolean as ``1``/``0``; ``hex``: upper-case hex;
    - ``date``: ``DATE_FORMAT_SPARK``; ``datetime``: ``DATETIME_FORMAT_SPARK``; ``zoned_datetime``: the same,
      of the instant moved from UTC into ``time_zone`` first;
    - ``python``: ``hive_text`` in a vectorised function (float, double, json, geometry).

    The session is in UTC. A DATETIME is held as the instant its digits name in ``time_zone`` (the
    ``hive.time_zone`` readers use), so its digits are those of that zone; a TIMESTAMP's are UTC's, as the server
    prints it."""
    kind = kind_of(column_type)
    if kind in ("int", "decimal", "decimal_text", "year", "time", "text"):
        return "string"
    if kind == "bit1":
        return "bit1"
    if kind in ("bits", "binary"):
        return "hex"
    if kind == "date":
        return "date"
    if kind == "datetime" and time_zone != "UTC":
        return "zoned_datetime"
    if kind in ("datetime", "timestamp"):
        return "datetime"
    if kind == "json" and not mariadb:
        return None
    return "python"


# --- the Hive value's text, in Python ---------------------------------------------------------------------

def hive_text(value: Any, column_type: str, mariadb: bool = True) -> str | None:
    """A column's text from the value the Hive table holds (as Spark or pyarrow give it): what ``source_text``
    gives on the server for the value the copy came from."""
    if value is None:
        return None
    kind = kind_of(column_type)
    if kind in ("float", "double"):
        return mariadb_double_text(float(value))
    if kind == "json":
        return json_normalized(value) if mariadb else None
    if kind == "geometry":
        return stored_geometry(bytes(value)).hex().upper()
    if kind in ("bits", "binary"):
        return bytes(value).hex().upper()
    if kind == "bit1":
        return "1" if value else "0"
    if kind == "decimal":
        return format(value, "f") if value != 0 else format(abs(Decimal(value)), "f")
    if kind == "date":
        return f"{value.year:04d}-{value:%m-%d}"
    if kind == "time" and isinstance(value, dt.timedelta):  # the capture files' duration: Hive holds microseconds
        return str(value // dt.timedelta(microseconds=1))
    if kind in ("datetime", "timestamp"):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return f"{value.year:04d}-{value:%m-%d %H:%M:%S.%f}"
    return str(value)


def key_text(values: Sequence[Any], column_types: Sequence[str], mariadb: bool = True) -> str:
    """A key's text from the values the copy holds (as ``source_key_text`` gives it on the server)."""
    texts = (hive_text(value, ctype, mariadb) for value, ctype in zip(values, column_types, strict=True))
    return "#".join(NULL_KEY_TEXT if text is None else text for text in texts)


def mariadb_double_text(x: float) -> str:
    """A DOUBLE as MariaDB prints it: the shortest digits that read back to the same double (as Python's
    ``repr``), in plain notation while the point falls 14 places left of the first digit or up to 15 places
    right of it, else as ``1.2345e16`` (no ``+``, no padded exponent). Checked on 6 000 doubles against
    MariaDB 10.11 (random bit patterns and magnitudes): every one the same."""
    if x == 0:
        return "0"  # -0 too
    sign, digits, point = shortest_digits(x)  # the value is ±0.DIGITS × 10^point
    n = len(digits)
    if point < -14 or (point > 15 and point >= n):
        return f"{sign}{digits[0]}{'.' + digits[1:] if n > 1 else ''}e{point - 1}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= n:
        return f"{sign}{digits}{'0' * (point - n)}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def json_normalized(text: str) -> str:
    """A JSON text as MariaDB's ``JSON_NORMALIZE`` prints it: keys sorted, no blanks, every number in the form
    ``1.5E0`` (its decimal digits kept, ``-0`` as ``0.0E0``). Strings are written with the fewest escapes."""
    return _normalized(json.loads(text, parse_float=Decimal, parse_int=Decimal))


def _normalized(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{_string(k)}:{_normalized(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_normalized(v) for v in value) + "]"
    if isinstance(value, str):
        return _string(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return _number(Decimal(value))


def _number(value: Decimal) -> str:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):  # NaN and infinities: no column holds them
        raise ValueError(f"{value} is not a finite number")
    text = "".join(map(str, digits)).rstrip("0")
    if not text:
        return "0.0E0"
    trailing = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    power = len(text) - 1 + exponent + trailing
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def stored_geometry(wkb: bytes) -> bytes:
    """The server's stored form of a geometry (a little-endian SRID, then WKB) from the WKB or EWKB the copy
    holds (``core.values.standard_wkb`` in reverse)."""
    order = "<" if wkb[0] == 1 else ">"
    (kind,) = struct.unpack(order + "I", wkb[1:5])
    if not kind & EWKB_SRID_FLAG:
        return bytes(4) + wkb
    (srid,) = struct.unpack(order + "I", wkb[5:9])
    return struct.pack("<I", srid) + wkb[:1] + struct.pack(order + "I", kind & ~EWKB_SRID_FLAG) + wkb[9:]


def bucket_of(key_text: str, buckets: int) -> int:
    """A key's bucket, as the server's ``MOD(CRC32(key text), buckets)`` gives it (CRC32 of the UTF-8 bytes)."""
    return zlib.crc32(key_text.encode()) % buckets
