"""``airflow cdc status``: every table's row (``overview.read``) for a terminal, or as JSON for scripts. Exits with 1
when a table is stopped or behind the lag allowed, so that a cron job or a monitor can act on it."""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections.abc import Sequence
from typing import TextIO

from airflow_cdc_provider.core.status import Repair, TableRows, TableState, TableStatus, duration
from airflow_cdc_provider.core.verify import VerifyMark

_LAG = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class UsageError(ValueError):
    """An argument that cannot be used as given."""


def parse_lag(text: str) -> dt.timedelta:
    """``text`` as a span: seconds, or a number with s, m, h or d."""
    found = _LAG.match(text or "")
    if found is None:
        raise UsageError(f"--max-lag is {text!r}: give seconds (3600) or a number with s, m, h or d (90m, 2h, 1d).")
    return dt.timedelta(seconds=float(found.group(1)) * _UNIT[found.group(2)])


def run(dag_ids: Sequence[str] | None = None, tables: Sequence[str] | None = None,
        databases: Sequence[str] | None = None, max_lag: str = "1h", as_json: bool = False,
        out: TextIO | None = None) -> int:
    """Print the rows (of ``dag_ids``, ``tables`` by source or Hive name, Hive ``databases``: each None for all);
    1 when any is stopped or behind, 2 on a bad argument, else 0."""
    out = out or sys.stdout
    try:
        lag = parse_lag(max_lag)
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    from airflow.utils.session import create_session

    from airflow_cdc_provider.hooks.run_records import RunRecordsHook
    from airflow_cdc_provider.overview.read import table_rows

    now = dt.datetime.now(dt.UTC)
    with create_session() as session:
        rows = table_rows(RunRecordsHook(session), list(dag_ids) if dag_ids else None, now, lag)
    if tables:
        wanted = set(tables)
        rows = [r for r in rows if r.kind.source in wanted or r.kind.hive_table in wanted]
    if databases:
        rows = [r for r in rows if r.kind.hive_table.split(".", 1)[0] in set(databases)]
    if as_json:
        out.write(TableRows(now=now, max_lag_seconds=lag.total_seconds(), tables=tuple(rows)).to_text() + "\n")
    else:
        out.write(render(rows, lag))
    return 1 if any(r.state in (TableState.STOPPED, TableState.BEHIND) for r in rows) else 0


COLUMNS = ("STATE", "DAG / GROUP", "SOURCE", "HIVE TABLE", "CAPTURE", "VERSION", "AS OF (UTC)", "LAG",
           "LAST RUN", "LAST VERIFY")


def render(rows: Sequence[TableStatus], max_lag: dt.timedelta) -> str:
    """The rows as a text table, each stopped or behind table's reason on the line under it."""
    if not rows:
        return "No table: no DAG of this provider has planned a run yet (or none you named).\n"
    lines = [COLUMNS]
    reasons: dict[int, str] = {}
    for row in sorted(rows, key=_order):
        kind = row.kind
        lines.append((
            str(row.state), f"{kind.dag_id} / {kind.group or '-'}", kind.source, kind.hive_table,
            "+".join(kind.capture), "-" if row.version is None else str(row.version),
            row.as_of.strftime("%Y-%m-%d %H:%M:%S") if row.as_of else "-",
            _lag(row.lag_seconds), _last_run(row), _verify(row.verify, row.repair)))
        if row.reason and row.state in (TableState.STOPPED, TableState.BEHIND):
            reasons[len(lines) - 1] = row.reason
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    text = []
    for index, line in enumerate(lines):
        text.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
        if index in reasons:
            text.append(f"    └ {reasons[index]}")
    counts = {state: sum(1 for r in rows if r.state == state) for state in TableState}
    text.append("")
    text.append(", ".join(f"{n} {state}" for state, n in counts.items() if n) +
                f" (behind: reflecting the source more than {duration(max_lag)} ago)")
    return "\n".join(text) + "\n"


_ORDER = {TableState.STOPPED: 0, TableState.BEHIND: 1, TableState.NOT_LOADED: 2, TableState.CURRENT: 3}


def _order(row: TableStatus) -> tuple[int, str, str, str]:
    return _ORDER[row.state], row.kind.dag_id, row.kind.group, row.kind.source


def _lag(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _last_run(row: TableStatus) -> str:
    if row.latest_status is None:
        return "-"
    changes = f" +{row.upserts} -{row.deletes}" if row.upserts or row.deletes else ""
    return f"{row.latest_status}{changes}"


def _verify(mark: VerifyMark | None, repair: Repair | None) -> str:
    if mark is None:
        return "-"
    found = str(mark.status)
    if mark.differing_buckets:
        found = f"{mark.differing_buckets} buckets differ"
    if mark.history_buckets:
        found += f", history: {mark.history_buckets} buckets"
    if repair is not None:
        found += f", {repair}"
    return f"{mark.at.strftime('%Y-%m-%d %H:%M')} {found}"
