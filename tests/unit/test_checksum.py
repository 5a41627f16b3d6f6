"""The Python halves of the row texts, against what MariaDB 10.11 printed for the same values; and what verify
decides from the sums (``core.verify``)."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pytest

from airflow_cdc_provider.core.checksum import (
    hive_text,
    json_normalized,
    key_text,
    kind_of,
    mariadb_double_text,
    source_key_text,
    source_row_text,
    source_text,
    spark_text,
    stored_geometry,
)
from airflow_cdc_provider.core.contract import (
    CapturedTable,
    KeyDifference,
    SourcePlan,
    TableOutcome,
    TablePlan,
    TableVerification,
)
from airflow_cdc_provider.core.ledger import Committed, RunPlan, RunRef
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.values import canonical_json, standard_wkb
from airflow_cdc_provider.core.verify import (
    RepairRequest,
    Replaced,
    VerifyState,
    bucket_of,
    count_runs,
    difference_message,
    judged,
    refused,
    repair_request,
    table_error,
    verifiable,
)
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import TableDir

# (Python's repr, CAST(double AS CHAR) on MariaDB 10.11)
DOUBLES = [
    ("0.1", "0.1"), ("1.0", "1"), ("100000000000000.0", "100000000000000"), ("1000000000000000.0", "1e15"),
    ("1e-12", "0.000000000001"), ("1e-15", "0.000000000000001"), ("1e-16", "1e-16"), ("5e-324", "5e-324"),
    ("1.5000000000000002e-08", "0.000000015000000000000002"), ("1.0000000000000001e+23", "1.0000000000000001e23"),
    ("9007199254740992.0", "9.007199254740992e15"), ("1234567890123456.8", "1234567890123456.8"),
    ("1.2345678901234566e+16", "1.2345678901234566e16"), ("-2.5e-05", "-0.000025"), ("-0.0", "0"),
    ("1.7976931348623157e+308", "1.7976931348623157e308"), ("-949.1082763671875", "-949.1082763671875"),
    ("0.10000000149011612", "0.10000000149011612"), ("666666666666666.6", "666666666666666.6"),
]


@pytest.mark.parametrize(("value", "printed"), DOUBLES)
def test_doubles_print_as_mariadb_prints_them(value, printed):
    assert mariadb_double_text(float(value)) == printed


# (the JSON as written, JSON_NORMALIZE of it on MariaDB 10.11)
NORMALIZED = [
    ('{"b":1,"a":2,"aa":3,"B":4,"é":5,"z":6}', '{"B":4.0E0,"a":2.0E0,"aa":3.0E0,"b":1.0E0,"z":6.0E0,"é":5.0E0}'),
    ("[1, -1, 0, 12345678901234567890, 1.5, -0.5e-3]", "[1.0E0,-1.0E0,0.0E0,1.234567890123456789E19,1.5E0,-5.0E-4]"),
    ('{"a":[{"c":1,"b":2}]}', '{"a":[{"b":2.0E0,"c":1.0E0}]}'),
    ("123", "1.23E2"), ("100", "1.0E2"), ("0.1", "1.0E-1"), ("1e-7", "1.0E-7"), ("-0.0", "0.0E0"),
    ("123456789012345678", "1.23456789012345678E17"), ("null", "null"), ("[]", "[]"), ("{}", "{}"),
    ("[true,false]", "[true,false]"),
]


@pytest.mark.parametrize(("written", "normalized"), NORMALIZED)
def test_json_from_the_copy_prints_as_json_normalize(written, normalized):
    # The copy holds canonical JSON (core.values), not what was written: the two must lead to the same text.
    assert json_normalized(canonical_json(written)) == normalized


def test_a_geometry_goes_back_to_the_servers_stored_form():
    wkb = b"\x01\x01\x00\x00\x00" + struct.pack("<dd", 1, 2)
    for srid in (0, 4326):
        stored = struct.pack("<I", srid) + wkb
        assert stored_geometry(standard_wkb(stored)) == stored


def test_hive_values_give_the_servers_texts():
    assert hive_text(Decimal("-0.000"), "decimal(12,3)") == "0.000"
    assert hive_text(Decimal("1.500"), "decimal(12,3)") == "1.500"
    assert hive_text(b"\x01\xff", "bit(9)") == "01FF"
    assert hive_text(True, "bit(1)") == "1"
    assert hive_text(dt.date(1, 1, 1), "date") == "0001-01-01"
    assert hive_text(dt.datetime(9, 3, 1, 10, 0, 0, 500000), "datetime(6)") == "0009-03-01 10:00:00.500000"
    aware = dt.datetime(2024, 3, 1, 11, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert hive_text(aware, "timestamp(6)") == "2024-03-01 10:00:00.000000"
    assert hive_text(-90000500000, "time(6)") == "-90000500000"
    assert hive_text(None, "int") is None
    assert hive_text('{"a":1}', "json", mariadb=False) is None


def test_each_type_has_a_text_on_both_sides():
    for ctype in ("tinyint(1)", "bigint unsigned", "decimal(65,30)", "float", "double", "bit(1)", "bit(64)",
                  "enum('a')", "set('a')", "json", "binary(4)", "blob", "point", "date", "datetime(3)",
                  "timestamp", "time(6)", "year", "inet6", "uuid", "varchar(10)"):
        assert source_text("c", ctype, mariadb=True), ctype
        assert spark_text(ctype, mariadb=True), ctype
    assert kind_of("decimal(65,30)") == "decimal_text" and kind_of("decimal(38,10)") == "decimal"
    assert source_text("c", "json", mariadb=False) is None and spark_text("json", mariadb=False) is None
    row = source_row_text([("id", "int"), ("js", "json")], mariadb=False)
    assert row == "CONCAT_WS('#', CAST(`id` + 0 AS CHAR), CONCAT(ISNULL(`id`), ISNULL(`js`)))"
    # The flag of the text: a zero date or year has a NULL text in the copy.
    zero = source_row_text([("d", "date"), ("y", "year")], mariadb=True)
    assert "CONCAT((`d` IS NULL OR (YEAR(`d`) = 0 OR MONTH(`d`) = 0 OR DAYOFMONTH(`d`) = 0)), (`y` IS NULL OR `y` + 0 = 0))" in zero


def test_a_key_part_null_in_the_copy_is_spelt_null_on_both_sides_so_keys_keep_their_places():
    types = ["int", "datetime", "date", "time"]
    assert key_text([1, None, None, 0], types) == "1#NULL#NULL#0"
    assert key_text([1, dt.datetime(2020, 1, 1), None, 0], types) == "1#2020-01-01 00:00:00.000000#NULL#0"
    # Two keys that differ only in which part is the zero date: one text each (CONCAT_WS alone would skip NULL).
    two = [("a", "date"), ("b", "date")]
    assert key_text([None, dt.date(2020, 1, 1)], ["date", "date"]) != key_text([dt.date(2020, 1, 1), None],
                                                                                ["date", "date"])
    sql = source_key_text(two, ["a", "b"], mariadb=True)
    assert sql.startswith("CONCAT_WS('#', IFNULL(IF((YEAR(`a`) = 0 OR MONTH(`a`) = 0 OR DAYOFMONTH(`a`) = 0), NULL, ")
    assert sql.count(", 'NULL')") == 2
    # A key without a NULL part keeps the text it had.
    assert key_text(["x", -3600500000], ["varchar(10)", "time(6)"]) == "x#-3600500000"


def test_a_range_of_keys_is_an_index_range_for_composite_keys():
    from airflow_cdc_provider.core.verify import BucketSum, differing_buckets, key_range, row_differences

    assert key_range(["id"], (5,), (9,)) == ("((`id` > %s)) AND ((`id` <= %s))", [5, 9])
    sql, args = key_range(["a", "b"], (1, 2), None)
    assert sql == "((`a` > %s) OR (`a` = %s AND `b` > %s))" and args == [1, 1, 2]
    sql, args = key_range(["a", "b"], None, (3, 4))
    assert sql == "((`a` < %s) OR (`a` = %s AND `b` <= %s))" and args == [3, 3, 4]
    assert key_range(["id"], None, None) == ("", [])
    sql, args = key_range(["pct%s"], (1,), None)  # run with its arguments: the name's % stays a %
    assert sql % tuple(args) == "((`pct%s` > 1))"
    assert differing_buckets({0: BucketSum(2, 1), 1: BucketSum(1, 5)}, {0: BucketSum(2, 1)}) == [1]
    assert differing_buckets({0: BucketSum(2, 1)}, {0: BucketSum(2, 3)}) == [0]
    assert BucketSum(1, 3).plus(BucketSum(2, 2**64 - 1)) == BucketSum(3, 2**64 - 4)
    found = row_differences({"1": "a", "2": "b", "3": "c"}, {"1": "a", "2": "x", "4": "d", "5": "e"}, changed={"5"})
    assert [(d.key, d.kind) for d in found] == [("2", "different"), ("3", "missing"), ("4", "extra")]


def test_a_datetime_is_spelt_in_the_readers_zone_and_a_timestamp_in_utc():
    assert spark_text("datetime(6)", mariadb=True, time_zone="Asia/Shanghai") == "zoned_datetime"
    assert spark_text("datetime(6)", mariadb=True) == "datetime"
    assert spark_text("timestamp", mariadb=True, time_zone="Asia/Shanghai") == "datetime"


def test_verify_jobs_go_to_the_spark_application_and_back_as_they_were():
    from airflow_cdc_provider.core.verify import BucketSum, VerifyJob, VerifyJobs, sums_of

    sums = {0: BucketSum(3, 7), 4: BucketSum(1, 2**64 - 1)}
    job = VerifyJob("/w", "thrift://m:9083", "ods.t", (("id", "int"), ("at", "datetime")), ("id",), True, 5,
                    "file:///r.json", location="/w/ods.db/t/v000003", time_zone="Europe/Paris", source=sums_of(sums),
                    detail_limit=7)
    (back,) = VerifyJobs.from_text(VerifyJobs(jobs=(job,)).to_text()).jobs
    assert back.source_sums() == sums
    assert back == job
    assert (back.columns, back.key, back.location, back.time_zone, back.detail_limit) == (
        job.columns, job.key, job.location, job.time_zone, 7)


# What verify decides around the sums: which tables are due, which cannot be verified, the verdict on a table
# whose buckets differ, and what it leaves for a repair.

RUN = RunRef("d", "scheduled__2026-03-01T11:00:00+00:00")
COLUMNS = (("id", "int(11)"), ("name", "varchar(20)"))
AT = dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.UTC)


def _table(name: str) -> TablePlan:
    return TablePlan(table=CapturedTable(source=f"shop.{name}", hive_table=f"ods.{name}", schema_changes="strict",
                                         key=("id",), columns=COLUMNS),
                     plan=RunPlan(RUN, Mode.INCREMENTAL, "why"), table_dir=TableDir(work_dir="/w", hive_table=f"ods.{name}"))


def _outcome(table: TablePlan, status: str) -> TableOutcome:
    return TableOutcome(source=table.source, hive_table=table.table.hive_table, mode=Mode.INCREMENTAL, status=status)


def _version(columns=COLUMNS) -> Committed:
    return Committed(4, "/wh/ods.db/orders/v000004", Watermark("binlog.000001", 900, server_id=1), AT, RUN,
                     Mode.INCREMENTAL, columns)


def test_a_table_is_due_for_verify_every_so_many_runs_or_when_forced_and_only_with_a_sound_outcome():
    tables = [_table(n) for n in ("orders", "items", "broken", "gone")]
    plan = SourcePlan(run=RUN, tables=tuple(tables))
    outcomes = {t.source: _outcome(t, s) for t, s in zip(tables, ("committed", "idle", "failed"))}  # gone: none
    state = {"shop.orders": VerifyState(runs_since=2), "shop.items": VerifyState(runs_since=0)}

    def counted(force: bool, every: int) -> list[tuple[str, int, bool]]:
        found = count_runs(plan, outcomes, force, every, lambda t: state.get(t.source, VerifyState()))
        return [(c.table.source, c.runs, c.due) for c in found]

    assert counted(False, 3) == [("shop.orders", 3, True), ("shop.items", 1, False)]
    assert counted(True, 3) == [("shop.orders", 3, True), ("shop.items", 1, True)]
    assert counted(True, 0) == [("shop.orders", 3, True), ("shop.items", 1, True)]
    assert counted(False, 0) == []  # verify is off: no table is even counted
    assert [s for s in ("committed", "idle", "unchanged", "nothing", "failed")
            if count_runs(SourcePlan(run=RUN, tables=(tables[0],)), {"shop.orders": _outcome(tables[0], s)}, True, 0,
                          lambda t: VerifyState())] == ["committed", "idle", "unchanged", "nothing"]


def test_the_rolling_verify_checks_each_table_a_slice_a_run_in_turn_whatever_the_run_did_to_it():
    tables = [_table(n) for n in ("orders", "items", "quiet", "broken")]
    plan = SourcePlan(run=RUN, tables=tuple(tables))
    outcomes = {t.source: _outcome(t, s) for t, s in zip(tables, ("committed", "idle", "nothing", "failed"))}
    state = {t.source: VerifyState() for t in tables}

    def run(force: bool = False, every: int = 0, slices: int = 3) -> list[tuple[str, int, bool, str | None]]:
        found = count_runs(plan, outcomes, force, every, lambda t: state[t.source], slices)
        for count in found:
            state[count.table.source] = count.state_after()
        return [(c.table.source, c.runs, c.due, str(c.slice) if c.slice else None) for c in found]

    # Every verifiable table, changed by the run or not, gets its next slice; a failed one is left for later.
    assert run() == [(f"shop.{t}", 1, False, "slice 1 of 3") for t in ("orders", "items", "quiet")]
    assert run() == [(f"shop.{t}", 2, False, "slice 2 of 3") for t in ("orders", "items", "quiet")]
    # A whole check (forced, or every N runs) restarts the whole-table count and leaves the slices where they were.
    assert run(force=True) == [(f"shop.{t}", 3, True, None) for t in ("orders", "items", "quiet")]
    assert state["shop.orders"] == VerifyState(runs_since=0, next_slice=2)
    assert run() == [(f"shop.{t}", 1, False, "slice 3 of 3") for t in ("orders", "items", "quiet")]
    assert run() == [(f"shop.{t}", 2, False, "slice 1 of 3") for t in ("orders", "items", "quiet")]
    assert run(every=3) == [(f"shop.{t}", 3, True, None) for t in ("orders", "items", "quiet")]
    # A changed setting goes on from the recorded slice, modulo the new count; 1 slice: the whole table each run.
    assert run(slices=2)[0][3] == "slice 2 of 2"
    assert run(slices=1)[0][1:] == (2, True, None)
    # 0: no rolling verify; the counts still move for `every`.
    assert run(slices=0, every=5)[0][1:] == (1, False, None) and run(slices=0) == []


def test_the_rolling_verify_checks_at_most_so_many_tables_a_run_those_waiting_longest_so_all_come_round():
    tables = [_table(f"t{n}") for n in range(5)]
    plan = SourcePlan(run=RUN, tables=tuple(tables))
    outcomes = {t.source: _outcome(t, "idle") for t in tables}
    state = {t.source: VerifyState() for t in tables}

    def run(force: bool = False) -> list[str]:
        found = count_runs(plan, outcomes, force, 0, lambda t: state[t.source], 3, tables_per_run=2)
        for count in found:
            state[count.table.source] = count.state_after()
        assert len(found) == 5, "every verifiable table is counted, checked or not"
        return [c.table.source.removeprefix("shop.") for c in found if c.checked]

    # Two a run, the longest waiting first (then by name): no table waits more than ceil(5 / 2) - 1 runs, and each
    # goes on with its own next slice.
    checked = [run() for _ in range(8)]
    assert checked[:5] == [["t0", "t1"], ["t2", "t3"], ["t0", "t4"], ["t1", "t2"], ["t0", "t3"]]
    for table in ("t0", "t1", "t2", "t3", "t4"):
        runs = [n for n, names in enumerate(checked) if table in names]
        assert runs[0] <= 2 and all(b - a <= 3 for a, b in zip(runs, runs[1:])) and runs[-1] >= 5, (table, runs)
    assert max(v.waiting for v in state.values()) <= 2
    assert state["shop.t0"].next_slice == len([n for n in checked if "t0" in n]) % 3
    # A whole check asked for is no rolling slice: every table, whatever the limit.
    assert run(force=True) == ["t0", "t1", "t2", "t3", "t4"]
    assert {v.waiting for v in state.values()} == {0}


def test_an_integer_keys_slices_are_ranges_of_its_values_that_cover_every_key_once():
    from airflow_cdc_provider.core.verify import key_range_condition, key_slice, slice_buckets

    for low, high, of in ((1, 1000, 24), (-50, 49, 4), (7, 9, 24), (5, 5, 3)):
        parts = [key_slice(k, of, low, high) for k in range(of)]
        assert parts[0].key_range[0] is None and parts[-1].key_range[1] is None  # keys gone from the source too
        for key in range(low - 10, high + 11):
            holding = [p.index for p in parts if (p.key_range[0] is None or key >= p.key_range[0])
                       and (p.key_range[1] is None or key < p.key_range[1])]
            assert len(holding) == 1, (low, high, of, key, holding)
    assert [p.key_range for p in (key_slice(k, 4, -50, 49) for k in range(4))] == [
        (None, -25), (-25, 0), (0, 25), (25, None)]
    assert key_range_condition("`id`", key_slice(1, 4, -50, 49)) == ("`id` >= %s AND `id` < %s", [-25, 0])
    assert key_range_condition("`id`", key_slice(0, 4, -50, 49)) == ("`id` < %s", [-25])
    assert key_range_condition("`id`", None) == ("", [])
    # A range of keys is checked in the table's usual buckets: a repair reads again a bucket of the usual size.
    assert slice_buckets(100_000, 1000, key_slice(3, 24, 1, 100_000)) == 100


def test_a_slice_is_at_least_one_bucket_and_the_server_digests_only_its_buckets():
    from airflow_cdc_provider.core.checksum import source_bucket_sums
    from airflow_cdc_provider.core.contract import VerifySlice
    from airflow_cdc_provider.core.verify import slice_buckets

    assert slice_buckets(100, 1000, None) == 1
    assert slice_buckets(100, 1000, VerifySlice(index=0, of=24)) == 24  # no slice empty while another holds all
    assert slice_buckets(100_000, 1000, VerifySlice(index=5, of=24)) == 100
    with pytest.raises(ValueError, match=r"index must be in 0..23, not 24"):
        VerifySlice(index=24, of=24)
    sql = source_bucket_sums("`shop`.`t`", [("id", "int"), ("v", "varchar(10)")], ["id"], True, 48, "`id` >= %s",
                             (5, 24))
    assert "WHERE (`id` >= %s) AND (MOD(MOD(CRC32(" in sql and "), 48), 24) = 5) GROUP BY bucket" in sql
    assert " WHERE " not in source_bucket_sums("`shop`.`t`", [("id", "int")], ["id"], True, 48)


def test_a_table_without_a_version_or_whose_columns_changed_is_not_verified_and_says_why():
    orders = _table("orders")
    missing = verifiable(orders, None)
    assert isinstance(missing, TableVerification)
    assert (missing.status, missing.reason, missing.version) == ("not_verified", "no committed version", None)
    changed = verifiable(orders, _version(COLUMNS[:1]))
    assert isinstance(changed, TableVerification)
    assert (changed.status, changed.version, changed.watermark) == ("not_verified", 4, _version().watermark)
    assert changed.reason == ("the source's columns changed since the version; it is verified once a run has merged "
                              "the change")
    assert verifiable(orders, _version()) == _version()
    assert verifiable(orders, _version(None)) == _version(None)  # a ledger from before columns were recorded


def _checked(buckets: int = 8) -> TableVerification:
    return TableVerification(source="shop.orders", hive_table="ods.orders", status="clean", version=4, buckets=buckets,
                             rows=50, seconds={"source": 1.0, "spark": 2.0, "detail": 0.5})


def test_rows_that_differ_outside_the_binlogs_writes_make_a_table_different_in_their_buckets():
    source = {"1": "a", "2": "b", "3": "c", "7": "x"}
    copy = {"1": "a", "2": "old", "4": "d", "7": "y"}
    found = judged(_checked(), [bucket_of("2", 8), bucket_of("3", 8), bucket_of("7", 8)], 10, source, copy,
                   changed={"7"})
    assert found.status == "different"
    assert (found.differences, found.in_flight, found.unexamined_buckets, found.reason) == (3, 1, 0, "")
    assert [(k.key, k.kind) for k in found.keys] == [("2", "different"), ("3", "missing"), ("4", "extra")]
    assert found.differing_buckets == tuple(sorted({bucket_of(k, 8) for k in ("2", "3", "4")}))
    assert found.repair_buckets == found.differing_buckets
    assert (found.version, found.rows, found.seconds) == (4, 50, {"source": 1.0, "spark": 2.0, "detail": 0.5})


def test_a_check_the_server_refused_for_one_table_leaves_it_not_verified_naming_the_error_and_the_way_out():
    said = "Access denied; you need (at least one of) the SUPER, BINLOG MONITOR privilege(s) for this operation"
    found = refused(_checked(), said, 1227)
    assert (found.status, found.version, found.buckets, found.rows) == ("not_verified", 4, 8, 50)
    assert found.reason == (
        f"the server refused its check (MySQL error 1227: {said}): grant the capture user what it names (a table "
        "captured by diffs needs SELECT alone; one captured from the binlog, what its capture needs), and a later "
        "run checks it again. `verify: slices: 0` stops the rolling verify.")
    gone = refused(_checked(), "Table 'shop.orders' doesn't exist", 1146)
    assert gone.status == "not_verified" and gone.reason.startswith(
        "the server refused its check (MySQL error 1146: Table 'shop.orders' doesn't exist): a later run checks it "
        "again; if the error stays, see the server's error log.")
    # An error the hook already named, in words that say what to do: the statement time limit.
    limit = refused(_checked(), "A statement ran past the statement time limit of 60 s. Raise it.")
    assert limit.reason == ("A statement ran past the statement time limit of 60 s. Raise it; a later run checks it "
                            "again. `verify: slices: 0` stops the rolling verify.")
    # The connection's errors, not the table's: they fail the task, whose retry may get through.
    for code in (2013, 2006, 2003, 0, 1040, 1053, 1927, 3169):
        assert not table_error(code) and refused(_checked(), "gone", code) is None, code
    for code in (1044, 1142, 1146, 1205, 1227, 3572, 4078):
        assert table_error(code), code


def test_rows_the_binlog_wrote_since_the_version_are_in_flight_not_a_difference():
    found = judged(_checked(), [bucket_of("7", 8)], 10, {"7": "x"}, {"7": "y"}, changed={"7"})
    assert (found.status, found.differences, found.in_flight, found.repair_buckets) == ("clean", 0, 1, ())


def test_buckets_beyond_the_detail_limit_make_a_table_different_and_are_repaired_unexamined():
    found = judged(_checked(), [1, 3, 6], 1, {}, {}, changed=())
    assert (found.status, found.differences, found.unexamined_buckets) == ("different", 0, 2)
    assert found.reason == "2 more buckets differ than verify.detail_buckets looks into"
    assert found.repair_buckets == (3, 6)


def test_a_different_table_leaves_its_buckets_for_a_repair_and_a_clean_one_nothing():
    different = _checked().model_copy(update={"status": "different", "repair_buckets": (3, 6)})
    assert repair_request(different, RUN.key) == RepairRequest(buckets=8, which=(3, 6), version=4, run=RUN.key)
    assert repair_request(_checked(), RUN.key) is None
    assert repair_request(_checked().model_copy(update={"status": "not_verified"}), RUN.key) is None


def test_the_failure_names_each_different_table_its_first_keys_and_what_to_do():
    keys = tuple(KeyDifference(key=str(k), kind="missing") for k in range(7))
    orders = _checked().model_copy(update={"status": "different", "differences": 7, "repair_buckets": (1, 2),
                                           "keys": keys})
    items = TableVerification(source="shop.items", hive_table="ods.items", status="different", version=2, buckets=4,
                              differences=0, repair_buckets=(3,))
    assert difference_message([orders, items]) == (
        "2 tables differ from the source: shop.orders → ods.orders version 4: 7 keys in 2 of 8 buckets (first: 0, "
        "1, 2, 3, 4); shop.items → ods.items version 2: 0 keys in 1 of 4 buckets. See the log above for the keys; a "
        "repair re-reads them (`verify: repair: true` or the repair parameter), a fresh snapshot reloads the table.")


def test_a_repair_is_settled_only_by_reading_the_whole_table_or_all_its_buckets_again():
    pending = RepairRequest(buckets=8, which=(3, 6), version=4, run=RUN.key)
    assert Replaced().covers(pending)
    assert Replaced((3, 6, 7)).covers(pending)
    assert not Replaced((3,)).covers(pending)


def test_a_history_whose_open_rows_differ_from_its_table_fails_verify_with_the_way_out_and_asks_no_repair():
    from airflow_cdc_provider.core.contract import Verification

    history = _checked().model_copy(update={"history_buckets": (2, 5)})  # the table itself is clean
    found = Verification(tables=(history, _checked()))
    assert found.different == [history] and repair_request(history, RUN.key) is None
    assert difference_message(found.different) == (
        "1 SCD2 histories differ from their tables: the open rows of ods.orders_history differ from ods.orders "
        "version 4 in 2 of 8 buckets. A run with fresh_snapshot=true brings a history level with the source: it "
        "closes and opens again every open row that differs from the snapshot.")


def test_a_checked_tables_verify_state_keeps_what_its_check_found_without_keys_and_one_not_checked_keeps_the_last():
    from airflow_cdc_provider.core.contract import KeyDifference, TableVerification, VerifySlice
    from airflow_cdc_provider.core.modes import VerifyStatus
    from airflow_cdc_provider.core.verify import VerifyMark

    tables = [_table(n) for n in ("orders", "items")]
    plan = SourcePlan(run=RUN, tables=tuple(tables))
    outcomes = {t.source: _outcome(t, "committed") for t in tables}
    found = TableVerification(source="shop.orders", hive_table="ods.orders", status=VerifyStatus.DIFFERENT, version=4,
                              buckets=16, differing_buckets=(3,), repair_buckets=(3, 7), differences=2,
                              keys=(KeyDifference(key="42", kind="missing"), KeyDifference(key="43", kind="extra")),
                              slice=VerifySlice(index=1, of=4))
    mark = VerifyMark.of(found, RUN, AT)
    assert (mark.status, mark.slice, mark.buckets, mark.differing_buckets, mark.differences) == (
        VerifyStatus.DIFFERENT, "slice 2 of 4", 16, 2, 2)
    assert "42" not in mark.to_text(), "no key, which is a row's value"
    earlier = VerifyState(last=mark.model_copy(update={"status": VerifyStatus.CLEAN}))
    counts = count_runs(plan, outcomes, False, 0, lambda t: earlier, 2, tables_per_run=1)
    checked, waiting = sorted(counts, key=lambda c: not c.checked)
    assert checked.state_after(mark).last == mark
    assert waiting.state_after(None).last == earlier.last, "not checked this run: its last check stands"
