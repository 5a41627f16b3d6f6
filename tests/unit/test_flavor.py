import pytest

from airflow_cdc_provider.core.errors import UnsupportedServer
from airflow_cdc_provider.core.flavor import Flavor, detect_flavor


@pytest.mark.parametrize(
    ("version", "comment", "flavor", "status", "gtid"),
    [
        ("8.0.36", "MySQL Community Server - GPL", Flavor.MYSQL_8_0, "SHOW MASTER STATUS", "gtid_executed"),
        ("8.0.36-28", "Percona Server (GPL)", Flavor.MYSQL_8_0, "SHOW MASTER STATUS", "gtid_executed"),
        ("8.4.3", "MySQL Community Server - GPL", Flavor.MYSQL_8_4, "SHOW BINARY LOG STATUS", "gtid_executed"),
        ("9.1.0-commercial", "MySQL Enterprise Server", Flavor.MYSQL_8_4, "SHOW BINARY LOG STATUS", "gtid_executed"),
        ("10.11.6-MariaDB-0+deb12u1-log", "Debian 12", Flavor.MARIADB, "SHOW MASTER STATUS", "gtid_binlog_pos"),
        ("5.5.5-10.6.12-MariaDB", "", Flavor.MARIADB, "SHOW MASTER STATUS", "gtid_binlog_pos"),
        ("11.4.2-MariaDB", "", Flavor.MARIADB, "SHOW MASTER STATUS", "gtid_binlog_pos"),
    ],
)
def test_flavor_and_its_statements(version, comment, flavor, status, gtid):
    detected = detect_flavor(version, comment)
    assert detected.flavor is flavor
    assert detected.binlog_status_statement == status
    assert detected.gtid_variable == gtid


def test_retention_variables_differ():
    assert detect_flavor("10.11.6-MariaDB").retention_variables == ("binlog_expire_logs_seconds", "expire_logs_days")
    assert detect_flavor("8.4.0").retention_variables == ("binlog_expire_logs_seconds",)


@pytest.mark.parametrize("version", ["5.7.44", "10.4.30-MariaDB", "8.0.0"])
def test_too_old_servers_are_refused_naming_the_version(version):
    with pytest.raises(UnsupportedServer, match="binlog_row_metadata"):
        detect_flavor(version)


def test_unreadable_version():
    with pytest.raises(UnsupportedServer, match="'banana'"):
        detect_flavor("banana")


@pytest.mark.parametrize(("version", "statement"), [
    ("10.11.6-MariaDB-0+deb12u1-log", "SET SESSION max_statement_time = 90"),
    ("5.5.5-10.6.12-MariaDB", "SET SESSION max_statement_time = 90"),
    ("8.0.36", "SET SESSION max_execution_time = 90000"),
    ("8.4.3", "SET SESSION max_execution_time = 90000"),
])
def test_the_statement_time_limit_is_the_flavors_own_setting_in_its_unit(version, statement):
    # MariaDB counts seconds for every statement; MySQL milliseconds, for read-only SELECTs.
    assert detect_flavor(version).statement_time_limit(90) == statement


@pytest.mark.parametrize("seconds", [0, -5])
def test_a_statement_time_limit_below_a_second_is_refused(seconds):
    # 0 would mean no limit on both servers: never what a caller of the limit means.
    with pytest.raises(ValueError, match="at least 1"):
        detect_flavor("10.11.6-MariaDB").statement_time_limit(seconds)
