"""The Spark merge job against real Spark (local mode), a real embedded metastore and a real server's changes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest
from airflow_cdc_testing.hive import read_hive_table, read_hive_tables, spark_env, spark_submit_command

from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from tests.integration.capture_helpers import source_rows
from tests.integration.hive_helpers import apply_changes, changes_by_version, hive_rows, plain
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



def test_changelog_applied_in_order_gives_every_version_through_a_rerun_and_kills(mariadb, items, capture_conn,
                                                                                   tmp_path):
    fill(mariadb, items.quoted, 200)
    hook = MySqlSourceHook(capture_conn)
    table = Table(hook, hook.raw_header(items), tmp_path, changelog=True)
    columns = [name.lower() for name, _ in table.header.columns]
    key = tuple(k.lower() for k in table.header.key)
    expected = {table.merge(table.prepare()[1])["version"]: plain(source_rows(mariadb, table.header))}
    rng, next_id = random.Random(29), [200]

    def workload(round_: int) -> None:
        for _ in range(50):
            random_change(mariadb, items, rng, next_id)
        # An update and its undo (no change), and a row inserted then deleted (none either) in the same range.
        mariadb.execute(f"UPDATE {items.quoted} SET label = 'changed' WHERE id = {round_}",
                        f"UPDATE {items.quoted} SET label = 'item {round_}, \"quoted\"\\nline' WHERE id = {round_}",
                        f"INSERT INTO {items.quoted} VALUES ('eu', {10_000 + round_}, 'brief', 1, NULL, NULL)",
                        f"DELETE FROM {items.quoted} WHERE id = {10_000 + round_}")

    def killed_at(place: str, spec) -> None:
        proc = table.submit(spec, env={**spark_env(), "CDC_FAILPOINT": place})
        output, _ = proc.communicate(timeout=600)
        assert proc.returncode != 0 and f"failpoint {place}" in output, output[-3000:]

    workload(1)
    result = table.merge(table.prepare()[1])
    expected[result["version"]] = plain(source_rows(mariadb, table.header))

    # Killed with the changes written and the table not switched: they are never listed; the re-run writes them.
    workload(2)
    run, spec = table.prepare()
    killed_at("merge.changes.written", spec)
    result = table.merge(spec)
    expected[result["version"]] = plain(source_rows(mariadb, table.header))

    # Killed with the table switched and its changes not yet listed: the re-run lists them, and finds nothing
    # more to change (its new version is the killed one's rows again).
    # Later changes must not leak into the re-run of a run (here one whose first attempt committed).
    workload(3)
    run, spec = table.prepare()
    at_run = plain(source_rows(mariadb, table.header))
    killed_at("merge.driver.switched", spec)
    workload(4)
    result = table.merge(spec)
    killed_version = result["version"] - 1
    assert result["origin"] == killed_version - 1
    expected[killed_version] = expected[result["version"]] = at_run
    assert result["changelog"]["rows"] == 0

    read = read_hive_tables(table.warehouse, None, ["ods.items", "ods.items_changelog"])
    (rows, location), (changed, _) = read["ods.items"], read["ods.items_changelog"]
    assert location.endswith(f"/v{result['version']:06d}")
    by_version = changes_by_version(changed)
    # One partition per committed version (the last one empty, so without rows), none of the killed attempt.
    assert sorted(by_version) == sorted(set(expected) - {result["version"]})
    logged = sorted(p.name for p in (tmp_path / "warehouse" / "ods.db" / "items_changelog").iterdir())
    assert logged == [f"v{v:06d}" for v in sorted(expected)], "the killed attempt's changes are removed"
    state: dict = {}
    for version in sorted(expected):
        state = apply_changes(state, by_version.get(version, []), key, columns)
        assert state == expected[version], f"the changelog up to version {version} does not give it"
    assert state == hive_rows(rows, table.header.key)
    for version, changes in by_version.items():
        if version > 1:  # where each change comes from: its key's last row event, inside the run's range
            for change in changes:
                assert change["_source_file"].startswith("binlog.") and change["_source_position"] > 4, change
        else:
            assert {(c["_source_file"], c["_source_position"]) for c in changes} == {(None, None)}, "a snapshot's"
        # Every version is as of NOW, a midnight: the first one's changes are of the day it ends, the others' of
        # the day the version before them starts (the first whose snapshot holds them).
        assert {c["dt"] for c in changes} == {"2025-12-31" if version == 1 else "2026-01-01"}
        kinds = {c["_change_type"] for c in changes}
        assert kinds <= {"insert", "update_preimage", "update_postimage", "delete"}
    assert {c["_change_type"] for c in by_version[1]} == {"insert"} and len(by_version[1]) == 200
    for round_ in (1, 2, 3):  # neither an undone update nor a short-lived row leaves a change
        assert not [c for v in by_version.values() if v is not by_version[1] for c in v
                    if c["id"] == 10_000 + round_]
