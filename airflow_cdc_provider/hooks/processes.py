"""This host's processes as Linux's /proc shows them: who this task process is (recorded in the table locks it
takes), and what has become of a lock holder's process (``core.holder`` decides what that means).

Anything that makes /proc an unsafe witness gives None, and the lease rule stays in force: no /proc (not
Linux), a /proc of another pid namespace than this process's, a /proc that hides other users' processes
(``hidepid``), a file that cannot be read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypedDict

from airflow_cdc_provider.core.holder import HolderSeen, Owner, Proc

PROC = Path("/proc")
_GONE = ("Z", "X", "x")  # a zombie has ended: only its exit status waits for its parent


class Identity(TypedDict):
    boot_id: str | None
    pid_ns: str | None
    started: int | None
    group: int | None
    group_started: int | None


def identity() -> Identity:
    """This process's ``Owner`` fields beyond host, pid and task: boot id, pid namespace, start, group and its
    leader's start (each None when it cannot be known)."""
    none: Identity = {"boot_id": None, "pid_ns": None, "started": None, "group": None, "group_started": None}
    if not _trustworthy():
        return none
    try:
        boot_id = (PROC / "sys/kernel/random/boot_id").read_text().strip()
        pid_ns = os.readlink(PROC / "self/ns/pid")
        me = _stat(os.getpid())
        group = os.getpgrp()
        leader = _stat(group)
    except (OSError, ValueError, IndexError):
        return none
    if me is None:
        return none
    return {"boot_id": boot_id or None, "pid_ns": pid_ns or None, "started": me[1].started, "group": group,
            "group_started": leader[1].started if leader is not None and leader[0] == group else None}


def look(holder: Owner) -> HolderSeen | None:
    """What /proc shows now of ``holder``: the live process with its id, and the live processes of its group;
    None when /proc cannot be trusted to tell."""
    if not _trustworthy() or holder.group is None:
        return None
    try:
        found = _stat(holder.pid)
        leader = _stat(holder.group)
        group = []
        for entry in os.scandir(PROC):
            if not entry.name.isdigit():
                continue
            try:
                seen = _stat(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended while this looked
            if seen is not None and seen[0] == holder.group:
                group.append(seen[1])
    except (OSError, ValueError, IndexError):  # a process not readable (or not understood) may be the holder's
        return None
    return HolderSeen(checker=os.getpid(), process=found[1] if found else None, group=tuple(group),
                      leader=leader[1] if leader else None)


def _stat(pid: int) -> tuple[int, Proc] | None:
    """The process group and ``Proc`` of the live process ``pid``, or None when there is none (or a zombie)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # none, or it ended while this read
        return None
    # pid (comm) state ppid pgrp ... starttime: comm may hold spaces and parentheses, so split after its last ")".
    fields = text[text.rindex(")") + 2:].split()
    if fields[0] in _GONE:
        return None
    return int(fields[2]), Proc(pid=pid, parent=int(fields[1]), started=int(fields[19]))


def _trustworthy() -> bool:
    """Whether /proc shows this process's pid namespace, and every process in it."""
    trusted = False  # no procfs at /proc
    try:
        if os.readlink(PROC / "self") != str(os.getpid()):
            return False  # a /proc mounted for another pid namespace
        for line in (PROC / "self/mountinfo").read_text().splitlines():  # the last mount on /proc is the one seen
            before, _, after = line.partition(" - ")
            if before.split()[4:5] == [str(PROC)]:
                options = ",".join([*before.split()[5:6], *after.split()[2:3]]).split(",")
                trusted = after.split()[:1] == ["proc"] and not any(
                    o.startswith("hidepid=") and o not in ("hidepid=0", "hidepid=off") for o in options)
    except (OSError, ValueError):
        return False
    return trusted
