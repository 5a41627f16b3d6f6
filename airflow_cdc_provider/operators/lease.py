"""Keeping a run's table locks alive while its tasks work (the lease of ``core.ledger.Lock``).

Every task of a run renews the leases of its tables when it starts and then every quarter of the lease, from a
thread, until it ends. A task process that is killed stops renewing; once its lease has run out, the next run
takes the lock over, even though Airflow may show the dead run as running for good. The lease must outlast the
gaps between a run's tasks (a retry's delay, a wait for a worker slot).

Each renewal records the task process (``task_owner``), so that a run on the same host can see at once that it
is gone (``core.holder``). A task that ends renews once more as finished: between two tasks of a run no process
works on its tables, and only the lease (or the run's end) says whether the run goes on.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from airflow_cdc_provider.core.config import RunConfig, WorkConfig
from airflow_cdc_provider.core.holder import Owner
from airflow_cdc_provider.core.ledger import Ledger, RunRef
from airflow_cdc_provider.hooks.processes import identity


def task_owner(context: Any, task_id: str) -> Owner:
    """This task process, as a lock records it."""
    ti = context.get("ti") if context else None
    name = f"{ti.task_id} try {ti.try_number}" if ti is not None and getattr(ti, "try_number", None) else task_id
    return Owner(host=socket.gethostname(), pid=os.getpid(), task=name, **identity())


@contextlib.contextmanager
def leased(ledgers: Sequence[Ledger], run: RunRef, lease_seconds: int | None, owner: Owner, log: Any) -> Iterator[None]:
    """Renew ``run``'s lease on each of ``ledgers`` now and every quarter of the lease while the block runs, and
    hand them over when it ends (``hand_over``). Without a lease, only the owner is recorded."""
    if not ledgers:
        yield
        return
    lost: set[str] = set()
    _renew(ledgers, run, lease_seconds, owner, log, lost)
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(max(1.0, (lease_seconds or 0) / 4)):
            _renew(ledgers, run, lease_seconds, owner, log, lost)

    keeper = threading.Thread(target=keep, name="cdc-lease", daemon=True) if lease_seconds else None
    if keeper is not None:
        keeper.start()
    try:
        yield
    finally:
        stop.set()
        if keeper is not None:
            keeper.join(timeout=10)
        hand_over([ledger for ledger in ledgers if ledger.table.ledger not in lost], run, lease_seconds, owner, log)


def hand_over(ledgers: Sequence[Ledger], run: RunRef, lease_seconds: int | None, owner: Owner, log: Any) -> None:
    """Renew ``run``'s lease once more, as ``owner`` finished: its task has ended, and the run goes on in its next
    task, so the end of this process no longer says the run is dead. A lock the task released stays released."""
    _renew(ledgers, run, lease_seconds, owner.finished(), log, None)


def _renew(ledgers: Sequence[Ledger], run: RunRef, lease_seconds: int | None, owner: Owner, log: Any,
           lost: set[str] | None) -> None:
    """Renew ``run``'s lease on each ledger not in ``lost``; one another run holds now goes into ``lost``, said
    once (None: not said, as the task may have released it)."""
    now = dt.datetime.now(dt.UTC)
    lease = dt.timedelta(seconds=lease_seconds) if lease_seconds else None
    for ledger in ledgers:
        if lost is not None and ledger.table.ledger in lost:
            continue
        try:
            if not ledger.renew(run, now, lease, owner) and lost is not None:
                lost.add(ledger.table.ledger)
                log.warning("%s: %s no longer holds this table's lock (%s): another run took it over (its lease "
                            "had run out, or the task that held it was killed), or it was released. This run "
                            "will not commit the table.", ledger.table.ledger, run, ledger.holder())
        except Exception as exc:  # the lease has time left: the next renewal may pass
            log.warning("Could not renew the lock lease in %s: %s", ledger.table.ledger, exc)


class HoldsTableLeases:
    """For an operator that works on the run's tables: ``_leased`` keeps their leases while the block runs, as
    long as its ``run:`` section's ``lock_lease_seconds`` says, the ledgers read through its ``work:`` section's
    connection. The operator sets ``run`` and ``work``."""

    run: RunConfig
    work: WorkConfig
    task_id: str
    log: Any

    def _leased(self, context: Any, tables: Sequence[Any], run: RunRef) -> contextlib.AbstractContextManager[None]:
        from airflow_cdc_provider.hooks.work_store import work_store

        if not tables:
            return contextlib.nullcontext()
        store = work_store(tables[0].table_dir.work_dir, self.work.conn_id)  # one work_dir per run
        ledgers = [Ledger(t.table_dir, store) for t in tables]
        return leased(ledgers, run, self.run.lock_lease_seconds, task_owner(context, self.task_id), self.log)
