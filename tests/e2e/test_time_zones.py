"""Readers in the platform's zone: with `hive: time_zone:`, a Spark reader in that zone sees each DATETIME with
the source's digits, and each TIMESTAMP as its true instant. Real runs of the example DAG; the table is read
back by a Spark session in the zone, as the platform's readers do."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
import yaml
from airflow_cdc_testing.hive import read_hive_table

from airflow_cdc_provider.core.identifiers import TableName
from tests.e2e.test_pipeline import Pipeline

DDL = ("CREATE TABLE {s}.events (id INT NOT NULL, at DATETIME(6) NOT NULL, seen DATETIME NULL,"
       " stamp TIMESTAMP(6) NULL, PRIMARY KEY (id, at))")
# 2026-03-08 02:00 to 03:00 does not exist in New York (clocks go forward); 2026-11-01 01:00 to 02:00 happens
# twice (clocks go back). Shanghai keeps +08:00 all year, but had local mean time before 1901.
ROWS = {
    1: ("2026-01-15 09:30:00.250000", "2026-01-15 09:30:00", "2026-01-15 14:30:00.250000"),
    2: ("2026-03-08 02:30:00.000000", None, "2026-03-08 07:30:00.000000"),  # in New York's gap
    3: ("2026-11-01 01:30:00.000001", "2026-11-01 01:59:59", "2026-11-01 05:30:00.000001"),  # twice in New York
    4: ("2026-07-04 23:59:59.999999", "2026-07-05 00:00:00", None),
    5: ("1900-01-01 12:00:00.000000", "1969-12-31 23:59:59", "1970-01-01 00:00:01.000000"),
}


def pipeline_in(zone: str, mariadb, conn_id: str, tmp_path, metastore) -> Pipeline:
    tmp_path.mkdir()
    pipeline = Pipeline(mariadb, conn_id, tmp_path, [], metastore=metastore)
    pipeline.sql(DDL)
    pipeline.config["tables"] = [{"source": f"{pipeline.schema}.events", "target": "events"}]
    pipeline.config["hive"]["time_zone"] = zone
    pipeline.config_path.write_text(yaml.safe_dump(pipeline.config))
    return pipeline


def insert(pipeline: Pipeline, rows: dict) -> None:
    values = ", ".join(f"({key}, '{at}', {repr(seen) if seen else 'NULL'}, {repr(stamp) if stamp else 'NULL'})"
                       for key, (at, seen, stamp) in rows.items())
    # TIMESTAMP literals in UTC: the server converts them from the session's zone.
    pipeline.sql("SET time_zone = '+00:00'", f"INSERT INTO {{s}}.events VALUES {values}")


def as_reader_sees(zone: str, source: dict) -> dict:
    """What a reader in ``zone`` should see: a DATETIME's own digits (a time in a gap moved past it); a
    TIMESTAMP's instant in the zone."""
    tz = zoneinfo.ZoneInfo(zone)

    def digits(value: dt.datetime | None) -> str | None:
        if value is None:
            return None
        # Python keeps the digits of a skipped time; one round trip through UTC moves it past the gap, as Java does.
        moved = value.replace(tzinfo=tz).astimezone(dt.UTC).astimezone(tz)
        return moved.strftime("%Y-%m-%d %H:%M:%S.%f")

    def instant(value: dt.datetime | None) -> str | None:
        return value.replace(tzinfo=dt.UTC).astimezone(tz).strftime("%Y-%m-%d %H:%M:%S.%f") if value else None

    return {(row["id"], digits(row["at"])): (digits(row["seen"]), instant(row["stamp"])) for row in source}


def read_in(zone: str, pipeline: Pipeline) -> dict:
    hive = pipeline.config["hive"]
    rows, _ = read_hive_table(hive["warehouse_dir"], hive["metastore_uri"], f"{pipeline.database}.events",
                              time_zone=zone)
    return {(r["id"], r["at"]): (r["seen"], r["stamp"]) for r in rows.to_pylist()}


def source_rows(pipeline: Pipeline) -> list[dict]:
    names = ("id", "at", "seen", "stamp")
    with pipeline.hook.cursor() as cursor:  # the hook's session is in UTC: TIMESTAMPs come back as UTC
        cursor.execute(f"SELECT {', '.join(names)} FROM {TableName(pipeline.schema, 'events').quoted}")
        return [dict(zip(names, row)) for row in cursor.fetchall()]


@pytest.mark.usefixtures("airflow_home")
def test_datetimes_keep_their_digits_for_readers_in_new_york_and_shanghai(mariadb, capture_conn, tmp_path,
                                                                        metastore_service):
    new_york = pipeline_in("America/New_York", mariadb, capture_conn, tmp_path / "ny", metastore_service)
    insert(new_york, ROWS)
    code, output = new_york.run("2026-09-01T00:00:00+00:00")  # the snapshot
    assert code == 0, output[-8000:]
    expected = as_reader_sees("America/New_York", source_rows(new_york))
    assert read_in("America/New_York", new_york) == expected
    assert expected[(2, "2026-03-08 03:30:00.000000")] == (None, "2026-03-08 03:30:00.000000"), \
        "02:30 does not exist that day: the reader sees the time after the gap"
    assert expected[(3, "2026-11-01 01:30:00.000001")][0] == "2026-11-01 01:59:59.000000"
    assert new_york.outcome("events")["warnings"] == [
        "1 rows hold a DATETIME that does not exist in America/New_York (a daylight-saving gap): written as the "
        "time after the gap"]

    # From the binlog: an insert in the gap, an update and a delete by a key that holds a DATETIME.
    insert(new_york, {6: ("2026-03-08 02:00:00.000000", "2026-03-08 02:59:59", "2026-03-08 12:00:00.000000")})
    new_york.sql("UPDATE {s}.events SET seen = '2026-11-01 01:00:00' WHERE id = 1",
                 "DELETE FROM {s}.events WHERE id = 4")
    code, output = new_york.run("2026-09-01T01:00:00+00:00")
    assert code == 0, output[-8000:]
    assert new_york.outcome("events")["mode"] == "incremental"
    expected = as_reader_sees("America/New_York", source_rows(new_york))
    assert read_in("America/New_York", new_york) == expected
    assert len(expected) == 5 and (4, "2026-07-04 23:59:59.999999") not in expected

    shanghai = pipeline_in("Asia/Shanghai", mariadb, capture_conn, tmp_path / "sh", metastore_service)
    insert(shanghai, ROWS)
    code, output = shanghai.run("2026-09-01T00:00:00+00:00")
    assert code == 0, output[-8000:]
    seen = read_in("Asia/Shanghai", shanghai)
    assert seen == as_reader_sees("Asia/Shanghai", source_rows(shanghai))
    assert {at for _, at in seen} == {at for at, _, _ in ROWS.values()}, "every DATETIME with its own digits"
    assert seen[(1, "2026-01-15 09:30:00.250000")][1] == "2026-01-15 22:30:00.250000", "TIMESTAMP: the instant"
    assert shanghai.outcome("events")["warnings"] == []
