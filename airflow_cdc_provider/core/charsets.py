"""Text of every MySQL and MariaDB character set, from the bytes a binlog row event holds to the text Hive gets.

A row event carries a text column's value in the column's own character set; the snapshot reads it over a
utf8mb4 session, so the server converts it. The server's conversion is the truth: ``decode_text`` gives, for
every character set, the text the server's conversion to utf8mb4 gives for the same bytes, or raises
``UndecodableText`` for bytes the server has no character for (where the server's conversion prints ``?``).

How each character set is decoded (``CHARSETS``):

- the Unicode ones by Python's strict codecs: ``utf8``/``utf8mb3``/``utf8mb4`` as UTF-8, ``ucs2`` and ``utf16``
  as UTF-16 big-endian (ucs2 without surrogate pairs), ``utf16le`` little-endian, ``utf32`` as UTF-32 big-endian;
- every single-byte one (``latin1`` is MySQL's cp1252 with the five bytes cp1252 leaves undefined as the C1
  controls; ``macce``, ``macroman``, ``dec8``, ``hp8``, ``swe7``, ``keybcs2``, ``armscii8``, ``geostd8``,
  ``greek``, ``hebrew``, ``tis620``…) by its table of 256 characters, which is the server's own conversion of each
  byte (``core/charset_tables.py``, written by ``scripts/charset_tables.py``): Python's codecs of the same names
  differ from the server in a few bytes each, and have none for six of them;
- the multi-byte ones by the nearest Python codec (``euckr`` is the server's CP949, ``ujis`` and ``eucjpms``
  EUC-JP), corrected where the server reads a sequence otherwise: the few sequences listed in
  ``charset_tables.EXTRA``/``DIFFER``, and EUC-JP's user-defined rows (0xF5-0xFE), which the server maps in
  order into the Private Use Area;
- ``gb18030`` (MySQL 8 only, not on MariaDB) by Python's codec of the same standard;
- ``binary`` is not text: such columns are BINARY, VARBINARY and BLOB and stay bytes.
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from airflow_cdc_provider.core.charset_tables import DIFFER, EXTRA, SINGLE_BYTE


class Kind(Enum):
    UNICODE = "unicode"  # a strict Python codec decodes it exactly
    SINGLE_BYTE = "single-byte"  # a table of 256 characters
    MULTI_BYTE = "multi-byte"  # a Python codec with the server's corrections


@dataclass(frozen=True)
class Charset:
    """How the text of one character set is decoded: a codec, or a table, and the server's corrections."""

    name: str
    kind: Kind
    codec: str | None = None
    table: str | None = None  # SINGLE_BYTE: the character of each byte, U+FFFE where the server has none
    extra: dict[bytes, str] = field(default_factory=dict)  # sequences the codec refuses, the server reads
    differ: dict[bytes, str | None] = field(default_factory=dict)  # sequences the server reads otherwise
    user_defined_rows: bool = False  # EUC-JP's rows 0xF5-0xFE → the Private Use Area
    basic_plane_only: bool = False  # ucs2: a surrogate pair is two code units the server refuses
    # The characters the codec gives for the sequences the server reads otherwise: a text without any of them
    # needs no correction (the common case: one decode in C, one scan).
    suspects: frozenset[str] = field(init=False, default=frozenset())

    def __post_init__(self) -> None:
        if self.codec and self.differ:
            object.__setattr__(self, "suspects", frozenset(seq.decode(self.codec) for seq in self.differ))


class UndecodableText(ValueError):
    """Bytes that are no text in their character set: where, which bytes, and in which character set."""

    def __init__(self, charset: str, data: bytes, offset: int, length: int = 1):
        self.charset, self.offset = charset, offset
        self.bad = data[offset:offset + max(length, 1)]
        super().__init__(f"the bytes {self.bad.hex(' ')} at byte {offset} of the value "
                         f"({len(data)} bytes, starting {data[:24].hex(' ')}) are no character of {charset}")


_UNICODE = {"utf8": "utf-8", "utf8mb3": "utf-8", "utf8mb4": "utf-8", "ucs2": "utf-16-be", "utf16": "utf-16-be",
            "utf16le": "utf-16-le", "utf32": "utf-32-be", "gb18030": "gb18030"}
# The Python codec each multi-byte character set is read with before the server's corrections.
_MULTI_BYTE = {"big5": "big5", "cp932": "cp932", "euckr": "cp949", "eucjpms": "euc_jp", "gb2312": "gb2312",
               "gbk": "gbk", "sjis": "shift_jis", "ujis": "euc_jp"}

CHARSETS: dict[str, Charset] = {
    **{name: Charset(name, Kind.UNICODE, codec, basic_plane_only=name == "ucs2") for name, codec in _UNICODE.items()},
    **{name: Charset(name, Kind.SINGLE_BYTE, table=table) for name, table in SINGLE_BYTE.items()},
    **{name: Charset(name, Kind.MULTI_BYTE, codec, extra=EXTRA.get(name, {}), differ=DIFFER.get(name, {}),
                     user_defined_rows=name in ("ujis", "eucjpms")) for name, codec in _MULTI_BYTE.items()},
}
UTF8_NAMES = frozenset({"utf8", "utf8mb3", "utf8mb4"})


def charset_of_collation(collation: str) -> str:
    """The character set a collation belongs to: its name up to the first underscore (``binary`` for binary).

    Every MySQL and MariaDB character set name is free of underscores (``utf8mb4``, ``utf16le``), and every
    collation name starts with its character set's: ``latin1_swedish_ci``, ``utf8mb4_uca1400_ai_ci``.
    """
    return collation.split("_", 1)[0].lower()


def known(charset: str) -> bool:
    return charset == "binary" or charset.lower() in CHARSETS


def ascii_compatible(charset: str) -> bool:
    """Whether ``charset`` reads every ASCII byte as that ASCII character (not so: UTF-16, UTF-32, ucs2, swe7)."""
    ascii = bytes(range(128))
    try:
        return decode_text(charset, ascii) == ascii.decode("ascii")
    except UndecodableText:
        return False


def text_decoder(charset: str) -> Callable[[bytes], str]:
    """``decode_text`` for one character set, as one function (the extraction calls it for every text value).

    Raises KeyError at once for an unknown character set.
    """
    spec = CHARSETS[charset.lower()]
    if spec.kind is Kind.UNICODE and not spec.basic_plane_only and spec.codec:
        codec, name = spec.codec, spec.name

        def decode(data: bytes) -> str:
            try:
                return data.decode(codec)
            except UnicodeDecodeError as exc:
                raise UndecodableText(name, data, exc.start, exc.end - exc.start) from None

        return decode
    return functools.partial(decode_text, spec.name)


def decode_text(charset: str, data: bytes) -> str:
    """The text of ``data`` in ``charset`` (a server's character set name), as the server converts it to utf8mb4.

    Raises UndecodableText for bytes the server has no character for, KeyError for an unknown character set.
    """
    spec = CHARSETS[charset.lower()]
    if spec.kind is Kind.SINGLE_BYTE:
        assert spec.table is not None
        try:
            return codecs.charmap_decode(data, "strict", spec.table)[0]
        except UnicodeDecodeError as exc:
            raise UndecodableText(spec.name, data, exc.start) from None
    assert spec.codec is not None
    try:
        text = data.decode(spec.codec)
    except UnicodeDecodeError as exc:
        if spec.kind is Kind.UNICODE:
            raise UndecodableText(spec.name, data, exc.start, exc.end - exc.start) from None
        return _corrected(spec, data)
    if spec.basic_plane_only and any(ord(c) > 0xFFFF for c in text):
        offset = 2 * next(i for i, c in enumerate(text) if ord(c) > 0xFFFF)
        raise UndecodableText(spec.name, data, offset, 4)
    if spec.kind is Kind.MULTI_BYTE and not spec.suspects.isdisjoint(text):
        return _corrected(spec, data)
    return text


def _corrected(spec: Charset, data: bytes) -> str:
    """Character by character: the codec's reading of each sequence, or the server's where it differs."""
    assert spec.codec is not None
    out: list[str] = []
    decoder = codecs.getincrementaldecoder(spec.codec)()
    start = pos = 0
    while pos < len(data):
        try:
            char = decoder.decode(data[pos:pos + 1])
        except UnicodeDecodeError:
            found = _extra(spec, data, start)
            if found is None:
                raise UndecodableText(spec.name, data, start, pos + 1 - start) from None
            out.append(found[0])
            decoder.reset()
            start = pos = start + found[1]
            continue
        pos += 1
        if char:
            sequence = data[start:pos]
            if sequence in spec.differ:
                server = spec.differ[sequence]
                if server is None:
                    raise UndecodableText(spec.name, data, start, len(sequence))
                char = server
            out.append(char)
            start = pos
    if start < len(data):  # a sequence cut short at the end
        found = _extra(spec, data, start)
        if found is None or start + found[1] != len(data):
            raise UndecodableText(spec.name, data, start, len(data) - start)
        out.append(found[0])
    return "".join(out)


def _extra(spec: Charset, data: bytes, start: int) -> tuple[str, int] | None:
    """A sequence at ``start`` the codec refuses and the server reads: its character and length."""
    for length in (3, 2, 1):
        sequence = data[start:start + length]
        if len(sequence) != length:
            continue
        if sequence in spec.extra:
            return spec.extra[sequence], length
        if spec.user_defined_rows and (char := _euc_user_defined(sequence)) is not None:
            return char, length
    return None


def _euc_user_defined(sequence: bytes) -> str | None:
    """EUC-JP's user-defined rows 0xF5-0xFE, in order from U+E000 (and from U+E3AC in the 0x8F plane)."""
    plane, rest = (1, sequence[1:]) if len(sequence) == 3 and sequence[0] == 0x8F else (0, sequence)
    if len(rest) != 2 or not (0xF5 <= rest[0] <= 0xFE and 0xA1 <= rest[1] <= 0xFE):
        return None
    return chr(0xE000 + plane * 940 + (rest[0] - 0xF5) * 94 + (rest[1] - 0xA1))
