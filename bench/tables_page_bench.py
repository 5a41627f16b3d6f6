"""The CDC tables page with 2,000 tables: how long the api-server takes to give the page its rows.

    .venv/bin/python bench/tables_page_bench.py [--dags 20] [--tables-per-dag 100] [--runs 20] [--repeat 5] [--keep]

Target: the first answer of ``GET /cdc/api/tables`` (every table's row, what the page shows) in under a second on
this machine, for 2,000 tables (20 DAGs of 100 tables, by default).

What it builds, in a temporary directory (removed at the end unless ``--keep``):

- an Airflow home with a SQLite metadata DB (WAL mode, ``airflow db migrate``), and one DAG file per DAG: a real
  ``cdc_source_group`` (group ``source``) over ``--tables-per-dag`` tables, ``schedule=None``, paused, serialized
  into the DB by ``airflow dags reserialize`` (nothing connects to MySQL, Spark or a metastore);
- ``--runs`` finished DAG runs per DAG, made by Airflow's own ``create_dagrun`` on the serialized DAG, so their
  task instances are the real ones (the plan task's ``operator`` is ``CdcPlanOperator``), the ``table`` task
  expanded to one instance per table written or failed, with start and end times; and the XComs the tasks push
  (as the Execution API stores them: JSON): the check's ``CheckResult``, the plan's ``SourcePlan`` (every
  table with its columns, run plan and committed version), the extract's ``Extraction``, the merge's
  ``outcomes`` (one ``TableOutcome`` per table: mostly committed or idle, a few failed with an error) and its
  return value, the summary's lines; and an asset event for each commit, as the table tasks emit them. The first
  run of a DAG is a snapshot, the others incremental, 5 minutes apart;
- a work directory with each table's work state, through ``WorkStore`` (mode 0700): ``ledger/committed.json``
  (the last commit or idle advance), ``verify/state.json`` (with a ``last`` verify mark for most), a
  ``ledger/lock.json`` for a few (a run holding them now) and a ``verify/repair.json`` for a few.

The DAGs are not all alike, so that every kind of row is on the page: most are current; some DAGs' runs ended 3
hours ago (their tables are behind the 1 h lag); some DAGs' latest run failed in its check, before any outcome
(their tables are stopped by that task); and a few tables failed in their source's two latest runs (stopped by
their outcome's error).

Then it starts an api-server (one worker; the provider's plugin mounts ``/cdc`` on it) on that DB, takes an admin
token (``GET /auth/token``, ``simple_auth_manager_all_admins``) and times, from request to the whole body:

- the very first ``GET /cdc/api/tables?max_lag=1h`` after the api-server is up: it builds the plugin's app (its
  first request: the provider's modules are imported then) and reads every table; then ``--repeat`` more (median,
  min, max). Each answer must hold every table's row; its rows' states are compared with those the bench built;
- ``GET /cdc/`` (the page's HTML), and ``GET /cdc/api/table`` of one table (its row, runs and commits): the first
  and ``--repeat`` more;
- in a fresh process (the api-server stopped), on the same DB and work directory: importing and building the
  plugin's app, and ``overview.read.table_rows`` split into its parts: the metadata DB's reads (the latest plans,
  the latest outcomes, the runs failed before an outcome), the work directory's reads, and the rows made of them;
  then what the endpoint does after (``to_xcom``, FastAPI's encoding into JSON). The first call, then the medians
  of ``--repeat`` more.

The api-server loads the plugin as its ``airflow.plugins`` entry point; a provider installed without one (whose
plugin only its provider information lists) is served with ``[core] lazy_discover_providers`` off, and the bench
says so.

Printed: the sizes built, the fill's times, every figure above, whether the first answer is under the target, and
a last line of JSON with the figures; the exit code is 1 when the first answer misses the target. Every process it
started is stopped, also on an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Nothing here imports Airflow at module level: Airflow reads its settings (the metadata DB) when first imported,
# which must be after this bench has set them (``use_deployment_settings``).
import httpx  # noqa: E402

from airflow_cdc_provider.core.assets import event_extra, hive_asset_uri  # noqa: E402
from airflow_cdc_provider.core.contract import (  # noqa: E402
    TABLES_KEY,
    CapturedTable,
    CheckResult,
    Extraction,
    SourcePlan,
    TableExtraction,
    TableOutcome,
    TablePlan,
)
from airflow_cdc_provider.core.holder import Owner  # noqa: E402
from airflow_cdc_provider.core.ledger import Committed, Lock, RunPlan, RunRef  # noqa: E402
from airflow_cdc_provider.core.modes import Mode, Status, VerifyStatus  # noqa: E402
from airflow_cdc_provider.core.status import SourceTables  # noqa: E402
from airflow_cdc_provider.core.verify import RepairRequest, VerifyMark, VerifyState  # noqa: E402
from airflow_cdc_provider.core.watermark import Watermark  # noqa: E402
from airflow_cdc_provider.storage import WorkStore  # noqa: E402
from tests.e2e.deployment import AirflowDeployment, DeploymentError, _enable_wal, _free_port, _tail  # noqa: E402

TARGET_SECONDS = 1.0
GROUP = "source"
MAX_LAG = "1h"
RUN_EVERY = dt.timedelta(minutes=5)
METASTORE_URI = "thrift://metastore.example:9083"
SERVER_UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

# Which DAGs are not current (by their index modulo 10): runs that ended 3 hours ago (behind the 1 h lag), and a
# latest run that failed in its check, before any outcome (stopped by that task).
BEHIND_DAGS = {5}
STOPPED_DAGS = {7}
COMMITTED_SHARE = 0.3  # of an incremental run's tables, the share with changes (a new version); the rest idle
LOCKED_EVERY = 97  # one table in this many is locked by a run now
VERIFIED_SHARE = 0.7  # of the tables, the share with a last verify mark
DIFFERENT_EVERY = 89  # one table in this many: its last verify found differences, and a repair is pending

DAG_FILE = '''\
from datetime import datetime, timezone

from airflow.sdk import DAG

from airflow_cdc_provider.core.config import CdcConfig
from airflow_cdc_provider.task_groups import cdc_params, cdc_source_group

CONFIG = {config!r}

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False,
         is_paused_upon_creation=True, params=cdc_params(), tags=["cdc", "bench"]):
    cdc_source_group(CdcConfig.from_dict(CONFIG), group_id={group!r})
'''

# (name, MySQL COLUMN_TYPE): a table's columns are its key and then some of these, 8 to 12 in all.
COLUMN_POOL = (
    ("customer_id", "int(10) unsigned"), ("status", "varchar(32)"), ("amount", "decimal(12,2)"),
    ("currency", "char(3)"), ("note", "text"), ("created_at", "datetime(3)"),
    ("updated_at", "timestamp(6)"), ("is_active", "tinyint(1)"), ("code", "varchar(64)"), ("payload", "json"),
    ("quantity", "smallint(6)"), ("weight", "double"), ("country", "varchar(2)"), ("region_id", "int(11)"),
)


@dataclass
class Ledger:
    """A table's committed version as its runs leave it (what its committed.json says)."""

    version: int = 0
    rows: int = 0
    location: str = ""
    watermark: Watermark | None = None
    as_of: dt.datetime | None = None
    run: RunRef | None = None
    mode: Mode = Mode.SNAPSHOT


@dataclass
class Built:
    """What the fill made: counts, and the moments it took."""

    tables: int = 0
    runs: int = 0
    task_instances: int = 0
    xcoms: int = 0
    xcom_bytes: int = 0
    asset_events: int = 0
    files: int = 0
    expected: Counter = field(default_factory=Counter)  # rows by the state the bench made them for
    detail: dict[str, str] = field(default_factory=dict)  # the table whose own view is timed
    seconds: dict[str, float] = field(default_factory=dict)


# The data


def dag_id_of(d: int) -> str:
    return f"cdc_bench_{d:02d}"


def columns_of(d: int, n: int) -> tuple[tuple[str, str], ...]:
    rng = random.Random(d * 1000 + n)
    extra = rng.sample(COLUMN_POOL, rng.randint(7, 11))
    return (("id", "bigint(20) unsigned"), *extra)


def config_of(d: int, tables: int, work_dir: Path, warehouse: Path) -> dict[str, Any]:
    return {
        "mysql_conn_id": f"mysql_shop_{d:02d}", "spark_conn_id": "spark_default", "work_dir": str(work_dir),
        "hive": {"database": f"ods_{d:02d}", "warehouse_dir": str(warehouse), "metastore_uri": METASTORE_URI},
        "tables": [{"source": f"shop_{d:02d}.t_{n:03d}", "target": f"t_{n:03d}"} for n in range(tables)],
        "verify": {"slices": 0},
    }


def captured_tables(d: int, tables: int) -> list[CapturedTable]:
    return [CapturedTable(source=f"shop_{d:02d}.t_{n:03d}", hive_table=f"ods_{d:02d}.t_{n:03d}",
                          schema_changes="strict", key=("id",), columns=columns_of(d, n))
            for n in range(tables)]


def watermark(d: int, step: int) -> Watermark:
    """The source's binlog position at a run's step (two steps per run), ever increasing."""
    return Watermark(file=f"binlog.{1000 + step // 40:06d}", position=4 + (step % 40) * 2_500_000 + 1,
                     server_id=100 + d, gtid=f"{SERVER_UUID}:1-{50_000 + step * 1_377}", server_uuid=SERVER_UUID)


def failing(d: int, n: int, tables: int) -> bool:
    """The few tables whose source's two latest runs fail them: one table in every third DAG."""
    return d % 3 == 1 and n == (d * 7) % tables


@dataclass
class RunTimes:
    logical: dt.datetime
    tasks: dict[str, tuple[dt.datetime, dt.datetime]]
    as_of: dt.datetime
    end: dt.datetime


TASK_SECONDS = (("check", 3), ("plan", 2), ("snapshot", 1), ("extract", 8), ("replay", 4), ("heal", 1),
                ("merge", 38), ("table", 2), ("verify", 2), ("summary", 1))


def run_times(logical: dt.datetime, snapshot: bool) -> RunTimes:
    at, tasks = logical + dt.timedelta(seconds=4), {}
    for task, seconds in TASK_SECONDS:
        seconds = seconds * 6 if snapshot and task in ("snapshot", "merge") else seconds
        tasks[task] = (at, at + dt.timedelta(seconds=seconds))
        at = tasks[task][1] + dt.timedelta(milliseconds=600)
    return RunTimes(logical=logical, tasks=tasks, as_of=tasks["extract"][0], end=at)


def outcome_for(ledger: Ledger, table: CapturedTable, run: RunRef, mode: Mode, status: Status, times: RunTimes,
                start: Watermark | None, end: Watermark, warehouse: Path, rng: random.Random) -> TableOutcome:
    common = {"source": table.source, "hive_table": table.hive_table, "mode": mode}
    if status == Status.FAILED:
        return TableOutcome(
            **common, status=status, start=start, reason="the merge of this table failed",
            error=("MergeFailed: the Spark application for ods tables exited with code 1: "
                   "org.apache.spark.sql.AnalysisException: [CAST_INVALID_INPUT] The value 'n/a' of the type "
                   f"\"STRING\" cannot be cast to \"DECIMAL(12,2)\" in {table.hive_table}.amount. Fix the source "
                   "row or the column's type, then clear the merge task (docs/operations.md#a-failed-table)."),
            seconds={"extract": 7.9, "replay": 0.4})
    database, name = table.hive_table.split(".", 1)
    if status == Status.COMMITTED:
        inserted, updated, deleted = (ledger.rows, 0, 0) if mode == Mode.SNAPSHOT else \
            (rng.randint(0, 400), rng.randint(0, 900), rng.randint(0, 60))
        rows = ledger.rows + (0 if mode == Mode.SNAPSHOT else inserted - deleted)
        version = ledger.version + 1
        location = f"file:{warehouse}/{database}.db/{name}/v_{version:06d}"
        ledger.version, ledger.rows, ledger.location, ledger.mode = version, rows, location, mode
        ledger.watermark, ledger.as_of, ledger.run = end, times.as_of, run
        seconds = {"snapshot": 31.0, "merge": 24.6} if mode == Mode.SNAPSHOT else \
            {"extract": 7.9, "replay": 0.4, "merge": round(rng.uniform(4, 30), 1)}
        return TableOutcome(**common, status=status, version=version, location=location, rows=rows,
                            upserts=inserted + updated, deletes=deleted, watermark=end, start=start,
                            as_of=times.as_of, changes={"I": inserted, "U": updated, "D": deleted},
                            seconds=seconds)
    # idle: no change in the range, the watermark advances on the same version
    ledger.watermark, ledger.as_of, ledger.run, ledger.mode = end, times.as_of, run, Mode.INCREMENTAL
    return TableOutcome(**common, status=status, reason="no change in the range: the watermark advanced",
                        version=ledger.version, location=ledger.location, rows=ledger.rows, watermark=end,
                        start=start, as_of=times.as_of, seconds={"extract": 7.9})


def table_plan(ledger: Ledger, table: CapturedTable, run: RunRef, mode: Mode, work_dir: Path) -> TablePlan:
    committed = None
    if ledger.version:
        committed = Committed(version=ledger.version, location=ledger.location, watermark=ledger.watermark,
                              as_of=ledger.as_of, run=ledger.run, mode=ledger.mode, columns=table.columns)
    if mode == Mode.SNAPSHOT:
        plan = RunPlan(run=run, mode=mode, reason="the table has no committed version yet: initial load")
    else:
        plan = RunPlan(run=run, mode=mode, input_version=ledger.version, start=ledger.watermark,
                       reason=f"changes after version {ledger.version} (as of {ledger.as_of.isoformat()})",
                       start_columns=table.columns)
    return TablePlan(table=table, plan=plan, table_dir=table.table_dir(str(work_dir)), committed=committed)


# The metadata DB


def use_deployment_settings(env: dict[str, str]) -> None:
    """This process's Airflow settings: the deployment's (its DB), before anything imports Airflow."""
    if "airflow" in sys.modules:
        raise RuntimeError("Airflow was imported before the bench set its settings")
    for key in [k for k in os.environ if k.startswith(("AIRFLOW_", "_AIRFLOW"))]:
        del os.environ[key]
    os.environ.update(env)


def fill_runs(args: argparse.Namespace, work_dir: Path, warehouse: Path, now: dt.datetime,
              built: Built) -> dict[tuple[int, int], Ledger]:
    """Every DAG's runs with their task instances, XComs and asset events; each table's ledger as they leave it."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    ledgers: dict[tuple[int, int], Ledger] = {}
    for d in range(args.dags):
        dag_id = dag_id_of(d)
        rng = random.Random(d)
        tables = captured_tables(d, args.tables_per_dag)
        with create_session() as session:
            dag = SerializedDagModel.get_dag(dag_id, session=session)
            if dag is None:
                raise RuntimeError(f"{dag_id} was not serialized (see airflow dags reserialize's output)")
            table_task = dag.get_task(f"{GROUP}.table")
            assets = {}
            for table in tables:
                uri = hive_asset_uri(METASTORE_URI, table.hive_table)
                assets[table.hive_table] = AssetModel(name=uri, uri=uri, group="asset")
            session.add_all(assets.values())
            session.flush()
            last = now - (dt.timedelta(hours=3) if d % 10 in BEHIND_DAGS else dt.timedelta(minutes=3))
            for r in range(args.runs):
                logical = (last - (args.runs - 1 - r) * RUN_EVERY).replace(microsecond=0)
                run_id = f"manual__{logical.isoformat()}"
                run = RunRef(dag_id=dag_id, run_id=run_id)
                snapshot = r == 0
                check_failed = d % 10 in STOPPED_DAGS and r == args.runs - 1 and r > 0
                times = run_times(logical, snapshot)
                dag_run = dag.create_dagrun(
                    run_id=run_id, logical_date=logical, data_interval=(logical, logical), run_after=logical,
                    run_type=DagRunType.MANUAL, triggered_by=DagRunTriggeredByType.UI, state=DagRunState.RUNNING,
                    start_date=times.logical, conf={}, session=session)
                start_step, end_step = 2 * r, 2 * r + 1
                mode = Mode.SNAPSHOT if snapshot else Mode.INCREMENTAL
                # What the run did to each table
                outcomes, plans, extracted = [], [], []
                if not check_failed:
                    for n, table in enumerate(tables):
                        ledger = ledgers.setdefault((d, n), Ledger())
                        plans.append(table_plan(ledger, table, run, mode, work_dir))
                        start = None if snapshot else ledger.watermark
                        if snapshot:
                            ledger.rows = rng.randint(1_000, 5_000_000)
                            status = Status.COMMITTED
                        elif failing(d, n, args.tables_per_dag) and r >= args.runs - 2:
                            status = Status.FAILED
                        else:
                            status = Status.COMMITTED if rng.random() < COMMITTED_SHARE else Status.IDLE
                        outcome = outcome_for(ledger, table, run, mode, status, times, start,
                                              watermark(d, end_step), warehouse, rng)
                        outcomes.append(outcome)
                        if not snapshot:
                            changes = outcome.changes or {"I": 0, "U": 0, "D": 0}
                            extracted.append(TableExtraction(
                                source=table.source, start=start, end=watermark(d, end_step), counts=changes,
                                files=(f"{work_dir}/{table.hive_table}/runs/{run.key}/raw/part-0000.jsonl.zst",)
                                if sum(changes.values()) else (), columns=table.columns, seconds=7.9))
                written = [o for o in outcomes if o.status not in (Status.IDLE, Status.NOTHING)]
                # The task instances, as the run left them
                tis = {ti.task_id.split(".", 1)[1]: ti for ti in dag_run.get_task_instances(session=session)}
                if tis["plan"].operator != "CdcPlanOperator":  # how the readers find a source's plan
                    raise RuntimeError(f"the plan task's operator is {tis['plan'].operator!r}")
                failed_tables = []
                mapped = tis["table"]
                for task, ti in tis.items():
                    ti.start_date, ti.end_date = times.tasks[task]
                    ti.queued_dttm = ti.start_date - dt.timedelta(milliseconds=300)
                    ti.duration = (ti.end_date - ti.start_date).total_seconds()
                    ti.try_number, ti.hostname = 1, "worker-1"
                    if check_failed:
                        ti.state = {"check": TaskInstanceState.FAILED, "summary": TaskInstanceState.SUCCESS}.get(
                            task, TaskInstanceState.UPSTREAM_FAILED)
                    else:
                        ti.state = TaskInstanceState.SUCCESS
                if not check_failed:
                    if not written:
                        mapped.state = TaskInstanceState.SKIPPED
                    for i, outcome in enumerate(written):
                        ti = mapped if i == 0 else TaskInstance(table_task, dag_version_id=mapped.dag_version_id,
                                                                run_id=run_id, map_index=i)
                        # The rendered map index (the table's name: ``map_index_template``), its column.
                        ti.map_index, ti._rendered_map_index = i, outcome.source
                        ti.start_date, ti.end_date = times.tasks["table"]
                        ti.queued_dttm, ti.duration = mapped.queued_dttm, mapped.duration
                        ti.try_number, ti.hostname = 1, "worker-1"
                        ti.state = TaskInstanceState.FAILED if outcome.status == Status.FAILED \
                            else TaskInstanceState.SUCCESS
                        if outcome.status == Status.FAILED:
                            failed_tables.append(outcome.source)
                        if i:
                            session.add(ti)
                        if outcome.status == Status.COMMITTED:
                            session.add(AssetEvent(
                                asset_id=assets[outcome.hive_table].id, extra=event_extra(outcome),
                                source_dag_id=dag_id, source_task_id=f"{GROUP}.table", source_run_id=run_id,
                                source_map_index=i, timestamp=times.tasks["table"][1]))
                            built.asset_events += 1
                    built.task_instances += max(len(written), 1) - 1
                built.task_instances += len(tis)
                session.flush()
                # The XComs the tasks pushed
                xcoms: list[tuple[str, str, Any]] = []
                if not check_failed:
                    xcoms += [
                        ("check", "return_value", CheckResult(flavor="mysql", watermark=watermark(d, end_step),
                                                              tables=tuple(tables)).to_xcom()),
                        ("plan", "return_value", SourcePlan(run=run, tables=tuple(plans)).to_xcom()),
                        ("plan", TABLES_KEY, SourceTables.of(dag_id, GROUP, SourcePlan(run=run, tables=tuple(plans)))
                         .to_xcom()),
                        ("merge", "outcomes", [o.to_xcom() for o in outcomes]),
                        ("merge", "return_value", [[o.to_xcom()] for o in written]),
                        ("summary", "return_value", [f"{o.source} → {o.hive_table}: {o.status}"
                                                     f"{f' version {o.version}' if o.version else ''}"
                                                     for o in outcomes]),
                    ]
                    if not snapshot:
                        xcoms.append(("extract", "return_value", Extraction(
                            start=watermark(d, start_step), end=watermark(d, end_step), as_of=times.as_of,
                            events=sum(sum(t.counts.values()) for t in extracted),
                            tables=tuple(extracted)).to_xcom()))
                for task, key, value in xcoms:
                    XComModel.set(key=key, value=value, dag_id=dag_id, task_id=f"{GROUP}.{task}", run_id=run_id,
                                  serialize=False, session=session)  # as the Execution API stores it
                    built.xcom_bytes += len(json.dumps(value))
                built.xcoms += len(xcoms)
                if r == args.runs - 1:  # the state the page should show each table in
                    for outcome in outcomes:
                        built.expected["stopped" if outcome.status == Status.FAILED else
                                       "behind" if d % 10 in BEHIND_DAGS else "current"] += 1
                    if check_failed:
                        built.expected["stopped"] += len(tables)
                dag_run.state = DagRunState.FAILED if check_failed or failed_tables else DagRunState.SUCCESS
                dag_run.end_date = times.end
                built.runs += 1
                session.flush()
    return ledgers


# The work directory


def write_work_state(args: argparse.Namespace, work_dir: Path, ledgers: dict[tuple[int, int], Ledger],
                     now: dt.datetime, built: Built) -> None:
    store = WorkStore(root=str(work_dir)).open_root()
    rng = random.Random(7)
    count = 0
    for d in range(args.dags):
        for n, table in enumerate(captured_tables(d, args.tables_per_dag)):
            ledger = ledgers.get((d, n))
            table_dir = table.table_dir(str(work_dir))
            if ledger is not None and ledger.version:
                store.write(table_dir.committed, Committed(
                    version=ledger.version, location=ledger.location, watermark=ledger.watermark,
                    as_of=ledger.as_of, run=ledger.run, mode=ledger.mode, columns=table.columns))
                built.files += 1
            count += 1
            last = None
            if ledger is not None and ledger.run is not None and rng.random() < VERIFIED_SHARE:
                different = count % DIFFERENT_EVERY == 0
                last = VerifyMark(run=ledger.run, at=ledger.as_of + dt.timedelta(seconds=70), version=ledger.version,
                                  status=VerifyStatus.DIFFERENT if different else VerifyStatus.CLEAN, buckets=64,
                                  differing_buckets=2 if different else 0, differences=17 if different else 0)
                if different:
                    store.write(table_dir.repair, RepairRequest(buckets=64, which=(5, 41), version=ledger.version,
                                                                run=ledger.run.key))
                    built.files += 1
            store.write(table_dir.verify_state, VerifyState(runs_since=rng.randint(0, 23),
                                                            next_slice=rng.randint(0, 23), last=last))
            built.files += 1
            if count % LOCKED_EVERY == 0:
                holder = RunRef(dag_id=dag_id_of(d), run_id=f"manual__{now.replace(microsecond=0).isoformat()}")
                store.write(table_dir.lock, Lock.taken(holder, now - dt.timedelta(seconds=20),
                                                       dt.timedelta(minutes=10),
                                                       Owner(host="worker-1", pid=4242, task=f"{GROUP}.merge")))
                built.files += 1


# The api-server


def plugin_settings() -> dict[str, str]:
    """What the api-server needs to load the provider's plugin (``/cdc``). Airflow 3 loads the plugins that a
    provider lists in its provider info (``get_provider_info``: "plugins") only when ``[core]
    lazy_discover_providers`` is off (``plugins_manager._get_plugins``), and it is on by default; the plugins of an
    ``airflow.plugins`` entry point it always loads. Without such an entry point, the setting is turned off here."""
    from importlib.metadata import entry_points

    if any(e.value.startswith("airflow_cdc_provider.") for e in entry_points(group="airflow.plugins")):
        return {}
    return {"AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "False"}


def wait_up(deployment: AirflowDeployment, timeout: float) -> None:
    """Until the api-server answers its health check with a healthy metadata DB."""
    deadline, last = time.monotonic() + timeout, "(no answer yet)"
    while time.monotonic() < deadline:
        process = deployment.processes["api-server"]
        if process.poll() is not None:
            raise DeploymentError(f"the api-server exited with code {process.returncode}")
        try:
            health = deployment.api.health()
            if health["metadatabase"]["status"] == "healthy":
                return
            last = str(health)
        except (httpx.TransportError, httpx.HTTPStatusError) as error:
            last = repr(error)
        time.sleep(0.3)
    raise DeploymentError(f"the api-server was not up in {timeout:.0f} s: {last}")


def timed_get(http: httpx.Client, path: str, **params: Any) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    response = http.get(path, params=params)
    response.read()
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} {params} -> {response.status_code}: {response.text[:2000]}")
    if "/api/" in path and not response.headers.get("content-type", "").startswith("application/json"):
        # The UI's catch-all answers any path it does not know with its own page: /cdc is not mounted.
        raise RuntimeError(f"GET {path} gave {response.headers.get('content-type')}, not JSON: the api-server did "
                           f"not load the provider's plugin. {response.text[:200]}")
    return seconds, response


def time_requests(args: argparse.Namespace, deployment: AirflowDeployment, built: Built) -> dict[str, Any]:
    token = deployment.api.token()
    figures: dict[str, Any] = {}
    with httpx.Client(base_url=deployment.url, timeout=300,
                      headers={"Authorization": f"Bearer {token}"}) as http:
        first, response = timed_get(http, "/cdc/api/tables", max_lag=MAX_LAG)
        answer = response.json()
        states = Counter(row["state"] for row in answer["tables"])
        figures.update(first=first, rows=len(answer["tables"]), body_bytes=len(response.content),
                       states=dict(states))
        if len(answer["tables"]) != built.tables:
            raise RuntimeError(f"GET /cdc/api/tables gave {len(answer['tables'])} rows, not {built.tables}")
        again = []
        for _ in range(args.repeat):
            seconds, response = timed_get(http, "/cdc/api/tables", max_lag=MAX_LAG)
            if len(response.json()["tables"]) != built.tables:
                raise RuntimeError("a later GET /cdc/api/tables gave another number of rows")
            again.append(seconds)
        figures["again"] = again
        figures["page"], page = timed_get(http, "/cdc/")
        if "<html" not in page.text.lower():
            raise RuntimeError(f"GET /cdc/ gave no page: {page.text[:300]}")
        figures["page_bytes"] = len(page.content)
        figures["detail"], detail = timed_get(http, "/cdc/api/table", **built.detail, max_lag=MAX_LAG)
        body = detail.json()
        figures.update(detail_runs=len(body.get("runs", ())), detail_commits=len(body.get("commits", ())),
                       detail_state=body["status"]["state"])
        figures["detail_again"] = [timed_get(http, "/cdc/api/table", **built.detail, max_lag=MAX_LAG)[0]
                                   for _ in range(args.repeat)]
    return figures


# In a process of its own


def split_in_process(args: argparse.Namespace, env: dict[str, str]) -> dict[str, float]:
    """The figures of ``split`` (``--split``), from a fresh process on the same DB and work directory: one whose heap
    holds what the api-server's would, not what filling the DB left in this one."""
    done = subprocess.run([sys.executable, __file__, "--split", "--dags", str(args.dags), "--repeat",
                           str(args.repeat)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the in-process split failed ({done.returncode}):\n{done.stdout[-3000:]}"
                           f"{done.stderr[-5000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# What the plugin's first request costs before it reads anything: importing the provider's modules the app needs
# and building the app, in a process that has loaded what the api-server has (and none of the provider's modules,
# which this bench's own imports would have loaded).
APP_BUILD = """
import time
import airflow.api_fastapi.app
from airflow.api_fastapi.core_api.security import get_user
started = time.perf_counter()
from airflow_cdc_provider.overview.api import create_app
create_app()
print(time.perf_counter() - started)
"""


def app_build(env: dict[str, str]) -> float:
    done = subprocess.run([sys.executable, "-c", APP_BUILD], env=env, cwd=tempfile.gettempdir(), capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"building the plugin's app failed ({done.returncode}):\n{done.stderr[-5000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def split(args: argparse.Namespace) -> dict[str, float]:
    """``table_rows``' parts, timed apart (as ``overview.read.table_rows`` does them) and whole, then the
    endpoint's making of its JSON: the first call and the medians of ``--repeat`` more."""
    from airflow.utils.session import create_session
    from sqlalchemy.orm import configure_mappers

    from airflow_cdc_provider.core.status import TableRows
    from airflow_cdc_provider.hooks.run_records import RunRecordsHook
    from airflow_cdc_provider.overview.command import parse_lag
    from airflow_cdc_provider.overview.read import rows_of, running_holders, table_rows, work_states

    # Airflow's ORM is set up at the first query of a process (a few tenths of a second): the api-server has done it
    # before the plugin's first request (its health check reads the jobs), so this process does it before timing.
    configure_mappers()
    lag, readable = parse_lag(MAX_LAG), {dag_id_of(d) for d in range(args.dags)}
    parts: dict[str, list[float]] = {}

    def lap(name: str, started: float) -> float:
        now = time.perf_counter()
        parts.setdefault(name, []).append(now - started)
        return now

    for _ in range(1 + max(args.repeat, 1)):
        now = dt.datetime.now(dt.UTC)
        with create_session() as session:
            records = RunRecordsHook(session)
            at = time.perf_counter()
            sources = records.latest_plans(readable)
            at = lap("db_plans", at)
            keys = [(s.dag_id, s.group) for s in sources]
            latest = {key: found[0] for key, found in records.outcomes(keys, runs=1).items() if found}
            at = lap("db_outcomes", at)
            failed = records.failed_before_outcome(keys)
            at = lap("db_failed", at)
            tables = [(source, table) for source in sources for table in source.tables.tables]
            states = work_states([(table.table_dir, source.tables.work_conn_id) for source, table in tables])
            at = lap("work_dir", at)
            running = running_holders(records, states)
            at = lap("db_locks", at)
            rows = rows_of(tables, states, latest, failed, running, now, lag)
            at = lap("rows", at)
            # As the endpoint encodes its answer (``overview.api``).
            encoded = TableRows(now=now, max_lag_seconds=lag.total_seconds(), tables=tuple(rows)).model_dump_json()
            lap("encode", at)
            at = time.perf_counter()
            whole = table_rows(RunRecordsHook(session), readable, now, lag)
            lap("table_rows", at)
        if len(whole) != len(rows):
            raise RuntimeError(f"table_rows gave {len(whole)} rows, its parts {len(rows)}")
    figures = {name: statistics.median(values[1:]) for name, values in parts.items()}
    figures.update({f"first_{name}": values[0] for name, values in parts.items()})
    for prefix in ("", "first_"):
        figures[f"{prefix}db"] = sum(figures[f"{prefix}db_{part}"]
                                     for part in ("plans", "outcomes", "failed", "locks"))
    figures["encoded_bytes"] = len(encoded)
    return figures


# The bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dags", type=int, default=20, help="DAGs, one source group each (default 20)")
    parser.add_argument("--tables-per-dag", type=int, default=100, help="tables of each DAG (default 100)")
    parser.add_argument("--runs", type=int, default=20, help="finished runs of each DAG (default 20)")
    parser.add_argument("--repeat", type=int, default=5, help="timed requests after the first (default 5)")
    parser.add_argument("--startup-timeout", type=float, default=300, help="for the api-server, in s")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (its path is printed)")
    parser.add_argument("--split", action="store_true", help=argparse.SUPPRESS)  # the bench's own subprocess
    args = parser.parse_args(argv)
    if args.split:  # in the environment of a deployment the bench has filled
        print(json.dumps(split(args)))
        return 0
    if args.dags < 1 or args.tables_per_dag < 1 or args.runs < 1:
        parser.error("--dags, --tables-per-dag and --runs must be at least 1")
    # A SIGTERM ends the bench as Ctrl-C does: through the ``finally`` that stops the api-server and removes the files.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    tmp = Path(tempfile.mkdtemp(prefix="cdc-bench-tables-page-"))
    home, work_dir, warehouse = tmp / "airflow", tmp / "work", tmp / "warehouse"
    dags = home / "dags"
    dags.mkdir(parents=True)
    port = _free_port()
    env = AirflowDeployment._environment(home, dags, port, {
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        # Quiet, in this process too (create_dagrun logs each run it makes).
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
    })
    deployment = AirflowDeployment(home, dags, env, port)
    built = Built(tables=args.dags * args.tables_per_dag)
    try:
        for d in range(args.dags):
            config = config_of(d, args.tables_per_dag, work_dir, warehouse)
            (dags / f"{dag_id_of(d)}.py").write_text(DAG_FILE.format(config=config, dag_id=dag_id_of(d), group=GROUP))
        print(f"tables page bench: {args.dags} DAGs x {args.tables_per_dag} tables = {built.tables:,} tables, "
              f"{args.runs} runs each; in {tmp}; load average {os.getloadavg()[0]:.2f}", flush=True)

        started = time.perf_counter()
        deployment.cli("db", "migrate", timeout=600)
        if _enable_wal(home / "airflow.db") != "wal":
            raise DeploymentError("SQLite refused WAL mode")
        built.seconds["migrate"] = time.perf_counter() - started

        started = time.perf_counter()
        deployment.cli("dags", "reserialize", timeout=1800)
        built.seconds["reserialize"] = time.perf_counter() - started

        use_deployment_settings(env)
        now = dt.datetime.now(dt.UTC)
        started = time.perf_counter()
        ledgers = fill_runs(args, work_dir, warehouse, now, built)
        built.seconds["runs"] = time.perf_counter() - started
        started = time.perf_counter()
        write_work_state(args, work_dir, ledgers, now, built)
        built.seconds["work_dir"] = time.perf_counter() - started
        d = next((d for d in range(args.dags) if failing(d, (d * 7) % args.tables_per_dag, args.tables_per_dag)), 0)
        built.detail = {"dag_id": dag_id_of(d), "group": GROUP,
                        "source": f"shop_{d:02d}.t_{(d * 7) % args.tables_per_dag:03d}"}
        db_bytes = sum(p.stat().st_size for p in home.glob("airflow.db*"))
        print(f"built: {built.runs:,} runs, {built.task_instances:,} task instances, {built.xcoms:,} XComs "
              f"({built.xcom_bytes / 1e6:.0f} MB of JSON), {built.asset_events:,} asset events; metadata DB "
              f"{db_bytes / 1e6:.0f} MB; work dir {built.files:,} files")
        print("fill: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in built.seconds.items()))

        started = time.perf_counter()
        plugin = plugin_settings()
        deployment.env = {**env, **plugin}
        deployment._launch("api-server")
        wait_up(deployment, args.startup_timeout)
        up = time.perf_counter() - started
        print(f"api-server up in {up:.1f} s (port {port}, 1 worker"
              f"{'; [core] lazy_discover_providers off, for the plugin' if plugin else ''})", flush=True)
        http = time_requests(args, deployment, built)
        deployment.stop()  # the in-process figures alone on the machine

        parts = {**split_in_process(args, env), "app_build": app_build(env)}
    except BaseException:
        if deployment.log_path("api-server").exists():
            with contextlib.suppress(Exception):
                print(_tail(deployment.log_path("api-server"), 30), file=sys.stderr)
        raise
    finally:
        deployment.stop()
        if args.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    return report(args, built, http, parts)


def _spread(values: list[float]) -> str:
    if not values:
        return ""
    return (f"then median {statistics.median(values):.3f} s of {len(values)} "
            f"(min {min(values):.3f}, max {max(values):.3f})")


def report(args: argparse.Namespace, built: Built, http: dict[str, Any], parts: dict[str, float]) -> int:
    again, under = http["again"], http["first"] < TARGET_SECONDS
    states = ", ".join(f"{state} {count:,}" for state, count in sorted(http["states"].items()))
    print()
    print(f"GET /cdc/api/tables  first answer {http['first']:.3f} s "
          f"({'UNDER' if under else 'NOT under'} the {TARGET_SECONDS:.0f} s target); {_spread(again)}")
    print(f"                     {http['rows']:,} rows, {http['body_bytes'] / 1e6:.1f} MB of JSON; {states}"
          f"{' (as built)' if http['states'] == dict(built.expected) else f' (NOT as built: {dict(built.expected)})'}")
    print(f"GET /cdc/            {http['page']:.3f} s ({http['page_bytes'] / 1e3:.0f} kB of HTML)")
    print(f"GET /cdc/api/table   first {http['detail']:.3f} s; {_spread(http['detail_again'])}")
    print(f"                     ({built.detail['source']} of {built.detail['dag_id']}: {http['detail_state']}, "
          f"{http['detail_runs']} runs, {http['detail_commits']} commits)")
    print(f"in a fresh process, on the same DB and work dir (first call, then the median of {max(args.repeat, 1)}):")
    print(f"  the plugin's app: importing and building it  {parts['app_build']:.3f} s (in a process of its own; the "
          "api-server does it as it starts, when it asks the plugin for its apps)")
    for name, label in (("table_rows", "table_rows, whole (after its parts)"), ("db", "  metadata DB"),
                        ("db_plans", "    latest plans"), ("db_outcomes", "    latest outcomes"),
                        ("db_failed", "    runs failed before an outcome"),
                        ("db_locks", "    the locks' runs still running"),
                        ("work_dir", "  work dir (4 reads a table)"),
                        ("rows", "  the rows (table_status)"),
                        ("encode", "then the answer's JSON (TableRows.model_dump_json)")):
        print(f"  {label:<45}{parts[f'first_{name}']:.3f} s, then {parts[name]:.3f} s")
    print(f"load average now: {', '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(json.dumps({
        "tables": built.tables, "dags": args.dags, "runs_per_dag": args.runs, "target_s": TARGET_SECONDS,
        "first_s": round(http["first"], 3), "median_s": round(statistics.median(again), 3) if again else None,
        "under_target": under, "page_s": round(http["page"], 3), "detail_s": round(http["detail"], 3),
        "detail_median_s": round(statistics.median(http["detail_again"]), 3) if http["detail_again"] else None,
        "in_process": {k: round(v, 3) for k, v in parts.items() if k != "encoded_bytes"},
    }))
    return 0 if under else 1


if __name__ == "__main__":
    sys.exit(main())
