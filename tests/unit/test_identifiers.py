import pytest

from airflow_cdc_provider.core.errors import InvalidIdentifier
from airflow_cdc_provider.core.identifiers import TableName, quote_identifier


def test_quote_doubles_backticks():
    assert quote_identifier("orders") == "`orders`"
    assert quote_identifier("we`ird") == "`we``ird`"


@pytest.mark.parametrize("bad", ["", "x" * 65, "a\x00b", "trailing ", "emoji\U0001f600"])
def test_invalid_names_are_refused_with_the_value(bad):
    with pytest.raises(InvalidIdentifier) as err:
        quote_identifier(bad)
    assert repr(bad)[:20] in str(err.value)


def test_table_name_parsing():
    assert TableName.parse("shop.orders") == TableName("shop", "orders")
    assert TableName.parse(" shop.orders ") == TableName("shop", "orders")
    assert TableName.parse("`my.db`.`t``x`") == TableName("my.db", "t`x")
    assert TableName.parse("shop.orders").quoted == "`shop`.`orders`"
    assert str(TableName("shop", "orders")) == "shop.orders"


@pytest.mark.parametrize("bad", ["orders", "a.b.c", "shop.", ".orders", "`shop.orders", "`a`x.b"])
def test_table_name_needs_exactly_schema_and_table(bad):
    with pytest.raises(InvalidIdentifier) as err:
        TableName.parse(bad)
    assert bad in str(err.value) or "empty" in str(err.value)


@pytest.mark.parametrize("table", [TableName("shop", "orders"), TableName("my.db", "t`x"), TableName("a", "b.c")])
def test_table_name_text_round_trips(table):
    assert TableName.parse(str(table)) == table


@pytest.mark.parametrize("bad", ["orders\n", "ods\r\n", "\norders", "or ders", "my.db", "a" * 129, ""])
def test_a_hive_name_is_letters_digits_and_underscores_only_a_trailing_newline_included(bad):
    from airflow_cdc_provider.core.identifiers import validate_hive_name

    with pytest.raises(InvalidIdentifier, match="not a valid Hive name"):
        validate_hive_name(bad)
    assert validate_hive_name("Orders_2") == "orders_2"
