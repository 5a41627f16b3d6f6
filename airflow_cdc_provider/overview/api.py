"""The CDC tables page's app, mounted on Airflow's api-server by the provider's plugin (``overview.plugin``) under
``/cdc``: the page itself and the JSON it reads.

    GET /cdc/                                    the page: every table; a table's own view (#table=...)
    GET /cdc/run?dag_id=...&run_id=...           the page as a DAG run's view: that run's tables
    GET /cdc/api/tables?max_lag=1h               every table's row (``core.status.TableStatus``)
    GET /cdc/api/table?dag_id=&group=&source=    one table's row and its runs (``core.status.TableDetail``)
    GET /cdc/api/run?dag_id=&run_id=             one DAG run's tables (``core.status.RunTables``)

Access is Airflow's: every request needs a logged-in user (the UI's cookie, or a bearer token, as the REST API
takes), or gets 401/403; a user sees the tables of the DAGs the auth manager lets them read (``GET`` on the DAG),
and nothing of any other. What is sent is what the runs recorded about tables: names, versions, moments, counts,
the runs' own messages. No connection, credential or row value: a verify's differing keys stay in its report.
"""

from __future__ import annotations

import datetime as dt
import json
from importlib import resources
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import get_user
from airflow.utils.session import create_session
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response

from airflow_cdc_provider.core.status import TableRows
from airflow_cdc_provider.hooks.run_records import RunRecordsHook
from airflow_cdc_provider.overview.command import UsageError, parse_lag
from airflow_cdc_provider.overview.read import DETAIL_RUNS, run_tables, table_detail, table_rows

URL_PREFIX = "/cdc"

# The logged-in user, as Airflow's REST API takes it (a bearer token, or the UI's cookie); none: 401 or 403.
User = Annotated[Any, Depends(get_user)]


def _readable_dag_ids(user: Any) -> set[str]:
    """The DAGs ``user`` may read, as the auth manager decides."""
    return set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))


def _lag(max_lag: str) -> dt.timedelta:
    try:
        return parse_lag(max_lag)
    except UsageError as error:
        raise HTTPException(status_code=400, detail=str(error)) from error


def _page(request: Request) -> str:
    # The api-server's own base path, for the links into Airflow's UI (which the page opens in the top window).
    base = request.scope.get("root_path", "")
    base = base[: -len(URL_PREFIX)] if base.endswith(URL_PREFIX) else base
    page = resources.files("airflow_cdc_provider.overview").joinpath("page.html").read_text()
    # As a JSON string (a JavaScript literal), whatever the path holds.
    return page.replace("{{AIRFLOW_BASE}}", json.dumps(base.rstrip("/")).replace("<", "\\u003c"))


def create_app() -> FastAPI:
    app = FastAPI(title="CDC tables", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request, user: User) -> str:
        return _page(request)

    @app.get("/run", response_class=HTMLResponse)
    def run_page(request: Request, user: User) -> str:
        return _page(request)

    @app.get("/api/tables")
    def tables(user: User, max_lag: str = "1h") -> Response:
        lag, now = _lag(max_lag), dt.datetime.now(dt.UTC)
        readable = _readable_dag_ids(user)
        with create_session() as session:
            rows = table_rows(RunRecordsHook(session), readable, now, lag) if readable else []
        # Encoded by the model itself: FastAPI's encoder of a 2,000-table answer takes ten times as long.
        answer = TableRows(now=now, max_lag_seconds=lag.total_seconds(), tables=tuple(rows))
        return Response(answer.model_dump_json(), media_type="application/json")

    @app.get("/api/table")
    def table(user: User, dag_id: str, source: str, group: str = "", max_lag: str = "1h",
              runs: Annotated[int, Query(ge=1, le=500)] = DETAIL_RUNS) -> dict[str, Any]:
        lag, now = _lag(max_lag), dt.datetime.now(dt.UTC)
        if dag_id not in _readable_dag_ids(user):
            raise HTTPException(status_code=404, detail="No such table among the DAGs you may read.")
        with create_session() as session:
            detail = table_detail(RunRecordsHook(session), dag_id, group, source, now, lag, runs)
        if detail is None:
            raise HTTPException(status_code=404, detail="No such table among the DAGs you may read.")
        return {"now": now.isoformat(), **detail.to_xcom()}

    @app.get("/api/run")
    def run(user: User, dag_id: str, run_id: str) -> dict[str, Any]:
        if dag_id not in _readable_dag_ids(user):
            raise HTTPException(status_code=404, detail="No such run among the DAGs you may read.")
        with create_session() as session:
            return run_tables(RunRecordsHook(session), dag_id, run_id).to_xcom()

    return app
