"""The Spark merge job against real Spark (local mode), a real embedded metastore and a real server's changes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest
from airflow_cdc_testing.hive import read_hive_table, spark_env, spark_submit_command

from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from tests.integration.capture_helpers import source_rows
from tests.integration.hive_helpers import plain
from tests.integration.merge_helpers import Table
from tests.integration.test_capture import fill, items, random_change  # noqa: F401

pytestmark = pytest.mark.spark


# Names MySQL allows that an expression would misread: SQL after a backtick (a part of the key), a struct path
# and spaces, quotes, a placeholder, Hive's type separators.
AWKWARD_NAMES = {"region": "x`) AS STRING)||(SELECT 1)||CAST((`", "seen_at": "a.b sp ace",
                 "payload": "q'uote dq\"uote (p) %s :;"}


def test_initial_load_then_merges_equal_the_source_and_old_versions_go(mariadb, items, capture_conn, tmp_path):
    # The columns the changes below do not name are renamed: the snapshot, the binlog, the merge (its join on the
    # key included) and the read carry them like any other.
    mariadb.execute(f"ALTER TABLE {items.quoted} " + ", ".join(
        f"RENAME COLUMN {old} TO {quote_identifier(new)}" for old, new in AWKWARD_NAMES.items()))
    fill(mariadb, items.quoted, 300)
    hook = MySqlSourceHook(capture_conn)
    table = Table(hook, hook.raw_header(items), tmp_path)
    assert table.header.key == (AWKWARD_NAMES["region"], "id")
    run, spec = table.prepare()
    first = table.merge(spec)
    assert first["status"] == "committed" and first["version"] == 1 and first["rows"] == 300
    rng, next_id = random.Random(11), [300]
    for round_ in range(2):
        for _ in range(60):
            random_change(mariadb, items, rng, next_id)
        run, spec = table.prepare()
        result = table.merge(spec)
        assert result["status"] == "committed" and result["version"] == round_ + 2
    rows, location = table.read()
    assert rows == plain(source_rows(mariadb, table.header))
    assert location.endswith("/ods.db/items/v000003")
    versions = sorted(p.name for p in (tmp_path / "warehouse" / "ods.db" / "items").iterdir())
    assert versions == ["v000002", "v000003"], "keep_versions=2 keeps the newest two"
    committed = table.ledger.committed()
    assert committed.version == 3 and committed.run == run


def test_killed_merge_leaves_the_previous_version_and_its_rerun_completes(mariadb, items, capture_conn, tmp_path):
    fill(mariadb, items.quoted, 20000)
    hook = MySqlSourceHook(capture_conn)
    table = Table(hook, hook.raw_header(items), tmp_path)
    table.merge(table.prepare()[1])
    before = plain(source_rows(mariadb, table.header))
    rng, next_id = random.Random(3), [20000]
    for _ in range(200):
        random_change(mariadb, items, rng, next_id)
    run, spec = table.prepare()

    proc = table.submit(spec)
    writing = tmp_path / "warehouse" / "ods.db" / "items" / "v000002"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and not writing.exists():
        time.sleep(0.02)
    assert proc.poll() is None, "the job ended before it began to write: " + proc.stdout.read()[-3000:]
    os.killpg(proc.pid, signal.SIGKILL)  # spark-submit and its JVM
    proc.wait()
    assert not (writing / "_cdc_version.json").exists(), "killed before it finished writing"

    rows, location = table.read()
    assert location.endswith("/v000001") and rows == before
    assert table.ledger.committed().version == 1

    result = table.merge(spec)  # the same run again
    assert result["status"] == "committed" and result["origin"] == 1
    rows, location = table.read()
    assert rows == plain(source_rows(mariadb, table.header))
    assert location.endswith(f"/v{result['version']:06d}")


def test_a_table_not_made_by_the_pipeline_is_refused_untouched(mariadb, items, capture_conn, tmp_path):
    fill(mariadb, items.quoted, 10)
    hook = MySqlSourceHook(capture_conn)
    table = Table(hook, hook.raw_header(items), tmp_path)
    other = tmp_path / "other.py"
    other.write_text(
        "from airflow_cdc_provider.spark.session import hive_session\n"
        f"s = hive_session('x', {table.warehouse!r}, None)\n"
        "s.sql('CREATE DATABASE ods'); s.sql('CREATE TABLE ods.items (a INT) STORED AS PARQUET')\n"
        "s.sql('INSERT INTO ods.items VALUES (7)')\n"
    )
    subprocess.run(spark_submit_command(str(other), work_dir=str(tmp_path)), env=spark_env(), cwd=tmp_path,
                   check=True, capture_output=True)
    result = table.merge(table.prepare()[1])
    assert result["status"] == "failed" and "exists but was not made by this pipeline" in result["error"]
    assert table.ledger.committed() is None
    rows, _ = read_hive_table(table.warehouse, None, "ods.items")
    assert rows.to_pylist() == [{"a": 7}]
