from airflow_cdc_provider.core.grants import excess_privileges, missing_capture_privileges, parse_grants
from airflow_cdc_provider.core.identifiers import TableName

ORDERS = TableName("shop", "orders")
USER = "'cdc'@'%'"


def missing(*lines, tables=(ORDERS,)):
    return missing_capture_privileges(parse_grants(lines), USER, tables)


def test_mysql_8_least_privilege_user():
    assert missing("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`") == []


def test_mariadb_names_replication_client_binlog_monitor():
    line = "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `cdc`@`%` IDENTIFIED BY PASSWORD '*D82'"
    assert missing(line) == []


def test_mysql_replica_alias_and_all_privileges():
    assert missing("GRANT REPLICATION REPLICA, REPLICATION CLIENT, SELECT ON *.* TO `cdc`@`%`") == []
    assert missing("GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION") == []


def test_select_on_schema_or_table_is_enough():
    base = "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`"
    assert missing(base, "GRANT SELECT ON `shop`.* TO `cdc`@`%`") == []
    assert missing(base, "GRANT SELECT ON `shop`.`orders` TO `cdc`@`%`") == []
    assert missing(base, "GRANT ALL PRIVILEGES ON `shop`.* TO `cdc`@`%`") == []
    assert missing(base, "GRANT SELECT, INSERT ON `shop`.`customers` TO `cdc`@`%`") != []


def test_schema_grants_match_as_like_patterns():
    base = "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`"
    assert missing(base, "GRANT SELECT ON `sho%`.* TO `cdc`@`%`") == []
    assert missing(base, "GRANT SELECT ON `s_op`.* TO `cdc`@`%`") == []
    assert missing(base, r"GRANT SELECT ON `s\_op`.* TO `cdc`@`%`") != []


def test_column_level_select_does_not_count():
    problems = missing(
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`",
        "GRANT SELECT (`id`, `a, ON b`) ON `shop`.`orders` TO `cdc`@`%`",
    )
    assert problems == [
        "The user 'cdc'@'%' lacks SELECT on shop.orders, needed to read the table. "
        "Fix: GRANT SELECT ON `shop`.`orders` TO 'cdc'@'%';"
    ]


def test_each_missing_privilege_is_named_with_its_fix():
    problems = missing("GRANT USAGE ON *.* TO `cdc`@`%`")
    assert len(problems) == 3
    assert "REPLICATION SLAVE" in problems[0] and "GRANT REPLICATION SLAVE ON *.* TO 'cdc'@'%'" in problems[0]
    assert "REPLICATION CLIENT" in problems[1] and "GRANT REPLICATION CLIENT ON *.* TO 'cdc'@'%'" in problems[1]
    assert "SELECT on shop.orders" in problems[2]


def test_privileges_on_other_scopes_do_not_count():
    problems = missing("GRANT REPLICATION SLAVE ON `shop`.* TO `cdc`@`%`",
                       "GRANT EXECUTE ON PROCEDURE `shop`.`p` TO `x`")
    assert any("REPLICATION SLAVE" in p for p in problems)


def test_roles_are_mentioned_when_something_is_missing():
    problems = missing("GRANT USAGE ON *.* TO `cdc`@`%`", "GRANT `cdc_role`@`%` TO `cdc`@`%`")
    assert "cdc_role" in problems[-1]
    assert missing("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`",
                   "GRANT `r` TO `cdc`") == []


def excess(*lines):
    return excess_privileges(parse_grants(lines), USER)


def test_a_least_privilege_user_gets_no_warning():
    assert excess("GRANT USAGE ON *.* TO `cdc`@`%`", "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `cdc`@`%`",
                  "GRANT SELECT ON `shop`.* TO `cdc`@`%`", "GRANT SELECT ON `crm`.`orders` TO `cdc`@`%`") == []


def test_privileges_beyond_capture_are_each_warned_with_the_revoke_that_takes_them_back():
    base = "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`"
    (warning,) = excess(base, "GRANT SELECT, INSERT, DELETE ON `shop`.* TO `cdc`@`%`")
    assert warning.startswith("The capture user 'cdc'@'%' holds INSERT, DELETE on `shop`.*, which capture does not "
                              "need")
    assert "REVOKE INSERT, DELETE ON `shop`.* FROM 'cdc'@'%';" in warning
    # SELECT on every schema: the mysql schema with it.
    (warning,) = excess("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`")
    assert "holds SELECT on *.*, which reads every schema, the mysql schema's password hashes included" in warning
    assert "REVOKE SELECT ON *.* FROM 'cdc'@'%'; then GRANT REPLICATION SLAVE" in warning
    # An administrator: everything, and the right to grant it.
    (warning,) = excess("GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION")
    assert "holds ALL PRIVILEGES, GRANT OPTION on *.*" in warning
    assert "REVOKE ALL PRIVILEGES ON *.* FROM 'cdc'@'%'; REVOKE GRANT OPTION ON *.* FROM 'cdc'@'%';" in warning
    # MariaDB's finer administrative privileges, on two scopes: one warning per scope.
    warnings = excess(base, "GRANT SELECT ON `shop`.* TO `cdc`@`%` WITH GRANT OPTION",
                      "GRANT BINLOG ADMIN, SLAVE MONITOR ON *.* TO `cdc`@`%`")
    assert len(warnings) == 2
    assert any("holds GRANT OPTION on `shop`.*" in w and "REVOKE GRANT OPTION ON `shop`.* FROM" in w
               for w in warnings)
    assert any("holds BINLOG ADMIN, SLAVE MONITOR on *.*" in w for w in warnings)


def test_without_the_binlog_select_alone_is_needed():
    select_only = parse_grants(["GRANT SELECT ON `shop`.* TO `cdc`@`%`"])
    assert missing_capture_privileges(select_only, USER, (ORDERS,), binlog=False) == []
    assert [p.split(",")[0] for p in missing_capture_privileges(select_only, USER, (ORDERS,))] == [
        "The user 'cdc'@'%' lacks the privilege REPLICATION SLAVE", "The user 'cdc'@'%' lacks the privilege "
        "REPLICATION CLIENT"]
    nothing = parse_grants(["GRANT USAGE ON *.* TO `cdc`@`%`"])
    assert missing_capture_privileges(nothing, USER, (ORDERS,), binlog=False) == [
        "The user 'cdc'@'%' lacks SELECT on shop.orders, needed to read the table. Fix: GRANT SELECT ON "
        "`shop`.`orders` TO 'cdc'@'%';"]
