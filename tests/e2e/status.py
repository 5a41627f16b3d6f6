"""``airflow cdc status`` over the tests' own metadata DB (the one ``dag.test()`` runs write, tests/conftest.py),
in the test's process: what the command prints, as JSON and as text, and its exit code."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from airflow_cdc_provider.overview.command import run


def status(*dag_ids: str, max_lag: str = "1h", tables: list[str] | None = None,
           key: Callable[[dict], Any] = lambda row: row["kind"]["source"]) -> tuple[int, dict[Any, dict], str]:
    """(exit code, each row by ``key``, by default its source table, the text table) of the status of ``dag_ids``'
    tables."""
    out, text = io.StringIO(), io.StringIO()
    code = run(dag_ids=list(dag_ids), tables=tables, max_lag=max_lag, as_json=True, out=out)
    assert run(dag_ids=list(dag_ids), tables=tables, max_lag=max_lag, out=text) == code
    rows = json.loads(out.getvalue())["tables"]
    by_key = {key(row): row for row in rows}
    assert len(by_key) == len(rows), rows
    return code, by_key, text.getvalue()
