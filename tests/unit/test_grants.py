from airflow_cdc_provider.core.grants import missing_capture_privileges, parse_grants
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
