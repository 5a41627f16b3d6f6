"""Shared fixtures: an Airflow home in a temp dir, throwaway MariaDB servers with a row binlog, capture users.

Airflow reads its configuration when first imported, so the environment is set here, before any test module
imports it.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"

_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="cdc-airflow-home-"))
atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)
_TEST_JVM_OPTIONS = ["-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1", "-XX:ParallelGCThreads=1",
                     "-XX:-UsePerfData"]
os.environ.update(
    {
        "AIRFLOW_HOME": str(_AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # The tests' JVMs (Spark drivers, the metastore, the cluster) live seconds on tables of a few thousand
        # rows: the optimising compiler costs them more CPU than it saves (measured: test_time_zones took 123 s
        # of CPU with it, 90 s without), and with two workers on two cores one compiler thread and one collector
        # thread each are enough (a trivial Spark job: 13 s of CPU, 10.5 s with one each). Results do not depend
        # on it.
        "JDK_JAVA_OPTIONS": " ".join(filter(None, [os.environ.get("JDK_JAVA_OPTIONS"), *_TEST_JVM_OPTIONS])),
    }
)

from airflow_cdc_testing.cluster import MetastoreService, SparkCluster  # noqa: E402
from airflow_cdc_testing.s3 import S3Server  # noqa: E402
from airflow_cdc_testing.server import CaptureUser, Product, ThrowawayServer  # noqa: E402

from tests.servers import start_server as start_test_server  # noqa: E402

SAMPLE_SCHEMA = ROOT / "dags" / "sample" / "shop.sql"
# Flink CDC's all-types MySQL table, read from ../shared (beside the clone, in CI too), never copied here.
CONFORMANCE_SQL = ROOT.parent / "shared" / "conformance" / "flink_cdc_column_type_test.sql"


# Each test is marked by the directory it is in, so that a subset runs on its own (``make unit``, ``make quick``).
_MARK_BY_DIRECTORY = {"integration": pytest.mark.integration, "e2e": pytest.mark.e2e}

# `make test` spreads the tests over one worker per core (pytest-xdist, --dist loadgroup, in collection order):
# the longest first, so that no worker starts a five-minute test while the other has nothing left. The end-to-end
# modules by their measured length (a full run's --durations), then the integration tests that start Spark, the
# other integration tests and the unit tests. A module missing from the list goes after those named.
_LONGEST_FIRST = ["test_scheduler", "test_source", "test_faults", "test_pipeline", "test_verify", "test_mysql",
                  "test_quickstart", "test_shards", "test_diff_mode", "test_schema_evolution", "test_cluster",
                  "test_time_zones", "test_example_dag"]
_STAGE_BY_DIRECTORY = {"e2e": 0, "integration": 1}
# Modules whose tests share something costly to start (a module-scoped server or Spark environment, the session's
# Spark cluster and metastore service): their tests stay on one worker, which starts it once. The scheduler's tests
# too, for another reason: they spend minutes waiting for the timetable's next minute, and one after the other on
# one worker they leave the other worker's tests, which keep the cores busy, the time they do not use.
_ONE_WORKER = {"test_cluster", "test_binlog_columns", "test_merge_spark35", "test_source_hook",
               "test_source_tls_and_limits", "test_scheduler"}


def _expected_length_rank(item: pytest.Item) -> tuple[int, int]:
    parts = item.path.relative_to(ROOT / "tests").parts
    stage = _STAGE_BY_DIRECTORY.get(parts[0], 3) if len(parts) > 1 else 3
    if stage == 1 and item.get_closest_marker("spark") is None:
        stage = 2
    module = item.path.stem
    return stage, _LONGEST_FIRST.index(module) if module in _LONGEST_FIRST else len(_LONGEST_FIRST)


# The unit tests whose module uses Airflow, or the provider's code that does (operators, hooks, task groups, the
# compatibility layer): ``--airflow-facing`` keeps only these of tests/unit. The rest test the core and the stages,
# which import no Airflow (the import contract), on the same libraries whatever the Airflow (the two constraint
# files differ only in Airflow's own dependencies): the lowest Airflow's run repeats them for nothing.
_AIRFLOW_FACING = re.compile(
    r"^\s*(from|import) airflow[. ]|airflow_cdc_provider[. ](import )?(operators|task_groups|hooks|compat|"
    r"get_provider_info)", re.MULTILINE)


# What the suite writes at its peak in the temporary directory, with room to spare: servers' data and binlogs,
# warehouses, Spark's and the metastore's files, Airflow homes (measured: pytest's directories of three runs took
# 3.3 GB). Below it, servers and JVMs fail one after another with errors that do not say why, and the run drags on
# for an hour. Checked for a whole suite only: a run chosen by `-m` (`make unit`) writes little.
NEEDED_FREE_GIB = 6


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: the controller has checked
    free = shutil.disk_usage(tempfile.gettempdir()).free / 2**30
    if free < NEEDED_FREE_GIB and session.config.option.markexpr in ("", None):
        pytest.exit(f"Only {free:.1f} GiB free in {tempfile.gettempdir()}; the suite needs about {NEEDED_FREE_GIB} "
                    "GiB there. Free some space (uv's cache: `uv cache clean pyspark`; old checkouts and their .venv) "
                    "and run it again.", returncode=3)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--airflow-facing", action="store_true",
                     help="of the unit tests, only those whose module uses Airflow or the provider's Airflow-facing "
                          "code (make test-lowest)")


# First among the plugins' hooks: pytest-xdist's own (on each worker) reads the xdist_group marks added here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("airflow_facing"):
        texts: dict[Path, bool] = {}

        def facing(item: pytest.Item) -> bool:
            if item.path.parent != ROOT / "tests" / "unit":
                return True
            if item.path not in texts:
                texts[item.path] = bool(_AIRFLOW_FACING.search(item.path.read_text()))
            return texts[item.path]

        config.hook.pytest_deselected(items=[item for item in items if not facing(item)])
        items[:] = [item for item in items if facing(item)]
    for item in items:
        parts = item.path.relative_to(ROOT / "tests").parts
        if len(parts) > 1 and parts[0] in _MARK_BY_DIRECTORY:
            item.add_marker(_MARK_BY_DIRECTORY[parts[0]])
        if item.path.stem in _ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
            _join_group(item, item.path.stem)
    items.sort(key=_expected_length_rank)  # stable: a module's tests keep their order


def _join_group(item: pytest.Item, group: str) -> None:
    """Give the item's node id the ``@group`` suffix by which pytest-xdist's loadgroup keeps a group on one worker.

    pytest-xdist 3.8 appends it to ``item._nodeid``, which pytest 9.2 no longer reads: its node ids are ``NodeId``
    values in ``item._id``, and the groups would be silently ignored. Where ``_id`` is not there (an older pytest),
    xdist's own suffix works and nothing is done here."""
    node_id = getattr(item, "_id", None)
    if node_id is None or "@" in item.nodeid:
        return
    from _pytest.nodeid import NodeId

    item._id = NodeId.parse(f"{item.nodeid}@{group}")


def conn_env(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """The Airflow home of this test session, with its metadata DB migrated."""
    result = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), "db", "migrate"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThrowawayServer]:
    """A server with the settings capture needs, the sample schema loaded; stopped after the session."""
    server = start_test_server(tmp_path_factory.mktemp("mariadb"))
    try:
        server.run_script(SAMPLE_SCHEMA)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mysql(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThrowawayServer]:
    """A MySQL 9.7 server with the settings capture needs (and GTIDs on, as MySQL is mostly run), the sample schema
    loaded; stopped after the session. Its binlog transaction compression is off, as MySQL's default: a test turns
    it on for its own sessions (``binlog_transaction_compression`` is a session variable too)."""
    server = start_test_server(tmp_path_factory.mktemp("mysql"), product=Product.MYSQL)
    try:
        server.run_script(SAMPLE_SCHEMA)
        yield server
    finally:
        server.stop()


@pytest.fixture
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ThrowawayServer]]:
    """Start a server with some settings overridden (``log_bin=False``, ``binlog_format="STATEMENT"``…)."""
    servers: list[ThrowawayServer] = []

    def start(**overrides: object) -> ThrowawayServer:
        server = start_test_server(tmp_path_factory.mktemp("mariadb-wrong"), overrides)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def make_user(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """Create a user on a server (the session's MariaDB unless given) and an Airflow connection (as
    AIRFLOW_CONN_<ID>) for it; returns the conn id."""
    created: list[tuple[ThrowawayServer, str]] = []

    def make(privileges=("SELECT", "REPLICATION SLAVE", "REPLICATION CLIENT"), on="*.*", server=None) -> str:
        server = server or request.getfixturevalue("mariadb")
        name = f"u{len(created)}_{os.urandom(3).hex()}"
        login: CaptureUser = server.create_user(name, privileges, on)
        conn_id = f"mysql_{name}"
        monkeypatch.setenv(conn_env(conn_id), json.dumps(server.connection_uri(login)))
        created.append((server, name))
        return conn_id

    yield make
    for server, name in created:
        if server.process and server.process.poll() is None:
            server.execute(f"DROP USER IF EXISTS '{name}'@'%'")


@pytest.fixture
def capture_conn(make_user: Callable[..., str]) -> str:
    """A least-privilege capture user on the main server: SELECT, REPLICATION SLAVE, REPLICATION CLIENT."""
    return make_user()


@pytest.fixture(scope="session")
def metastore_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetastoreService]:
    """A Hive metastore service (thrift, its own Derby) on loopback, shared by the tests that name it."""
    root = tmp_path_factory.mktemp("metastore")
    service = MetastoreService.start(root / "service", root / "warehouse")
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A Spark standalone master and worker on loopback; room for two applications of one core and 1 GB each."""
    cluster = SparkCluster.start(tmp_path_factory.mktemp("spark-cluster"), cores=2, memory="2560m")
    try:
        yield cluster
    finally:
        cluster.stop()


S3_CONN_ID = "cdc_s3"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """An S3-compatible server (moto's) on loopback with one bucket, and the Airflow connection ``cdc_s3`` to it."""
    server = S3Server().start()
    os.environ[conn_env(S3_CONN_ID)] = server.connection_uri()
    try:
        yield server
    finally:
        os.environ.pop(conn_env(S3_CONN_ID), None)
        server.stop()


# `work: dir` and `hive: warehouse_dir` have no default; configurations in the tests that are about something else
# get these (never created: nothing here runs a task on them).
WORK_DIRS = {"work": {"dir": "/srv/cdc/work"}, "hive": {"warehouse_dir": "/srv/cdc/warehouse"}}


def with_dirs(data: object) -> object:
    """``data`` (a configuration mapping) with a work directory and a warehouse unless it gives its own."""
    if not isinstance(data, dict):
        return data
    filled = dict(data)
    for section, values in WORK_DIRS.items():
        if section == "work" and "work_dir" in data:
            continue
        given = data.get(section)
        if given is None or isinstance(given, dict):
            filled[section] = {**values, **(given or {})}
    return filled


def read_config(data: object, origin: str = "the configuration") -> object:
    """``CdcConfig.from_dict`` of ``with_dirs(data)``."""
    from airflow_cdc_provider.core.config import CdcConfig

    return CdcConfig.from_dict(with_dirs(data), origin)
