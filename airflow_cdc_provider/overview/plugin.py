"""The provider's plugin (the ``airflow.plugins`` entry point ``cdc_tables``): the CDC tables page in Airflow's UI,
a view in the navigation and one on each DAG run, served by the app of ``overview.api`` on the api-server under
``/cdc``.

Every Airflow process loads the plugins, the tasks' included: this module imports nothing but Airflow's plugin
base, and the app (FastAPI, the readers) is built at its first request, in the api-server alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/cdc"  # ``overview.api.URL_PREFIX``

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _AppOnFirstRequest:
    """An ASGI app that builds ``overview.api.create_app()`` when the api-server first hands it a request."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            from airflow_cdc_provider.overview.api import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class CdcTablesPlugin(AirflowPlugin):
    name = "cdc_tables"
    fastapi_apps = [{"app": _AppOnFirstRequest(), "url_prefix": URL_PREFIX, "name": "CDC tables"}]
    external_views = [
        {"name": "CDC tables", "href": f"{URL_PREFIX}/", "destination": "nav", "category": "browse",
         "url_route": "cdc-tables"},
        {"name": "CDC tables", "href": f"{URL_PREFIX}/run?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
         "destination": "dag_run", "url_route": "cdc-run-tables"},
    ]
