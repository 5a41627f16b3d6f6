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

from airflow_cdc_provider.core.batches import DEFAULT_READ_BUFFER
from airflow_cdc_provider.core.contract import (
    Extraction,
    MergeInput,
    SourcePlan,
    TableFailure,
)
from airflow_cdc_provider.core.errors import CdcError
from airflow_cdc_provider.core.metrics import binlog_metrics
from airflow_cdc_provider.core.modes import Mode
from airflow_cdc_provider.core.planning import HEALS
from airflow_cdc_provider.core.workdir import DELETE_FILE, EVENTS_FILE, UPSERT_FILE
from airflow_cdc_provider.hooks.mysql_source import MySqlSourceHook
from airflow_cdc_provider.hooks.work_store import work_store
from airflow_cdc_provider.operators.failures import final_on_cdc_error
from airflow_cdc_provider.operators.lease import DEFAULT_LEASE_SECONDS, HoldsTableLeases
from airflow_cdc_provider.operators.metrics import send_metrics
from airflow_cdc_provider.operators.source import DEFAULT_READ_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT, ReadsSource
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
)


class MySqlSnapshotOperator(ReadsSource, HoldsTableLeases, BaseOperator):
    """Load the tables the plan gives a snapshot: each read whole, with the binlog watermark taken before the
    read, into upsert files.

    Tables are read ``concurrency`` at a time, each in key order in keyset chunks; a killed or retried task
    resumes each table after its last finished chunk (on an object-store ``work_dir`` a table's files are
    uploaded when it is read whole, so a retry reads it again). Returns (XCom) a ``Captured``: a merge input
    per table.

    :param plan: the plan task's ``SourcePlan`` (templated: pass ``plan_task.output``).
    :param mysql_conn_id: Airflow connection (conn_type ``mysql``) of the capture user.
    :param concurrency: tables read at the same time.
    :param chunk_rows: rows per keyset chunk.
    :param readers: connections each table is read on at once, in key ranges (``stages.snapshot``).
    :param read_buffer: bytes of rows each table's read holds before writing them (``core.batches``).
    :param work_conn_id: the connection of an object-store ``work_dir`` (see ``hooks.work_store``).
    :param lock_lease_seconds: how long the run's table locks count as alive unrenewed (see ``operators.lease``).
    :param progress_seconds: how often each table's read logs how far it is (``core.progress``).
    :param statement_timeout_seconds: the longest a statement may run on the source before the server stops it
        (``source: statement_timeout_seconds``).
    :param read_timeout_seconds: the longest the source may stay silent (``source: read_timeout_seconds``).
    """

    template_fields = ("plan",)

    def __init__(self, *, plan: Any, mysql_conn_id: str = MySqlSourceHook.default_conn_name, concurrency: int = 4,
                 chunk_rows: int = 50_000, readers: int = 1, work_conn_id: str | None = None,
                 lock_lease_seconds: int | None = DEFAULT_LEASE_SECONDS, progress_seconds: float = 10.0,
                 read_buffer: int = DEFAULT_READ_BUFFER, statement_timeout_seconds: int = DEFAULT_STATEMENT_TIMEOUT,
                 read_timeout_seconds: int = DEFAULT_READ_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.statement_timeout_seconds, self.read_timeout_seconds = statement_timeout_seconds, read_timeout_seconds
        self.plan, self.mysql_conn_id, self.concurrency, self.chunk_rows = plan, mysql_conn_id, concurrency, chunk_rows
        self.read_buffer, self.readers = read_buffer, readers
        self.work_conn_id, self.lock_lease_seconds = work_conn_id, lock_lease_seconds
        self.progress_seconds = progress_seconds

    @final_on_cdc_error
    def execute(self, context: Any) -> dict[str, Any]:
        plan = SourcePlan.model_validate(self.plan)
        with self._leased(context, [*plan.snapshots, *plan.diffs], plan.run):
            return snapshot_run(self._source_hook(), [*plan.snapshots, *plan.diffs],
                                lambda root: work_store(root, self.work_conn_id), self.settings, self.log).to_xcom()

    @property
    def settings(self) -> SnapshotSettings:
        return SnapshotSettings(concurrency=self.concurrency, chunk_rows=self.chunk_rows, readers=self.readers,
                                read_buffer=self.read_buffer, progress_seconds=self.progress_seconds)



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
    :param mysql_conn_id: Airflow connection (conn_type ``mysql``) of the capture user.
    :param work_conn_id: the connection of an object-store ``work_dir`` (see ``hooks.work_store``).
    :param lock_lease_seconds: how long the run's table locks count as alive unrenewed (see ``operators.lease``).
    :param progress_seconds: how often the pass logs how far it is (``core.progress``).
    :param statement_timeout_seconds: the longest a statement may run on the source before the server stops it
        (``source: statement_timeout_seconds``).
    :param read_timeout_seconds: the longest the source may stay silent (``source: read_timeout_seconds``).
    :param read_buffer: bytes of rows a re-read holds before writing them (``core.batches``).
    :param decoders: processes that decode the pass's row events beside it (``stages.decode_workers``); 0: the
        task decodes them.
    :param on_broken_chain: ``heal`` (a table whose chain broke in the range goes to the heal task, which brings it
        level by a diff) or ``stop`` (it fails, naming the break; ``run: on_broken_chain``).
    :param on_purged_binlog: ``heal`` sends a table whose binlog from its watermark was purged to the heal task
        too; any other value fails it here (``snapshot`` was decided by the plan).
    """

    template_fields = ("plan",)

    def __init__(self, *, plan: Any, mysql_conn_id: str = MySqlSourceHook.default_conn_name,
                 work_conn_id: str | None = None, lock_lease_seconds: int | None = DEFAULT_LEASE_SECONDS,
                 progress_seconds: float = 10.0, read_buffer: int = DEFAULT_READ_BUFFER,
                 statement_timeout_seconds: int = DEFAULT_STATEMENT_TIMEOUT,
                 read_timeout_seconds: int = DEFAULT_READ_TIMEOUT, decoders: int = 0, on_broken_chain: str = HEALS,
                 on_purged_binlog: str = HEALS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.on_broken_chain, self.on_purged_binlog = on_broken_chain, on_purged_binlog
        self.statement_timeout_seconds, self.read_timeout_seconds = statement_timeout_seconds, read_timeout_seconds
        self.plan, self.mysql_conn_id, self.work_conn_id = plan, mysql_conn_id, work_conn_id
        self.lock_lease_seconds, self.progress_seconds = lock_lease_seconds, progress_seconds
        self.read_buffer, self.decoders = read_buffer, decoders

    @final_on_cdc_error
    def execute(self, context: Any) -> dict[str, Any]:
        plan = SourcePlan.model_validate(self.plan)
        with self._leased(context, plan.incrementals, plan.run):
            done = binlog_pass(self._source_hook(), plan.incrementals,
                               lambda root: work_store(root, self.work_conn_id), self.settings, self.log)
        if done.extraction.end is not None:
            send_metrics(binlog_metrics(self.dag_id, self.task_id.rpartition(".")[0], done.read_bytes,
                                        done.extraction.events))
        return done.extraction.to_xcom()

    @property
    def settings(self) -> PassSettings:
        return PassSettings(on_broken_chain=self.on_broken_chain, on_purged_binlog=self.on_purged_binlog,
                            decoders=self.decoders, read_buffer=self.read_buffer,
                            progress_seconds=self.progress_seconds)


class RawReplayOperator(HoldsTableLeases, BaseOperator):
    """Replay each changed table's raw files newest first into one upsert file and one delete file (Parquet);
    for a table with a changelog, each row with the binlog coordinate of its key's last change; for one whose
    changelog has ``mode: all``, an events file too: every row event of the range in binlog order.

    Returns (XCom) a ``Captured``: a merge input per table.

    :param plan: the plan task's ``SourcePlan`` (templated: pass ``plan_task.output``).
    :param extraction: the extract task's ``Extraction`` (templated: pass ``extract_task.output``).
    :param memory_budget: bytes of key memory before a table's work is split into hash partitions on disk.
    :param work_conn_id: the connection of an object-store ``work_dir`` (see ``hooks.work_store``).
    :param lock_lease_seconds: how long the run's table locks count as alive unrenewed (see ``operators.lease``).
    """

    template_fields = ("plan", "extraction")

    def __init__(self, *, plan: Any, extraction: Any, memory_budget: int = 512 * 1024 * 1024,
                 work_conn_id: str | None = None, lock_lease_seconds: int | None = DEFAULT_LEASE_SECONDS,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan, self.extraction, self.memory_budget = plan, extraction, memory_budget
        self.work_conn_id, self.lock_lease_seconds = work_conn_id, lock_lease_seconds

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
            store = work_store(target, self.work_conn_id)
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
