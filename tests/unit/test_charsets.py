"""The character set map: each of MariaDB's and MySQL's character sets decodes as the server converts it.

The tables themselves are checked against a real server, byte by byte, in tests/integration/test_charsets.py;
these are the rules and the cases that need care, spelt out.
"""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.charsets import (
    CHARSETS,
    Kind,
    UndecodableText,
    ascii_compatible,
    charset_of_collation,
    decode_text,
    known,
)

# MariaDB 10.11's SHOW CHARACTER SET, and MySQL 8's gb18030.
SERVER_CHARSETS = (
    "armscii8 ascii big5 binary cp1250 cp1251 cp1256 cp1257 cp850 cp852 cp866 cp932 dec8 eucjpms euckr gb2312 gbk "
    "geostd8 greek hebrew hp8 keybcs2 koi8r koi8u latin1 latin2 latin5 latin7 macce macroman sjis swe7 tis620 ucs2 "
    "ujis utf16 utf16le utf32 utf8mb3 utf8mb4 gb18030 utf8").split()


def test_every_character_set_of_the_servers_is_known():
    assert all(known(name) for name in SERVER_CHARSETS)
    assert not known("klingon")
    assert {spec.kind for spec in CHARSETS.values()} == set(Kind)


@pytest.mark.parametrize(("charset", "data", "text"), [
    # The Unicode ones: big-endian, as the server stores them.
    ("ucs2", b"\x00S\x00\xe6\x00N", "SæN"),
    ("utf16", b"\xd8\x3d\xde\x00\x00a", "😀a"),
    ("utf16le", b"=\xd8\x00\xdea\x00", "😀a"),
    ("utf32", b"\x00\x01\xf6\x00\x00\x00\x00a", "😀a"),
    ("utf8mb3", "añ€".encode(), "añ€"),
    ("utf8", "añ€".encode(), "añ€"),
    ("utf8mb4", "😀𝄞".encode(), "😀𝄞"),
    # latin1 is cp1252, with the five bytes cp1252 leaves undefined read as the C1 controls.
    ("latin1", b"\x80\x81\x8d\x8f\x90\x9d\xe9\xff", "€\x81\x8d\x8f\x90\x9déÿ"),
    # Mac Central European and Mac Roman.
    ("macce", b"S\x8a\xe4", "Säš"),
    ("macroman", b"\x8e\xa5\xdb", "é•€"),
    # The ones Python has no codec for: DEC, HP, 7-bit Swedish, Kamenický, Armenian and Georgian.
    ("dec8", b"\xc0\xc7", "ÀÇ"),
    ("hp8", b"\xa1\xc0\xc5", "Àâé"),
    ("swe7", b"@[\\]^`{|}~", "ÉÄÖÅÜéäöåü"),
    ("keybcs2", b"\x80\x87", "Čč"),
    ("armscii8", b"\xb2\xb3\xc0", "ԱաԸ"),
    ("geostd8", b"\xc0\xc1\xc7", "აბჱ"),
    # Where the server reads a byte otherwise than Python's codec of that name.
    ("cp866", b"\xfc\xfd", "ⁿ²"),
    ("koi8u", b"\x95", "•"),
    ("greek", b"\xa1\xa2", "ʽʼ"),
    ("hebrew", b"\xaf\xe0", "‾א"),
    ("tis620", b"\xa1\xe0", "กเ"),
    ("latin2", b"\xa9", "Š"), ("latin5", b"\xfd", "ı"), ("latin7", b"\xe0", "ą"),
    ("cp1250", b"\x8a", "Š"), ("cp1251", b"\xc0", "А"), ("cp1256", b"\xc7", "ا"), ("cp1257", b"\xe0", "ą"),
    ("cp850", b"\x82", "é"), ("cp852", b"\xa5", "ą"), ("koi8r", b"\xc1", "а"), ("ascii", b"plain", "plain"),
    # Multi-byte: the codec, and the server's corrections.
    ("gbk", "中文".encode("gbk"), "中文"), ("gb2312", "中文".encode("gb2312"), "中文"),
    ("big5", "中文".encode("big5"), "中文"), ("big5", b"\xf9\xd6", "碁"),
    ("euckr", b"\x81\x41\xb0\xa1", "갂가"),  # the server's euckr is CP949
    ("sjis", "カナ".encode("shift_jis") + b"\x81\x5f", "カナ\\"),
    ("cp932", "①".encode("cp932"), "①"),
    ("ujis", "日本".encode("euc_jp") + b"\xa1\xc0", "日本\\"),
    ("ujis", b"\xf5\xa1\x8f\xf5\xa2", "\ue000\ue3ad"),  # the user-defined rows: the Private Use Area, in order
    ("eucjpms", b"\xa1\xc1\x8f\xf3\xf3", "～ⅰ"),
    ("gb18030", "中😀".encode("gb18030"), "中😀"),
    ("latin1", b"", ""),
])
def test_text_of_each_character_set(charset, data, text):
    assert decode_text(charset, data) == text


@pytest.mark.parametrize(("charset", "data", "bad"), [
    ("cp1250", b"A\x81", "81"),  # a byte the character set has no character for
    ("ascii", b"ok\xe9", "e9"),
    ("dec8", b"\xa4", "a4"),
    ("ucs2", b"\x00S\x00", "00"),  # an odd number of bytes
    ("ucs2", b"\xd8\x3d\xde\x00", "d8 3d de 00"),  # ucs2 has no surrogate pairs
    ("utf16", b"\xd8\x00\x00a", "d8 00"),  # a lone surrogate
    ("utf32", b"\x00\x11\x00\x00", "00 11 00 00"),  # past U+10FFFF
    ("utf8mb4", b"a\xff", "ff"),
    ("big5", b"\xa1\x5a", "a1 5a"),  # Python's big5 has a character there; the server does not
    ("cp932", b"\x80", "80"),
    ("gbk", b"\x81", "81"),  # a lead byte cut short
    ("sjis", b"\x81\x20", "81"),
])
def test_bytes_that_are_no_text_are_an_error_naming_the_bytes_and_the_character_set(charset, data, bad):
    with pytest.raises(UndecodableText) as caught:
        decode_text(charset, data)
    assert caught.value.bad.hex(" ").startswith(bad) and caught.value.charset == charset
    assert f"are no character of {charset}" in str(caught.value)


def test_a_single_byte_table_has_256_characters_and_ascii_where_the_character_set_keeps_it():
    for spec in CHARSETS.values():
        if spec.kind is Kind.SINGLE_BYTE:
            assert spec.table is not None and len(spec.table) == 256, spec.name
    assert [c for c in CHARSETS if not ascii_compatible(c)] == ["ucs2", "utf16", "utf16le", "utf32", "swe7"]


def test_the_character_set_of_a_collation():
    assert charset_of_collation("latin1_swedish_ci") == "latin1"
    assert charset_of_collation("utf8mb4_uca1400_ai_ci") == "utf8mb4"
    assert charset_of_collation("utf16le_general_ci") == "utf16le"
    assert charset_of_collation("binary") == "binary"
    assert charset_of_collation("UCS2_BIN") == "ucs2"


def test_the_character_set_of_a_binlog_column_comes_from_its_collation():
    from types import SimpleNamespace

    from airflow_cdc_provider.core.binlog_columns import BLOB, ENUM, LONG, SET, STRING, VARCHAR, text_charset

    def column(code, collation, name="utf8"):
        return SimpleNamespace(type=code, collation_name=collation, character_set_name=name)

    assert text_charset(column(VARCHAR, "macce_general_ci", "macce")) == "macce"
    assert text_charset(column(STRING, "ucs2_general_ci", "ucs2")) == "ucs2"
    assert text_charset(column(ENUM, "latin1_swedish_ci", "cp1252")) == "latin1"  # not the reader's codec name
    assert text_charset(column(SET, "utf8mb4_bin")) == "utf8mb4"
    assert text_charset(column(BLOB, "binary", "binary")) == "binary"
    # A collation the reader's table lacks: it calls the character set utf8 whatever it is, so nothing is taken.
    assert text_charset(column(VARCHAR, None, "utf8")) is None
    assert text_charset(column(LONG, None, None)) is None  # not a string column


def test_a_decoder_of_one_character_set_reads_as_decode_text_does():
    from airflow_cdc_provider.core.charsets import text_decoder

    samples = {"utf8mb4": "😀".encode(), "utf16": b"\xd8\x3d\xde\x00", "ucs2": b"\x00S", "latin1": b"\x81",
               "sjis": b"\x81\x5f", "macce": b"\x8a"}
    for charset, data in samples.items():
        assert text_decoder(charset)(data) == decode_text(charset, data)
    with pytest.raises(UndecodableText, match="no character of utf8mb4"):
        text_decoder("utf8mb4")(b"\xff")
    with pytest.raises(UndecodableText, match="no character of ucs2"):
        text_decoder("ucs2")(b"\xd8\x3d\xde\x00")
    with pytest.raises(KeyError):
        text_decoder("klingon")
