"""Resolving table entries and patterns against the tables a server has: what a run captures, what is gone."""

import json
import re

import pytest

from airflow_cdc_provider.core.catalog import (
    Resolution,
    StoredCatalog,
    StoredCatalogError,
    resolve,
)
from airflow_cdc_provider.core.changelog import ChangelogSettings
from airflow_cdc_provider.core.config import ConfigError, HiveConfig, TableConfig, TableSettings
from airflow_cdc_provider.core.history import HistorySettings
from airflow_cdc_provider.core.identifiers import TableName
from tests.conftest import read_config

HIVE = HiveConfig(database="ods", warehouse_dir="/srv/cdc/warehouse")


def names(*texts):
    return [TableName.parse(t) for t in texts]


def run(tables, found, previous=None, **rest):
    config = read_config({"tables": tables, **rest})
    return resolve(config.tables, names(*found), previous or {}, config.hive)


def targets(resolution):
    return {str(t.source): (t.target, t.settings.schema_changes) for t in resolution.tables}


def test_named_tables_found_and_missing():
    r = run(["shop.b", "shop.a", "shop.gone"], ["shop.a", "shop.b", "shop.other"])
    assert [str(t.source) for t in r.tables] == ["shop.a", "shop.b"]  # sorted, whatever the entries' order
    assert r.missing == (TableName("shop", "gone"),)
    assert r.named == frozenset(names("shop.a", "shop.b", "shop.gone"))
    assert r.gone == ()


def test_patterns_select_what_they_match_and_only_that():
    r = run(["shop.order_*", {"regex": r"crm\.c\d+"}],
            ["shop.order_1", "shop.order_2", "shop.Order_3", "shop.customers", "crm.c1", "crm.c1x", "other.order_1"])
    assert [str(t.source) for t in r.tables] == ["crm.c1", "shop.order_1", "shop.order_2"]
    assert r.missing == () and r.named == frozenset()


def test_a_pattern_leaves_out_the_working_tables_of_online_schema_change_tools():
    tools = ["shop._orders_new", "shop.__orders_old", "shop._orders_gho", "shop._orders_ghc", "shop._orders_del",
             "shop._orders_20261128101500_del", "shop._orders_chkpnt", "shop.__osc_new_orders", "shop.lhmn_orders",
             "shop.lhma_1732780000_orders"]
    # Beside a table of that name only: a table of the user's own named so is captured.
    r = run(["shop.*"], ["shop.orders", *tools, "shop._notes_new", "crm._orders_new"])
    assert [str(t.source) for t in r.tables] == ["shop._notes_new", "shop.orders"]
    left_out = dict(r.unusable)
    assert sorted(str(name) for name in left_out) == sorted(tools)
    assert "a working table of gh-ost on shop.orders: a pattern leaves it out" in left_out[TableName("shop",
                                                                                                      "_orders_gho")]
    assert "pt-online-schema-change" in left_out[TableName("shop", "_orders_new")]
    # Named, it is captured.
    assert [str(t.source) for t in run(["shop._orders_new"], ["shop.orders", "shop._orders_new"]).tables] == [
        "shop._orders_new"]


def test_a_named_entry_wins_over_a_pattern_that_matches_too():
    r = run([{"source": "shop.*", "target": "p_{table}", "schema_changes": "evolve"},
             {"source": "shop.orders", "target": "orders"}], ["shop.orders", "shop.items"])
    assert targets(r) == {"shop.items": ("p_items", "evolve"), "shop.orders": ("orders", None)}
    assert r.named == frozenset(names("shop.orders"))


def test_the_first_matching_pattern_wins():
    r = run([{"source": "shop.order_*", "target": "o_{table}"}, {"source": "shop.*", "target": "all_{table}"}],
            ["shop.order_1", "shop.items"])
    assert targets(r) == {"shop.order_1": ("o_order_1", None), "shop.items": ("all_items", None)}
    reordered = run([{"source": "shop.*", "target": "all_{table}"}, {"source": "shop.order_*", "target": "o_{table}"}],
                    ["shop.order_1", "shop.items"])
    assert targets(reordered)["shop.order_1"] == ("all_order_1", None)


def test_an_excluded_table_falls_to_the_next_pattern():
    r = run([{"source": "shop.*", "exclude": "shop.big_*"}, {"source": "shop.big_*", "target": "b_{table}"}],
            ["shop.a", "shop.big_1"])
    assert targets(r) == {"shop.a": ("shop_a", None), "shop.big_1": ("b_big_1", None)}


def test_quoted_names_with_dots():
    r = run([{"source": "`my.db`.order_*", "target": "mydb_{table}"}, {"regex": r"my\.db\.x", "target": "r_{table}"},
             {"source": "`my.db`.`a.b`", "target": "ab"}],
            ["`my.db`.order_1", "`my.db`.x", "`my.db`.`a.b`", "my.order_1", "`my.db`.y"])
    assert targets(r) == {"`my.db`.order_1": ("mydb_order_1", None), "`my.db`.x": ("r_x", None),
                          "`my.db`.`a.b`": ("ab", None)}


def test_a_pattern_target_that_hive_refuses_leaves_that_table_out_naming_it_and_the_fix():
    r = run(["`my.db`.order_*", "shop.*"], ["`my.db`.order_1", "shop.a"])
    assert targets(r) == {"shop.a": ("shop_a", None)}, "the other tables go on"
    ((name, why),) = r.unusable
    assert str(name) == "`my.db`.order_1"
    assert re.search(r"'my.db_order_1' is not a valid Hive name.*'\{schema\}_\{table\}'.*"
                     r"Set `target:` for `my.db`.order_1", why)
    r = run(["`my.db`.order_*", {"source": "`my.db`.order_1", "target": "o1"}], ["`my.db`.order_1"])
    assert targets(r) == {"`my.db`.order_1": ("o1", None)}  # the fix the message gives works


def left_out(resolution):
    return {str(name): why for name, why in resolution.unusable}


def test_tables_that_would_share_a_hive_table_are_left_out_and_the_others_go_on():
    # Hive names ignore case: crm.Orders and crm.orders both make ods.crm_orders.
    r = run(["crm.*"], ["crm.orders", "crm.Orders", "crm.items"])
    assert targets(r) == {"crm.items": ("crm_items", None)}, "the other tables go on"
    why = left_out(r)
    assert set(why) == {"crm.Orders", "crm.orders"}
    assert why["crm.Orders"].startswith("The tables crm.Orders (matched by crm.*) and crm.orders (matched by crm.*) "
                                        "would both be copied into the Hive table ods.crm_orders (Hive names ignore "
                                        "case): each of them is left out. To capture crm.Orders, give it a Hive name")
    assert "`- source: crm.Orders` with `target: a_name`" in why["crm.Orders"]
    # Under {schema}_{table}, a_b.c and a.b_c make one name; so do three tables.
    r = run(["*.*"], ["shop.a_b", "shop_a.b", "Shop_A.b", "other.t"], hive={"database": "raw"})
    assert targets(r) == {"other.t": ("other_t", None)}
    assert set(left_out(r)) == {"shop.a_b", "shop_a.b", "Shop_A.b"}
    assert "The tables shop_a.b (matched by *.*) and Shop_A.b (matched by *.*), shop.a_b (matched by *.*) would all " \
           "be copied into the Hive table raw.shop_a_b" in left_out(r)["shop_a.b"]


def test_the_table_the_last_run_copied_keeps_its_hive_table():
    previous = {TableName("crm", "orders"): "ods.crm_orders"}
    r = run(["crm.*"], ["crm.orders", "crm.Orders"], previous)
    assert targets(r) == {"crm.orders": ("crm_orders", None)}
    (why,) = left_out(r).values()
    assert set(left_out(r)) == {"crm.Orders"} and "crm.orders keeps it (the last run copied it there)" in why
    # A Hive table of another database is not the one at stake.
    assert targets(run(["crm.*"], ["crm.orders", "crm.Orders"], previous, hive={"database": "raw"})) == {}


def test_a_named_table_keeps_its_hive_table_and_two_named_ones_are_refused():
    r = run([{"source": "shop.a", "target": "x"}, {"source": "shop.*", "target": "{table}"}],
            ["shop.a", "shop.b", "shop.x", "shop.X"])
    assert targets(r) == {"shop.a": ("x", None), "shop.b": ("b", None)}
    why = left_out(r)
    assert set(why) == {"shop.x", "shop.X"}
    assert "shop.a (named)" in why["shop.x"] and "shop.a keeps it (named in the configuration)" in why["shop.x"]
    with pytest.raises(ConfigError) as err:
        run([{"source": "shop.a", "target": "x"}, {"source": "shop.b", "target": "X"}, "shop.*"],
            ["shop.a", "shop.b", "shop.c"])
    assert str(err.value) == ("The tables shop.a and shop.b, both named in the configuration, would both be copied "
                              "into the Hive table ods.x (Hive names ignore case): set a different `target:` for one "
                              "of them.")
    # Two named entries only collide when both tables are there.
    assert targets(run([{"source": "shop.a", "target": "x"}, {"source": "shop.b", "target": "x"}], ["shop.a"])) == {
        "shop.a": ("x", None)}
    # A table no pattern selects takes no Hive table.
    assert targets(run(["shop.a"], ["shop.a", "shop_a.b"])) == {"shop.a": ("shop_a", None)}


def test_a_table_whose_changelog_table_would_be_another_tables_hive_table_is_left_out():
    # shop.a's changelog table is ods.shop_a_changelog, the Hive table shop.a_changelog is copied into.
    found = ["shop.a", "shop.a_changelog", "shop.b"]
    r = run([{"source": "shop.*", "changelog": True}], found)
    assert targets(r) == {"shop.b": ("shop_b", None)}, "the other tables go on"
    why = left_out(r)
    assert why["shop.a"] == ("The changelog table of shop.a would be ods.shop_a_changelog, the Hive table "
                             "shop.a_changelog is copied into: give one of them another `target:`, or set `changelog: "
                             "false` for shop.a. Until then shop.a is left out; so is the other.")
    assert set(why) == {"shop.a", "shop.a_changelog"}
    # `hive: changelog:` gives it alike, unless an entry of its own says `false`.
    assert set(left_out(run(["shop.*"], found, hive={"changelog": True}))) == {"shop.a", "shop.a_changelog"}
    assert left_out(run([{"source": "shop.a", "changelog": False}, "shop.*"], found, hive={"changelog": True})) == {}
    # The one the last run copied into that Hive table goes on; else the one it copied into its own.
    r = run(["shop.*"], found, {TableName("shop", "a_changelog"): "ods.shop_a_changelog",
                                TableName("shop", "a"): "ods.shop_a"}, hive={"changelog": True})
    assert list(left_out(r)) == ["shop.a"] and left_out(r)["shop.a"].endswith(
        "Until then shop.a is left out; shop.a_changelog goes on (the last run copied it).")
    r = run(["shop.*"], found, {TableName("shop", "a"): "ods.shop_a"}, hive={"changelog": True})
    assert list(left_out(r)) == ["shop.a_changelog"]
    # A named table goes on, whichever of the two it is.
    r = run([{"source": "shop.a", "changelog": True}, "shop.*"], found)
    assert list(left_out(r)) == ["shop.a_changelog"] and left_out(r)["shop.a_changelog"].endswith(
        "Until then shop.a_changelog is left out; shop.a goes on (named in the configuration).")
    r = run([{"source": "shop.x", "target": "shop_a_changelog"}, {"source": "shop.*", "changelog": True}],
            ["shop.a", "shop.x"])
    assert targets(r) == {"shop.x": ("shop_a_changelog", None)} and list(left_out(r)) == ["shop.a"]
    # Two named ones: refused (the configuration's reading refuses them first).
    with pytest.raises(ConfigError, match="^The changelog table of shop.a would be ods.a_changelog, the Hive table "
                                          "shop.b is copied into"):
        resolve([TableConfig(TableName("shop", "a"), "a", settings=TableSettings(changelog=ChangelogSettings())),
                 TableConfig(TableName("shop", "b"), "a_changelog")], names("shop.a", "shop.b"), {}, HIVE)
    # A changelog table's name that Hive refuses: the table is left out.
    r = run([{"source": "shop.*", "target": "x" * 117 + "_{table}", "changelog": True}], ["shop.a", "shop.bb"])
    assert targets(r) == {} and left_out(r)["shop.a"].startswith(
        f"The changelog table of shop.a would be named '{'x' * 117}_a_changelog', longer than the 128 characters")
    assert left_out(r)["shop.a"].endswith("Until then it is left out.")


def test_a_table_whose_snapshots_or_history_table_would_be_another_tables_hive_table_is_left_out():
    # shop.a's history table is ods.shop_a_history, the Hive table shop.a_history is copied into.
    found = ["shop.a", "shop.a_history", "shop.a_snapshots", "shop.b"]
    r = run([{"source": "shop.*", "history": {"scd2": True}}], found)
    assert targets(r) == {"shop.a_snapshots": ("shop_a_snapshots", None), "shop.b": ("shop_b", None)}
    why = left_out(r)
    assert why["shop.a"] == ("The history table of shop.a would be ods.shop_a_history, the Hive table shop.a_history "
                             "is copied into: give one of them another `target:`, or set `history: false` for shop.a. "
                             "Until then shop.a is left out; so is the other.")
    assert set(why) == {"shop.a", "shop.a_history"}
    # Daily snapshots through `hive: history:`; a named entry's `false` takes shop.a out of it.
    r = run(["shop.*"], found, hive={"history": {"daily": True}})
    assert set(left_out(r)) == {"shop.a", "shop.a_snapshots"} and left_out(r)["shop.a"].startswith(
        "The snapshots table of shop.a would be ods.shop_a_snapshots, the Hive table shop.a_snapshots is copied into")
    assert left_out(run([{"source": "shop.a", "history": False}, "shop.*"], found,
                        hive={"history": {"daily": True, "scd2": True}})) == {}
    # The one the last run copied into that Hive table goes on; a named one goes on.
    r = run(["shop.*"], found, {TableName("shop", "a_history"): "ods.shop_a_history"}, hive={"history": {"scd2": True}})
    assert list(left_out(r)) == ["shop.a"] and left_out(r)["shop.a"].endswith(
        "Until then shop.a is left out; shop.a_history goes on (the last run copied it).")
    r = run([{"source": "shop.a", "history": {"scd2": True}}, "shop.*"], found)
    assert list(left_out(r)) == ["shop.a_history"]
    # Two named ones: refused.
    with pytest.raises(ConfigError, match="^The history table of shop.a would be ods.a_history, the Hive table "
                                          "shop.b is copied into"):
        resolve([TableConfig(TableName("shop", "a"), "a", settings=TableSettings(history=HistorySettings(scd2=True))),
                 TableConfig(TableName("shop", "b"), "a_history")], names("shop.a", "shop.b"), {}, HIVE)
    # A name Hive refuses: the table is left out.
    r = run([{"source": "shop.*", "target": "x" * 119 + "_{table}", "history": {"daily": True}}], ["shop.a"])
    assert targets(r) == {} and left_out(r)["shop.a"].startswith(
        f"The snapshots table of shop.a would be named '{'x' * 119}_a_snapshots', longer than the 128 characters")


def test_gone_lists_previous_tables_not_found_now_whatever_selected_them():
    previous = {TableName("shop", "z"): "ods.shop_z", TableName("shop", "a"): "ods.shop_a",
                TableName("shop", "kept"): "ods.shop_kept", TableName("old", "t"): "ods.custom"}
    r = run(["shop.*"], ["shop.kept", "shop.new"], previous)
    assert r.gone == ((TableName("old", "t"), "ods.custom"), (TableName("shop", "a"), "ods.shop_a"),
                      (TableName("shop", "z"), "ods.shop_z"))
    assert [str(t.source) for t in r.tables] == ["shop.kept", "shop.new"]


def test_json_round_trip():
    r = run(["shop.*", {"source": "`my.db`.`x*`", "target": "x"}], ["shop.a", "`my.db`.`x*`"], hive={"database": "raw"})
    stored = StoredCatalog.of(r)
    assert json.loads(stored.to_text()) == {"tables": {"`my.db`.`x*`": "raw.x", "shop.a": "raw.shop_a"}}
    previous = StoredCatalog.parse(stored.to_text()).previous()
    assert previous == {TableName("my.db", "x*"): "raw.x", TableName("shop", "a"): "raw.shop_a"}
    assert resolve(r.tables, [TableName("shop", "a")], previous, HiveConfig(database="raw", warehouse_dir="/srv/cdc/warehouse")).gone == (
        (TableName("my.db", "x*"), "raw.x"),)
    assert StoredCatalog.parse('{"tables": {}}').previous() == {}


@pytest.mark.parametrize("bad", [None, [], {}, {"tables": []}, {"tables": {"shop.a": 1}}, {"tables": {"orders": "ods.x"}}])
def test_a_bad_stored_catalog_says_to_delete_it(bad):
    with pytest.raises(StoredCatalogError, match="Delete the file|delete the file"):
        StoredCatalog.parse(json.dumps(bad)).previous()


def test_resolution_hive_tables():
    r = Resolution(tables=(TableConfig(TableName("shop", "a"), "t"),), missing=(), named=frozenset(), gone=(),
                   database="raw")
    assert r.hive_tables() == {TableName("shop", "a"): "raw.t"}
