from airflow_cdc_provider.core.flavor import detect_flavor
from airflow_cdc_provider.core.settings import settings_problems

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
