"""The work directory's locations: which schemes are accepted, and the local store's atomic operations."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.config import ConfigError
from airflow_cdc_provider.storage import StorageError, WorkStore, check_work_dir, join
from tests.conftest import read_config


@pytest.mark.parametrize("location", ["/srv/cdc/work", "file:///srv/cdc/work", "s3://bucket/cdc/work",
                                      "s3a://bucket/work"])
def test_local_paths_and_s3_are_accepted(location):
    assert check_work_dir(location) == location


@pytest.mark.parametrize(("location", "says"), [
    ("hdfs://nn:8020/cdc", "the scheme 'hdfs' is not supported"),
    ("gs://bucket/cdc", "the scheme 'gs' is not supported"),
    ("s3:///cdc", "needs a bucket"),
    ("cdc/work", "give an absolute path"),
    ("", "must be a path or a URI"),
])
def test_other_locations_are_refused_saying_why(location, says):
    with pytest.raises(StorageError, match=says):
        check_work_dir(location)


def test_the_configuration_refuses_a_work_dir_whose_lock_cannot_be_atomic():
    with pytest.raises(ConfigError, match=r"`work_dir:` in dag.yaml is 'hdfs://nn/cdc'.*atomic create-if-absent"):
        read_config({"tables": [{"source": "shop.orders"}], "work_dir": "hdfs://nn/cdc"}, "dag.yaml")
    config = read_config({"tables": [{"source": "shop.orders"}], "work_dir": "s3://b/cdc",
                                  "work_conn_id": "aws_cdc"})
    assert (config.work.dir, config.work.conn_id) == ("s3://b/cdc", "aws_cdc")


def test_local_store_creates_once_and_swaps_only_what_it_read(tmp_path):
    store, lock = WorkStore(), join(str(tmp_path), "t", "lock.json")
    assert store.create_text(lock, "A") and not store.create_text(lock, "B")
    assert not store.swap_text(lock, "B", "C") and store.read_text(lock) == "A"
    assert store.swap_text(lock, "A", "C") and store.read_text(lock) == "C"
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [".lock.json.guard", "lock.json"], "no temp file left"
    store.delete(lock)
    assert store.read_text(lock) is None and not store.swap_text(lock, "C", "D")


def test_spark_reads_local_files_by_file_uri(tmp_path):
    store = WorkStore()
    assert store.uri(str(tmp_path / "a b.parquet")) == (tmp_path / "a b.parquet").as_uri()
    assert store.uri(f"file://{tmp_path}/x") == f"file://{tmp_path}/x"

