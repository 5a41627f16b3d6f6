"""Rows of the source and of Hive in one comparable form: what the Hive table's types promise to keep."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pytest

from tests.integration.capture_helpers import counted


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
    if not key:  # a table with no key: its rows counted (``capture_helpers.counted``)
        return counted(rows)
    keyed = {tuple(row[k.lower()] for k in key): row for row in rows}
    assert len(keyed) == len(rows), "the Hive table holds a key twice"
    return keyed


def changes_by_version(rows: pa.Table) -> dict[int, list[dict]]:
    """A changelog table read back: its rows by version, values as ``plain`` gives them."""
    out: dict[int, list[dict]] = {}
    for row in rows.to_pylist():
        out.setdefault(row["_commit_version"], []).append({k: _plain_value(v) for k, v in row.items()})
    return out


def apply_changes(state: dict, changes: list[dict], key: tuple[str, ...], columns: list[str],
                  every_event: bool = False) -> dict:
    """``state`` with a version's net changes applied (``every_event``: its row events, in their order); each
    pre-image must be the row the state holds."""
    state = dict(state)
    kinds = {}
    if every_event:
        changes = sorted(changes, key=lambda c: (c["_change_ordinal"], c["_change_type"] != "update_preimage"))
    for change in changes:
        row = {name: change[name] for name in columns}
        k = tuple(row[c] for c in key)
        assert every_event or k not in kinds or {kinds[k], change["_change_type"]} == {
            "update_preimage", "update_postimage"}, f"two changes of the key {k} in one version"
        kinds[k] = change["_change_type"]
        if change["_change_type"] in ("update_preimage", "delete"):
            assert state.get(k) == row, (change["_change_type"], k, state.get(k), row)
        if change["_change_type"] == "delete":
            del state[k]
        elif change["_change_type"] in ("insert", "update_postimage"):
            assert change["_change_type"] != "insert" or k not in state, ("insert of a key held", k)
            state[k] = row
    return state


@contextlib.contextmanager
def local_spark(app: str, conf: dict[str, str]) -> Iterator[Any]:
    """A Spark session in this process (``local[1]``, no UI, ``conf`` set), for tests that need no metastore; its
    JVM stopped on exit, or it would live as long as the test process (it ends when its stdin closes)."""
    from airflow_cdc_testing.hive import spark_env
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    with pytest.MonkeyPatch.context() as patch:
        for key, value in spark_env().items():
            patch.setenv(key, value)
        builder = SparkSession.builder.master("local[1]").appName(app).config("spark.ui.enabled", "false")
        for key, value in conf.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        try:
            yield session
        finally:
            gateway = SparkContext._gateway
            session.stop()
            if gateway is not None:
                gateway.shutdown()
                gateway.proc.stdin.close()
                gateway.proc.wait(timeout=60)
                SparkContext._gateway = SparkContext._jvm = None
