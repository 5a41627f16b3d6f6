"""Verify: a Hive version against its source, bucket by bucket, with writes in flight told from real differences.

Both sides put each row in a bucket, CRC32 of the text of its key (``core.checksum``) modulo the number of
buckets, and sum each bucket: its row count and the XOR of its rows' digests (the first 64 bits of each row
text's MD5). Buckets, not key ranges: the server orders a string key by its collation (``'a' = 'A'`` in most),
Spark by its bytes, so a range of keys would not hold the same rows on both sides; a bucket does. The server still
reads in key order, a range of keys at a time, each range adding to every bucket (so no query runs long on a busy
primary).

A bucket whose sums differ is looked into: both sides list its rows' key texts with their MD5, and the keys
that differ are the difference, less the keys whose rows the binlog changed between the Hive version's
watermark and the end of the check (the copy has not had those changes yet: they are not a fault).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_cdc_provider.core.model import Model


@dataclass(frozen=True)
class BucketSum:
    """A bucket's row count and the XOR of its rows' digests (the first 64 bits of each row text's MD5, unsigned)."""

    rows: int
    digest: int

    def plus(self, other: BucketSum) -> BucketSum:
        """Two parts of one bucket (two ranges of keys read apart) as one."""
        return BucketSum(self.rows + other.rows, self.digest ^ other.digest)


EMPTY = BucketSum(0, 0)


def bucket_count(rows: int, bucket_rows: int) -> int:
    """How many buckets a table of ``rows`` rows gets, ``bucket_rows`` rows each on average."""
    return max(1, math.ceil(rows / max(1, bucket_rows)))


def bucket_of(key_text: str, buckets: int) -> int:
    """A key's bucket, as the server's ``MOD(CRC32(key text), buckets)`` gives it (CRC32 of the UTF-8 bytes)."""
    return zlib.crc32(key_text.encode()) % buckets


def differing_buckets(source: Mapping[int, BucketSum], copy: Mapping[int, BucketSum]) -> list[int]:
    """The buckets whose sums differ (a bucket absent on one side is empty there)."""
    return sorted(b for b in set(source) | set(copy) if source.get(b, EMPTY) != copy.get(b, EMPTY))


@dataclass(frozen=True)
class RowDifference:
    """A key whose row differs: ``missing`` from the copy, ``extra`` in the copy, or ``different``."""

    key: str
    kind: str


def row_differences(source: Mapping[str, str], copy: Mapping[str, str],
                    changed: Collection[str] = ()) -> list[RowDifference]:
    """The rows of looked-into buckets that differ, by key text (each side's key text → row MD5), less the keys
    the binlog changed since the copy's watermark."""
    found = []
    for key in sorted(set(source) | set(copy)):
        if key in changed or source.get(key) == copy.get(key):
            continue
        kind = "missing" if key not in copy else "extra" if key not in source else "different"
        found.append(RowDifference(key, kind))
    return found


Sums = dict[int, tuple[int, int]]  # (rows, digest) by bucket


def sums_of(sums: Mapping[int, BucketSum]) -> Sums:
    return {b: (s.rows, s.digest) for b, s in sums.items()}


def bucket_sums(sums: Sums) -> dict[int, BucketSum]:
    return {int(b): BucketSum(*s) for b, s in sums.items()}


class VerifyJob(Model):
    """What the Spark half of verify (``spark/verify_job.py``) sums for one table, and where it writes the result.

    With ``source`` (the server's sums), the job compares and lists the rows of the buckets that differ, at most
    ``detail_limit`` of them; ``detail`` names buckets to list whatever the sums.
    """

    warehouse_dir: str
    metastore_uri: str | None
    table: str  # database.table in Hive
    columns: tuple[tuple[str, str], ...]  # (source column name, MySQL type), in the source's order
    key: tuple[str, ...]
    mariadb: bool
    buckets: int
    result_file: str
    detail: tuple[int, ...] = ()  # buckets whose rows are listed
    location: str | None = None  # the version's files; None: the table as the metastore has it now
    time_zone: str = "UTC"  # hive.time_zone: the zone whose digits a DATETIME's instant holds
    source: Sums | None = None  # the server's sums
    source_file: str | None = None  # where the server's sums appear while the job runs (a ``SourceSums``)
    detail_limit: int = 1000

    def source_sums(self) -> dict[int, BucketSum]:
        return bucket_sums(self.source or {})


class VerifyJobs(Model):
    """One Spark application's verify jobs, as its job file (``RunDir.verify_jobs``) holds them."""

    jobs: tuple[VerifyJob, ...]


class SourceSums(Model):
    """The server's sums of a table, written to a job's ``source_file`` while the application runs; or why
    there are none (the application then gives up on the table rather than wait)."""

    sums: Sums | None = None
    error: str | None = None


class VerifyResult(Model):
    """What the Spark half found for one table (its job's ``result_file``): each bucket's sums over the copy, the
    buckets that differ from the server's (when ``compared``), and the rows (key text, row MD5) listed by bucket."""

    buckets: Sums
    differing: tuple[int, ...] = ()
    rows: dict[int, tuple[tuple[str, str], ...]] = {}
    compared: bool = False
    seconds: float = 0.0


class VerifyState(Model):
    """A table's verify state (``TableDir.verify_state``): the runs since its last completed verify."""

    runs_since: int = 0


class RepairRequest(Model):
    """The buckets a table's last verify found different (``TableDir.repair``), for a run to read again."""

    buckets: int  # how many buckets the table was verified in
    which: tuple[int, ...]
    version: int | None  # the version verified
    run: str  # the key of the run that verified it


def key_range(key: tuple[str, ...] | list[str], after: tuple[Any, ...] | None,
              until: tuple[Any, ...] | None) -> tuple[str, list[Any]]:
    """The SQL condition (and its arguments) of a range of keys, ``after`` < key <= ``until`` (either end open
    when None), spelt out for composite keys as an index range: ``(a, b) > (x, y)`` is ``a > x OR (a = x AND
    b > y)``."""
    from airflow_cdc_provider.core.identifiers import quote_identifier

    names = [quote_identifier(k) for k in key]
    parts, args = [], []
    for bound, last, first in ((after, ">", ">"), (until, "<=", "<")):
        if bound is None:
            continue
        terms = []
        for i, name in enumerate(names):
            equal = [f"{n} = %s" for n in names[:i]]
            terms.append("(" + " AND ".join([*equal, f"{name} {last if i == len(names) - 1 else first} %s"]) + ")")
            args += [*bound[:i], bound[i]]
        parts.append("(" + " OR ".join(terms) + ")")
    return " AND ".join(parts), args
