"""The plan task's rules over all the tables of a run: taking their locks all or none, and which tables that
cannot go on from their watermark take a fresh snapshot instead (``on_purged_binlog``, ``on_server_change``).

The ledgers and the server are reached through the steps and the facts the caller passes in, so that the rules
hold whatever store and server the run has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from airflow_cdc_provider.core.config import ConfigError, rendered_param
from airflow_cdc_provider.core.contract import CapturedTable
from airflow_cdc_provider.core.ledger import RunPlan, RunRef, TableBusy
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.resume import Unreadable, UnreadableKind
from airflow_cdc_provider.core.watermark import Watermark

L = TypeVar("L")

FAIL, SNAPSHOT_INSTEAD = "fail", "snapshot"  # the values of on_purged_binlog and on_server_change
# ``on_broken_chain`` (and ``on_purged_binlog``'s third value): the table is brought level by a diff in the same run
# (``stages.heal``), or it stops, named, and waits for a person.
HEALS, STOPS = "heal", "stop"


def fresh_snapshot_of(asked: object, tables: Sequence[CapturedTable]) -> frozenset[str]:
    """The tables (by ``CapturedTable.ledger_id``) the ``fresh_snapshot_tables`` parameter asks to reload, as the
    template renders it (JSON text, or a list): source names, ``schema.table``; every shard of a name.

    A name that is not one of this run's tables is refused, before any lock is taken: a reload asked for a table
    the run does not capture would otherwise be dropped without a word.
    """
    given = rendered_param(asked)
    if not given:
        return frozenset()
    if not isinstance(given, list) or not all(isinstance(name, str) for name in given):
        raise ConfigError(f"The parameter fresh_snapshot_tables must list tables as schema.table, like "
                          f'["shop.orders"], got {asked!r}. Nothing was changed.')
    sources = {t.source for t in tables}
    unknown = sorted({name.strip() for name in given} - sources)
    if unknown:
        raise ConfigError(f"The parameter fresh_snapshot_tables names {', '.join(unknown)}, which this run does not "
                          f"capture; its tables are {', '.join(sorted(sources))}. Nothing was changed.")
    asked_for = {name.strip() for name in given}
    return frozenset(t.ledger_id for t in tables if t.source in asked_for)


def take_locks(tables: Sequence[CapturedTable], ledgers: Mapping[str, L], acquire: Callable[[L], None],
               release: Callable[[L], object]) -> list[L]:
    """Take the lock of every table (``ledgers`` by ``CapturedTable.ledger_id``) with ``acquire``, or none.

    The locks are taken in one order, by Hive table, so that two runs over overlapping tables never end up
    holding half each. When one is busy (``TableBusy``), the ones taken so far are released: a run that cannot
    have every table changes nothing. The error is raised again, naming the table it is about.
    """
    taken: list[L] = []
    try:
        for table in sorted(tables, key=lambda t: t.ledger_id):
            ledger = ledgers[table.ledger_id]
            try:
                acquire(ledger)
            except TableBusy as busy:
                raise TableBusy(f"{table.ledger_id} (from {table.source}): {busy}") from None
            taken.append(ledger)
    except BaseException:
        for ledger in taken:  # this run does nothing: it holds no table
            release(ledger)
        raise
    return taken


def may_snapshot_instead(on_purged_binlog: str, on_server_change: str) -> bool:
    """Whether either option lets a table take a fresh snapshot instead of failing: only then is the server
    asked, while planning, where each table's binlog goes on."""
    return SNAPSHOT_INSTEAD in (on_purged_binlog, on_server_change)


def snapshots_instead(run: RunRef, plans: Mapping[str, RunPlan], found: Mapping[str, Watermark | Unreadable],
                      on_purged_binlog: str, on_server_change: str) -> dict[str, RunPlan]:
    """The tables (by Hive table) that take a fresh snapshot in this run instead of reading the binlog, each with
    its new plan and the warning that says why.

    ``found`` holds, for each incremental table of ``plans``, where the binlog goes on from its watermark on this
    server or why it cannot (``core.resume.read_position``). A table that cannot go on takes a snapshot when the
    option of its kind says ``snapshot``: ``on_purged_binlog`` for a purged binlog, ``on_server_change`` for
    another server. Any other table keeps its plan, and one that cannot go on fails in the extraction, which
    says why and what to do.
    """
    chosen = {UnreadableKind.PURGED: ("on_purged_binlog", on_purged_binlog,
                                      "the binlog from the watermark was purged"),
              UnreadableKind.SERVER: ("on_server_change", on_server_change, "the source is another server"),
              UnreadableKind.DIVERGED: ("on_server_change", on_server_change, "the source is another "
                                        "server, which lacks transactions of the watermark")}
    replanned = {}
    for hive_table, plan in plans.items():
        why = found.get(hive_table)
        if plan.mode != Mode.INCREMENTAL or not isinstance(why, Unreadable) or why.kind not in chosen:
            continue
        option, value, reason = chosen[why.kind]
        if value != SNAPSHOT_INSTEAD:
            continue
        warning = f"this run takes a fresh snapshot ({option}: snapshot): {why.reason}"
        replanned[hive_table] = RunPlan(run=run, mode=Mode.SNAPSHOT, reason=f"a fresh snapshot: {reason}",
                                        warning=warning)
    return replanned
