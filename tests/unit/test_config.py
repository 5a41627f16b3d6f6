import pytest
import yaml

from airflow_cdc_provider.core.config import CdcConfig, ConfigError, TableConfig
from airflow_cdc_provider.core.errors import InvalidIdentifier
from airflow_cdc_provider.core.identifiers import TableName
from tests.conftest import DAGS


def test_example_config_reads():
    config = CdcConfig.from_dict(yaml.safe_load((DAGS / "cdc_config.yaml").read_text()))
    assert config.mysql_conn_id == "mysql_cdc" and config.hive.metastore_uri is None
    assert config.tables[0].source == TableName("shop", "orders")
    assert config.tables[0].target == "shop_orders"


def test_target_and_short_form():
    config = CdcConfig.from_dict({"tables": ["shop.a", {"source": "shop.b", "target": "bee"}]})
    assert [t.target for t in config.tables] == ["shop_a", "bee"]
    assert [t.group_id for t in config.tables] == ["shop__a", "shop__b"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "must be a mapping"),
        ({"tables": []}, "non-empty `tables:`"),
        ({"tables": ["shop.a"], "tabels": 1}, "unknown keys \\['tabels'\\]"),
        ({"tables": [{"src": "shop.a"}]}, "must be `source: schema.table`"),
        ({"tables": ["shop.a", "shop.a"]}, "shop.a more than once"),
        ({"tables": ["shop.a"], "hive": {"db": "x"}}, "must hold only"),
    ],
)
def test_bad_configs_say_what_is_wrong(data, message):
    with pytest.raises(ConfigError, match=message):
        CdcConfig.from_dict(data)


def test_bad_table_name():
    with pytest.raises(InvalidIdentifier, match="'orders'"):
        CdcConfig.from_dict({"tables": ["orders"]})


def test_hive_names_are_checked_and_lower_cased():
    config = CdcConfig.from_dict({"tables": [{"source": "Shop.Orders"}], "hive": {"database": "ODS"}})
    assert config.hive.database == "ods" and config.tables[0].hive_table(config.hive) == "ods.shop_orders"
    with pytest.raises(ConfigError, match=r"'shop_order-lines' is not a valid Hive name.*Set `target:` for shop.order-lines"):
        CdcConfig.from_dict({"tables": ["shop.`order-lines`"]})
    with pytest.raises(InvalidIdentifier, match="'my.db' is not a valid Hive name"):
        CdcConfig.from_dict({"tables": ["shop.a"], "hive": {"database": "my.db"}})


@pytest.mark.parametrize(("key", "value"), [("keep_versions", 1), ("retries", -1), ("retries", "2"), ("keep_versions", True)])
def test_counts_must_be_whole_numbers_in_range(key, value):
    with pytest.raises(ConfigError, match=f"`{key}:`.*got {value!r}"):
        CdcConfig.from_dict({"tables": ["shop.a"], key: value})


def test_schema_changes_is_strict_unless_set_for_all_or_per_table():
    config = CdcConfig.from_dict({"schema_changes": "evolve",
                                  "tables": ["shop.a", {"source": "shop.b", "schema_changes": "strict"}]})
    assert [config.policy(t) for t in config.tables] == ["evolve", "strict"]
    assert CdcConfig.from_dict({"tables": ["shop.a"]}).policy(TableConfig(TableName("shop", "a"), "a")) == "strict"
    with pytest.raises(ConfigError, match="`schema_changes:` of shop.a in the configuration must be one of strict, "
                                          "evolve, got 'loose'"):
        CdcConfig.from_dict({"tables": [{"source": "shop.a", "schema_changes": "loose"}]})
