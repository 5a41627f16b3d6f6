import pytest

from airflow_cdc_provider.core.errors import InvalidIdentifier
from airflow_cdc_provider.core.identifiers import (
    TableName,
    backticked,
    formatted,
    hive_column_problem,
    quote_identifier,
    split_qualified,
)

# Names MySQL allows that break a name pasted into an expression: an injection, a struct path, quotes, a format.
AWKWARD = ["x`) AS STRING)||(SELECT 1)||CAST((`", "a.b", "sp ace", "q'uote", 'dq"uote', "``", "(p)", "pct%s"]


def test_quote_doubles_backticks():
    assert quote_identifier("orders") == "`orders`"
    assert quote_identifier("we`ird") == "`we``ird`"


@pytest.mark.parametrize("name", AWKWARD)
def test_a_quoted_name_reads_back_as_one_name_whatever_it_holds(name):
    # Spark SQL and MySQL read a quoted identifier the same way: the name between backticks, `` as one backtick.
    assert split_qualified(backticked(name)) == [(name, True)]
    assert quote_identifier(name) == backticked(name)
    assert backticked("__fill_" + "x" * 64) == "`__fill_" + "x" * 64 + "`"  # Spark's own names: no MySQL limit


def test_a_name_in_a_statement_run_with_arguments_keeps_its_percent_sign():
    assert formatted(quote_identifier("pct%s")) % () == "`pct%s`"
    assert formatted("`a`") == "`a`"


@pytest.mark.parametrize("name", AWKWARD + ["co:lon", "semi;colon", "new\nline", "ünï"])
def test_hive_holds_any_column_name_but_one_with_a_comma(name):
    assert hive_column_problem(name) is None
    assert hive_column_problem(name + ",") == "holds a comma (','), which a Hive table's column name cannot hold"


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
