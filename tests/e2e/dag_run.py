"""Run one DAG run for real with ``dag.test()``, as ``airflow dags test`` does, but with a stable run id.

    python -m tests.e2e.dag_run <dag_id> <logical date> [<conf JSON>]

``airflow dags test`` names its run after the current time, so running it again makes a different run. Here
the run is named after its logical date: running the same date again replaces the run and its task
instances under the same run id, as clearing the run in the UI does.

``run_dag`` runs it in a process of its own, forked from a server that has imported Airflow and the libraries
the provider uses once per test worker (``python -m tests.e2e.dag_run --serve``), as Airflow's own executors
fork their task processes: the run is the same, minus the three to five seconds of CPU each new interpreter
spends importing them, on a suite of many runs on two cores. The provider itself is imported in each run's own
process, after its environment is set (a failpoint is read when the provider is imported). A run that a test
kills or watches (``Pipeline.start``) is a plain ``python -m`` process.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from airflow.sdk import timezone
    from airflow.utils.cli import get_bagged_dag
    from airflow.utils.state import DagRunState

    dag_id, logical = argv[1], timezone.parse(argv[2])
    conf = json.loads(argv[3]) if len(argv) > 3 else None
    dag = get_bagged_dag(bundle_names=None, dag_id=dag_id)
    run = dag.test(logical_date=logical, run_after=logical, run_conf=conf)
    print(f"dag_run {run.run_id} {run.state}")
    return 0 if run.state == DagRunState.SUCCESS else 1


# What the server imports before it forks: Airflow, and what the provider's modules import from outside it. None
# of them keeps anything of the environment a run is given that differs between runs (connections, failpoints,
# the configuration file are all read at their use, or by the provider, imported after the fork).
_PRELOAD = ("airflow.sdk", "airflow.utils.cli", "airflow.utils.state", "airflow.models",
            "airflow.sdk.execution_time.task_runner", "airflow.providers.apache.spark.operators.spark_submit",
            "airflow.providers.mysql.hooks.mysql", "pyarrow", "pyarrow.parquet", "pymysql",
            "pymysqlreplication", "pydantic", "yaml", "fsspec", "psutil")


def _build_execution_api() -> None:
    """Build the in-process Execution API that ``dag.test()`` runs its tasks through, once, before the forks.

    Its app generates a router per API version (cadwyn) at its first request: 8 to 10 s of CPU here, which every
    run paid again before its first task started. Built here, every forked run has it. Nothing of it depends on a
    run: the routes and schemas only; the thread and event loop that serve it are started in the run's process
    (threads do not survive a fork), and no database connection is opened. Where this Airflow builds it otherwise
    (an older one), the run builds its own as before."""
    try:
        from airflow.sdk.execution_time.supervisor import in_process_api_server

        app = in_process_api_server().app
    except (ImportError, AttributeError):
        return
    initialize = getattr(app, "_cadwyn_initialize", None)
    if initialize is not None and not getattr(app, "_cadwyn_initialized", True):
        initialize()


def _serve() -> None:
    """Read one request a line on stdin (argv, env, cwd, output file), fork a run for it, and answer with its
    process id, then its exit code."""
    import importlib

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional provider missing: the run imports what it needs itself
            pass
    _build_execution_api()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)


def _child(request: dict) -> None:
    code = 1
    try:
        os.setpgid(0, 0)  # a group of its own, as a killed test's timeout kills it with what it started
        out = os.open(request["output"], os.O_WRONLY | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()
        import random

        random.seed()  # not the server's sequence, shared by every run it forked
        sys.argv = request["argv"]
        code = main(request["argv"])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class _Server:
    """The fork server of this test process, started at its first run."""

    def __init__(self, cwd: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "tests.e2e.dag_run", "--serve"], cwd=cwd,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._lock = threading.Lock()
        self._answer(timeout=300)  # ready
        atexit.register(self.close)

    def _answer(self, timeout: float) -> dict:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"the DAG run server did not answer within {timeout} s")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the DAG run server exited with {self.process.wait()}")
        return json.loads(line)

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str]:
        assert self.process.stdin is not None
        with self._lock, tempfile.NamedTemporaryFile("w+", prefix="dag-run-", suffix=".log") as output:
            self.process.stdin.write(json.dumps({"argv": argv, "env": dict(env), "cwd": str(cwd),
                                                 "output": output.name}) + "\n")
            pid = self._answer(timeout=60)["pid"]
            try:
                code = self._answer(timeout=timeout)["code"]
            except TimeoutError:
                os.killpg(pid, signal.SIGKILL)
                self._answer(timeout=60)
                raise subprocess.TimeoutExpired(argv, timeout, Path(output.name).read_text(errors="replace")) from None
            return code, Path(output.name).read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=30)


_server: _Server | None = None


def run_dag(dag_id: str, logical_date: str, *conf: str, env: dict[str, str], cwd: Path,
            timeout: float = 900) -> tuple[int, str]:
    """One run of ``dag_id`` in a process of its own with ``env``; returns its exit code and its output."""
    global _server
    if _server is None or _server.process.poll() is not None:
        _server = _Server(cwd)
    code, output = _server.run(["dag_run", dag_id, logical_date, *conf], env, cwd, timeout)
    kept = os.environ.get("CDC_TEST_RUN_LOGS")  # a directory to keep every run's whole output in, for a person
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        name = f"{time.strftime('%H%M%S')}-{dag_id}-{logical_date.replace(':', '')}-{code}.log"
        (Path(kept) / name).write_text(output)
    return code, output


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        _serve()
    else:
        sys.exit(main(sys.argv))
