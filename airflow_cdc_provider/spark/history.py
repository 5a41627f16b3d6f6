"""A table's SCD2 history on Spark (``core.history``): what one committed version does to it, from the version's
net changes (``spark.changelog.net_changes``). Pure DataFrame functions: the caller reads the open rows and writes
what comes back.

A version touches only the rows of the keys it changed: their open rows are closed (and move to the partition
``end_date`` = the version's day), and their new values opened. The open rows of every other key stay as they are,
so a step's output beyond the open rows it is given is as large as the version's changes.
"""

from __future__ import annotations

import datetime as dt
from functools import reduce
from typing import Any

from airflow_cdc_provider.core.changelog import DELETE, INSERT, UPDATE_POSTIMAGE, UPDATE_PREIMAGE
from airflow_cdc_provider.core.history import HISTORY_PARTITION, HistorySettings, history_columns
from airflow_cdc_provider.spark.names import column


def initial_open(rows: Any, columns: list[tuple[str, str]], settings: HistorySettings, day: str,
                 moment: dt.datetime, version: int) -> Any:
    """The open rows of a history that starts at a version: each of its ``rows`` (the table's ``columns``) the
    value of its key from ``day`` (and ``moment``), opened by ``version``."""
    from pyspark.sql.functions import lit

    return _opened(rows, columns, settings, day, moment, version, deleted=lit(False))


def scd2_step(open_rows: Any | None, changes: Any, key: list[str], columns: list[tuple[str, str]],
              settings: HistorySettings, day: str, moment: dt.datetime, version: int) -> tuple[Any, Any]:
    """What ``version`` does to the history: ``(new_open, closed)``.

    ``open_rows``: the history's open rows (``history_columns``, without ``end_date``), None when the history starts
    with nothing; ``changes``: the version's net changes (``columns`` and ``_change_type``, at most one change or one
    update pair per key); ``day`` the day they belong to (``core.changelog.version_day``), ``moment`` the version's
    ``as_of``. Every key the version changed closes its open row: ``is_current`` false, ``end_time`` the moment
    (``granularity: run``), in the partition ``end_date`` = ``day`` (``closed`` has that column last). With
    ``granularity: day`` a closed row that started on ``day`` is dropped: it was never the value at a day's end.
    An insert or an update's post-image opens a row from ``day``; with ``hard_deletes: new_record`` a delete opens
    a marker too (the deleted row's values, ``is_deleted`` true), closed like any other when its key comes back.
    ``new_open`` is the open rows of the keys not changed and the rows opened. Keys match null-safely (a key part
    can be NULL in Hive)."""
    from pyspark.sql.functions import lit

    kind = column("_change_type")
    opening = [INSERT, UPDATE_POSTIMAGE] + ([DELETE] if settings.hard_deletes == "new_record" else [])
    opened = _opened(changes.where(kind.isin(*opening)), columns, settings, day, moment, version,
                     deleted=kind == DELETE)
    if open_rows is None:
        closing = opened.where(lit(False))
        new_open = opened
    else:
        open_rows = open_rows.select([column(name) for name, _ in history_columns(columns, settings)])
        # One row per changed key: an update's pre-image has its post-image's key.
        changed = renamed_keys(changes.where(kind != UPDATE_PREIMAGE), key)
        closing = matching_keys(open_rows, changed, key, "left_semi")
        new_open = matching_keys(open_rows, changed, key).unionByName(opened)
    if settings.granularity == "day":
        closing = closing.where(column("start_date") != lit(day))
    ends = {"is_current": lit(False), **({"end_time": lit(moment).cast("timestamp")}
                                         if settings.granularity == "run" else {})}
    closed = closing.select([ends[name].alias(name) if name in ends else column(name)
                             for name, _ in history_columns(columns, settings)] + [lit(day).alias(HISTORY_PARTITION)])
    return new_open, closed


def renamed_keys(rows: Any, key: list[str]) -> Any:
    """The key columns of ``rows``, renamed to names holding a comma (``cdc,key,0``…), which no column of a captured
    table can hold: in a join with a table's rows each name then means one side, whatever the table's names are."""
    return rows.select([column(name).alias(f"cdc,key,{n}") for n, name in enumerate(key)])


def matching_keys(rows: Any, keys: Any, key: list[str], how: str = "left_anti") -> Any:
    """The rows of ``rows`` whose key is none of the keys ``keys`` holds (``renamed_keys``), compared null-safely
    (``<=>``: a key part can be NULL in Hive); ``how`` ``left_semi``: whose key is one of them."""
    match = reduce(lambda a, b: a & b, [column(name).eqNullSafe(column(f"cdc,key,{n}")) for n, name in enumerate(key)])
    return rows.join(keys, match, how)


def _opened(rows: Any, columns: list[tuple[str, str]], settings: HistorySettings, day: str, moment: dt.datetime,
            version: int, deleted: Any) -> Any:
    """``rows`` (the table's ``columns``) as open history rows from ``day``, opened by ``version``; ``deleted``: the
    column that is true for a marker of a deleted row (``hard_deletes: new_record``)."""
    from pyspark.sql.functions import lit

    values = {
        "start_date": lit(day),
        "start_time": lit(moment),
        "end_time": lit(None),
        "is_current": lit(True),
        "is_deleted": deleted,
        "_start_version": lit(version),
    }
    own = {name for name, _ in columns}
    return rows.select([(column(name) if name in own else values[name]).cast(hive).alias(name)
                        for name, hive in history_columns(columns, settings)])


def open_values(open_rows: Any, columns: list[tuple[str, str]]) -> Any:
    """The values the history's open rows give the table (``columns``): the open rows but deletion markers."""
    if "is_deleted" in open_rows.columns:
        open_rows = open_rows.where(~column("is_deleted"))
    return open_rows.select([column(name) for name, _ in columns])
