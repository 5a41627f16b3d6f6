"""docker-compose.yaml cannot run here (no Docker engine): check its services and MySQL's binlog settings."""

from __future__ import annotations

import json
import re

import yaml

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.core.settings import REQUIRED_SETTINGS
from tests.conftest import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
SERVICES = COMPOSE["services"]


def test_the_whole_stack_is_there():
    assert set(SERVICES) >= {
        "mysql", "postgres", "airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
        "spark-master", "spark-worker", "hive-metastore",
    }
    assert SERVICES["mysql"]["image"] == "mysql:8.4"
    assert SERVICES["hive-metastore"]["environment"]["SERVICE_NAME"] == "metastore"


def test_mysql_runs_with_the_settings_capture_needs():
    options = dict(re.match(r"--([a-z-]+)(?:=(.*))?$", arg).groups() for arg in SERVICES["mysql"]["command"])
    options = {name.replace("-", "_"): value for name, value in options.items()}
    assert "log_bin" in options
    for variable, required, _ in REQUIRED_SETTINGS:
        if variable != "log_bin":
            assert options[variable] == required, variable
    assert int(options["server_id"]) > 0


def test_airflow_services_mount_the_dags_and_name_their_connections():
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor"):
        service = SERVICES[name]
        assert "./dags:/opt/airflow/dags" in service["volumes"]
        env = service["environment"]
        assert env["AIRFLOW_CONN_MYSQL_CDC"] and env["AIRFLOW_CONN_SPARK_DEFAULT"]
        config = CdcConfig.from_dict(yaml.safe_load((ROOT / "dags" / env["CDC_CONFIG"].rsplit("/", 1)[1]).read_text()))
        assert config.hive.metastore_uri == "thrift://hive-metastore:9083"


def test_no_secret_is_written_in_the_file():
    for name, service in SERVICES.items():
        for key, value in (service.get("environment") or {}).items():
            if "PASSWORD" in key or "SECRET" in key:
                assert str(value).startswith("${"), (name, key)
            if key.startswith("AIRFLOW_CONN_") and "password" in value:
                assert json.loads(value)["password"].startswith("${"), (name, key)
            if key.endswith("SQL_ALCHEMY_CONN"):
                assert ":${" in value, (name, key)
