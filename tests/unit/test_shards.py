"""Shards (``shards:``): many source tables into one Hive table, each shard its own ledger and partition."""

import pytest

from airflow_cdc_provider.core.catalog import resolve
from airflow_cdc_provider.core.config import ConfigError
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.merge import version_dir_problem
from airflow_cdc_provider.core.shards import BadShards, Shard, Sharding, shard_problem
from airflow_cdc_provider.core.workdir import TableDir, capture_dir_problem
from tests.conftest import read_config


def resolved(tables, found):
    config = read_config({"tables": tables})
    return resolve(config.tables, [TableName.parse(t) for t in found], {}, config.hive)


def test_a_patterns_shards_share_its_target_and_a_mix_is_still_a_clash():
    r = resolved([{"source": "shop_??.orders_*", "target": "orders", "shards": True}],
                 ["shop_00.orders_00", "shop_00.orders_01", "shop_01.orders_00", "shop_01.items"])
    assert sorted(str(t.source) for t in r.tables) == ["shop_00.orders_00", "shop_00.orders_01",
                                                       "shop_01.orders_00"]
    assert {t.target for t in r.tables} == {"orders"} and {t.settings.shards for t in r.tables} == {Sharding()}
    assert not r.unusable
    # Two entries sharing the target: shards when both say so, each naming its server or neither.
    r = resolved([{"source": "a.orders", "target": "orders", "shards": {"server": "eu"}},
                  {"source": "b.orders", "target": "orders", "shards": {"server": "us"}}], ["a.orders", "b.orders"])
    assert len(r.tables) == 2 and not r.unusable
    r = resolved([{"source": "a.*", "target": "orders", "shards": True},
                  {"source": "b.*", "target": "orders", "shards": {"server": "us"}}], ["a.orders", "b.orders"])
    assert not r.tables and {str(n) for n, _ in r.unusable} == {"a.orders", "b.orders"}
    r = resolved([{"source": "a.*", "target": "orders", "shards": True}, {"source": "b.orders", "target": "orders"}],
                 ["a.orders", "b.orders"])
    assert [str(t.source) for t in r.tables] == ["b.orders"], "a table that is no shard keeps the clash: named wins"
    assert [str(n) for n, _ in r.unusable] == ["a.orders"]


@pytest.mark.parametrize("value", [{"server": ""}, {"server": "eu west"}, {"host": "eu"}, "yes", 3,
                                   {"server": "x" * 65}])
def test_a_bad_shards_value_is_refused_naming_the_entry_and_the_forms(value):
    with pytest.raises(ConfigError, match=r"`shards:` of the pattern shop.\* in .* must be `true`, or name the "
                                          r"server its tables come from, such as `shards: \{server: eu_1\}`"):
        read_config({"tables": [{"source": "shop.*", "target": "orders", "shards": value}]})
    assert read_config({"tables": [{"source": "shop.*", "shards": False}]}).tables[0].settings.shards is None


def test_a_shard_is_its_partition_and_its_own_directory():
    shard = Shard(server="eu", source_schema="shop/0", source_table="orders.1")
    assert shard.values == (("_source_server", "eu"), ("_source_schema", "shop/0"), ("_source_table", "orders.1"))
    assert shard.name == "eu.shop/0.orders.1"
    assert shard.path == "eu/shop%2F0/orders.1", "each value one level, a slash escaped"
    assert Shard(source_schema="a", source_table="b").columns == ("_source_schema", "_source_table")
    table = TableDir(work_dir="/w", hive_table="ods.orders", shard=shard.path)
    assert table.root == "/w/ods.orders/shards/eu/shop%2F0/orders.1"
    assert table.committed == "/w/ods.orders/shards/eu/shop%2F0/orders.1/ledger/committed.json"
    run = table.run("r1").root
    assert capture_dir_problem(run, "ods.orders", "r1", shard.path) is None
    assert "is not the directory" in capture_dir_problem(run, "ods.orders", "r1")
    assert "is not the directory" in capture_dir_problem(TableDir(work_dir="/w", hive_table="ods.orders").run(
        "r1").root, "ods.orders", "r1", shard.path), "another shard's, or the table's own, are not its"


def test_a_shards_versions_are_under_its_partitions_directory_in_the_table():
    wh = "/wh"
    mine = "orders/_source_schema=a/_source_table=b"
    assert version_dir_problem(f"{wh}/ods.db/{mine}/v000003", wh, mine) is None
    assert version_dir_problem(f"{wh}/ods.db/orders/v000003", wh, mine) is not None
    assert version_dir_problem(f"{wh}/ods.db/orders/_source_schema=a/_source_table=c/v000003", wh, mine) is not None
    assert version_dir_problem(f"{wh}/ods.db/{mine}/v000003", wh, "orders") is not None


def test_what_a_shard_cannot_have_is_refused_with_the_way_on():
    shard = Shard(source_schema="shop", source_table="orders")
    columns = [("id", "int"), ("amount", "decimal(10,2)")]
    shard_problem("shop.orders", shard, columns, False, False, False)
    with pytest.raises(BadShards, match=r"has the column\(s\) _source_table, which the Hive table of the shards adds"):
        shard_problem("shop.orders", shard, [*columns, ("_source_table", "varchar(10)")], False, False, False)
    with pytest.raises(BadShards, match=r"given a `partition_by:`.*Set `partition_by: null`"):
        shard_problem("shop.orders", shard, columns, True, False, False)
    with pytest.raises(BadShards, match=r"given a `changelog:`.*Set `changelog: false`"):
        shard_problem("shop.orders", shard, columns, False, True, False)
    with pytest.raises(BadShards, match=r"given a `history:`"):
        shard_problem("shop.orders", shard, columns, False, False, True)


def test_a_shards_partition_directory_is_escaped_as_hive_escapes_a_path():
    shard = Shard(server="e", source_schema="a/b", source_table="c=d%#")
    assert shard.partition_dir == "_source_server=e/_source_schema=a%2Fb/_source_table=c%3Dd%25%23"
    assert Shard(source_schema="shop_00", source_table="orders$1").partition_dir == \
        "_source_schema=shop_00/_source_table=orders$1"
