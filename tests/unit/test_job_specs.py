"""What the Spark jobs are handed, checked by the models every reader goes through: Hive names by Hive's rules,
column names by MySQL's, the zone and the locations before they reach a statement, an expression or a delete."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from airflow_cdc_provider.core.changelog import ChangelogSettings, ChangelogSpec
from airflow_cdc_provider.core.history import HistorySettings, HistorySpec
from airflow_cdc_provider.core.ledger import RunRef, VersionInfo
from airflow_cdc_provider.core.merge import (
    MergeJob,
    MergeSpec,
    VersionRefused,
    merge_spec,
    partition_location_problem,
    version_dir_problem,
    version_locations,
)
from airflow_cdc_provider.core.partitioning import PartitionSpec
from airflow_cdc_provider.core.verify import VerifyJob
from airflow_cdc_provider.core.watermark import Watermark
from airflow_cdc_provider.core.workdir import location_problem, within
from tests.unit.test_contract import RUN_DIR, merge_input, table_plan

WAREHOUSE = "/srv/cdc/warehouse"


def spec() -> MergeSpec:
    return merge_spec(table_plan(), merge_input(), WAREHOUSE, None, 3)


def spec_with(**changes) -> str:
    """The spec's file text with ``changes``, as someone who could write the job file might have made it."""
    return json.dumps({**json.loads(spec().to_text()), **changes})


def test_a_spec_made_by_the_merge_task_reads_back():
    assert MergeSpec.from_text(spec().to_text()) == spec()


@pytest.mark.parametrize(("changes", "says"), [
    ({"database": "ods\n"}, "not a valid Hive name"),
    ({"table": "orders; DROP TABLE x"}, "not a valid Hive name"),
    ({"table": "Orders"}, "must be in lower case"),
    ({"columns": [["id", "int"], ["bad\x00", "string"]]}, "contains a NUL character"),
    ({"columns": [["id", "int) LOCATION '/etc"]]}, "not a Hive type the merge writes"),
    ({"warehouse_dir": "/srv/cdc/warehouse/../../etc"}, r"holds a `\.` or `\.\.` segment"),
    ({"warehouse_dir": "relative/warehouse"}, "neither an absolute path nor a URI"),
    ({"upsert_files": ["file:///srv/cdc/work/ods.orders/runs/r/../../../other/upsert.parquet"]}, r"`\.\.`"),
    ({"delete_file": "/srv/x'; DROP"}, "holds a quote"),
    ({"datetime_zone": "UTC') OR (1=1"}, "not a zone name"),
    ({"spark_conf": [["spark.executor.memory", "1g"]]}, "not a runtime SQL setting"),
])
def test_a_spec_whose_names_or_locations_break_the_rules_is_refused_where_it_is_read(changes, says):
    with pytest.raises(ValidationError, match=says):
        MergeSpec.from_text(spec_with(**changes))


@pytest.mark.parametrize(("changes", "says"), [
    # a file of another table's run, of another run of this table, or of no run at all
    ({"upsert_files": [RUN_DIR.replace("/ods.orders/", "/ods.customers/") + "/u.parquet"]}, "not under its run's"),
    ({"delete_file": RUN_DIR.rsplit("/", 1)[0] + "/an-earlier-run/d.parquet"}, "not under its run's"),
    ({"fills_file": "/etc/fills.parquet"}, "not under its run's"),
    ({"events_file": "/etc/events.parquet"}, "not under its run's"),
    ({"upsert_files": [RUN_DIR]}, "not under its run's"),  # the directory itself is no file
    ({"capture_dir": "s3a://work" + RUN_DIR, "upsert_files": ["s3a://other" + RUN_DIR + "/u.parquet"],
      "delete_file": None}, "not under its run's"),  # another bucket
    # the run directory moved with them: it must still be this table's directory for this run
    ({"capture_dir": "/tmp", "upsert_files": ["/tmp/u.parquet"]}, "is not the directory of ods.orders's run"),
    ({"capture_dir": RUN_DIR.replace("/ods.orders/", "/ods.customers/")}, "is not the directory of ods.orders"),
])
def test_a_spec_reads_capture_files_only_from_its_own_runs_directory(changes, says):
    with pytest.raises(ValidationError, match=says):
        MergeSpec.from_text(spec_with(**changes))


def test_the_merge_task_refuses_a_merge_input_naming_files_outside_the_runs_directory():
    stray = merge_input().model_copy(update={"upsert_files": ("/w/ods.orders/u.parquet",)})
    with pytest.raises(ValueError, match=r"names /w/ods.orders/u.parquet, which is not under the run's directory"):
        merge_spec(table_plan(), stray, WAREHOUSE, None, 3)
    # On S3 the spec names the files by their URIs, and they are still under the run's directory's URI.
    on_s3 = merge_spec(table_plan(), merge_input(), WAREHOUSE, None, 3, uri=lambda p: f"s3a://work{p}")
    assert on_s3.capture_dir == f"s3a://work{RUN_DIR}" and on_s3.upsert_files == (f"s3a://work{RUN_DIR}/u.parquet",)
    assert spec().events_file is None and on_s3.events_file is None, "no events file but for a changelog of all"
    events = merge_input().model_copy(update={"events_file": f"{RUN_DIR}/events.parquet"})
    assert merge_spec(table_plan(), events, WAREHOUSE, None, 3, uri=lambda p: f"s3a://work{p}").events_file == (
        f"s3a://work{RUN_DIR}/events.parquet")
    with pytest.raises(ValueError, match=r"names /w/events.parquet, which is not under the run's directory"):
        merge_spec(table_plan(), events.model_copy(update={"events_file": "/w/events.parquet"}), WAREHOUSE, None, 3)


def test_the_spec_of_a_table_with_a_changelog_names_its_changelog_table_and_settings():
    assert spec().changelog is None, "a table without a changelog has none"
    plan = table_plan()
    settings = ChangelogSettings(snapshot="none", day_column="day")
    plan = plan.model_copy(update={"table": plan.table.model_copy(update={"changelog": settings})})
    with_changelog = merge_spec(plan, merge_input(), WAREHOUSE, None, 3)
    assert with_changelog.changelog == ChangelogSpec(table="orders_changelog", settings=settings)
    assert (with_changelog.database, with_changelog.table) == ("ods", "orders"), "in the table's database"
    assert MergeSpec.from_text(with_changelog.to_text()) == with_changelog


def test_the_spec_of_a_table_with_a_history_names_the_tables_its_settings_ask_for():
    assert spec().history is None, "a table without a history has none"
    plan = table_plan()
    for settings, snapshots, history in ((HistorySettings(daily=True, keep_days=30), "orders_snapshots", None),
                                         (HistorySettings(scd2=True, granularity="run"), None, "orders_history"),
                                         (HistorySettings(daily=True, scd2=True), "orders_snapshots", "orders_history")):
        with_history = merge_spec(plan.model_copy(update={"table": plan.table.model_copy(update={"history": settings})}),
                                  merge_input(), WAREHOUSE, None, 3)
        assert with_history.history == HistorySpec(snapshots=snapshots, history=history, settings=settings)
        assert MergeSpec.from_text(with_history.to_text()) == with_history
    # A spec file naming a table its settings do not ask for, or a name Hive would not keep as it is, is refused.
    for wrong in ({"snapshots": "orders_snapshots", "history": None, "settings": {"scd2": True}},
                  {"snapshots": None, "history": "Orders_History", "settings": {"scd2": True}}):
        with pytest.raises(ValidationError):
            MergeSpec.model_validate_json(spec_with(target={"kind": "plain", "history": wrong}))


def test_a_job_has_one_warehouse_and_a_result_file_it_may_write():
    job = MergeJob(warehouse_dir=WAREHOUSE, metastore_uri=None, tables=(spec(),),
                   result_file="/srv/cdc/work/ods.orders/runs/r/merge-result-1.json")
    assert MergeJob.from_text(job.to_text()) == job
    with pytest.raises(ValidationError, match="names another warehouse"):
        MergeJob(warehouse_dir="/elsewhere", metastore_uri=None, tables=(spec(),), result_file=job.result_file)
    with pytest.raises(ValidationError, match=r"`\.\.` segment"):
        MergeJob(warehouse_dir=WAREHOUSE, metastore_uri=None, tables=(spec(),), result_file="/srv/cdc/work/../x.json")


@pytest.mark.parametrize(("path", "fine"), [
    ("file:/srv/cdc/warehouse/ods.db/orders/v000004", True),
    ("/srv/cdc/warehouse/ods.db/orders/v000004", True),
    ("hdfs://nn/srv/cdc/warehouse/orders/v000012", True),  # a plain warehouse path is on the default filesystem
    ("file:/srv/cdc/warehouse/ods.db/customers/v000004", False),  # another table's version
    ("file:/srv/cdc/warehouse/ods.db/orders", False),  # the table's directory itself
    ("file:/srv/cdc/warehouse/ods.db/orders/v4", False),
    ("file:/srv/cdc/warehouse/ods.db/orders/v000004\n", False),
    ("file:/srv/other/ods.db/orders/v000004", False),  # outside the warehouse
    ("file:/srv/cdc/warehouse-old/orders/v000004", False),  # a sibling whose name starts alike
    ("file:/srv/cdc/warehouse/../../etc/orders/v000004", False),
])
def test_the_merge_writes_and_deletes_only_the_tables_own_version_directories_in_the_warehouse(path, fine):
    assert (version_dir_problem(path, WAREHOUSE, "orders") is None) == fine


def test_within_compares_schemes_and_buckets_when_the_directory_names_them():
    assert within("s3a://bucket/wh/ods.db/t", "s3://bucket/wh") and not within("s3://other/wh/t", "s3://bucket/wh")
    assert not within("hdfs://nn/wh/t", "file:///wh") and within("file:/wh/t", "file:///wh")
    assert location_problem("s3://bucket/wh", "warehouse") is None and location_problem("/wh", "warehouse") is None


def verify_job(**changes) -> VerifyJob:
    fields = {"warehouse_dir": WAREHOUSE, "metastore_uri": None, "table": "ods.orders",
              "columns": (("id", "int"), ("at", "datetime")), "key": ("id",), "mariadb": True, "buckets": 4,
              "result_file": "/srv/cdc/work/ods.orders/runs/r/verify-result.json",
              "location": f"file:{WAREHOUSE}/ods.db/orders/v000003", "time_zone": "Europe/Paris"}
    return VerifyJob.model_validate_json(json.dumps({**fields, **changes}))


@pytest.mark.parametrize(("changes", "says"), [
    ({"table": "ods.orders\n"}, "not a valid Hive name"),
    ({"table": "ods"}, "not a valid Hive name"),
    ({"columns": [["id`) OR 1=1 --\x00", "int"]], "key": ["id`) OR 1=1 --\x00"]}, "NUL character"),
    ({"columns": [["id", "int"], ["at", "datetime; DROP"]]}, "Cannot read the column type"),
    ({"time_zone": "UTC', 'x"}, "not a zone name"),
    ({"location": f"file:{WAREHOUSE}/ods.db/customers/v000003"}, "not a version directory of the table orders"),
    ({"location": "file:/etc/orders/v000003"}, "not under the warehouse"),
    ({"source_file": "/srv/cdc/work/./x.json"}, r"`\.` or `\.\.` segment"),
])
def test_a_verify_job_whose_names_or_locations_break_the_rules_is_refused(changes, says):
    assert verify_job().table == "ods.orders"
    with pytest.raises(Exception, match=says):
        verify_job(**changes)


# A partitioned version of ods.orders: v000003 rewrote dt=2026-11-25 and emptied dt=2026-11-23; dt=2026-11-24 and
# the NULL partition stay where version 1 wrote them.
TABLE_DIR = f"file:{WAREHOUSE}/ods.db/orders"
PARTITIONS = (("2026-11-24", f"{TABLE_DIR}/v000001/dt=2026-11-24"),
              ("2026-11-25", f"{TABLE_DIR}/v000003/dt=2026-11-25"),
              ("2026-11-23", f"{TABLE_DIR}/v000003/_empty/dt=2026-11-23"),
              ("__HIVE_DEFAULT_PARTITION__", f"{TABLE_DIR}/v000001/dt=__HIVE_DEFAULT_PARTITION__"))


def version_info(version: int = 3, partitions=PARTITIONS, spec: str | None = "day(created_at)") -> VersionInfo:
    partitioning = PartitionSpec.parse(spec).resolve([("id", "int"), ("created_at", "datetime")]) if spec else None
    return VersionInfo(version=version, watermark=Watermark("binlog.000002", 4, server_id=1),
                       run=RunRef("d", "r"), partitioning=partitioning, partitions=partitions)


def test_a_partitioned_version_is_read_from_every_partition_its_version_file_lists():
    assert version_locations(version_info(), f"{TABLE_DIR}/v000003", WAREHOUSE, "orders") == tuple(
        where for _, where in PARTITIONS)
    # No partition at all (every row deleted): nothing to read, and nothing wrong.
    assert version_locations(version_info(partitions=()), f"{TABLE_DIR}/v000003", WAREHOUSE, "orders") == ()
    # A partition on another filesystem spelling of the same place, as the metastore may write it.
    plain = (("2026-11-24", f"{WAREHOUSE}/ods.db/orders/v000002/dt=2026-11-24"),)
    assert version_locations(version_info(partitions=plain), f"{TABLE_DIR}/v000003", WAREHOUSE, "orders") == (
        plain[0][1],)


def test_an_unpartitioned_version_is_read_from_its_own_directory():
    assert version_locations(version_info(partitions=(), spec=None), f"{TABLE_DIR}/v000003", WAREHOUSE,
                             "orders") == (f"{TABLE_DIR}/v000003",)


@pytest.mark.parametrize(("where", "says"), [
    (f"file:{WAREHOUSE}/ods.db/customers/v000001/dt=2026-11-24", "not one of the table's partition directories"),
    ("file:/etc/orders/v000001/dt=2026-11-24", "not one of the table's partition directories"),
    (f"file:{WAREHOUSE}/ods.db/orders/v000004/dt=2026-11-24", "in version 3 or an older one"),  # a later attempt
    (f"file:{WAREHOUSE}/ods.db/orders/v000001", "not one of the table's partition directories"),  # a whole version
    (f"file:{WAREHOUSE}/ods.db/orders", "not one of the table's partition directories"),
    (f"file:{WAREHOUSE}/ods.db/orders/dt=2026-11-24", "not one of the table's partition directories"),
    (f"file:{WAREHOUSE}/ods.db/orders/v000001/day=2026-11-24", "vNNNNNN/dt=…"),  # another column
    (f"file:{WAREHOUSE}/ods.db/orders/v000001/dt=", "not one of the table's partition directories"),
    (f"file:{WAREHOUSE}/ods.db/orders/v000001/dt=2026-11-24/x", "not one of the table's partition directories"),
    (f"file:{WAREHOUSE}/ods.db/orders/v000001/_empty/x/dt=2026-11-24", "not one of the table's partition"),
    (f"file:{WAREHOUSE}/ods.db/orders/v000001/_other/dt=2026-11-24", "not one of the table's partition"),
    (f"file:{WAREHOUSE}/ods.db/orders/v000001/../../customers/v000001/dt=1", r"`\.` or `\.\.` segment"),
    (f"file:{WAREHOUSE}/ods.db/orders/v000001/dt=it's", "holds a quote"),
    (f"hdfs://nn{WAREHOUSE}/ods.db/orders/v000001/dt=2026-11-24", "not one of the table's partition directories"),
    ("dt=2026-11-24", "neither an absolute path nor a URI"),
])
def test_a_partition_anywhere_but_the_tables_own_version_directories_is_refused(where, says):
    info = version_info(partitions=(PARTITIONS[1], ("2026-11-24", where)))
    with pytest.raises(VersionRefused, match=says) as refused:
        version_locations(info, f"{TABLE_DIR}/v000003", WAREHOUSE, "orders")
    message = str(refused.value)
    assert "dt=2026-11-24" in message and "fresh_snapshot=true" in message
    assert partition_location_problem(PARTITIONS[1][1], "2026-11-25", info, f"{TABLE_DIR}/v000003", WAREHOUSE,
                                      "orders") is None


@pytest.mark.parametrize(("info", "location", "says"), [
    (None, f"{TABLE_DIR}/v000003", "holds no _cdc_version.json"),
    (version_info(version=2), f"{TABLE_DIR}/v000003", "is of version 2"),
    (version_info(), f"file:{WAREHOUSE}/ods.db/customers/v000003", "not a version directory of the table orders"),
    (version_info(spec=None), f"{TABLE_DIR}/v000003", "lists 4 partitions but no partitioning"),
    (version_info(partitions=(*PARTITIONS, ("2026-11-24", f"{TABLE_DIR}/v000002/dt=2026-11-24"))),
     f"{TABLE_DIR}/v000003", "the partition value '2026-11-24' more than once"),
    (version_info(partitions=(*PARTITIONS, ("2026-11-22", PARTITIONS[0][1]))), f"{TABLE_DIR}/v000003",
     "the partition location .* more than once"),
])
def test_a_version_file_that_the_merge_would_not_write_is_refused(info, location, says):
    with pytest.raises(VersionRefused, match=says):
        version_locations(info, location, WAREHOUSE, "orders")
