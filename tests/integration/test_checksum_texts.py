"""The row texts of the checksum: the server's SQL over the stored values gives, column by column, what Python
gives over the values the copy holds, for every type of the all-types fixture (awkward values included)."""

from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow.parquet as pq
import pytest

from airflow_cdc_provider.core.checksum import hive_text, source_text
from airflow_cdc_provider.core.identifiers import TableName, quote_identifier
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.stages.snapshot import snapshot
from tests.integration.fidelity_helpers import (
    CASES,
    COLUMNS,
    DDL,
    MARIADB_ONLY,
    MYSQL_DDL,
    ZERO_DATE_KEY_CHANGES,
    ZERO_DATE_KEY_DDL,
    ZERO_DATE_KEY_ROWS,
    insert_cases,
    zero_date_statements,
)


@pytest.mark.parametrize("product", ["mariadb", "mysql"])
def test_the_server_and_the_copys_values_give_the_same_text_for_every_type(product, request, make_user, tmp_path):
    server = request.getfixturevalue(product)
    mariadb = product == "mariadb"
    table = TableName(f"checksum_{os.urandom(3).hex()}", "all_types")
    server.execute(f"CREATE DATABASE {table.schema}", (DDL if mariadb else MYSQL_DDL).format(name=table.quoted))
    insert_cases(server, table.quoted, 1, frozenset() if mariadb else MARIADB_ONLY)
    hook = MySqlSourceHook(make_user(server=server))
    header = hook.raw_header(table)
    copied = {row["id"]: row for f in snapshot(hook, header, tmp_path / "snap").files
              for row in pq.read_table(f).to_pylist()}
    types = dict(header.columns)
    # Every column a text is computed of (MySQL's JSON is not: it counts by its NULL flag only).
    texted = [name for name, ctype in header.columns if name != "id" and source_text(name, ctype, mariadb)]
    with hook.cursor() as cursor:
        cursor.execute("SELECT id, " + ", ".join(source_text(name, types[name], mariadb) for name in texted)
                       + f" FROM {table.quoted} ORDER BY id")
        served = {row[0]: row[1:] for row in cursor.fetchall()}
    assert sorted(served) == sorted(copied) == list(range(1, len(CASES) + 1))
    assert len(texted) == len(COLUMNS) - (0 if mariadb else len(MARIADB_ONLY) + 1)
    wrong = []
    for ident, texts in served.items():
        for name, text in zip(texted, texts):
            mine = hive_text(copied[ident][name], types[name], mariadb)
            if mine != text:
                wrong.append(f"row {ident} {name} {types[name]}: server {text!r:.120}, copy {mine!r:.120}")
    assert wrong == []


@pytest.mark.spark
def test_the_server_and_spark_give_the_same_bucket_sums_and_row_hashes(mariadb, make_user, tmp_path, monkeypatch):
    from airflow_cdc_testing.hive import run_spark_job

    from airflow_cdc_provider.core.checksum import source_bucket_sums, source_key_text, source_row_text, text_hash_sql
    from airflow_cdc_provider.core.contract import VerifySlice
    from airflow_cdc_provider.core.verify import BucketSum, SourceSums, VerifyJob, VerifyJobs, key_slice, sums_of
    from airflow_cdc_provider.spark import VERIFY_JOB
    from tests.integration.merge_helpers import Table

    table = TableName(f"checksum_{os.urandom(3).hex()}", "all_types")
    mariadb.execute(f"CREATE DATABASE {table.schema}", DDL.format(name=table.quoted))
    insert_cases(mariadb, table.quoted, 1)
    insert_cases(mariadb, table.quoted, 101)
    # Names MySQL allows that an expression would misread (SQL after a backtick, a struct path, quotes, a
    # placeholder), each of a type whose text another rule spells: summed alike all the same.
    awkward = {"x`) AS STRING)||(SELECT 1)||CAST((`": ("VARCHAR(20)", "'it''s'"), "a.b": ("INT", "id"),
               "sp ace": ("DATETIME(6)", "'2024-03-01 10:00:00.5'"), "q'uote": ("DOUBLE", "id / 3"),
               'dq"uote': ("BINARY(2)", "x'00ff'"), "pct%s": ("DATE", "'2024-02-29'")}
    mariadb.execute(
        f"ALTER TABLE {table.quoted} " + ", ".join(f"ADD COLUMN {quote_identifier(n)} {t}" for n, (t, _) in awkward.items()),
        f"UPDATE {table.quoted} SET " + ", ".join(f"{quote_identifier(n)} = {v}" for n, (_, v) in awkward.items())
        + " WHERE id % 2 = 1")
    user = make_user()
    hook = MySqlSourceHook(user)
    header = hook.raw_header(table)
    target = Table(hook, header, tmp_path, target="ods.all_types")
    assert target.merge(target.prepare()[1])["status"] == "committed"

    buckets = 4
    with hook.cursor() as cursor:
        cursor.execute(source_bucket_sums(table.quoted, header.columns, header.key, True, buckets), [])
        served = {int(b): BucketSum(int(n), int(digest)) for b, n, digest in cursor.fetchall()}
        cursor.execute(f"SELECT {source_key_text(header.columns, header.key, True)}, "
                       f"{text_hash_sql(source_row_text(header.columns, True))} FROM {table.quoted}")
        served_rows = dict(cursor.fetchall())
    (tmp_path / "sums.json").write_text(SourceSums(sums=sums_of(served)).to_text())
    job = VerifyJob(target.warehouse, None, "ods.all_types", header.columns, header.key, True, buckets,
                    str(tmp_path / "verify-result.json"), detail=tuple(range(buckets)),
                    source_file=str(tmp_path / "sums.json"))
    # The rolling verify's slices in the same application: 3 slices of 6 buckets, each side summing only its own.
    slices, sliced_buckets = 3, 6
    with hook.cursor() as cursor:
        cursor.execute(source_bucket_sums(table.quoted, header.columns, header.key, True, sliced_buckets), [])
        whole = {int(b): BucketSum(int(n), int(digest)) for b, n, digest in cursor.fetchall()}
        parts = []
        for index in range(slices):
            cursor.execute(source_bucket_sums(table.quoted, header.columns, header.key, True, sliced_buckets,
                                              part=(index, slices)), [])
            parts.append({int(b): BucketSum(int(n), int(digest)) for b, n, digest in cursor.fetchall()})
    assert all(b % slices == index for index, part in enumerate(parts) for b in part)
    assert {b: s for part in parts for b, s in part.items()} == whole, "the slices make the whole table"
    # And 3 slices of the integer key's values (MIN and MAX now), as the hook reads them: each only its range.
    ranges = [key_slice(index, slices, *hook.integer_key_bounds(header)) for index in range(slices)]
    in_ranges = [hook.bucket_sums(header, sliced_buckets, range_rows=7, part=part) for part in ranges]
    summed_ranges = {}
    for part in in_ranges:
        for b, s in part.items():
            summed_ranges[b] = summed_ranges.get(b, BucketSum(0, 0)).plus(s)
    assert summed_ranges == whole, "the ranges make the whole table"
    # ids 1.. and 101..: the middle range holds none, the others each a part
    assert [sum(s.rows for s in p.values()) < len(served_rows) for p in in_ranges] == [True] * slices
    assert len([p for p in in_ranges if p]) == 2
    slice_jobs = [job.model_copy(update={"buckets": sliced_buckets, "detail": (), "source_file": None,
                                         "source": sums_of(part), "slice": sliced,
                                         "result_file": str(tmp_path / f"slice-{index}.json")})
                  for index, (part, sliced) in enumerate([*zip(parts, (VerifySlice(index=i, of=slices)
                                                                        for i in range(slices))),
                                                          *zip(in_ranges, ranges)])]
    (tmp_path / "verify-job.json").write_text(VerifyJobs(jobs=(job, *slice_jobs)).to_text())
    run = run_spark_job(VERIFY_JOB, str(tmp_path / "verify-job.json"), work_dir=str(tmp_path))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    result = json.loads((tmp_path / "verify-result.json").read_text())
    summed = {int(b): BucketSum(*sums) for b, sums in result["buckets"].items()}
    copied_rows = {key: digest for rows in result["rows"].values() for key, digest in rows}

    assert copied_rows == served_rows
    assert summed == served and sum(s.rows for s in served.values()) == 2 * len(CASES)
    assert result["compared"] and result["differing"] == []
    for index, part in enumerate([*parts, *in_ranges]):
        sliced = json.loads((tmp_path / f"slice-{index}.json").read_text())
        assert sliced["compared"] and sliced["differing"] == []
        assert {int(b): BucketSum(*sums) for b, sums in sliced["buckets"].items()} == part

    # The verify task over the same version, due every second run and counted once already. Its Spark half is
    # killed: the task fails, and the table is not counted as verified; the task's retry verifies it. Then a row
    # changed behind the binlog's back is found by the rolling verify's slice that holds it, for the next run to
    # read again.
    _verify_killed_then_retried(target, table, header, user, monkeypatch, mariadb)


def _verify_killed_then_retried(target, table, header, user, monkeypatch, mariadb) -> None:
    from types import SimpleNamespace

    from airflow_cdc_provider.core.config import HiveConfig, SourceConfig, SparkConfig, VerifyConfig, WorkConfig
    from airflow_cdc_provider.core.contract import CapturedTable, SourcePlan, TableOutcome, TablePlan, Verification
    from airflow_cdc_provider.core.ledger import RunPlan, RunRef
    from airflow_cdc_provider.core.modes import Mode
    from airflow_cdc_provider.core.verify import VerifyState
    from airflow_cdc_provider.operators.verify import CdcVerifyOperator
    from airflow_cdc_provider.storage import WorkStore

    store, table_dir, run = WorkStore(), target.ledger.table, RunRef("verify", "scheduled__1")
    store.write(table_dir.verify_state, VerifyState(runs_since=1))
    captured = CapturedTable(source=str(table), hive_table="ods.all_types", schema_changes="strict", key=header.key,
                             columns=header.columns)
    plan = SourcePlan(run=run, tables=(TablePlan(table=captured, plan=RunPlan(run, Mode.NOTHING), table_dir=table_dir),))
    outcome = TableOutcome(source=str(table), hive_table="ods.all_types", mode=Mode.NOTHING, status="nothing",
                           rows=2 * len(CASES))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_VERIFY", json.dumps({"conn_type": "spark", "host": "local[2]"}))

    def attempt(verify: VerifyConfig | None = None) -> Verification:
        task = CdcVerifyOperator(task_id="verify", plan=plan.to_xcom(), outcomes=[outcome.to_xcom()],
                                 verify=verify or VerifyConfig(every=2, bucket_rows=50),
                                 source=SourceConfig(mysql_conn_id=user), work=WorkConfig(dir=table_dir.work_dir),
                                 spark=SparkConfig(conn_id="spark_verify"),
                                 hive=HiveConfig(warehouse_dir=target.warehouse, metastore_uri=None))
        return Verification.model_validate(task.execute({"ti": SimpleNamespace(xcom_push=lambda key, value: None)}))

    monkeypatch.setenv("CDC_FAILPOINT", "verify.driver")  # read by the Spark driver's process only
    with pytest.raises(Exception, match="Error code is"):
        attempt()
    assert store.read(table_dir.verify_state, VerifyState) == VerifyState(runs_since=1), "counted as verified"
    assert not store.exists(table_dir.verify_report(run.key))
    monkeypatch.delenv("CDC_FAILPOINT")
    assert [(t.source, t.status) for t in attempt().tables] == [(str(table), "clean")]
    verified = store.read(table_dir.verify_state, VerifyState)
    assert verified.runs_since == 0 and (verified.last.status, verified.last.run) == ("clean", run), verified

    # A value changed with sql_log_bin=0: no event announces it. The rolling verify (4 slices of the integer key's
    # values) checks the slice that holds the row (the state says which is next), finds the one key, and leaves
    # its bucket for a repair.
    from airflow_cdc_provider.core.checksum import source_key_text
    from airflow_cdc_provider.core.verify import RepairRequest, bucket_count, key_slice

    hook = MySqlSourceHook(user)
    low, high = hook.integer_key_bounds(header)
    holding = next(p for p in (key_slice(k, 4, low, high) for k in range(4))
                   if (p.key_range[0] is None or p.key_range[0] <= 103)
                   and (p.key_range[1] is None or 103 < p.key_range[1]))
    buckets = bucket_count(max(hook.estimated_rows(table), 2 * len(CASES)), 50)
    key = source_key_text(header.columns, header.key, True)
    ((bucket,),) = mariadb.execute(f"SELECT MOD(CRC32({key}), {buckets}) FROM {table.quoted} WHERE id = 103")
    mariadb.execute("SET SESSION sql_log_bin = 0", f"UPDATE {table.quoted} SET s = 'drifted' WHERE id = 103",
                    "SET SESSION sql_log_bin = 1")
    store.write(table_dir.verify_state, VerifyState(runs_since=0, next_slice=holding.index))
    (found,) = attempt(VerifyConfig(every=0, slices=4, bucket_rows=50)).tables
    assert (found.status, found.slice, found.buckets) == ("different", holding, buckets)
    assert [(k.key, k.kind) for k in found.keys] == [("103", "different")]
    assert found.repair_buckets == (int(bucket),)
    assert 0 < found.rows < 2 * len(CASES), "the server summed the slice's rows, not the whole table's"
    verified = store.read(table_dir.verify_state, VerifyState)
    assert (verified.runs_since, verified.next_slice) == (1, (holding.index + 1) % 4)
    # What the status and the tables page show of it: the slice and its differing buckets.
    assert (verified.last.status, verified.last.slice, verified.last.differing_buckets) == (
        "different", str(holding), 1)
    assert store.read(table_dir.repair, RepairRequest) == RepairRequest(buckets=buckets, which=(int(bucket),),
                                                                        version=found.version, run=run.key)


def test_sums_read_a_range_of_keys_at_a_time_equal_one_read_of_the_whole_table(mariadb, make_user):
    from airflow_cdc_provider.core.checksum import source_bucket_sums
    from airflow_cdc_provider.core.verify import BucketSum

    table = TableName(f"checksum_{os.urandom(3).hex()}", "pairs")
    mariadb.execute(f"CREATE DATABASE {table.schema}",
                    f"CREATE TABLE {table.quoted} (a VARCHAR(10) NOT NULL, b INT NOT NULL, v TEXT, PRIMARY KEY (a, b))",
                    f"INSERT INTO {table.quoted} SELECT CONCAT('k', seq % 7), seq, REPEAT('x', seq % 13) "
                    f"FROM {table.schema}.seq_1_to_2000")
    hook = MySqlSourceHook(make_user())
    header = hook.raw_header(table)
    with hook.cursor() as cursor:
        cursor.execute(source_bucket_sums(table.quoted, header.columns, header.key, True, 16), [])
        whole = {int(b): BucketSum(int(n), int(digest)) for b, n, digest in cursor.fetchall()}
    for range_rows in (1, 333, 2000, 5000):
        assert hook.bucket_sums(header, 16, range_rows=range_rows) == whole, range_rows
    assert sum(s.rows for s in whole.values()) == 2000

    # A key holding zero dates: each range's ends are the server's own values (a zero date as its text), bound.
    zeros = TableName(table.schema, "datetime_key")
    mariadb.execute(*zero_date_statements(zeros.quoted, ZERO_DATE_KEY_DDL,
                                          f"INSERT INTO {{name}} VALUES {ZERO_DATE_KEY_ROWS}"))
    header = hook.raw_header(zeros)
    with hook.cursor() as cursor:
        cursor.execute(source_bucket_sums(zeros.quoted, header.columns, header.key, True, 4), [])
        whole = {int(b): BucketSum(int(n), int(digest)) for b, n, digest in cursor.fetchall()}
    assert sum(s.rows for s in whole.values()) == 5
    for range_rows in (1, 2, 5):
        assert hook.bucket_sums(header, 4, range_rows=range_rows) == whole, range_rows

    # A one-column integer key is read in ranges of values: dense, or (a far outlier) by range ends instead.
    for name, ids in (("dense", "CAST(seq AS SIGNED) * 3 - 1000"), ("sparse", "IF(seq = 2000, 9000000000000, seq)")):
        table = TableName(table.schema, name)
        mariadb.execute(f"CREATE TABLE {table.quoted} (id BIGINT PRIMARY KEY, v TEXT)",
                        f"INSERT INTO {table.quoted} SELECT {ids}, REPEAT('y', seq % 11) FROM {table.schema}.seq_1_to_2000",
                        f"ANALYZE TABLE {table.quoted}")
        header = hook.raw_header(table)
        with hook.cursor() as cursor:
            cursor.execute(source_bucket_sums(table.quoted, header.columns, header.key, True, 16), [])
            whole = {int(b): BucketSum(int(n), int(digest)) for b, n, digest in cursor.fetchall()}
        for range_rows in (1, 7, 333, 5000):
            assert hook.bucket_sums(header, 16, range_rows=range_rows) == whole, (name, range_rows)


def test_the_keys_a_binlog_range_changed_come_out_as_the_servers_key_texts(mariadb, make_user, tmp_path):
    from airflow_cdc_provider.core.checksum import source_key_text
    from airflow_cdc_provider.stages.verify import key_texts
    from tests.integration.capture_helpers import capture_after

    table = TableName(f"checksum_{os.urandom(3).hex()}", "pairs")
    mariadb.execute(f"CREATE DATABASE {table.schema}",
                    f"CREATE TABLE {table.quoted} (a VARCHAR(10) NOT NULL, t TIME(6) NOT NULL, v INT, PRIMARY KEY (a, t))",
                    f"INSERT INTO {table.quoted} VALUES ('x', '-01:00:00.5', 1), ('y', '00:00:01', 2), ('é', '10:00', 3)")
    hook = MySqlSourceHook(make_user())
    header = hook.raw_header(table)
    start = hook.current_watermark()
    mariadb.execute(f"UPDATE {table.quoted} SET v = 5 WHERE a = 'x'", f"DELETE FROM {table.quoted} WHERE a = 'y'",
                    f"UPDATE {table.quoted} SET a = 'z' WHERE a = 'é'",  # a key change: both keys changed
                    f"INSERT INTO {table.quoted} VALUES ('w', '838:59:59', 9)")
    _, replayed = capture_after(hook, header, start, tmp_path)
    changed = key_texts([replayed.upsert_file, replayed.delete_file], header)
    with hook.cursor() as cursor:
        cursor.execute(f"SELECT {source_key_text(header.columns, header.key, True)} FROM {table.quoted}")
        now = {row[0] for row in cursor.fetchall()}
    # Updated, deleted, both keys of the key change, inserted; the rows still there spelt as the server spells them.
    assert changed == {"x#-3600500000", "y#1000000", "é#36000000000", "z#36000000000", "w#3020399000000"}
    assert now == {"x#-3600500000", "z#36000000000", "w#3020399000000"} and now <= changed

    # Keys holding zero dates, NULL in the copy: the binlog's keys spelt as the server spells them, one text each.
    zeros = TableName(table.schema, "datetime_key")
    mariadb.execute(*zero_date_statements(zeros.quoted, ZERO_DATE_KEY_DDL, f"INSERT INTO {{name}} VALUES "
                                          f"{ZERO_DATE_KEY_ROWS}"))
    header = hook.raw_header(zeros)
    # The snapshot's keyset chunks go on from the last key as the server gave it (a zero date's text): no row
    # is lost or read twice at a chunk's end.
    copied = [tuple(row[k] for k in header.key) for f in snapshot(hook, header, tmp_path / "zsnap", chunk_rows=2).files
              for row in pq.read_table(f).to_pylist()]
    assert len(copied) == len(set(copied)) == 5 and copied.count((1, None, None, dt.timedelta(0))) == 1
    start = hook.current_watermark()
    mariadb.execute(*zero_date_statements(zeros.quoted, *ZERO_DATE_KEY_CHANGES))
    _, replayed = capture_after(hook, header, start, tmp_path, "zeros")
    changed = key_texts([replayed.upsert_file, replayed.delete_file], header)
    with hook.cursor() as cursor:
        cursor.execute(f"SELECT {source_key_text(header.columns, header.key, True)} FROM {zeros.quoted}")
        now = [row[0] for row in cursor.fetchall()]
    assert sorted(now) == ["1#2020-01-01 00:00:00.000000#NULL#0", "1#NULL#2020-01-01#0", "1#NULL#NULL#0",
                           "2#NULL#NULL#7200000000", "3#2021-05-05 10:00:00.000000#2021-05-05#36000000000",
                           "4#NULL#NULL#0"]
    assert changed == {"1#NULL#NULL#0", "2#NULL#NULL#3600000000", "2#NULL#NULL#7200000000",
                       "1#2020-01-01 00:00:00.000000#NULL#0", "4#NULL#NULL#0"}
