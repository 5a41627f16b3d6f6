"""The Airflow names whose module moved between the Airflow 3 minors this provider supports, imported once here.

Airflow 3.2 moved the exceptions a task raises and ``Stats`` into the Task SDK (``airflow.sdk``), and 3.1 moved
``BaseHook`` there; the older minors keep them in Airflow core, where later minors still import them from only
with a deprecation warning (or not at all). Each name is taken from the SDK first, so the newest Airflow never
meets the old path. Everything else the provider uses is in ``airflow.sdk`` since 3.0.
"""

from __future__ import annotations

try:  # Airflow 3.1+
    from airflow.sdk import BaseHook
except ImportError:  # Airflow 3.0
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef]

try:  # Airflow 3.2+
    from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException
except ImportError:  # Airflow 3.0, 3.1: the same exceptions the task runner catches there
    from airflow.exceptions import AirflowFailException, AirflowNotFoundException  # type: ignore[no-redef]

try:  # Airflow 3.2+
    from airflow.sdk.observability.stats import Stats
except ImportError:  # Airflow 3.0, 3.1
    from airflow.stats import Stats  # type: ignore[no-redef]

__all__ = ["AirflowFailException", "AirflowNotFoundException", "BaseHook", "Stats"]
