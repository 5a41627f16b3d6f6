"""A table's state at a glance, for ``airflow cdc status`` and the CDC tables page: what its runs recorded (the
committed version, the lock, its latest run's outcome), read at one moment.

Pure: the caller reads the records (the work store's ledgers, the runs' outcomes) and hands them in. Which record
is authoritative for what:

- the committed version, the source moment it reflects and so the lag: the ledger (``Committed``), which the merge
  writes with the version and which an idle run advances on the same version;
- stopped or not, and why: the table's outcome in its latest run (``TableOutcome``): a failed outcome names what
  stopped it and the way out, as the run's log and summary do;
- a run in progress: the ledger's lock.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any

from airflow_cdc_provider.core.contract import TableOutcome
from airflow_cdc_provider.core.ledger import Committed, Lock
from airflow_cdc_provider.core.model import Instant, Model
from airflow_cdc_provider.core.modes import Mode, Status


class TableState(StrEnum):
    """Where a table stands."""

    CURRENT = "current"  # a committed version, within the lag allowed
    BEHIND = "behind"  # a committed version, reflecting a source moment older than the lag allowed
    STOPPED = "stopped"  # its latest run failed it: ``reason`` says why and the way out
    NOT_LOADED = "not loaded"  # no version committed yet, and no run failed it


class TableStatus(Model):
    """One table's row: the state, the version and the moment it reflects, and the latest run's changes."""

    source: str
    hive_table: str
    state: TableState
    reason: str = ""
    version: int | None = None
    mode: Mode | None = None  # how the committed version was made
    as_of: Instant | None = None  # the source moment the committed version reflects
    lag_seconds: float | None = None  # now minus ``as_of``
    running: str | None = None  # the run holding the table now, if one does
    latest_status: Status | None = None  # what the latest run did to the table
    upserts: int = 0  # the latest run's changes
    deletes: int = 0
    rows: int | None = None  # rows in the committed version, as the latest run that committed one counted them


def table_status(source: str, hive_table: str, committed: Committed | None, latest: TableOutcome | None,
                 lock: Lock | None, now: dt.datetime, max_lag: dt.timedelta) -> TableStatus:
    """The table's status at ``now``. ``latest``: its outcome in the latest run that had one (None: no run
    recorded one); ``lock``: the ledger's lock, if any; ``max_lag``: how far behind the source a table may be and
    still be current."""
    running = lock.run.run_id if lock is not None and not lock.expired(now) else None
    changes = {"upserts": latest.upserts, "deletes": latest.deletes} if latest is not None else {}
    common: dict[str, Any] = {"source": source, "hive_table": hive_table, "running": running,
                              "latest_status": latest.status if latest is not None else None, **changes}
    if committed is not None:
        common.update(version=committed.version, mode=committed.mode, as_of=committed.as_of,
                      lag_seconds=(now - committed.as_of).total_seconds(),
                      rows=latest.rows if latest is not None and latest.version == committed.version else None)
    if latest is not None and latest.status == Status.FAILED:
        return TableStatus(state=TableState.STOPPED, reason=latest.error or latest.reason, **common)
    if committed is None:
        return TableStatus(state=TableState.NOT_LOADED, reason="no version committed yet", **common)
    if now - committed.as_of > max_lag:
        moment = committed.as_of.strftime("%Y-%m-%d %H:%M:%S")
        return TableStatus(state=TableState.BEHIND, reason=f"reflects the source as of {moment} UTC, more than "
                           f"{_duration(max_lag)} ago", **common)
    return TableStatus(state=TableState.CURRENT, **common)


def _duration(span: dt.timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"
