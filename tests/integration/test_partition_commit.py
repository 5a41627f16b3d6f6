"""A version of a partitioned Hive table committed in one metastore call (``spark.partition_commit``), against real
Spark (local, in this process) and the embedded Derby metastore: one partition rewritten, one added, one emptied,
one untouched; and a commit stopped between adding the new partitions and the switch leaves the old rows."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_cdc_provider.core.identifiers import quote_identifier
from airflow_cdc_provider.core.partition_commit import PartitionChange
from airflow_cdc_provider.spark import partition_commit
from airflow_cdc_provider.spark.partition_commit import commit_partitions

pytestmark = pytest.mark.spark

OLD = {"2026-11-23": [(1, "a"), (2, "b")], "2026-11-24": [(3, "c")], "2026-11-25": [(4, "d"), (5, "e")]}


@dataclass
class Hive:
    session: Any
    warehouse: Path
    database: str


class _Sessions:
    """One Spark session at a time in this process (a JVM holds one Spark context): the embedded metastore's for
    most tests, the thrift service's for the last."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.current: tuple[str, Hive, Any] | None = None

    def get(self, kind: str, warehouse: Path, uri: str | None, database: str) -> Hive:
        from pyspark import SparkConf, SparkContext

        from airflow_cdc_provider.spark.session import hive_session

        if self.current is not None and self.current[0] == kind:
            return self.current[1]
        self.stop()
        context = SparkContext(conf=SparkConf().setMaster("local[1]").setAppName(f"partition-commit-{kind}")
                               .set("spark.ui.enabled", "false").set("spark.sql.shuffle.partitions", "1"))
        session = hive_session("partition-commit", str(warehouse), uri)
        session.sql(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
        self.current = (kind, Hive(session, warehouse, database), context)
        return self.current[1]

    def stop(self) -> None:
        if self.current is not None:
            self.current[1].session.stop()
            self.current[2].stop()
            self.current = None


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Sessions]:
    from airflow_cdc_testing.hive import spark_env

    root = tmp_path_factory.mktemp("partition-commit")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in spark_env().items():
            patch.setenv(key, value)
        patch.chdir(root)  # Derby's log
        held = _Sessions(root)
        try:
            yield held
        finally:
            held.stop()


@pytest.fixture
def hive(sessions: _Sessions) -> Hive:
    return sessions.get("embedded", sessions.root / "warehouse", None, "ods")


def _table(hive: Hive, name: str) -> Path:
    """An external Parquet table partitioned by dt, with the partitions of OLD, each in ``<table>/v1/dt=…``."""
    root = hive.warehouse / f"{hive.database}.db" / name
    qualified = f"{quote_identifier(hive.database)}.{quote_identifier(name)}"
    hive.session.sql(f"CREATE TABLE {qualified} (id bigint, v string) PARTITIONED BY (dt string) STORED AS PARQUET "
                     f"LOCATION '{root}'")
    for dt, rows in OLD.items():
        _write(hive.session, root / "v1" / f"dt={dt}", rows)
        hive.session.sql(f"ALTER TABLE {qualified} ADD PARTITION (dt='{dt}') "
                         f"LOCATION '{root / 'v1' / f'dt={dt}'}'")
    return root


def _write(spark: Any, path: Path, rows: list[tuple[int, str]]) -> None:
    spark.createDataFrame(rows, "id bigint, v string").coalesce(1).write.parquet(str(path))


def _rows(hive: Hive, name: str, where: str = "") -> list[tuple[int, str, str]]:
    frame = hive.session.sql(
        f"SELECT id, v, dt FROM {quote_identifier(hive.database)}.{quote_identifier(name)} {where}")
    return sorted((row.id, row.v, row.dt) for row in frame.collect())


def _flat(partitions: dict[str, list[tuple[int, str]]]) -> list[tuple[int, str, str]]:
    return sorted((id_, v, dt) for dt, rows in partitions.items() for id_, v in rows)


def _locations(hive: Hive, name: str) -> dict[str, str]:
    catalog = hive.session._jsparkSession.sharedState().externalCatalog()
    found = catalog.listPartitions(hive.database, name, hive.session._jvm.scala.Option.empty())
    return {str(p.spec().apply("dt")): str(p.storage().locationUri().get().toString())
            for p in (found.apply(i) for i in range(found.length()))}


def _sizes(hive: Hive, name: str) -> dict[str, tuple[str, str]]:
    """Each partition's file count and size as the metastore holds them (Spark's size estimate of a partition)."""
    catalog = hive.session._jsparkSession.sharedState().externalCatalog()
    found = catalog.listPartitions(hive.database, name, hive.session._jvm.scala.Option.empty())
    return {str(p.spec().apply("dt")): (str(p.parameters().apply("numFiles")), str(p.parameters().apply("totalSize")))
            for p in (found.apply(i) for i in range(found.length()))}


def _on_disk(directory: Path) -> tuple[str, str]:
    data = [p for p in directory.iterdir() if p.name.endswith(".parquet")]
    return str(len(data)), str(sum(p.stat().st_size for p in data))


def _files(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def _changes(root: Path) -> list[PartitionChange]:
    return [PartitionChange(values=(("dt", "2026-11-23"),), location=str(root / "v2" / "dt=2026-11-23")),
            PartitionChange(values=(("dt", "2026-11-26"),), location=str(root / "v2" / "dt=2026-11-26")),
            PartitionChange(values=(("dt", "2026-11-24"),))]  # emptied


NEW = {"2026-11-23": [(1, "a2"), (6, "f")], "2026-11-25": OLD["2026-11-25"], "2026-11-26": [(7, "g")]}


def test_one_commit_rewrites_adds_and_empties_partitions_and_leaves_the_others(hive):
    _rewrite_add_empty_and_leave_one(hive)


def _rewrite_add_empty_and_leave_one(hive: Hive) -> None:
    session, warehouse = hive.session, hive.warehouse
    root = _table(hive, "orders")
    untouched = root / "v1" / "dt=2026-11-25"
    files_before, locations_before = _files(untouched), _locations(hive, "orders")
    assert _rows(hive, "orders") == _flat(OLD)
    _write(session, root / "v2" / "dt=2026-11-23", NEW["2026-11-23"])
    _write(session, root / "v2" / "dt=2026-11-26", NEW["2026-11-26"])

    done = commit_partitions(session, hive.database, "orders", _changes(root), str(warehouse), str(root / "v2" / "_empty"))

    assert _rows(hive, "orders") == _flat(NEW)
    assert _rows(hive, "orders", "WHERE dt = '2026-11-24'") == [], "the emptied partition shows no rows"
    locations = _locations(hive, "orders")
    assert set(locations) == {"2026-11-23", "2026-11-24", "2026-11-25", "2026-11-26"}
    assert locations["2026-11-25"] == locations_before["2026-11-25"] and _files(untouched) == files_before
    assert locations["2026-11-23"] == f"file:{root}/v2/dt=2026-11-23"
    assert locations["2026-11-24"] == f"file:{root}/v2/_empty/dt=2026-11-24"
    assert os.listdir(root / "v2" / "_empty" / "dt=2026-11-24") == []
    # The metastore counted the files of each partition's new directory, not those of its old one.
    assert _sizes(hive, "orders") == {"2026-11-23": _on_disk(root / "v2" / "dt=2026-11-23"),
                                         "2026-11-24": ("0", "0"), "2026-11-25": _on_disk(untouched),
                                         "2026-11-26": _on_disk(root / "v2" / "dt=2026-11-26")}
    assert done.added == ((("dt", "2026-11-26"),),)
    assert [(s.values[0][1], s.before, s.after, s.emptied) for s in done.switched] == [
        ("2026-11-23", locations_before["2026-11-23"], locations["2026-11-23"], False),
        ("2026-11-26", None, locations["2026-11-26"], False),
        ("2026-11-24", locations_before["2026-11-24"], locations["2026-11-24"], True)]
    # The old files stay for a query that started on them; removing them is the merge's cleanup, not the commit's.
    assert _files(root / "v1" / "dt=2026-11-23")


def test_a_commit_stopped_before_the_switch_leaves_the_old_rows_and_its_retry_completes(hive, monkeypatch):
    session, warehouse = hive.session, hive.warehouse
    root = _table(hive, "stopped")
    _write(session, root / "v2" / "dt=2026-11-23", NEW["2026-11-23"])
    _write(session, root / "v2" / "dt=2026-11-26", NEW["2026-11-26"])
    locations_before = _locations(hive, "stopped")

    def stop(name: str) -> None:
        if name == "partition_commit.added":
            raise RuntimeError("stopped between adding and switching")

    monkeypatch.setattr(partition_commit, "failpoint", stop)
    with pytest.raises(RuntimeError, match="stopped between"):
        commit_partitions(session, hive.database, "stopped", _changes(root), str(warehouse), str(root / "v2" / "_empty"))
    session.catalog.refreshTable(f"{hive.database}.stopped")
    assert _rows(hive, "stopped") == _flat(OLD), "exactly the old rows: the new partition shows none"
    locations = _locations(hive, "stopped")
    assert locations == {**locations_before, "2026-11-26": f"file:{root}/v2/_empty/dt=2026-11-26"}

    monkeypatch.undo()
    done = commit_partitions(session, hive.database, "stopped", _changes(root), str(warehouse), str(root / "v2" / "_empty"))
    assert done.added == () and done.switched[1].before == f"file:{root}/v2/_empty/dt=2026-11-26"
    assert _rows(hive, "stopped") == _flat(NEW)


def test_a_refused_commit_changes_nothing(hive):
    session, warehouse = hive.session, hive.warehouse
    root = _table(hive, "refused")
    before = _locations(hive, "refused")
    outside = [PartitionChange(values=(("dt", "2026-11-23"),), location=str(warehouse.parent / "elsewhere")),
               PartitionChange(values=(("dt", "2026-11-27"),), location=str(root / "v2" / "dt=2026-11-27"))]
    with pytest.raises(partition_commit.PartitionCommitRefused) as refused:
        commit_partitions(session, hive.database, "refused", outside, str(warehouse), str(root / "v2" / "_empty"))
    assert "not under the warehouse" in str(refused.value) and "does not exist" not in str(refused.value)
    missing = outside[1:]
    with pytest.raises(partition_commit.PartitionCommitRefused, match="does not exist: write the partition"):
        commit_partitions(session, hive.database, "refused", missing, str(warehouse), str(root / "v2" / "_empty"))
    assert _locations(hive, "refused") == before and not (root / "v2").exists()


def test_the_metastore_alters_a_list_of_partitions_whole_or_not_at_all(hive):
    # What the commit relies on, shown on the metastore itself: one alterPartitions whose list holds a partition
    # that cannot be altered (it does not exist) changes none of the others, wherever it is in the list. (Hive 2.3
    # reads every partition of the list before it alters one, in the same transaction.)
    session = hive.session
    root = _table(hive, "whole")
    before = _locations(hive, "whole")
    catalog = partition_commit._Catalog(session)
    existing = catalog.external.getPartition(hive.database, "whole", catalog.spec((("dt", "2026-11-23"),)))
    moved = catalog.relocated(existing, str(root / "v1" / "dt=2026-11-24"))
    ghost = moved.copy(catalog.spec((("dt", "1999-01-01"),)), *[getattr(moved, f"copy$default${n}")()
                                                               for n in range(2, 7)])
    for order in ([moved, ghost], [ghost, moved]):
        with pytest.raises(Exception, match="NoSuchObjectException"):
            catalog.external.alterPartitions(hive.database, "whole", catalog.seq(order))
        assert _locations(hive, "whole") == before


def test_the_same_commit_through_a_metastore_service(sessions, metastore_service):
    # The thrift service runs the same alter_partitions as the embedded metastore, behind one more process.
    _rewrite_add_empty_and_leave_one(sessions.get("thrift", metastore_service.warehouse_dir, metastore_service.uri,
                                                  "ods_partition_commit"))


def _plain_table(hive: Hive, name: str, columns: str, rows: list[tuple]) -> tuple[str, Path]:
    root = hive.warehouse / f"{hive.database}.db" / name
    hive.session.createDataFrame(rows, columns).coalesce(1).write.parquet(str(root / "v1"))
    qualified = f"{quote_identifier(hive.database)}.{quote_identifier(name)}"
    hive.session.sql(f"CREATE TABLE {qualified} ({columns}) STORED AS PARQUET LOCATION '{root / 'v1'}'")
    return qualified, root


def _switched_both_ways(hive: Hive) -> None:
    from airflow_cdc_provider.spark.table_commit import switch_definition

    # A widening (int to bigint, a decimal's precision and scale up): the columns and the location in one call.
    qualified, root = _plain_table(hive, "widened", "id int, n int, d decimal(10,2)", [(1, 5, None)])
    hive.session.createDataFrame([(1, 5_000_000_000, None), (2, 7, None)], "id int, n bigint, d decimal(14,3)") \
        .coalesce(1).write.parquet(str(root / "v2"))
    assert switch_definition(hive.session, hive.database, "widened",
                             [("id", "int"), ("n", "bigint"), ("d", "decimal(14,3)")], str(root / "v2")) is None
    table = hive.session.table(qualified)
    assert [f.dataType.simpleString() for f in table.schema] == ["int", "bigint", "decimal(14,3)"]
    assert sorted(tuple(r) for r in table.collect()) == [(1, 5_000_000_000, None), (2, 7, None)]
    # Another kind in a column's place, which the metastore (Hive's defaults) does not count as compatible: refused,
    # said, and the table is as it was (the merge then defines it again under its staged name).
    qualified, root = _plain_table(hive, "rekinded", "id int, c string", [(1, "x")])
    hive.session.createDataFrame([(1, 9)], "id int, c int").coalesce(1).write.parquet(str(root / "v2"))
    refused = switch_definition(hive.session, hive.database, "rekinded", [("id", "int"), ("c", "int")],
                                str(root / "v2"))
    assert refused is not None and "types incompatible with the existing columns" in refused, refused
    assert [tuple(r) for r in hive.session.table(qualified).collect()] == [(1, "x")]
    assert [f.dataType.simpleString() for f in hive.session.table(qualified).schema] == ["int", "string"]


def test_a_plain_tables_columns_and_location_switch_in_one_metastore_call(hive):
    _switched_both_ways(hive)
