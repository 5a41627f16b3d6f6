"""The verify stage over a stand-in server and Spark application (``stages.verify.verify_tables``): what it asks the
server of each table, and a check the server refused for one table said on that table while the others are
verified."""

from __future__ import annotations

import datetime as dt
import logging

import pymysql
import pytest

from airflow_cdc_provider.core.config import VerifyConfig
from airflow_cdc_provider.core.contract import CapturedTable, TableOutcome, TablePlan, VerifySlice
from airflow_cdc_provider.core.flavor import detect_flavor
from airflow_cdc_provider.core.ledger import Committed, Ledger, RunPlan, RunRef
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.verify import BucketSum, Count, VerifyJobs, VerifyResult
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.stages.verify import CopyPlace, verify_tables
from airflow_cdc_provider.storage import WorkStore

RUN = RunRef("d", "scheduled__2026-03-01T11:00:00+00:00")
COLUMNS = (("id", "int(11)"), ("name", "varchar(20)"))
AT = dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.UTC)
DENIED = pymysql.err.OperationalError(
    1227, "Access denied; you need (at least one of) the SUPER, BINLOG MONITOR privilege(s) for this operation")


class Server:
    """The source as verify asks it: every table's one bucket summed alike; ``refusing`` maps a method to the error
    it raises for a table (by name) or for any. Records what was asked of which table."""

    flavor = detect_flavor("10.11.6-MariaDB")

    def __init__(self, refusing: dict[str, tuple[str | None, Exception]] | None = None) -> None:
        self.refusing, self.asked = refusing or {}, []

    def _ask(self, method: str, table: str | None = None) -> None:
        self.asked.append((method, table))
        refusal = self.refusing.get(method)
        if refusal is not None and refusal[0] in (None, table):
            raise refusal[1]

    def estimated_rows(self, table):
        self._ask("estimated_rows", str(table))
        return 10

    def integer_key_bounds(self, header):
        self._ask("integer_key_bounds", header.table)
        return 1, 10

    def bucket_sums(self, header, buckets, range_rows=0, part=None):
        self._ask("bucket_sums", header.table)
        return {0: BucketSum(10, 7)}

    def bucket_rows(self, header, buckets, which, part=None):
        self._ask("bucket_rows", header.table)
        return {}

    def current_watermark(self):
        self._ask("current_watermark")
        return Watermark("binlog.000001", 1000, server_id=1)

    def binlog_facts(self, watermarks=()):
        self._ask("binlog_facts")
        raise AssertionError("not reached: the tests' binlog tables do not differ")

    def column_charsets(self, table):
        return {}


def _table(name: str, work: str) -> TablePlan:
    return TablePlan(table=CapturedTable(source=f"shop.{name}", hive_table=f"ods.{name}", schema_changes="strict",
                                         key=("id",), columns=COLUMNS),
                     plan=RunPlan(RUN, Mode.INCREMENTAL, "why"), table_dir=TableDir(work_dir=work, hive_table=f"ods.{name}"))


def verify(tmp_path, server: Server, diff: set[str] = frozenset(), differing: set[str] = frozenset()):
    """Each table's verification (orders, items, users: a slice each), those of ``diff`` committed by a diff (no
    watermark), the Spark half finding their copy's one bucket different for those of ``differing``."""
    store = WorkStore()
    tables = [_table(name, str(tmp_path / "work")) for name in ("orders", "items", "users")]
    for table in tables:
        watermark = None if table.source in diff else Watermark("binlog.000001", 900, server_id=1)
        Ledger(table.table_dir, store).record_commit(Committed(
            4, str(tmp_path / "wh" / "ods.db" / table.table.hive_table.split(".")[1] / "v000004"), watermark, AT,
            RUN, Mode.DIFF if watermark is None else Mode.INCREMENTAL, COLUMNS))
    outcomes = {t.source: TableOutcome(source=t.source, hive_table=t.table.hive_table, mode=Mode.INCREMENTAL,
                                       status="idle") for t in tables}
    counted = [Count(t, 1, False, VerifySlice(index=0, of=24)) for t in tables]

    def spark(jobs_uri: str) -> None:  # each job's copy summed: its one bucket, different or not
        for job in store.read(tables[0].run_dir.verify_jobs, VerifyJobs).jobs:
            source = f"shop.{job.table.split('.')[1]}"
            store.write(job.result_file, VerifyResult(buckets={0: (10, 7)}, differing=(0,) if source in differing
                                                      else (), compared=True))

    return {found.source: found for found in verify_tables(
        server, counted, outcomes, store, VerifyConfig(), CopyPlace(str(tmp_path / "wh"), None), spark,
        logging.getLogger("test"))}


def test_a_diffs_version_that_differs_is_not_verified_with_no_binlog_question_asked(tmp_path):
    server = Server({"current_watermark": (None, DENIED), "binlog_facts": (None, DENIED)})
    found = verify(tmp_path, server, diff={"shop.orders", "shop.items", "shop.users"}, differing={"shop.orders"})
    assert {s: f.status for s, f in found.items()} == {
        "shop.orders": "not_verified", "shop.items": "clean", "shop.users": "clean"}
    assert found["shop.orders"].reason.startswith("1 buckets differ, and the version was read without the binlog "
                                                  "(capture: diff)")
    assert found["shop.orders"].slice is not None and found["shop.orders"].buckets >= 1
    assert {method for method, _ in server.asked} == {"estimated_rows", "integer_key_bounds", "bucket_sums"}, \
        "SELECT alone: no binlog position, no binlog facts"


def test_a_check_the_server_refuses_for_one_table_is_said_on_that_table_and_the_others_are_verified(tmp_path):
    denied = pymysql.err.OperationalError(1142, "SELECT command denied to user 'cdc'@'localhost' for table `items`")
    for method in ("estimated_rows", "integer_key_bounds", "bucket_sums"):
        found = verify(tmp_path, Server({method: ("shop.items", denied)}))
        assert {s: f.status for s, f in found.items()} == {
            "shop.orders": "clean", "shop.items": "not_verified", "shop.users": "clean"}, method
        assert found["shop.items"].reason.startswith(
            "the server refused its check (MySQL error 1142: SELECT command denied to user 'cdc'@'localhost' for "
            "table `items`): grant the capture user what it names"), method
        assert found["shop.items"].version == 4
    # Found different: the binlog's position asked for, and refused (a binlog table's user lacking BINLOG MONITOR).
    found = verify(tmp_path, Server({"current_watermark": (None, DENIED)}), differing={"shop.users"})
    assert (found["shop.users"].status, found["shop.orders"].status) == ("not_verified", "clean")
    assert "(MySQL error 1227: Access denied; you need (at least one of) the SUPER, BINLOG MONITOR" in \
        found["shop.users"].reason


def test_a_lost_connection_is_not_one_tables_and_fails_the_verify(tmp_path):
    lost = pymysql.err.OperationalError(2013, "Lost connection to server during query")
    for method in ("estimated_rows", "bucket_sums"):
        with pytest.raises(pymysql.err.OperationalError, match="Lost connection"):
            verify(tmp_path, Server({method: ("shop.items", lost)}))
