"""A heal's digests of a Hive version against a real server and real Spark: the digests file the Spark job and
``digests_file_from_spark`` make of a merged version equals, row for row, the one the server computes for the same
rows (a diff-mode snapshot's), for tables of every type and keys of every shape; a version not read as the table is
refused with its reason while the others are written, and so is one read for another zone than its DATETIMEs
were written for; and a driver killed before it writes leaves nothing.

On MariaDB the snapshot's digest (``row_digest``, every JSON by its text) is verify's (``every_json=False``): both
are ``JSON_NORMALIZE``'s, so the server's file is the heal's own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from airflow_cdc_testing.hive import run_spark_job

from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.merge import MergeJob, VersionRefused
from airflow_cdc_provider.core.version_digests import DigestsJob, DigestsJobs
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.spark import MERGE_JOB
from airflow_cdc_provider.stages.diff import digests_schema
from airflow_cdc_provider.stages.snapshot import snapshot
from airflow_cdc_provider.stages.version_digests import digests_file_from_spark
from tests.conftest import CONFORMANCE_SQL
from tests.integration.fidelity_helpers import (
    DDL,
    ZERO_DATE_KEY_DDL,
    ZERO_DATE_KEY_ROWS,
    insert_cases,
    zero_date_statements,
)
from tests.integration.merge_helpers import Table
from tests.integration.test_fidelity import CONFORMANCE_UPDATES

pytestmark = pytest.mark.spark

DIGESTS_JOB = str(Path(MERGE_JOB).with_name("digests_job.py"))
ZONE = "America/New_York"  # the readers' zone of the composite key's table: its DATETIMEs are held as its instants

# 1 to n as signed integers (the sequence engine's are unsigned: ``seq - 50`` would be out of range).
NUMBERS = "(SELECT CAST(seq AS SIGNED) AS seq FROM seq_1_to_{}) AS numbers"

# Ordinary rows beside the fidelity cases' awkward ones: every column of most types set, some NULL.
ALL_TYPES_ROWS = (
    "INSERT INTO {name} (id, i8, u8, i32, u32, i64, u64, d10, d38, d65, f, db, bit1, bit9, en, st, js, bn, vb, tm6, "
    "yr, d, dt6, ts6, pt, s, c, mb4, l1, ip4, uu) SELECT 1000 + seq, seq % 100 - 50, seq % 200, seq * 7919, seq, "
    "seq * 1000000007, 18446744073709551615 - seq, seq / 7, seq / 3, seq / 9, seq / 11, seq / 13, seq % 2, "
    "seq % 512, ELT(1 + seq % 3, 'red', 'white', 'it''s'), ELT(1 + seq % 4, '', 'a', 'a,b', 'c d'), "
    "IF(seq % 5 = 0, NULL, JSON_OBJECT('n', seq, 'k', CONCAT('v', seq), 'l', JSON_ARRAY(seq / 4, 'x'))), "
    "UNHEX(LPAD(HEX(seq), 8, '0')), IF(seq % 6 = 0, '', UNHEX(HEX(seq))), "
    "SEC_TO_TIME(seq * 3601.5 - 300000), 1901 + seq % 250, '2024-02-29' + INTERVAL seq DAY, "
    "'1969-12-31 23:59:59.999999' + INTERVAL seq * 86401 SECOND, FROM_UNIXTIME(seq * 864000.25), "
    "ST_GeomFromText(CONCAT('POINT(', seq, ' ', seq / 3, ')')), CONCAT('row ', seq, IF(seq % 7 = 0, ' ', '')), "
    "LEFT(CONCAT('c', seq), 5), CONCAT('ü', seq, '€😀'), CONCAT('café ', seq), CONCAT('10.0.', seq % 256, '.1'), "
    "CONCAT('00000000-0000-0000-0000-', LPAD(seq, 12, '0')) FROM {numbers}")

COMPOSITE = ("CREATE TABLE {name} (region VARCHAR(20) NOT NULL, at DATETIME(6) NOT NULL, amount DECIMAL(12,3) NOT NULL, "
             "note VARCHAR(40) NULL, paid TIMESTAMP(6) NULL, took TIME(6) NULL, flags BIT(5) NULL, "
             "kind ENUM('a','b') NULL, tags SET('x','y') NULL, doc JSON NULL, ratio DOUBLE NULL, raw VARBINARY(8) NULL, "
             "PRIMARY KEY (region, at, amount))")
COMPOSITE_ROWS = (
    "INSERT INTO {name} SELECT ELT(1 + seq % 5, 'eu', 'zürich', '東京', 'a#b', ''), "
    "'2024-01-01 12:00:00' + INTERVAL seq DAY + INTERVAL seq MICROSECOND, seq % 7 - 3.5 + seq / 1000, "
    "IF(seq % 4 = 0, NULL, CONCAT('note ', seq)), IF(seq % 3 = 0, NULL, FROM_UNIXTIME(1700000000 + seq * 3600.5)), "
    "SEC_TO_TIME(seq * 61 - 1000), seq % 32, ELT(1 + seq % 2, 'a', 'b'), ELT(1 + seq % 3, '', 'x', 'x,y'), "
    "IF(seq % 2 = 0, NULL, JSON_ARRAY(seq, 'é')), seq / 17, UNHEX(HEX(seq)) FROM {numbers}")
COMPOSITE_EDGES = ("INSERT INTO {name} (region, at, amount) VALUES ('edge', '1000-01-01 00:00:00.5', 0), "
                   "('edge', '9999-12-31 23:59:59.999999', -999999999.999), ('edge', '2024-11-03 01:30:00', 1)")

# A key of most kinds at once: an instant, an unsigned bigint, a year, binary, bits, a double, a date, an enum.
WIDE_KEY = ("CREATE TABLE {name} (ts TIMESTAMP(6) NOT NULL, u BIGINT UNSIGNED NOT NULL, y YEAR NOT NULL, "
            "b VARBINARY(8) NOT NULL, bt BIT(9) NOT NULL, f DOUBLE NOT NULL, dd DATE NOT NULL, e ENUM('p','q') NOT NULL, "
            "v TEXT NULL, PRIMARY KEY (ts, u, y, b, bt, f, dd, e))")
WIDE_KEY_ROWS = ("INSERT INTO {name} SELECT FROM_UNIXTIME(1 + seq * 9999999.999999), 18446744073709551615 - seq * 7, "
                 "1901 + seq, UNHEX(HEX(seq * 31)), seq, seq / 3, '0001-01-01' + INTERVAL seq * 33 YEAR, "
                 "ELT(1 + seq % 2, 'p', 'q'), REPEAT('v', seq % 5) FROM {numbers}")


def _create(mariadb, schema: str) -> dict[str, str]:
    """The source tables, by the name of their Hive table; returns each one's readers' zone."""
    names = {n: TableName(schema, n).quoted for n in ("all_types", "full_types", "orders", "zero_key", "wide_key",
                                                      "no_rows")}
    mariadb.execute(f"CREATE DATABASE {schema}")
    mariadb.execute(DDL.format(name=names["all_types"]),
                    ALL_TYPES_ROWS.format(name=names["all_types"], numbers=NUMBERS.format(300)), database=schema)
    insert_cases(mariadb, names["all_types"], 1)
    insert_cases(mariadb, names["all_types"], 101)
    mariadb.run_script(CONFORMANCE_SQL, database=schema)  # creates full_types and inserts its one row (id 1)
    columns = ", ".join(f"`{c}`" for c in CONFORMANCE_UPDATES)
    mariadb.execute(f"INSERT INTO {names['full_types']} (id, {columns}) VALUES "
                    f"(2, {', '.join(CONFORMANCE_UPDATES.values())})",
                    f"INSERT INTO {names['full_types']} (id) VALUES (9223372036854775808), (18446744073709551615)")
    mariadb.execute(COMPOSITE.format(name=names["orders"]),
                    COMPOSITE_ROWS.format(name=names["orders"], numbers=NUMBERS.format(300)),
                    COMPOSITE_EDGES.format(name=names["orders"]), database=schema)
    mariadb.execute(*zero_date_statements(names["zero_key"], ZERO_DATE_KEY_DDL,
                                          f"INSERT INTO {{name}} VALUES {ZERO_DATE_KEY_ROWS}"))
    mariadb.execute(WIDE_KEY.format(name=names["wide_key"]),
                    WIDE_KEY_ROWS.format(name=names["wide_key"], numbers=NUMBERS.format(200)),
                    f"CREATE TABLE {names['no_rows']} (id INT PRIMARY KEY, v TEXT)", database=schema)
    return {n: ZONE if n == "orders" else "UTC" for n in names}


def _merge(tables: dict[str, Table], zones: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """Every table's snapshot merged by one Spark application; each one's committed version's location."""
    specs = []
    for name, table in tables.items():
        _, job_path = table.prepare()
        (spec,) = MergeJob.from_text(job_path.read_text()).tables
        if zones[name] != "UTC":
            datetimes = tuple(c.lower() for c, t in table.header.columns if t.startswith("datetime"))
            spec = spec.model_copy(update={"datetime_zone": zones[name], "datetime_columns": datetimes})
        specs.append(spec)
    job = MergeJob(specs[0].warehouse_dir, None, tuple(specs), str(tmp_path / "merge-result.json"))
    (tmp_path / "merge-job.json").write_text(job.to_text())
    run = run_spark_job(MERGE_JOB, str(tmp_path / "merge-job.json"), work_dir=str(tmp_path))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    results = json.loads(Path(job.result_file).read_text())["tables"]
    assert {n: results[f"ods.{n}"]["status"] for n in tables} == dict.fromkeys(tables, "committed"), results
    return {n: results[f"ods.{n}"]["location"] for n in tables}


def _differences(made, served) -> list[str]:
    """The rows of two digests files that differ, by hash, spelt out."""
    mine = {r["_hash"]: r for r in made.to_pylist()}
    theirs = {r["_hash"]: r for r in served.to_pylist()}
    return [f"{h}: Spark's {mine.get(h)}, the server's {theirs.get(h)}" for h in sorted(mine.keys() | theirs.keys())
            if mine.get(h) != theirs.get(h)][:10]


def test_the_digests_spark_makes_of_a_version_are_the_ones_the_server_computes_for_its_rows(mariadb, make_user,
                                                                                            tmp_path, monkeypatch):
    schema = f"digests_{os.urandom(3).hex()}"
    zones = _create(mariadb, schema)
    hook = MySqlSourceHook(make_user())
    headers = {n: hook.raw_header(TableName(schema, n)) for n in zones}
    assert headers["full_types"].key == ("id",) and dict(headers["full_types"].columns)["id"] == "bigint(20) unsigned"
    assert headers["orders"].key == ("region", "at", "amount")
    tables = {n: Table(hook, header, tmp_path, target=f"ods.{n}") for n, header in headers.items()}
    locations = _merge(tables, zones, tmp_path)

    warehouse = tables["all_types"].warehouse
    jobs = [DigestsJob(warehouse_dir=warehouse, metastore_uri=None, table=f"ods.{n}", columns=headers[n].columns,
                       key=headers[n].key, mariadb=True, time_zone=zones[n], location=locations[n],
                       out=str(tmp_path / "spark-digests" / n)) for n in headers]
    # A version its table does not have (no version file): refused, and the others written all the same.
    ghost = jobs[-1].model_copy(update={"table": "ods.ghost", "location": f"{warehouse}/ods.db/ghost/v000001",
                                        "out": str(tmp_path / "spark-digests" / "ghost")})
    # The composite key's version read for another zone than it was written for: refused too.
    other_zone = next(j for j in jobs if j.table == "ods.orders").model_copy(update={
        "time_zone": "UTC", "out": str(tmp_path / "spark-digests" / "orders-utc")})
    (tmp_path / "digests-jobs.json").write_text(DigestsJobs(jobs=(*jobs, ghost, other_zone)).to_text())

    # Killed before it writes anything: no table's directory is there to be taken for digests.
    monkeypatch.setenv("CDC_FAILPOINT", "heal.digests")
    killed = run_spark_job(DIGESTS_JOB, str(tmp_path / "digests-jobs.json"), work_dir=str(tmp_path))
    monkeypatch.delenv("CDC_FAILPOINT")
    assert killed.returncode != 0 and "failpoint heal.digests" in killed.stdout, killed.stdout[-2000:]
    assert not (tmp_path / "spark-digests").exists()

    run = run_spark_job(DIGESTS_JOB, str(tmp_path / "digests-jobs.json"), work_dir=str(tmp_path))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]

    for name, header in headers.items():
        made = digests_file_from_spark(tmp_path / "spark-digests" / name, header, tmp_path / f"{name}-spark.parquet")
        served = snapshot(hook, header, tmp_path / f"snap-{name}", digests=tmp_path / f"{name}-server.parquet")
        assert made == served.rows, name
        assert f"cdc-digests: ods.{name}: {made} rows in " in run.stdout
        mine, theirs = pq.read_table(tmp_path / f"{name}-spark.parquet"), pq.read_table(served.digests_file)
        assert mine.schema == theirs.schema == digests_schema(header), name
        assert _differences(mine, theirs) == [], name
        by_hash = [("_hash", "ascending")]
        assert mine.sort_by(by_hash).equals(theirs.sort_by(by_hash)), name
    # The part files fetched from the directory, as the heal task fetches them from the work directory: the same.
    fetched = sorted((tmp_path / "spark-digests" / "orders").glob("part-*.parquet"))
    assert digests_file_from_spark(fetched, headers["orders"], tmp_path / "fetched.parquet") == 303
    assert pq.read_table(tmp_path / "fetched.parquet").equals(pq.read_table(tmp_path / "orders-spark.parquet"))
    counts = {n: pq.ParquetFile(tmp_path / f"{n}-spark.parquet").metadata.num_rows for n in headers}
    assert counts == {"all_types": 310, "full_types": 4, "orders": 303, "zero_key": 5, "wide_key": 200, "no_rows": 0}

    # The zero dates of the key are NULL in Hive, and so in the file: each row still its own hash.
    zero_key = pq.read_table(tmp_path / "zero_key-spark.parquet")
    assert zero_key.column("dtval").null_count == 3 and len(set(zero_key.column("_hash").to_pylist())) == 5
    with pytest.raises(VersionRefused, match="holds no _cdc_version.json"):
        digests_file_from_spark(tmp_path / "spark-digests" / "ghost", headers["no_rows"], tmp_path / "ghost.parquet")
    assert "cdc-digests: ods.ghost: The version at" in run.stdout
    with pytest.raises(VersionRefused, match=f"written for readers in {ZONE}, but `hive: time_zone:` is now UTC"):
        digests_file_from_spark(tmp_path / "spark-digests" / "orders-utc", headers["orders"], tmp_path / "utc.parquet")
