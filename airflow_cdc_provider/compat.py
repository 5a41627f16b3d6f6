"""The Airflow names whose module moved between the Airflow 3 minors this provider supports, imported once here.

Airflow 3.2 moved the exceptions a task raises and ``Stats`` into the Task SDK (``airflow.sdk``); Airflow 3.1 keeps
them in Airflow core, and its task runner catches core's exceptions. Each name is taken from the SDK first, so a
newer Airflow never meets the old path. Everything else the provider uses is in ``airflow.sdk`` since 3.1.
"""

from __future__ import annotations

try:  # Airflow 3.2+
    from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException
except ImportError:  # Airflow 3.1
    from airflow.exceptions import AirflowFailException, AirflowNotFoundException  # type: ignore[no-redef,attr-defined]

try:  # Airflow 3.2+
    from airflow.sdk.observability.stats import Stats
except ImportError:  # Airflow 3.1
    from airflow.stats import Stats  # type: ignore[no-redef,unused-ignore]



def max_map_length() -> int:
    """Airflow's ``[core] max_map_length``: the longest list a task's return value may map a downstream task over
    (Airflow checks it when the value is pushed; the worker reads the same configuration)."""
    try:  # Airflow 3.2+
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow 3.1
        from airflow.configuration import conf  # type: ignore[no-redef,unused-ignore]
    return int(conf.getint("core", "max_map_length", fallback=1024))


__all__ = ["AirflowFailException", "AirflowNotFoundException", "Stats", "max_map_length"]
