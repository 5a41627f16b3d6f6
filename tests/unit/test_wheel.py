"""Packaging: the wheel a user installs into their Airflow holds the provider, all of it, and nothing of its tests.

The wheel is built from a copy of the checkout (setuptools builds in the source tree), without build isolation:
offline, in a few seconds, with the setuptools the `test` extra installs.
"""

from __future__ import annotations

import ast
import configparser
import hashlib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from airflow_cdc_provider import __version__
from airflow_cdc_provider.get_provider_info import get_provider_info
from airflow_cdc_provider.spark import MERGE_JOB, VERIFY_JOB
from tests.packaging import build_wheel

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_cdc_provider"
# The development helpers' own package (throwaway MariaDB, metastore, Spark cluster, S3, the Hive reader).
HELPERS = ROOT / "testing" / "airflow_cdc_testing"
DIST_INFO = f"airflow_cdc_provider-{__version__}.dist-info"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Every file of the wheel, by its path inside it."""
    path = build_wheel(tmp_path_factory.mktemp("wheel"))
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}


def _module_path(module: str) -> str:
    return module.replace(".", "/") + ".py"


def _imported_files(source: bytes) -> set[str]:
    """The package's files that importing ``source`` runs: each module it names, and the packages above it."""
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from package import name`: name may be a submodule.
            modules |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    files = set()
    for module in modules:
        parts = module.split(".")
        if parts[0] != "airflow_cdc_provider":
            continue
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            if (ROOT / folder / "__init__.py").is_file():
                files.add(f"{folder}/__init__.py")
            elif (ROOT / f"{folder}.py").is_file():
                files.add(f"{folder}.py")
    return files


def test_the_wheel_holds_the_package_and_its_metadata_only(wheel):
    tops = {PurePosixPath(name).parts[0] for name in wheel}
    assert tops == {"airflow_cdc_provider", DIST_INFO}, sorted(tops)


def test_no_test_helper_is_in_the_wheel(wheel):
    helper_like = [name for name in wheel
                   if {"testing", "tests", "airflow_cdc_testing", "conftest.py"} & set(PurePosixPath(name).parts)
                   or PurePosixPath(name).name.startswith("test_") or "read_table_job" in name]
    assert helper_like == []
    # Under any name: no file of the helpers' package went in.
    helpers = {hashlib.sha256(path.read_bytes()).hexdigest(): path.name for path in HELPERS.glob("*.py")}
    assert {"server.py", "cluster.py", "hive.py", "s3.py", "read_table_job.py"} <= set(helpers.values())
    copied = {name: helpers[digest] for name, data in wheel.items()
              if (digest := hashlib.sha256(data).hexdigest()) in helpers and data.strip()}
    assert copied == {}


def test_every_module_of_the_package_and_its_type_marker_are_in_the_wheel(wheel):
    sources = {path.relative_to(ROOT).as_posix() for path in PACKAGE.rglob("*.py")
               if "__pycache__" not in path.parts}
    in_wheel = {name for name in wheel if name.endswith(".py")}
    assert sources - in_wheel == set()
    assert in_wheel - sources == set()
    assert "airflow_cdc_provider/py.typed" in wheel
    assert "airflow_cdc_provider/overview/page.html" in wheel, "the CDC tables page the plugin serves"


def test_airflow_finds_the_provider_and_its_hooks_and_operators_in_the_wheel(wheel):
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel[f"{DIST_INFO}/entry_points.txt"].decode())
    assert dict(entry_points["apache_airflow_provider"]) == {
        "provider_info": "airflow_cdc_provider.get_provider_info:get_provider_info"}
    assert dict(entry_points["airflow.plugins"]) == {
        "cdc_tables": "airflow_cdc_provider.overview.plugin:CdcTablesPlugin"}, "the CDC tables page's plugin"
    info = get_provider_info()
    modules = [m for kind in ("hooks", "operators") for entry in info[kind] for m in entry["python-modules"]]
    assert modules and [m for m in modules if _module_path(m) not in wheel] == []


def test_the_spark_jobs_and_everything_they_import_from_the_package_are_in_the_wheel(wheel):
    # spark-submit runs them from the installed package, on a cluster node too: each module of the package they
    # import, directly or through another, must be in the wheel.
    jobs = {f"airflow_cdc_provider/spark/{Path(job).name}" for job in (MERGE_JOB, VERIFY_JOB)}
    seen: set[str] = set()
    todo = sorted(jobs)
    while todo:
        path = todo.pop()
        if path not in seen:
            assert path in wheel, f"{path}, which a Spark job imports, is not in the wheel"
            seen.add(path)
            todo.extend(_imported_files(wheel[path]))
    assert {"airflow_cdc_provider/spark/session.py", "airflow_cdc_provider/core/merge.py"} <= seen
