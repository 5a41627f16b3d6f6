"""Keeping a run's table locks alive while its tasks work (the lease of ``core.ledger.Lock``).

Every task of a run renews the leases of its tables when it starts and then every quarter of the lease, from a
thread, until it ends. A task process that is killed stops renewing; once its lease has run out, the next run
takes the lock over, even though Airflow may show the dead run as running for good. The lease must outlast the
gaps between a run's tasks (a retry's delay, a wait for a worker slot).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from airflow_cdc_provider.core.ledger import Ledger, Owner, RunRef

DEFAULT_LEASE_SECONDS = 600


def task_owner(context: Any, task_id: str) -> Owner:
    ti = context.get("ti") if context else None
    name = f"{ti.task_id} try {ti.try_number}" if ti is not None and getattr(ti, "try_number", None) else task_id
    return Owner(socket.gethostname(), os.getpid(), name)


@contextlib.contextmanager
def leased(ledgers: Sequence[Ledger], run: RunRef, lease_seconds: int | None, owner: Owner, log: Any) -> Iterator[None]:
    """Renew ``run``'s lease on each of ``ledgers`` now and every quarter of the lease while the block runs."""
    if not ledgers or not lease_seconds:
        yield
        return
    lease = dt.timedelta(seconds=lease_seconds)
    lost: set[str] = set()

    def renew_all() -> None:
        now = dt.datetime.now(dt.timezone.utc)
        for ledger in ledgers:
            if ledger.table.ledger in lost:
                continue
            try:
                if not ledger.renew(run, now, lease, owner):
                    lost.add(ledger.table.ledger)
                    log.warning("%s: %s no longer holds this table's lock (%s): its lease ran out and another run "
                                "took it over, or it was released. This run will not commit the table.",
                                ledger.table.ledger, run, ledger.holder())
            except Exception as exc:  # the lease has time left: the next renewal may pass
                log.warning("Could not renew the lock lease in %s: %s", ledger.table.ledger, exc)

    renew_all()
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(max(1.0, lease_seconds / 4)):
            renew_all()

    keeper = threading.Thread(target=keep, name="cdc-lease", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join(timeout=10)


class HoldsTableLeases:
    """For an operator that works on the run's tables: ``_leased`` keeps their leases while the block runs.
    The operator sets ``lock_lease_seconds`` and ``work_conn_id``."""

    lock_lease_seconds: int | None
    work_conn_id: str | None

    def _leased(self, context: Any, tables: Sequence[Any], run: RunRef) -> contextlib.AbstractContextManager:
        from airflow_cdc_provider.hooks.work_store import work_store

        store = work_store(tables[0].table_dir.work_dir, self.work_conn_id) if tables else None  # one work_dir per run
        ledgers = [Ledger(t.table_dir, store) for t in tables]
        return leased(ledgers, run, self.lock_lease_seconds, task_owner(context, self.task_id), self.log)
