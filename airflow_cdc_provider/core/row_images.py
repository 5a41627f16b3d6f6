"""Row images decoded from the bytes of a rows event, for the common column types, without the binlog reader.

The reader (python-mysql-replication) decodes each value through a chain of tests on the column's type and
reads the packet a few bytes at a time; for a table of numbers, strings, decimals and times that is most of an
extraction's cost. ``RowImageDecoder`` is planned once per table map: one small reader per column, chosen when
the columns are known, each taking its value from the event's bytes at an offset.

It gives exactly what the reader gives (the values the extraction's normalisers then take, ``core.values``):
the same quirks kept, such as a DATETIME or DATE with a zero part as None and a TIMESTAMP as a naive UTC
datetime. Text columns are decoded by their character set (``core.charsets``), as the extraction does with the
reader's bytes. A column of a type not planned here (BIT, ENUM, SET, JSON, geometry, the pre-5.6 temporal
types) makes ``plan_decoder`` return None: the reader decodes that table map's events as before.

Nothing here imports the reader: the columns are described by ``BinlogColumn``, plain values that can be
handed to another process.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any

from airflow_cdc_provider.core.binlog_columns import (
    BLOB,
    DATE,
    DATETIME2,
    DOUBLE,
    FLOAT,
    INT24,
    LONG,
    LONGLONG,
    NEWDECIMAL,
    SHORT,
    STRING,
    TIME2,
    TIMESTAMP2,
    TINY,
    VARCHAR,
    YEAR,
)
from airflow_cdc_provider.core.charsets import UndecodableText, text_decoder


@dataclass(frozen=True, slots=True)
class BinlogColumn:
    """A table-map column as the decoder needs it (the reader's ``Column`` has the same attributes)."""

    type: int
    unsigned: bool = False
    max_length: int = 0  # VARCHAR and STRING: bytes
    length_size: int = 0  # BLOB: bytes of the length prefix
    precision: int = 0  # NEWDECIMAL
    decimals: int = 0
    fsp: int = 0  # DATETIME2, TIMESTAMP2, TIME2
    # A string column's server character set: its values are decoded from it. None, or "binary": the bytes.
    charset: str | None = None


class UndecodableValue(ValueError):
    """A text value that is not text in its column's character set: which column, and the decoder's error."""

    def __init__(self, index: int, error: UndecodableText) -> None:
        super().__init__(str(error))
        self.index, self.error = index, error


# A column's reader: its value at an offset of the event's bytes, and the offset after it.
Reader = Callable[[bytes, int], tuple[Any, int]]

_FIXED = {TINY: ("<b", "<B"), SHORT: ("<h", "<H"), LONG: ("<i", "<I"), LONGLONG: ("<q", "<Q"),
          FLOAT: ("<f", "<f"), DOUBLE: ("<d", "<d")}
_EPOCH = dt.datetime(1970, 1, 1)
# Bytes of a decimal's leftover digits (fewer than nine) in MySQL's binary DECIMAL format (decimal.cc's dig2bytes):
# a row event's DECIMAL column and a JSON document's (``core.mysql_json``).
DECIMAL_LEFTOVER_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_INT32_BE = struct.Struct(">i")


def plan_decoder(columns: Sequence[BinlogColumn]) -> RowImageDecoder | None:
    """The decoder of these columns' row images, or None when a column's type is not one planned here."""
    readers = []
    for index, column in enumerate(columns):
        reader = _reader(index, column)
        if reader is None:
            return None
        readers.append(reader)
    return RowImageDecoder(tuple(readers))


class RowImageDecoder:
    """Decodes the row images of a rows event whose every column is present (``binlog_row_image=FULL``)."""

    def __init__(self, readers: tuple[Reader, ...]) -> None:
        self.readers = readers
        self.null_bytes = (len(readers) + 7) // 8

    def images(self, body: bytes) -> list[list[Any]]:
        """Every row image of ``body`` (the event's bytes after its column bitmaps), in order: an update's are
        its before and after images in turn. Raises UndecodableValue for text not in its character set."""
        try:
            images, pos = self._images(body)
        except (struct.error, IndexError) as exc:
            raise ValueError(f"the row images run past the end of the event ({exc}): the table map does not fit"
                             ) from None
        if pos != len(body):
            raise ValueError(f"the row images end at byte {pos} of {len(body)}: the table map does not fit")
        return images

    def _images(self, body: bytes) -> tuple[list[list[Any]], int]:
        readers, null_bytes, from_bytes = self.readers, self.null_bytes, int.from_bytes
        end, pos = len(body), 0
        images = []
        while pos < end:
            nulls = from_bytes(body[pos:pos + null_bytes], "little")
            pos += null_bytes
            row: list[Any] = []
            append = row.append
            if not nulls:
                for read in readers:
                    value, pos = read(body, pos)
                    append(value)
            else:
                for read in readers:
                    if nulls & 1:
                        append(None)
                    else:
                        value, pos = read(body, pos)
                        append(value)
                    nulls >>= 1
            images.append(row)
        return images, pos


def _reader(index: int, column: BinlogColumn) -> Reader | None:
    code = column.type
    if code in _FIXED:
        unpack = struct.Struct(_FIXED[code][column.unsigned]).unpack_from
        size = struct.calcsize(_FIXED[code][column.unsigned])
        return lambda data, pos: (unpack(data, pos)[0], pos + size)
    if code == INT24:
        return _int24(column.unsigned)
    if code == YEAR:
        return lambda data, pos: (data[pos] + 1900, pos + 1)
    if code == DATE:
        return _date
    if code == DATETIME2:
        return _datetime2(_fraction(column.fsp))
    if code == TIMESTAMP2:
        return _timestamp2(_fraction(column.fsp))
    if code == TIME2:
        return _time2(_fraction(column.fsp))
    if code == NEWDECIMAL:
        return _decimal(column.precision, column.decimals)
    if code in (VARCHAR, STRING):
        return _string(index, 2 if column.max_length > 255 else 1, column.charset)
    if code == BLOB and column.length_size in (1, 2, 3, 4):
        return _string(index, column.length_size, column.charset)
    return None


def _int24(unsigned: bool) -> Reader:
    def read(data: bytes, pos: int) -> tuple[int, int]:
        value = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
        if not unsigned and value >= 0x800000:
            value -= 0x1000000
        return value, pos + 3
    return read


def _date(data: bytes, pos: int) -> tuple[dt.date | None, int]:
    value = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
    year, month, day = value >> 9 & 0x7FFF, value >> 5 & 0xF, value & 0x1F
    if not (year and month and day):  # a zero date, or one with a zero part: the reader's None
        return None, pos + 3
    return dt.date(year, month, day), pos + 3


# The fractional seconds of a temporal value: (bytes, microseconds of the stored number). The reader reads them
# as a signed big-endian number (which a TIME2's negative fraction relies on), and an odd precision's number
# holds one digit more than it keeps.
Fraction = Callable[[bytes, int], int]


def _fraction(fsp: int) -> tuple[int, Fraction | None]:
    size = (fsp + 1) // 2
    if not size:
        return 0, None
    scale = 10 ** (6 - fsp)
    odd = fsp % 2

    def micro(data: bytes, pos: int) -> int:
        stored = int.from_bytes(data[pos:pos + size], "big", signed=True)
        if odd:
            stored = int(stored / 10)  # the reader's rounding toward zero
        return int(stored * scale)
    return size, micro


def _datetime2(fraction: tuple[int, Fraction | None]) -> Reader:
    size, micro = fraction

    def read(data: bytes, pos: int) -> tuple[dt.datetime | None, int]:
        packed = int.from_bytes(data[pos:pos + 5], "big")
        year_month = packed >> 22 & 0x1FFFF
        try:
            value = dt.datetime(year_month // 13, year_month % 13, packed >> 17 & 0x1F, packed >> 12 & 0x1F,
                                packed >> 6 & 0x3F, packed & 0x3F)
        except ValueError:  # a zero date, or one with a zero part: the reader's None
            return None, pos + 5 + size
        if micro is not None and (us := micro(data, pos + 5)) > 0:
            value = value.replace(microsecond=us)
        return value, pos + 5 + size
    return read


def _timestamp2(fraction: tuple[int, Fraction | None]) -> Reader:
    size, micro = fraction
    second = dt.timedelta(seconds=1)

    def read(data: bytes, pos: int) -> tuple[dt.datetime, int]:
        value = _EPOCH + _INT32_BE.unpack_from(data, pos)[0] * second  # the reader's naive UTC time
        if micro is not None and (us := micro(data, pos + 4)) > 0:
            value = value.replace(microsecond=us)
        return value, pos + 4 + size
    return read


def _time2(fraction: tuple[int, Fraction | None]) -> Reader:
    size, micro = fraction

    def read(data: bytes, pos: int) -> tuple[dt.timedelta, int]:
        # As the reader computes it (a negative TIME with a fraction is then corrected by
        # core.values.negative_time_with_fraction).
        packed = int.from_bytes(data[pos:pos + 3], "big", signed=True)
        sign = 1 if packed >> 23 & 1 else -1
        if sign == -1:
            packed = ~packed + 1
        microseconds = micro(data, pos + 3) if micro is not None else 0
        value = dt.timedelta(hours=packed >> 12 & 0x3FF, minutes=packed >> 6 & 0x3F, seconds=packed & 0x3F,
                             microseconds=microseconds) * sign
        return value, pos + 3 + size
    return read


def _decimal(precision: int, scale: int) -> Reader:
    """MySQL's binary DECIMAL: groups of nine digits in four big-endian bytes, the leftover digits of each side
    in fewer, the sign in the first bit, a negative number with every bit inverted.

    Read as one integer, its parts taken off by shifts and the coefficient made of them; a value the reader
    would spell otherwise (a part out of its range, a negative zero) is read as the reader reads it."""
    integral = precision - scale
    whole_int, left_int = divmod(integral, 9)
    whole_frac, left_frac = divmod(scale, 9)
    left_int_bytes, left_frac_bytes = DECIMAL_LEFTOVER_BYTES[left_int], DECIMAL_LEFTOVER_BYTES[left_frac]
    size = left_int_bytes + 4 * (whole_int + whole_frac) + left_frac_bytes
    as_text = _decimal_as_text(left_int_bytes, whole_int, whole_frac, left_frac_bytes, left_frac, size)
    sign_bit, every_bit = 1 << (8 * size - 1), (1 << (8 * size)) - 1
    # The parts from the most significant: (bits, its digits' base), the leftover integral digits first.
    parts = [*([(8 * left_int_bytes, 10 ** left_int)] if left_int_bytes else []),
             *[(32, 10 ** 9)] * (whole_int + whole_frac),
             *([(8 * left_frac_bytes, 10 ** left_frac)] if left_frac_bytes else [])]
    shifts = [(sum(bits for bits, _ in parts[n + 1:]), (1 << bits) - 1, base) for n, (bits, base) in enumerate(parts)]
    exponent = -scale

    def read(data: bytes, pos: int) -> tuple[Decimal, int]:
        packed = int.from_bytes(data[pos:pos + size], "big")
        negative = not packed & sign_bit
        packed ^= (sign_bit ^ every_bit) if negative else sign_bit
        coefficient = 0
        for shift, mask, base in shifts:
            part = packed >> shift & mask
            if part >= base:
                return as_text(data, pos)
            coefficient = coefficient * base + part
        if negative:
            if not coefficient:
                return as_text(data, pos)
            coefficient = -coefficient
        return Decimal(coefficient).scaleb(exponent, _EXACT), pos + size
    return read


# Wide enough for any DECIMAL (65 digits): scaleb is then exact.
_EXACT = Context(prec=100)


def _decimal_as_text(left_int_bytes: int, whole_int: int, whole_frac: int, left_frac_bytes: int, left_frac: int,
                     size: int) -> Reader:
    """The reader's own reading: each part read as a signed number, spelt out, and the text made a Decimal."""
    unpack_group = _INT32_BE.unpack_from

    def read(data: bytes, pos: int) -> tuple[Decimal, int]:
        raw = bytearray(data[pos:pos + size])
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        mask = -1 if negative else 0
        parts = ["-" if negative else ""]
        at = 0
        if left_int_bytes:
            parts.append(str(int.from_bytes(raw[:left_int_bytes], "big", signed=True) ^ mask))
            at = left_int_bytes
        for _ in range(whole_int):
            parts.append(f"{unpack_group(raw, at)[0] ^ mask:09d}")
            at += 4
        parts.append(".")
        for _ in range(whole_frac):
            parts.append(f"{unpack_group(raw, at)[0] ^ mask:09d}")
            at += 4
        if left_frac_bytes:
            parts.append(f"{int.from_bytes(raw[at:at + left_frac_bytes], 'big', signed=True) ^ mask:0{left_frac}d}")
        return Decimal("".join(parts)), pos + size
    return read


def _string(index: int, length_size: int, charset: str | None) -> Reader:
    decode = text_decoder(charset) if charset not in (None, "binary") else None
    if length_size == 1:
        def length(data: bytes, pos: int) -> int:
            return data[pos]
    else:
        def length(data: bytes, pos: int) -> int:
            return int.from_bytes(data[pos:pos + length_size], "little")

    if decode is None:
        def read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
            start = pos + length_size
            end = start + length(data, pos)
            return data[start:end], end
        return read_bytes

    def read_text(data: bytes, pos: int) -> tuple[str, int]:
        start = pos + length_size
        end = start + length(data, pos)
        try:
            return decode(data[start:end]), end
        except UndecodableText as exc:
            raise UndecodableValue(index, exc) from None
    return read_text
