"""Write airflow_cdc_provider/core/charset_tables.py from what a running MariaDB server converts to utf8mb4.

The server is the oracle: the snapshot reads text over a utf8mb4 session, so the server's own conversion of each
character set is what the binlog path must reproduce. For each single-byte character set the table is the
server's conversion of every byte; for each multi-byte one, the differences between the Python codec the core
uses and the server, over every one- and two-byte sequence (and the three-byte ones of EUC-JP's 0x8F plane).

    python scripts/charset_tables.py --socket /path/to/mysqld.sock > airflow_cdc_provider/core/charset_tables.py

It needs a MariaDB server the user ``root`` reaches over the socket; it creates the scratch database
``charset_probe`` and drops it again.
"""

from __future__ import annotations

import argparse
import sys

import pymysql

# The Python codec the core decodes each multi-byte character set with (core/charsets.py says why each).
MULTI_BYTE_CODECS = {"big5": "big5", "cp932": "cp932", "euckr": "cp949", "eucjpms": "euc_jp", "gb2312": "gb2312",
                     "gbk": "gbk", "sjis": "shift_jis", "ujis": "euc_jp"}
# EUC-JP's user-defined rows 0xF5-0xFE (two bytes, and three after 0x8F) map to the Private Use Area in order:
# a rule in core/charsets.py, checked here rather than listed.
EUC_USER_ROWS = ("ujis", "eucjpms")


def euc_user_defined(sequence: bytes) -> str | None:
    plane, rest = (1, sequence[1:]) if len(sequence) == 3 and sequence[0] == 0x8F else (0, sequence)
    if len(rest) != 2 or not (0xF5 <= rest[0] <= 0xFE and 0xA1 <= rest[1] <= 0xFE):
        return None
    return chr(0xE000 + plane * 940 + (rest[0] - 0xF5) * 94 + (rest[1] - 0xA1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    socket = parser.parse_args().socket
    conn = pymysql.connect(unix_socket=socket, user="root", charset="utf8mb4", autocommit=True)
    cur = conn.cursor()
    cur.execute("SELECT CHARACTER_SET_NAME, MAXLEN FROM information_schema.CHARACTER_SETS ORDER BY 1")
    charsets = dict(cur.fetchall())
    single: dict[str, str] = {}
    for name, maxlen in charsets.items():
        if maxlen != 1 or name == "binary":
            continue
        cur.execute("SELECT " + ",".join(f"HEX(CONVERT(CONVERT(_binary x'{b:02x}' USING {name}) USING utf8mb4))"
                                         for b in range(256)))
        row = [bytes.fromhex(h).decode("utf-8") for h in cur.fetchone()]
        # '?' (or U+FFFD) for a byte other than '?' itself: the server has no character for it.
        single[name] = "".join("\ufffe" if (c in ("?", "\ufffd") and b != 0x3F) else c for b, c in enumerate(row))
        assert all(len(c) == 1 for c in row), name
    cur.execute("CREATE DATABASE IF NOT EXISTS charset_probe")
    cur.execute("CREATE OR REPLACE TABLE charset_probe.seq (b varbinary(3) PRIMARY KEY)")
    sequences = [bytes([i]) for i in range(256)] + [bytes([i, j]) for i in range(0x80, 256) for j in range(0x20, 256)]
    sequences += [bytes([0x8F, i, j]) for i in range(0xA1, 0xFF) for j in range(0xA1, 0xFF)]
    for k in range(0, len(sequences), 5000):
        cur.executemany("INSERT INTO charset_probe.seq VALUES (%s)", sequences[k:k + 5000])
    extra: dict[str, dict[bytes, str]] = {}
    differ: dict[str, dict[bytes, str | None]] = {}
    for name, codec in MULTI_BYTE_CODECS.items():
        cur.execute(f"SELECT b, HEX(CONVERT(CONVERT(b USING {name}) USING utf8mb4)) FROM charset_probe.seq")
        extra[name], differ[name] = {}, {}
        for seq, hexed in cur.fetchall():
            server = bytes.fromhex(hexed).decode("utf-8")
            try:
                mine: str | None = seq.decode(codec)
            except UnicodeDecodeError:
                mine = None
            server_one = len(server) == 1 and not (server in ("?", "\ufffd") and seq != b"?")
            if mine is not None and len(mine) == 1:
                if mine != server:
                    differ[name][seq] = server if server_one else None
            elif mine is None and server_one:
                if name in EUC_USER_ROWS and euc_user_defined(seq) == server:
                    continue
                extra[name][seq] = server
    cur.execute("DROP DATABASE charset_probe")
    cur.execute("SELECT VERSION()")
    (version,) = cur.fetchone()
    out = sys.stdout
    out.write('"""The server\'s own conversion of each MariaDB character set to Unicode, for core/charsets.py.\n\n'
              f"Written by scripts/charset_tables.py from MariaDB {version}; do not edit by hand.\n"
              '"""\n\n')
    out.write("# Each single-byte character set: the character of every byte, U+FFFE where the server has none.\n")
    out.write("SINGLE_BYTE: dict[str, str] = {\n")
    for name, table in single.items():
        out.write(f"    {name!r}: (\n")
        for k in range(0, 256, 16):
            out.write(f"        {table[k:k + 16]!r}\n")
        out.write("    ),\n")
    out.write("}\n\n# Multi-byte sequences the Python codec refuses and the server reads as a character.\n")
    _write_sequences(out, "EXTRA: dict[str, dict[bytes, str]]", extra)
    out.write("\n# Sequences the Python codec reads as another character than the server (None: as none).\n")
    _write_sequences(out, "DIFFER: dict[str, dict[bytes, str | None]]", differ)


def _write_sequences(out, declaration: str, by_charset: dict) -> None:
    """A module-level dict of each character set's sequences and their characters, in byte order."""
    out.write(f"{declaration} = {{\n")
    for name, found in by_charset.items():
        out.write(f"    {name!r}: {{\n")
        out.write("".join(f"        {k!r}: {v!r},\n" for k, v in sorted(found.items())))
        out.write("    },\n")
    out.write("}\n")


if __name__ == "__main__":
    main()
