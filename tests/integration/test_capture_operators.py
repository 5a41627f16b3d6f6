"""The capture operators over the real server: their XComs, and bad input refused before anything is written."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.errors import NoUsableKey, WatermarkNotReadable
from airflow_cdc_provider.core.records import CorruptRawFile
from airflow_cdc_provider.operators.capture import (
    MySqlBinlogExtractOperator,
    MySqlSnapshotOperator,
    RawReplayOperator,
)
from tests.integration.capture_helpers import apply_changes, read_rows, source_rows
from tests.integration.test_source_hook import purge_binlogs_to


def test_snapshot_extract_replay_operators(mariadb, capture_conn, tmp_path):
    mariadb.execute("CREATE TABLE shop.op_items (id INT PRIMARY KEY, v VARCHAR(20))",
                    "INSERT INTO shop.op_items VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    try:
        snap = MySqlSnapshotOperator(task_id="s", table="shop.op_items", work_dir=str(tmp_path / "run1"),
                                     mysql_conn_id=capture_conn).execute({})
        assert snap["rows"] == 3 and snap["key"] == ["id"]
        mariadb.execute("UPDATE shop.op_items SET id = 10 WHERE id = 1", "DELETE FROM shop.op_items WHERE id = 2",
                        "INSERT INTO shop.op_items VALUES (4, 'd,\"e\"\\n')")
        ext = MySqlBinlogExtractOperator(task_id="e", table="shop.op_items", start_watermark=snap["watermark"],
                                         work_dir=str(tmp_path / "run2"), mysql_conn_id=capture_conn).execute({})
        assert ext["counts"] == {"I": 1, "U": 1, "D": 2}
        rep = RawReplayOperator(task_id="r", extraction=ext, work_dir=str(tmp_path / "run2")).execute({})
        assert (rep["upserts"], rep["deletes"]) == (2, 2)
        from airflow_cdc_provider.core.records import RawHeader

        header = RawHeader("shop.op_items", (("id", "int(11)"), ("v", "varchar(20)")), ("id",))
        merged = apply_changes(header, read_rows(snap["files"]), read_rows([rep["upsert_file"]]),
                               read_rows([rep["delete_file"]]))
        assert merged == source_rows(mariadb, header)
    finally:
        mariadb.execute("DROP TABLE shop.op_items")


def test_table_without_key_is_refused_before_any_read(mariadb, capture_conn, tmp_path):
    mariadb.execute("CREATE TABLE IF NOT EXISTS shop.keyless (a INT, b TEXT)")
    with pytest.raises(NoUsableKey, match="shop.keyless"):
        MySqlSnapshotOperator(task_id="s", table="shop.keyless", work_dir=str(tmp_path),
                              mysql_conn_id=capture_conn).execute({})
    assert list(tmp_path.iterdir()) == []


def test_purged_watermark_names_the_file_and_retention_and_writes_nothing(mariadb, capture_conn, tmp_path):
    from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook

    hook = MySqlSourceHook(capture_conn)
    old = hook.current_watermark()
    mariadb.execute("FLUSH BINARY LOGS")
    purge_binlogs_to(mariadb, hook.current_watermark().file)
    with pytest.raises(WatermarkNotReadable) as err:
        MySqlBinlogExtractOperator(task_id="e", table="shop.orders", start_watermark=old.to_json(),
                                   work_dir=str(tmp_path), mysql_conn_id=capture_conn).execute({})
    assert old.file in str(err.value) and "expire_logs_days=" in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_corrupt_raw_line_fails_replay_naming_file_and_line(mariadb, capture_conn, tmp_path):
    from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook

    start = MySqlSourceHook(capture_conn).current_watermark()
    mariadb.execute("UPDATE shop.customers SET city = 'Paris' WHERE id = 1",
                    "UPDATE shop.customers SET city = 'Rome' WHERE id = 2")
    ext = MySqlBinlogExtractOperator(task_id="e", table="shop.customers", start_watermark=start.to_dict(),
                                     work_dir=str(tmp_path / "x"), mysql_conn_id=capture_conn).execute({})
    (raw,) = ext["files"]
    with open(raw, "r+", encoding="utf-8") as f:
        lines = f.readlines()
        lines[2] = lines[2][:20] + "\n"
        f.seek(0)
        f.writelines(lines)
        f.truncate()
    with pytest.raises(CorruptRawFile, match=f"{raw}, line 3"):
        RawReplayOperator(task_id="r", extraction=ext, work_dir=str(tmp_path / "out")).execute({})
    assert not (tmp_path / "out" / "upsert.parquet").exists()
