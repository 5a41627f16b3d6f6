"""The reread condition: only plain conditions on the table's own columns are accepted, and the SQL sent is written
from the parsed tree (quoted names, bound values), never the person's text. Each attack is refused with a message
that names what was found and shows a condition that is accepted."""

from __future__ import annotations

from decimal import Decimal

import pytest

from airflow_cdc_provider.core.condition import (
    MAX_NODES,
    MAX_TEXT,
    Between,
    Column,
    Comparison,
    InList,
    Literal,
    parse_condition,
    to_sql,
)
from airflow_cdc_provider.core.errors import BadRereadCondition, CdcError
from airflow_cdc_provider.core.identifiers import TableName

ORDERS = TableName("shop", "orders")
COLUMNS = ("id", "status", "Created_At", "amount", "50%_off")


def sql(text: str) -> tuple[str, tuple]:
    clause = to_sql(parse_condition(text, ORDERS, COLUMNS))
    return clause.sql, clause.args


def refused(text: str) -> str:
    with pytest.raises(BadRereadCondition) as caught:
        parse_condition(text, ORDERS, COLUMNS)
    message = str(caught.value)
    # Every refusal: the text, the table, what a condition may hold with an example, and what to do.
    assert message.startswith(f"The reread condition {text[:200]!r}"[:60]) and " on shop.orders " in message
    assert "A reread condition takes only the table's own columns" in message
    assert "for example `id BETWEEN 100 AND 200 AND status IN ('paid', 'sent')`" in message
    assert message.endswith("Trigger the run again with such a condition; nothing was read or changed.")
    return message


@pytest.mark.parametrize(("text", "found"), [
    ("SLEEP(3600)", "holds the function SLEEP()"),
    ("BENCHMARK(1e9, MD5(1))", "holds the function BENCHMARK()"),
    ("GET_LOCK('x', 10)", "holds the function GET_LOCK()"),
    ("id = 1 AND SLEEP(5) = 0", "holds the function SLEEP()"),
    ("id IN (SELECT id FROM shop.users WHERE pw LIKE 0x61)", "holds a subquery (`id IN (SELECT id FROM shop.users"),
    ("EXTRACTVALUE(1, CONCAT(0x7e, (SELECT pw FROM shop.users LIMIT 1)))", "holds a subquery (`EXTRACTVALUE(1, "),
    ("EXISTS (SELECT 1 FROM shop.users)", "holds a subquery"),
    ("id = (SELECT MAX(id) FROM shop.users)", "holds a subquery"),
    ("0) ORDER BY (1", "is not one condition as after WHERE: it does not read as one at `)` (column 2)"),
    ("id = 1 UNION SELECT pw FROM shop.users", "does not read as one at `UNION`"),
    ("id = 1 INTO OUTFILE '/tmp/x'", "does not read as one at `INTO`"),
    ("@a := 1", "holds the variable `@a`"),
    ("id = @a", "holds the variable `@a`"),
    ("id = @@version", "holds the variable `@@version`"),
    ("other.col = 1", "names `other.col`, a column of another table: only the columns of shop.orders can be named"),
    ("users.id = 1", "names `users.id`, a column of another table"),
    ("shop.users.id = 1", "names `shop.users.id`, a column of another table"),
    ("crm.orders.id = 1", "names `crm.orders.id`, a column of another table"),
    ("pw = 'x'", "names the column 'pw', which shop.orders does not have (its columns: 50%_off, Created_At, amount, "
                 "id, status)"),
    ("id = 1; DROP TABLE shop.orders", "holds `;`: a condition is one expression, not statements"),
    ("id = 1;", "holds `;`"),
    ("id > 1 -- all", "holds a comment (-- # /* */)"),
    ("id > 1 # all", "holds a comment"),
    ("id /* x */ > 1", "holds a comment"),
    ("id > 1 /*! OR 1=1 */", "holds a comment"),
    ("id + 1 = 2", "holds arithmetic (`id + 1`): compare a column with a literal instead"),
    ("id = 0x61", "holds the literal `x'61'`: write a number or a 'string' instead"),
    ("status = _latin1'x'", "holds the literal"),
    ("status = 'a' 'b'", "holds the function CONCAT()"),
    ("status = 'x' COLLATE utf8mb4_bin", "holds the function COLLATE()"),
    ("created_at = DATE '2026-01-01'", "holds the function CAST()"),
    ("id = 1 XOR id = 2", "holds XOR: use AND, OR and NOT"),
    ("status REGEXP '(a+)+$'", "holds the function REGEXP_LIKE()"),
    ("status LIKE 'x' ESCAPE '!'", "holds `status LIKE 'x' ESCAPE '!'`"),
    ("id BETWEEN SYMMETRIC 1 AND 2", "holds `(id BETWEEN 1 AND 2 OR id BETWEEN 2 AND 1)`"),
    ("(id, status) = (1, 'x')", "holds `(id, status)`"),
    ("id IN (status)", "has a column in an IN list, which takes literals only"),
    ("id IN ()", "has an empty IN list"),
    ("id IS TRUE", "has `id IS TRUE`: IS takes only NULL or NOT NULL"),
    ("id", "has `id` where a condition belongs: compare it, for example `id = 1`"),
    ("id = 1 = 1", "holds `id = 1`"),
    ("id = 1e999", "has the number '1e999', which is out of range or not a plain number"),
    ("id = - -1", "holds arithmetic"),
    ("id = 1 AND", "does not read as one at `AND`"),
    ("status = 'open", "cannot be read: a quote (' \" `) or a comment is not closed"),
    ("id = 1 /* open", "cannot be read"),
    ("   ", "is empty (to read the whole table again, give the table with an empty condition)"),
])
def test_anything_but_a_plain_condition_on_the_tables_columns_is_refused_naming_what_was_found(text, found):
    assert found in refused(text)


def test_a_refusal_is_final_not_retried():
    assert issubclass(BadRereadCondition, CdcError)  # the plan task fails without its retries


def test_the_size_of_a_condition_is_bounded_before_and_after_parsing():
    assert f"is {MAX_TEXT + 1} characters long; at most {MAX_TEXT} are read" in refused("id = 1" + " " * (MAX_TEXT - 5))
    many = " OR ".join(f"id = {n}" for n in range(300))  # about 1,500 parts, under the text's bound
    assert len(many) < MAX_TEXT and f"parts; at most {MAX_NODES} are read" in refused(many)
    assert "nests parentheses more than 20 deep" in refused("(" * 21 + "id = 1" + ")" * 21)
    assert "is nested too deeply" in refused("NOT " * 300 + "id = 1")  # no parentheses: the parser's own limit
    assert sql("(" * 20 + "id = 1" + ")" * 20) == ("`id` = %s", (1,))


def test_comparisons_rebuild_with_quoted_names_and_every_literal_bound():
    assert sql("id = 5") == ("`id` = %s", (5,))
    assert sql("id <> 5 AND id != 6") == ("(`id` <> %s AND `id` <> %s)", (5, 6))
    assert sql("id < 1 OR id <= 2 OR id > 3 OR id >= 4") == (
        "(`id` < %s OR `id` <= %s OR `id` > %s OR `id` >= %s)", (1, 2, 3, 4))
    assert sql("status <=> NULL") == ("`status` <=> %s", (None,))
    assert sql("5 = id") == ("%s = `id`", (5,))
    assert sql("amount = id") == ("`amount` = `id`", ())  # two columns of the table


def test_literals_keep_their_mysql_kind():
    assert sql("amount = 1.50")[1] == (Decimal("1.50"),)  # exact, as MySQL reads 1.50
    assert sql("amount = -3")[1] == (-3,)
    assert sql("amount = .5")[1] == (Decimal(".5"),)
    assert sql("amount = 1e3")[1] == (1000.0,)  # a DOUBLE, as MySQL reads an exponent
    assert sql("status = 'it''s'")[1] == ("it's",)
    assert sql("status = 'a\\'b'")[1] == ("a'b",)  # MySQL's backslash escape, read as MySQL reads it
    assert sql('status = "double"')[1] == ("double",)  # a string, as in MySQL's default SQL mode
    assert sql("id = TRUE OR id = FALSE")[1] == (True, False)
    assert sql("created_at >= '2026-03-01 00:00:00'") == ("`Created_At` >= %s", ("2026-03-01 00:00:00",))
    quote = "x' OR '1'='1"
    assert sql(f"status = '{quote.replace(chr(39), chr(39) * 2)}'") == ("`status` = %s", (quote,))


def test_between_in_is_null_like_and_their_negations():
    assert sql("id BETWEEN 100 AND 200") == ("`id` BETWEEN %s AND %s", (100, 200))
    assert sql("id NOT BETWEEN 1 AND 2") == ("`id` NOT BETWEEN %s AND %s", (1, 2))
    assert sql("status IN ('paid', 'sent', NULL)") == ("`status` IN (%s, %s, %s)", ("paid", "sent", None))
    assert sql("id NOT IN (1, -2)") == ("`id` NOT IN (%s, %s)", (1, -2))
    assert sql("status IS NULL") == ("`status` IS NULL", ())
    assert sql("status IS NOT NULL") == ("`status` IS NOT NULL", ())
    assert sql("status LIKE 'pa%'") == ("`status` LIKE %s", ("pa%",))
    assert sql("status NOT LIKE '%x\\_%'") == ("`status` NOT LIKE %s", ("%x\\_%",))


def test_and_or_not_and_parentheses_are_kept_in_their_meaning():
    assert sql("id = 1 AND (status = 'a' OR status = 'b')") == (
        "(`id` = %s AND (`status` = %s OR `status` = %s))", (1, "a", "b"))
    assert sql("id = 1 OR status = 'a' AND amount = 2") == (
        "(`id` = %s OR (`status` = %s AND `amount` = %s))", (1, "a", 2))
    # NOT always in parentheses: the server's HIGH_NOT_PRECEDENCE mode would read a bare one otherwise.
    assert sql("NOT (id = 1 OR id = 2)") == ("(NOT ((`id` = %s OR `id` = %s)))", (1, 2))
    assert sql("NOT id = 1") == ("(NOT (`id` = %s))", (1,))
    assert sql("id = 1 && id = 2 || id = 3") == ("((`id` = %s AND `id` = %s) OR `id` = %s)", (1, 2, 3))


def test_columns_match_without_regard_to_case_and_may_be_qualified_by_the_tables_own_name():
    tree = parse_condition("ID = 1 AND `created_at` > '2026-01-01'", ORDERS, COLUMNS)
    assert to_sql(tree).sql == "(`id` = %s AND `Created_At` > %s)"  # as the table spells them
    assert sql("orders.id = 1") == sql("`shop`.`orders`.`id` = 1") == sql("ORDERS.ID = 1") == ("`id` = %s", (1,))


def test_a_percent_sign_in_a_name_cannot_become_a_placeholder():
    assert sql("`50%_off` = 'a%s'") == ("`50%%_off` = %s", ("a%s",))


def test_the_tree_is_the_accepted_forms_only():
    assert parse_condition("id BETWEEN 1 AND 2", ORDERS, COLUMNS) == Between(Column("id"), Literal(1), Literal(2))
    assert parse_condition("status IN ('a')", ORDERS, COLUMNS) == InList(Column("status"), (Literal("a"),))
    assert parse_condition("(id) = (1)", ORDERS, COLUMNS) == Comparison(Column("id"), "=", Literal(1))
