"""A table lock held by a real task process on this host: killed, it is taken over at once; alive, it is not.

Real processes, the real /proc and the real lock files: a child process takes the lock as the plan task does and
keeps it leased as every task does, and is killed with SIGKILL, as a lost task would be.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from airflow_cdc_provider.core.ledger import Ledger, RunRef, TableBusy
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.hooks.processes import look
from airflow_cdc_provider.operators.lease import task_owner
from airflow_cdc_provider.storage import WorkStore

HOLDER = RunRef("cdc", "manual__2026-03-01T10:00:00+00:00")
NEXT = RunRef("cdc", "manual__2026-03-01T10:05:00+00:00")
ROOT = Path(__file__).resolve().parents[2]



def _ledger(work_dir, **kwargs) -> Ledger:
    """The ledger of the Hive table ods.t in ``work_dir``, as the holder process below keeps it."""
    return Ledger(TableDir(work_dir=str(work_dir), hive_table="ods.t"), WorkStore(), **kwargs)


pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")

# Takes the lock through the plan task's path (``task_owner``, ``acquire`` with ``look``), holds it leased as a
# task does, and says so; with an argument, first starts a child that outlives it (as a spark-submit would).
HOLD = textwrap.dedent("""
    import datetime as dt, logging, subprocess, sys, time
    from airflow_cdc_provider.core.ledger import Ledger, RunRef
    from airflow_cdc_provider.core.workdir import TableDir
    from airflow_cdc_provider.hooks.processes import look
    from airflow_cdc_provider.storage import WorkStore
    from airflow_cdc_provider.operators.lease import leased, task_owner

    child = subprocess.Popen(["sleep", "600"]).pid if sys.argv[2:] else 0
    ledger, owner = Ledger(TableDir(work_dir=sys.argv[1], hive_table="ods.t"), WorkStore()), task_owner(None, "holder")
    run = RunRef("cdc", "manual__2026-03-01T10:00:00+00:00")
    ledger.acquire(run, lambda holder: True, dt.datetime.now(dt.timezone.utc), dt.timedelta(seconds=600), owner, look)
    with leased([ledger], run, 600, owner, logging.getLogger("lease")):
        print(f"locked {child}", flush=True)
        time.sleep(600)
""")


def hold(ledger_dir: Path, *args: str) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # In a session (and process group) of its own, as a task process under a supervisor: in pytest's group, a
    # process another test worker starts a moment later would rightly count as one the holder may have started.
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(ledger_dir), *args], stdout=subprocess.PIPE, text=True,
                              env=env, start_new_session=True)
    line = holder.stdout.readline()
    assert line.startswith("locked"), (line, holder.poll())
    return holder, int(line.split()[1])


def take(ledger: Ledger) -> None:
    """The next run's plan task, on this host, while the holder's run still looks running in Airflow."""
    ledger.acquire(NEXT, lambda run: True, dt.datetime.now(dt.UTC), dt.timedelta(seconds=600),
                   task_owner(None, "next"), look)


def test_a_killed_holder_on_this_host_is_taken_over_at_once_and_a_live_one_is_refused(tmp_path):
    messages = []
    ledger = _ledger(tmp_path, log=messages.append)
    holder, _ = hold(tmp_path)
    try:
        owner = ledger.lock().owner
        assert (ledger.holder(), owner.pid, owner.task) == (HOLDER, holder.pid, "holder")
        assert owner.started is not None and owner.boot_id and owner.pid_ns, owner
        with pytest.raises(TableBusy, match=f"looks alive: task holder \\(process {holder.pid} on "):
            take(ledger)
        assert ledger.holder() == HOLDER and not messages

        holder.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, holder.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: a zombie is gone as well
        take(ledger)
    finally:
        holder.kill()
        holder.wait()
    assert ledger.holder() == NEXT
    assert messages == [(f"Took over the lock left by {HOLDER}: its process {holder.pid} on {owner.host} (task "
                         "holder) is gone: no process has that id on this host now (the same kernel boot and pid "
                         "namespace), and none it started is left.")]


def test_a_killed_holder_whose_child_still_runs_is_refused_until_the_child_ends(tmp_path):
    messages = []
    ledger = _ledger(tmp_path, log=messages.append)
    holder, child = hold(tmp_path, "with a child")
    try:
        holder.kill()
        holder.wait()
        with pytest.raises(TableBusy, match="looks alive"):
            take(ledger)
        kill(child)
        take(ledger)
    finally:
        holder.kill()
        holder.wait()
        kill(child)
    assert ledger.holder() == NEXT and "is gone: no process has that id" in messages[0]


def test_a_killed_holder_whose_group_id_went_to_a_new_process_is_taken_over_at_once(tmp_path):
    """Process ids wrap (32,768 by default), and a group's id is handed out again once the group has ended: a
    new session leader with the dead holder's group id is not a process the holder started."""
    why_not = ""
    for attempt in range(3):  # another process of the host may take the freed id first: then a new holder
        messages: list[str] = []
        ledger = _ledger(tmp_path / str(attempt), log=messages.append)
        holder, _ = hold(tmp_path / str(attempt))  # in a session of its own: its group's id is its own
        group = ledger.lock().owner.group
        assert group == holder.pid and ledger.lock().owner.group_started == ledger.lock().owner.started
        os.killpg(group, signal.SIGKILL)  # the whole group, as a user kills a run's process group
        holder.wait()
        squatter, why_not = with_pid(group)
        if squatter is not None:
            break
    else:
        pytest.fail(f"could not hand a dead holder's group id to a new process, three times; the last: {why_not}")
    try:
        assert os.getpgid(squatter) == group  # a live process in a group with the holder's group id
        take(ledger)
    finally:
        kill(squatter)
    assert ledger.holder() == NEXT and "is gone: no process has that id" not in messages[0]
    assert "that id now belongs to another process" in messages[0], messages


# Starts ``sleep`` in a session of its own with the process id it is given, which must be free (the kernel's next
# id is set just below it, as root, and the start tried again for a while when another process took it first),
# and exits: the sleep is left to this host's reaper, as a process of another program would be.
WITH_PID = textwrap.dedent("""
    import os, subprocess, sys, time
    pid, last = int(sys.argv[1]), "/proc/sys/kernel/ns_last_pid"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with open(last, "w") as f:
            f.write(str(pid - 1))
        process = subprocess.Popen(["sleep", "600"], start_new_session=True, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # not this helper's pipes
        if process.pid == pid:
            sys.exit(0)
        process.kill()
        process.wait()
    sys.exit(f"could not start a process with id {pid} in 20 s: other processes kept taking it")
""")


def holders_of(pid: int) -> list[str]:
    """The processes that keep ``pid`` taken as their id, group or session (the kernel hands an id out again only
    when none is left), each as its /proc/<id>/stat line."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            line = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        fields = line[line.rindex(")") + 2:].split()  # after the command, which may hold spaces
        if pid in (int(stat.parent.name), int(fields[2]), int(fields[3])):
            found.append(line.strip())
    return found


def with_pid(pid: int) -> tuple[int | None, str]:
    """A process of another program, not started by this one, with the process id ``pid``, leading a group; or
    None and why not: what the helper said, and which processes hold the id."""
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.fail("/proc/sys/kernel/ns_last_pid is not writable: this test hands out a chosen process id, "
                    "which needs root")
    done = subprocess.run([sys.executable, "-c", WITH_PID, str(pid)], capture_output=True, text=True)
    if done.returncode == 0:
        return pid, ""
    return None, f"{done.stderr.strip()[-2000:]}; the processes holding id {pid}: {holders_of(pid)}"


def test_a_task_that_ended_hands_its_lock_over_to_the_lease(tmp_path):
    """Between two tasks of a run no process works on its tables: the end of the last one says nothing."""
    from airflow_cdc_provider.operators.lease import leased

    ledger = _ledger(tmp_path)
    holder, _ = hold(tmp_path)
    holder.kill()
    holder.wait()
    owner = task_owner(None, "merge")  # this process, standing in for the run's next task
    with leased([ledger], HOLDER, 600, owner, logging.getLogger("lease")):
        assert ledger.lock().owner == owner
    assert ledger.lock().owner == owner.finished()
    with pytest.raises(TableBusy, match="looks alive: task merge"):
        take(ledger)


def kill(pid: int) -> None:
    """Kill a process this one did not start, and wait until it has ended (its new parent reaps it)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return
        if stat[stat.rindex(")") + 2] in "ZX":
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not end within 10 s of SIGKILL")
