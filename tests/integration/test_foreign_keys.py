"""Foreign keys with cascading actions on the real server: the check and the pre-flight capture a child by a diff
(InnoDB changes its rows without row events in the binlog), and stop one whose entry sets `capture: binlog`; both
tell the binlog's compression."""

from __future__ import annotations

import os

import pytest
from airflow.sdk import DAG

from airflow_cdc_provider.core.config import CdcConfig, HiveConfig, TableConfig, TablePattern, TableSettings
from airflow_cdc_provider.core.contract import CheckResult
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.operators.check import CaptureCheckOperator
from airflow_cdc_provider.preflight import preflight
from tests.integration.capture_helpers import sections


@pytest.fixture
def schema(mariadb):
    name = f"fk_{os.urandom(3).hex()}"
    mariadb.execute(
        f"CREATE DATABASE {name}",
        f"CREATE TABLE {name}.parent (id INT PRIMARY KEY)",
        f"CREATE TABLE {name}.deleted_with (id INT PRIMARY KEY, parent_id INT NOT NULL, "
        f"CONSTRAINT fk_deleted FOREIGN KEY (parent_id) REFERENCES {name}.parent (id) ON DELETE CASCADE)",
        f"CREATE TABLE {name}.nulled_with (id INT PRIMARY KEY, parent_id INT, "
        f"CONSTRAINT fk_nulled FOREIGN KEY (parent_id) REFERENCES {name}.parent (id) ON UPDATE SET NULL)",
        f"CREATE TABLE {name}.restricted (id INT PRIMARY KEY, parent_id INT NOT NULL, "
        f"CONSTRAINT fk_restricted FOREIGN KEY (parent_id) REFERENCES {name}.parent (id) ON DELETE RESTRICT)",
    )
    yield name
    mariadb.execute(f"DROP DATABASE {name}")


def check(entries, conn_id, tmp_path) -> CheckResult:
    with DAG("fk", schedule=None):
        operator = CaptureCheckOperator(task_id="check", tables=entries,
                                        hive=HiveConfig(warehouse_dir=str(tmp_path / "warehouse")),
                                        **sections(conn_id, tmp_path))
    return CheckResult.model_validate(operator.execute({}))


def named(schema: str, table: str, **options) -> TableConfig:
    return TableConfig(TableName(schema, table), table, TableSettings(**options))


def test_a_child_of_a_cascading_key_is_captured_by_a_diff_unless_its_entry_insists_and_the_compression_told(
        schema, capture_conn, make_user, tmp_path, capfd):
    tables = [TableName(schema, t) for t in ("deleted_with", "nulled_with", "restricted", "parent")]
    rows = MySqlSourceHook(capture_conn).foreign_key_columns(tables)
    assert {(r.constraint_name, r.update_rule, r.delete_rule) for r in rows} == {
        ("fk_deleted", "RESTRICT", "CASCADE"), ("fk_nulled", "SET NULL", "RESTRICT"),
        ("fk_restricted", "RESTRICT", "RESTRICT")}
    # MariaDB hides REFERENTIAL_CONSTRAINTS from the capture user (SELECT alone), whose rules came from SHOW CREATE
    # TABLE: a user who may see them there reads the same.
    seeing = MySqlSourceHook(make_user(privileges=("SELECT", "REFERENCES")))
    assert sorted(seeing.foreign_key_columns(tables)) == sorted(rows)

    # Named without `capture:`, the two children of cascading keys are captured by a diff, each saying why; the
    # third is read from the binlog.
    capfd.readouterr()
    checked = check([named(schema, t.table) for t in tables], capture_conn, tmp_path)
    assert checked.refused == ()
    assert {t.source: (t.capture, t.cascades) for t in checked.tables} == {
        f"{schema}.deleted_with": ("diff", (f"`fk_deleted` (parent_id) REFERENCES {schema}.parent (id) ON DELETE "
                                            "CASCADE",)),
        f"{schema}.nulled_with": ("diff", (f"`fk_nulled` (parent_id) REFERENCES {schema}.parent (id) ON UPDATE SET "
                                           "NULL",)),
        f"{schema}.restricted": ("binlog", ()), f"{schema}.parent": ("binlog", ())}
    logged = "".join(capfd.readouterr())
    assert (f"{schema}.deleted_with can be captured into ods.deleted_with: key id, by a diff with its last version's "
            "row digests (capture: diff), since it is the child of a foreign key with a cascading action (`fk_deleted` "
            f"(parent_id) REFERENCES {schema}.parent (id) ON DELETE CASCADE)") in logged
    assert "The server setting log_bin_compress is 'OFF': the binlog's events are not compressed" in logged

    # An entry that sets `capture: binlog` stops its table, with the message and the ways out; the others go on.
    checked = check([named(schema, "deleted_with", capture="binlog"), named(schema, "parent")], capture_conn,
                    tmp_path)
    assert [t.source for t in checked.tables] == [f"{schema}.parent"]
    (stopped,) = checked.refused
    assert (stopped.source, stopped.hive_table) == (f"{schema}.deleted_with", "ods.deleted_with")
    assert stopped.reason.startswith(
        f"The table {schema}.deleted_with is the child of a foreign key with a cascading action: `fk_deleted` "
        f"(parent_id) REFERENCES {schema}.parent (id) ON DELETE CASCADE.")
    assert "Its entry sets `capture: binlog`: remove that" in stopped.reason

    # Matched by a pattern that sets `capture: binlog`, a child is left out and the others go on; in diff mode a
    # child is exact, so captured.
    checked = check([named(schema, "nulled_with", capture="diff"),
                     TablePattern(schema=schema, table="*", settings=TableSettings(capture="binlog"))],
                    capture_conn, tmp_path)
    assert {t.source: t.capture for t in checked.tables} == {
        f"{schema}.nulled_with": "diff", f"{schema}.parent": "binlog", f"{schema}.restricted": "binlog"}
    (left_out,) = checked.skipped
    assert left_out.source == f"{schema}.deleted_with" and "ON DELETE CASCADE" in left_out.reason

    # The pre-flight tells the same: the two captured by a diff and why, the third from the binlog, the one whose
    # entry insists on the binlog a problem, the compression.
    config = CdcConfig.from_dict({"source": {"mysql_conn_id": capture_conn}, "work": {"dir": str(tmp_path / "work")},
                                  "hive": {"warehouse_dir": str(tmp_path / "warehouse")},
                                  "tables": [{"source": f"{schema}.{t.table}"} for t in tables[1:]]
                                  + [{"source": f"{schema}.deleted_with", "capture": "binlog"}]})
    findings = [(f.level, f.area, f.text) for f in preflight(config).findings if f.area in ("source", "tables")]
    problems = [text for level, area, text in findings if level == "problem"]
    assert len(problems) == 1 and problems[0].startswith(f"The table {schema}.deleted_with is the child of a "
                                                         "foreign key with a cascading action"), problems
    assert ("ok", "tables", f"{schema}.restricted → ods.{schema}_restricted: key id, from the binlog") in findings
    assert any(level == "ok" and text.startswith(f"{schema}.nulled_with → ods.{schema}_nulled_with: key id, by a "
                                                 "diff") and "ON UPDATE SET NULL" in text
               for level, _, text in findings), findings
    assert any(level == "ok" and text.startswith("The server setting log_bin_compress is 'OFF'")
               for level, _, text in findings)
