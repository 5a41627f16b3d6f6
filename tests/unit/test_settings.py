from airflow_cdc_provider.core.flavor import detect_flavor
from airflow_cdc_provider.core.settings import compression_notes, compression_variables, settings_problems

MARIADB = detect_flavor("10.11.6-MariaDB")
MYSQL = detect_flavor("8.4.2")
GOOD = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}


def test_good_settings():
    assert settings_problems(GOOD, MARIADB) == []
    variables = {**GOOD, "log_bin": 1, "binlog_format": "row", "binlog_row_value_options": ""}
    assert settings_problems(variables, MYSQL) == []


def test_mysql_partial_json_is_refused():
    (problem,) = settings_problems({**GOOD, "binlog_row_value_options": "PARTIAL_JSON"}, MYSQL)
    assert "binlog_row_value_options is 'PARTIAL_JSON'" in problem
    assert "SET PERSIST binlog_row_value_options=''" in problem


def test_each_wrong_setting_names_value_and_fix():
    problems = settings_problems({**GOOD, "binlog_format": "MIXED", "binlog_row_image": "MINIMAL",
                                  "binlog_row_value_options": ""}, MYSQL)
    assert len(problems) == 2
    assert "binlog_format is 'MIXED'" in problems[0] and "SET PERSIST binlog_format='ROW'" in problems[0]
    assert "binlog_row_image is 'MINIMAL'" in problems[1]


def test_mariadb_fix_uses_set_global_and_the_config_file():
    (problem,) = settings_problems({**GOOD, "binlog_row_metadata": "MINIMAL"}, MARIADB)
    assert "SET GLOBAL binlog_row_metadata='FULL'" in problem and "[mariadbd]" in problem


def test_binlog_off_and_unknown_variables():
    problems = settings_problems({"log_bin": "OFF"}, MARIADB)
    assert problems[0].startswith("The server setting log_bin is 'OFF'")
    assert "binlog_row_metadata is None" in problems[-1]


def test_binlog_compression_is_told_not_refused():
    assert compression_variables(MARIADB) == ("log_bin_compress",)
    assert compression_variables(MYSQL) == ("binlog_transaction_compression",)
    (on,) = compression_notes({"log_bin_compress": "ON"}, MARIADB)
    assert on.startswith("The server setting log_bin_compress is ON: ") and "compressed events are decoded" in on
    (on,) = compression_notes({"binlog_transaction_compression": "ON"}, MYSQL)
    assert "binlog_transaction_compression is ON" in on and "zstd" in on and "compressed events are decoded" in on
    (off,) = compression_notes({"log_bin_compress": "OFF"}, MARIADB)
    assert off.startswith("The server setting log_bin_compress is 'OFF': the binlog's events are not compressed")
    # MySQL before 8.0.20 has no such variable: absent, and no problem.
    (absent,) = compression_notes({"binlog_transaction_compression": None}, detect_flavor("8.0.19"))
    assert "binlog_transaction_compression is absent" in absent
    assert settings_problems(GOOD, MARIADB) == []


def test_a_replica_that_does_not_log_what_it_replicates_is_refused_with_the_fix():
    from airflow_cdc_provider.core.flavor import detect_flavor
    from airflow_cdc_provider.core.settings import replica_problems

    mysql, old_mysql, mariadb = detect_flavor("9.7.4"), detect_flavor("8.0.25"), detect_flavor("10.11.6-MariaDB")
    assert [f.replica_logging_variable for f in (mysql, old_mysql, mariadb)] == [
        "log_replica_updates", "log_slave_updates", "log_slave_updates"]
    (problem,) = replica_problems(True, "OFF", mysql)
    assert "The server is a replica, and its setting log_replica_updates is 'OFF'" in problem
    assert "Fix: add log_replica_updates=ON to my.cnf under [mysqld]" in problem
    (problem,) = replica_problems(True, "0", mariadb)
    assert "log_slave_updates=ON to my.cnf under [mariadbd]" in problem
    assert replica_problems(True, "ON", mysql) == replica_problems(True, "1", mariadb) == []
    assert replica_problems(False, "OFF", mysql) == []  # not a replica: every change it has is its own
