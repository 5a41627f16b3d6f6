"""A binlog column's type as a COLUMN_TYPE string: the type the column had when the event was written.

The type map (``core.types``) and the value rules (``core.values``) take a column's type as information_schema
spells it, and information_schema gives the table's definition now. A row event is decoded with the table-map
event written just before it, so an event from before an ALTER TABLE has the columns the table had then: added,
dropped or retyped ones differ from today's. ``column_type_of`` rebuilds the COLUMN_TYPE of such a column from
the table-map metadata (``binlog_row_metadata=FULL``), close enough that ``hive_type`` and the value rules treat
it as they treat the information_schema type.

The column is duck-typed on ``pymysqlreplication.column.Column``; nothing here imports the library.
"""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.core.charsets import charset_of_collation

# Type codes of the table-map event (pymysqlreplication.constants.FIELD_TYPE; the server's enum_field_types).
TINY, SHORT, LONG, FLOAT, DOUBLE, TIMESTAMP, LONGLONG, INT24 = 1, 2, 3, 4, 5, 7, 8, 9
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT = 10, 11, 12, 13, 14, 15, 16
TIMESTAMP2, DATETIME2, TIME2 = 17, 18, 19
JSON, NEWDECIMAL, ENUM, SET, BLOB, VAR_STRING, STRING, GEOMETRY = 245, 246, 247, 248, 252, 253, 254, 255

_INTEGERS = {TINY: "tinyint", SHORT: "smallint", INT24: "mediumint", LONG: "int", LONGLONG: "bigint"}
_FRACTIONAL = {TIMESTAMP2: "timestamp", DATETIME2: "datetime", TIME2: "time"}
# Temporal types in the pre-5.6 format carry no fractional-second precision in the binlog.
_PLAIN = {DATE: "date", NEWDATE: "date", YEAR: "year", TIMESTAMP: "timestamp", DATETIME: "datetime",
          TIME: "time", JSON: "json", GEOMETRY: "geometry"}
_BLOB_SIZES = {1: "tiny", 2: "", 3: "medium", 4: "long"}  # bytes of the length prefix
# Bytes per character of the multi-byte character sets; every other one has one byte per character.
_MAX_BYTES_PER_CHAR = {"utf8mb4": 4, "utf8mb3": 3, "utf8": 3, "ucs2": 2, "utf16": 4, "utf16le": 4, "utf32": 4,
                       "big5": 2, "cp932": 2, "eucjpms": 3, "euckr": 2, "gb2312": 2, "gb18030": 4, "gbk": 2,
                       "sjis": 2, "ujis": 3}


def column_type_of(column: Any) -> str:
    """The COLUMN_TYPE of a table-map column, e.g. ``int unsigned``, ``decimal(65,30)``, ``set('a','b')``.

    It keeps what the type map and the value rules use: integer signedness, decimal precision and scale, the
    width of a BIT, the members of an ENUM or SET in order, the length of a BINARY, the fractional-second
    precision of TIME, DATETIME and TIMESTAMP (``time`` for 0), and which of the TEXT or BLOB sizes a blob is.
    Display widths and ZEROFILL are not in the binlog and are left out; so is a geometry's subtype (all of them
    are ``geometry``, which the type map treats alike). CHAR and VARCHAR lengths are in characters, from the
    bytes in the binlog and the column's character set; without a known collation (one the library's table
    lacks) they are left out.

    Two MariaDB types cannot be told apart in the binlog, so the type returned is what they look like there:

    - INET4, INET6 and UUID are fixed-length binary strings of 4, 16 and 16 bytes: ``binary(4)``,
      ``binary(16)``. Their values stay bytes, not the text the server prints.
    - JSON is a LONGTEXT: ``longtext`` (the caller knows a JSON column from information_schema's check).

    MySQL's JSON (its own type code) is ``json``. Raises ValueError for a type code with no mapping, and for a
    string, ENUM or SET column without the character set or members that ``binlog_row_metadata=FULL`` logs.
    """
    code = column.type
    unsigned = " unsigned" if getattr(column, "unsigned", False) else ""
    if code in _INTEGERS:
        return _INTEGERS[code] + unsigned
    if code == NEWDECIMAL:
        return f"decimal({column.precision},{column.decimals}){unsigned}"
    if code in (FLOAT, DOUBLE):
        return ("float" if code == FLOAT else "double") + unsigned
    if code in _FRACTIONAL:
        fsp = getattr(column, "fsp", 0) or 0
        return f"{_FRACTIONAL[code]}({fsp})" if fsp else _FRACTIONAL[code]
    if code == BIT:
        return f"bit({column.bits})"
    if code in (ENUM, SET):
        members = getattr(column, "enum_values" if code == ENUM else "set_values", None)
        if code == ENUM and members is not None:
            members = members[1:]  # the library puts first the value of index 0: '', an invalid value's
        if members is None:
            raise ValueError(_error(column, "has no members in the binlog; binlog_row_metadata=FULL logs them"))
        quoted = ",".join("'" + m.replace("\\", "\\\\").replace("'", "''") + "'" for m in members)
        return f"{'enum' if code == ENUM else 'set'}({quoted})"
    if code in (STRING, VARCHAR, VAR_STRING, BLOB):
        binary = _is_binary(column)
        if code == BLOB:
            return _BLOB_SIZES[column.length_size] + ("blob" if binary else "text")
        fixed = code == STRING
        if binary:
            return f"{'binary' if fixed else 'varbinary'}({column.max_length})"
        kind = "char" if fixed else "varchar"
        per_char = _bytes_per_char(column)
        return f"{kind}({column.max_length // per_char})" if per_char else kind
    if code in _PLAIN:
        return _PLAIN[code]
    raise ValueError(_error(column, "has a type the capture cannot map"))


TEXT_CODES = frozenset({STRING, VARCHAR, VAR_STRING, BLOB})


def text_charset(column: Any) -> str | None:
    """The server's character set of a string, ENUM or SET column of the binlog (``binary`` for bytes), from its
    collation in the table map; None for any other column, and for a collation the reader's table lacks (it then
    names the column's character set ``utf8`` whatever it is, so that name is not taken)."""
    if column.type not in TEXT_CODES and column.type not in (ENUM, SET):
        return None
    collation = getattr(column, "collation_name", None)
    if collation:
        return charset_of_collation(collation)
    return "binary" if getattr(column, "character_set_name", None) == "binary" else None


def _is_binary(column: Any) -> bool:
    charset = getattr(column, "character_set_name", None)
    if charset is None:
        raise ValueError(_error(column, "has no character set in the binlog; binlog_row_metadata=FULL logs it"))
    return bool(charset == "binary")


def _bytes_per_char(column: Any) -> int | None:
    # character_set_name is the library's Python codec ("utf8" for utf8mb3 and utf8mb4 alike); the collation
    # starts with the server's character set name.
    collation = getattr(column, "collation_name", None)
    return _MAX_BYTES_PER_CHAR.get(collation.split("_")[0], 1) if collation else None


def _error(column: Any, problem: str) -> str:
    return f"The binlog column {getattr(column, 'name', None)!r} (type code {column.type}) {problem}."
