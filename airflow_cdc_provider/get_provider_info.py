"""Provider metadata, read by Airflow's ProvidersManager through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_cdc_provider import __version__


def get_provider_info() -> dict[str, Any]:
    # No connection type of its own: the capture user's connection is conn_type `mysql`, which the MySQL
    # provider (apache-airflow-providers-mysql, the `mysql` extra) registers with its form. Registering it
    # here too would clash with that provider in a user's Airflow.
    return {
        "package-name": "airflow-cdc-provider",
        "name": "MySQL binlog to Hive (CDC)",
        "description": "Keeps Hive tables in step with MySQL tables by reading the MySQL binlog, merging on Spark.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "MySQL binlog CDC",
                "external-doc-url": "https://dev.mysql.com/doc/refman/8.4/en/binary-log.html",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": "MySQL binlog CDC",
                "python-modules": ["airflow_cdc_provider.hooks.mysql_source"],
            }
        ],
        # `airflow cdc preflight` and `airflow cdc status` (Airflow 3.3+; earlier versions ignore the entry).
        "cli": ["airflow_cdc_provider.cli.get_cli_commands"],
        "operators": [
            {
                "integration-name": "MySQL binlog CDC",
                "python-modules": [
                    "airflow_cdc_provider.operators.check",
                    "airflow_cdc_provider.operators.heal",
                    "airflow_cdc_provider.operators.plan",
                    "airflow_cdc_provider.operators.capture",
                    "airflow_cdc_provider.operators.merge",
                    "airflow_cdc_provider.operators.spark_submit",
                    "airflow_cdc_provider.operators.summary",
                    "airflow_cdc_provider.operators.verify",
                ],
            }
        ],
    }
