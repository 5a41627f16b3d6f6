import pytest

from airflow_cdc_provider.core.errors import NoUsableKey
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.keys import IndexColumn, choose_key

T = TableName("shop", "t")


def idx(name, seq, col, unique=True):
    return IndexColumn(name, seq, col, not unique)


def test_primary_key_wins_in_index_order():
    rows = [idx("uk", 1, "email"), idx("PRIMARY", 2, "b"), idx("PRIMARY", 1, "a")]
    key = choose_key(T, rows, {"a": False, "b": False, "email": False})
    assert key.columns == ("a", "b") and key.is_primary


def test_not_null_unique_key_with_fewest_columns():
    rows = [idx("uk_wide", 1, "a"), idx("uk_wide", 2, "b"), idx("uk_email", 1, "email"), idx("ix", 1, "c", False)]
    key = choose_key(T, rows, {"a": False, "b": False, "email": False, "c": False})
    assert key.columns == ("email",) and key.index_name == "uk_email"


def test_nullable_unique_key_is_refused_and_named():
    with pytest.raises(NoUsableKey, match="uk_email allow NULL"):
        choose_key(T, [idx("uk_email", 1, "email")], {"email": True})


def test_no_key_is_refused():
    with pytest.raises(NoUsableKey, match="shop.t has no primary key"):
        choose_key(T, [idx("ix", 1, "c", False)], {"c": False})
