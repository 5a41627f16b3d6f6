"""The row-image decoder on hand-made event bytes: the formats as MySQL's sources document them."""

from __future__ import annotations

import datetime as dt
import random
import struct
from decimal import Decimal

import pytest

from airflow_cdc_provider.core.binlog_columns import (
    BIT,
    BLOB,
    DATE,
    DATETIME2,
    JSON,
    LONG,
    LONGLONG,
    NEWDECIMAL,
    TIME2,
    TIMESTAMP2,
    VARCHAR,
)
from airflow_cdc_provider.core.row_images import BinlogColumn, UndecodableValue, plan_decoder


def _decode(columns: list[BinlogColumn], body: bytes) -> list[list]:
    decoder = plan_decoder(columns)
    assert decoder is not None
    return decoder.images(body)


def test_decimals_in_mysqls_binary_format():
    # decimal.c's own example: DECIMAL(14,4) 1234567890.1234, and its negative (every bit inverted).
    column = [BinlogColumn(NEWDECIMAL, precision=14, decimals=4)]
    positive = bytes.fromhex("810DFB38D204D2")
    negative = bytes.fromhex("7EF204C72DFB2D")
    assert _decode(column, b"\x00" + positive + b"\x00" + negative) == [
        [Decimal("1234567890.1234")], [Decimal("-1234567890.1234")]]


def test_integers_times_and_nulls_by_the_null_bitmap():
    columns = [BinlogColumn(LONG), BinlogColumn(LONGLONG, unsigned=True), BinlogColumn(DATE),
               BinlogColumn(DATETIME2, fsp=3), BinlogColumn(TIMESTAMP2), BinlogColumn(TIME2)]
    # 2020-07-17: year*16*32 + month*32 + day; DATETIME2: sign bit, year*13+month, day, hour, minute, second.
    date = (2020 << 9 | 7 << 5 | 17).to_bytes(3, "little")
    packed = 1 << 39 | (2020 * 13 + 7) << 22 | 17 << 17 | 18 << 12 | 0 << 6 | 22
    datetime = packed.to_bytes(5, "big") + (123 * 10).to_bytes(2, "big")  # fsp 3 is stored as 4 digits
    time = (1 << 23 | 1 << 12 | 2 << 6 | 3).to_bytes(3, "big")  # 01:02:03
    full = b"\x00" + struct.pack("<iQ", -5, 2**64 - 1) + date + datetime + struct.pack(">i", 1) + time
    nulls = bytes([0b110101]) + struct.pack("<Q", 7) + datetime  # LONG, DATE, TIMESTAMP2 and TIME2 NULL
    assert _decode(columns, full + nulls) == [
        [-5, 2**64 - 1, dt.date(2020, 7, 17), dt.datetime(2020, 7, 17, 18, 0, 22, 123000), dt.datetime(1970, 1, 1, 0, 0, 1),
         dt.timedelta(hours=1, minutes=2, seconds=3)],
        [None, 7, None, dt.datetime(2020, 7, 17, 18, 0, 22, 123000), None, None]]
    zero = b"\x00" * 3 + b"\x80\x00\x00\x00\x00\x00\x00"  # a zero DATE and DATETIME2: None, as the reader has them
    assert _decode(columns[2:4], b"\x00" + zero) == [[None, None]]


def test_strings_by_their_length_prefix_and_character_set():
    columns = [BinlogColumn(VARCHAR, max_length=40, charset="utf8mb4"), BinlogColumn(VARCHAR, max_length=300),
               BinlogColumn(BLOB, length_size=2, charset="latin1")]
    body = b"\x00" + b"\x03\xe2\x82\xac" + struct.pack("<H", 2) + b"\x00\xff" + struct.pack("<H", 1) + b"\xe9"
    assert _decode(columns, body) == [["€", b"\x00\xff", "é"]]
    with pytest.raises(UndecodableValue) as caught:
        _decode(columns, b"\x00" + b"\x01\xff" + b"\x00\x00" + b"\x00\x00")
    assert caught.value.index == 0


def test_types_left_to_the_reader_and_bytes_that_do_not_fit():
    assert plan_decoder([BinlogColumn(LONG), BinlogColumn(JSON)]) is None
    assert plan_decoder([BinlogColumn(BIT)]) is None
    decoder = plan_decoder([BinlogColumn(LONG)])
    assert decoder is not None
    with pytest.raises(ValueError, match="does not fit"):
        decoder.images(b"\x00\x01\x00\x00\x00\x00\x07")


def _binary_decimal(precision: int, scale: int, negative: bool, parts: list[int]) -> bytes:
    """MySQL's binary DECIMAL of ``parts`` (the leftover integral digits, the groups of nine, the leftover fraction
    digits, each present only where the precision and scale have it)."""
    whole_int, left_int = divmod(precision - scale, 9)
    whole_frac, left_frac = divmod(scale, 9)
    leftover = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    sizes = [*([leftover[left_int]] if left_int else []), *[4] * (whole_int + whole_frac),
             *([leftover[left_frac]] if left_frac else [])]
    packed = int.from_bytes(b"".join(v.to_bytes(n, "big") for v, n in zip(parts, sizes, strict=True)), "big")
    size = sum(sizes)
    packed ^= 1 << (8 * size - 1)  # the sign bit: set for a positive number
    if negative:
        packed ^= (1 << (8 * size)) - 1  # a negative one has every bit inverted
    return packed.to_bytes(size, "big")


def test_every_decimal_layout_reads_as_the_readers_text_would():
    # The decoder reads a decimal as one integer; the reader spells it out as text. Both, for every precision
    # and scale, at the edges of each part and at random, positive and negative: the same Decimal, digit for digit.
    rng = random.Random(7)
    for precision in range(1, 66):
        for scale in range(min(precision, 30) + 1):
            whole_int, left_int = divmod(precision - scale, 9)
            whole_frac, left_frac = divmod(scale, 9)
            bases = [*([10 ** left_int] if left_int else []), *[10 ** 9] * (whole_int + whole_frac),
                     *([10 ** left_frac] if left_frac else [])]
            column = [BinlogColumn(NEWDECIMAL, precision=precision, decimals=scale)]
            for _ in range(4):
                parts = [rng.choice([0, 1, base - 1, rng.randrange(base)]) for base in bases]
                negative = rng.random() < 0.5
                (value,), = _decode(column, b"\x00" + _binary_decimal(precision, scale, negative, parts))
                digits = "".join(f"{p:0{len(str(b - 1))}d}" for p, b in zip(parts, bases, strict=True))
                text = digits[:precision - scale] + "." + digits[precision - scale:]
                expected = Decimal(("-" if negative else "") + text)
                assert value == expected and value.as_tuple() == expected.as_tuple(), (precision, scale, parts)
