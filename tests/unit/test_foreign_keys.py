"""Foreign keys with cascading actions: which captured tables are the child of one, which the check captures by a
diff for it, and its refusal of one whose entry sets `capture: binlog`."""

from __future__ import annotations

import pytest

from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.foreign_keys import (
    CascadingForeignKey,
    DiffForCascades,
    ForeignKey,
    ForeignKeyColumn,
    cascade_captures,
    cascading_foreign_keys,
    foreign_keys,
    hidden_rules,
    shown_rules,
    with_rules,
)
from airflow_cdc_provider.core.identifiers import TableName

ORDERS, LINES = TableName("shop", "orders"), TableName("shop", "order_lines")


def cascade_refusals(rows, captures):
    """What the check makes of ``captures`` (table → way) when every entry sets its way itself: refusals only."""
    found = cascade_captures(rows, captures, own_binlog=list(captures))
    assert all(isinstance(decided, CascadingForeignKey) for decided in found.values())
    return found


def key(name: str, child: TableName = LINES, parent: TableName = ORDERS, columns=(("order_id", "id"),),
        on_update: str | None = "RESTRICT", on_delete: str | None = "RESTRICT") -> list[ForeignKeyColumn]:
    """The rows information_schema gives for one foreign key, its columns (child, parent) in key order."""
    return [ForeignKeyColumn(child.schema, name, child.schema, child.table, column, position, parent.schema,
                             parent.table, parent_column, on_update, on_delete)
            for position, (column, parent_column) in enumerate(columns, 1)]


@pytest.mark.parametrize("event", ["DELETE", "UPDATE"])
@pytest.mark.parametrize("rule", ["CASCADE", "SET NULL", "SET DEFAULT"])
def test_each_cascading_rule_on_delete_and_on_update_makes_the_child_refused(rule, event):
    rules = {"on_delete": rule} if event == "DELETE" else {"on_update": rule}
    rows = key("fk_lines_order", **rules)
    (found,) = cascading_foreign_keys(rows, [LINES])[LINES]
    assert found.cascades == (f"ON {event} {rule}",)
    refusal = cascade_refusals(rows, {LINES: "binlog"})[LINES]
    assert isinstance(refusal, CdcError) and refusal.table == LINES and refusal.keys == (found,)
    assert f"ON {event} {rule}" in str(refusal)


@pytest.mark.parametrize("rule", ["RESTRICT", "NO ACTION"])
def test_restrict_and_no_action_do_not_cascade(rule):
    rows = key("fk_lines_order", on_update=rule, on_delete=rule)
    assert cascading_foreign_keys(rows, [LINES]) == {}
    assert cascade_refusals(rows, {LINES: "binlog"}) == {}
    (plain,) = foreign_keys(rows)
    assert plain.cascades == () and plain.on_delete == rule


def test_both_actions_of_one_key_are_named():
    (found,) = foreign_keys(key("fk", on_update="CASCADE", on_delete="SET NULL"))
    assert found.cascades == ("ON DELETE SET NULL", "ON UPDATE CASCADE")
    assert str(found) == "`fk` (order_id) REFERENCES shop.orders (id) ON DELETE SET NULL ON UPDATE CASCADE"


def test_a_multi_column_key_keeps_its_columns_in_key_order_whatever_the_rows_order():
    rows = key("fk_pair", columns=(("order_no", "no"), ("line_no", "line"), ("site", "site")), on_delete="CASCADE")
    (found,) = foreign_keys(reversed(rows))
    assert found == ForeignKey(schema="shop", name="fk_pair", child=LINES, columns=("order_no", "line_no", "site"),
                               parent=ORDERS, parent_columns=("no", "line", "site"), on_update="RESTRICT",
                               on_delete="CASCADE")
    assert "(order_no, line_no, site) REFERENCES shop.orders (no, line, site)" in str(cascade_refusals(
        rows, {LINES: "binlog"})[LINES])


def test_a_self_referencing_key_counts():
    tree = TableName("shop", "categories")
    rows = key("fk_parent", child=tree, parent=tree, columns=(("parent_id", "id"),), on_delete="CASCADE")
    refusal = cascade_refusals(rows, {tree: "binlog"})[tree]
    assert "`fk_parent` (parent_id) REFERENCES shop.categories (id) ON DELETE CASCADE" in str(refusal)


def test_a_child_whose_entry_does_not_set_capture_is_captured_by_a_diff_and_one_that_sets_binlog_is_refused():
    tree = TableName("shop", "categories")
    rows = [*key("fk_lines_order", on_delete="CASCADE"),
            *key("fk_parent", child=tree, parent=tree, columns=(("parent_id", "id"),), on_update="SET NULL")]
    # The source's way is the binlog and neither entry says otherwise: both go by a diff, each with its keys.
    found = cascade_captures(rows, {LINES: "binlog", tree: "binlog", ORDERS: "binlog"})
    assert set(found) == {LINES, tree}
    assert all(isinstance(decided, DiffForCascades) for decided in found.values())
    assert [k.name for k in found[LINES].keys] == ["fk_lines_order"] and found[tree].table == tree
    # An entry that sets `capture: binlog` itself asks for what cannot be exact: refused, the other still a diff.
    found = cascade_captures(rows, {LINES: "binlog", tree: "binlog"}, own_binlog=[LINES, ORDERS])
    assert isinstance(found[LINES], CascadingForeignKey) and isinstance(found[tree], DiffForCascades)
    # A table already in diff mode (its entry, the source's way, or no key) is exact: nothing to decide.
    assert cascade_captures(rows, {LINES: "diff", tree: "diff"}, own_binlog=[LINES]) == {}


def test_only_the_child_is_refused_and_only_when_it_is_read_from_the_binlog():
    rows = key("fk_lines_order", on_delete="CASCADE")
    # The parent's own rows are all in the binlog; a table neither side of the key has nothing to do with it.
    assert cascade_refusals(rows, {ORDERS: "binlog", TableName("shop", "other"): "binlog"}) == {}
    # A diff reads the table itself: exact whatever the key does.
    assert cascade_refusals(rows, {LINES: "diff", ORDERS: "binlog"}) == {}
    assert set(cascade_refusals(rows, {LINES: "binlog", ORDERS: "diff"})) == {LINES}
    # A child not captured at all is not in the answer either.
    assert cascading_foreign_keys(rows, [ORDERS]) == {}


def test_every_cascading_key_of_a_table_is_listed_and_its_restricting_ones_are_not():
    customers = TableName("crm", "customers")
    rows = [*key("fk_order", on_delete="CASCADE"),
            *key("fk_customer", parent=customers, columns=(("customer_id", "id"),), on_update="SET NULL"),
            *key("fk_product", parent=TableName("shop", "products"), columns=(("product_id", "id"),))]
    found = cascading_foreign_keys(rows, [LINES])[LINES]
    assert [k.name for k in found] == ["fk_customer", "fk_order"]
    message = str(cascade_refusals(rows, {LINES: "binlog"})[LINES])
    assert message.startswith("The table shop.order_lines is the child of 2 foreign keys with a cascading action: "
                              "`fk_customer` (customer_id) REFERENCES crm.customers (id) ON UPDATE SET NULL; "
                              "`fk_order` (order_id) REFERENCES shop.orders (id) ON DELETE CASCADE.")
    assert "only the change to crm.customers, shop.orders is logged" in message
    assert "fk_product" not in message


def test_the_refusal_says_what_why_and_the_ways_out():
    refusal = cascade_refusals(key("fk_lines_order", on_delete="CASCADE"), {LINES: "binlog"})[LINES]
    assert isinstance(refusal, CascadingForeignKey)
    message = str(refusal)
    # What: the table, the constraint, its parent and the action.
    assert message.startswith("The table shop.order_lines is the child of a foreign key with a cascading action: "
                              "`fk_lines_order` (order_id) REFERENCES shop.orders (id) ON DELETE CASCADE.")
    # Why: the server changes the rows without a row event.
    assert "without a row event in the binlog" in message and "cannot follow them" in message
    # The ways out: its entry without `capture: binlog` (the check then captures it by a diff), or a key that does
    # not cascade.
    assert ("Its entry sets `capture: binlog`: remove that (`- source: shop.order_lines` without `capture:`; a named "
            "entry's options hold over a pattern's), and the check captures it by a diff, which is exact for it."
            ) in message
    assert "change the foreign key to RESTRICT or NO ACTION" in message


def test_rules_are_read_whatever_their_case_and_spacing():
    (found,) = foreign_keys(key("fk", on_delete="set  null", on_update="no action"))
    assert (found.on_delete, found.on_update, found.cascades) == ("SET NULL", "NO ACTION", ("ON DELETE SET NULL",))


def test_keys_of_the_same_name_on_two_tables_are_two_keys():
    other = TableName("shop", "returns")
    rows = [*key("fk", on_delete="CASCADE"), *key("fk", child=other, columns=(("order_id", "id"),))]
    assert [(k.child, k.cascades) for k in foreign_keys(rows)] == [(LINES, ("ON DELETE CASCADE",)), (other, ())]
    assert set(cascade_refusals(rows, {LINES: "binlog", other: "binlog"})) == {LINES}


SHOWN = """CREATE TABLE `order_lines` (
  `id` int(11) NOT NULL,
  `order_id` int(11) DEFAULT NULL,
  `note` varchar(20) DEFAULT 'it''s ` ON DELETE CASCADE',
  `odd``name ON UPDATE CASCADE` int(11) DEFAULT NULL,
  PRIMARY KEY (`id`),
  CONSTRAINT `fk_order` FOREIGN KEY (`order_id`) REFERENCES `orders` (`id`) ON DELETE CASCADE ON UPDATE SET NULL,
  CONSTRAINT `fk ``odd`` ON DELETE CASCADE` FOREIGN KEY (`odd``name ON UPDATE CASCADE`) REFERENCES `crm`.`x` (`id`),
  CONSTRAINT `chk` CHECK (`note` <> 'CONSTRAINT `y` FOREIGN KEY ON DELETE SET NULL')
) ENGINE=InnoDB"""


def test_rules_the_server_hides_are_read_from_show_create_table():
    # MariaDB shows REFERENTIAL_CONSTRAINTS only to a user with a privilege beyond SELECT: its key columns alone
    # come, and the rules are read from the table's SHOW CREATE TABLE, names and strings whatever they hold.
    rows = [*key("fk_order", on_update=None, on_delete=None),
            *key("fk `odd` ON DELETE CASCADE", columns=(("odd`name ON UPDATE CASCADE", "id"),), on_update=None,
                 on_delete=None),
            *key("fk_shown", child=TableName("shop", "returns"), on_delete="CASCADE")]
    assert hidden_rules(rows) == [LINES]
    shown = shown_rules(LINES, SHOWN)
    assert shown == {(LINES, "fk_order"): ("SET NULL", "CASCADE"),
                     (LINES, "fk `odd` ON DELETE CASCADE"): ("RESTRICT", "RESTRICT")}
    given = with_rules(rows, shown)
    assert hidden_rules(given) == []
    assert [(k.name, k.cascades) for k in foreign_keys(given)] == [
        ("fk `odd` ON DELETE CASCADE", ()), ("fk_order", ("ON DELETE CASCADE", "ON UPDATE SET NULL")),
        ("fk_shown", ("ON DELETE CASCADE",))]
    # A key gone by the time its table was shown has no rules: it is left out.
    assert [k.name for k in foreign_keys(with_rules(rows, {}))] == ["fk_shown"]
