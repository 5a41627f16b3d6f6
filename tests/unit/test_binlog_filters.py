"""The binlog reader's table filters: what the hook hands python-mysql-replication, which tests every table map
and row event against them with ``in``."""

from __future__ import annotations

import json

from pymysqlreplication.event import IntvarEvent, NotImplementedEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import WriteRowsEvent

from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook


def test_the_reader_gets_sets_of_schemas_and_tables(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_MYSQL_FILTERS", json.dumps(
        {"conn_type": "mysql", "host": "127.0.0.1", "port": 9, "login": "capture", "password": "unused"}))
    tables = [f"t{i}" for i in range(10_000)]
    # Made, not connected: the reader connects when the first event is asked for.
    stream = MySqlSourceHook("mysql_filters").binlog_stream(
        Watermark(file="binlog.000001", position=4, server_id=1), 12345, ["shop", "crm", "shop"], tables)
    try:
        # The reader's own attributes, as its row_event.py reads them: a set makes each event's test one look-up,
        # where a list of ten thousand tables was ten thousand comparisons for an event of a table not captured.
        assert stream._BinLogStreamReader__only_schemas == frozenset({"shop", "crm"})
        assert stream._BinLogStreamReader__only_tables == frozenset(tables)
        assert isinstance(stream._BinLogStreamReader__only_tables, frozenset)
        # Every event type: the reader's classes, and its NotImplementedEvent for the types it has none for
        # (the pass decides each, ``core.binlog_events``): none is left out by the reader's event filter.
        allowed = stream._BinLogStreamReader__allowed_events
        assert NotImplementedEvent in allowed and IntvarEvent in allowed and WriteRowsEvent in allowed
        known = set(BinLogPacketWrapper._BinLogPacketWrapper__event_map.values())
        assert known <= allowed
    finally:
        stream.close()
