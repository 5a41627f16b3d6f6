"""Verify end to end: real `airflow dags test` runs, a real MariaDB written to meanwhile, real Spark.

A clean copy verifies clean run after run while writers keep changing the source (the rows they change after
the version's watermark are told apart through the binlog); a Hive version changed on purpose is found, with
the keys that differ; a table of every awkward type verifies clean; a table whose key holds zero dates (NULL in
Hive) stays one row per key through deletes, re-inserts and updates, and its drifted row is repaired.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_cdc_provider.core.ledger import VERSION_FILE, VersionInfo
from tests.e2e.status import status
from tests.e2e.test_example_dag import latest_xcoms
from tests.e2e.test_pipeline import DAG_ID, Pipeline
from tests.e2e.writers import Writers
from tests.integration.fidelity_helpers import (
    DDL,
    ZERO_DATE_KEY_CHANGES,
    ZERO_DATE_KEY_DDL,
    ZERO_DATE_KEY_ROWS,
    ZERO_KEY,
    insert_cases,
    zero_date_statements,
)


def verification(pipeline: Pipeline) -> dict[str, dict]:
    """The latest run's verify result, by source table."""
    found = latest_xcoms(DAG_ID, key="verification").get("source.verify") or {"tables": []}
    return {t["source"]: t for t in found["tables"]}


def rewrite(files: list[Path], table: pa.Table) -> None:
    """Replace a version's files by one holding ``table``, as another writer of the warehouse would. Spark wrote
    its timestamps as UTC instants (INT96, which pyarrow reads without a zone): written back as such."""
    for n, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.tz is None:
            table = table.set_column(n, field.name, table.column(n).cast(pa.timestamp("us", tz="UTC")))
    for f in files:
        f.unlink()
        f.with_name(f".{f.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the file as Spark wrote it
    pq.write_table(table, files[0])


def tamper(location: str, key: str, remove, alter, value, add) -> None:
    """Change a version's files as a manual write to the warehouse would: a row removed, a value altered, a row
    added (a copy of another row under a new key)."""
    files = sorted(Path(location.removeprefix("file:")).glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    column = table.column_names.index(alter[0])
    keys = table.column(key).to_pylist()
    altered = table.column(alter[0]).to_pylist()
    altered[keys.index(alter[1])] = value
    table = table.set_column(column, alter[0], pa.array(altered, table.schema.field(alter[0]).type))
    added = table.filter(pc.equal(table.column(key), add[0]))
    added = added.set_column(added.column_names.index(key), key, pa.array([add[1]], table.schema.field(key).type))
    rewrite(files, pa.concat_tables([table.filter(pc.not_equal(table.column(key), remove)), added]))


def tamper_zero_key(location: str) -> None:
    """The row whose key is all zero dates (NULL in Hive) altered, and held twice, in a version's files."""
    files = sorted(Path(location.removeprefix("file:")).glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    zero = pc.and_(pc.and_(pc.equal(table.column("id"), 1), pc.is_null(table.column("dtval"))),
                   pc.and_(pc.is_null(table.column("dval")), pc.equal(table.column("tval"), 0)))
    assert pc.sum(zero.cast("int32")).as_py() == 1
    notes = pc.if_else(zero, pa.scalar("drifted"), table.column("note"))
    table = table.set_column(table.column_names.index("note"), "note", notes)
    rewrite(files, pa.concat_tables([table, table.filter(zero)]))


@pytest.mark.usefixtures("airflow_home")
def test_verify_finds_a_tampered_version_and_reports_nothing_for_a_clean_one_under_writes(mariadb, capture_conn,
                                                                                          tmp_path, metastore_service):
    pipeline = Pipeline(mariadb, capture_conn, tmp_path, ["orders", "customers"], metastore=metastore_service)
    mariadb.execute(DDL.format(name=f"`{pipeline.schema}`.`all_types`"))
    insert_cases(mariadb, f"`{pipeline.schema}`.`all_types`", 1)
    pipeline.sql("INSERT INTO {s}.customers (email, name, city, created_at) SELECT CONCAT('c', seq, '@example.com'),"
                 " CONCAT('C', seq), NULL, '2026-01-01' FROM {s}.seq_1_to_300")
    pipeline.config["tables"].append({"source": f"{pipeline.schema}.all_types", "target": "all_types"})
    # customers partitioned: verified through its version's partitions, spread over version directories, and
    # repaired by rewriting the partitions that hold the repaired buckets' rows.
    pipeline.config["tables"][1]["partition_by"] = "truncate(id, 100)"
    # A key of (id, DATETIME, DATE, TIME) holding zero dates, NULL in Hive: snapshotted, changed through the binlog
    # (deleted and inserted again, updated, its key moved), verified, drifted and repaired like the others.
    zero_keys = f"`{pipeline.schema}`.`datetime_key`"
    mariadb.execute(*zero_date_statements(zero_keys, ZERO_DATE_KEY_DDL, f"INSERT INTO {{name}} VALUES "
                                          f"{ZERO_DATE_KEY_ROWS}"))
    pipeline.config["tables"].append({"source": f"{pipeline.schema}.datetime_key", "target": "datetime_key"})
    pipeline.config["verify"] = {"every": 1, "bucket_rows": 50, "on_difference": "fail", "repair": False}
    pipeline.config["progress_seconds"] = 0  # a progress line after each chunk, and every few thousand events
    pipeline.configure()
    orders, customers, all_types, datetime_key = (f"{pipeline.schema}.{t}"
                                                  for t in ("orders", "customers", "all_types", "datetime_key"))

    # Runs while four writers change orders and customers: each verifies every table, and finds it clean.
    in_flight = 0
    with Writers(mariadb, pipeline.schema, threads=4, pause=0.03) as writers:
        for n in range(2):
            writers.wait_for(50 * (n + 1))
            if n == 1:
                mariadb.execute(*zero_date_statements(zero_keys, *ZERO_DATE_KEY_CHANGES))
            code, output = pipeline.run(f"2026-05-01T0{n}:00:00+00:00")
            assert code == 0, output[-8000:]
            if n == 0:  # the snapshots' progress, in the tasks' log
                assert f"snapshot of {customers}: 302 rows in " in output and "100% done" in output
            else:
                assert "binlog pass for 4 tables: done, " in output
            found = verification(pipeline)
            assert {s: t["status"] for s, t in found.items()} == {orders: "clean", customers: "clean",
                                                                   all_types: "clean", datetime_key: "clean"}, found
            assert found[orders]["rows"] > 0 and found[all_types]["rows"] > 0
            assert found[datetime_key]["rows"] == 5 + n, "one row for each key, however many zero dates it holds"
            in_flight += found[orders]["in_flight"]
    assert in_flight > 0, "the writers changed no row under verify: the test did not exercise the binlog filter"

    # The last version changed behind the pipeline's back: verify names the three keys and fails the run.
    mariadb.execute(*zero_date_statements(zero_keys, f"UPDATE {{name}} SET note = 'third' WHERE {ZERO_KEY}"))
    code, output = pipeline.run("2026-05-01T05:00:00+00:00")
    assert code == 0, output[-8000:]
    assert verification(pipeline)[datetime_key]["status"] == "clean"
    committed = pipeline.ledger("customers").committed()
    listed = dict(VersionInfo.from_text((Path(committed.location.removeprefix("file:")) / VERSION_FILE)
                                        .read_text()).partitions)
    tamper(listed["0"], "id", remove=1, alter=("city", 2), value="Tampered", add=(1, 999))
    tamper_zero_key(pipeline.ledger("datetime_key").committed().location)
    code, output = pipeline.run("2026-05-01T06:00:00+00:00", json.dumps({"verify": True}))
    assert code != 0, output[-8000:]
    assert customers in verification(pipeline), output[-8000:]
    found = verification(pipeline)[customers]
    assert found["status"] == "different" and found["version"] == committed.version
    assert {(k["key"], k["kind"]) for k in found["keys"]} == {("1", "missing"), ("2", "different"),
                                                              ("999", "extra")}
    assert "differ from the source" in output and f"{customers}" in output
    assert verification(pipeline)[orders]["status"] == "clean"
    drifted = verification(pipeline)[datetime_key]
    assert drifted["status"] == "different" and [(k["key"], k["kind"]) for k in drifted["keys"]] == [
        ("1#NULL#NULL#0", "different")]
    # The status: every table current (the run failed on its verify, after its commits), customers verified
    # different in the buckets of its three keys, their repair pending; no key (a row's value) in it.
    code, rows, text = status(DAG_ID, pipeline.database, max_lag="100d")
    assert code == 0 and {r["state"] for r in rows.values()} == {"current"}, text
    mark = rows[customers]["verify"]
    assert (mark["status"], mark["differing_buckets"], mark["differences"], mark["version"]) == (
        "different", len(found["repair_buckets"]), 3, committed.version), mark
    assert rows[customers]["repair"] == "pending" and rows[orders]["verify"]["status"] == "clean"
    assert "Tampered" not in json.dumps(rows) and f"{len(found['repair_buckets'])} buckets differ, pending" in text

    # A re-read while the configuration does not allow it (the default) fails the run before any lock, and changes
    # nothing; the runs after allow it.
    orders_version = pipeline.ledger("orders").committed().version
    code, output = pipeline.run("2026-05-01T07:00:00+00:00", json.dumps({"reread": {orders: "order_no > 1"}}))
    assert code != 0 and "This run was triggered with the parameter reread" in output, output[-8000:]
    assert "set `run: allow_reread: true` in the configuration" in output
    assert pipeline.ledger("orders").committed().version == orders_version
    # That run stopped every table before any outcome: the status says which task, in which run, and exits with 1.
    code, rows, text = status(DAG_ID, pipeline.database, max_lag="100d")
    assert code == 1 and {r["state"] for r in rows.values()} == {"stopped"}, text
    assert rows[orders]["reason"].startswith("the task source.plan failed in the run ") and \
        rows[orders]["version"] == orders_version, rows[orders]
    pipeline.config["run"] = {"allow_reread": True}
    pipeline.configure()

    # Orders altered in Hive too. One run, with the writers going again, repairs customers (its differing buckets
    # read again) and re-reads the orders a condition names; the run's own verify finds both level.
    orders_location = pipeline.ledger("orders").committed().location
    files = sorted(Path(orders_location.removeprefix("file:")).glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    amounts = [a * 10 if no in (1001, 1002) else a for no, a in zip(table.column("order_no").to_pylist(),
                                                                  table.column("amount").to_pylist())]
    table = table.set_column(table.column_names.index("amount"), "amount",
                             pa.array(amounts, table.schema.field("amount").type))
    rewrite(files, table)
    with Writers(mariadb, pipeline.schema, threads=4, pause=0.03) as writers:
        writers.wait_for(writers.commits + 50)
        code, output = pipeline.run("2026-05-01T08:00:00+00:00", json.dumps(
            {"repair": True, "reread": {orders: "order_no BETWEEN 1001 AND 1002"}}))
        assert code == 0, output[-8000:]
        xcoms = latest_xcoms(DAG_ID)
        repaired = pipeline.extraction("customers", xcoms)
        assert repaired["reread"]["which"] == list(found["repair_buckets"]) and repaired["reread_rows"] >= 1
        assert 1 <= len(found["repair_buckets"]) < found["buckets"]  # just the buckets of the three keys
        assert pipeline.extraction("orders", xcoms)["reread_rows"] == 3
        assert pipeline.extraction("datetime_key", xcoms)["reread"]["which"] == list(drifted["repair_buckets"])
        assert {s: t["status"] for s, t in verification(pipeline).items()} == {
            orders: "clean", customers: "clean", all_types: "clean", datetime_key: "clean"}
    # The repair's commit settled what the verify had left for it.
    assert not (tmp_path / "work" / f"{pipeline.database}.customers" / "verify" / "repair.json").exists()
    code, rows, text = status(DAG_ID, pipeline.database, max_lag="100d")
    assert code == 0 and {r["state"] for r in rows.values()} == {"current"}, text
    assert (rows[customers]["verify"]["status"], rows[customers]["repair"]) == ("clean", None), rows[customers]
    assert rows[customers]["version"] > committed.version and rows[orders]["latest_status"] == "committed"

    # The defaults from here (a rolling verify that repairs, and warns), in 2 slices. Rows changed with
    # sql_log_bin=0, which no event announces, in both slices: each run's slice finds its own and succeeds, and the
    # next run reads them again, until Hive equals the source with no one acting.
    pipeline.config["verify"] = {"slices": 2, "bucket_rows": 50}
    pipeline.configure()
    # The key is an integer: each slice is a range of its values, the low ids in one and the high in the other.
    top = sorted(int(row[0]) for row in mariadb.execute(
        f"SELECT id FROM `{pipeline.schema}`.customers ORDER BY id DESC LIMIT 10"))
    low = {str(i) for i in range(10, 30)} | {"40"}
    mariadb.execute("SET SESSION sql_log_bin = 0",
                    f"UPDATE `{pipeline.schema}`.customers SET city = 'Drifted' WHERE id BETWEEN 10 AND 29",
                    f"UPDATE `{pipeline.schema}`.customers SET city = 'Drifted' WHERE id >= {top[0]}",
                    f"DELETE FROM `{pipeline.schema}`.customers WHERE id = 40", "SET SESSION sql_log_bin = 1")
    slices = []
    for n in range(3):
        code, output = pipeline.run(f"2026-05-01T1{n}:00:00+00:00")
        assert code == 0, output[-8000:]
        found = verification(pipeline)[customers]
        assert found["slice"]["of"] == 2 and found["buckets"] >= 2, found
        slices.append((found["slice"]["index"], found["status"]))
        keys = {k["key"] for k in found["keys"]}
        if n == 0:
            # The low slice: the low ids' drift, and none of the high ids'.
            assert found["status"] == "different" and "rolling verify" in output
            assert keys and keys <= low, keys
            assert {k["kind"] for k in found["keys"]} <= {"different", "extra"}
        if n == 1:
            repaired = pipeline.extraction("customers")
            assert repaired["reread"] and repaired["reread_rows"] >= 1, repaired
            # The high slice finds the high ids' drift, unless the repair's buckets (the table's usual ones, each
            # holding keys from the whole range) already read those rows again.
            if found["status"] == "different":
                assert keys and keys <= {str(i) for i in top}, keys
            else:
                pipeline.assert_all_equal(["customers"])
    assert [index for index, _ in slices] == [(slices[0][0] + n) % 2 for n in range(3)], slices
    assert slices[2][1] == "clean", slices
    # The writers' last changes came with these runs. all_types: its last verify above; its values, the fidelity
    # tests.
    pipeline.assert_all_equal(["orders", "customers", "datetime_key"])
