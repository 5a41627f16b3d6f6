"""Schema changes: what each policy takes on, the message when it does not, DDL targets, added columns' values."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from decimal import Decimal

import pytest

from airflow_cdc_provider.core.schema import (
    SchemaChange,
    SchemaChangeRefused,
    UnknownDefault,
    added_column_default,
    added_columns,
    check_changes,
    landing,
    layout_plans,
    logged_as,
    refusal,
    reload_reason,
    retyped_columns,
)

BEFORE = (("id", "int(11)"), ("name", "varchar(10)"), ("price", "decimal(10,2)"))
DDL = "`ALTER TABLE items DROP COLUMN name` (binlog file 3, end position 1234)"


def change(*after, ddl=DDL):
    return SchemaChange("shop.items", "binlog file 3, end position 1300", ddl, BEFORE, tuple(after))


def test_an_added_column_is_taken_on_by_both_policies():
    added = change(*BEFORE, ("note", "text"))
    assert added.added == ["note"] and not added.dropped and not added.retyped
    assert refusal(added, "strict", ["id"]) is None and refusal(added, "evolve", ["id"]) is None


def test_strict_refuses_a_drop_naming_the_ddl_its_position_and_the_ways_out():
    dropped = change(BEFORE[0], BEFORE[2])
    message = refusal(dropped, "strict", ["id"])
    assert "ALTER TABLE items DROP COLUMN name` (binlog file 3, end position 1234)" in message
    assert "dropped name" in message and "the Hive table is as it was" in message
    assert "fresh_snapshot=true" in message and "schema_changes: evolve" in message
    assert refusal(dropped, "evolve", ["id"]) is None
    with pytest.raises(SchemaChangeRefused, match="DROP COLUMN name"):
        check_changes([dropped], "strict", ["id"])


def test_a_rename_is_a_drop_and_an_add():
    renamed = change(BEFORE[0], ("title", "varchar(10)"), BEFORE[2])
    assert renamed.added == ["title"] and renamed.dropped == ["name"]
    assert refusal(renamed, "strict", ["id"]) and refusal(renamed, "evolve", ["id"]) is None


def test_type_changes_that_land_the_same_pass_others_load_the_table_anew_in_both_policies():
    wider = change(BEFORE[0], ("name", "varchar(50)"), BEFORE[2])
    assert not wider.retyped and refusal(wider, "strict", ["id"]) is None and reload_reason([wider], ["id"]) is None
    money = change(BEFORE[0], BEFORE[1], ("price", "decimal(12,2)"))
    assert money.retyped == [("price", "decimal(10,2)", "decimal(12,2)")]
    # A widening keeps every value: neither policy refuses it, and no merge can follow it.
    for policy in ("strict", "evolve"):
        assert refusal(money, policy, ["id"]) is None
    why = reload_reason([money], ["id"])
    assert why.startswith("The table shop.items changed by `ALTER TABLE items DROP COLUMN name`") and \
        "The column(s) price (decimal(10,2) → decimal(12,2)) land as another Hive type, which Hive cannot change in " \
        "place" in why
    # Strict still refuses what it refuses beside a retype: a drop.
    both = change(BEFORE[0], ("price", "decimal(12,2)"))
    assert "takes on added columns only" in refusal(both, "strict", ["id"]) and refusal(both, "evolve", ["id"]) is None


def test_a_column_dropped_and_added_again_with_another_type_is_seen_by_the_net_change():
    dropped = change(BEFORE[0], BEFORE[2])
    added = SchemaChange("shop.items", "binlog file 3, end position 1400", None, dropped.after,
                         (BEFORE[0], BEFORE[2], ("name", "int(11)")))
    assert not dropped.retyped and not added.retyped
    assert "name (varchar(10) → int(11)) land as another Hive type" in reload_reason([dropped, added], ["id"])
    assert reload_reason([dropped], ["id"]) is None  # a drop alone: the policies decide, as before
    assert reload_reason([], ["id"]) is None


def test_a_change_to_the_key_loads_the_table_anew_in_every_policy():
    key_gone = change(("item_id", "int(11)"), BEFORE[1], BEFORE[2])
    for policy in ("strict", "evolve"):
        assert refusal(key_gone, policy, ["id"]) is None
    assert "It changes the key column(s) id: rows cannot be matched, it is a new table" in reload_reason([key_gone],
                                                                                                        ["id"])
    wider_key = change(("id", "bigint(20)"), BEFORE[1], BEFORE[2])
    assert "key column(s) id (int(11) → bigint(20))" in reload_reason([wider_key], ["id"])
    assert retyped_columns(BEFORE, BEFORE, ["id"], ["id", "name"]) == (
        "Its key is (id, name) at the source now, and was (id) in the version: rows cannot be matched, it is a new "
        "table")
    assert retyped_columns(BEFORE, BEFORE, ["id"], ["ID"]) is None
    with pytest.raises(ValueError, match="not one of"):
        refusal(key_gone, "lenient", ["id"])


def test_a_column_added_or_renamed_to_a_name_hive_cannot_hold_stops_every_policy():
    for after in ((*BEFORE, ("a,b", "text")), (BEFORE[0], ("na,me", "varchar(10)"), BEFORE[2])):
        for policy in ("strict", "evolve"):
            message = refusal(change(*after), policy, ["id"])
            assert message and "holds a comma (',')" in message and "the Hive table is as it was" in message
            assert "Rename the column at the source" in message
    assert refusal(change(*BEFORE, ("a.b`)", "text")), "strict", ["id"]) is None


def test_landing_sees_what_changes_values():
    assert landing("set('a','b')") != landing("set('b','a')")
    assert landing("binary(4)") != landing("binary(8)")
    assert landing("int(11)") == landing("mediumint(9)") and landing("enum('a')") == landing("enum('a','b')")


@pytest.mark.parametrize(("column_type", "default", "nullable", "mariadb", "value"), [
    ("int(11)", None, True, True, None),
    ("int(11)", "NULL", True, True, None),
    ("int(11)", "5", False, True, 5),
    ("int(11)", None, False, True, 0),  # NOT NULL without a default: MySQL's implicit 0
    ("varchar(20)", "'it''s'", True, True, "it's"),
    ("varchar(20)", "it's", True, False, "it's"),  # MySQL's COLUMN_DEFAULT is the bare value
    ("varchar(20)", None, False, False, ""),
    ("decimal(10,2)", "1.50", True, True, Decimal("1.50")),
    ("enum('new','old')", None, False, True, "new"),
    ("date", "'2020-01-31'", True, True, dt.date(2020, 1, 31)),
    ("datetime", None, False, True, None),  # the zero date
])
def test_the_value_existing_rows_got_for_an_added_column(column_type, default, nullable, mariadb, value):
    assert added_column_default("c", column_type, default, nullable, mariadb) == value


def test_an_expression_default_cannot_be_known():
    with pytest.raises(UnknownDefault, match=r"c \(datetime\) was added with the default current_timestamp\(\)"):
        added_column_default("c", "datetime", "current_timestamp()", False, True)


def test_mariadb_types_the_binlog_cannot_tell_are_known_by_their_definition():
    assert logged_as("inet6", "binary(16)") and logged_as("uuid", "binary(16)") and logged_as("inet4", "binary(4)")
    assert logged_as("json", "longtext") and logged_as("int(11)", "int")
    assert not logged_as("inet6", "binary(4)") and not logged_as("int(11)", "bigint")


def test_renames_chain_and_a_re_added_column_starts_afresh():
    first = SchemaChange("t", "x", None, BEFORE, (BEFORE[0], ("b", "varchar(10)"), BEFORE[2], ("n", "int")),
                         (("name", "b"),))
    second = SchemaChange("t", "y", None, first.after, (BEFORE[0], ("c", "varchar(10)"), BEFORE[2], ("n", "int")),
                          (("b", "c"),))
    fills = {f.column: f for f in added_columns(BEFORE, [first, second])}
    assert fills["c"].sources == ("b", "name") and not fills["c"].needs_value
    assert fills["n"].sources == () and fills["n"].needs_value
    columns, plans = layout_plans([BEFORE, first.after, second.after], [replace(fills["n"], value=0), fills["c"]])
    assert [name for name, _ in columns] == ["id", "name", "price", "b", "n", "c"]
    assert plans[0] == [(0, None), (1, None), (2, None), (None, None), (None, 0), (1, None)]
    assert plans[1] == [(0, None), (None, None), (2, None), (1, None), (3, None), (1, None)]
    assert plans[2] == [(0, None), (None, None), (2, None), (None, None), (3, None), (1, None)]
