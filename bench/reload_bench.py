"""The run that meets a widened column loads the table anew; against a full reload of it, and the runs around it.

    .venv/bin/python bench/reload_bench.py [rows]

The table (default 2,000,000 rows, merge_bench's) is loaded into Hive by a snapshot and a Spark merge, as a first
run does, and loaded again by a fresh snapshot onto the Hive table it made (``fresh_snapshot=true``): that second
load, the full reload a user would trigger after such a change, is the baseline (its columns are the same, so the
merge switches the table to the new version rather than defining it again); the first load, which creates the
table, is printed beside it. Then, in the same process:

- incremental runs before the widening, each after a few hundred row changes: extract (binlog from the committed
  watermark), replay, Spark merge and commit, timed from end to end;
- ``ALTER TABLE bench.orders MODIFY qty BIGINT`` (an INT column: Hive's int becomes bigint) with a few row changes
  around it, some holding values past INT's range; then the run that follows, timed from end to end: the extraction,
  which leaves the table out with ``ColumnsRetyped``, then the heal (``stages.heal``: ``target``, then ``reload``,
  the table read whole), and the merge of ``core.merge.merge_spec``'s spec, which defines the Hive table again;
- incremental runs after the widening, with the same changes, timed the same way.

The Hive table's columns and rows are read by Spark after the reload and at the end, against the source's.
Targets: the run after the widening <= 1.3x the full reload; the incremental runs after it about 1.0x the ones
before.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_cdc_provider.core.contract import CapturedTable, MergeInput, TablePlan  # noqa: E402
from airflow_cdc_provider.core.identifiers import TableName  # noqa: E402
from airflow_cdc_provider.core.ledger import Ledger, RunRef, plan_run  # noqa: E402
from airflow_cdc_provider.core.merge import MergeJob, merge_spec  # noqa: E402
from airflow_cdc_provider.core.modes import Mode  # noqa: E402
from airflow_cdc_provider.core.records import RawHeader  # noqa: E402
from airflow_cdc_provider.core.workdir import TableDir  # noqa: E402
from airflow_cdc_provider.spark import MERGE_JOB  # noqa: E402
from airflow_cdc_provider.stages import heal  # noqa: E402
from airflow_cdc_provider.stages.extract import ColumnsRetyped, extract, in_one_directory  # noqa: E402
from airflow_cdc_provider.stages.replay import replay  # noqa: E402
from airflow_cdc_provider.stages.snapshot import snapshot  # noqa: E402
from airflow_cdc_provider.stages.snapshot_run import SnapshotSettings, snapshot_progress, taken_at  # noqa: E402
from airflow_cdc_provider.storage import WorkStore  # noqa: E402
from bench.merge_bench import FILL, bench_table, submit  # noqa: E402

HIVE_TABLE = "ods.reloaded"
NAME = TableName("bench", "orders")
CHANGES = 300  # row changes before each incremental run: 80% updates, 10% deletes, 10% inserts
ROUNDS = 2  # incremental runs on each side of the widening
INT_MAX = 2**31 - 1

CHECK_JOB = """
import json
import sys
from airflow_cdc_provider.spark.session import hive_session
warehouse, table, out = sys.argv[1], sys.argv[2], sys.argv[3]
spark = hive_session("reload-bench-check", warehouse, None)
frame = spark.table(table)
with open(out, "w") as f:
    json.dump({"types": dict(frame.dtypes), "rows": frame.count(),
               "past_int": frame.where(f"qty > {2**31 - 1}").count()}, f)
"""


class Copy:
    """The Hive copy of bench.orders and its ledger, brought up to date run after run as the run's tasks do."""

    def __init__(self, source, work: Path, header: RawHeader) -> None:
        self.source, self.work, self.header, self.runs = source, work, header, 0
        self.ledger = Ledger(TableDir(work_dir=str(work), hive_table=HIVE_TABLE), WorkStore())
        self.settings = SnapshotSettings()
        self.log = logging.getLogger("reload-bench")

    def _begin(self, fresh_snapshot: bool = False) -> TablePlan:
        self.runs += 1
        run = RunRef("bench", f"r{self.runs}")
        self.ledger.acquire(run, lambda holder: False, dt.datetime.now(dt.UTC))
        committed = self.ledger.committed()
        plan = plan_run(run, committed, None, None, fresh_snapshot=fresh_snapshot)
        self.ledger.save_run_plan(plan)
        table = TablePlan(table=CapturedTable(source=str(NAME), hive_table=HIVE_TABLE, schema_changes="strict",
                                              key=self.header.key, columns=self.header.columns),
                          plan=plan, table_dir=self.ledger.table, committed=committed)
        Path(table.run_dir.root).mkdir(parents=True, exist_ok=True)
        return table

    def _merge(self, table: TablePlan, given: MergeInput) -> dict:
        """The merge task's part for one table: the spec, the Spark application, the ledger's commit."""
        spec = merge_spec(table, given, str(self.work / "warehouse"), None, keep_versions=3)
        out = Path(table.run_dir.root)
        (out / "job.json").write_text(MergeJob(spec.warehouse_dir, None, (spec,), str(out / "result.json")).to_text())
        seconds = submit(MERGE_JOB, str(out / "job.json"), cwd=out)
        result = json.loads((out / "result.json").read_text())["tables"][spec.result_key]
        if result["status"] != "committed":
            raise RuntimeError(f"the merge did not commit {HIVE_TABLE}: {result}")
        self.ledger.commit(table.plan, spec.committed(result["version"], result["location"]))
        self.ledger.release(table.plan.run)
        return {**result, "merge_seconds": seconds, "plan_mode": spec.plan.mode.value,
                "plan_reason": spec.plan.reason, "hive_columns": dict(spec.hive_columns)}

    def load(self, fresh_snapshot: bool = False) -> dict:
        """A first load, or a fresh snapshot onto the Hive table: the snapshot task's read, then the merge."""
        t0 = time.perf_counter()
        table = self._begin(fresh_snapshot)
        if table.mode != Mode.SNAPSHOT:
            raise RuntimeError(f"planned as {table.mode}, not as a snapshot: {table.plan.reason}")
        settings, header = self.settings, self.header
        snap = snapshot(self.source.hook, header, table.run_dir.snapshot, settings.chunk_rows,
                        snapshot_progress(self.source.hook, header, settings, self.log), settings.read_buffer,
                        readers=settings.readers)
        given = MergeInput(source=table.source, mode=Mode.SNAPSHOT, upsert_files=tuple(snap.files),
                           columns=header.columns, key=header.identity, end=snap.watermark, as_of=taken_at(snap),
                           source_columns=header.columns, upserts=snap.rows, changes={"I": snap.rows})
        read = time.perf_counter() - t0
        merged = self._merge(table, given)
        return {**merged, "seconds": time.perf_counter() - t0, "read_seconds": read}

    def _extract(self, table: TablePlan):
        raw = Path(table.run_dir.root) / "raw"
        high = self.source.current_watermark()
        definition = self.source.hook.raw_header(NAME)
        return extract(self.source.hook, in_one_directory([self.header], raw, [definition]), table.plan.start, high)

    def incremental(self) -> dict:
        """The extract, replay and merge tasks' parts for one table read from the binlog."""
        t0 = time.perf_counter()
        table = self._begin()
        if table.mode != Mode.INCREMENTAL:
            raise RuntimeError(f"planned as {table.mode}, not as an incremental run: {table.plan.reason}")
        extracted = self._extract(table)
        extracted.check()
        extract_s = time.perf_counter() - t0
        out = Path(table.run_dir.root)
        replayed = replay(extracted.files[str(NAME)], out / "upsert.parquet", out / "delete.parquet")
        replay_s = time.perf_counter() - t0 - extract_s
        columns = extracted.headers[str(NAME)].columns if str(NAME) in extracted.headers else self.header.columns
        given = MergeInput(source=table.source, mode=Mode.INCREMENTAL, upsert_files=(replayed.upsert_file,),
                           delete_file=replayed.delete_file, columns=replayed.columns, key=replayed.key,
                           end=extracted.end, as_of=dt.datetime.now(dt.UTC), source_columns=columns,
                           upserts=replayed.upserts, deletes=replayed.deletes, changes=extracted.counts[str(NAME)],
                           start=extracted.start)
        merged = self._merge(table, given)
        return {**merged, "seconds": time.perf_counter() - t0, "extract_seconds": extract_s,
                "replay_seconds": replay_s, "read": sum(extracted.counts[str(NAME)].values())}

    def after_retype(self) -> dict:
        """The run that meets the retyped column: its extraction leaves the table out, the heal loads it anew, the
        merge defines the Hive table again."""
        t0 = time.perf_counter()
        table = self._begin()
        extracted = self._extract(table)
        error = extracted.failed.get(str(NAME))
        if not isinstance(error, ColumnsRetyped):
            raise RuntimeError(f"the extraction did not leave {NAME} out as retyped: {error!r}")
        extract_s = time.perf_counter() - t0
        aim = heal.target(table, error.why, self.source.hook)
        if aim.reload is None:
            raise RuntimeError(f"the heal would compare {NAME} rather than load it anew")
        given = heal.reload(self.source.hook, aim, WorkStore(), self.settings, self.log)
        heal_s = time.perf_counter() - t0 - extract_s
        self.header = aim.header
        merged = self._merge(table, given)
        return {**merged, "seconds": time.perf_counter() - t0, "extract_seconds": extract_s, "heal_seconds": heal_s,
                "reason": aim.reload, "healed": given.healed}

    def check(self) -> dict:
        """The Hive table as Spark reads it: its columns' types, its rows, those whose qty is past INT's range."""
        out = self.work / "check"
        out.mkdir(exist_ok=True)
        job = out / "check_job.py"
        job.write_text(CHECK_JOB)
        submit(str(job), str(self.work / "warehouse"), HIVE_TABLE, str(out / "check.json"), cwd=out)
        return json.loads((out / "check.json").read_text())


def change(server, rows: int, round_: int, big: bool) -> int:
    """A few hundred row changes, others each round: updates, deletes, inserts of new keys; with ``big``, the
    updated rows' qty past INT's range."""
    updates, deletes = CHANGES * 8 // 10, CHANGES // 10
    inserts = CHANGES - updates - deletes
    qty = f"{INT_MAX} + id" if big else "qty + 1"
    server.execute(
        f"UPDATE bench.orders SET amount = amount + 1, status = 'changed{round_}', qty = {qty}, updated_at = NOW(6)"
        f" WHERE id % {rows // updates} = {round_} AND id <= {rows}",
        f"DELETE FROM bench.orders WHERE id % {rows // deletes} = {round_ + 11} AND id <= {rows} LIMIT {deletes}",
        f"INSERT INTO bench.orders SELECT {FILL.replace('seq', f'(seq + {rows * (round_ + 1)})')}"
        f" FROM bench.seq_1_to_{inserts}",
    )
    return CHANGES


def source_counts(server) -> tuple[int, int]:
    return server.execute(f"SELECT COUNT(*), COALESCE(SUM(qty > {INT_MAX}), 0) FROM bench.orders")[0]


def incremental_rounds(copy: Copy, server: Any, rows: int, when: str, first_round: int, big: bool) -> list[dict]:
    """``ROUNDS`` incremental runs, each after its changes; each one's figures printed and returned."""
    found = []
    for round_ in range(ROUNDS):
        change(server, rows, first_round + round_, big=big)
        r = copy.incremental()
        found.append(r)
        print(f"incremental {when} the widening, round {round_ + 1}: about {CHANGES} rows changed, "
              f"{r['seconds']:.1f} s ({r['read']:,} row images read: extract {r['extract_seconds']:.1f} s, "
              f"replay {r['replay_seconds']:.2f} s, merge {r['merge_seconds']:.1f} s), version {r['version']} "
              f"with {r['rows']:,} rows", flush=True)
    return found


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    work = Path(tempfile.mkdtemp(prefix="reload-bench-"))
    with bench_table(work, rows) as (server, source, _):
        copy = Copy(source, work, source.hook.raw_header(NAME))
        first = copy.load()
        print(f"table of {rows:,} rows; initial load (snapshot + merge, the Hive table created) "
              f"{first['seconds']:.1f} s (read {first['read_seconds']:.1f} s, merge {first['merge_seconds']:.1f} s)",
              flush=True)
        full = copy.load(fresh_snapshot=True)
        print(f"full reload, the baseline (fresh_snapshot=true onto the Hive table: snapshot + merge; the columns "
              f"the same, so the table is switched to the new version, not defined again) {full['seconds']:.1f} s "
              f"(read {full['read_seconds']:.1f} s, merge {full['merge_seconds']:.1f} s), version {full['version']} "
              f"with {full['rows']:,} rows", flush=True)

        before = incremental_rounds(copy, server, rows, "before", first_round=0, big=False)

        t0 = time.perf_counter()
        server.execute(f"UPDATE bench.orders SET qty = qty + 1 WHERE id <= {rows} AND id % {rows // 10} = 3",
                       "ALTER TABLE bench.orders MODIFY qty BIGINT",
                       f"UPDATE bench.orders SET qty = {INT_MAX} + id WHERE id <= 20",
                       f"INSERT INTO bench.orders SELECT {FILL.replace('seq', f'(seq + {rows * 50})')}"
                       " FROM bench.seq_1_to_10")
        print(f"ALTER TABLE bench.orders MODIFY qty BIGINT, with 40 row changes around it: "
              f"{time.perf_counter() - t0:.1f} s at the server (not counted)", flush=True)
        anew = copy.after_retype()
        print(f"the run after the widening {anew['seconds']:.1f} s (extraction, which left the table out as retyped, "
              f"{anew['extract_seconds']:.1f} s; heal: read whole {anew['heal_seconds']:.1f} s; merge "
              f"{anew['merge_seconds']:.1f} s): committed as a {anew['plan_mode']} "
              f"(reloaded={anew['healed'].reloaded}), version {anew['version']} with {anew['rows']:,} rows; "
              f"the plan's reason: {anew['plan_reason']}", flush=True)
        hive = copy.check()
        count, past_int = source_counts(server)
        print(f"Hive after the reload: qty {hive['types']['qty']} (spec: {anew['hive_columns']['qty']}), "
              f"{hive['rows']:,} rows ({past_int} of them with qty past INT's range: {hive['past_int']}); "
              f"the source: {count:,} rows", flush=True)
        reload_ok = hive["types"]["qty"] == "bigint" and hive["rows"] == count and hive["past_int"] == past_int

        after = incremental_rounds(copy, server, rows, "after", first_round=ROUNDS, big=True)

        hive = copy.check()
        count, past_int = source_counts(server)
        end_ok = hive["types"]["qty"] == "bigint" and hive["rows"] == count and hive["past_int"] == past_int
        print(f"Hive at the end: qty {hive['types']['qty']}, {hive['rows']:,} rows ({hive['past_int']} with qty "
              f"past INT's range); the source: {count:,} rows ({past_int})")
        incr_before = statistics.median(r["seconds"] for r in before)
        incr_after = statistics.median(r["seconds"] for r in after)
        print(f"the run after the widening / full reload (fresh snapshot): {anew['seconds'] / full['seconds']:.2f}x "
              f"(target <= 1.3x); / the initial load: {anew['seconds'] / first['seconds']:.2f}x")
        print(f"incremental runs after / before the widening (medians of {ROUNDS}): {incr_after:.1f} s / "
              f"{incr_before:.1f} s = {incr_after / incr_before:.2f}x (target about 1.0x)")
        print(f"checks: after the reload {'ok' if reload_ok else 'FAILED'}, at the end {'ok' if end_ok else 'FAILED'}")


if __name__ == "__main__":
    main()
