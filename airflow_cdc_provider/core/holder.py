"""Whether a table lock's holder process is known to be dead, from what the checking host's kernel shows of it.

A lock records the task process that last took or renewed it (``Owner``). When that process is on the
host that checks, the kernel can tell at once that it is gone, instead of waiting out the lease. "On the host
that checks" means more than the host name: process ids are counted per kernel boot and per pid namespace (two
containers may share a name, a rebooted host counts again from 1), so both are recorded and compared; and the
id may have been given to a new process since, so the process's start time is recorded and compared too. A
killed process may leave processes it started running (a spark-submit still merging), so the holder counts as
gone only once its process group holds none of them either. A group's id is a process id too, and is handed out
again once the group has ended (ids wrap within minutes on a busy host: 32,768 by default): so the group's
leader is recorded with its start, and a group whose id now belongs to a later process is known to be another
group, holding nothing of the holder's (the kernel never hands out an id still in use as a group's). Whatever
cannot be known for sure leaves the lease rule in force: a live holder's lock is never taken over.

This module decides; ``airflow_cdc_provider.hooks.processes`` reads /proc.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_cdc_provider.core.model import Model


class Owner(Model):
    """The task process that took or renewed a lock: where to look when it seems stuck.

    On its own host, whether it still runs can be known at once (``core.holder``): for that the lock records the
    kernel's boot id and the pid namespace its ``pid`` is counted in, its start (clock ticks after boot) and its
    process group. ``started`` is None once its task has ended (``finished``): the run goes on in its next task,
    so the end of this process says nothing of the run. ``group_started`` is the start of the group's leader
    (the process whose id is the group's) when it was recorded, None when it had ended already. Each is None
    where it could not be read, or in a lock written before they were recorded: the lease alone decides then.
    """

    host: str
    pid: int
    task: str
    boot_id: str | None = None
    pid_ns: str | None = None
    started: int | None = None
    group: int | None = None
    group_started: int | None = None

    def finished(self) -> Owner:
        return self.model_copy(update={"started": None})


@dataclass(frozen=True)
class Proc:
    """One live process as /proc shows it: its id, its parent's, and its start in clock ticks after boot."""

    pid: int
    parent: int
    started: int


@dataclass(frozen=True)
class HolderSeen:
    """What the checking host's kernel shows now of a lock holder (``hooks.processes.look``).

    ``process`` is the live process that has the holder's id now, None when none has (an exited process that
    is not yet reaped, a zombie, counts as gone); ``group`` is every live process of the holder's process
    group; ``checker`` is the id of the process that checks (it and what it started may share the group);
    ``leader`` is the live process whose id is the holder's group id, None when none has.
    """

    checker: int
    process: Proc | None
    group: tuple[Proc, ...] = ()
    leader: Proc | None = None


def same_pid_space(holder: Owner | None, here: Owner | None) -> bool:
    """Whether ``holder``'s process id can be looked up by ``here``: the same host name, kernel boot and pid
    namespace, all recorded, and the holder's start time and process group recorded (an owner written before
    they were, or where /proc could not be read, has none)."""
    if holder is None or here is None:
        return False
    if holder.started is None or holder.group is None:
        return False
    recorded = (holder.boot_id, holder.pid_ns, here.boot_id, here.pid_ns)
    return all(recorded) and (holder.host, holder.boot_id, holder.pid_ns) == (here.host, here.boot_id, here.pid_ns)


def holder_gone(holder: Owner | None, here: Owner | None, seen: HolderSeen | None) -> str | None:
    """Why ``holder`` (a lock's owner) is known to be dead, as seen by ``here`` (the owner that checks), or None
    when it is not known: it runs, it is on another host or kernel, or what was seen (``seen``, None when /proc
    could not be read) cannot tell."""
    if holder is None or not same_pid_space(holder, here) or seen is None:
        return None
    now = seen.process
    if now is not None and now.started == holder.started:
        return None  # it runs
    left = [] if group_reissued(holder, seen) else _started_by_holder(holder, seen)
    if left:
        return None  # a child it started still works (its lease or its run's end decides)
    where = (f"its process {holder.pid} on {holder.host} (task {holder.task}) is gone: "
             if holder.task else f"its process {holder.pid} on {holder.host} is gone: ")
    if now is None:
        return where + ("no process has that id on this host now (the same kernel boot and pid namespace), and "
                        "none it started is left")
    return where + (f"that id now belongs to another process, which started at tick {now.started} after boot, "
                    f"not {holder.started}; none it started is left")


def group_reissued(holder: Owner, seen: HolderSeen) -> bool:
    """Whether the holder's process group id now belongs to a process that is not the group's recorded leader:
    the holder's group has ended then (an id in use as a group's is never handed out), and the processes of
    the group seen now are another group's."""
    recorded = holder.group_started
    if recorded is None and holder.pid == holder.group:
        recorded = holder.started  # the holder led its group
    return seen.leader is not None and recorded is not None and seen.leader.started != recorded


def _started_by_holder(holder: Owner, seen: HolderSeen) -> list[Proc]:
    """The live processes of the holder's group that it may have started: those started no earlier than it,
    apart from the checker and what the checker started (when they share the group, as the commands of one
    script do). A process whose parent is outside the group cannot be placed, and so counts."""
    started = holder.started
    if started is None:  # not in the same pid space: nothing can be placed
        return list(seen.group)
    parents = {p.pid: p.parent for p in seen.group}

    def of_checker(pid: int) -> bool:
        visited = set()
        while pid in parents and pid not in visited:
            if pid == seen.checker:
                return True
            visited.add(pid)
            pid = parents[pid]
        return pid == seen.checker

    return [p for p in seen.group if p.started >= started and not of_checker(p.pid)]
