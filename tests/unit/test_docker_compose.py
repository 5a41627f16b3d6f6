"""docker-compose.yaml cannot run here (no Docker engine): check its services, volumes, users and secrets, MySQL's
binlog settings, the image's Dockerfile, and run the scripts the containers run (docs/docker.md lists what only a
machine with Docker can check)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path, PurePosixPath

import yaml

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.core.settings import REQUIRED_SETTINGS
from tests.conftest import ROOT

COMPOSE_TEXT = (ROOT / "docker-compose.yaml").read_text()
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
SERVICES = COMPOSE["services"]
ENV_EXAMPLE = ROOT / "docker" / ".env.example"
DOCKERFILE = ROOT / "docker" / "airflow.Dockerfile"

AIRFLOW_USER = "50000:0"
AIRFLOW_SERVICES = ("airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor")
JVM_SERVICES = ("spark-master", "spark-worker", "hive-metastore")
INIT = "init-volumes"


def docker_config() -> CdcConfig:
    env = SERVICES["airflow-scheduler"]["environment"]
    return CdcConfig.from_dict(yaml.safe_load((ROOT / "dags" / env["CDC_CONFIG"].rsplit("/", 1)[1]).read_text()))


def mounts(service: dict) -> list[tuple[str, str]]:
    """(source, target) of each of a service's volumes, short or long syntax."""
    found = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            found.append((volume.get("source", ""), volume["target"]))
        else:
            source, target = volume.split(":")[:2]
            found.append((source, target))
    return found


def named_volume_at(service: dict, path: str) -> str | None:
    """The named volume a service sees ``path`` on (the deepest mount that holds it), or None."""
    best: tuple[int, str] | None = None
    for source, target in mounts(service):
        if PurePosixPath(path).is_relative_to(target) and not source.startswith((".", "/")):
            if best is None or len(target) > best[0]:
                best = (len(target), source)
    return best[1] if best else None


def hiveconf(service: dict) -> dict[str, str]:
    command = service["command"]
    return dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--hiveconf")


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def init_dirs() -> dict[str, str]:
    """What the init step makes: directory → mode."""
    return dict(spec.rsplit(":", 1) for spec in SERVICES[INIT]["command"][1:])


def env_example() -> dict[str, str]:
    pairs = [line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    return {key.strip(): value.strip() for key, value in pairs}


def test_the_whole_stack_is_there():
    assert set(SERVICES) >= {
        "mysql", "postgres", INIT, *AIRFLOW_SERVICES, *JVM_SERVICES,
    }
    assert SERVICES["mysql"]["image"] == "mysql:8.4"
    assert SERVICES["hive-metastore"]["command"][0] == "org.apache.hadoop.hive.metastore.HiveMetaStore"
    assert SERVICES["spark-master"]["command"][0] == "org.apache.spark.deploy.master.Master"
    assert SERVICES["spark-worker"]["command"][0] == "org.apache.spark.deploy.worker.Worker"


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
    assert docker_config().hive.metastore_uri == "thrift://hive-metastore:9083"


def test_no_secret_is_written_in_the_file():
    for name, service in SERVICES.items():
        for key, value in (service.get("environment") or {}).items():
            # (A file's path is no secret: the passwords file's name is.)
            if ("PASSWORD" in key or "SECRET" in key or key.endswith("_KEY")) and not key.endswith("_FILE"):
                assert str(value).startswith("${"), (name, key)
            if key.startswith("AIRFLOW_CONN_") and "password" in value:
                assert json.loads(value)["password"].startswith("${"), (name, key)
            if key.endswith("SQL_ALCHEMY_CONN"):
                assert ":${" in value, (name, key)


# --- Volumes and users ------------------------------------------------------------------------------------------

def test_every_named_volume_is_declared_and_used():
    declared = set(COMPOSE["volumes"])
    used = set()
    for name, service in SERVICES.items():
        for source, target in mounts(service):
            assert source, (name, target, "an anonymous volume is lost with its container")
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), (name, source)
            else:
                assert source in declared, (name, source)
                used.add(source)
    assert used == declared


def test_every_service_writing_the_shared_volume_runs_as_the_airflow_user():
    writers = [name for name, service in SERVICES.items() if any(s == "cdc-data" for s, _ in mounts(service))]
    assert set(writers) >= {INIT, *AIRFLOW_SERVICES, "spark-worker", "hive-metastore"}
    for name in writers:
        service = SERVICES[name]
        if name == INIT:
            # Root, but only to run the init script: no Airflow, no Spark.
            assert service["user"] == "0:0"
            assert service["entrypoint"] == ["sh", "/opt/cdc/docker/init-volumes.sh"]
            assert service["command"][0] == AIRFLOW_USER
        else:
            assert service.get("user") == AIRFLOW_USER, name
            # It starts after the init step has made its directories.
            assert INIT in started_before(name), name


def started_before(name: str) -> set[str]:
    """The services ``name`` waits for to complete or be healthy, directly or through others."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        depends = SERVICES[todo.pop()].get("depends_on") or {}
        for other, how in (depends.items() if isinstance(depends, dict) else ((d, {}) for d in depends)):
            if how.get("condition") in ("service_completed_successfully", "service_healthy") and other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def test_the_init_step_makes_the_work_dir_for_the_tasks_user_alone():
    dirs = init_dirs()
    work_dir = docker_config().work.dir
    assert dirs[work_dir] == "700"
    assert SERVICES[INIT]["command"][0] == AIRFLOW_USER
    # The init step sees the work dir on the very volume the tasks see it on.
    assert named_volume_at(SERVICES[INIT], work_dir) == named_volume_at(SERVICES["airflow-scheduler"], work_dir)
    # Every directory it makes is on a volume it mounts (else it would make it in its own container only).
    for directory in dirs:
        assert named_volume_at(SERVICES[INIT], directory), directory


def test_the_init_step_makes_every_directory_the_services_write():
    dirs = init_dirs()
    config = docker_config()
    metastore = SERVICES["hive-metastore"]
    database = database_dir()
    written = {
        config.work.dir, config.hive.warehouse_dir, str(PurePosixPath(database).parent), metastore["working_dir"],
        "/opt/airflow/logs", str(PurePosixPath(SERVICES["airflow-apiserver"]["environment"][
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]).parent),
    }
    assert written <= set(dirs)
    # The volume's root too: a directory of the Airflow user's, which no other user can write.
    assert dirs["/data"] == "755"
    for directory, mode in dirs.items():
        assert not int(mode, 8) & 0o022, (directory, "writable by others")


def test_the_init_script_makes_and_repairs_the_directories(tmp_path: Path):
    owner = f"{os.getuid()}:{os.getgid()}"
    # The compose file's arguments, with its paths moved under tmp_path.
    specs = [f"{tmp_path}{directory}:{mode}" for directory, mode in init_dirs().items()]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", str(ROOT / "docker" / "init-volumes.sh"), *args], capture_output=True,
                              text=True, timeout=30)

    assert run(owner, *specs).returncode == 0
    work = tmp_path / docker_config().work.dir.lstrip("/")
    assert stat.S_IMODE(work.stat().st_mode) == 0o700 and work.stat().st_uid == os.getuid()
    (work / "ledger.json").write_text("{}")
    work.chmod(0o777)
    assert run(owner, *specs).returncode == 0  # again: mode set back, contents kept
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    assert (work / "ledger.json").read_text() == "{}"
    for directory, mode in init_dirs().items():
        assert stat.S_IMODE((tmp_path / directory.lstrip("/")).stat().st_mode) == int(mode, 8), directory
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    refused = run(owner, f"{tmp_path}/link:700")
    assert refused.returncode != 0 and "symbolic link" in refused.stderr
    assert run(owner, f"{tmp_path}/no-mode").returncode != 0


# --- The Hive metastore -------------------------------------------------------------------------------------------

def database_dir() -> str:
    url = hiveconf(SERVICES["hive-metastore"])["javax.jdo.option.ConnectionURL"]
    match = re.fullmatch(r"jdbc:derby:;databaseName=(/[^;]+);create=true", url)
    assert match, url
    return match.group(1)


def test_the_metastore_database_is_on_the_volume_of_the_ledgers():
    metastore = SERVICES["hive-metastore"]
    database = database_dir()
    # A named volume: a recreated container finds the tables the ledgers (in the work dir) name.
    volume = named_volume_at(metastore, database)
    assert volume in COMPOSE["volumes"]
    assert volume == named_volume_at(SERVICES["airflow-scheduler"], docker_config().work.dir)
    assert metastore.get("user") == AIRFLOW_USER
    conf = hiveconf(metastore)
    # Hive's tables are made in an empty database and kept in an existing one; no version check against scripts
    # pyspark does not ship.
    assert conf["datanucleus.schema.autoCreateAll"] == "true"
    assert conf["hive.metastore.schema.verification"] == "false"
    assert conf["hive.async.log.enabled"] == "false"
    assert f"-Dderby.system.home={metastore['working_dir']}" in metastore["environment"]["SERVICE_JAVA_OPTS"]


def test_the_metastore_serves_the_configured_uri_and_warehouse():
    metastore = SERVICES["hive-metastore"]
    config = docker_config()
    assert config.hive.metastore_uri == f"thrift://hive-metastore:{option(metastore['command'], '-p')}"
    assert hiveconf(metastore)["hive.metastore.warehouse.dir"] == f"file://{config.hive.warehouse_dir}"
    for name in ("airflow-scheduler", "spark-worker", "hive-metastore"):
        assert named_volume_at(SERVICES[name], config.hive.warehouse_dir) == "cdc-data", name
        assert named_volume_at(SERVICES[name], config.work.dir) == "cdc-data", name


# --- One image, one Python --------------------------------------------------------------------------------------

def test_spark_the_metastore_and_airflow_run_one_image():
    images = {(json.dumps(SERVICES[name]["build"], sort_keys=True), SERVICES[name]["image"])
              for name in (*AIRFLOW_SERVICES, *JVM_SERVICES, INIT)}
    assert len(images) == 1, images
    build, image = images.pop()
    assert json.loads(build) == {"context": ".", "dockerfile": "docker/airflow.Dockerfile"}
    assert not any(str(s.get("image", "")).startswith(("apache/spark", "apache/hive")) for s in SERVICES.values())
    for name in JVM_SERVICES:
        assert SERVICES[name]["entrypoint"] == ["/usr/bin/dumb-init", "--", "sh", "/opt/cdc/docker/spark-service.sh"]


def test_the_image_has_the_pinned_airflow_and_the_project_python():
    base = re.search(r"^FROM\s+apache/airflow:(\S+)-python(\d+\.\d+)\s*$", DOCKERFILE.read_text(), re.M)
    assert base, "the image is built on an apache/airflow image with a Python version in its tag"
    airflow_version, python = base.groups()
    pins = dict(line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    assert pins["apache-airflow"] == airflow_version
    assert f"Programming Language :: Python :: {python}" in (ROOT / "pyproject.toml").read_text()


def test_the_spark_services_reach_each_other_and_the_driver():
    master, worker = SERVICES["spark-master"], SERVICES["spark-worker"]
    spark = json.loads(SERVICES["airflow-scheduler"]["environment"]["AIRFLOW_CONN_SPARK_DEFAULT"])
    master_url = f"spark://{option(master['command'], '--host')}:{option(master['command'], '--port')}"
    assert f"{spark['host']}:{spark['port']}" == master_url
    assert worker["command"][1] == master_url
    for name in JVM_SERVICES:
        assert SERVICES[name]["hostname"] == name
    assert option(worker["command"], "--host") == "spark-worker"
    # The tasks (and the Spark drivers) run in the scheduler: the executors connect back to it by this name.
    scheduler = SERVICES["airflow-scheduler"]
    assert scheduler["environment"]["SPARK_LOCAL_HOSTNAME"] == scheduler["hostname"] == "airflow-scheduler"
    assert scheduler["environment"]["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"


def test_the_ui_has_users_and_keeps_their_passwords():
    apiserver = SERVICES["airflow-apiserver"]
    env = apiserver["environment"]
    users = [user.split(":") for user in env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(",")]
    assert ["admin", "admin"] in users
    passwords = env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
    assert named_volume_at(apiserver, passwords) in COMPOSE["volumes"]
    assert "127.0.0.1:8080:8080" in apiserver["ports"]


# --- .env.example -------------------------------------------------------------------------------------------------

def test_the_env_example_names_every_variable_the_compose_file_reads():
    referenced = dict(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[?-])?[^}]*\}", COMPOSE_TEXT))
    required = {name for name, kind in referenced.items() if kind in (":?", "?")}
    assert required >= {"AIRFLOW_DB_PASSWORD", "AIRFLOW_JWT_SECRET", "MYSQL_ROOT_PASSWORD", "CDC_PASSWORD"}
    example = env_example()
    assert set(example) == set(referenced), "docker/.env.example names exactly the variables compose reads"
    text = ENV_EXAMPLE.read_text()
    for name in required:
        # Said so beside it: compose refuses to start while it is empty.
        assert re.search(rf"# Required: .*\n{name}=", text), name


def test_the_env_example_holds_no_real_looking_secret():
    # Empty, not a placeholder: a copied .env that nobody filled in does not start with a known password.
    for name, value in env_example().items():
        assert value == "", (name, value)


# --- The Dockerfile ------------------------------------------------------------------------------------------------

def dockerfile_instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_the_dockerfile_parses_and_copies_what_exists():
    instructions = dockerfile_instructions()
    known = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER", "WORKDIR",
             "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
    assert {keyword for keyword, _ in instructions} <= known
    assert instructions[0][0] == "FROM"
    ignore = (ROOT / "docker" / "airflow.Dockerfile.dockerignore").read_text().splitlines()
    # Everything is left out of the build context but what is named after the "*".
    assert [line for line in ignore if line and not line.startswith("#")][0] == "*"
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    copied: list[str] = []
    for keyword, rest in instructions:
        if keyword in ("COPY", "ADD"):
            words = [w for w in rest.split() if not w.startswith("--")]
            assert not any(w.startswith("--from") for w in rest.split())
            *sources, target = words
            for source in sources:
                assert (ROOT / source).exists(), source
                # The build context keeps only what the .dockerignore lets through.
                assert source in allowed, source
                copied.append(f"{target.rstrip('/')}/{Path(source).name}" if target.endswith("/") else target)
    # The scripts the compose file runs are in the image, where it runs them.
    for service in SERVICES.values():
        for word in service.get("entrypoint") or []:
            if word.startswith("/opt/cdc/"):
                assert word in copied, word
    assert ("USER", "airflow") == [i for i in instructions if i[0] == "USER"][-1]


def test_the_compose_entrypoint_scripts_are_shell_scripts_that_parse():
    for script in ("spark-service.sh", "init-volumes.sh"):
        path = ROOT / "docker" / script
        assert path.read_text().startswith("#!/bin/sh\n")
        assert subprocess.run(["sh", "-n", str(path)], capture_output=True, timeout=10).returncode == 0, script


# --- The JVM services' command lines ------------------------------------------------------------------------------

def test_the_jvm_services_command_lines_reach_their_class(tmp_path: Path):
    """Each Spark or metastore service's entrypoint and command, as the compose file gives them, with ``--help``
    added: spark-service.sh finds pyspark with python3, spark-class starts the JVM, the class is in pyspark's jars
    and takes the arguments. The services themselves are not started (docs/docker.md has that check)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "TMPDIR": str(tmp_path)}
    for name in ("SPARK_HOME", "SPARK_CONF_DIR"):
        env.pop(name, None)
    processes = {}
    for name in JVM_SERVICES:
        service = SERVICES[name]
        entrypoint = service["entrypoint"]
        assert entrypoint[:3] == ["/usr/bin/dumb-init", "--", "sh"]
        command = ["sh", str(ROOT / "docker" / Path(entrypoint[3]).name), *service["command"], "--help"]
        service_env = {**env, **{k: str(v) for k, v in (service.get("environment") or {}).items()}}
        processes[name] = subprocess.Popen(command, env=service_env, cwd=tmp_path, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)
    outputs = {name: process.communicate(timeout=60)[0] for name, process in processes.items()}
    codes = {name: process.returncode for name, process in processes.items()}
    assert codes["spark-master"] == 0 and "Usage: Master" in outputs["spark-master"], outputs["spark-master"]
    assert codes["spark-worker"] == 0 and "Usage: Worker" in outputs["spark-worker"], outputs["spark-worker"]
    # Hive's command-line parser exits 1 after its usage.
    assert "usage: hivemetastore" in outputs["hive-metastore"], outputs["hive-metastore"]
    # The java-opts file was written into the service's own conf dir.
    java_opts = [path.read_text().strip() for path in tmp_path.glob("spark-conf.*/java-opts")]
    assert java_opts == [SERVICES["hive-metastore"]["environment"]["SERVICE_JAVA_OPTS"]]
