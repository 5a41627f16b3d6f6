"""Schema changes in the binlog against a real server: refused with the DDL and its position, nothing written;
a fresh snapshot reloads the Hive table with the new columns."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import RunRef, plan_run
from airflow_cdc_provider.core.schema import SchemaChangeRefused, UnknownDefault
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.extract import ColumnsRetyped, TableRange, TableReplaced, extract
from airflow_cdc_provider.stages.snapshot import snapshot
from tests.integration.capture_helpers import source_rows
from tests.integration.hive_helpers import plain
from tests.integration.merge_helpers import NOW, Table


@pytest.fixture
def orders(mariadb):
    table = TableName(f"ddl_{os.urandom(3).hex()}", "orders")
    mariadb.execute(f"CREATE DATABASE {table.schema}",
                    f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, label VARCHAR(20), price DECIMAL(10,2))",
                    f"INSERT INTO {table.quoted} VALUES (1, 'one', 1.50), (2, 'two', 2.50)")
    yield table
    mariadb.execute(f"DROP DATABASE {table.schema}")


def _extract_after(hook, header, start, tmp_path, definition=None, **kwargs):
    out = tmp_path / "raw"
    return out, lambda: extract(hook, [TableRange(header, out, definition)], start, hook.current_watermark(),
                                **kwargs).check()


@pytest.mark.parametrize(("ddl", "described", "stopped"), [
    ("ALTER TABLE {t} DROP COLUMN label", "dropped label", SchemaChangeRefused),
    ("ALTER TABLE {t} RENAME COLUMN label TO title", "renamed label to title", SchemaChangeRefused),
    # A widening keeps every value, and lands as another Hive type: the heal loads the table anew.
    ("ALTER TABLE {t} MODIFY price DECIMAL(12,2)", "price changed from decimal(10,2) to decimal(12,2)",
     ColumnsRetyped),
])
def test_a_column_change_stops_the_range_naming_the_ddl_and_its_position(mariadb, orders, capture_conn, tmp_path,
                                                                           ddl, described, stopped):
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(orders)
    start = hook.current_watermark()
    mariadb.execute(f"UPDATE {orders.quoted} SET price = 9 WHERE id = 1", ddl.format(t=orders.quoted))
    (file, position), = [(f, p) for f, p, *_ in mariadb.execute("SHOW MASTER STATUS")]
    mariadb.execute(f"INSERT INTO {orders.quoted} (id) VALUES (3)")
    out, run = _extract_after(hook, header, start, tmp_path)
    with pytest.raises(stopped) as refused:
        run()
    message = str(refused.value)
    assert ddl.format(t=orders.quoted) in message and described in message
    assert f"end position {position}" in message, "the DDL's own position: the binlog status right after it"
    assert "written; the Hive table is as it was" in message and "fresh_snapshot=true" in message
    if stopped is ColumnsRetyped:
        assert "price (decimal(10,2) → decimal(12,2)) land as another Hive type" in message
    assert not list(out.glob("*")), "no raw file is left"


def test_a_widened_varchar_lands_the_same_and_passes(mariadb, orders, capture_conn, tmp_path):
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(orders)
    start = hook.current_watermark()
    mariadb.execute(f"UPDATE {orders.quoted} SET label = 'before' WHERE id = 1",
                    f"ALTER TABLE {orders.quoted} MODIFY label VARCHAR(200)",
                    f"UPDATE {orders.quoted} SET label = '{'x' * 150}' WHERE id = 2")
    _, run = _extract_after(hook, header, start, tmp_path)
    result = run()
    assert result.counts[str(orders)] == {"I": 0, "U": 2, "D": 0}
    assert result.schema_changes[str(orders)] == []


@pytest.mark.parametrize("ddl", ["TRUNCATE TABLE {t}", "RENAME TABLE {t} TO {t}_old, {t}_new TO {t}"])
def test_a_truncate_or_a_replaced_table_stops_the_range(mariadb, orders, capture_conn, tmp_path, ddl):
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(orders)
    start = hook.current_watermark()
    new = f"`{orders.schema}`.`orders_new`"
    mariadb.execute(f"CREATE TABLE {new} LIKE {orders.quoted}")
    mariadb.execute(ddl.format(t=orders.quoted).replace(f"{orders.quoted}_old", f"`{orders.schema}`.`orders_old`")
                    .replace(f"{orders.quoted}_new", new))
    out, run = _extract_after(hook, header, start, tmp_path)
    with pytest.raises(TableReplaced, match="rows changed without row events.*fresh_snapshot=true"):
        run()
    assert not list(out.glob("*"))


@pytest.mark.spark
def test_a_fresh_snapshot_reloads_the_hive_table_with_its_new_columns(mariadb, orders, capture_conn, tmp_path):
    hook = MySqlSourceHook(capture_conn)
    target = Table(hook, hook.raw_header(orders), tmp_path, target="ods.orders")
    target.merge(target.prepare()[1])
    mariadb.execute(f"ALTER TABLE {orders.quoted} DROP COLUMN label, ADD COLUMN note TEXT DEFAULT 'n/a'",
                    f"INSERT INTO {orders.quoted} VALUES (3, 3.50, 'three')")
    target.header = hook.raw_header(orders)
    run = RunRef("test", "fresh")
    target.ledger.acquire(run, lambda holder: False, NOW)
    plan = plan_run(run, target.ledger.committed(), None, None, fresh_snapshot=True)
    target.ledger.save_run_plan(plan)
    snap = snapshot(hook, target.header, target.run_dir(run) / "snapshot")
    result = target.merge(target.spec(run, plan, snap.watermark, snap.files, None))
    assert result["status"] == "committed" and result["version"] == 2
    rows, location = target.read()
    assert location.endswith("/v000002")
    assert rows == plain(source_rows(mariadb, target.header))
    assert set(rows[(1,)]) == {"id", "price", "note"} and rows[(1,)]["note"] == "n/a"


def test_an_added_column_whose_default_is_an_expression_stops_the_range(mariadb, orders, capture_conn, tmp_path):
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(orders)
    start = hook.current_watermark()
    mariadb.execute(f"ALTER TABLE {orders.quoted} ADD COLUMN seen DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
                    f"INSERT INTO {orders.quoted} (id) VALUES (3)")
    out, run = _extract_after(hook, header, start, tmp_path, definition=hook.raw_header(orders),
                              defaults=hook.added_column_defaults)
    with pytest.raises(UnknownDefault, match=r"seen \(datetime\(6\)\) was added with the default current_timestamp\(6\), "
                                             r"an expression.*fresh_snapshot=true"):
        run()
    assert not list(out.glob("*")), "no raw file is left"


def test_added_columns_get_the_defaults_the_server_gave_existing_rows(mariadb, orders, capture_conn, tmp_path):
    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(orders)
    start = hook.current_watermark()
    mariadb.execute(f"ALTER TABLE {orders.quoted} ADD COLUMN note VARCHAR(10) NOT NULL DEFAULT 'it''s',"
                    " ADD COLUMN qty INT NOT NULL, ADD COLUMN due DATE DEFAULT '2026-02-28', ADD COLUMN opt TEXT")
    _, run = _extract_after(hook, header, start, tmp_path, definition=hook.raw_header(orders),
                            defaults=hook.added_column_defaults)
    fills = {f.column: f.value for f in run().fills[str(orders)]}
    assert fills == {"note": "it's", "qty": 0, "due": dt.date(2026, 2, 28), "opt": None}
    existing = mariadb.execute(f"SELECT note, qty, due, opt FROM {orders.quoted}")
    assert set(existing) == {tuple(fills.values())}, "the rows that existed hold exactly these values"
