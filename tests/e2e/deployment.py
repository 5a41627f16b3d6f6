"""A real Airflow deployment for end-to-end tests: api-server, dag-processor and scheduler as separate processes.

``dag.test()`` runs every task in one process, with no scheduler, no executor and no Execution API. This module
runs Airflow as it is deployed instead, so tests see what production sees: the scheduler creating runs from the
timetable, the LocalExecutor starting each task in its own process, tasks talking to the api-server over the
Execution API, clearing and backfills, and what survives a scheduler crash.

The metadata DB is SQLite in WAL mode (see ``_enable_wal``); Airflow 3 accepts the LocalExecutor on SQLite.

Use it from a session-scoped fixture, for example::

    @pytest.fixture(scope="session")
    def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowDeployment]:
        home = tmp_path_factory.mktemp("airflow")
        dags = home / "dags"
        dags.mkdir()
        deployment = AirflowDeployment.start(home, dags, env={"AIRFLOW_CONN_SOURCE": json.dumps({...})})
        try:
            yield deployment
        finally:
            deployment.stop()

    def test_runs(airflow: AirflowDeployment) -> None:
        airflow.api.wait_for_dag("example")
        airflow.api.unpause("example")
        run_id = airflow.api.trigger("example", conf={"full": True})
        assert airflow.api.wait_for_run("example", run_id)["state"] == "success"

Each process logs to ``home/logs-<name>.txt``; task logs are under ``home/logs`` and readable through
``api.task_log``. Every failure to start or to reach a state raises with the tail of the process logs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import httpx
import psutil

# The processes of a deployment, in the order they are started (stop() ends the api-server last).
PROCESSES = ("api-server", "dag-processor", "scheduler")

# Set in the environment of every process of a deployment, and so inherited by everything they start: a last
# way for stop() to find what a task left running (see _marked).
MARKER = "CDC_E2E_AIRFLOW_DEPLOYMENT"

# Settings that make the deployment quick to react. Values are strings, as environment variables are. Each
# can be overridden through ``env``.
FAST_SETTINGS: dict[str, str] = {
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    # Two cores: a few tasks at once is all the machine can run without starving the scheduler.
    "AIRFLOW__CORE__PARALLELISM": "4",
    # The dag-processor writes a changed DAG at most this often (default 30 s), and the scheduler and the
    # api-server revalidate their cached copy on the same period: a DAG file edited by a test shows soon.
    "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "1",
    # How often the dag-processor lists the DAGs folder for new files (default 300 s) and checks whether that
    # is due (default 5 s): a new file is parsed at once. A known file is not parsed again within a test (the
    # default is every 30 s): the tests write their DAG files before the deployment starts, and a parse costs a
    # second of CPU the tests' Spark jobs need. Integers: Airflow reads them with getint.
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
    "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "1",
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "1800",
    # The scheduler loops without pause while it has work and sleeps this long when it has none (default 1 s).
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
    # Job heartbeats (default 5 s). A heartbeat is a DB write, so not every loop on SQLite.
    "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
    "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
    # A scheduler silent this long is dead (default 30 s): the health endpoint says so, and another scheduler
    # takes over its task instances, but only when it next looks for orphans (default every 300 s). Together
    # they bound how long a run waits after the scheduler is killed and started again.
    "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
    "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "10",
    "AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD": "10",
    # A running task whose supervisor stopped heartbeating (every 5 s) is failed after this (default 300 s).
    # Not lower: a Spark merge loading both cores must not be mistaken for a dead task.
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
    # A task stuck in "queued" (its executor died before starting it) is retried after this (default 600 s).
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "60",
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "10",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
}


# Tries of a request that reads, or sets a DAG's pause, when the api-server's SQLite was locked too long.
_TRIES = 4
# How often a wait for a run or a backfill looks again. Each look is a request the api-server answers on the same
# two cores as the runs it waits for; a run lasts tens of seconds, so a second later costs nothing.
_POLL = 1.0


class DeploymentError(RuntimeError):
    """The deployment did not start, or did not reach the state a test waited for."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _airflow_command() -> list[str]:
    """The ``airflow`` of the interpreter running the tests, so the deployment runs the same installation."""
    script = Path(sys.executable).with_name("airflow")
    return [str(script)] if script.exists() else [sys.executable, "-m", "airflow"]


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"--- {path.name}: (no file)"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"--- {path.name} (last {len(text)} lines):\n" + "\n".join(text)


def _enable_wal(db: Path) -> str:
    """Put the SQLite DB in WAL mode, and return the journal mode it is in.

    Airflow sets no journal mode, so SQLite's default "delete" applies: a writer locks out every reader, and
    with the scheduler, the dag-processor, the api-server and each task process all on one file that means
    "database is locked" errors under load. In WAL mode readers never wait for the writer. The mode is stored
    in the DB file, so setting it once, before any Airflow process opens the file, is enough.
    """
    with contextlib.closing(sqlite3.connect(db)) as connection:
        return connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]


def _descendants(pids: Iterable[int]) -> list[psutil.Process]:
    """Every process under ``pids`` (by parent), whatever its process group."""
    found: dict[int, psutil.Process] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(pid).children(recursive=True):
                found[child.pid] = child
    return list(found.values())


def _marked(marker: str) -> list[psutil.Process]:
    """Processes started with ``MARKER=marker`` in their environment, except this one.

    A safety net for what ``_descendants`` cannot see any more: the children of an orphaned task process
    whose own process has exited (a spark-submit JVM, say). It misses Airflow's own processes: those that
    call setproctitle (api-server, workers, task processes) overwrite the memory /proc/<pid>/environ shows.
    """
    needle = f"{MARKER}={marker}".encode()
    found = []
    for pid in psutil.pids():
        if pid == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(psutil.Process(pid))
    return found


def _kill(processes: Iterable[psutil.Process]) -> None:
    """SIGKILL each process and the process group it leads (a task process leads one, holding its children)."""
    for process in processes:
        with contextlib.suppress(psutil.Error, OSError):
            if process.is_running():  # psutil checks the pid was not reused since the snapshot
                if os.getpgid(process.pid) == process.pid != os.getpgrp():
                    os.killpg(process.pid, signal.SIGKILL)
                process.kill()


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to a process group; False if the group is gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def _group_alive(pgid: int) -> bool:
    return _signal_group(pgid, 0)  # signal 0 checks the group exists without signalling it


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _stop_groups(processes: list[subprocess.Popen], grace: float) -> None:
    """SIGTERM the process group of each process, SIGKILL what is left after ``grace`` s; reap the leaders."""
    for process in processes:
        _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        # Reap each leader as it exits: a group whose leader is an unreaped zombie still counts as alive.
        if all(p.poll() is not None and not _group_alive(p.pid) for p in processes):
            break
        time.sleep(0.2)
    for process in processes:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()


def _wait_gone(processes: Iterable[psutil.Process], timeout: float = 5) -> None:
    """Wait until the processes are gone, or zombies: init reaps those, re-parented to it, when it will."""
    deadline = time.monotonic() + timeout
    for process in processes:
        with contextlib.suppress(psutil.Error):
            while process.is_running() and process.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
                time.sleep(0.1)


class AirflowApi:
    """A client of the public REST API (``/api/v2``) of an api-server, as an admin.

    The token comes from ``GET /auth/token``, which the simple auth manager answers without credentials when
    ``[core] simple_auth_manager_all_admins`` is on. Errors raise ``httpx.HTTPStatusError`` with the body.
    """

    def __init__(self, base_url: str, *, diagnostics: Any = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=30)
        self._token: str | None = None
        # A callable returning text to add to timeout errors (the deployment's log tails), if any.
        self._diagnostics = diagnostics

    def close(self) -> None:
        self._http.close()

    def token(self) -> str:
        response = self._http.get("/auth/token")
        self._raise_for_status(response)
        return response.json()["access_token"]

    def health(self) -> dict[str, Any]:
        """``/api/v2/monitor/health``: metadatabase, scheduler, triggerer, dag_processor, each with a status."""
        response = self._http.get("/api/v2/monitor/health")
        self._raise_for_status(response)
        return response.json()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A request to ``/api/v2`` + ``path``, authenticated; raises on any status but 2xx."""
        if self._token is None:
            self._token = self.token()
        extra_headers, renewed = kwargs.pop("headers", {}), False
        for attempt in range(_TRIES):
            headers = {"Authorization": f"Bearer {self._token}", **extra_headers}
            response = self._http.request(method, f"/api/v2{path}", headers=headers, **kwargs)
            if response.status_code == 401 and not renewed:
                self._token, renewed = self.token(), True  # expired (a day by default): a new one, once
                continue
            if (response.status_code == 500 and method in ("GET", "PATCH") and "Database error" in response.text
                    and attempt < _TRIES - 1):
                # SQLite was locked past its busy timeout by the scheduler and the tasks' writes (the machine's
                # two cores loaded): the request changed nothing, and the same request again is the same.
                time.sleep(1)
                continue
            break
        self._raise_for_status(response)
        return response

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params).json()

    def _paged(self, path: str, key: str, **params: Any) -> list[dict[str, Any]]:
        # Pages are capped by [api] maximum_page_limit (100 by default).
        items: list[dict[str, Any]] = []
        while True:
            page = self.get(path, limit=100, offset=len(items), **params)
            items.extend(page[key])
            if not page[key] or len(items) >= page["total_entries"]:
                return items

    @staticmethod
    def _raise_for_status(response: httpx.Response) -> None:
        if response.is_error:
            raise httpx.HTTPStatusError(
                f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text}",
                request=response.request, response=response,
            )

    def _timeout_error(self, message: str) -> DeploymentError:
        extra = self._diagnostics() if self._diagnostics else ""
        return DeploymentError(f"{message}\n{extra}".rstrip())

    # DAGs

    def dag(self, dag_id: str) -> dict[str, Any]:
        return self.get(f"/dags/{dag_id}")

    def import_errors(self) -> list[dict[str, Any]]:
        return self._paged("/importErrors", "import_errors")

    def wait_for_dag(self, dag_id: str, timeout: float = 60) -> dict[str, Any]:
        """Wait until the dag-processor has parsed and serialized ``dag_id``; return the DAG.

        ``GET /dags/{dag_id}`` answers 404 until both the DAG row and its serialized version exist.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.dag(dag_id)
            except httpx.HTTPStatusError as error:
                if error.response.status_code != 404:
                    raise
            if time.monotonic() > deadline:
                errors = "\n".join(f"{e['filename']}: {e['stack_trace']}" for e in self.import_errors())
                raise self._timeout_error(
                    f"DAG {dag_id} was not parsed within {timeout} s. Import errors:\n{errors or '(none)'}"
                )
            time.sleep(0.5)

    def pause(self, dag_id: str) -> None:
        self.request("PATCH", f"/dags/{dag_id}", json={"is_paused": True})

    def unpause(self, dag_id: str) -> None:
        # New DAGs are paused ([core] dags_are_paused_at_creation): nothing is scheduled before this.
        self.request("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    # Runs

    def trigger(
        self, dag_id: str, conf: Mapping[str, Any] | None = None, logical_date: dt.datetime | str | None = None,
        run_id: str | None = None,
    ) -> str:
        """Trigger a manual run; return its run id.

        ``logical_date`` must be timezone-aware. None gives a run with no logical date (Airflow 3's default for
        manual runs); the body must still carry the key, which the API requires even when null.
        """
        if isinstance(logical_date, dt.datetime):
            logical_date = logical_date.isoformat()
        body: dict[str, Any] = {"logical_date": logical_date, "conf": dict(conf or {})}
        if run_id is not None:
            body["dag_run_id"] = run_id
        return self.request("POST", f"/dags/{dag_id}/dagRuns", json=body).json()["dag_run_id"]

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.get(f"/dags/{dag_id}/dagRuns/{run_id}")

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of ``dag_id``, oldest first (by ``run_after``)."""
        return self._paged(f"/dags/{dag_id}/dagRuns", "dag_runs", order_by="run_after")

    def wait_for_run(
        self, dag_id: str, run_id: str, states: Iterable[str] = ("success", "failed"), timeout: float = 120,
    ) -> dict[str, Any]:
        """Wait until the run is in one of ``states``; return it. On timeout, the error shows its tasks."""
        states = tuple(states)
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(dag_id, run_id)
            if run["state"] in states:
                return run
            if time.monotonic() > deadline:
                tasks = ", ".join(
                    f"{ti['task_id']}[{ti['map_index']}]={ti['state']} (try {ti['try_number']})"
                    for ti in self.task_instances(dag_id, run_id)
                )
                raise self._timeout_error(
                    f"Run {dag_id}/{run_id} is {run['state']}, not in {states}, after {timeout} s. "
                    f"Tasks: {tasks or '(none)'}"
                )
            time.sleep(_POLL)

    def clear_run(self, dag_id: str, run_id: str, only_failed: bool = False) -> dict[str, Any]:
        """Clear a run so that it runs again, as the UI's "Clear" does; return the run (then queued).

        The endpoint's ``dry_run`` defaults to true (it only lists what would be cleared): it is sent false.
        """
        body = {"dry_run": False, "only_failed": only_failed}
        return self.request("POST", f"/dags/{dag_id}/dagRuns/{run_id}/clear", json=body).json()

    # Backfills (created with AirflowDeployment.backfill)

    def backfills(self, dag_id: str) -> list[dict[str, Any]]:
        """The backfills of ``dag_id``; ``completed_at`` is set once the scheduler has seen all their runs end."""
        return self._paged("/backfills", "backfills", dag_id=dag_id)

    def wait_for_backfills(self, dag_id: str, timeout: float = 300, complete: bool = True) -> list[dict[str, Any]]:
        """Wait until the backfills of ``dag_id`` are done; return the DAG's backfill runs, oldest first.

        ``complete=True`` waits until the scheduler marked every backfill complete, which it checks only every
        30 s (hard-coded): a DAG can have one backfill not yet complete, and another ``backfill create`` fails
        with AlreadyRunningBackfill until then. ``complete=False`` only waits until every backfill run is over:
        enough to check what the runs did, up to 30 s sooner.
        """
        deadline = time.monotonic() + timeout
        while True:
            runs = [r for r in self.runs(dag_id) if r["run_type"] == "backfill"]
            if complete:
                pending = [f"backfill {b['id']}" for b in self.backfills(dag_id) if b["completed_at"] is None]
            else:
                pending = [r["dag_run_id"] for r in runs if r["state"] not in ("success", "failed")]
            if not pending:
                return runs
            if time.monotonic() > deadline:
                states = ", ".join(f"{r['dag_run_id']}={r['state']}" for r in runs)
                raise self._timeout_error(
                    f"{', '.join(pending)} of {dag_id} not done after {timeout} s. Runs: {states or '(none)'}"
                )
            time.sleep(_POLL)

    # Task instances

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self._paged(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", "task_instances")

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        """The log of one try of a task, one line per event.

        The API returns structured entries (``event``, ``timestamp``, ``level``, ``logger`` and the event's own
        fields); each becomes ``timestamp level event key=value...``, close to what the UI shows.
        """
        response = self.get(
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            map_index=map_index, full_content=True,
        )
        lines = []
        for entry in response["content"]:
            if not isinstance(entry, dict):
                lines.append(str(entry))
                continue
            entry = dict(entry)
            head = [str(entry.pop(key)) for key in ("timestamp", "level", "event") if entry.get(key) is not None]
            entry.pop("logger", None)
            lines.append(" ".join(head + [f"{key}={value}" for key, value in entry.items()]))
        return "\n".join(lines)

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        """The value of an XCom as stored: JSON values come back as themselves (a dict, a list, a number)."""
        entry = self.get(
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}", map_index=map_index
        )
        return entry["value"]


class AirflowDeployment:
    """A running api-server, dag-processor and scheduler (LocalExecutor) on one SQLite metadata DB.

    ``env`` is the environment of every process, and of the ``airflow`` commands of ``cli``/``backfill``; a
    test can run other ``airflow`` commands with it against the same DB. ``api`` is a REST client on the
    api-server. Always ``stop()`` it: it leaves no process behind.
    """

    def __init__(self, home: Path, dags_folder: Path, env: dict[str, str], port: int) -> None:
        self.home = home
        self.dags_folder = dags_folder
        self.env = env
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.processes: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, IO[bytes]] = {}
        # Task processes left running by kill_scheduler(), for stop() to end.
        self._orphans: list[psutil.Process] = []
        self.api = AirflowApi(self.url, diagnostics=self.log_tails)

    @classmethod
    def start(
        cls, home: Path, dags_folder: Path, env: Mapping[str, str] | None = None, timeout: float = 180,
    ) -> AirflowDeployment:
        """Migrate a fresh metadata DB in ``home``, start the three processes and wait until they are healthy."""
        home, dags_folder = Path(home).resolve(), Path(dags_folder).resolve()
        home.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        deployment = cls(home, dags_folder, cls._environment(home, dags_folder, port, env or {}), port)
        try:
            deployment.cli("db", "migrate", timeout=timeout)
            mode = _enable_wal(home / "airflow.db")
            if mode != "wal":
                raise DeploymentError(f"SQLite refused WAL mode (journal_mode={mode}) for {home / 'airflow.db'}")
            deadline = time.monotonic() + timeout
            for name in PROCESSES:
                deployment._launch(name)
            deployment._wait_healthy(deadline, since=None)
        except BaseException:
            deployment.stop()
            raise
        return deployment

    @staticmethod
    def _environment(home: Path, dags_folder: Path, port: int, extra: Mapping[str, str]) -> dict[str, str]:
        # Airflow settings inherited from the test process (tests/conftest.py sets its own AIRFLOW_HOME and DB
        # for in-process tests) must not leak in: the deployment is configured here and by ``extra`` only.
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "_AIRFLOW"))}
        return {
            **base,
            **FAST_SETTINGS,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            # Four slashes: an absolute path. Airflow refuses a relative one.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # Where task processes reach the Execution API (default http://localhost:8080/execution/).
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            # The scheduler signs each task's token and the api-server checks it: one secret for all, or every
            # task fails with 403. Left unset, each process would make up its own.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            # GET /auth/token then hands out an admin token with no credentials: the REST client needs no user.
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            MARKER: uuid.uuid4().hex,
            **extra,
        }

    def _command(self, name: str) -> list[str]:
        if name == "api-server":
            return [*_airflow_command(), "api-server", "-H", "127.0.0.1", "-p", str(self.port), "-w", "1"]
        if name == "scheduler":
            # Not its log server: it listens on a fixed port (8793, on every interface), so two deployments
            # (or a test run beside a developer's Airflow) would collide, and the api-server reads the task logs
            # from their files under ``home/logs`` anyway, on this same machine.
            return [*_airflow_command(), "scheduler", "--skip-serve-logs"]
        return [*_airflow_command(), name]

    def log_path(self, name: str) -> Path:
        return self.home / f"logs-{name}.txt"

    def _launch(self, name: str) -> None:
        # Appended to: a scheduler started again writes after what the killed one wrote.
        log = self._logs.get(name) or open(self.log_path(name), "ab")  # closed in stop()
        self._logs[name] = log
        log.write(f"=== {dt.datetime.now().isoformat()} starting {name}\n".encode())
        log.flush()
        self.processes[name] = subprocess.Popen(
            self._command(name), env=self.env, cwd=self.home, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT,
            # A session (and so a process group) of its own: one killpg reaches the process and every child it
            # forks (LocalExecutor workers, task supervisors, parsing processes), and a Ctrl-C meant for pytest
            # does not hit it.
            start_new_session=True,
        )

    def _wait_healthy(self, deadline: float, since: dt.datetime | None) -> None:
        """Wait until the api-server answers and reports the scheduler and the dag-processor healthy.

        ``since``: the scheduler's latest heartbeat must be later, so that a scheduler just started again is
        not mistaken for the killed one, whose last heartbeat can still look recent.
        """
        health: dict[str, Any] | str = "(no answer yet)"
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise DeploymentError(
                        f"airflow {name} exited with code {process.returncode} while starting.\n{self.log_tails()}"
                    )
            try:
                health = self.api.health()
            except (httpx.TransportError, httpx.HTTPStatusError) as error:
                health = f"(no answer: {error!r})"
            else:
                scheduler, processor = health["scheduler"], health["dag_processor"]
                heartbeat = scheduler.get("latest_scheduler_heartbeat")
                if (
                    health["metadatabase"]["status"] == "healthy"
                    and scheduler["status"] == "healthy"
                    and (processor or {}).get("status") == "healthy"
                    and (since is None or (heartbeat and dt.datetime.fromisoformat(heartbeat) > since))
                ):
                    return
            time.sleep(0.5)
        raise DeploymentError(f"Airflow was not healthy in time. Last health: {health}\n{self.log_tails()}")

    def log_tails(self, lines: int = 40) -> str:
        """The end of each process's log, for error messages."""
        return "\n".join(_tail(self.log_path(name), lines) for name in PROCESSES)

    # The airflow CLI against this deployment

    def cli(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ``airflow *args`` with the deployment's environment; stdout and stderr together in ``stdout``."""
        result = subprocess.run(
            [*_airflow_command(), *args], env=self.env, cwd=self.home, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
        )
        if check and result.returncode != 0:
            raise DeploymentError(f"airflow {' '.join(args)} exited with code {result.returncode}:\n{result.stdout}")
        return result

    def backfill(
        self, dag_id: str, from_date: dt.datetime | dt.date | str, to_date: dt.datetime | dt.date | str,
        reprocess: str = "none", max_active_runs: int | None = None, check: bool = True,
    ) -> str:
        """Create a backfill with ``airflow backfill create``; return its output.

        The command only writes the backfill and its runs to the DB and returns; the scheduler runs them. Both
        dates are inclusive, and a date is a schedule point (a logical date), not a data interval. ``reprocess``
        says what to do with a date that already has a run: none (leave it), completed or failed (run it
        again if it ended so). Wait with ``api.wait_for_backfills``, which returns the runs (``run_type``
        "backfill"): a DAG can have only one backfill not yet complete, and another ``backfill create`` fails
        with AlreadyRunningBackfill until then, even when the first created no new run. The command exits with
        1 when the range holds no schedule point at all; ``check=False`` returns the output instead of raising.
        """
        args = [
            "backfill", "create", "--dag-id", dag_id, "--from-date", _date_arg(from_date),
            "--to-date", _date_arg(to_date), "--reprocess-behavior", reprocess,
        ]
        if max_active_runs is not None:
            args += ["--max-active-runs", str(max_active_runs)]
        locked = False
        for _ in range(15):
            result = self.cli(*args, check=False)
            # SQLite admits one writer: a busy scheduler (a run of many tasks, on a loaded machine) can hold the DB
            # longer than the command waits, several times over. Its transaction was rolled back, so it is tried
            # again, for up to about a minute.
            if result.returncode == 0 or "database is locked" not in result.stdout:
                break
            locked = True
            time.sleep(4)
        if locked:
            self._restart_scheduler_if_it_dies()
        if check and result.returncode != 0:
            raise DeploymentError(f"airflow {' '.join(args)} exited with code {result.returncode}:\n{result.stdout}")
        return result.stdout

    def _restart_scheduler_if_it_dies(self, watch: float = 10) -> None:
        """Start the scheduler again if it exits within ``watch`` s, as systemd or Kubernetes would.

        On a lock error, ``backfill create`` deletes the runs it had already written (``_cleanup_partial_backfill``);
        a scheduler that had begun scheduling one of them dies on it (``ObjectDeletedError`` in
        ``_schedule_all_dag_runs``), a loop or so later. Its supervisor would restart it in a deployment.
        """
        process = self.processes.get("scheduler")
        deadline = time.monotonic() + watch
        while process is not None and time.monotonic() < deadline:
            if process.poll() is not None:
                log = self._logs["scheduler"]
                log.write(f"=== the scheduler exited ({process.returncode}): started again\n".encode())
                log.flush()
                self.processes.pop("scheduler")
                self.start_scheduler()
                return
            time.sleep(0.5)

    # Crashes

    def kill_scheduler(self, with_tasks: bool = False) -> None:
        """SIGKILL the scheduler's process group, as a crash would: no shutdown, no state written.

        The group holds the scheduler, its LocalExecutor workers and the task supervisors. The task processes
        are not in it: each supervisor puts its task in a process group of its own, so they keep running,
        orphaned, as they would on a host where only the scheduler died. Such a task runs on until it next
        talks to its dead supervisor (a log line, an XCom, its final state), which ends it; meanwhile the new
        scheduler may have started the task again. ``stop()`` ends the orphans that are left.
        ``with_tasks=True`` kills them too, as the loss of the whole machine or container would.
        """
        process = self.processes.pop("scheduler")
        tasks = [p for p in _descendants([process.pid]) if _pgid(p.pid) not in (None, process.pid)]
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()
        if with_tasks:
            _kill(tasks)
        else:
            self._orphans.extend(tasks)

    def start_scheduler(self, timeout: float = 60) -> None:
        """Start the scheduler again and wait until it heartbeats."""
        if "scheduler" in self.processes:
            raise DeploymentError("The scheduler is already running")
        since = dt.datetime.now(dt.UTC)
        self._launch("scheduler")
        self._wait_healthy(time.monotonic() + timeout, since=since)

    # Shutdown

    def stop(self, grace: float = 10) -> None:
        """Stop every process of the deployment, leaving none behind. Safe to call twice, or after a failed start.

        The scheduler and the dag-processor first, the api-server last: on SIGTERM the scheduler waits for its
        running tasks, and they need the api-server (the Execution API) to report how they ended. Each group
        gets SIGTERM, then SIGKILL after ``grace`` s; then whatever tasks are left get SIGKILL.
        """
        # Known before signalling, while the parent links still lead to them: the task processes (in groups of
        # their own), and the orphans of a killed scheduler with what they started.
        leaders = [p.pid for p in self.processes.values()] + [o.pid for o in self._orphans]
        leftovers = _descendants(leaders) + self._orphans
        for names in (("scheduler", "dag-processor"), ("api-server",)):
            if names == ("api-server",):
                # Done with the REST API: close the client's keep-alive connection before its server goes.
                self.api.close()
            processes = [self.processes.pop(name) for name in names if name in self.processes]
            leftovers += _descendants([p.pid for p in processes])  # any task started since the first look
            _stop_groups(processes, grace)
        _kill(leftovers)
        _kill(_marked(self.env[MARKER]))
        _wait_gone(leftovers)
        self._orphans.clear()
        for log in self._logs.values():
            log.close()
        self._logs.clear()

    def __enter__(self) -> AirflowDeployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _date_arg(value: dt.datetime | dt.date | str) -> str:
    return value.isoformat() if isinstance(value, (dt.date, dt.datetime)) else value
