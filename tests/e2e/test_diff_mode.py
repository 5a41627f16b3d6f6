"""Diff mode end to end: a server whose binlog cannot serve (binlog_format=MIXED) and a capture user with SELECT
alone, through the example DAG in real `airflow dags test` runs, real Spark and a real metastore.

The check refuses the binlog's way and names the diff's; in diff mode every run brings Hive level with the source
without reading the binlog, a run killed in its read or after its commit's switch leaves the table as before or
as committed, and its re-run completes; a run that finds nothing starts no Spark for its merge. The rolling
verify (the default) checks the tables with the capture user's SELECT alone.
"""

from __future__ import annotations

import random

import pytest
import yaml

from airflow_cdc_provider.core.config import VerifyConfig
from tests.e2e.status import status
from tests.e2e.test_pipeline import DAG_ID, ROUNDS, Pipeline
from tests.e2e.test_verify import verification


def _random_changes(pipeline: Pipeline, rng: random.Random, count: int) -> None:
    ids = [row[0] for row in pipeline.server.execute(f"SELECT order_no FROM {pipeline.schema}.orders")]
    statements = []
    for n in range(count):
        victim, op = rng.choice(ids), rng.random()
        if op < 0.3:
            statements.append(f"INSERT INTO {{s}}.orders (order_no, line_no, customer_id, amount, note) VALUES "
                              f"({9000 + n}, {rng.randint(1, 3)}, 1, {rng.randint(1, 999)}.25, 'random {n}')")
        elif op < 0.7:
            statements.append(f"UPDATE {{s}}.orders SET amount = amount + 0.01, note = NULL WHERE order_no = {victim}")
        elif op < 0.9:
            statements.append(f"DELETE FROM {{s}}.orders WHERE order_no = {victim} LIMIT 1")
        else:
            statements.append(f"UPDATE IGNORE {{s}}.orders SET line_no = line_no + 10 WHERE order_no = {victim}")
    statements.append(f"UPDATE {{s}}.customers SET name = CONCAT(name, '.') WHERE id = {rng.randint(1, 3)}")
    pipeline.sql(*statements)


def _assert_verified_clean(pipeline: Pipeline) -> None:
    """The latest run's rolling verify checked a slice of each table and found it equal to the source."""
    found = verification(pipeline)
    assert set(found) == {f"{pipeline.schema}.{t}" for t in pipeline.tables}, found
    for table in found.values():
        assert (table["status"], table["slice"]["of"]) == ("clean", VerifyConfig().slices), table


@pytest.mark.usefixtures("airflow_home")
def test_a_server_without_a_usable_binlog_is_captured_by_diffs_through_kills(start_server, make_user, tmp_path,
                                                                              metastore_service):
    server = start_server(binlog_format="MIXED")
    conn = make_user(privileges=("SELECT",), server=server)
    pipeline = Pipeline(server, conn, tmp_path, ["orders", "customers"], metastore=metastore_service)

    # From the binlog, as by default: refused, every problem named, and the way on without it.
    code, output = pipeline.run("2026-12-01T00:00:00+00:00")
    assert code != 0
    for said in ("The server setting binlog_format is 'MIXED', but capture needs ROW", "lacks the privilege "
                 "REPLICATION SLAVE", "Or capture without the binlog: `capture: diff`"):
        assert said in output, (said, output[-6000:])

    for entry in pipeline.config["tables"]:
        entry["capture"] = "diff"
    # orders partitioned: a diff's deletes carry only their key, so the merge looks up which partitions hold them.
    pipeline.config["tables"][0]["partition_by"] = "truncate(order_no, 1000)"
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    code, output = pipeline.run("2026-12-01T01:00:00+00:00")
    assert code == 0, output[-8000:]
    assert {pipeline.outcome(t)["mode"] for t in pipeline.tables} == {"snapshot"}
    assert "by a diff with its last version's row digests (capture: diff)" in output
    pipeline.assert_all_equal()

    rng = random.Random(2026_12_01)
    for n, statements in ((2, ROUNDS[0]), (3, ROUNDS[1] + ROUNDS[2])):
        pipeline.sql(*statements)
        _random_changes(pipeline, rng, 12)
        date = f"2026-12-01T0{n}:00:00+00:00"
        before = {t: pipeline.ledger(t).committed() for t in pipeline.tables}
        if n == 2:
            # Killed in its read, once it knows the changes: nothing is committed, the digests kept are the
            # version's, and the re-run reads the source again.
            code, output = pipeline.run(date, env={"CDC_FAILPOINT": "diff.compared"})
            assert code != 0 and "failpoint diff.compared: killing process" in output, output[-6000:]
            assert {t: pipeline.ledger(t).committed() for t in pipeline.tables} == before
        if n == 3:
            # The default verify from here: the rolling verify checks a slice of each table in every run, with the
            # capture user's SELECT alone (a diff's version has no watermark to ask the binlog about).
            del pipeline.config["verify"]
            pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
            # Killed after the metastore was switched and before the ledger knew: the re-run merges its own
            # changes onto the version the diff compared with, again, and records that.
            code, output = pipeline.run(date, env={"CDC_FAILPOINT": "merge.task.committed"})
            assert code != 0 and "failpoint merge.task.committed: killing process" in output, output[-6000:]
        code, output = pipeline.run(date)
        assert code == 0, output[-8000:]
        orders = pipeline.outcome("orders")
        assert (orders["mode"], orders["status"]) == ("diff", "committed"), orders
        assert orders["watermark"] is None and orders["as_of"], orders
        assert " diff " in output and "(read without the binlog)" in output
        committed = pipeline.ledger("orders").committed()
        assert committed.watermark is None and committed.digests and committed.version > before["orders"].version
        assert orders["deletes"] > 0, orders  # found by the diff, their partitions looked up
        pipeline.assert_all_equal()
        if n == 3:
            _assert_verified_clean(pipeline)

    # Nothing changed: the diff finds nothing, no Spark application starts, the versions stay and are newer.
    before = {t: pipeline.ledger(t).committed() for t in pipeline.tables}
    code, output = pipeline.run("2026-12-01T08:00:00+00:00")
    assert code == 0, output[-8000:]
    assert "No table has changes to merge: no Spark application was started." in output
    for table in pipeline.tables:
        after = pipeline.ledger(table).committed()
        assert pipeline.outcome(table)["status"] == "idle"
        assert after.version == before[table].version and after.as_of > before[table].as_of
    _assert_verified_clean(pipeline)
    digests = sorted(p.name for p in (tmp_path / "work" / f"{pipeline.database}.orders" / "digests").iterdir())
    assert digests == [pipeline.ledger("orders").committed().digests.rsplit("/", 1)[-1]], \
        "only the digests of the committed version are kept"

    # The status command: both tables current, captured by diffs, at their ledgers' versions, the idle run the
    # latest; the text table says the same.
    code, rows, text = status(DAG_ID, pipeline.database, max_lag="100d")
    assert code == 0 and set(rows) == {f"{pipeline.schema}.{t}" for t in pipeline.tables}, text
    for table in pipeline.tables:
        row = rows[f"{pipeline.schema}.{table}"]
        committed = pipeline.ledger(table).committed()
        assert (row["state"], row["kind"]["capture"], row["version"], row["latest_status"]) == (
            "current", ["diff"], committed.version, "idle"), row
        assert row["kind"]["hive_table"] == f"{pipeline.database}.{table}" and row["reason"] == "", row
    assert text.splitlines()[0].split()[:2] == ["STATE", "DAG"] and "2 current" in text, text

    # The idle run again, after every row of orders changed: its tables already committed, its verify checks the
    # next slices, and orders' differs from the version. A diff's version has no binlog position to tell writes in
    # flight from differences, so the table is not verified, and says why; nothing is asked of the server that a
    # user with SELECT alone may not ask, and the run succeeds.
    pipeline.sql("UPDATE {s}.orders SET amount = amount + 1")
    code, output = pipeline.run("2026-12-01T08:00:00+00:00")
    assert code == 0, output[-8000:]
    found = verification(pipeline)
    orders = found[f"{pipeline.schema}.orders"]
    assert (orders["status"], orders["slice"]["index"]) == ("not_verified", 2), orders
    assert "buckets differ, and the version was read without the binlog (capture: diff)" in orders["reason"], orders
    assert found[f"{pipeline.schema}.customers"]["status"] == "clean", found
    assert f"{pipeline.schema}.orders" in output and "not verified, " in output, output[-8000:]
