"""A Hive metastore service and a Spark standalone cluster on loopback, for tests and the demo.

Both run from the jars the pyspark pip package ships (no Hadoop, Hive or Spark install), each in its own
process group so that ``stop()`` ends it together with everything it started (a worker's executors and their
Python workers). They are sized for a 2-core machine that also runs MariaDB, Airflow and a Spark driver.

    metastore = MetastoreService.start(tmp / "hms", tmp / "warehouse")
    cluster = SparkCluster.start(tmp / "spark")
    ... spark-submit --master cluster.master_url --conf spark.hadoop.hive.metastore.uris=metastore.uri ...
    cluster.stop(); metastore.stop()
"""

from __future__ import annotations

import atexit
import importlib.util
import io
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"

# The metastore's JVM: Derby and DataNucleus fit well in 256 MB for a test's few tables. The serial collector
# and C1-only compilation keep its CPU use (two cores shared with Spark and Airflow) and footprint small; it
# serves a few calls per second at most, so the slower peak code does not matter.
METASTORE_MEMORY = "256m"
METASTORE_JAVA_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k")

# The master's and the worker's own JVMs (not the executors'): each only keeps book of a few applications.
# spark.port.maxRetries=0: a daemon whose port was taken meanwhile must fail, not quietly move to the next
# port, where the worker, the clients and our readiness check would never look (or find another master).
DAEMON_MEMORY = "256m"
DAEMON_JAVA_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dspark.port.maxRetries=0")


class ServiceNotAvailable(RuntimeError):
    """A service did not start (or did not become ready in time); the message carries its log's tail."""


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` different ports nothing listens on now (another process may still take one before the service
    binds it). The sockets are held open together so that the kernel cannot hand out the same port twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port(host: str = LOOPBACK) -> int:
    return free_ports(1, host)[0]


def spark_home() -> Path:
    """The pyspark package folder, which is a Spark home: bin/, jars/, python/lib/."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ServiceNotAvailable("pyspark is not installed in this interpreter.")
    return Path(spec.origin).parent


def _spark_class() -> str:
    # The venv's bin has spark-class next to this interpreter; pyspark/bin does not always have it.
    beside = Path(sys.executable).with_name("spark-class")
    return str(beside) if beside.exists() else str(spark_home() / "bin" / "spark-class")


def service_env(conf_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a spark-class service.

    SPARK_HOME is set so that spark-class does not run find-spark-home, which asks whichever ``python3`` comes
    first on PATH. The interpreter's bin dir still goes first on PATH: a worker's executors inherit this
    environment, and a Python worker of a driver that names no interpreter runs plain ``python3`` from it.
    SPARK_CONF_DIR is a folder of the service's own, so no spark-env.sh, spark-defaults.conf or java-opts of
    the machine's leaks in. SPARK_LOCAL_IP keeps every port a Spark JVM opens on loopback.
    """
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": LOOPBACK,
        # Only spark-daemon.sh reads these; set anyway so nothing ever writes into the venv.
        "SPARK_LOG_DIR": str(conf_dir.parent),
        "SPARK_PID_DIR": str(conf_dir.parent),
        **extra,
    }
    # Options meant for other JVMs (e.g. a test's own spark-submit) must not reach the services'.
    for name in ("SPARK_DAEMON_JAVA_OPTS", "SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS", "SPARK_DAEMON_MEMORY",
                 "SPARK_DRIVER_MEMORY", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS"):
        if name not in extra:
            env.pop(name, None)
    return env


def port_is_free(port: int, host: str = "0.0.0.0") -> bool:
    """Whether a server could listen on ``port`` now. SO_REUSEADDR as Java's ServerSocket sets it, so a port
    that only has closed connections in TIME_WAIT counts as free, as it does for the JVM."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _read_log(path: Path, offset: int = 0) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def _log_tail(path: Path, chars: int = 4000, offset: int = 0) -> str:
    return _read_log(path, offset)[-chars:] or "(empty log)"


# Every service process still running, by pid. Being in sessions of their own, the services would outlive a
# test run that ends without calling stop() (an error in a fixture, Ctrl-C): at exit they are stopped here.
# A SIGKILL of this interpreter still leaves them, like any process started with start_new_session.
_RUNNING: dict[int, _Process] = {}


def _stop_all() -> None:
    for process in list(_RUNNING.values()):
        process.stop(grace=5)


atexit.register(_stop_all)


@dataclass
class _Process:
    """One service process, the leader of its own process group (``start_new_session``)."""

    name: str
    popen: subprocess.Popen
    log_path: Path
    log_offset: int = 0  # where this run's part of the log starts (a restart in the same workdir appends)

    @classmethod
    def launch(cls, name: str, command: list[str], env: dict[str, str], cwd: Path, log_path: Path) -> _Process:
        with open(log_path, "ab") as log:
            offset = log.tell()
            # A session of its own: a terminal's Ctrl-C does not reach it, and killpg reaches all it started.
            # spark-class execs java, so the JVM keeps the pid (and the group) of this child.
            popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     cwd=cwd, env=env, start_new_session=True)
        process = cls(name, popen, log_path, offset)
        _RUNNING[process.pid] = process
        return process

    def log(self) -> str:
        """This run's part of the log."""
        return _read_log(self.log_path, self.log_offset)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def failure(self, what: str, hints: dict[str, str] | None = None) -> ServiceNotAvailable:
        state = "is running" if self.running() else f"exited with code {self.popen.returncode}"
        # A JVM's log ends in stack traces; a known cause found anywhere in it is worth a line of its own.
        text = self.log()
        causes = [hint for needle, hint in (hints or {}).items() if needle in text]
        cause = "".join(f"\nLikely cause: {c}" for c in causes)
        return ServiceNotAvailable(f"{what} (the {self.name}, pid {self.pid}, {state}; log {self.log_path}).{cause}\n"
                                   f"{_log_tail(self.log_path, offset=self.log_offset)}")

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, grace: float = 20) -> None:
        """SIGTERM to the whole group (the JVM runs its shutdown hooks: a worker kills its executors), then
        SIGKILL to whatever of the group is left after ``grace`` seconds."""
        if self._group_alive():
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace
            # The leader is our child: reap it so it does not linger as a zombie that keeps the group "alive".
            while time.monotonic() < deadline:
                self.popen.poll()
                if not self._group_alive():
                    break
                time.sleep(0.1)
            else:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be refused
            pass
        _RUNNING.pop(self.pid, None)


# --- A minimal Thrift client: one call, to know that the metastore really serves ----------------------------
# The metastore starts listening only after its handler is built, but a listening port alone does not prove
# that Derby and the schema answer. get_all_databases reads the database table through DataNucleus, the way
# every Spark session's first call does, so a list with "default" in it means the metastore serves. The call
# is written by hand in Thrift's binary protocol (what Hive 2.3 speaks without SASL or framing), which saves a
# Thrift dependency and a JVM.

_T_STOP, _T_BOOL, _T_BYTE, _T_DOUBLE, _T_I16, _T_I32, _T_I64 = 0, 2, 3, 4, 6, 8, 10
_T_STRING, _T_STRUCT, _T_MAP, _T_SET, _T_LIST = 11, 12, 13, 14, 15
_CALL, _REPLY, _EXCEPTION = 1, 2, 3
_VERSION_1 = 0x80010000


def _read_exactly(stream: io.BufferedReader, count: int) -> bytes:
    data = stream.read(count)
    if data is None or len(data) != count:
        raise ConnectionError("the metastore closed the connection mid-reply")
    return data


def _read_value(stream: io.BufferedReader, kind: int) -> object:
    fixed = {_T_BOOL: "!?", _T_BYTE: "!b", _T_DOUBLE: "!d", _T_I16: "!h", _T_I32: "!i", _T_I64: "!q"}
    if kind in fixed:
        fmt = fixed[kind]
        return struct.unpack(fmt, _read_exactly(stream, struct.calcsize(fmt)))[0]
    if kind == _T_STRING:
        (length,) = struct.unpack("!i", _read_exactly(stream, 4))
        return _read_exactly(stream, length).decode("utf-8", "replace")
    if kind == _T_STRUCT:
        fields: dict[int, object] = {}
        while True:
            (field_kind,) = struct.unpack("!b", _read_exactly(stream, 1))
            if field_kind == _T_STOP:
                return fields
            (field_id,) = struct.unpack("!h", _read_exactly(stream, 2))
            fields[field_id] = _read_value(stream, field_kind)
    if kind in (_T_LIST, _T_SET):
        element_kind, size = struct.unpack("!bi", _read_exactly(stream, 5))
        return [_read_value(stream, element_kind) for _ in range(size)]
    if kind == _T_MAP:
        key_kind, value_kind, size = struct.unpack("!bbi", _read_exactly(stream, 6))
        return {_read_value(stream, key_kind): _read_value(stream, value_kind) for _ in range(size)}
    raise ConnectionError(f"unexpected Thrift type {kind} in the metastore's reply")


def metastore_databases(port: int, host: str = LOOPBACK, timeout: float = 10) -> list[str]:
    """The metastore's databases, by a ``get_all_databases`` Thrift call. Raises OSError if it cannot answer."""
    name = b"get_all_databases"
    # Message header (strict binary protocol), then the call's arguments: an empty struct.
    request = struct.pack("!Ii", _VERSION_1 | _CALL, len(name)) + name + struct.pack("!i", 1) + b"\x00"
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(request)
        with sock.makefile("rb") as stream:
            (header,) = struct.unpack("!I", _read_exactly(stream, 4))
            if header & 0xFFFF0000 != _VERSION_1:
                raise ConnectionError(f"not a Thrift binary-protocol reply (header {header:#x})")
            _read_value(stream, _T_STRING)  # the method's name
            _read_exactly(stream, 4)  # the sequence id
            body = _read_value(stream, _T_STRUCT)
    assert isinstance(body, dict)
    if header & 0xFF == _EXCEPTION:  # TApplicationException: 1 = message
        raise ConnectionError(f"the metastore refused the call: {body.get(1)}")
    if 0 in body:
        return list(body[0])  # type: ignore[arg-type]
    error = body.get(1)  # MetaException: 1 = message
    raise ConnectionError(f"the metastore failed: {error.get(1) if isinstance(error, dict) else body}")


@dataclass
class MetastoreService:
    """A Hive 2.3 metastore (Thrift) with an embedded Derby database in ``workdir``.

    Derby admits one JVM per database, so this is the only way several Spark applications (a cluster's, a
    test's own local session) can share one catalog at the same time. Its log is ``workdir/metastore.log``.
    """

    workdir: Path
    warehouse_dir: Path
    port: int
    process: _Process | None = field(default=None, repr=False)
    start_seconds: float = 0.0

    @property
    def uri(self) -> str:
        return f"thrift://{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "metastore.log"

    def spark_conf(self) -> dict[str, str]:
        """The settings a Spark application needs to use this metastore (with ``enableHiveSupport()``)."""
        return {
            "spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": self.uri,
            "spark.sql.warehouse.dir": self.warehouse_dir.as_uri(),
        }

    @classmethod
    def start(cls, workdir: Path, warehouse_dir: Path, port: int | None = None,
              timeout: float = 180) -> MetastoreService:
        workdir = Path(workdir).resolve()
        warehouse_dir = Path(warehouse_dir).resolve()
        conf_dir = workdir / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        warehouse_dir.mkdir(parents=True, exist_ok=True)
        # Hive 2.3 binds the wildcard address (it has no bind-host setting), so the port must be free there.
        port = port or free_port("0.0.0.0")
        if not port_is_free(port):
            # Checked here because the readiness check would otherwise get its answers from whatever metastore
            # already listens there, while this one fails to bind after building its handler.
            raise ServiceNotAvailable(f"Port {port} is in use; the Hive metastore cannot listen there.")
        service = cls(workdir, warehouse_dir, port)
        # spark-class gives a class that is not Spark's own no *_OPTS variable; it does read the conf dir's
        # java-opts file. hive.root.logger=console sends Hive's log4j2 output to stderr, i.e. to our log file,
        # instead of java.io.tmpdir/$USER/hive.log that every metastore on the machine would share.
        (conf_dir / "java-opts").write_text(" ".join([
            *METASTORE_JAVA_OPTIONS,
            f"-Dderby.system.home={workdir}",
            "-Dhive.root.logger=console",
            "-Dhive.log.level=INFO",
        ]) + "\n")
        derby_url = f"jdbc:derby:;databaseName={workdir / 'metastore_db'};create=true"
        command = [
            _spark_class(), "org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(service.port),
            # Hive's default asynchronous log4j2 loggers need the LMAX disruptor jar, which pyspark does not
            # ship: without this the metastore dies at start-up.
            "--hiveconf", "hive.async.log.enabled=false",
            "--hiveconf", f"javax.jdo.option.ConnectionURL={derby_url}",
            # An empty Derby database gets Hive's tables on first use; no schematool run, no version check.
            "--hiveconf", "datanucleus.schema.autoCreateAll=true",
            "--hiveconf", "hive.metastore.schema.verification=false",
            "--hiveconf", f"hive.metastore.warehouse.dir={warehouse_dir.as_uri()}",
        ]
        # SPARK_DRIVER_MEMORY is the heap spark-class gives a class that is not one of Spark's daemons.
        env = service_env(conf_dir, SPARK_DRIVER_MEMORY=METASTORE_MEMORY)
        began = time.monotonic()
        service.process = _Process.launch("Hive metastore", command, env, workdir, service.log_path)
        try:
            service._wait(began + timeout, timeout)
        except BaseException:
            service.stop()
            raise
        service.start_seconds = time.monotonic() - began
        return service

    def _hints(self) -> dict[str, str]:
        return {
            "XSDB6": f"another JVM has the Derby database {self.workdir / 'metastore_db'} open (a metastore "
                     "started on the same workdir, or one that was not stopped)",
            "BindException": f"port {self.port} was taken before the metastore could listen there",
            "com.lmax.disruptor": "Hive's asynchronous logging is on but pyspark ships no LMAX disruptor jar",
        }

    def _wait(self, deadline: float, timeout: float) -> None:
        assert self.process is not None
        # Hive logs this line after it has bound the port (the server socket is made first), so with it in
        # this run's log the listener on the port is this process and not some earlier metastore.
        bound_marker = f"Started the new metaserver on port [{self.port}]"
        bound = listening = False
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if not self.process.running():
                raise self.process.failure("The Hive metastore exited during start-up", self._hints())
            log = self.process.log() if not bound else ""
            if "XSDB6" in log:
                # Hive would retry opening Derby ten times, 2 s apart, before it exits: no use waiting.
                raise self.process.failure("The Hive metastore cannot open its Derby database", self._hints())
            bound = bound or bound_marker in log
            if bound:
                try:
                    # A TCP connect first: cheap, and it tells "not listening yet" from "listening, not serving".
                    with socket.create_connection((LOOPBACK, self.port), timeout=2):
                        listening = True
                    if "default" in metastore_databases(self.port, timeout=10):
                        return
                    last_error = ConnectionError("the metastore has no database 'default' yet")
                except OSError as error:  # ConnectionError is one
                    last_error = error
            time.sleep(0.25)
        stage = ("accepted connections but did not answer" if listening else
                 "bound its port but never accepted connections" if bound else "never bound its port")
        raise self.process.failure(f"The Hive metastore on port {self.port} {stage} within {timeout:.0f} s "
                                   f"(last error: {last_error!r})", self._hints())

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def __enter__(self) -> MetastoreService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class SparkCluster:
    """A Spark standalone master and one worker on loopback.

    Each application gets 1 core unless it sets ``spark.cores.max`` (``spark.deploy.defaultCores``), so two
    applications run side by side on a 2-core worker instead of the second waiting for the first. An
    application's ``spark.executor.memory`` (1g unless set) must fit what is left of the worker's ``memory``,
    or it waits for an executor that never comes. Executors log to ``workdir/work/<app>/<executor>/``.
    """

    workdir: Path
    port: int
    webui_port: int
    worker_webui_port: int
    cores: int
    memory: str
    master: _Process | None = field(default=None, repr=False)
    worker: _Process | None = field(default=None, repr=False)
    start_seconds: float = 0.0

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.webui_port}"

    def spark_conf(self, executor_memory: str = "512m", cores_max: int = 1) -> dict[str, str]:
        """The settings of a client-mode application on this cluster.

        The driver is put on loopback too: left alone, when the host name resolves to 127.0.0.1 Spark gives the
        executors the address of the first non-loopback interface instead. The executors' Python is named: a
        driver that names none makes them run ``python3`` from the worker's PATH; it must have the driver's
        Python minor version and the packages the job's Python code imports.
        """
        return {
            "spark.master": self.master_url,
            "spark.cores.max": str(cores_max),
            "spark.executor.memory": executor_memory,
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.pyspark.python": sys.executable,
        }

    @classmethod
    def start(cls, workdir: Path, cores: int = 2, memory: str = "1g", timeout: float = 120,
              default_app_cores: int = 1) -> SparkCluster:
        workdir = Path(workdir).resolve()
        conf_dir = workdir / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        (workdir / "work").mkdir(exist_ok=True)
        cluster = cls(workdir, *free_ports(3), cores, memory)
        daemon_options = " ".join(DAEMON_JAVA_OPTIONS)
        env = service_env(conf_dir, SPARK_DAEMON_MEMORY=DAEMON_MEMORY, SPARK_DAEMON_JAVA_OPTS=daemon_options,
                          SPARK_MASTER_OPTS=f"-Dspark.deploy.defaultCores={default_app_cores}")
        began = time.monotonic()
        try:
            cluster.master = _Process.launch(
                "Spark master",
                [_spark_class(), "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                 "--port", str(cluster.port), "--webui-port", str(cluster.webui_port)],
                env, workdir, workdir / "master.log")
            # The worker retries its registration on its own, so it can start before the master listens.
            cluster.worker = _Process.launch(
                "Spark worker",
                [_spark_class(), "org.apache.spark.deploy.worker.Worker", cluster.master_url,
                 "--cores", str(cores), "--memory", memory, "--work-dir", str(workdir / "work"),
                 "--host", LOOPBACK, "--webui-port", str(cluster.worker_webui_port)],
                env, workdir, workdir / "worker.log")
            cluster._wait(began + timeout, timeout)
        except BaseException:
            cluster.stop()
            raise
        cluster.start_seconds = time.monotonic() - began
        return cluster

    def state(self, timeout: float = 5) -> dict:
        """The master's state, as its web UI serves it at /json (workers, applications, cores, memory)."""
        # No proxy: an http_proxy in the environment would otherwise get the loopback request.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{self.webui_url}/json", timeout=timeout) as response:
            return json.load(response)

    def _wait(self, deadline: float, timeout: float) -> None:
        assert self.master is not None and self.worker is not None
        last: object = "the master's web UI never answered"
        while time.monotonic() < deadline:
            for process in (self.master, self.worker):
                if not process.running():
                    raise process.failure(f"The {process.name} exited during start-up", {
                        "BindException": "one of its ports was taken after it was picked; start again"})
            try:
                state = self.state()
            except (OSError, ValueError) as error:  # URLError is an OSError; a half-served page a ValueError
                last = error
            else:
                if state.get("url") != self.master_url:
                    raise ServiceNotAvailable(f"{self.webui_url} is the web UI of {state.get('url')}, "
                                              f"not of {self.master_url}.")
                workers = state.get("workers", [])
                if any(w.get("state") == "ALIVE" and w.get("cores") == self.cores for w in workers):
                    return
                last = f"workers: {[(w.get('host'), w.get('state'), w.get('cores')) for w in workers]}"
            time.sleep(0.25)
        raise ServiceNotAvailable(
            f"The Spark worker did not register with {self.master_url} within {timeout:.0f} s ({last}).\n"
            f"--- {self.master.log_path}:\n{self.master.log()[-2500:]}\n"
            f"--- {self.worker.log_path}:\n{self.worker.log()[-2500:]}")

    def stop(self) -> None:
        # The worker first: it kills its executors on SIGTERM, while the master is still there to be told.
        for process in (self.worker, self.master):
            if process is not None:
                process.stop()

    def __enter__(self) -> SparkCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
