"""Text of every character set the server offers: the core decodes it as the server converts it to utf8mb4, and
the binlog path gives the snapshot's text; a value that is no text in its character set fails its table alone."""

from __future__ import annotations

import os
import random

import pytest

from airflow_cdc_provider.core.charsets import CHARSETS, Kind, UndecodableText, decode_text
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import extract, in_one_directory
from airflow_cdc_provider.stages.replay import replay
from tests.integration.capture_helpers import read_rows, source_rows
from tests.integration.charset_helpers import change_rows, create_table, insert_row, server_charsets, table_name


def _server_text(hexed: str) -> str | None:
    """The server's conversion (HEX of its utf8mb4) as text; None where it has no character ('?' or U+FFFD)."""
    return bytes.fromhex(hexed).decode("utf-8", "surrogatepass")


def _mine(charset: str, data: bytes) -> str | None:
    try:
        return decode_text(charset, data)
    except UndecodableText:
        return None


def test_every_character_set_decodes_as_the_server_converts_it(mariadb):
    """Every byte of each single-byte character set, every one- and two-byte sequence (and EUC-JP's three-byte
    ones) of each multi-byte one, and 3,000 random code points of each Unicode one."""
    charsets = [c for c in server_charsets(mariadb) if c != "binary"]
    assert set(charsets) <= set(CHARSETS), "every character set the server offers has a decoding"
    schema = f"charset_oracle_{os.urandom(3).hex()}"
    mariadb.execute(f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.seq (b VARBINARY(4) PRIMARY KEY)")
    sequences = [bytes([i]) for i in range(256)] + [bytes([i, j]) for i in range(0x80, 256) for j in range(0x20, 256)]
    sequences += [bytes([0x8F, i, j]) for i in range(0xA1, 0xFF) for j in range(0xA1, 0xFF)]
    rng = random.Random(11)
    points = [rng.choice([rng.randrange(0x80, 0xD800), rng.randrange(0xE000, 0x110000)]) for _ in range(3000)]
    unicode_rows = {c: [chr(p).encode(CHARSETS[c].codec or "") for p in points
                        if c not in ("ucs2", "utf8mb3") or p <= 0xFFFF] for c in charsets
                    if CHARSETS[c].kind is Kind.UNICODE}
    conn = mariadb.root_connection()
    try:
        with conn.cursor() as cursor:
            for k in range(0, len(sequences), 5000):
                cursor.executemany(f"INSERT INTO {schema}.seq VALUES (%s)", sequences[k:k + 5000])
            conn.commit()
            wrong: dict[str, list] = {}
            for charset in charsets:
                if CHARSETS[charset].kind is Kind.UNICODE:
                    sample = unicode_rows[charset]
                    cursor.execute("SELECT " + ",".join(f"HEX(CONVERT(CONVERT(x'{b.hex()}' USING {charset}) USING "
                                                        "utf8mb4))" for b in sample))
                    rows = list(zip(sample, cursor.fetchone()))
                else:
                    limit = "WHERE LENGTH(b) = 1" if CHARSETS[charset].kind is Kind.SINGLE_BYTE else ""
                    cursor.execute(f"SELECT b, HEX(CONVERT(CONVERT(b USING {charset}) USING utf8mb4)) "
                                   f"FROM {schema}.seq {limit}")
                    rows = cursor.fetchall()
                for data, hexed in rows:
                    server = _server_text(hexed)
                    if server.count("?") > data.count(b"?") or "\ufffd" in server:
                        server = None  # the server has no character for these bytes
                    if _mine(charset, bytes(data)) != server:
                        wrong.setdefault(charset, []).append((bytes(data).hex(), server, _mine(charset, bytes(data))))
    finally:
        conn.close()
        mariadb.execute(f"DROP DATABASE {schema}")
    assert {c: w[:5] for c, w in wrong.items()} == {}


def test_a_binlog_pass_over_a_table_per_character_set_gives_the_servers_text_and_a_bad_value_fails_its_table_alone(
        mariadb, capture_conn, tmp_path):
    schema = f"charsets_{os.urandom(3).hex()}"
    mariadb.execute(f"CREATE DATABASE {schema}")
    charsets = server_charsets(mariadb)
    for charset in charsets:
        create_table(mariadb, schema, charset)
        insert_row(mariadb, schema, charset, 1)
        insert_row(mariadb, schema, charset, 2)
    hook = MySqlSourceHook(capture_conn)
    headers = [hook.raw_header(TableName(schema, table_name(c))) for c in charsets]
    start = hook.current_watermark()
    for charset in charsets:
        change_rows(mariadb, schema, charset)
    # cp1250 has no character at 0x81; the server stores the byte all the same, and its SELECT shows '?'.
    mariadb.execute(f"INSERT INTO {schema}.cs_cp1250 (id, tx) VALUES (9, CONVERT(x'4181' USING cp1250))")
    result = extract(hook, in_one_directory(headers, tmp_path / "raw", definitions=headers), start, hook.current_watermark(), charsets=hook.column_charsets)
    assert set(result.failed) == {f"{schema}.cs_cp1250"}, {t: str(e) for t, e in result.failed.items()}
    message = str(result.failed[f"{schema}.cs_cp1250"])
    assert f"The column tx of {schema}.cs_cp1250 holds a value that is not cp1250 text" in message
    assert "81 at byte 1" in message and "fresh_snapshot=true" in message
    assert not list((tmp_path / "raw").glob(f"{schema}.cs_cp1250*")), "nothing of the failed table is left"
    for header in headers:
        if header.table in result.failed:
            continue
        replayed = replay(result.files[header.table], tmp_path / f"{header.table}.up.parquet",
                          tmp_path / f"{header.table}.del.parquet")
        upserts = {row["id"]: row for row in read_rows([replayed.upsert_file])}
        source = {key[0]: row for key, row in source_rows(mariadb, header).items()}
        assert upserts == {i: source[i] for i in (1, 3)}, header.table
        assert source[1]["tx"] and source[3]["ch"] == source[1]["ch"] != "", header.table


@pytest.mark.parametrize("charset", ["utf8mb4", "ucs2", "utf32"])
def test_a_collation_the_binlog_reader_does_not_know_takes_the_columns_character_set_now(
        mariadb, capture_conn, tmp_path, charset):
    """MariaDB 10.10's UCA 14 collations have ids the reader's table lacks; it calls their character set utf8."""
    table = TableName(f"uca_{os.urandom(3).hex()}", "t")
    mariadb.execute(f"CREATE DATABASE {table.schema}",
                    f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, tx VARCHAR(20) CHARACTER SET {charset} "
                    f"COLLATE {charset}_uca1400_ai_ci)")
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(table)
    start = hook.current_watermark()
    mariadb.execute(f"INSERT INTO {table.quoted} VALUES (1, 'Grüße')")
    result = extract(hook, in_one_directory([header], tmp_path / "raw", definitions=[header]), start, hook.current_watermark(), charsets=hook.column_charsets).check()
    replayed = replay(result.files[str(table)],
                      tmp_path / "up.parquet", tmp_path / "del.parquet")
    assert read_rows([replayed.upsert_file]) == [{"id": 1, "tx": "Grüße"}]


def test_a_column_converted_to_another_character_set_in_the_range_is_read_in_each_events_own(
        mariadb, capture_conn, tmp_path):
    table = TableName(f"convert_{os.urandom(3).hex()}", "t")
    mariadb.execute(f"CREATE DATABASE {table.schema}",
                    f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, tx VARCHAR(20) CHARACTER SET latin1, "
                    "en ENUM('café','thé') CHARACTER SET latin1)")
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(table)
    start = hook.current_watermark()
    mariadb.execute(f"INSERT INTO {table.quoted} VALUES (1, 'Ça coûte 5€', 'thé')",
                    f"ALTER TABLE {table.quoted} MODIFY tx VARCHAR(20) CHARACTER SET ucs2, "
                    "MODIFY en ENUM('café','thé') CHARACTER SET cp1250",
                    f"INSERT INTO {table.quoted} VALUES (2, 'Grüße Ωμέγα', 'café')")
    now = hook.raw_header(table)
    result = extract(hook, in_one_directory([header], tmp_path / "raw", definitions=[now]), start, hook.current_watermark(), charsets=hook.column_charsets).check()
    replayed = replay(result.files[str(table)], tmp_path / "up.parquet", tmp_path / "del.parquet")
    assert sorted(read_rows([replayed.upsert_file]), key=lambda r: r["id"]) == [
        {"id": 1, "tx": "Ça coûte 5€", "en": "thé"}, {"id": 2, "tx": "Grüße Ωμέγα", "en": "café"}]
