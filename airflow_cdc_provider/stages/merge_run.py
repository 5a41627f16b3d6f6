"""The merge stage of a run: what each table's captures come to, the Spark applications that merge those with
changes, the ledger's record of each commit, and a table's finish (its lock released, its older runs removed).

The merge task runs it, handing over its Spark application as a callable (``submit``, given the URI of a job
file); the table tasks call ``finish_table``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from airflow_cdc_provider.core.contract import Captured, Extraction, MergeInput, SourcePlan, TableOutcome, TablePlan
from airflow_cdc_provider.core.ledger import Ledger, RunRef
from airflow_cdc_provider.core.merge import MergeJob, MergeResult, MergeSpec, merge_spec
from airflow_cdc_provider.core.modes import Status
from airflow_cdc_provider.core.outcomes import (
    deal,
    gap_warning,
    merge_commit,
    merged,
    repair_settled_by,
    sort_tables,
)
from airflow_cdc_provider.core.workdir import TableDir
from airflow_cdc_provider.failpoints import failpoint
from airflow_cdc_provider.stages.task_log import TaskLog
from airflow_cdc_provider.stages.verify import settle_repair
from airflow_cdc_provider.storage import WorkStore


@dataclass(frozen=True)
class MergeSettings:
    """Where and how the tables are merged (the merge task's arguments, from `hive:` and `spark:`)."""

    warehouse_dir: str
    metastore_uri: str | None
    keep_versions: int = 3  # versions of each table kept on disk
    time_zone: str = "UTC"  # the zone the tables' readers use
    applications: int = 1  # Spark applications the run's tables are dealt into, one after the other


@dataclass
class MergeRun:
    """Each table's outcome, in the plan's order (the tables the check stopped last), and what was committed (for
    the lineage)."""

    outcomes: list[TableOutcome]
    committed: list[tuple[MergeInput, MergeSpec]] = field(default_factory=list)


def merge_run(plan: SourcePlan, captures: tuple[Captured | None, Extraction | None, Captured | None, Captured | None],
              store: WorkStore, settings: MergeSettings, submit: Callable[[str], None], log: TaskLog,
              ready: Callable[[], None] = lambda: None) -> MergeRun:
    """Merge the run's tables. ``captures``: the snapshot's, the extraction, the replay's and the heal's values
    (None where that task failed as a whole: its tables are failed, the others go on). ``ready`` is called once,
    before the first Spark application (the task checks its Spark connection there)."""
    snapshot, extraction, replay, heal = captures
    found = sort_tables(
        plan, snapshot, extraction, replay, recorded=lambda t: Ledger(t.table_dir, store).run_plan(plan.run),
        holder=lambda t: Ledger(t.table_dir, store).holder(),
        spec=lambda t, i: merge_spec(t, i, settings.warehouse_dir, settings.metastore_uri, settings.keep_versions,
                                     settings.time_zone, uri=store.uri), heal=heal)
    for table, advanced in found.advances:  # an idle table's commit is the ledger's alone
        Ledger(table.table_dir, store).commit(table.plan, advanced)
    outcomes = dict(found.decided)
    done = MergeRun(outcomes=[])
    if found.merging:
        ready()
        for n, batch in enumerate(deal(found.merging, settings.applications), start=1):
            outcomes.update(_application(batch, n, store, settings, submit, log, done.committed))
    else:
        log.info("No table has changes to merge: no Spark application was started.")
    done.outcomes = [*(outcomes[t.source] for t in plan.tables), *(outcomes[t.source] for t in plan.stopped)]
    for outcome in done.outcomes:
        log.info("%s → %s: %s%s", outcome.source, outcome.hive_table, outcome.status,
                 f" (version {outcome.version})" if outcome.version is not None else "")
        if outcome.status == Status.IDLE:  # done here: an idle table gets no task of its own
            finish_table(plan.table(outcome.source).table_dir, plan.run, settings.keep_versions, store)
    return done


def _application(batch: list[tuple[TablePlan, MergeInput, MergeSpec]], number: int, store: WorkStore,
                 settings: MergeSettings, submit: Callable[[str], None], log: TaskLog,
                 committed: list[tuple[MergeInput, MergeSpec]]) -> dict[str, TableOutcome]:
    """One Spark application over ``batch``, and the ledger's record of each table it committed."""
    # The job file lives beside the first table's run files; its result, beside it, names each table.
    run_dir = batch[0][0].run_dir
    result_file = run_dir.merge_result(number)
    store.delete(result_file)
    job = MergeJob(warehouse_dir=settings.warehouse_dir, metastore_uri=settings.metastore_uri,
                   tables=tuple(spec for _, _, spec in batch), result_file=store.uri(result_file))
    job_file = run_dir.merge_job(number)
    store.write(job_file, job)
    log.info("Merging %d tables in one Spark application: %s", len(batch),
             ", ".join(f"{s.database}.{s.table}" for _, _, s in batch))
    submit(store.uri(job_file))
    written = store.read(result_file, MergeResult)
    if written is None:  # a retry of the task submits the job again
        raise RuntimeError(f"The merge application ended without writing its result {job.result_file}; see its "
                           "log above.")
    outcomes = {}
    for table, merge_input, spec in batch:
        result = written.tables[spec.result_key]
        gap = gap_warning(result, spec)
        if gap is not None:
            log.warning("%s: %s", table.source, gap)
        if result.status == Status.COMMITTED:
            committed.append((merge_input, spec))
            failpoint("merge.task.committed")
            Ledger(table.table_dir, store).commit(table.plan, merge_commit(table, spec, result))
            read_again = repair_settled_by(table, merge_input)
            if read_again is not None:  # the rows verify found different were read again: none is left
                settle_repair(store, table.table_dir, read_again)
        outcomes[table.source] = merged(table, merge_input, spec, result)
    return outcomes


def finish_table(table: TableDir, run: RunRef, keep_runs: int, store: WorkStore) -> tuple[bool, list[str]]:
    """Release the table's lock held by ``run`` and remove the files of its older runs (the newest
    ``keep_runs`` stay: a re-run needs its own) and the row digests of versions no longer committed. Returns
    whether the lock was released, and what was removed."""
    ledger = Ledger(table, store)
    # A diff-mode table's row digests: only the committed version's serve (a run's that did not commit is redone
    # by its re-run, which reads the source again). Removed while the lock is held: the next run's are its own.
    committed = ledger.committed() if ledger.holder() == run else None
    kept = committed.digests if committed is not None else None
    if kept is not None:
        for name in store.file_names(table.digests):
            found = table.digests_file(name.removesuffix(".parquet"))
            if found != kept:
                store.delete(found)
    released = ledger.release(run)
    removed = []
    for name, _ in store.subdirectories(table.runs)[keep_runs:]:  # newest first
        if name != run.key:
            store.remove_tree(table.run(name).root)
            removed.append(name)
    return released, removed
