"""``airflow cdc status`` over the tests' own metadata DB (the one ``dag.test()`` runs write, tests/conftest.py),
in the test's process: what the command prints, as JSON and as text, and its exit code."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from airflow_cdc_provider.overview.command import run


def status(dag_id: str, database: str, max_lag: str = "1h",
           key: Callable[[dict], Any] = lambda row: row["kind"]["source"]) -> tuple[int, dict[Any, dict], str]:
    """(exit code, each row by ``key``, by default its source table, the text table) of the status of ``dag_id``'s
    tables in the Hive ``database``. The tests of a worker share a metadata DB and the example DAG's id: a group
    another test ran last (its own database) has its own rows, which ``database`` leaves out."""
    out, text = io.StringIO(), io.StringIO()
    code = run(dag_ids=[dag_id], databases=[database], max_lag=max_lag, as_json=True, out=out)
    assert run(dag_ids=[dag_id], databases=[database], max_lag=max_lag, out=text) == code
    rows = json.loads(out.getvalue())["tables"]
    by_key = {key(row): row for row in rows}
    assert len(by_key) == len(rows), rows
    return code, by_key, text.getvalue()
