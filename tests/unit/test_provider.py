"""Packaging: Airflow discovers the provider and its modules, next to the MySQL provider; pinned libraries agree."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points, version
from pathlib import Path

import pyspark

from airflow_cdc_provider import __version__
from airflow_cdc_provider.get_provider_info import get_provider_info
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook


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


def test_the_capture_connection_is_the_mysql_providers_type_and_nothing_clashes():
    # conn_type `mysql` belongs to apache-airflow-providers-mysql (installed with the tests): this provider
    # registers no connection type, so a user's existing MySQL connections keep their form and hook.
    from airflow.providers_manager import ProvidersManager

    try:  # Airflow 3.2+: a task finds hooks through the Task SDK's own registry
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime as HookRegistry
    except ImportError:  # Airflow 3.1: through core's
        HookRegistry = ProvidersManager

    manager = ProvidersManager()
    assert {"airflow-cdc-provider", "apache-airflow-providers-mysql"} <= set(manager.providers)
    assert "connection-types" not in get_provider_info()
    hook = HookRegistry().hooks["mysql"]
    assert hook.hook_class_name == "airflow.providers.mysql.hooks.mysql.MySqlHook"
    assert MySqlSourceHook.conn_type == hook.connection_type == "mysql"


def test_airflow_providers_list_shows_it_beside_the_mysql_hive_and_openlineage_providers_without_a_warning():
    # Installed together as a user would (the test extra): no connection type, asset scheme or hook clashes.
    airflow = Path(sys.executable).with_name("airflow")
    result = subprocess.run([str(airflow), "providers", "list"], capture_output=True, text=True, check=True)
    assert "airflow-cdc-provider" in result.stdout and __version__ in result.stdout
    for provider in ("mysql", "apache-hive", "openlineage"):
        assert f"apache-airflow-providers-{provider} " in result.stdout, result.stdout
    # On Airflow 3.1 the common-compat provider warns that another provider imports a class from its
    # pre-3.0 module: not this provider's doing, and not seen on 3.3.
    problems = [line for line in result.stderr.splitlines() if ("WARNING" in line.upper() or "ERROR" in line.upper())
                and "airflow/providers/common/compat/" not in line]
    assert not problems, result.stderr


def _modules_defining(base: type) -> set[str]:
    """Every module of the package that defines a subclass of ``base`` (imports them all to find out)."""
    import importlib
    import inspect
    import pkgutil

    import airflow_cdc_provider

    found = set()
    for info in pkgutil.walk_packages(airflow_cdc_provider.__path__, "airflow_cdc_provider."):
        if ".spark." in info.name or ".testing" in info.name:
            continue  # the Spark jobs run under spark-submit, without Airflow; testing is not the provider
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and issubclass(cls, base) and cls is not base:
                found.add(info.name)
    return found


def test_every_module_with_a_hook_or_an_operator_is_in_the_provider_info():
    from airflow.sdk import BaseHook, BaseOperator

    info = get_provider_info()
    listed = {section: {m for entry in info[section] for m in entry["python-modules"]}
              for section in ("hooks", "operators")}
    hooks, operators = _modules_defining(BaseHook), _modules_defining(BaseOperator)
    assert hooks and operators
    assert hooks == listed["hooks"], f"hook modules {sorted(hooks)} against the provider info's {sorted(listed['hooks'])}"
    assert operators == listed["operators"], \
        f"operator modules {sorted(operators)} against the provider info's {sorted(listed['operators'])}"


def test_pyspark_python_files_match_its_jars():
    # pyspark-client installs into pyspark/ too: if the two disagree, Python files and jars differ silently.
    jars = list((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert jars, "pyspark's jars are missing: reinstall pyspark"
    jar_version = jars[0].stem.rsplit("-", 1)[1]
    assert pyspark.__version__ == version("pyspark") == jar_version
    assert version("pyspark-client") == pyspark.__version__


def test_the_package_lists_the_names_a_dag_file_imports_from_it_and_hands_each_out():
    # In a fresh interpreter: the package alone, before anything imported what it hands out lazily.
    script = ("import airflow_cdc_provider as p, sys; listed = dir(p); "
              "print(sorted(set(p.__all__) - set(listed)), 'airflow_cdc_provider.task_groups' in sys.modules, "
              "all(callable(getattr(p, n)) for n in p.__all__ if n != '__version__'))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["[]", "False", "True"], out


def test_parsing_a_dag_file_imports_no_library_only_a_task_needs():
    # Every task process parses the DAG file again (and the dag-processor, over and over): pandas, which
    # pyarrow.dataset brings, is half a second of CPU each time, and only a heal's digests read needs it.
    script = ("import sys, airflow_cdc_provider.task_groups; "
              "print(sorted(m for m in ('pandas', 'pyarrow.dataset', 'pyspark') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
