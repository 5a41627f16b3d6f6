"""One table per character set the server offers, holding text from that character set's own repertoire.

Values are written as bytes in the column's character set (``CONVERT(x'…' USING cs)``), chosen from the
repertoire: the server stores those bytes, its SELECT over utf8mb4 is the truth, and the binlog path must give
the same text. A byte sequence the core's tables wrongly took for a character would show as a difference.
"""

from __future__ import annotations

from airflow_cdc_provider.core.charset_tables import DIFFER, EXTRA
from airflow_cdc_provider.core.charsets import CHARSETS, Kind, UndecodableText, decode_text

# A sample of the Unicode repertoire: Latin, Greek, Cyrillic, Hebrew, Arabic, CJK, and two astral characters.
UNICODE_TEXT = "Grüße Ωμέγα Привет שלום مرحبا 中文字 한국어 ｶﾀｶﾅ 😀𝄞"
BASIC_PLANE_ONLY = ("ucs2", "utf8mb3")


def server_charsets(server) -> list[str]:
    return sorted(name for (name,) in server.execute("SELECT CHARACTER_SET_NAME FROM information_schema.CHARACTER_SETS"))


def _characters(charset: str) -> list[bytes]:
    """Byte sequences of non-ASCII (or, for swe7, re-assigned) characters of ``charset``."""
    spec = CHARSETS.get(charset)
    if charset == "binary":
        return [bytes([b]) for b in range(0, 256, 3)]
    if charset == "ascii":
        return [bytes([b]) for b in range(0x20, 0x7F)]
    assert spec is not None, charset
    if spec.kind is Kind.UNICODE:
        text = UNICODE_TEXT.replace(" ", "")
        if charset in BASIC_PLANE_ONLY:
            text = "".join(c for c in text if ord(c) <= 0xFFFF)
        codec = {"utf8mb3": "utf-8", "utf8mb4": "utf-8", "utf8": "utf-8"}.get(charset, spec.codec)
        return [c.encode(codec) for c in text]
    if spec.kind is Kind.SINGLE_BYTE:
        assert spec.table is not None
        return [bytes([b]) for b in range(0x20, 0x100)
                if spec.table[b] != "\ufffe" and (b >= 0x80 or not spec.table[b].isascii()) and b != 0x7F]
    found = []
    for lead in range(0x81, 0xFF, 5):  # a spread of two-byte characters
        for trail in range(0x40, 0xFF, 11):
            sequence = bytes([lead, trail])
            try:
                if len(decode_text(charset, sequence)) == 1:
                    found.append(sequence)
            except UndecodableText:
                pass
    # ...and every sequence the server reads otherwise than the Python codec, and EUC-JP's other planes.
    found += [s for s, c in DIFFER.get(charset, {}).items() if c is not None] + list(EXTRA.get(charset, {}))
    if charset in ("ujis", "eucjpms"):
        found += [b"\x8f\xb0\xa1", b"\x8f\xf5\xa1", b"\xf5\xa1", b"\xfe\xfe", b"\x8e\xb1"]
    return found


def sample_text(charset: str, rotate: int = 0) -> bytes:
    """Up to 300 characters of ``charset``'s repertoire as bytes; ``rotate`` gives another text of them."""
    characters = _characters(charset)
    step = max(1, len(characters) // 300)
    chosen = characters[::step][:300]
    if rotate:
        chosen = chosen[rotate % len(chosen):] + chosen[:rotate % len(chosen)]
    return b"".join(chosen)


def ascii_text(charset: str, text: str) -> bytes:
    """ASCII text in ``charset``: itself, but in the UTF-16 and UTF-32 ones."""
    spec = CHARSETS.get(charset)
    return text.encode(spec.codec) if spec is not None and spec.kind is Kind.UNICODE and spec.codec else text.encode()


def _member_like(charset: str, sequence: bytes) -> bool:
    # Printable, no space, comma, quote or backslash, and in the Basic Multilingual Plane: the server keeps ENUM
    # and SET members in utf8mb3, and trims their trailing spaces.
    if charset == "binary":
        return True
    text = decode_text(charset, sequence)
    return text.isprintable() and all(c not in " ,'\\" and ord(c) <= 0xFFFF for c in text)


def members(charset: str) -> list[bytes]:
    """Two ENUM/SET members of ``charset``'s repertoire, then an ASCII one."""
    characters = [c for c in _characters(charset) if _member_like(charset, c)]
    if charset == "binary":
        characters = [b"b1", b"b2"]
    return [characters[1], characters[-1] + characters[len(characters) // 2], ascii_text(charset, "plain")]


def table_name(charset: str) -> str:
    return f"cs_{charset}"


def create_table(server, schema: str, charset: str) -> None:
    """``cs_<charset>``: a TEXT, a CHAR and an ENUM and a SET in ``charset`` (a key and a note in utf8mb4)."""
    hexed = [m.hex() for m in members(charset)]
    # The members are written as text the server converts: their text is read from the server itself.
    texts = [server.execute(f"SELECT CONVERT(CONVERT(x'{h}' USING {charset}) USING utf8mb4)")[0][0] for h in hexed]
    quoted = ",".join("'" + (t.decode() if isinstance(t, bytes) else t).replace("'", "''") + "'" for t in texts)
    assert "\\" not in quoted
    server.execute(
        f"CREATE TABLE {schema}.{table_name(charset)} (id INT PRIMARY KEY, "
        f"tx TEXT CHARACTER SET {charset}, ch CHAR(12) CHARACTER SET {charset}, "
        f"en ENUM({quoted}) CHARACTER SET {charset}, st SET({quoted}) CHARACTER SET {charset}, "
        "note VARCHAR(20) CHARACTER SET utf8mb4)")


def insert_row(server, schema: str, charset: str, row_id: int) -> None:
    """A row of text, a CHAR with a trailing space, a non-ASCII ENUM member and two SET members."""
    first, second, _ = (m.hex() for m in members(charset))
    pad, comma = ascii_text(charset, " ").hex(), ascii_text(charset, ",").hex()
    server.execute(
        f"INSERT INTO {schema}.{table_name(charset)} VALUES ({row_id}, "
        f"CONVERT(x'{sample_text(charset, row_id).hex()}' USING {charset}), "
        f"CONVERT(x'{first}{pad}' USING {charset}), CONVERT(x'{second}' USING {charset}), "
        f"CONVERT(x'{second}{comma}{first}' USING {charset}), 'row {row_id}')")


def change_rows(server, schema: str, charset: str) -> None:
    """Through the binlog: a row inserted, one's text and members changed, one deleted."""
    table = f"{schema}.{table_name(charset)}"
    insert_row(server, schema, charset, 3)
    first = members(charset)[0].hex()
    server.execute(
        f"UPDATE {table} SET tx = CONVERT(x'{sample_text(charset, 7).hex()}' USING {charset}), "
        f"en = CONVERT(x'{first}' USING {charset}), st = CONVERT(x'{first}' USING {charset}) WHERE id = 1",
        f"DELETE FROM {table} WHERE id = 2")
