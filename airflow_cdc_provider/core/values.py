"""Column values from both ways in, brought to one form: the same row gives the same value in Hive.

The snapshot reads values through PyMySQL's text protocol; the binlog reader decodes the server's binary row
images. For most types the two already agree. Where they do not, a normaliser per way brings both to the form
``docs/types.md`` documents:

- FLOAT: the text protocol prints six digits (1.23457), the binlog has the stored float. The snapshot selects
  ``CAST(col AS DOUBLE)``, which widens the stored float exactly.
- BIT(1) is a boolean; BIT(n) big-endian bytes (the binlog gives a string of 0s and 1s).
- SET: members in definition order, comma-separated (the binlog gives a Python set).
- BINARY(n): padded with 0x00 to n bytes, as the server stores it (the binlog drops trailing zero bytes).
- JSON: one canonical text (keys sorted, no blanks, numbers as parsed), whatever the server stored: MariaDB
  keeps the text as written, MySQL a binary form the binlog reader hands over parsed, with bytes for strings.
- DECIMAL wider than Spark's 38 digits: its exact text, never in exponent form.
- Zero and partly-zero dates, YEAR 0000 and the zero TIMESTAMP: NULL. Neither Hive nor Python has a day 0,
  a month 0 or a year 0; PyMySQL returns them as strings, the binlog reader as None or 1900 or the epoch.
- Geometry: standard WKB (EWKB with the SRID, when it is not 0), not the server's SRID-prefixed form.
- MariaDB's INET4, INET6 and UUID: their text, as the server prints it (the binlog holds the bytes).
- A negative TIME with a fraction: the binlog reader decodes it wrongly; ``negative_time_with_fraction``
  undoes that.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.core.types import GEOMETRIES, SPARK_MAX_PRECISION, ColumnType

Normaliser = Callable[[Any], Any]
_EPOCH = dt.datetime(1970, 1, 1)
EWKB_SRID_FLAG = 0x20000000


def snapshot_select(name: str, column_type: str) -> str:
    """The snapshot's SELECT-list expression for a column: the quoted name, or a cast that keeps the value."""
    if ColumnType.parse(column_type).base == "float":
        return f"CAST({quote_identifier(name)} AS DOUBLE)"
    return quote_identifier(name)


def snapshot_normaliser(column_type: str) -> Normaliser | None:
    """What the snapshot's values of this column type need, or None when PyMySQL's value is the form already."""
    t = ColumnType.parse(column_type)
    base = t.base
    if base in ("date", "datetime", "timestamp"):
        return _zero_date_text
    if base == "year":
        return _zero_year(0)
    if base == "bit" and t.bits == 1:
        return _bit_flag
    return _shared(t)


def binlog_normaliser(column_type: str) -> Normaliser | None:
    """What the binlog reader's values of this column type need, or None when its value is the form already."""
    t = ColumnType.parse(column_type)
    base = t.base
    if base == "timestamp":
        return _zero_timestamp
    if base == "year":
        return _zero_year(1900)  # the reader adds 1900 to the stored byte, 0 for YEAR 0000
    if base == "time" and t.numbers() and t.numbers()[0] > 0:
        return negative_time_with_fraction
    if base == "bit":
        return _bit_flag if t.bits == 1 else _bit_bytes((t.bits + 7) // 8)
    if base == "set":
        order = {member: i for i, member in enumerate(t.members())}
        return lambda value: ",".join(sorted(value, key=lambda m: order.get(m, len(order)))) if isinstance(
            value, (set, frozenset)) else value
    if base == "binary":
        return _padded((t.numbers() or [1])[0])
    if base == "inet4":
        return _bytes_to(4, lambda b: ".".join(str(octet) for octet in b))
    if base == "inet6":
        return _bytes_to(16, inet6_text)
    if base == "uuid":
        return _bytes_to(16, lambda b: f"{b[:4].hex()}-{b[4:6].hex()}-{b[6:8].hex()}-{b[8:10].hex()}-{b[10:].hex()}")
    return _shared(t)


def _shared(t: ColumnType) -> Normaliser | None:
    """Normalisers both ways need alike."""
    if t.base == "json":
        return canonical_json
    if t.base in GEOMETRIES:
        return standard_wkb
    if t.base in ("decimal", "numeric", "dec", "fixed") and t.decimal[0] > SPARK_MAX_PRECISION:
        return _decimal_text
    return None


def normalise_rows(rows: list[list[Any]], normalisers: list[tuple[int, Normaliser]]) -> None:
    """Apply ``normalisers`` (column index, function) to each row in place; None stays None."""
    for row in rows:
        for i, normalise in normalisers:
            if row[i] is not None:
                row[i] = normalise(row[i])


def normalise_columns(columns: list[Sequence[Any]], normalisers: list[tuple[int, Normaliser]]) -> None:
    """``normalise_rows`` for columns of values (a batch read column-wise): each column with a normaliser is
    replaced by its normalised values. A date column whose values are all dates (the common case, told by their
    types in one pass in C) is left as it is."""
    for i, normalise in normalisers:
        column = columns[i]
        if normalise is _zero_date_text and not _DATE_TEXTS & set(map(type, column)):
            continue
        columns[i] = [None if value is None else normalise(value) for value in column]


_DATE_TEXTS = {str, bytes}


# --- the rules ---------------------------------------------------------------------------------------------

def _zero_date_text(value: Any) -> Any:
    # PyMySQL returns a date it cannot represent (0000-00-00, 2020-00-15, year 0) as the server's text.
    return None if isinstance(value, (str, bytes)) else value


def _zero_timestamp(value: Any) -> Any:
    # The zero TIMESTAMP is stored as 0; a real TIMESTAMP starts at 1970-01-01 00:00:01 UTC.
    return None if value == _EPOCH else value


def _zero_year(zero: int) -> Normaliser:
    return lambda value: None if value == zero else value


_SECOND = 1_000_000


def negative_time_with_fraction(value: Any) -> Any:
    """The true TIME(fsp) value of a negative one with a fraction, from what the binlog reader makes of it.

    The server stores a negative TIME(fsp) as one two's-complement number across its seconds and its fraction;
    the reader (mysql-replication 1.0) negates the seconds on their own and adds the fraction as unsigned, so
    -00:00:00.000001 comes out as -0.999999 s. With H the whole seconds it read (the reader's value rounded away
    from zero) the true value is -(H - 1) seconds plus the fraction, -(|value| - H): checked here against the
    server on 2,000 random values of every fsp. Whole seconds come out right and are kept.
    """
    if not isinstance(value, dt.timedelta):
        return value
    micros = value // dt.timedelta(microseconds=1)
    if micros >= 0 or micros % _SECOND == 0:
        return value
    seconds = -(micros // _SECOND)  # H: -micros rounded up to whole seconds
    return dt.timedelta(microseconds=-micros - 2 * seconds * _SECOND + _SECOND)


def _bit_flag(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return any(value)
    if isinstance(value, str):
        return int(value, 2) != 0
    return bool(value)


def _bit_bytes(width: int) -> Normaliser:
    def to_bytes(value: Any) -> Any:
        if isinstance(value, str):
            return int(value, 2).to_bytes(width, "big")
        if isinstance(value, int):
            return value.to_bytes(width, "big")
        return value

    return to_bytes


def _padded(length: int) -> Normaliser:
    def pad(value: Any) -> Any:
        if isinstance(value, str):  # the reader gives '' for a value of only zero bytes
            value = value.encode("latin-1")
        return bytes(value).ljust(length, b"\x00")

    return pad


def _bytes_to(length: int, text: Callable[[bytes], str]) -> Normaliser:
    pad = _padded(length)
    return lambda value: text(pad(value))


def _decimal_text(value: Any) -> Any:
    return format(value, "f") if isinstance(value, Decimal) else str(value)


def inet6_text(address: bytes) -> str:
    """An IPv6 address as MariaDB prints it: IPv4-mapped and IPv4-compatible ones end in dotted quads."""
    groups = struct.unpack(">8H", address)
    if address[:10] == bytes(10) and address[10:12] == b"\xff\xff":
        return "::ffff:" + ".".join(str(b) for b in address[12:])
    if address[:12] == bytes(12) and int.from_bytes(address[12:], "big") > 1:
        return "::" + ".".join(str(b) for b in address[12:])
    # The longest run of two or more zero groups (the first of equals) becomes "::".
    best_start, best_len, start = -1, 0, None
    for i, group in enumerate([*groups, 1]):
        if group == 0 and start is None:
            start = i
        elif group != 0 and start is not None:
            if i - start > best_len:
                best_start, best_len = start, i - start
            start = None
    parts = [f"{g:x}" for g in groups]
    if best_len < 2:
        return ":".join(parts)
    return ":".join(parts[:best_start]) + "::" + ":".join(parts[best_start + best_len:])


def standard_wkb(value: Any) -> Any:
    """The server's geometry form (a little-endian SRID, then WKB) as WKB; as EWKB with the SRID when it is not 0."""
    value = bytes(value)
    if len(value) < 9:
        raise ValueError(f"A geometry value of {len(value)} bytes is too short to hold an SRID and WKB.")
    srid = int.from_bytes(value[:4], "little")
    wkb = value[4:]
    if srid == 0:
        return wkb
    order = "<" if wkb[0] == 1 else ">"
    (kind,) = struct.unpack(order + "I", wkb[1:5])
    return wkb[:1] + struct.pack(order + "II", kind | EWKB_SRID_FLAG, srid) + wkb[5:]


def shortest_digits(value: float) -> tuple[str, str, int]:
    """A finite double as its sign (``-`` or empty), its shortest round-trip digits (repr's, dtoa's) without leading
    or trailing zeros, and where the decimal point goes: the value is ±0.DIGITS × 10**point (zero has no digits).
    The servers' printers (MariaDB's DOUBLE, MySQL's JSON double) start from these, and differ in the form."""
    text = repr(value)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    stripped = digits.lstrip("0")
    return sign, stripped.rstrip("0"), len(whole) + int(exponent or 0) - (len(digits) - len(stripped))


def canonical_json(value: Any) -> str:
    """One text for a JSON value: keys sorted, no blanks, non-ASCII as is, numbers as parsed (floats shortest).

    ``value`` is JSON text (the snapshot, MariaDB's binlog) or the value MySQL's binary JSON decodes to in the
    binlog reader (dicts, lists, bytes for strings and keys, Decimal, datetime for opaque values).
    """
    if isinstance(value, (str, bytes, bytearray)):
        text = value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"The JSON column holds text that is not JSON ({exc}): {text[:200]!r}") from None
    else:
        value = _plain_json(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _plain_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {_plain_json(k): _plain_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8")
    if isinstance(value, Decimal):
        return float(value)  # the text form of a JSON number parses to a double, too
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        sign, value = ("-", -value) if value < dt.timedelta(0) else ("", value)
        hours, rest = divmod(value, dt.timedelta(hours=1))
        return f"{sign}{hours:02d}:{rest.seconds // 60:02d}:{rest.seconds % 60:02d}.{rest.microseconds:06d}"
    return value
