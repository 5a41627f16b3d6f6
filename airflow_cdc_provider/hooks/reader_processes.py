"""Reader processes: a process of its own with one streamed-read connection to the source, doing the work a
stage hands it one order at a time (a snapshot's chunks on several connections at once, ``stages.snapshot``).

A stage's per-row work is Python (PyMySQL parses every value); threads would share one core. A reader process
is started as ``python -m airflow_cdc_provider.hooks.reader_processes``, not forked: the task's process has
threads (the snapshot's, Airflow's), and a fork copies whatever lock one of them held. It imports no Airflow.

- The login (``hooks.source_link.SourceLogin``) goes to it over its stdin, never on a command line or in a file,
  and it opens its connection through the same ``SourceLink`` as the hook: TLS, time limits, messages.
- Orders and answers are one JSON line each, on its stdin and on a descriptor of its own; its stdout is the
  task's stderr, so that what it prints (a failpoint's line) lands in the task's log.
- It dies with the task: the kernel kills it when the task's process dies (``PR_SET_PDEATHSIG``), and it ends
  when its stdin closes. A killed task's reader cannot write on under its retry.
- An error in the work is answered, with its class when it is one of ``core.errors``: the stage raises it again
  as if it had happened in the task.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from typing import IO

from airflow_cdc_provider.core import errors
from airflow_cdc_provider.core.model import Model
from airflow_cdc_provider.helper_processes import die_with_parent, end, how_it_ended
from airflow_cdc_provider.hooks.source_link import SourceLink, SourceLogin, StreamingReads

_WORKERS = "airflow_cdc_provider."  # the work a reader may be told to do: the provider's own functions

# A reader's work: an order's text in, the answer's text out, on the reader's connection.
Work = Callable[[StreamingReads, str], str]


class ReaderStart(Model):
    """The first line a reader reads: its login, the work it does (``module:function``), the task's process."""

    login: SourceLogin
    work: str
    parent: int


class ReaderAnswer(Model):
    """A reader's answer to an order: the work's answer, or the error it raised."""

    answer: str | None = None
    error: str | None = None  # the class name, when it is one of core.errors
    message: str | None = None


class ReaderDied(RuntimeError):
    """A reader process ended without answering (killed, out of memory): a retry of the task reads again."""


class ReaderProcess:
    """One reader process, asked one order at a time (``ask``); ``close`` ends it."""

    def __init__(self, login: SourceLogin, work: str, what: str) -> None:
        if not work.startswith(_WORKERS):
            raise ValueError(f"A reader process does the provider's work only, not {work!r}.")
        self.what = what
        read_answers, write_answers = os.pipe()
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(write_answers)], stdin=subprocess.PIPE, stdout=2,
            pass_fds=(write_answers,), text=True, close_fds=True)
        os.close(write_answers)
        self._answers: IO[str] = os.fdopen(read_answers, "r")
        assert self._process.stdin is not None
        self._orders = self._process.stdin
        start = ReaderStart(login=login, work=work, parent=os.getpid())
        # The password in clear, on this pipe only (``SourceLogin.password`` is a secret everywhere else).
        self._send(start.model_dump_json(context={"reveal": True}))

    def _send(self, line: str) -> None:
        try:
            self._orders.write(line + "\n")
            self._orders.flush()
        except BrokenPipeError:
            raise self._died() from None

    def ask(self, order: str) -> str:
        """The reader's answer to ``order``; its error raised here, as the work raised it."""
        self._send(order)
        line = self._answers.readline()
        if not line:
            raise self._died()
        reply = ReaderAnswer.model_validate_json(line)
        if reply.answer is not None:
            return reply.answer
        kind = getattr(errors, reply.error or "", None)
        if isinstance(kind, type) and issubclass(kind, errors.CdcError):
            raise kind(reply.message)
        raise RuntimeError(f"The reader process of {self.what} failed: {reply.message}")

    def _died(self) -> ReaderDied:
        return ReaderDied(f"The reader process of {self.what} {how_it_ended(self._process)} before it answered "
                          "(its output is in the task's log). What it had read and reported is kept; the task's "
                          "retry reads the rest.")

    def close(self) -> None:
        """End the reader: its stdin closes, and it exits; killed if it has not after a few seconds."""
        try:
            self._orders.close()
        except BrokenPipeError:
            pass
        end(self._process)
        self._answers.close()


def _work(name: str) -> Work:
    module, _, function = name.partition(":")
    if not module.startswith(_WORKERS):
        raise ValueError(f"A reader process does the provider's work only, not {name!r}.")
    work: Work = getattr(importlib.import_module(module), function)
    return work


def main(answers_fd: int) -> None:
    answers = os.fdopen(answers_fd, "w")
    start = ReaderStart.model_validate_json(sys.stdin.readline())
    die_with_parent(start.parent)
    work = _work(start.work)

    def answer(reply: ReaderAnswer) -> None:
        answers.write(reply.model_dump_json() + "\n")
        answers.flush()

    try:
        with SourceLink(start.login).streaming_reads() as reads:
            for order in sys.stdin:
                try:
                    answer(ReaderAnswer(answer=work(reads, order)))
                except Exception as exc:  # answered: the task raises it again
                    answer(_failure(exc))
    except Exception as exc:  # the connection could not be opened: the first order gets the error
        if sys.stdin.readline():
            answer(_failure(exc))


def _failure(exc: Exception) -> ReaderAnswer:
    kind = type(exc).__name__
    if getattr(errors, kind, None) is type(exc):
        return ReaderAnswer(error=kind, message=str(exc))
    traceback.print_exc()  # to the task's log
    return ReaderAnswer(message=f"{kind}: {exc}")


if __name__ == "__main__":
    main(int(sys.argv[1]))
