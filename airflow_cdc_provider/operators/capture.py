"""The capture stages as operators over all the tables of a run: snapshot, extract (one binlog pass), replay.

Each is a thin adapter: it reads the run's plan, calls the hook and the stage for each table, and returns one
typed value (``core.contract``). A table whose stage fails for a reason of its own is returned as a failure
and the others go on; an error that a retry may cure (the server went away) fails the task once the other
tables are done, so that its retry redoes only what is missing.
"""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk import BaseOperator

from airflow_cdc_provider.core.config import RunConfig, SourceConfig, WorkConfig
from airflow_cdc_provider.core.contract import (
    Extraction,
    MergeInput,
    SourcePlan,
    TableFailure,
)
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.metrics import binlog_metrics
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.workdir import DELETE_FILE, EVENTS_FILE, UPSERT_FILE
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.lease import HoldsTableLeases
from airflow_cdc_provider.operators.metrics import send_metrics
from airflow_cdc_provider.operators.source import ReadsSource
from airflow_cdc_provider.stages.binlog_pass import PassSettings, binlog_pass, every_event
from airflow_cdc_provider.stages.events import write_events
from airflow_cdc_provider.stages.extract import (
    fills_of,
)
from airflow_cdc_provider.stages.replay import replay
from airflow_cdc_provider.stages.snapshot_run import (
    SnapshotSettings,
    finish_stage,
    snapshot_run,
    snapshot_settings,
)


class MySqlSnapshotOperator(ReadsSource, HoldsTableLeases, BaseOperator):
    """Load the tables the plan gives a snapshot: each read whole, with the binlog watermark taken before the
    read, into upsert files.

    Tables are read ``concurrency`` at a time, each in key order in keyset chunks; a killed or retried task
    resumes each table after its last finished chunk (on an object-store ``work_dir`` a table's files are
    uploaded when it is read whole, so a retry reads it again). Returns (XCom) a ``Captured``: a merge input
    per table.

    :param plan: the plan task's ``SourcePlan`` (templated: pass ``plan_task.output``).
    :param source: the configuration's ``source:`` (``SourceConfig``): the connection and its time limits, the
        tables read at the same time (``snapshot_concurrency``), the rows per keyset chunk, the connections each
        table is read on at once in key ranges (``snapshot_readers``, ``stages.snapshot``), the rows each read holds
        before writing them (``read_buffer_mb``, ``core.batches``), how often each read logs how far it is.
    :param work: the configuration's ``work:`` (``WorkConfig``): the connection of an object-store work dir.
    :param run: the configuration's ``run:`` (``RunConfig``): how long the run's table locks count as alive
        unrenewed (``operators.lease``).
    """

    template_fields = ("plan",)

    def __init__(self, *, plan: Any, source: SourceConfig, work: WorkConfig, run: RunConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan, self.source, self.work, self.run = plan, source, work, run

    @final_on_cdc_error
    def execute(self, context: Any) -> dict[str, Any]:
        plan = SourcePlan.model_validate(self.plan)
        with self._leased(context, [*plan.snapshots, *plan.diffs], plan.run):
            return snapshot_run(self._source_hook(), [*plan.snapshots, *plan.diffs],
                                lambda root: work_store(root, self.work.conn_id), self.settings, self.log).to_xcom()

    @property
    def settings(self) -> SnapshotSettings:
        return snapshot_settings(self.source)



class MySqlBinlogExtractOperator(ReadsSource, HoldsTableLeases, BaseOperator):
    """Read the row events of every incremental table of the run in one binlog pass, into raw files per table.

    The pass runs from the earliest committed watermark among the tables; a table whose watermark lies later
    skips the events it has. It ends before the first transaction that began at or after the run's
    ``stop_before`` (a scheduled run's data interval end), else at the server's position when the task starts.
    After a failover, a table's watermark of the old server is found again on the new one by its GTID
    position. A table whose start cannot be read (purged, another server without GTIDs), or whose range holds a
    change its policy
    refuses, is returned as a failure; the others go on. Returns (XCom) an ``Extraction``.

    :param plan: the plan task's ``SourcePlan`` (templated: pass ``plan_task.output``).
    :param source: the configuration's ``source:`` (``SourceConfig``): the connection and its time limits, how
        often the pass logs how far it is, the rows a re-read holds before writing them (``read_buffer_mb``), and
        the processes that decode the pass's row events beside it (``binlog_decoders``, ``stages.decode_workers``;
        0: the task decodes them).
    :param work: the configuration's ``work:`` (``WorkConfig``): the connection of an object-store work dir.
    :param run: the configuration's ``run:`` (``RunConfig``): the lock lease; ``on_broken_chain`` (``heal``: a
        table whose chain broke in the range goes to the heal task, which brings it level by a diff; ``stop``: it
        fails, naming the break); ``on_purged_binlog`` (``heal`` sends a table whose binlog from its watermark was
        purged to the heal task too; any other value fails it here: ``snapshot`` was decided by the plan).
    """

    template_fields = ("plan",)

    def __init__(self, *, plan: Any, source: SourceConfig, work: WorkConfig, run: RunConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan, self.source, self.work, self.run = plan, source, work, run

    @final_on_cdc_error
    def execute(self, context: Any) -> dict[str, Any]:
        plan = SourcePlan.model_validate(self.plan)
        with self._leased(context, plan.incrementals, plan.run):
            done = binlog_pass(self._source_hook(), plan.incrementals,
                               lambda root: work_store(root, self.work.conn_id), self.settings, self.log)
        if done.extraction.end is not None:
            send_metrics(binlog_metrics(self.dag_id, self.task_id.rpartition(".")[0], done.read_bytes,
                                        done.extraction.events))
        return done.extraction.to_xcom()

    @property
    def settings(self) -> PassSettings:
        return PassSettings(on_broken_chain=self.run.on_broken_chain, on_purged_binlog=self.run.on_purged_binlog,
                            decoders=self.source.binlog_decoders, read_buffer=self.source.read_buffer,
                            progress_seconds=self.source.progress_seconds)


class RawReplayOperator(HoldsTableLeases, BaseOperator):
    """Replay each changed table's raw files newest first into one upsert file and one delete file (Parquet);
    for a table with a changelog, each row with the binlog coordinate of its key's last change; for one whose
    changelog has ``mode: all``, an events file too: every row event of the range in binlog order.

    Returns (XCom) a ``Captured``: a merge input per table.

    :param plan: the plan task's ``SourcePlan`` (templated: pass ``plan_task.output``).
    :param extraction: the extract task's ``Extraction`` (templated: pass ``extract_task.output``).
    :param work: the configuration's ``work:`` (``WorkConfig``): the connection of an object-store work dir.
    :param run: the configuration's ``run:`` (``RunConfig``): the lock lease, and the key memory before a table's
        work is split into hash partitions on disk (``replay_memory_mb``).
    """

    template_fields = ("plan", "extraction")

    def __init__(self, *, plan: Any, extraction: Any, work: WorkConfig, run: RunConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan, self.extraction, self.work, self.run = plan, extraction, work, run

    @property
    def memory_budget(self) -> int:
        """Bytes of keys a table's replay keeps in memory before it splits its work into hash partitions."""
        return self.run.replay_memory_mb * 1024 * 1024

    @final_on_cdc_error
    def execute(self, context: Any) -> dict[str, Any]:
        plan = SourcePlan.model_validate(self.plan)
        extraction = Extraction.model_validate(self.extraction)
        with self._leased(context, [plan.table(part.source) for part in extraction.changed], plan.run):
            return self._replay(plan, extraction)

    def _replay(self, plan: SourcePlan, extraction: Extraction) -> dict[str, Any]:
        results: list[MergeInput | TableFailure] = []
        transient: list[str] = []
        for part in extraction.changed:
            table = plan.table(part.source)
            target = table.run_dir.root
            store = work_store(target, self.work.conn_id)
            fills = fills_of(part.fills)
            started = time.monotonic()
            try:
                # On an object store: the raw files fetched, the outputs uploaded once the replay has succeeded.
                with store.fetched(part.files) as raw, store.staging(target) as out:
                    result = replay(raw, out / UPSERT_FILE, out / DELETE_FILE,
                                    memory_budget=self.memory_budget, fills=fills,
                                    # a changelog row says which binlog change it comes from
                                    positions=table.table.changelog is not None)
                    # A changelog of every event: the range's row events in binlog order, beside the upsert file.
                    events = (write_events(raw, out / EVENTS_FILE, fills) if part.source in every_event([table])
                              else None)
                    files = [store.location_of(f, out, target) if f else None
                             for f in (result.upsert_file, result.delete_file, result.fills_file,
                                       events.events_file if events else None)]
            except CdcError as exc:
                self.log.error("Replay of %s failed: %s", part.source, exc)
                results.append(TableFailure(source=part.source, stage="replay", error=str(exc)))
                continue
            except Exception:
                self.log.exception("Replay of %s failed", part.source)
                transient.append(part.source)
                continue
            self.log.info("Replayed %s: %d raw records, %d upserts, %d deletes (%d partitions)", part.source,
                          result.records, result.upserts, result.deletes, result.partitions)
            if events is not None:
                self.log.info("%s: %d row events written to its changelog's events file", part.source, events.changes)
            results.append(MergeInput(
                source=part.source, mode=Mode.INCREMENTAL, upsert_files=(files[0],), delete_file=files[1],
                fills_file=files[2], fill_sources=tuple((f.column, tuple(f.sources)) for f in fills),
                columns=result.columns,
                key=result.key, end=part.end, as_of=extraction.as_of, source_columns=part.columns,
                upserts=result.upserts, deletes=result.deletes, reread=part.reread, changes=part.counts,
                start=part.start, seconds={"extract": part.seconds,
                                           "replay": round(time.monotonic() - started, 3)},
                left_partitions=part.left_partitions, events_file=files[3]))
        return finish_stage(self.log, "replay", results, transient).to_xcom()
