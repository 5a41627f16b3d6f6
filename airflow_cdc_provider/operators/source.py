"""What the operators that talk to the source share: the connection and the time limits, handed to the hook."""

from __future__ import annotations

from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook

DEFAULT_STATEMENT_TIMEOUT = 3600
DEFAULT_READ_TIMEOUT = 600


class ReadsSource:
    """An operator that reads the source through ``MySqlSourceHook``; it sets the three attributes in its
    ``__init__`` (``:param statement_timeout_seconds:`` and ``:param read_timeout_seconds:`` there)."""

    mysql_conn_id: str
    statement_timeout_seconds: int = DEFAULT_STATEMENT_TIMEOUT
    read_timeout_seconds: int = DEFAULT_READ_TIMEOUT

    def _source_hook(self) -> MySqlSourceHook:
        return MySqlSourceHook(self.mysql_conn_id, statement_timeout_seconds=self.statement_timeout_seconds,
                               read_timeout_seconds=self.read_timeout_seconds)
