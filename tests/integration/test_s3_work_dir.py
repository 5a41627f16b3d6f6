"""An ``s3://`` work directory on an S3-compatible server on loopback: the ledger and its lock, and the
capture stages writing and reading their files there, credentials from an Airflow ``aws`` connection."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from airflow_cdc_provider.core.config import TableConfig
from airflow_cdc_provider.core.contract import Captured, Extraction
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import Committed, Ledger, RunRef, TableBusy, plan_run
from airflow_cdc_provider.core.records import RawHeader
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.capture import MySqlBinlogExtractOperator, MySqlSnapshotOperator, RawReplayOperator
from airflow_cdc_provider.stages.merge_run import finish_table
from tests.conftest import S3_CONN_ID
from tests.integration.capture_helpers import apply_changes, sections, source_rows
from tests.integration.test_capture_operators import NOW, check, schema, source_plan  # noqa: F401 (a fixture)
from tests.lock_races import T0, assert_one_winner_when_free_and_when_taking_over


@pytest.fixture
def work_dir(s3_server):
    return f"s3://{s3_server.bucket}/{os.urandom(4).hex()}/work"


def objects(s3_server, prefix: str) -> list[str]:
    found = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"][len(prefix):] for o in found)


def test_the_ledger_and_its_lock_on_s3(s3_server, work_dir):
    table = TableDir(work_dir=work_dir, hive_table="ods.t")
    store = work_store(work_dir, S3_CONN_ID)

    def ledger():  # a store of its own each, as a worker on another machine has
        return Ledger(table, work_store(work_dir, S3_CONN_ID))

    # Racing runs: one takes a free lock; when its run is gone, one of the next racers takes it over.
    assert_one_winner_when_free_and_when_taking_over(ledger)

    holder, other = RunRef("d", "scheduled__1"), RunRef("d", "manual__2")
    Ledger(table, store).acquire(holder, lambda run: True, T0)
    with pytest.raises(TableBusy, match="being updated by run 'scheduled__1'.*this run changed nothing"):
        Ledger(table, store).acquire(other, lambda run: True, T0)
    plan = plan_run(holder, None, None, None)
    Ledger(table, store).save_run_plan(plan)
    end = Watermark("mysql-bin.000003", 1234, 1, "0-1-7")
    Ledger(table, store).commit(plan, Committed(1, "file:/wh/ods.db/t/v000001", end, NOW, holder, "snapshot"))
    again = ledger()
    assert again.committed().watermark == end and again.run_plan(holder).output_version == 1
    prefix = table.ledger.removeprefix(f"s3://{s3_server.bucket}/") + "/"
    assert objects(s3_server, prefix) == ["committed.json", "lock.json", f"runs/{holder.key}.json"]
    assert json.loads(store.read_text(table.lock))["run_id"] == "scheduled__1"
    released, _ = finish_table(table, holder, 3, store)
    assert released and again.holder() is None and "lock.json" not in objects(s3_server, prefix)


def test_snapshot_extract_and_replay_write_and_read_their_files_on_s3(mariadb, schema, capture_conn, s3_server,
                                                                      work_dir, tmp_path):
    hook = MySqlSourceHook(capture_conn)
    checked = check([TableConfig(TableName(schema, "a"), "a")], capture_conn, tmp_path)
    a = f"{schema}.a"
    s3 = {"work_dir": work_dir, "work_conn_id": S3_CONN_ID}

    snapshot_plan = source_plan(checked, work_dir)
    snap = Captured.model_validate(MySqlSnapshotOperator(task_id="s", plan=snapshot_plan.to_xcom(),
                                                         **sections(capture_conn, **s3)).execute({}))
    (first,) = snap.inputs
    assert first.upserts == 3 and all(f.startswith(f"{work_dir}/") for f in first.upsert_files), first.upsert_files

    mariadb.execute(f"UPDATE {a} SET id = 10 WHERE id = 1", f"DELETE FROM {a} WHERE id = 2",
                    f"INSERT INTO {a} VALUES (4, 'd')")
    plan = source_plan(checked, work_dir, committed={a: first.end})
    extraction = Extraction.model_validate(MySqlBinlogExtractOperator(
        task_id="e", plan=plan.to_xcom(), **sections(capture_conn, **s3)).execute({}))
    (part,) = extraction.tables
    assert part.counts == {"I": 1, "U": 1, "D": 2} and all(f.startswith(f"{work_dir}/") for f in part.files)
    replayed = Captured.model_validate(RawReplayOperator(task_id="r", plan=plan.to_xcom(),
                                                         extraction=extraction.to_xcom(),
                                                         **sections(None, **s3)).execute({}))
    (changes,) = replayed.inputs
    assert (changes.upserts, changes.deletes) == (2, 2)
    assert changes.upsert_files[0].startswith(f"{work_dir}/") and changes.delete_file.startswith(f"{work_dir}/")

    # Read back from the server alone: the capture files hold the source's table.
    store = work_store(work_dir, S3_CONN_ID)
    with store.fetched([*first.upsert_files, *changes.upsert_files, changes.delete_file]) as local:
        snapshot_rows = [r for f in local[:len(first.upsert_files)] for r in pq.read_table(f).to_pylist()]
        upserts = pq.read_table(local[-2]).to_pylist()
        deletes = pq.read_table(local[-1]).to_pylist()
    header = RawHeader(a, changes.columns, changes.key)
    merged = apply_changes(header, snapshot_rows, upserts, deletes)
    assert merged == source_rows(mariadb, hook.raw_header(TableName(schema, "a")))
    assert not any(tmp_path.glob("**/*.parquet")), "nothing kept on the worker's disk"
