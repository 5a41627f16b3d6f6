"""Foreign keys with cascading actions on the real server: the check and the pre-flight refuse a child read from
the binlog (InnoDB changes its rows without row events), and both tell the binlog's compression."""

from __future__ import annotations

import os

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

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


def test_a_child_of_a_cascading_key_read_from_the_binlog_is_refused_and_the_compression_told(
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

    # Named, the two children of cascading keys fail the check (for good), each with its message; the third is not
    # among them.
    capfd.readouterr()
    with pytest.raises(AirflowFailException) as failed:
        check([named(schema, t.table) for t in tables], capture_conn, tmp_path)
    message = str(failed.value)
    assert message.startswith("2 tables named in the configuration cannot be captured:")
    assert (f"The table {schema}.deleted_with is the child of a foreign key with a cascading action: `fk_deleted` "
            f"(parent_id) REFERENCES {schema}.parent (id) ON DELETE CASCADE.") in message
    assert (f"The table {schema}.nulled_with is the child of a foreign key with a cascading action: `fk_nulled` "
            f"(parent_id) REFERENCES {schema}.parent (id) ON UPDATE SET NULL.") in message
    assert f"`capture: diff` in its table entry (`- source: {schema}.deleted_with`" in message
    assert "restricted" not in message
    logged = "".join(capfd.readouterr())
    assert "The server setting log_bin_compress is 'OFF': the binlog's events are not compressed" in logged

    # Matched by a pattern, they are left out and the others go on; in diff mode a child is exact, so captured.
    checked = check([named(schema, "nulled_with", capture="diff"), TablePattern(schema=schema, table="*")],
                    capture_conn, tmp_path)
    assert {t.source: t.capture for t in checked.tables} == {
        f"{schema}.nulled_with": "diff", f"{schema}.parent": "binlog", f"{schema}.restricted": "binlog"}
    (left_out,) = checked.skipped
    assert left_out.source == f"{schema}.deleted_with" and "ON DELETE CASCADE" in left_out.reason

    # The pre-flight tells the same: the two refused, the third ready, the compression.
    config = CdcConfig.from_dict({"source": {"mysql_conn_id": capture_conn}, "work": {"dir": str(tmp_path / "work")},
                                  "hive": {"warehouse_dir": str(tmp_path / "warehouse")},
                                  "tables": [{"source": f"{schema}.{t.table}"} for t in tables]})
    findings = [(f.level, f.area, f.text) for f in preflight(config).findings if f.area in ("source", "tables")]
    problems = [text for level, area, text in findings if level == "problem"]
    assert len(problems) == 2 and all("is the child of a foreign key with a cascading action" in p for p in problems)
    assert ("ok", "tables", f"{schema}.restricted → ods.{schema}_restricted: key id, from the binlog") in findings
    assert any(level == "ok" and text.startswith("The server setting log_bin_compress is 'OFF'")
               for level, _, text in findings)
