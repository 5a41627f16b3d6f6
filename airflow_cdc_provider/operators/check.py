"""The check stage: refuse, before anything is read, a table that cannot be captured correctly."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook


class CaptureCheckOperator(BaseOperator):
    """Check that ``table`` can be captured: the server's binlog settings, the capture user's privileges, the
    table's key. Fails with every problem found, each with its fix.

    Returns (XCom) the table, the server flavor, the key columns and the server's watermark at the check.

    :param table: the source table as ``schema.table`` (templated).
    :param mysql_conn_id: Airflow connection (conn_type ``mysql``) of the capture user.
    """

    template_fields = ("table",)
    ui_color = "#e8f4fd"

    def __init__(self, *, table: str, mysql_conn_id: str = MySqlSourceHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.mysql_conn_id = mysql_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        table = TableName.parse(self.table)
        hook = MySqlSourceHook(self.mysql_conn_id)
        hook.check_capture([table])
        key = hook.table_key(table)
        watermark = hook.current_watermark()
        self.log.info(
            "%s on %s can be captured: key %s (%s); server watermark %s", table, hook.flavor,
            ", ".join(key.columns), key.index_name, watermark,
        )
        return {
            "table": str(table),
            "flavor": hook.flavor.flavor.value,
            "key": list(key.columns),
            "watermark": watermark.to_dict(),
        }
