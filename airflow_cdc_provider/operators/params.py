"""Trigger-form parameters as the tasks receive them: rendered by Jinja into text."""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider.core.config import ConfigError


def parse_flag(value: Any, name: str) -> bool:
    """A boolean trigger parameter as the template renders it."""
    if isinstance(value, str):
        if value.strip().lower() not in ("true", "false", "1", "0", "", "none"):
            raise ConfigError(f"The parameter {name} must be true or false, got {value!r}: trigger the run again with "
                              f"{name} set to true or false.")
        return value.strip().lower() in ("true", "1")
    return bool(value)
