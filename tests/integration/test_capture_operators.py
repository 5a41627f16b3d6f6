"""The check and capture operators over the real server, several tables at once: their typed values, one
binlog pass skipping what each table has, and one table's bad input kept from the others."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pymysql
import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException
from airflow_cdc_testing.cluster import free_port

from airflow_cdc_provider.core.changelog import POSITION_COLUMNS, ChangelogSettings
from airflow_cdc_provider.core.config import HiveConfig, TableConfig, TablePattern, TableSettings
from airflow_cdc_provider.core.contract import Captured, CheckResult, Extraction, SourcePlan, TablePlan
from airflow_cdc_provider.core.history import HistorySettings
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.ledger import RunRef, plan_run
from airflow_cdc_provider.core.partitioning import NULL_PARTITION, PartitionSpec
from airflow_cdc_provider.core.records import RawHeader, parse_record
from airflow_cdc_provider.core.workdir import EVENTS_FILE, UPSERT_FILE, TableDir
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.operators.capture import MySqlBinlogExtractOperator, MySqlSnapshotOperator, RawReplayOperator
from airflow_cdc_provider.operators.check import CaptureCheckOperator
from airflow_cdc_provider.stages import binlog_pass as binlog_pass_module
from airflow_cdc_provider.stages import snapshot_run as snapshot_run_module
from tests.conftest import conn_env
from tests.integration.capture_helpers import apply_changes, read_rows, sections, source_rows
from tests.integration.test_source_hook import purge_binlogs_to

RUN = RunRef("ops", "manual__1")
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def schema(mariadb):
    name = f"ops_{os.urandom(3).hex()}"
    mariadb.execute(f"CREATE DATABASE {name}",
                    f"CREATE TABLE {name}.a (id INT PRIMARY KEY, v VARCHAR(20))",
                    f"CREATE TABLE {name}.b (k1 INT NOT NULL, k2 CHAR(2) NOT NULL, n INT, UNIQUE KEY (k1, k2))",
                    f"INSERT INTO {name}.a VALUES (1, 'a'), (2, 'b'), (3, 'c')",
                    f"INSERT INTO {name}.b VALUES (1, 'x', 10), (2, 'y', 20)")
    yield name
    mariadb.execute(f"DROP DATABASE {name}")


def named(schema: str, table: str, **settings) -> TableConfig:
    """The entry of one table by name, its Hive table named alike, with ``settings``."""
    return TableConfig(TableName(schema, table), table, TableSettings(**settings))


def every(schema: str, **settings) -> TablePattern:
    """The pattern of every table of ``schema``, with ``settings``."""
    return TablePattern(schema=schema, table="*", settings=TableSettings(**settings))


def check(entries, conn_id, tmp_path, time_zone="UTC", changelog=None, history=None) -> CheckResult:
    with DAG("ops", schedule=None):
        operator = CaptureCheckOperator(task_id="check", tables=entries,
                                        hive=HiveConfig(warehouse_dir=str(tmp_path / "warehouse"),
                                                        time_zone=time_zone, changelog=changelog, history=history),
                                        **sections(conn_id, tmp_path))
    return CheckResult.model_validate(operator.execute({}))


def stopped(checked: CheckResult) -> dict[str, str]:
    """The tables the check stopped, each with its reason."""
    return {t.source: t.reason for t in checked.refused}


def source_plan(checked: CheckResult, tmp_path, committed=None) -> SourcePlan:
    """Every table (its files under ``tmp_path``, a path or a URI) snapshot-planned, or incremental from ``committed[source]`` (a snapshot's watermark)."""
    tables = []
    for table in checked.tables:
        plan = plan_run(RUN, None, None, None)
        if committed and table.source in committed:
            from airflow_cdc_provider.core.ledger import Committed

            plan = plan_run(RUN, Committed(1, "/x/v000001", committed[table.source], NOW, RUN, "snapshot",
                                           table.columns), None, None)
        tables.append(TablePlan(table=table, plan=plan,
                                table_dir=TableDir(work_dir=str(tmp_path), hive_table=table.hive_table)))
    return SourcePlan(run=RUN, tables=tuple(tables))


def test_a_pattern_is_resolved_a_keyless_match_captured_by_a_diff_and_a_clash_left_out(mariadb, schema, capture_conn,
                                                                                      tmp_path, capfd):
    mariadb.execute(f"CREATE TABLE {schema}.log (at DATETIME, line TEXT)",
                    # Names differing only in case: one Hive table for two, which the check reports and leaves out.
                    f"CREATE TABLE {schema}.dup (id INT PRIMARY KEY)", f"CREATE TABLE {schema}.DUP (id INT PRIMARY KEY)")
    capfd.readouterr()
    checked = check([TablePattern(schema=schema, table="*")], capture_conn, tmp_path)
    assert [t.source for t in checked.tables] == [f"{schema}.a", f"{schema}.b", f"{schema}.log"]
    assert checked.tables[1].key == ("k1", "k2") and checked.tables[0].hive_table == f"ods.{schema}_a"
    a, _, log = checked.tables
    assert (log.key, log.capture, a.capture) == ((), "diff", "binlog"), "no key: a diff, the whole row its identity"
    upper, lower = checked.skipped
    assert (upper.source, lower.source) == (f"{schema}.DUP", f"{schema}.dup")
    assert f"The tables {schema}.DUP (matched by {schema}.*) and {schema}.dup (matched by {schema}.*) would both be " \
           f"copied into the Hive table ods.{schema}_dup" in upper.reason
    logged = "".join(capfd.readouterr())  # the task log, as Airflow's logging prints it
    assert f"[warning  ] Left out (matched by a pattern, but cannot be captured): {lower.reason}" in logged
    assert f"{schema}.log can be captured into ods.{schema}_log: no key (each row identified by all its values, " \
           "equal rows counted), by a diff" in logged
    # What a table with no key cannot have stops it with the reason when the table is named (the others go on, and
    # the run fails for it at its end); a pattern's match is left out.
    checked = check([named(schema, "log", capture="binlog"), TablePattern(schema=schema, table="*")], capture_conn,
                    tmp_path)
    assert re.match(f"The table {schema}.log has no primary key and no unique key on NOT NULL columns, and its entry "
                    "asks for `capture: binlog`", stopped(checked)[f"{schema}.log"])
    assert [t.source for t in checked.tables] == [f"{schema}.a", f"{schema}.b"]
    checked = check([TablePattern(schema=schema, table="*")], capture_conn, tmp_path, changelog=ChangelogSettings())
    assert f"{schema}.log" in {t.source for t in checked.skipped} and "given a `changelog:`" in next(
        t.reason for t in checked.skipped if t.source == f"{schema}.log")
    checked = check([named(schema, "nothere"), named(schema, "a")], capture_conn, tmp_path)
    assert stopped(checked)[f"{schema}.nothere"].startswith(f"The table {schema}.nothere does not exist")
    assert checked.refused[0].hive_table == "ods.nothere" and [t.source for t in checked.tables] == [f"{schema}.a"]
    # A `partition_by:` that does not fit the table's columns refuses the table alike: a pattern's match is left
    # out (b has no id), the others go on; a named table is stopped (a's v is no date).
    by_id = PartitionSpec.parse("truncate(id, 10)")
    checked = check([every(schema, partition_by=by_id)], capture_conn, tmp_path)
    assert [t.source for t in checked.tables] == [f"{schema}.a"]
    assert checked.tables[0].partitioning == by_id.resolve(checked.tables[0].columns)
    (b,) = [s for s in checked.skipped if s.source == f"{schema}.b"]
    assert b.reason.startswith(f"The table {schema}.b cannot be partitioned as its `partition_by:` says: The "
                               "partition spec 'truncate(id, 10) AS id_trunc' names the column 'id', which the table "
                               "does not have (its columns: k1, k2, n)")
    checked = check([named(schema, "a", partition_by=PartitionSpec.parse("day(v)"))], capture_conn, tmp_path)
    assert re.match(f"The table {schema}.a cannot be partitioned as its `partition_by:` says: .*cannot partition by "
                    "the column 'v' of type varchar", stopped(checked)[f"{schema}.a"])
    # A `changelog:` alike: c has a column `dt`, its changelog table's day column; and a_changelog's Hive table
    # would be a's changelog table, so a pattern leaves both out.
    mariadb.execute(f"CREATE TABLE {schema}.c (id INT PRIMARY KEY, dt DATE)",
                    f"CREATE TABLE {schema}.a_changelog (id INT PRIMARY KEY)")
    checked = check([every(schema, changelog=ChangelogSettings())], capture_conn, tmp_path)
    assert [(t.source, t.changelog) for t in checked.tables] == [(f"{schema}.b", ChangelogSettings())]
    why = {s.source: s.reason for s in checked.skipped}
    assert why[f"{schema}.c"].startswith(f"The table {schema}.c cannot have the changelog its `changelog:` (or `hive: "
                                         "changelog:`) asks for: the table has the column(s) dt, which its changelog "
                                         "table adds itself. Name the day column otherwise")
    assert why[f"{schema}.a"].startswith(f"The changelog table of {schema}.a would be ods.{schema}_a_changelog, the "
                                         f"Hive table {schema}.a_changelog is copied into")
    assert f"{schema}.a_changelog" in why
    # Named tables take `hive: changelog:` unless their entry says otherwise; one that cannot is stopped.
    day = ChangelogSettings(day_column="day")
    checked = check([named(schema, "c", changelog=day),
                     named(schema, "a", changelog=False), named(schema, "b")],
                    capture_conn, tmp_path, changelog=ChangelogSettings(snapshot="none"))
    assert {t.source: t.changelog for t in checked.tables} == {
        f"{schema}.a": None, f"{schema}.b": ChangelogSettings(snapshot="none"), f"{schema}.c": day}
    checked = check([named(schema, "c")], capture_conn, tmp_path, changelog=ChangelogSettings())
    assert re.match(f"The table {schema}.c cannot have the changelog .*the column", stopped(checked)[f"{schema}.c"])
    # A `history:` alike: d has a column `is_current`, which the history table adds; c's `dt` is the snapshots'.
    mariadb.execute(f"CREATE TABLE {schema}.d (id INT PRIMARY KEY, is_current TINYINT)")
    scd2 = HistorySettings(scd2=True)
    checked = check([every(schema, history=scd2)], capture_conn, tmp_path)
    assert {t.source: t.history for t in checked.tables} == {
        f"{schema}.{name}": scd2 for name in ("a", "a_changelog", "b", "c")}
    why = {s.source: s.reason for s in checked.skipped}
    assert set(why) == {f"{schema}.{name}" for name in ("d", "dup", "DUP", "log")}
    assert why[f"{schema}.d"].startswith(f"The table {schema}.d cannot have the history its `history:` (or `hive: history:`) "
                               "asks for: the table has the column(s) is_current, which its history tables add")
    daily = HistorySettings(daily=True)
    checked = check([named(schema, "c", history=False), named(schema, "d")],
                    capture_conn, tmp_path, history=daily)
    assert {t.source: t.history for t in checked.tables} == {f"{schema}.c": None, f"{schema}.d": daily}
    checked = check([named(schema, "c")], capture_conn, tmp_path, history=daily)
    assert re.match(f"The table {schema}.c cannot have the history .*the column", stopped(checked)[f"{schema}.c"])


# Where each stage is called from: the snapshot stage's run, and the binlog pass.
STAGE_HOMES = {"snapshot": snapshot_run_module, "extract": binlog_pass_module}


def received_by_stages(monkeypatch, names=("snapshot", "extract")) -> list[tuple[str, tuple, dict]]:
    """The arguments the capture operators hand each stage, recorded as the stages run."""
    calls: list[tuple[str, tuple, dict]] = []
    def recorder(name, stage):
        def recorded(*args, **kwargs):
            calls.append((name, args, kwargs))
            return stage(*args, **kwargs)

        return recorded

    for name in names:
        home = STAGE_HOMES[name]
        monkeypatch.setattr(home, name, recorder(name, getattr(home, name)))
    return calls


def plain_values(value, keys: list) -> list[str]:
    """The text of every value in ``value``, through dicts, lists, tuples and sets (whose keys go to ``keys``)."""
    if isinstance(value, dict):
        keys.extend(value)
        return [t for v in value.values() for t in plain_values(v, keys)]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [t for v in value for t in plain_values(v, keys)]
    return [str(value), repr(value)]


def test_snapshot_then_one_binlog_pass_for_two_tables_each_from_its_own_watermark(mariadb, schema, capture_conn,
                                                                                  tmp_path, monkeypatch):
    hook = MySqlSourceHook(capture_conn)
    stage_calls = received_by_stages(monkeypatch)
    checked = check([TablePattern(schema=schema, table="*")], capture_conn, tmp_path)
    a, b = (f"{schema}.a", f"{schema}.b")
    # a's snapshot is taken, then b changes, then b's snapshot: b's change lies between the two watermarks.
    only_a = SourcePlan(run=RUN, tables=source_plan(checked, tmp_path).tables[:1])
    snap_a = Captured.model_validate(MySqlSnapshotOperator(task_id="s", plan=only_a.to_xcom(),
                                                           **sections(capture_conn, tmp_path)).execute({}))
    mariadb.execute(f"INSERT INTO {b} VALUES (3, 'z', 30)")
    only_b = SourcePlan(run=RUN, tables=source_plan(checked, tmp_path).tables[1:])
    snap_b = Captured.model_validate(MySqlSnapshotOperator(task_id="s", plan=only_b.to_xcom(),
                                                           **sections(capture_conn, tmp_path)).execute({}))
    (input_a,), (input_b,) = snap_a.inputs, snap_b.inputs
    assert (input_a.upserts, input_b.upserts, input_b.key) == (3, 3, ("k1", "k2"))
    assert input_a.end < input_b.end

    mariadb.execute(f"UPDATE {a} SET id = 10 WHERE id = 1", f"DELETE FROM {a} WHERE id = 2",
                    f"INSERT INTO {a} VALUES (4, 'd,\"e\"\\n')")
    plan = source_plan(checked, tmp_path, committed={a: input_a.end, b: input_b.end})
    extraction = Extraction.model_validate(MySqlBinlogExtractOperator(
        task_id="e", plan=plan.to_xcom(), **sections(capture_conn, tmp_path)).execute({}))
    assert extraction.start == input_a.end, "one pass from the earliest watermark"
    parts = {t.source: t for t in extraction.tables}
    assert parts[a].counts == {"I": 1, "U": 1, "D": 2}
    assert parts[b].counts == {"I": 0, "U": 0, "D": 0} and not parts[b].changed, "b skipped what it had"
    assert parts[b].start == input_b.end and parts[b].end == extraction.end

    replayed = Captured.model_validate(RawReplayOperator(task_id="r", plan=plan.to_xcom(),
                                                         extraction=extraction.to_xcom(),
                                                         **sections(None, tmp_path)).execute({}))
    (merge_input,) = replayed.inputs
    assert (merge_input.source, merge_input.upserts, merge_input.deletes) == (a, 2, 2)
    header = RawHeader(a, merge_input.columns, merge_input.key)
    merged = apply_changes(header, read_rows(input_a.upsert_files), read_rows(merge_input.upsert_files),
                           read_rows([merge_input.delete_file]))
    assert merged == source_rows(mariadb, hook.raw_header(TableName(schema, "a")))

    # The stages got the hook (which opens their connections), never the capture user's password.
    password = json.loads(os.environ[conn_env(capture_conn)])["password"]
    assert password and sorted({name for name, _, _ in stage_calls}) == ["extract", "snapshot"]
    keys: list = []
    texts = plain_values([(args, kwargs) for _, args, kwargs in stage_calls], keys)
    assert not [t for t in texts if password in t] and not {"password", "passwd"} & {str(k) for k in keys}


def test_a_partitioned_tables_range_names_the_partitions_its_rows_left_and_the_replay_hands_them_on(
        mariadb, schema, capture_conn, tmp_path):
    # A TIMESTAMP, dated where the readers are (`hive: time_zone`): 20:00 UTC is the next day in Shanghai.
    mariadb.execute(f"CREATE TABLE {schema}.ev (id INT PRIMARY KEY, at TIMESTAMP NULL, note VARCHAR(10))",
                    f"CREATE TABLE {schema}.gone (id INT PRIMARY KEY, at DATE)",
                    "SET time_zone = '+00:00'",
                    f"INSERT INTO {schema}.ev VALUES (1, '2026-01-01 10:00', ''), (2, '2026-01-02 20:00', ''), "
                    "(3, NULL, ''), (4, '2026-01-04 10:00', ''), (5, '2026-01-05 10:00', ''), "
                    "(6, '2026-01-06 10:00', ''), (7, '2026-01-07 10:00', '')",
                    f"INSERT INTO {schema}.gone VALUES (1, '2026-01-01')")
    checked = check([named(schema, "ev", partition_by=PartitionSpec.parse("day(at)")),
                     named(schema, "gone", schema_changes="evolve", partition_by=PartitionSpec.parse("month(at)")),
                     TablePattern(schema=schema, table="a")], capture_conn, tmp_path, time_zone="Asia/Shanghai")
    ev, gone, a = (f"{schema}.{t}" for t in ("ev", "gone", "a"))
    assert [(t.source, t.partitioning.time_zone if t.partitioning else None) for t in checked.tables] == [
        (a, None), (ev, "Asia/Shanghai"), (gone, "UTC")]
    # ev has a changelog of every event: its replay keeps where each key's last change is in the binlog, its
    # extraction each update's before image, and its capture writes the range's events.
    checked = checked.model_copy(update={"tables": tuple(
        t.model_copy(update={"changelog": ChangelogSettings(mode="all")}) if t.source == ev else t
        for t in checked.tables)})
    start = MySqlSourceHook(capture_conn).current_watermark()
    mariadb.execute("SET time_zone = '+00:00'",
                    f"INSERT INTO {ev} VALUES (8, '2026-01-08 10:00', '')",  # a new row leaves nothing
                    f"UPDATE {ev} SET note = 'x' WHERE id = 1",  # neither the key nor the date changes
                    f"UPDATE {ev} SET at = '2026-01-01 12:00' WHERE id = 1",  # the same day
                    f"UPDATE {ev} SET at = '2026-01-09 10:00' WHERE id = 2",  # moves: leaves 2026-01-03 (Shanghai)
                    f"UPDATE {ev} SET at = '2026-01-03 10:00' WHERE id = 3",  # from NULL
                    f"UPDATE {ev} SET at = NULL WHERE id = 4",  # to NULL
                    f"UPDATE {ev} SET id = 50 WHERE id = 5",  # a new key: the old one is deleted from its day
                    f"DELETE FROM {ev} WHERE id IN (6, 8)",  # 8 leaves the day it came to in the range
                    f"UPDATE {ev} SET note = 'y' WHERE id = 7",
                    f"UPDATE {a} SET v = 'z' WHERE id = 1", f"DELETE FROM {a} WHERE id = 3",
                    # The column gone is partitioned by is dropped: its rows' partitions can no longer be told.
                    f"ALTER TABLE {gone} DROP COLUMN at", f"INSERT INTO {gone} VALUES (2)")
    plan = source_plan(checked, tmp_path, committed={t.source: start for t in checked.tables})
    extraction = Extraction.model_validate(MySqlBinlogExtractOperator(
        task_id="e", plan=plan.to_xcom(), **sections(capture_conn, tmp_path)).execute({}))
    parts = {t.source: t for t in extraction.tables}
    assert parts[ev].left_partitions == ("2026-01-03", "2026-01-04", "2026-01-05", "2026-01-06", "2026-01-08",
                                         NULL_PARTITION)
    assert parts[a].counts == {"I": 0, "U": 1, "D": 1} and parts[a].left_partitions == ()
    (failed,) = extraction.failed
    assert failed.source == gone and failed.error.startswith(
        f"The table {gone} is partitioned by its column at (month(at) AS dt), and at binlog file ")
    assert "the column at was dropped or renamed: The partition spec 'month(at) AS dt' names the column 'at', " \
           "which the table does not have (its columns: id)" in failed.error
    assert failed.error.endswith("then trigger a run with fresh_snapshot=true.")

    replayed = Captured.model_validate(RawReplayOperator(task_id="r", plan=plan.to_xcom(),
                                                         extraction=extraction.to_xcom(),
                                                         **sections(None, tmp_path)).execute({}))
    handed = {i.source: i.left_partitions for i in replayed.inputs}
    assert handed == {ev: parts[ev].left_partitions, a: ()}

    inputs = {i.source: i for i in replayed.inputs}
    assert not set(POSITION_COLUMNS) & set(pq.read_schema(inputs[a].upsert_files[0]).names), "a has no changelog"
    at = {}
    for file in (inputs[ev].upsert_files[0], inputs[ev].delete_file):
        assert pq.read_schema(file).names[-3:] == list(POSITION_COLUMNS)
        at.update({r["id"]: tuple(r[c] for c in POSITION_COLUMNS) for r in pq.read_table(file).to_pylist()})
    assert all(start.coordinate < (seq, pos) <= extraction.end.coordinate for seq, pos, _ in at.values())
    # Each key's last change, in the order the statements ran; a key change (5 → 50) is one row of one event,
    # and the DELETE of 6 and 8 one event of two rows.
    assert sorted(at, key=lambda k: (at[k], k)) == [1, 2, 3, 4, 5, 50, 6, 8, 7]
    assert at[5] == at[50] and at[6][:2] == at[8][:2] and (at[6][2], at[8][2]) == (0, 1)

    # The raw records: an update that keeps its key is B (the before image the server logged) then U; the key
    # change 5 → 50 is D then U; the counts count an update once.
    records = [parse_record(line) for f in parts[ev].files for line in Path(f).read_text("utf-8").splitlines()[1:]]
    assert [(r.op, r.values[0]) for r in records] == [
        ("I", 8), ("B", 1), ("U", 1), ("B", 1), ("U", 1), ("B", 2), ("U", 2), ("B", 3), ("U", 3), ("B", 4), ("U", 4),
        ("D", 5), ("U", 50), ("D", 6), ("D", 8), ("B", 7), ("U", 7)]
    assert [(r.values[0], r.values[2]) for r in records if r.op == "B"] == [(1, ""), (1, "x"), (2, ""), (3, ""),
                                                                           (4, ""), (7, "")]
    assert records[3].values[1] == records[1].values[1] != records[4].values[1], "the at before and after 12:00"
    assert parts[ev].counts == {"I": 1, "U": 7, "D": 3}
    # The events file, beside the upsert file; a table without such a changelog gets none.
    assert inputs[a].events_file is None
    assert inputs[ev].events_file == inputs[ev].upsert_files[0].replace(UPSERT_FILE, EVENTS_FILE)
    events = pq.read_table(inputs[ev].events_file).to_pylist()
    assert [(e["id"], e["note"], e["_change_type"], e["_change_ordinal"]) for e in events] == [
        (8, "", "insert", 1),
        (1, "", "update_preimage", 2), (1, "x", "update_postimage", 2),
        (1, "x", "update_preimage", 3), (1, "x", "update_postimage", 3),
        (2, "", "update_preimage", 4), (2, "", "update_postimage", 4),
        (3, "", "update_preimage", 5), (3, "", "update_postimage", 5),
        (4, "", "update_preimage", 6), (4, "", "update_postimage", 6),
        (5, "", "delete", 7), (50, "", "insert", 8), (6, "", "delete", 9), (8, "", "delete", 10),
        (7, "", "update_preimage", 11), (7, "y", "update_postimage", 11)]
    assert [(e["id"], e["at"] is None) for e in events if e["id"] in (3, 4)] == [(3, True), (3, False), (4, False),
                                                                                 (4, True)]
    where = [tuple(e[c] for c in POSITION_COLUMNS) for e in events]
    assert where == sorted(where), "in binlog order"
    assert {e["id"]: w for e, w in zip(events, where)} == at, "each key's last event is where replay says"


def test_a_purged_watermark_fails_its_table_alone_naming_the_file_and_retention_or_goes_to_the_heal(
        mariadb, schema, capture_conn, tmp_path):
    hook = MySqlSourceHook(capture_conn)
    checked = check([TablePattern(schema=schema, table="*")], capture_conn, tmp_path)
    a, b = (f"{schema}.a", f"{schema}.b")
    old = hook.current_watermark()
    mariadb.execute("FLUSH BINARY LOGS")
    purge_binlogs_to(mariadb, hook.current_watermark().file)
    recent = hook.current_watermark()
    mariadb.execute(f"UPDATE {b} SET n = 99 WHERE k1 = 1")
    plan = source_plan(checked, tmp_path, committed={a: old, b: recent})
    extraction = Extraction.model_validate(MySqlBinlogExtractOperator(
        task_id="e", plan=plan.to_xcom(), **sections(capture_conn, tmp_path, on_purged_binlog="fail")).execute({}))
    (failed,) = extraction.failed
    assert failed.source == a and old.file in failed.error and "expire_logs_days=" in failed.error
    assert not (tmp_path / f"ods.{schema}_a").exists(), "nothing written for the failed table"
    (part,) = extraction.tables
    assert part.source == b and part.counts["U"] == 1 and not extraction.broken
    # By default the table goes to the heal task, with why; the others as before.
    extraction = Extraction.model_validate(MySqlBinlogExtractOperator(
        task_id="e", plan=plan.to_xcom(), **sections(capture_conn, tmp_path)).execute({}))
    (broken,) = extraction.broken
    assert broken.source == a and old.file in broken.why and "no longer on the server" in broken.why
    assert not extraction.failed and [t.source for t in extraction.tables] == [b]


def test_a_table_whose_chain_breaks_goes_to_the_heal_or_with_on_broken_chain_stop_fails_naming_the_statement(
        mariadb, schema, capture_conn, tmp_path):
    hook = MySqlSourceHook(capture_conn)
    checked = check([TablePattern(schema=schema, table="*")], capture_conn, tmp_path)
    a, b = (f"{schema}.a", f"{schema}.b")
    start = hook.current_watermark()
    mariadb.execute(f"UPDATE {a} SET v = 'x' WHERE id = 1", f"TRUNCATE TABLE {a}", f"UPDATE {b} SET n = 1 WHERE k1 = 1")
    plan = source_plan(checked, tmp_path, committed={a: start, b: start})
    extraction = Extraction.model_validate(MySqlBinlogExtractOperator(
        task_id="e", plan=plan.to_xcom(), **sections(capture_conn, tmp_path, on_broken_chain="stop")).execute({}))
    (failed,) = extraction.failed
    assert failed.source == a and f"`TRUNCATE TABLE {a}`" in failed.error and "fresh_snapshot=true" in failed.error
    assert "on_broken_chain: heal" in failed.error and not extraction.broken
    assert [(t.source, t.counts["U"]) for t in extraction.tables] == [(b, 1)]
    # By default: to the heal task, with what broke the chain and where, and no way on to follow by hand.
    extraction = Extraction.model_validate(MySqlBinlogExtractOperator(
        task_id="e", plan=plan.to_xcom(), **sections(capture_conn, tmp_path)).execute({}))
    (broken,) = extraction.broken
    assert broken.source == a and f"`TRUNCATE TABLE {a}`" in broken.why and "fresh_snapshot" not in broken.why
    assert not extraction.failed and [t.source for t in extraction.tables] == [b]


def test_a_corrupt_raw_line_fails_its_table_naming_file_and_line(mariadb, schema, capture_conn, tmp_path):
    hook = MySqlSourceHook(capture_conn)
    checked = check([TablePattern(schema=schema, table="a")], capture_conn, tmp_path)
    start = hook.current_watermark()
    mariadb.execute(f"UPDATE {schema}.a SET v = 'Paris' WHERE id = 1", f"UPDATE {schema}.a SET v = 'Rome' WHERE id = 2")
    plan = source_plan(checked, tmp_path, committed={f"{schema}.a": start})
    extraction = MySqlBinlogExtractOperator(task_id="e", plan=plan.to_xcom(), **sections(capture_conn, tmp_path)).execute({})
    (raw,) = extraction["tables"][0]["files"]
    with open(raw, "r+", encoding="utf-8") as f:
        lines = f.readlines()
        lines[2] = lines[2][:20] + "\n"
        f.seek(0)
        f.writelines(lines)
        f.truncate()
    replayed = Captured.model_validate(RawReplayOperator(task_id="r", plan=plan.to_xcom(),
                                                         extraction=extraction,
                                                         **sections(None, tmp_path)).execute({}))
    (failure,) = replayed.failed
    assert failure.stage == "replay" and f"{raw}, line 3" in failure.error and not replayed.inputs
    assert not list(Path(plan.tables[0].run_dir.root).glob("*.parquet"))


def test_a_refused_login_fails_the_task_for_good_and_an_unreachable_server_is_left_to_retries(
        mariadb, capture_conn, monkeypatch, tmp_path):
    connection = json.loads(os.environ[f"AIRFLOW_CONN_{capture_conn.upper()}"])
    monkeypatch.setenv("AIRFLOW_CONN_MYSQL_WRONG_PASSWORD", json.dumps({**connection, "password": "not-the-pw-42"}))
    with pytest.raises(AirflowFailException) as refused:  # a retry would be refused the same way
        check([TableConfig(TableName("shop", "customers"), "customers")], "mysql_wrong_password", tmp_path)
    message = str(refused.value)
    assert f"refused the login of the Airflow connection 'mysql_wrong_password' (MySQL error 1045: Access denied " \
           f"for user '{connection['login']}'" in message
    assert "Check the connection's login and password" in message and "not-the-pw-42" not in message

    # Nothing listens there: the server may come back, so the task's retries take it.
    monkeypatch.setenv("AIRFLOW_CONN_MYSQL_NOWHERE", json.dumps({**connection, "port": free_port()}))
    with pytest.raises(pymysql.err.OperationalError) as unreachable:
        check([TableConfig(TableName("shop", "customers"), "customers")], "mysql_nowhere", tmp_path)
    assert not isinstance(unreachable.value, AirflowFailException) and unreachable.value.args[0] == 2003


# Each attack, and words of it that would show in the server's log had any of it been sent.
REREAD_ATTACKS = {
    "SLEEP(3600) = 0": ("holds the function SLEEP()", ["SLEEP"]),
    "BENCHMARK(1e9, MD5(1))": ("holds the function BENCHMARK()", ["BENCHMARK", "MD5"]),
    "GET_LOCK('x', 10)": ("holds the function GET_LOCK()", ["GET_LOCK"]),
    "id IN (SELECT id FROM shop.users WHERE pw LIKE 0x61)": ("holds a subquery", ["users", "0x61"]),
    "EXTRACTVALUE(1, CONCAT(0x7e, (SELECT pw FROM shop.users LIMIT 1)))": ("holds a subquery",
                                                                          ["EXTRACTVALUE", "users", "0x7e"]),
    "0) ORDER BY (1": ("is not one condition as after WHERE", ["ORDER BY"]),
    "@a := 1": ("holds the variable `@a`", ["@a", ":="]),
    "id = @@version": ("holds the variable `@@version`", ["@@version"]),
    "other.col = 1": ("names `other.col`, a column of another table", ["other.col"]),
    "id = 1; DO SLEEP(3600)": ("holds `;`", ["SLEEP"]),
}


def plan_context(pushed: dict | None = None) -> dict:
    """A plan task's context; what it pushes under a key of its own goes to ``pushed``."""
    from types import SimpleNamespace

    pushed = {} if pushed is None else pushed
    return {"dag_run": SimpleNamespace(dag_id="ops", run_id="manual__reread", run_type="manual",
                                       data_interval_end=None),
            "ti": SimpleNamespace(task_id="plan", try_number=1, get_dagrun_state=lambda **_: "success",
                                  xcom_push=lambda key, value: pushed.__setitem__(key, value))}


def sent_by(mariadb, since, conn_id: str) -> list[str]:
    """Every statement the connection's user sent since ``since`` (``track_binlog_dumps`` logs them)."""
    user = json.loads(os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"])["login"]
    return [text for (text,) in mariadb.execute(
        "SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log WHERE command_type IN ('Query', 'Execute') "
        f"AND event_time >= '{since.isoformat(sep=' ')}' AND user_host LIKE '{user}[%'")]


def test_a_reread_condition_that_is_not_plain_is_refused_and_nothing_of_it_reaches_the_server(
        mariadb, schema, capture_conn, tmp_path):
    """Through the plan task (before any lock) and the extract task's read alike: refused with what was found,
    and not one word of it in the server's general log. An accepted condition reaches the server only as the
    provider writes it, and reads the rows it names."""
    from airflow_cdc_provider.core.contract import Reread
    from airflow_cdc_provider.core.records import key_uid
    from airflow_cdc_provider.core.reread import reread_clause
    from airflow_cdc_provider.operators.plan import CdcPlanOperator
    from airflow_cdc_provider.stages.binlog_pass import PassSettings, read_again
    from airflow_cdc_provider.stages.reread import raw_uids, reread

    checked = check([TablePattern(schema=schema, table="a")], capture_conn, tmp_path)
    a = f"{schema}.a"
    work = tmp_path / "work"

    pushed: dict = {}

    def plan(asked: str, allow: bool = True) -> dict:
        with DAG("ops", schedule=None):
            operator = CdcPlanOperator(task_id="plan", check=checked.to_xcom(), reread=json.dumps({a: asked}),
                                       **sections(capture_conn, work, allow_reread=allow))
        return operator.execute(plan_context(pushed))

    hook = MySqlSourceHook(capture_conn)
    (table,) = source_plan(checked, tmp_path, committed={a: hook.current_watermark()}).tables
    since = mariadb.track_binlog_dumps()  # the general log, from now
    with pytest.raises(AirflowFailException, match=r"set `run: allow_reread: true` in the configuration"):
        plan("id = 1", allow=False)
    for attack, (found, _) in REREAD_ATTACKS.items():
        with pytest.raises(AirflowFailException) as refused:
            plan(attack)
        assert f"The reread condition {attack!r} on {a} {found}" in str(refused.value)
        assert "nothing was read or changed" in str(refused.value)
        # The extract task's read of a plan that holds it anyway (a plan written by hand): that table fails alone.
        failed: list = []
        asked = table.model_copy(update={"reread": Reread(where=attack, reason="test")})
        assert read_again(hook, [asked], {a: str(tmp_path / "raw")}, failed, PassSettings(), logging.getLogger()) == {}
        assert [(f.source, f.stage) for f in failed] == [(a, "reread")] and found in failed[0].error
    assert not work.exists(), "a refused parameter takes no lock and writes nothing"
    sent = sent_by(mariadb, since, capture_conn)
    assert sent, "the general log records the capture user's statements"
    for attack, (_, words) in REREAD_ATTACKS.items():
        leaked = [(word, text) for word in words for text in sent if word.lower() in text.lower()]
        assert not leaked, f"{attack!r} reached the server: {leaked}"

    # Accepted: the plan has the server plan the provider's statement; the read selects rows 1 and 3 by it.
    condition = "`A`.`ID` BETWEEN 1 AND 2 AND v NOT LIKE 'b%' OR v <=> 'c'"
    since = mariadb.track_binlog_dumps()
    plan(condition)
    # Its tables in short, for the status and the tables page (``core.status.SourceTables``).
    assert [(t["kind"]["source"], t["table_dir"]["work_dir"]) for t in pushed["tables"]["tables"]] == [(a, str(work))]
    header = hook.raw_header(TableName(schema, "a"))
    with hook.streaming_reads() as reads:
        result = reread(reads, header, reread_clause(header, 0, (), condition, True), tmp_path / "read")
    assert result.rows == 2 and raw_uids(result.files) == {key_uid([1]), key_uid([3])}
    where = "((`id` BETWEEN 1 AND 2 AND `v` NOT LIKE 'b%') OR `v` <=> 'c')"  # as the driver bound the values
    sent = sent_by(mariadb, since, capture_conn)
    assert [t for t in sent if t == f"SELECT 1 FROM `{schema}`.`a` WHERE {where} LIMIT 0"], sent  # the plan's check
    assert [t for t in sent if t == f"SELECT `id`, `v` FROM `{schema}`.`a` WHERE ({where})"], sent  # the read
    assert not [t for t in sent if "`A`.`ID`" in t], "the user's text itself is never sent"


def test_what_only_the_server_can_refuse_in_a_reread_condition_is_refused_before_any_lock(mariadb, schema,
                                                                                       capture_conn):
    from airflow_cdc_provider.core.errors import BadRereadCondition
    from airflow_cdc_provider.stages.reread import validate_where

    mariadb.execute(f"CREATE TABLE {schema}.c (id INT PRIMARY KEY, s VARCHAR(5) COLLATE latin1_swedish_ci, "
                    "t VARCHAR(5) COLLATE latin1_german1_ci)")
    header = MySqlSourceHook(capture_conn).raw_header(TableName(schema, "c"))
    with MySqlSourceHook(capture_conn).streaming_reads() as reads:
        validate_where(reads, header, "s = 'x' AND id BETWEEN 1 AND 2")
        with pytest.raises(BadRereadCondition, match="refused by the server: Illegal mix of collations"):
            validate_where(reads, header, "s = t")
        validate_where(reads, header, "t LIKE 'b%'")  # the same connection serves the next condition


def test_verify_reads_the_keys_a_range_changed_from_the_hooks_binlog_stream(mariadb, schema, capture_conn,
                                                                           tmp_path):
    from airflow_cdc_provider.stages.verify import changed_keys

    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(TableName(schema, "a"))
    start = hook.current_watermark()
    mariadb.execute(f"UPDATE {schema}.a SET v = 'z' WHERE id = 2", f"DELETE FROM {schema}.a WHERE id = 3")
    assert changed_keys(hook, header, start, hook.current_watermark(), tmp_path) == {"2", "3"}


def test_a_reread_goes_into_the_range_and_the_binlog_wins_even_when_the_range_ends_before_the_read(
        mariadb, schema, capture_conn, tmp_path):
    """The rows read again are the source's at the range's end: a row the binlog changed in the range takes the
    binlog's version; a scheduled run's range ends before the read, and a row changed after that end is left
    to the next run."""
    import time

    from airflow_cdc_provider.core.contract import Reread

    checked = check([TablePattern(schema=schema, table="a")], capture_conn, tmp_path)
    a = f"{schema}.a"
    hook = MySqlSourceHook(capture_conn)
    start = hook.current_watermark()
    mariadb.execute(f"UPDATE {a} SET v = 'in range' WHERE id = 1")
    time.sleep(1.1)  # binlog event times are whole seconds
    interval_end = dt.datetime.now(dt.UTC)
    time.sleep(1.1)
    mariadb.execute(f"UPDATE {a} SET v = 'after the end' WHERE id = 2")
    (table,) = source_plan(checked, tmp_path, committed={a: start}).tables
    ranged = table.model_copy(update={"plan": table.plan.model_copy(update={"stop_before": interval_end}),
                                      "reread": Reread(where="id >= 1", reason="test")})
    plan = SourcePlan(run=RUN, tables=(ranged,))
    extraction = Extraction.model_validate(MySqlBinlogExtractOperator(
        task_id="e", plan=plan.to_xcom(), **sections(capture_conn, tmp_path)).execute({}))
    (part,) = extraction.tables
    assert part.counts == {"I": 0, "U": 1, "D": 0} and part.end < hook.current_watermark()
    assert part.reread_rows == 2 and part.changed, "ids 1 and 3 read again; 2 changed after the range's end"
    assert os.path.basename(part.files[0]).startswith("reread-")

    replayed = Captured.model_validate(RawReplayOperator(task_id="r", plan=plan.to_xcom(),
                                                         extraction=extraction.to_xcom(),
                                                         **sections(None, tmp_path)).execute({}))
    (merge_input,) = replayed.inputs
    upserts = {row["id"]: row["v"] for row in read_rows(merge_input.upsert_files)}
    assert upserts == {1: "in range", 3: "c"} and merge_input.reread.where == "id >= 1"


def test_a_bucket_changed_after_a_scheduled_ranges_end_is_not_replaced_in_that_run(mariadb, schema, capture_conn,
                                                                                   tmp_path):
    """Its row at the range's end is not known (here: deleted after the end, before the read): replacing the
    bucket would drop the row a run early. The other buckets are replaced; that one waits for the next repair."""
    import time
    import zlib

    from airflow_cdc_provider.core.contract import Reread

    checked = check([TablePattern(schema=schema, table="a")], capture_conn, tmp_path)
    a = f"{schema}.a"
    start = MySqlSourceHook(capture_conn).current_watermark()
    mariadb.execute(f"UPDATE {a} SET v = 'in range' WHERE id = 1")
    time.sleep(1.1)
    interval_end = dt.datetime.now(dt.UTC)
    time.sleep(1.1)
    mariadb.execute(f"DELETE FROM {a} WHERE id = 2")
    (table,) = source_plan(checked, tmp_path, committed={a: start}).tables
    buckets = 64  # the three keys in three buckets
    which = tuple(sorted({zlib.crc32(str(i).encode()) % buckets for i in (1, 2, 3)}))
    assert len(which) == 3
    plan = SourcePlan(run=RUN, tables=(table.model_copy(update={
        "plan": table.plan.model_copy(update={"stop_before": interval_end}),
        "reread": Reread(buckets=buckets, which=which, reason="test")}),))
    extraction = Extraction.model_validate(MySqlBinlogExtractOperator(
        task_id="e", plan=plan.to_xcom(), **sections(capture_conn, tmp_path)).execute({}))
    (part,) = extraction.tables
    held = zlib.crc32(b"2") % buckets
    assert part.reread.which == tuple(b for b in which if b != held) and part.reread_rows == 2
    replayed = Captured.model_validate(RawReplayOperator(task_id="r", plan=plan.to_xcom(),
                                                         extraction=extraction.to_xcom(),
                                                         **sections(None, tmp_path)).execute({}))
    (merge_input,) = replayed.inputs
    assert merge_input.reread.which == part.reread.which
    assert {row["id"]: row["v"] for row in read_rows(merge_input.upsert_files)} == {1: "in range", 3: "c"}


def test_a_snapshot_and_a_binlog_pass_report_their_progress_as_they_go(mariadb, schema, capture_conn, tmp_path):
    from airflow_cdc_provider.stages.extract import PROGRESS_EVENTS, extract, in_one_directory
    from airflow_cdc_provider.stages.snapshot import snapshot

    hook = MySqlSourceHook(capture_conn)
    header = hook.raw_header(TableName(schema, "a"))
    chunks: list = []
    snapshot(hook, header, tmp_path / "snap", chunk_rows=1, progress=lambda rows, key: chunks.append((rows, key)))
    assert chunks[:3] == [(1, [1]), (2, [2]), (3, [3])]
    assert hook.integer_key_bounds(header) == (1, 3)

    start = hook.current_watermark()
    conn = mariadb.root_connection(schema)
    with conn.cursor() as cursor:
        for n in range(PROGRESS_EVENTS):
            cursor.execute("INSERT INTO a VALUES (%s, 'x')", (100 + n,))
    conn.close()
    high = hook.current_watermark()
    seen: list = []
    result = extract(hook, in_one_directory([header], tmp_path / "raw"), start, high, progress=lambda events, at: seen.append((events, at)))
    assert result.events == PROGRESS_EVENTS and seen, "the pass reported no progress"
    assert [e for e, _ in seen] == sorted(e for e, _ in seen) and all(start.coordinate <= at <= high.coordinate
                                                                        for _, at in seen)


def test_a_diff_mode_tables_changed_columns_are_put_to_its_policy_before_its_snapshot(schema, capture_conn,
                                                                                        tmp_path):
    from airflow_cdc_provider.core.ledger import Committed
    from airflow_cdc_provider.core.modes import Mode

    (table,) = check([named(schema, "a", capture="diff")], capture_conn, tmp_path).tables
    # Its version had a column the source has no longer, and lacks none.
    committed = Committed(1, "/x/v000001", None, NOW, RUN, "snapshot", (*table.columns, ("gone", "int(11)")),
                          digests="/x/digests.parquet")
    plan = plan_run(RUN, committed, None, None, capture="diff", columns=table.columns)
    assert plan.mode == Mode.SNAPSHOT

    def snapshot(policy: str) -> Captured:
        planned = TablePlan(table=table.model_copy(update={"schema_changes": policy}), plan=plan,
                            table_dir=TableDir(work_dir=str(tmp_path / policy), hive_table=table.hive_table),
                            committed=committed)
        return Captured.model_validate(MySqlSnapshotOperator(
            task_id="s", plan=SourcePlan(run=RUN, tables=(planned,)).to_xcom(), **sections(capture_conn, tmp_path)
        ).execute({}))

    refused = snapshot("strict")
    assert not refused.inputs and "dropped gone" in refused.failed[0].error, refused
    assert "`schema_changes: strict` takes on added columns only" in refused.failed[0].error
    assert not (tmp_path / "strict" / "ods.a" / "digests").exists(), "refused before anything was read"
    (taken,) = snapshot("evolve").inputs
    assert (taken.mode, taken.upserts, taken.digests_file is not None) == ("snapshot", 3, True)
