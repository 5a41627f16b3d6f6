"""Verify's reads of capture files: the keys a replayed range of the binlog changed, as key texts."""

from __future__ import annotations

import os
from collections.abc import Iterable

import pyarrow.parquet as pq

from airflow_cdc_provider.core.checksum import hive_text
from airflow_cdc_provider.core.records import RawHeader


def key_texts(files: Iterable[str | os.PathLike | None], header: RawHeader) -> set[str]:
    """The key texts (``core.checksum``) of every row of upsert or delete files of ``header``'s table."""
    types = dict(header.columns)
    found: set[str] = set()
    for path in files:
        if path is None:
            continue
        table = pq.read_table(path, columns=list(header.key))
        for row in table.to_pylist():
            found.add("#".join(str(hive_text(row[k], types[k])) for k in header.key))
    return found
