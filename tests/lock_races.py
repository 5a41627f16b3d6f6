"""Runs racing for one table's lock, on whichever store a ledger is kept in (the local disk, S3)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable

from airflow_cdc_provider.core.ledger import Ledger, RunRef, TableBusy

T0 = dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.UTC)


def race(ledger: Callable[[], Ledger], runs: list[RunRef], is_running: Callable[[RunRef], bool]) -> list[RunRef]:
    """Each of ``runs`` tries to take the lock at the same moment, each through a ledger of its own (as workers
    on other machines would); the runs that got it."""
    won, barrier = [], threading.Barrier(len(runs))

    def take(run: RunRef) -> None:
        own = ledger()
        barrier.wait()
        try:
            own.acquire(run, is_running, T0)
            won.append(run)
        except TableBusy:
            pass

    threads = [threading.Thread(target=take, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won


def assert_one_winner_when_free_and_when_taking_over(ledger: Callable[[], Ledger]) -> None:
    """Exactly one run wins a free lock, and exactly one wins the takeover of a dead run's lock."""
    first = [RunRef("d", f"first{i}") for i in range(8)]
    won = race(ledger, first, lambda holder: True)
    assert len(won) == 1 and ledger().holder() == won[0], won
    dead = won[0]
    second = [RunRef("d", f"second{i}") for i in range(8)]
    # The holder is gone; a run that just took the lock over is alive.
    won = race(ledger, second, lambda holder: holder != dead)
    assert len(won) == 1 and ledger().holder() == won[0], won
    assert ledger().release(won[0]) and ledger().holder() is None
