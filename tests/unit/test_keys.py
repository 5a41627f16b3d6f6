import pytest

from airflow_cdc_provider.core.errors import NoUsableKey
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.keys import IndexColumn, choose_key, whole_row_table

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


def test_a_table_without_a_usable_key_has_its_whole_row_as_identity():
    for indexes, nullable in (([idx("uk_email", 1, "email")], {"email": True}),  # a unique key that allows NULL
                              ([idx("ix", 1, "c", False)], {"c": False}),  # an index that is not unique
                              ([], {"c": False})):  # no index at all
        key = choose_key(T, indexes, nullable)
        assert key.is_whole_row and key.columns == () and not key.is_primary


def test_a_declared_key_is_used_instead_of_the_tables_own():
    key = choose_key(T, [idx("PRIMARY", 1, "a")], {"a": False, "b": False, "c": False}, ["c", "b"])
    assert key.columns == ("c", "b") and key.is_declared and not key.is_primary
    assert choose_key(T, [], {"a": False}, ["a"]).columns == ("a",), "a table with no index at all"


def test_a_declared_key_names_columns_the_table_has_and_that_are_not_null():
    columns = {"a": False, "note": True}
    with pytest.raises(NoUsableKey, match=r"names zz, which shop.t does not have: its columns are a, note"):
        choose_key(T, [], columns, ["a", "zz"])
    with pytest.raises(NoUsableKey, match=r"names note, which allow NULL: a key column must be NOT NULL"):
        choose_key(T, [], columns, ["a", "note"])


def test_a_table_with_no_key_refuses_the_binlog_a_changelog_and_a_history_saying_what_to_do():
    whole_row_table("shop.t", None, False, False)
    whole_row_table("shop.t", "diff", False, False)
    with pytest.raises(NoUsableKey, match=r"shop.t has no primary key .* asks for `capture: binlog`: in the binlog, a "
                                          r"change to one of two equal rows .* Remove `capture: binlog`.*`key:`"):
        whole_row_table("shop.t", "binlog", False, False)
    with pytest.raises(NoUsableKey, match=r"given a `changelog:`.* Set `changelog: false` in its entry, or give it a "
                                          r"key"):
        whole_row_table("shop.t", None, True, False)
    with pytest.raises(NoUsableKey, match=r"given a `history:`.* Set `history: false`"):
        whole_row_table("shop.t", None, False, True)
