"""The provider's plugin (the ``airflow.plugins`` entry point ``cdc_tables``): the CDC tables page in Airflow's UI,
a view in the navigation and one on each DAG run, served by the app of ``overview.api`` on the api-server under
``/cdc``.

Every Airflow process loads the plugins, the tasks' included: this module imports nothing but Airflow's plugin
base, and the app (FastAPI, the readers) is built where the api-server asks for its apps.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/cdc"  # ``overview.api.URL_PREFIX``


class CdcTablesPlugin(AirflowPlugin):
    name = "cdc_tables"
    external_views = [
        {"name": "CDC tables", "href": f"{URL_PREFIX}/", "destination": "nav", "category": "browse",
         "url_route": "cdc-tables"},
        {"name": "CDC tables", "href": f"{URL_PREFIX}/run?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
         "destination": "dag_run", "url_route": "cdc-run-tables"},
    ]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        # Built when the api-server asks for its apps, as it starts: its first answer does not wait for the
        # imports (pyarrow among them), and no other process that loads the plugins pays for them.
        from airflow_cdc_provider.overview.api import create_app

        return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "CDC tables"}]
