"""MySQL's binary JSON (the value of a JSON column as a row event of the binlog holds it) decoded to the JSON text
MySQL itself prints for it: what ``SELECT CAST(col AS CHAR)`` returns, byte for byte where the format allows.

The binlog does not carry a JSON column as text but in MySQL's own binary format (``sql-common/json_binary.cc``):
a type byte, then the value; objects and arrays with offset tables, small (16-bit offsets) or large (32-bit), some
scalars inlined in their parent's entries; and "opaque" values, a MySQL field type with its raw bytes, which is how
a DATETIME, TIMESTAMP, DATE, TIME or DECIMAL put into a document by SQL (``JSON_OBJECT('t', NOW(6))``) is kept.

python-mysql-replication decodes this format itself, into Python values rather than text, and gets part of it
wrong: a negative TIME loses its sign and one of 24 hours or more fails, a DATE becomes a datetime, a TIMESTAMP and
any binary value become text with the undecodable bytes dropped, a DECIMAL becomes a Python Decimal where MySQL
prints a JSON number with its scale's digits, strings and keys stay bytes (a document that is a bare string is
bytes, indistinguishable from the raw value). ``json_text`` gives what MySQL gives instead, following MySQL's
printer (``sql-common/json_dom.cc``, ``wrapper_to_string``): doubles as ``my_gcvt`` prints them, opaque dates and
times as ``my_TIME_to_str`` with 6 fractional digits, DECIMALs as ``decimal2string``, other opaque values as
``"base64:typeNN:..."``.

Anything outside the format (an unknown type byte, an offset or length beyond the data, a date that cannot be
one) raises ``UndecodableJson``, saying what was found where: a document is decoded exactly or not at all.
"""

from __future__ import annotations

import base64
import struct
from json.encoder import encode_basestring

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.row_images import DECIMAL_LEFTOVER_BYTES
from airflow_cdc_provider.core.values import shortest_digits


class UndecodableJson(CdcError, ValueError):
    """Bytes that are not a JSON value in MySQL's binary format, or one MySQL itself could not print."""


# json_binary.h's type bytes.
_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY = 0x00, 0x01, 0x02, 0x03
_LITERAL, _DOUBLE, _STRING, _OPAQUE = 0x04, 0x0B, 0x0C, 0x0F
_INT16, _UINT16, _INT32, _UINT32 = 0x05, 0x06, 0x07, 0x08
_INTEGERS = {0x05: struct.Struct("<h"), 0x06: struct.Struct("<H"), 0x07: struct.Struct("<i"),
             0x08: struct.Struct("<I"), 0x09: struct.Struct("<q"), 0x0A: struct.Struct("<Q")}
_FLOAT64 = struct.Struct("<d")
_INT64 = struct.Struct("<q")
_LITERALS = {0x00: "null", 0x01: "true", 0x02: "false"}
_TYPES = frozenset({_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY, _LITERAL, _DOUBLE, _STRING, _OPAQUE,
                    *_INTEGERS})
# Scalars stored in the value entry itself instead of at an offset (json_binary.cc, inlined_type).
_INLINED_SMALL = frozenset({_LITERAL, _INT16, _UINT16})
_INLINED_LARGE = frozenset({_LITERAL, _INT16, _UINT16, _INT32, _UINT32})
# (element count, size), key entries (offset, length) and value entries (type, offset or inlined value).
_HEADS = {False: struct.Struct("<HH"), True: struct.Struct("<II")}
_KEY_ENTRIES = {False: struct.Struct("<HH"), True: struct.Struct("<IH")}
_VALUE_ENTRIES = {False: struct.Struct("<BH"), True: struct.Struct("<BI")}

# MySQL field types (enum_field_types) an opaque value may carry that its printer does not print as base64.
_TIMESTAMP, _DATE, _TIME, _DATETIME, _VAR_STRING, _NEWDECIMAL = 7, 10, 11, 12, 253, 246

# JSON_DOCUMENT_MAX_DEPTH: MySQL refuses to print a document nested deeper.
_MAX_DEPTH = 100

_INVERT = bytes(range(255, -1, -1))


def json_text(data: bytes) -> str:
    """The JSON text MySQL prints for the binary JSON ``data`` (the column's bytes after their length prefix).

    Raises ``UndecodableJson`` for anything that is not MySQL's binary JSON.
    """
    if not data:
        # json_binary.cc's parse_binary: an empty value (INSERT IGNORE of NULL into NOT NULL) is the JSON null.
        return "null"
    out: list[str] = []
    _value(data, data[0], 1, len(data), 0, out)
    return "".join(out)


def _value(data: bytes, kind: int, start: int, end: int, depth: int, out: list[str]) -> None:
    """Append the text of the value of type ``kind`` whose bytes start at ``start`` and may reach ``end``."""
    if kind <= _LARGE_ARRAY:
        _container(data, kind, start, end, depth, out)
    elif kind == _STRING:
        length, at = _variable_length(data, start, end)
        _need(at + length, end, "string", start)
        out.append(encode_basestring(_utf8(data, at, at + length)))
    elif kind in _INTEGERS:
        number = _INTEGERS[kind]
        _need(start + number.size, end, "integer", start)
        out.append(str(number.unpack_from(data, start)[0]))
    elif kind == _DOUBLE:
        _need(start + 8, end, "double", start)
        out.append(_double_text(_FLOAT64.unpack_from(data, start)[0], start))
    elif kind == _LITERAL:
        _need(start + 1, end, "literal", start)
        out.append(_literal(data[start], start))
    elif kind == _OPAQUE:
        _opaque(data, start, end, out)
    else:
        # Only a document's own type byte gets here (an element's is checked against its entry): it is at 0.
        raise UndecodableJson(f"JSON value type byte 0x{kind:02x} at offset {start - 1} is not one of MySQL's "
                              "binary JSON types")


def _container(data: bytes, kind: int, start: int, end: int, depth: int, out: list[str]) -> None:
    large = kind in (_LARGE_OBJECT, _LARGE_ARRAY)
    is_object = kind in (_SMALL_OBJECT, _LARGE_OBJECT)
    what = ("large " if large else "small ") + ("object" if is_object else "array")
    if depth == _MAX_DEPTH:
        raise UndecodableJson(f"JSON {what} at offset {start} is nested deeper than {_MAX_DEPTH} levels, "
                              "more than MySQL prints")
    head = _HEADS[large]
    _need(start + head.size, end, what, start)
    count, size = head.unpack_from(data, start)
    stop = start + size
    _need(stop, end, f"{what} of {size} bytes", start)
    keys_at = start + head.size
    key_entries = _KEY_ENTRIES[large]
    values_at = keys_at + count * key_entries.size if is_object else keys_at
    value_entries = _VALUE_ENTRIES[large]
    header_end = values_at + count * value_entries.size
    if header_end > stop:
        raise UndecodableJson(f"JSON {what} at offset {start} declares {count} members, whose entries take more "
                              f"than its {size} bytes")
    inlined = _INLINED_LARGE if large else _INLINED_SMALL
    entry_size = value_entries.size
    entries = value_entries.iter_unpack(data[values_at:header_end])
    if is_object:
        out.append("{")
        for i, ((key_offset, key_length), entry) in enumerate(
                zip(key_entries.iter_unpack(data[keys_at:values_at]), entries)):
            if i:
                out.append(", ")
            if key_offset < header_end - start or key_offset + key_length > size:
                raise UndecodableJson(f"JSON object at offset {start}: key {i} at offset {key_offset} "
                                      f"({key_length} bytes) is outside the object's {size} bytes")
            out.append(encode_basestring(_utf8(data, start + key_offset, start + key_offset + key_length)))
            out.append(": ")
            _element(data, entry, inlined, start, values_at + i * entry_size, entry_size, stop, depth, out)
        out.append("}")
    else:
        out.append("[")
        for i, entry in enumerate(entries):
            if i:
                out.append(", ")
            _element(data, entry, inlined, start, values_at + i * entry_size, entry_size, stop, depth, out)
        out.append("]")


def _element(data: bytes, entry: tuple[int, int], inlined: frozenset[int], start: int, entry_at: int,
             entry_size: int, stop: int, depth: int, out: list[str]) -> None:
    """Append the member or element that the value entry at ``entry_at`` of the container at ``start`` describes."""
    kind, field = entry
    if kind in inlined:
        out.append(_inlined(kind, field, entry_at))
        return
    if kind not in _TYPES:
        raise UndecodableJson(f"JSON value type byte 0x{kind:02x} at offset {entry_at} is not one of MySQL's "
                              "binary JSON types")
    # json_binary.cc's Value::element: a value lies after its own entry and within its container.
    if start + field < entry_at + entry_size or start + field > stop:
        raise UndecodableJson(f"JSON value entry at offset {entry_at} points at offset {start + field}, outside "
                              f"its container (offsets {start} to {stop})")
    _value(data, kind, start + field, stop, depth + 1, out)


def _inlined(kind: int, field: int, entry_at: int) -> str:
    """The text of a scalar kept in its value entry's offset field (little-endian, from the field's first byte)."""
    if kind == _LITERAL:
        return _literal(field & 0xFF, entry_at + 1)
    if kind == _INT16:
        return str((field & 0xFFFF) - ((field & 0x8000) << 1))
    if kind == _UINT16:
        return str(field & 0xFFFF)
    if kind == _INT32:
        return str(field - ((field & 0x80000000) << 1))
    return str(field)


def _literal(byte: int, at: int) -> str:
    try:
        return _LITERALS[byte]
    except KeyError:
        raise UndecodableJson(f"JSON literal byte 0x{byte:02x} at offset {at} is none of null, true, false") from None


def _opaque(data: bytes, start: int, end: int, out: list[str]) -> None:
    _need(start + 1, end, "opaque value", start)
    field_type = data[start]
    length, at = _variable_length(data, start + 1, end)
    _need(at + length, end, f"opaque value of type {field_type}", start)
    raw = data[at:at + length]
    if field_type == _NEWDECIMAL:
        out.append(_decimal_text(raw, at))
    elif field_type in (_DATETIME, _TIMESTAMP, _DATE, _TIME):
        if length != 8:
            raise UndecodableJson(f"JSON opaque value of type {field_type} at offset {start} has {length} bytes, "
                                  "not the 8 of a packed date or time")
        packed = _INT64.unpack_from(raw)[0]
        text = _time_text(packed, at) if field_type == _TIME else _datetime_text(packed, field_type == _DATE, at)
        out.append(f'"{text}"')
    elif field_type == _VAR_STRING:
        # json_dom.cc's wrapper_to_string prints this one type as the plain string it holds.
        out.append(encode_basestring(_utf8(data, at, at + length)))
    else:
        # MySQL's base64_encode breaks a line every 76 characters, as encodebytes does, and not at the end; the
        # newlines are escaped as \n by the quoting.
        encoded = base64.encodebytes(raw).rstrip(b"\n").decode("ascii")
        out.append(encode_basestring(f"base64:type{field_type}:{encoded}"))


def _datetime_text(packed: int, date_only: bool, at: int) -> str:
    """my_TIME_to_str of my_time.cc's TIME_from_longlong_datetime_packed, with 6 fractional digits."""
    if packed < 0:
        raise UndecodableJson(f"JSON packed date {packed} at offset {at} is negative")
    fraction = packed & 0xFFFFFF
    ymdhms = packed >> 24
    ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
    year, month, day = (ymd >> 5) // 13, (ymd >> 5) % 13, ymd & 0x1F
    hour, minute, second = hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F
    if year > 9999 or hour > 23 or minute > 59 or second > 59 or fraction > 999999:
        raise UndecodableJson(f"JSON packed date {packed} at offset {at} is no date: year {year}, hour {hour}, "
                              f"minute {minute}, second {second}, microsecond {fraction}")
    if date_only:
        return f"{year:04d}-{month:02d}-{day:02d}"
    return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


def _time_text(packed: int, at: int) -> str:
    """my_TIME_to_str of my_time.cc's TIME_from_longlong_time_packed, with 6 fractional digits."""
    magnitude = -packed if packed < 0 else packed
    fraction = magnitude & 0xFFFFFF
    hms = magnitude >> 24
    hour, minute, second = hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F
    if hour > 0x3FF or minute > 59 or second > 59 or fraction > 999999:
        raise UndecodableJson(f"JSON packed time {packed} at offset {at} is no time: hour {hour}, minute {minute}, "
                              f"second {second}, microsecond {fraction}")
    sign = "-" if packed < 0 else ""
    return f"{sign}{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


def _decimal_text(raw: bytes, at: int) -> str:
    """decimal2string of decimal.cc's bin2decimal: precision byte, scale byte, then the binary decimal.

    The binary decimal is big-endian groups of 9 digits in 4 bytes, shorter groups at the two ends, the sign in the
    first bit flipped (set for positive), and every byte inverted for a negative number.
    """
    if len(raw) < 2:
        raise UndecodableJson(f"JSON DECIMAL at offset {at} has {len(raw)} bytes, fewer than its precision and scale")
    precision, scale = raw[0], raw[1]
    # Not DECIMAL's 65 digits: a computed value may have more (a DECIMAL(65,30) cast gives precision 66). What
    # bin2decimal cannot read is more groups of 9 digits than a decimal's 9 (DECIMAL_BUFF_LENGTH).
    if scale > precision or (precision - scale + 8) // 9 + (scale + 8) // 9 > 9:
        raise UndecodableJson(f"JSON DECIMAL at offset {at} has precision {precision} and scale {scale}, more "
                              "than a MySQL decimal holds")
    whole_groups, lead_digits = divmod(precision - scale, 9)
    frac_groups, tail_digits = divmod(scale, 9)
    lead_bytes, tail_bytes = DECIMAL_LEFTOVER_BYTES[lead_digits], DECIMAL_LEFTOVER_BYTES[tail_digits]
    size = lead_bytes + 4 * (whole_groups + frac_groups) + tail_bytes
    if len(raw) - 2 != size:
        raise UndecodableJson(f"JSON DECIMAL({precision},{scale}) at offset {at} has {len(raw) - 2} bytes of value, "
                              f"not {size}")
    body = bytearray(raw[2:])
    negative = not body[0] & 0x80
    body[0] ^= 0x80
    if negative:
        body = body.translate(_INVERT)
    groups = struct.unpack_from(f">{whole_groups + frac_groups}I", body, lead_bytes)

    def checked(value: int, digits: int) -> int:
        if value >= 10 ** digits:
            raise UndecodableJson(f"JSON DECIMAL({precision},{scale}) at offset {at} has a group of {digits} digits "
                                  f"holding {value}")
        return value

    whole = checked(int.from_bytes(body[:lead_bytes], "big"), lead_digits)
    for group in groups[:whole_groups]:
        whole = whole * 1_000_000_000 + checked(group, 9)
    text = ("-" if negative else "") + str(whole)
    if scale:
        fraction = "".join(f"{checked(group, 9):09d}" for group in groups[whole_groups:])
        if tail_digits:
            tail = checked(int.from_bytes(body[size - tail_bytes:], "big"), tail_digits)
            fraction += f"{tail:0{tail_digits}d}"
        text += "." + fraction
    return text


def _double_text(value: float, at: int) -> str:
    """my_gcvt(value, MY_GCVT_ARG_DOUBLE, MY_GCVT_MAX_FIELD_WIDTH), then ".0" if that has neither '.' nor 'e'.

    my_gcvt takes dtoa's shortest round-trip digits, which are repr's. In its field of 34 characters (33 for a
    negative number) 17 digits always fit, so it never rounds further; it only chooses between the 'f' and 'e'
    forms: 'f' when the number fits the field and its decimal point is within 15 places either side of its first
    digit (MAX_DECPT_FOR_F_FORMAT), or within its digits.
    """
    if value != value or value in (float("inf"), float("-inf")):
        raise UndecodableJson(f"JSON double at offset {at} is {value}, which JSON cannot hold")
    sign, significant, point = shortest_digits(value)  # point: dtoa's decpt
    if not significant:
        significant, point = "0", 1
    count = len(significant)
    width = 34 - len(sign)
    fits = (count - point + 2 if point <= 0 else count + 1 if point < count else point) <= width
    if fits and point >= -14 and (point <= 15 or count > point):
        if point <= 0:
            body = "0." + "0" * -point + significant
        elif point < count:
            body = significant[:point] + "." + significant[point:]
        else:
            body = significant + "0" * (point - count) + ".0"
    else:
        body = significant[0] + ("." + significant[1:] if count > 1 else "") + f"e{point - 1}"
    return sign + body


def _variable_length(data: bytes, at: int, end: int) -> tuple[int, int]:
    """json_binary.cc's read_variable_length: 7 bits a byte, least significant first, at most 5 bytes.

    Returns the length and the offset after it.
    """
    length = 0
    for i in range(5):
        if at + i >= end:
            break
        byte = data[at + i]
        length |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if length > 0xFFFFFFFF:
                break
            return length, at + i + 1
    raise UndecodableJson(f"JSON length at offset {at} is cut off or longer than 32 bits: "
                          f"{data[at:min(at + 5, end)].hex()}")


def _need(needed_end: int, end: int, what: str, at: int) -> None:
    if needed_end > end:
        raise UndecodableJson(f"JSON {what} at offset {at} needs {needed_end - at} bytes, only {end - at} remain: "
                              "the data is truncated or an offset is wrong")


def _utf8(data: bytes, start: int, stop: int) -> str:
    try:
        return data[start:stop].decode("utf-8")
    except UnicodeDecodeError as error:
        raise UndecodableJson(f"JSON string at offset {start} is not UTF-8 (utf8mb4): byte "
                              f"0x{data[start + error.start]:02x} at offset {start + error.start}") from None
