"""What the task's helper processes share: a snapshot's readers (``hooks.reader_processes``) and a binlog pass's
decoders (``stages.decode_workers``). Each is started with ``python -m``, never forked (the task has threads, and
a fork copies the locks they hold), and must not outlive the task: a killed task's helper would write on under
its retry."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """In a helper, first thing: have the kernel kill it when the task's process dies; exit now if that is dead
    already (it may have died before the call)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def how_it_ended(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> str:
    """How a helper that stopped answering ended, for a message: waits for it."""
    code = process.wait()
    return f"was killed by signal {-code}" if code < 0 else f"ended with exit code {code}"


def end(process: subprocess.Popen[bytes] | subprocess.Popen[str], kill: bool = False) -> None:
    """Wait for a helper whose orders were closed to exit (it then ends by itself); killed at once with ``kill``,
    or if it has not exited after a few seconds."""
    if kill:
        process.kill()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
