"""Rows of the source and of Hive in one comparable form: what the Hive table's types promise to keep."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa


def _plain_value(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)  # Hive's TIMESTAMP, read in UTC
    if isinstance(value, dt.timedelta):
        return value // dt.timedelta(microseconds=1)  # TIME lands as microseconds
    return value


def plain(rows: dict[tuple, dict]) -> dict[tuple, dict]:
    """Keyed rows with lower-case column names (Hive's) and values as Hive holds them."""
    return {tuple(_plain_value(v) for v in k): {name.lower(): _plain_value(v) for name, v in row.items()}
            for k, row in rows.items()}


def hive_rows(table: pa.Table, key: Sequence[str]) -> dict[tuple, dict]:
    """A Hive table read back (see testing.hive), keyed like ``plain`` of the source."""
    rows = [{name: _plain_value(v) for name, v in row.items()} for row in table.to_pylist()]
    keyed = {tuple(row[k.lower()] for k in key): row for row in rows}
    assert len(keyed) == len(rows), "the Hive table holds a key twice"
    return keyed
