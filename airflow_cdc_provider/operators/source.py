"""What the operators that talk to the source share: the source's section of the configuration, whose connection
and time limits are handed to the hook."""

from __future__ import annotations

from airflow_cdc_provider.core.config import SourceConfig
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook


class ReadsSource:
    """An operator that reads the source through ``MySqlSourceHook``, as its ``source:`` section says (the
    connection, ``statement_timeout_seconds``, ``read_timeout_seconds``); it sets ``source`` in its
    ``__init__``."""

    source: SourceConfig

    def _source_hook(self) -> MySqlSourceHook:
        source = self.source
        return MySqlSourceHook(source.mysql_conn_id, statement_timeout_seconds=source.statement_timeout_seconds,
                               read_timeout_seconds=source.read_timeout_seconds)
