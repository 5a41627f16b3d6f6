"""``core.mysql_json``: MySQL's binary JSON, built here by hand (a small encoder that follows json_binary.cc's
layout) or copied from what a MySQL 9.7 server wrote to its binlog, decoded to the exact text MySQL prints.

The expected texts are MySQL's own (``SELECT CAST(doc AS CHAR)`` on the server, see
tests/integration/test_mysql_json_live.py, which checks the same against a live server).
"""

from __future__ import annotations

import json
import struct

import pytest

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.mysql_json import UndecodableJson, json_text

# A tiny encoder of MySQL's format, so that each test states the document it means; values are tuples
# (type byte, payload) for scalars, or Obj/Arr for containers.
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = 4, 5, 6, 7, 8, 9, 10, 11, 12, 15
DIGIT_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


class Obj(dict):
    large = False


class Arr(list):
    large = False


def large(container):
    container.large = True
    return container


def varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def null():
    return (LITERAL, b"\x00")


def true():
    return (LITERAL, b"\x01")


def false():
    return (LITERAL, b"\x02")


def i16(v):
    return (INT16, struct.pack("<h", v))


def u16(v):
    return (UINT16, struct.pack("<H", v))


def i32(v):
    return (INT32, struct.pack("<i", v))


def u32(v):
    return (UINT32, struct.pack("<I", v))


def i64(v):
    return (INT64, struct.pack("<q", v))


def u64(v):
    return (UINT64, struct.pack("<Q", v))


def dbl(v):
    return (DOUBLE, struct.pack("<d", v))


def s(text, raw=None):
    b = raw if raw is not None else text.encode()
    return (STRING, varlen(len(b)) + b)


def opaque(field_type, raw):
    return (OPAQUE, bytes([field_type]) + varlen(len(raw)) + raw)


def packed_datetime(y, mo, d, h=0, mi=0, sec=0, us=0):
    return ((((((y * 13 + mo) << 5) | d) << 17) | (h << 12) | (mi << 6) | sec) << 24) | us


def packed_time(h, mi, sec, us=0, negative=False):
    v = (((h << 12) | (mi << 6) | sec) << 24) | us
    return -v if negative else v


def datetime_(field_type, packed):
    return opaque(field_type, struct.pack("<q", packed))


def decimal_bin(text, precision, scale):
    """decimal.cc's decimal2bin, with precision and scale before it, as Json_decimal stores it."""
    negative = text.startswith("-")
    whole, _, frac = text.lstrip("-").partition(".")
    whole, frac = whole.lstrip("0").rjust(precision - scale, "0"), frac.ljust(scale, "0")
    lead = (precision - scale) % 9
    out = bytearray()
    if lead:
        out += int(whole[:lead]).to_bytes(DIGIT_BYTES[lead], "big")
    for i in range(lead, len(whole), 9):
        out += int(whole[i:i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(frac[i:i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac[scale - scale % 9:]).to_bytes(DIGIT_BYTES[scale % 9], "big")
    if negative:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return opaque(246, bytes([precision, scale]) + bytes(out))


def encode(value) -> bytes:
    """A whole document: its type byte, then its value."""
    kind, payload = _encode(value)
    return bytes([kind]) + payload


def _encode(value):
    if isinstance(value, Obj | Arr):
        return _container(value)
    return value


def _container(value):
    is_object, big = isinstance(value, Obj), value.large
    osz = 4 if big else 2
    off = "<I" if big else "<H"
    inlined = {LITERAL, INT16, UINT16} | ({INT32, UINT32} if big else set())
    items = sorted(value.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode())) if is_object \
        else [(None, v) for v in value]
    count = len(items)
    header = 2 * osz + count * ((osz + 2 if is_object else 0) + 1 + osz)
    keys = b"".join(k.encode() for k, _ in items) if is_object else b""
    key_entries, at = b"", header
    for k, _ in items if is_object else []:
        key_entries += struct.pack(off, at) + struct.pack("<H", len(k.encode()))
        at += len(k.encode())
    value_entries, values = b"", b""
    for _, v in items:
        kind, payload = _encode(v)
        if kind in inlined:
            value_entries += bytes([kind]) + payload.ljust(osz, b"\x00")
        else:
            value_entries += bytes([kind]) + struct.pack(off, header + len(keys) + len(values))
            values += payload
    size = header + len(keys) + len(values)
    kind = (0 if is_object else 2) + (1 if big else 0)
    return kind, struct.pack(off, count) + struct.pack(off, size) + key_entries + value_entries + keys + values


# ---- scalars: every type, at the top of a document -------------------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    (null(), "null"), (true(), "true"), (false(), "false"),
    (i16(0), "0"), (i16(-32768), "-32768"), (i16(32767), "32767"), (u16(65535), "65535"),
    (i32(-2147483648), "-2147483648"), (i32(2147483647), "2147483647"), (u32(4294967295), "4294967295"),
    (i64(-9223372036854775808), "-9223372036854775808"), (i64(9223372036854775807), "9223372036854775807"),
    (u64(18446744073709551615), "18446744073709551615"),
    (s("bare string"), '"bare string"'), (s(""), '""'),
    (s('q"b\\n\n t\t\b\f\r\x00\x1f\x7f /'), r'"q\"b\\n\n t\t\b\f\r\u0000\u001f' + '\x7f /"'),
    (s("é 中文 😀"), '"é 中文 😀"'),
    (s("x" * 200), '"' + "x" * 200 + '"'), (s("y" * 70000), '"' + "y" * 70000 + '"'),
])
def test_scalar_documents(value, text):
    assert json_text(encode(value)) == text


def test_string_lengths_take_one_to_three_bytes_of_prefix():
    for n in (0, 127, 128, 16383, 16384, 2_100_000):
        data = encode(s("a" * n))
        assert data[1:1 + len(varlen(n))] == varlen(n)
        assert json_text(data) == json.dumps("a" * n)


# MySQL's own texts (my_gcvt with a 34-character field, then ".0" when it has neither '.' nor 'e'): the 'f' form
# while the decimal point is within 15 places of the first digit, the 'e' form without '+' or a padded exponent.
DOUBLES = [
    (1e300, "1e300"), (-0.0, "-0.0"), (0.0, "0.0"), (0.1, "0.1"), (1.0, "1.0"), (3.0, "3.0"), (-3.0, "-3.0"),
    (10.0, "10.0"), (100.0, "100.0"), (1e14, "100000000000000.0"), (1e15, "1e15"), (1e16, "1e16"), (1e21, "1e21"),
    (1e22, "1e22"), (1234567890123456.8, "1234567890123456.8"), (123456789012345.67, "123456789012345.67"),
    (123456789012345678.0, "1.2345678901234568e17"), (9007199254740993.0, "9.007199254740992e15"),
    (0.001, "0.001"), (0.0001, "0.0001"), (1e-5, "0.00001"), (2.5e-5, "0.000025"), (-1e-7, "-0.0000001"),
    (1e-14, "0.00000000000001"), (1e-15, "0.000000000000001"), (1.5e-15, "0.0000000000000015"), (1e-16, "1e-16"),
    (1.2345678901234567e-300, "1.2345678901234568e-300"), (-1e-100, "-1e-100"), (1e-300, "1e-300"),
    (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e308"), (12345.678, "12345.678"),
    (0.30000000000000004, "0.30000000000000004"), (0.5, "0.5"),
]


@pytest.mark.parametrize(("value", "text"), DOUBLES)
def test_doubles_print_as_mysql_prints_them(value, text):
    assert json_text(encode(dbl(value))) == text
    assert json.loads(text) == value


def test_doubles_from_the_server_binlog():
    # JSON_ARRAY(1e14, 1234567890123456.8e0, 1e-14, 1e-15, 1e-16, 1.5e-15, 123456789012345.67e0, 1e100, -1e-100,
    # 0.5, 2.5e-5, 3e0, -3e0, 1e1, 1e2, 1e22, 1e21, 1e-300, 9007199254740993e0, 0.30000000000000004e0) as MySQL 9.7
    # wrote it to the binlog, and as it printed it.
    data = bytes.fromhex(
        "021400de000b40000b48000b50000b58000b60000b68000b70000b78000b80000f88000b8e000b96000b9e000ba6000bae000bb600"
        "0bbe000bc6000bce000bd6000000901ec4bcd64203eb2af2548b11439b2ba1869b84063d1656e79eaf03d23cbc89d897b2d29c3c20"
        "015b6e8705db3c6bde77832112dc427dc39425ad49b25430058ee42eff2babf604020180052d431cebe236fa3e0000000000000840"
        "00000000000008c00000000000002440000000000000594092d54d06cff0804450efe2d6e41a4b4459f3f8c21f6ea5010000000000"
        "004043343333333333d33f")
    assert json_text(data) == (
        "[100000000000000.0, 1234567890123456.8, 0.00000000000001, 0.000000000000001, 1e-16, 0.0000000000000015, "
        "123456789012345.67, 1e100, -1e-100, 0.5, 0.000025, 3.0, -3.0, 10.0, 100.0, 1e22, 1e21, 1e-300, "
        "9.007199254740992e15, 0.30000000000000004]")


# ---- containers --------------------------------------------------------------------------------------------------


def test_nested_small_containers_with_inlined_values():
    doc = Obj({"a": Arr([i16(1), u16(65535), i16(-1), null(), true(), false()]),
               "bb": Obj({"": s(""), "x": Arr([]), "y": Obj({})}),
               "c": Arr([i32(70000), u32(4294967295), i64(-5), u64(18446744073709551615), dbl(1.5), s("é")])})
    data = encode(doc)
    assert data[0] == 0x00
    assert json_text(data) == ('{"a": [1, 65535, -1, null, true, false], "c": [70000, 4294967295, -5, '
                               '18446744073709551615, 1.5, "é"], "bb": {"": "", "x": [], "y": {}}}')


def test_empty_containers():
    assert json_text(encode(Obj({}))) == "{}"
    assert json_text(encode(Arr([]))) == "[]"
    assert json_text(encode(large(Obj({})))) == "{}"
    assert json_text(encode(large(Arr([])))) == "[]"


def test_large_containers_inline_32_bit_integers():
    doc = large(Arr([i32(-2147483648), u32(4294967295), i16(-32768), u16(65535), null(), true(), false(),
                     i64(1 << 40), s("z" * 70000), large(Obj({"k": i32(123456), "é": u32(70000)}))]))
    data = encode(doc)
    assert data[0] == 0x03
    # The int32 and the uint32 are in the value entries themselves: type byte, then the four bytes of the value.
    assert data[9:14] == b"\x07" + struct.pack("<i", -2147483648)
    assert data[14:19] == b"\x08" + struct.pack("<I", 4294967295)
    assert json_text(data) == ("[-2147483648, 4294967295, -32768, 65535, null, true, false, 1099511627776, "
                               f'"{"z" * 70000}", {{"k": 123456, "é": 70000}}]')


def test_a_large_object_of_many_members():
    members = {f"key{i:05d}": (i16(i) if i % 3 == 0 else s(f"v{i}") if i % 3 == 1 else dbl(i + 0.25))
               for i in range(20000)}
    data = encode(large(Obj(members)))
    expected = {f"key{i:05d}": (i if i % 3 == 0 else f"v{i}" if i % 3 == 1 else i + 0.25) for i in range(20000)}
    assert json.loads(json_text(data)) == expected


def test_small_inside_large_and_large_inside_small():
    inner = large(Arr([s("w" * 70000)]))
    # A small container cannot hold a large one beyond its 64 KB: the format allows it only at the end.
    doc = Obj({"small": Arr([i16(7)]), "big": inner})
    assert json.loads(json_text(encode(large(doc)))) == {"small": [7], "big": ["w" * 70000]}


def test_deep_nesting_up_to_mysqls_limit():
    doc = s("deep")
    for _ in range(100):
        doc = Arr([doc])
    assert json_text(encode(doc)) == "[" * 100 + '"deep"' + "]" * 100
    with pytest.raises(UndecodableJson, match="nested deeper than 100"):
        json_text(encode(Arr([doc])))


def test_keys_and_strings_are_utf8_with_json_escapes():
    doc = Obj({"ключ": s("значение"), "k\"\\\n\t": s("v\b\r\x00\x1a é 中文 😀"), "": s("")})
    # Stored, and printed, in MySQL's order of keys: by length in bytes, then bytes.
    assert json_text(encode(doc)) == (
        '{"": "", "k\\"\\\\\\n\\t": "v\\b\\r\\u0000\\u001a é 中文 😀", "ключ": "значение"}')


def test_an_object_from_the_server_binlog():
    # JSON_OBJECT('', '', 'k"\\\n\t', 'v\bf\r\0\Z é 中文 😀') as MySQL 9.7 wrote it (SQL's \f is an 'f').
    data = bytes.fromhex("0002002e0012000000120005000c17000c18006b225c0a0900157608660d001a20c3a920e4b8ade69687"
                         "20f09f9880")
    assert json_text(data) == '{"": "", "k\\"\\\\\\n\\t": "v\\bf\\r\\u0000\\u001a é 中文 😀"}'


# ---- opaque values -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    (datetime_(12, packed_datetime(2024, 2, 29, 10, 11, 12, 123456)), '"2024-02-29 10:11:12.123456"'),
    (datetime_(12, packed_datetime(1, 1, 1)), '"0001-01-01 00:00:00.000000"'),
    (datetime_(12, packed_datetime(9999, 12, 31, 23, 59, 59, 999999)), '"9999-12-31 23:59:59.999999"'),
    (datetime_(12, 0), '"0000-00-00 00:00:00.000000"'),
    (datetime_(7, packed_datetime(2024, 5, 6, 7, 8, 9, 123000)), '"2024-05-06 07:08:09.123000"'),
    (datetime_(10, packed_datetime(2024, 2, 29)), '"2024-02-29"'),
    (datetime_(11, packed_time(12, 0, 0)), '"12:00:00.000000"'),
    (datetime_(11, packed_time(838, 59, 59, negative=True)), '"-838:59:59.000000"'),
    (datetime_(11, packed_time(0, 0, 1, 500000, negative=True)), '"-00:00:01.500000"'),
    (datetime_(11, packed_time(100, 2, 3, 45)), '"100:02:03.000045"'),
    (datetime_(11, 0), '"00:00:00.000000"'),
])
def test_opaque_dates_and_times(value, text):
    assert json_text(encode(value)) == text
    assert json_text(encode(Arr([value]))) == f"[{text}]"


def test_opaque_dates_and_times_from_the_server_binlog():
    # JSON_OBJECT('dt', CAST('2024-02-29 10:11:12.123456' AS DATETIME(6)), 'd', CAST('2024-02-29' AS DATE),
    # 't', CAST('-838:59:59.000000' AS TIME(6)), 'ts', <a TIMESTAMP(3) column>) as MySQL 9.7 wrote it.
    data = bytes.fromhex("0004004e00200001002100010022000200240002000f26000f30000f3a000f44006474647474730a080000"
                         "000000bab2190b080000000591cbffff0c0840e201cca2bab219070878e00109724cb319")
    assert json_text(data) == ('{"d": "2024-02-29", "t": "-838:59:59.000000", "dt": "2024-02-29 10:11:12.123456", '
                               '"ts": "2024-05-06 07:08:09.123000"}')
    # CAST(CAST('12:00' AS TIME) AS JSON): a scalar document that is an opaque TIME.
    assert json_text(bytes.fromhex("0f0b0800000000c0000000")) == '"12:00:00.000000"'


@pytest.mark.parametrize(("text", "precision", "scale", "printed"), [
    ("-12.50", 10, 2, "-12.50"), ("1.5", 30, 20, "1.50000000000000000000"), ("0", 5, 0, "0"),
    ("0.05", 5, 3, "0.050"), ("123", 3, 0, "123"), ("-1", 1, 0, "-1"), ("0.5", 1, 1, "0.5"),
    ("-12.5", 4, 1, "-12.5"), ("-0.000000001", 20, 18, "-0.000000001000000000"),
    ("99999999999999999999999999999999999.999999999999999999999999999999", 65, 30,
     "99999999999999999999999999999999999.999999999999999999999999999999"),
    ("-123456789012345678901234567890.123456789012345678901234567890", 66, 30,
     "-123456789012345678901234567890.123456789012345678901234567890"),
    ("1000000000", 10, 0, "1000000000"), ("-987654321987654321", 18, 0, "-987654321987654321"),
    ("12345678.9", 9, 1, "12345678.9"),
])
def test_opaque_decimals(text, precision, scale, printed):
    assert json_text(encode(decimal_bin(text, precision, scale))) == printed
    assert json.loads(printed) == (float(text) if scale else int(text))


def test_opaque_decimals_from_the_server_binlog():
    # JSON_ARRAY(CAST(-12.50 AS DECIMAL(10,2)), CAST(1.5 AS DECIMAL(30,20)), CAST(-1234…890.1234…890 AS
    # DECIMAL(65,30)), CAST(0.05 AS DECIMAL(5,3))) as MySQL 9.7 wrote it: the DECIMAL(65,30) has precision 66.
    data = bytes.fromhex(
        "02040056000f10000f19000f2a000f4c00f6070b027ffffff3cdf60f1d14800000011dcd65000000000000f620421e7fffff84e4"
        "c5f3ebeb655bcaf204c72df8a432eaff439eb1ca484078fc85f6080c03800000000032")
    assert json_text(data) == ("[-12.50, 1.50000000000000000000, "
                               "-123456789012345678901234567890.123456789012345678901234567890, 0.050]")
    # CAST(CAST(-12.5 AS DECIMAL(4,1)) AS JSON): a scalar document.
    assert json_text(bytes.fromhex("0ff6070a017ffffff3fa")) == "-12.5"


@pytest.mark.parametrize(("field_type", "raw", "text"), [
    (15, b"\x00\xff", '"base64:type15:AP8="'), (252, b"\x01\x02", '"base64:type252:AQI="'),
    (16, b"\x15", '"base64:type16:FQ=="'), (254, b"a\x00\x00", '"base64:type254:YQAA"'),
    (13, b"\x7c", '"base64:type13:fA=="'), (255, b"\x00" * 3, '"base64:type255:AAAA"'), (15, b"", '"base64:type15:"'),
    # MySQL's base64 breaks its line every 76 characters (57 bytes); the newline is escaped.
    (15, b"b" * 57, '"base64:type15:' + "YmJi" * 19 + '"'),
    (15, b"a" * 58, '"base64:type15:' + "YWFh" * 19 + '\\nYQ=="'),
    (15, b"a" * 200, '"base64:type15:' + "\\n".join(["YWFh" * 19] * 3) + '\\n' + "YWFh" * 9 + 'YWE="'),
])
def test_other_opaque_values_print_as_base64(field_type, raw, text):
    assert json_text(encode(opaque(field_type, raw))) == text


def test_an_opaque_var_string_prints_as_the_string_it_holds():
    assert json_text(encode(opaque(253, "é\"x".encode()))) == '"é\\"x"'


# ---- what is not MySQL's binary JSON -----------------------------------------------------------------------------


def test_the_error_is_a_cdc_error_and_a_value_error():
    assert issubclass(UndecodableJson, CdcError) and issubclass(UndecodableJson, ValueError)


@pytest.mark.parametrize(("data", "message"), [
    (b"\x0d\x00", "type byte 0x0d at offset 0"),
    (b"\x10", "type byte 0x10 at offset 0"),
    (b"\xff\x01\x02", "type byte 0xff at offset 0"),
    # In an array's value entry (at offset 5): small array of one member, of type 0x0e.
    (b"\x02\x01\x00\x08\x00\x0e\x07\x00\x00", "type byte 0x0e at offset 5"),
    (bytes(encode(large(Obj({"k": i64(1)})))).replace(b"\x09", b"\x0d", 1), "type byte 0x0d at offset 15"),
    (b"\x04\x03", "literal byte 0x03 at offset 1"),
    (b"\x02\x01\x00\x07\x00\x04\x09\x00", "literal byte 0x09 at offset 6"),
])
def test_unknown_bytes(data, message):
    with pytest.raises(UndecodableJson, match=message):
        json_text(data)


def test_truncated_documents():
    documents = [encode(Obj({"a": s("text"), "b": Arr([i64(1), dbl(2.0)]), "c": decimal_bin("1.5", 5, 2)})),
                 encode(large(Arr([i32(1), s("x" * 300)]))), encode(s("x" * 300)), encode(i64(5)), encode(dbl(1.0)),
                 encode(datetime_(12, packed_datetime(2024, 1, 1)))]
    for data in documents:
        json_text(data)
        for cut in range(1, len(data)):
            with pytest.raises(UndecodableJson):
                json_text(data[:cut])


@pytest.mark.parametrize(("data", "message"), [
    (b"\x05\x01", "integer at offset 1 needs 2 bytes, only 1 remain"),
    (b"\x0b\x00\x00\x00", "double at offset 1 needs 8 bytes, only 3 remain"),
    (b"\x0c\x05abc", "string at offset 1 needs 6 bytes, only 4 remain"),
    (b"\x0c\x80\x80", "length at offset 1 is cut off"),
    (b"\x0c\xff\xff\xff\xff\x7f", "longer than 32 bits"),
    (b"\x0c\x80\x80\x80\x80\x80\x01", "longer than 32 bits"),
    (b"\x02\x01\x00\x09\x00\x05\x00\x00", "small array of 9 bytes at offset 1 needs 9 bytes, only 7 remain"),
    (b"\x02\x03\x00\x06\x00\x00\x00", "declares 3 members, whose entries take more than its 6 bytes"),
    # The value's offset (0x20) is beyond the array; then one (0x02) inside the array's own header.
    (b"\x02\x01\x00\x08\x00\x09\x20\x00\x00", "points at offset 33, outside its container"),
    (b"\x02\x01\x00\x08\x00\x09\x02\x00\x00", "points at offset 3, outside its container"),
    # An object whose key points past its end, or into its header.
    (b"\x00\x01\x00\x0c\x00\x20\x00\x01\x00\x04\x01\x00k", "key 0 at offset 32 .1 bytes. is outside"),
    (b"\x00\x01\x00\x0c\x00\x02\x00\x01\x00\x04\x01\x00k", "key 0 at offset 2 .1 bytes. is outside"),
    (b"\x0c\x02\xc3\x28", "not UTF-8 .utf8mb4.: byte 0xc3 at offset 2"),
    (b"\x00\x01\x00\x0c\x00\x0b\x00\x01\x00\x04\x01\x00\xff", "not UTF-8 .utf8mb4.: byte 0xff at offset 12"),
    (b"\x0f\x0c\x04\x00\x00\x00\x00", "type 12 at offset 1 has 4 bytes, not the 8"),
    (b"\x0f\x0c\x08" + struct.pack("<q", -1), "packed date -1 at offset 3 is negative"),
    (b"\x0f\x0c\x08" + struct.pack("<q", packed_datetime(2024, 1, 1, 24)), "is no date: year 2024, hour 24"),
    (b"\x0f\x0c\x08" + struct.pack("<q", packed_datetime(2024, 1, 1, 0, 60)), "minute 60"),
    (b"\x0f\x0c\x08" + struct.pack("<q", packed_datetime(2024, 1, 1, us=1_000_000)), "microsecond 1000000"),
    (b"\x0f\x0b\x08" + struct.pack("<q", packed_time(1, 2, 61)), "is no time: hour 1, minute 2, second 61"),
    (b"\x0f\xf6\x01\x05", "has 1 bytes, fewer than its precision and scale"),
    (b"\x0f\xf6\x03\x05\x06\x80", "precision 5 and scale 6"),
    (b"\x0f\xf6\x03\x05\x02\x80", r"DECIMAL\(5,2\) at offset 3 has 1 bytes of value, not 3"),
    # 5 digits before the point in 3 bytes that hold 100000.
    (b"\x0f\xf6\x05\x05\x00\x81\x86\xa0", r"a group of 5 digits holding 100000"),
])
def test_malformed_documents(data, message):
    with pytest.raises(UndecodableJson, match=message):
        json_text(data)


def test_non_finite_doubles_are_refused():
    for value in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(UndecodableJson, match="which JSON cannot hold"):
            json_text(encode(dbl(value)))


def test_an_empty_value_is_the_json_null_as_mysql_reads_it():
    assert json_text(b"") == "null"
