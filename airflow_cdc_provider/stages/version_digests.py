"""A heal's digests file from the Spark job's output (``spark.digests_job``): one Parquet file of exactly a
diff-mode table's digests schema (``stages.diff.digests_schema``), so that a diff compares the Hive version with
its source as it compares a diff-mode table's last version.

The key columns come back as the capture files type them (``core.version_digests.key_carriage``), the hashes and
digests from Spark's signed 64-bit integers to the unsigned ones of the server, bit for bit. The part files are
read a batch at a time, never whole.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.merge import VersionRefused
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.version_digests import (
    COMPLETE_FILE,
    REFUSED_FILE,
    SPARK_DIGEST,
    SPARK_HASH,
    Carriage,
    KeyNotCarried,
    carriage_problem,
    key_carriage,
    spark_key_column,
)
from airflow_cdc_provider.stages.diff import BATCH_ROWS, digests_schema
from airflow_cdc_provider.storage import make_dirs

# The one form of a DATETIME's or TIMESTAMP's text (``core.checksum.DATETIME_FORMAT_SPARK``): anything else is not
# parsed, for Arrow's parser would take a shorter or zoned text as some other time.
_TIME_TEXT = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6}$"


class NoDigests(CdcError):
    """Digests job output with no part files: the job refused the version, or wrote nothing for the table."""


def digests_file_from_spark(spark_dir: str | Path | Sequence[str | Path], header: RawHeader,
                            out_file: str | Path) -> int:
    """Write the digests file ``out_file`` (written beside and renamed) from the digests job's output of
    ``header``'s table, whose key is the job's, in its order; returns the rows written.

    ``spark_dir`` is the job's output directory (a path, or a URI pyarrow reads), checked to be written whole; or
    the files fetched from it once the job ended well (the part files, and its ``_refused`` if there is one).
    Raises VersionRefused when the job did not read the version (with its reason), KeyNotCarried for a key it
    cannot carry, NoDigests for an output without part files, FileNotFoundError for a directory the job did not
    finish writing."""
    problem = carriage_problem(header.table, header.columns, header.key)
    if problem:
        raise KeyNotCarried(problem)
    fs, parts = _parts(spark_dir, header.table)
    schema = digests_schema(header)
    types = dict(header.columns)
    carriages = [key_carriage(types[name]) for name in header.key]
    names = [*(spark_key_column(i) for i in range(len(header.key))), SPARK_HASH, SPARK_DIGEST]
    out = Path(out_file)
    make_dirs(out.parent)
    beside, rows = f"{out}.tmp", 0
    # Imported here: pyarrow.dataset brings pandas, half a second of CPU, and this module is imported wherever the
    # DAG file is parsed (the heal operator's), in every task process; only a heal reads a version's digests.
    import pyarrow.dataset as ds

    with pq.ParquetWriter(beside, schema) as writer:
        for batch in ds.dataset(parts, filesystem=fs, format="parquet").to_batches(columns=names,
                                                                                  batch_size=BATCH_ROWS):
            columns = [_carried(batch.column(i), carriage, header.key[i]) for i, carriage in enumerate(carriages)]
            columns += [_unsigned(batch.column(name), name) for name in (SPARK_HASH, SPARK_DIGEST)]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))
            rows += batch.num_rows
    os.replace(beside, out)
    return rows


def _parts(spark_dir: str | Path | Sequence[str | Path], table: str) -> tuple[pafs.FileSystem, list[str]]:
    """The part files of the job's output (not Hadoop's markers, nor its checksums), on their filesystem."""
    if isinstance(spark_dir, (str, Path)):
        fs, root = _filesystem(spark_dir)
        if fs.get_file_info(f"{root}/{REFUSED_FILE}").type != pafs.FileType.File and \
                fs.get_file_info(f"{root}/{COMPLETE_FILE}").type != pafs.FileType.File:
            raise FileNotFoundError(f"The digests of {table} at {spark_dir} hold no {COMPLETE_FILE}: the digests job "
                                    "did not finish writing them. Run it again.")
        files = [info.path for info in fs.get_file_info(pafs.FileSelector(root))]
    else:
        fs, files = pafs.LocalFileSystem(), [os.path.abspath(str(f)) for f in spark_dir]
    refused = [f for f in files if os.path.basename(f) == REFUSED_FILE]
    if refused:
        with fs.open_input_stream(refused[0]) as stream:
            raise VersionRefused(stream.read().decode("utf-8"))
    parts = sorted(f for f in files if not os.path.basename(f).startswith(("_", ".")))
    if not parts:
        # Spark writes a part file even of no rows: none is no answer, and an empty digests file would say the
        # version is empty, its rows never deleted by the heal.
        raise NoDigests(f"The digests job wrote no part files for {table} at {spark_dir}: it refused the version "
                        "(its log says why) or did not run for the table. Nothing of it is healed.")
    return fs, parts


def _filesystem(spark_dir: str | Path) -> tuple[pafs.FileSystem, str]:
    text = str(spark_dir)
    if "://" in text or text.startswith("file:"):
        fs, path = pafs.FileSystem.from_uri(text)
        return fs, str(path).rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(text)


def _carried(values: pa.Array, carriage: Carriage, name: str) -> pa.Array:
    """A key column of the job's output as the capture files type it."""
    if carriage.how == "value":
        return values.cast(carriage.file_type)
    texts = values.cast(pa.string())
    odd = pc.invert(pc.fill_null(pc.match_substring_regex(texts, _TIME_TEXT), True))
    if pc.any(odd).as_py():
        text = texts.filter(odd)[0].as_py()
        raise ValueError(f"The digests job wrote {text!r} for the key column {name}, which is not a time of the form "
                         "yyyy-MM-dd HH:mm:ss.SSSSSS: the job and this reader disagree on the rule.")
    # The text is the time's digits: read without a zone, then, for a TIMESTAMP, taken as the UTC instant it is.
    return texts.cast(pa.timestamp("us")).cast(carriage.file_type)


def _unsigned(values: pa.Array, name: str) -> pa.Array:
    """A hash or digest as the server's unsigned 64-bit integer: Spark's signed one, the same bits."""
    if values.null_count or values.type != pa.int64():
        raise ValueError(f"The digests job wrote {name} as {values.type} with {values.null_count} NULLs: it writes a "
                         "bigint for every row.")
    return values.view(pa.uint64())
