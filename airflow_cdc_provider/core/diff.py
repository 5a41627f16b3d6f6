"""Diff mode: a table's changes found without the binlog, by comparing the source with the row digests kept from
the version before, shipping from the server little more than the changed rows.

Each row has two 64-bit numbers, both the first 64 bits of a hash computed on the server
(``core.checksum.text_hash_sql``):

- its **hash**, of its key's text (``core.checksum.source_key_text``), which places it: a bucket of ``bits`` bits
  is the hash's top ``bits`` bits, so the buckets of a level split each bucket of the level above;
- its **digest**, of its whole row's text (``core.checksum.source_row_text``), which changes when a value does.

A table whose whole row is its identity (``core.keys.WHOLE_ROW``) has the digest as its hash too: equal rows share
it, each copy adds it to its bucket's sum, and a row whose copies differ in number on the two sides is a change
(``compare_pairs``): all its copies are read again, and the merge replaces all of the version's.

The copy keeps both for every row of the version (the digests file: its key columns, hash and digest), as the
server gave them when the row was read. A run then descends:

1. the server sums each bucket's digests (modulo 2**64, so that a sum is order-free); the copy sums its own;
2. only the buckets whose sums differ go on: split into finer buckets and summed again while a bucket holds many
   rows (``refinement``), else their rows' hashes and digests are read;
3. a hash whose digest differs, or that only the server has, is a row to read in full (an upsert); a hash only
   the copy has is a delete, whose key the digests file holds.

Every answer of the server is packed into binary strings (a bucket's number and sum, a row's hash and digest):
about 12 bytes a bucket and 16 bytes a row, where the text protocol's rows would cost two to three times that.
The rows shipped are then about the changed rows, plus the sums. All of it is read in one transaction with a
consistent snapshot (``stages.diff``).

This module writes the statements and decides the descent; it runs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from airflow_cdc_provider.core.checksum import source_key_text, source_row_text, text_hash_sql
from airflow_cdc_provider.core.identifiers import formatted, quote_identifier

HASH_BITS = 64
MODULUS = 1 << HASH_BITS
DIGEST_BYTES = 8
PAIR_BYTES = 2 * DIGEST_BYTES  # a row's hash and digest
# Rows per bucket of the first level. Each level is a scan of the table at the server, hashing every row's key, and
# scans cost a run more than bytes do: at 8 rows a bucket the sums cost about 1.4 bytes a row of the table (about
# 2% of a full read of a narrow table), and a differing bucket holds too few rows for another level to pay, so
# a run takes three scans (the sums, the differing buckets' pairs, the changed rows) where 64 took five.
FIRST_LEVEL_ROWS = 8
# Rows per differing bucket from which a finer level pays its scan: its pairs would cost 16 bytes a row.
REFINE_ROWS = 32
MAX_BITS = 40  # a trillion buckets: far more than rows, whatever the table
MAX_LEVELS = 4  # levels of sums before the rows' hashes are read, whatever the refinement asks
# How many buckets or rows one packed answer holds at most: about 400 kB, well under any max_allowed_packet.
PACK_ITEMS = 32_768
# Parent buckets named in one statement: its text stays under about 1 MB.
MAX_PARENTS = 50_000


# --- the server's expressions ------------------------------------------------------------------------------

def _first_64_bits(hash_of: str) -> str:
    # CONV gives the digits of an unsigned 64-bit number; CAST keeps it an integer for SUM (a string would be
    # summed as a DOUBLE).
    return f"CAST(CONV(LEFT({text_hash_sql(hash_of)}, 16), 16, 10) AS UNSIGNED)"


def key_hash(columns: Sequence[tuple[str, str]], key: Sequence[str], mariadb: bool) -> str:
    """The SQL expression of a row's hash: the first 64 bits of the hash of its key's text."""
    return _first_64_bits(source_key_text(columns, key, mariadb))


def row_hash(columns: Sequence[tuple[str, str]], key: Sequence[str], mariadb: bool) -> str:
    """The SQL expression of a row's hash: its key's (``key_hash``), or its digest (``row_digest``) for a table with
    no key (``key`` empty), whose whole row is its identity."""
    return key_hash(columns, key, mariadb) if key else row_digest(columns, mariadb)


def row_digest(columns: Sequence[tuple[str, str]], mariadb: bool) -> str:
    """The SQL expression of a row's digest: the first 64 bits of the hash of its row's text. Unlike verify's, a
    JSON value on MySQL counts by its text (the server's own canonical print), not by its NULL flag alone: both
    sides of a diff are the server's."""
    return _first_64_bits(source_row_text(columns, mariadb, every_json=True))


def heal_digest(columns: Sequence[tuple[str, str]], added: Sequence[str], mariadb: bool) -> str:
    """The SQL expression of a row's digest as a heal compares it with a Hive version's (``stages.heal``): that of
    ``columns`` (the version's columns still at the source, with their types now) as verify writes a row's text.
    A JSON value on MySQL, which Spark cannot print as MySQL does (the Hive value has lost the digits of a
    DECIMAL's scale, among others), is in the server's text by MySQL's print and nowhere in Spark's: a row that
    holds a JSON document never matches, and is read in full; rows whose JSON columns are all NULL are compared
    by their other columns and the NULL flags. A heal is then exact for such a table, at the cost of re-reading
    its rows that hold a document. A row where a column ``added`` since the version holds a value gets a mark:
    its digest then differs from any the version has, since the version's rows hold NULL there, and the row is
    read in full; rows that hold NULL in every added column (those an online schema change copied over, when the
    column has no default) are compared by their other columns."""
    text = source_row_text(columns, mariadb, every_json=not mariadb)
    if added:
        nulls = " AND ".join(f"{quote_identifier(name)} IS NULL" for name in added)
        text = f"CONCAT({text}, IF({nulls}, '', '#added'))"
    return _first_64_bits(text)


def bucket(hash_sql: str, bits: int) -> str:
    """The SQL expression of the bucket of ``bits`` bits of a hash (0 for the single bucket of 0 bits)."""
    return f"({hash_sql} >> {HASH_BITS - bits})" if bits else "0"


def _hex(value: str, width_bytes: int) -> str:
    return f"UNHEX(LPAD(HEX({value}), {2 * width_bytes}, '0'))"


def id_bytes(bits: int) -> int:
    """The bytes a bucket's number takes in a packed answer."""
    return max(1, (bits + 7) // 8)


@dataclass(frozen=True)
class Statement:
    sql: str  # run with ``args``: its own ``%`` are doubled (a name may hold one)
    args: tuple[int, ...] = ()


def _parent_filter(hash_sql: str, parent_bits: int, parents: Sequence[int]) -> tuple[str, tuple[int, ...]]:
    if not parent_bits:
        return "", ()
    return (f" WHERE {bucket(hash_sql, parent_bits)} IN ({', '.join(['%s'] * len(parents))})",
            tuple(int(p) for p in parents))


def sums_statements(table: str, hash_sql: str, digest_sql: str, bits: int, parent_bits: int = 0,
                    parents: Sequence[int] = (), buckets: int = 0) -> list[Statement]:
    """The statements that sum the digests of each bucket of ``bits`` bits (of the buckets of ``parent_bits``
    bits named in ``parents``; all of them when ``parent_bits`` is 0) on the server, ``table`` quoted. Each
    answers rows of one packed binary string: per bucket its number (``id_bytes``, big-endian) and its sum (8
    bytes, big-endian), read by ``unpack_sums``. ``buckets`` (about how many buckets answer) sets how many go
    into one string."""
    table, hash_sql, digest_sql = formatted(table), formatted(hash_sql), formatted(digest_sql)
    packed = f"CONCAT({_hex('b', id_bytes(bits))}, {_hex('s', DIGEST_BYTES)})"
    # Answers of about PACK_ITEMS buckets each: grouped by the top bits of the bucket's number.
    group_bits = min(bits, max(0, math.ceil(math.log2(max(1, buckets) / PACK_ITEMS))))
    group = f" GROUP BY b >> {bits - group_bits}" if group_bits else ""
    statements = []
    for chunk in _chunks(parents, MAX_PARENTS) if parent_bits else [()]:
        where, args = _parent_filter(hash_sql, parent_bits, chunk)
        inner = (f"SELECT {bucket(hash_sql, bits)} AS b, CAST(MOD(SUM({digest_sql}), {MODULUS}) AS UNSIGNED) AS s "
                 f"FROM {table}{where} GROUP BY b")
        statements.append(Statement(f"SELECT GROUP_CONCAT({packed} SEPARATOR '') FROM ({inner}) AS sums{group}",
                                    args))
    return statements


def pairs_statements(table: str, hash_sql: str, digest_sql: str, parent_bits: int, parents: Sequence[int],
                     rows: int = 0) -> list[Statement]:
    """The statements that read the hash and digest of each row in the buckets of ``parent_bits`` bits named in
    ``parents`` (every row when ``parent_bits`` is 0), packed 16 bytes a row (``unpack_pairs``). ``rows`` (about
    how many answer) sets how many go into one string."""
    table, hash_sql, digest_sql = formatted(table), formatted(hash_sql), formatted(digest_sql)
    packed = f"CONCAT({_hex('h', DIGEST_BYTES)}, {_hex('d', DIGEST_BYTES)})"
    pack_bits = max(0, math.ceil(math.log2(max(1, rows) / PACK_ITEMS))) if rows else 0
    group = f" GROUP BY h >> {HASH_BITS - pack_bits}" if pack_bits else ""
    statements = []
    for chunk in _chunks(parents, MAX_PARENTS) if parent_bits else [()]:
        where, args = _parent_filter(hash_sql, parent_bits, chunk)
        inner = f"SELECT {hash_sql} AS h, {digest_sql} AS d FROM {table}{where}"
        statements.append(Statement(f"SELECT GROUP_CONCAT({packed} SEPARATOR '') FROM ({inner}) AS pairs{group}",
                                    args))
    return statements


def rows_statements(table: str, select: Sequence[str], hash_sql: str, hashes: Sequence[int],
                    per_statement: int = 100_000) -> list[Statement]:
    """The statements that read in full the rows whose hash is one of ``hashes``: ``select`` (the snapshot's
    column expressions), then the row's hash. Each is one scan of the table (a hash has no index)."""
    columns, table, hash_sql = formatted(", ".join(select)), formatted(table), formatted(hash_sql)
    return [Statement(f"SELECT {columns}, {hash_sql} AS h FROM {table} WHERE {hash_sql} IN "
                      f"({', '.join(['%s'] * len(chunk))})", tuple(int(h) for h in chunk))
            for chunk in _chunks(hashes, per_statement)]


def _chunks(values: Sequence[int], size: int) -> list[Sequence[int]]:
    return [values[i:i + size] for i in range(0, len(values), size)]


# --- the answers --------------------------------------------------------------------------------------------

def _big_endian(raw: np.ndarray) -> np.ndarray:
    """Rows of 1 to 8 big-endian bytes as unsigned 64-bit integers."""
    width = raw.shape[1]
    padded = np.zeros((raw.shape[0], 8), dtype=np.uint8)
    padded[:, 8 - width:] = raw
    return padded.view(">u8").reshape(-1).astype(np.uint64)


def unpack_sums(blobs: Sequence[bytes | None], bits: int) -> tuple[np.ndarray, np.ndarray]:
    """The buckets and their sums packed by ``sums_statements``' answers: two arrays of unsigned 64-bit integers."""
    width = id_bytes(bits) + DIGEST_BYTES
    raw = np.frombuffer(b"".join(b for b in blobs if b), dtype=np.uint8)
    if raw.size % width:
        raise ValueError(f"A packed answer of {raw.size} bytes is not whole buckets of {width} bytes: it was cut "
                         "short (the server's group_concat_max_len).")
    rows = raw.reshape(-1, width)
    return _big_endian(rows[:, :width - DIGEST_BYTES]), _big_endian(rows[:, width - DIGEST_BYTES:])


def unpack_pairs(blobs: Sequence[bytes | None]) -> tuple[np.ndarray, np.ndarray]:
    """The hashes and digests packed by ``pairs_statements``' answers."""
    raw = np.frombuffer(b"".join(b for b in blobs if b), dtype=np.uint8)
    if raw.size % PAIR_BYTES:
        raise ValueError(f"A packed answer of {raw.size} bytes is not whole rows of {PAIR_BYTES} bytes: it was cut "
                         "short (the server's group_concat_max_len).")
    rows = raw.reshape(-1, PAIR_BYTES)
    return _big_endian(rows[:, :DIGEST_BYTES]), _big_endian(rows[:, DIGEST_BYTES:])


# --- the copy's side ----------------------------------------------------------------------------------------

def buckets_of(hashes: np.ndarray, bits: int) -> np.ndarray:
    return hashes >> np.uint64(HASH_BITS - bits) if bits else np.zeros(len(hashes), dtype=np.uint64)


def within(hashes: np.ndarray, parent_bits: int, parents: np.ndarray) -> np.ndarray:
    """Which of ``hashes`` lie in the buckets ``parents`` of ``parent_bits`` bits (all, for 0 bits)."""
    if not parent_bits:
        return np.ones(len(hashes), dtype=bool)
    return np.isin(buckets_of(hashes, parent_bits), parents)


def local_sums(hashes: np.ndarray, digests: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Each bucket of ``bits`` bits of the copy's rows, and the sum of its digests modulo 2**64 (sorted by bucket).
    Unsigned 64-bit additions wrap: the modulus comes free."""
    ids = buckets_of(hashes, bits)
    order = np.argsort(ids, kind="stable")
    ids, digests = ids[order], digests[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.array([], dtype=np.int64)
    with np.errstate(over="ignore"):
        sums = np.add.reduceat(digests, starts).astype(np.uint64) if len(ids) else np.array([], dtype=np.uint64)
    return ids[starts], sums


def differing(server: tuple[np.ndarray, np.ndarray], local: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The buckets whose sums differ, or that one side has and the other not, sorted."""
    mine = dict(zip(local[0].tolist(), local[1].tolist()))
    theirs = dict(zip(server[0].tolist(), server[1].tolist()))
    return np.array(sorted(b for b in mine.keys() | theirs.keys() if mine.get(b) != theirs.get(b)), dtype=np.uint64)


@dataclass(frozen=True)
class RowChanges:
    """What the pairs of the differing buckets say: the hashes to read in full (a changed digest, or a hash only
    the server has) and the hashes to delete (only the copy has them)."""

    upserts: np.ndarray
    deletes: np.ndarray


def compare_pairs(server: tuple[np.ndarray, np.ndarray], local: tuple[np.ndarray, np.ndarray]) -> RowChanges:
    """The rows that differ between the server's (hash, digest) pairs and the copy's, of the same buckets. A hash
    that comes more than once (the copies of a row of a table with no key) differs when its copies differ in
    number: all of them are read again."""
    mine: dict[int, object]
    theirs: dict[int, object]
    if len(np.unique(server[0])) == len(server[0]) and len(np.unique(local[0])) == len(local[0]):
        mine = dict(zip(local[0].tolist(), local[1].tolist()))
        theirs = dict(zip(server[0].tolist(), server[1].tolist()))
    else:  # hash → its copies' digests, sorted
        mine, theirs = dict(_copies(local)), dict(_copies(server))
    upserts = sorted(h for h, d in theirs.items() if mine.get(h) != d)
    deletes = sorted(h for h in mine.keys() - theirs.keys())
    return RowChanges(np.array(upserts, dtype=np.uint64), np.array(deletes, dtype=np.uint64))


def _copies(pairs: tuple[np.ndarray, np.ndarray]) -> dict[int, tuple[int, ...]]:
    found: dict[int, list[int]] = {}
    for h, d in zip(pairs[0].tolist(), pairs[1].tolist()):
        found.setdefault(h, []).append(d)
    return {h: tuple(sorted(ds)) for h, ds in found.items()}


def copies_changed(server_hashes: np.ndarray, local_hashes: np.ndarray) -> tuple[int, int]:
    """Rows added and rows removed, counted by copies, between the copy's hashes and the server's (of a table with
    no key, where a row is all its copies' count)."""
    values, counts = np.unique(np.concatenate([server_hashes, local_hashes]), return_inverse=True)
    theirs = np.bincount(counts[:len(server_hashes)], minlength=len(values))
    mine = np.bincount(counts[len(server_hashes):], minlength=len(values))
    return int(np.clip(theirs - mine, 0, None).sum()), int(np.clip(mine - theirs, 0, None).sum())


# --- the descent ----------------------------------------------------------------------------------------------

def first_bits(rows: int) -> int:
    """The first level's bits: about ``FIRST_LEVEL_ROWS`` rows a bucket (0 bits, one bucket, for a small table)."""
    return min(MAX_BITS, max(0, round(math.log2(max(1, rows) / FIRST_LEVEL_ROWS))))


def refinement(buckets: int, rows: int, bits: int, level: int) -> int:
    """How many bits the next level adds to split the ``buckets`` differing buckets of ``bits`` bits that hold
    ``rows`` of the copy's rows; 0: read their rows' pairs now.

    Reading the pairs costs 16 bytes a row; splitting each bucket into 2**f costs about 12 bytes a new bucket,
    then 16 bytes a row of the few that still differ (a differing bucket holds about one change, when buckets are
    fine enough to be worth splitting). That is least for 2**f about the square root of 4/3 of a bucket's rows,
    and worth a level (one more scan at the server) once a bucket holds ``REFINE_ROWS`` rows or more: a small
    table's one bucket, or a run that changed most buckets."""
    if level >= MAX_LEVELS or not buckets or bits >= MAX_BITS:
        return 0
    per_bucket = rows / buckets
    if per_bucket < REFINE_ROWS:
        return 0
    return max(1, min(MAX_BITS - bits, round(math.log2(math.sqrt(4 / 3 * per_bucket)))))
