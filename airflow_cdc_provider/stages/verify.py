"""Verify's reads of capture files: the keys a range of the binlog changed, spelt as the checksum spells them
(``core.checksum``), to tell rows written while verify ran from real differences."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow.parquet as pq

from airflow_cdc_provider.core.checksum import key_text
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import DELETE_FILE, UPSERT_FILE
from airflow_cdc_provider.stages.extract import BinlogSource, extract
from airflow_cdc_provider.stages.replay import replay


def key_texts(files: Iterable[str | os.PathLike[str] | None], header: RawHeader) -> set[str]:
    """The key texts (``core.checksum``) of every row of upsert or delete files of ``header``'s table."""
    types = dict(header.columns)
    found: set[str] = set()
    for path in files:
        if path is None:
            continue
        table = pq.read_table(path, columns=list(header.key))
        key_types = [types[k] for k in header.key]
        for row in table.to_pylist():
            found.add(key_text([row[k] for k in header.key], key_types))
    return found


def changed_keys(source: BinlogSource, header: RawHeader, start: Watermark, end: Watermark,
                 work: str | os.PathLike[str], charsets: Callable[[str], dict[str, str]] | None = None) -> set[str]:
    """The key texts of ``header``'s rows that the binlog changed in (start, end]: read and replayed as a run
    would, into ``work`` (a scratch directory); ``charsets`` as ``extract`` takes it. Raises ``CdcError`` when
    the range cannot tell (a schema change in it)."""
    work = Path(work)
    result = extract(source, [header], start, end, work / "raw", definitions=[header], charsets=charsets)
    if header.table in result.failed:
        raise result.failed[header.table]
    if result.schema_changes.get(header.table):
        raise CdcError(f"{header.table} changed its columns while it was verified; it is verified in a later run.")
    replayed = replay(result.files[header.table], work / UPSERT_FILE, work / DELETE_FILE)
    return key_texts((replayed.upsert_file, replayed.delete_file), header)
