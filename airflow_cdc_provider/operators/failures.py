"""Which failures a task's retry could cure, and which it would only repeat.

A ``CdcError`` is raised on purpose, for a decision that holds until a person acts: a table without a key, a
refused schema change, a busy table, a ledger conflict, a bad configuration value, a refused login. Retrying it
would fail the same way after the retry delay, so the task fails at once (``AirflowFailException``), with the
message that says what to do. Anything else (a dropped connection, a lost Spark executor, a full disk) may
pass, and the task's retries take it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from airflow_cdc_provider.compat import AirflowFailException
from airflow_cdc_provider.core.errors import CdcError

Execute = TypeVar("Execute", bound=Callable[..., Any])


def final_on_cdc_error(execute: Execute) -> Execute:
    """Wrap an operator's ``execute`` so that a ``CdcError`` fails the task without its retries."""

    @functools.wraps(execute)
    def wrapper(self: Any, context: Any) -> Any:
        try:
            return execute(self, context)
        except CdcError as exc:
            raise AirflowFailException(str(exc)) from exc

    return wrapper  # type: ignore[return-value]
