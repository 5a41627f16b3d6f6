"""Packaging: Airflow discovers the provider, its hook and connection type; pinned libraries agree."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points, version
from pathlib import Path

import pyspark

from airflow_cdc_provider import __version__
from airflow_cdc_provider.get_provider_info import get_provider_info


def test_entry_point_points_at_provider_info():
    (ep,) = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_cdc_provider")]
    assert ep.load()()["package-name"] == "airflow-cdc-provider"


def test_provider_info_matches_airflow_schema():
    import json

    import airflow
    import jsonschema

    schema_path = Path(airflow.__file__).with_name("provider_info.schema.json")
    jsonschema.validate(get_provider_info(), json.loads(schema_path.read_text()))
    assert get_provider_info()["versions"] == [__version__] == [version("airflow-cdc-provider")]


def test_providers_manager_discovers_hook_and_connection_type():
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    manager = ProvidersManager()
    assert "airflow-cdc-provider" in manager.providers
    hook = ProvidersManagerTaskRuntime().hooks["mysql"]
    assert hook is not None
    assert hook.hook_class_name == "airflow_cdc_provider.hooks.mysql_source.MySqlSourceHook"
    assert hook.connection_type == "mysql"
    behaviour = manager.field_behaviours["mysql"]
    assert "extra" in behaviour["hidden_fields"]


def test_airflow_providers_list_shows_it():
    airflow = Path(sys.executable).with_name("airflow")
    out = subprocess.run([str(airflow), "providers", "list"], capture_output=True, text=True, check=True).stdout
    assert "airflow-cdc-provider" in out and __version__ in out


def test_every_module_named_in_provider_info_imports():
    import importlib

    info = get_provider_info()
    for section in ("hooks", "operators"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)


def test_pyspark_python_files_match_its_jars():
    # pyspark-client installs into pyspark/ too: if the two disagree, Python files and jars differ silently.
    jars = list((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert jars, "pyspark's jars are missing: reinstall pyspark"
    jar_version = jars[0].stem.rsplit("-", 1)[1]
    assert pyspark.__version__ == version("pyspark") == jar_version
    assert version("pyspark-client") == pyspark.__version__
