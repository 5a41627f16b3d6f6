"""Apache Airflow provider that keeps Hive tables in step with MySQL tables by reading the MySQL binlog.

What a DAG file needs, importable from here: ``load_config`` (a configuration file), ``cdc_source_group`` and
``cdc_table_group`` (the task groups), ``cdc_params`` (the trigger form's parameters). They are loaded when first
asked for: Airflow imports this package to read the provider's information, and that stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {"load_config": "airflow_cdc_provider.configuration",
            "cdc_source_group": "airflow_cdc_provider.task_groups",
            "cdc_table_group": "airflow_cdc_provider.task_groups",
            "cdc_params": "airflow_cdc_provider.task_groups"}

if TYPE_CHECKING:
    from airflow_cdc_provider.configuration import load_config
    from airflow_cdc_provider.task_groups import cdc_params, cdc_source_group, cdc_table_group

__all__ = ["__version__", "cdc_params", "cdc_source_group", "cdc_table_group", "load_config"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    # The names handed out lazily are not in the module's namespace until first asked for: listed here, so that
    # dir(), help() and an IDE's completion show them.
    return sorted({*globals(), *__all__})
