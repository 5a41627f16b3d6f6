"""An auth manager that keeps named users from named DAGs, for the tests of what the CDC tables page shows whom.

Airflow's simple auth manager lets every role read every DAG; the auth managers that restrict DAGs per user (FAB's
DAG-level permissions, Keycloak's resources) answer the same calls (``is_authorized_dag``, through
``get_authorized_dag_ids``) that the page asks. This one is the simple auth manager, except that a user named in
``CDC_E2E_DAG_ACCESS`` (JSON: {"user": ["dag_id", ...]}) may read those DAGs only, and that with
``[core] simple_auth_manager_all_admins`` a request still needs a token: the tests' REST client takes an admin's
from ``/auth/token`` without credentials, but the middleware that hands every request without one an admin's is
left out, so that a request without a login is refused as in a deployment with users.

    AIRFLOW__CORE__AUTH_MANAGER=airflow_cdc_testing.auth.DagAccessAuthManager
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

ACCESS_VARIABLE = "CDC_E2E_DAG_ACCESS"


def token_for(username: str, role: str = "viewer") -> str:
    """A token the api-server accepts for ``username`` (signed with the deployment's secret: call it with the
    deployment's environment)."""
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return create_auth_manager().generate_jwt(SimpleAuthManagerUser(username=username, role=role))


class DagAccessAuthManager(SimpleAuthManager):
    def get_fastapi_middlewares(self) -> list[Any]:
        return []

    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        allowed = json.loads(os.environ.get(ACCESS_VARIABLE) or "{}").get(user.get_name())
        if allowed is not None and (details is None or details.id not in allowed):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)


if __name__ == "__main__":
    import sys

    print(token_for(*sys.argv[1:]))
