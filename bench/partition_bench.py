"""A run's cost against the table's size: partitioned and unpartitioned targets of a small and a big table, given
the same changes, on a throwaway MariaDB with Spark in local mode.

    .venv/bin/python bench/partition_bench.py [small rows] [big rows] [partition width]

Two tables of one shape (default 1,000,000 and 10,000,000 rows), each loaded into two Hive tables: one
partitioned by ``truncate(id, W)`` (W default 20,000) and one not. Then each run makes the same changes in both
tables: 2,000 inserts at the key's tail, 2,000 updates among the newest 20,000 keys, and 8 updates and 2
deletes of random old rows; every target is brought up to date by extract → replay → merge, timed from end to
end. Then a run with 2,000 updates spread at random over the big table, and the partitions it touched.

It prints, per target and run, the wall time (extract, replay, merge) and the bytes the run wrote under the
table (its new version directory), and the ratios of the big table's to the small one's. Targets for the
partitioned tables: wall time <= 1.5x, bytes <= 2x. After the last run every Hive table's row count is checked
against its source.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_cdc_testing.hive import run_spark_job  # noqa: E402
from airflow_cdc_testing.server import ThrowawayServer  # noqa: E402

from airflow_cdc_provider.core.identifiers import TableName  # noqa: E402
from airflow_cdc_provider.core.ledger import Ledger, RunRef, plan_run  # noqa: E402
from airflow_cdc_provider.core.merge import MergeJob, MergeSpec  # noqa: E402
from airflow_cdc_provider.core.partitioning import Partitioning, PartitionSpec  # noqa: E402
from airflow_cdc_provider.core.types import hive_type  # noqa: E402
from airflow_cdc_provider.core.workdir import TableDir  # noqa: E402
from airflow_cdc_provider.spark import MERGE_JOB  # noqa: E402
from airflow_cdc_provider.stages.extract import extract  # noqa: E402
from airflow_cdc_provider.stages.replay import replay  # noqa: E402
from airflow_cdc_provider.stages.snapshot import snapshot  # noqa: E402
from airflow_cdc_provider.storage import WorkStore  # noqa: E402
from bench.capture_bench import Source, header_of  # noqa: E402
from bench.merge_bench import DDL, FILL  # noqa: E402

TAIL_INSERTS, TAIL_UPDATES, TAIL_WINDOW, OLD_UPDATES, OLD_DELETES = 2_000, 2_000, 20_000, 8, 2


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class Target:
    """One Hive table fed from one source table, run by run as the operators do (lock, plan, merge, ledger)."""

    def __init__(self, name: str, header, partitioning: Partitioning | None, work: Path):
        self.name, self.header, self.partitioning, self.work = name, header, partitioning, work
        self.ledger = Ledger(TableDir(work_dir=str(work / "work"), hive_table=f"ods.{name}"), WorkStore())
        self.warehouse = work / "warehouse"
        self.runs = 0
        self.run_ref: RunRef | None = None
        self.plan = None

    def begin(self) -> Path:
        """Take the lock and plan the next run; its capture directory."""
        self.runs += 1
        self.run_ref = RunRef("bench", f"r{self.runs}")
        self.ledger.acquire(self.run_ref, lambda holder: False, dt.datetime.now(dt.UTC))
        self.plan = plan_run(self.run_ref, self.ledger.committed(), None, None)
        self.ledger.save_run_plan(self.plan)
        return Path(self.ledger.table.run(self.run_ref.key).root)

    def merge(self, end, upserts: list[str], deletes: str | None, left: tuple[str, ...]) -> tuple[float, dict, int]:
        """Merge and commit; (seconds, the job's result, bytes written into the new version directory)."""
        out = Path(self.ledger.table.run(self.run_ref.key).root)
        spec = MergeSpec(
            database="ods", table=self.name, source=self.header.table, warehouse_dir=str(self.warehouse),
            metastore_uri=None, plan=self.plan, end=end, as_of=dt.datetime.now(dt.UTC),
            columns=tuple((n, hive_type(t)) for n, t in self.header.columns), key=self.header.key,
            capture_dir=str(out), upsert_files=tuple(upserts), delete_file=deletes,
            partitioning=self.partitioning, left_partitions=left if self.partitioning else (),
        )
        (out / "job.json").write_text(MergeJob(spec.warehouse_dir, None, (spec,), str(out / "result.json")).to_text())
        t0 = time.perf_counter()
        result = run_spark_job(MERGE_JOB, str(out / "job.json"), work_dir=str(out), timeout=3600)
        seconds = time.perf_counter() - t0
        if result.returncode:
            raise RuntimeError(result.stdout[-3000:] + result.stderr[-5000:])
        outcome = json.loads((out / "result.json").read_text())["tables"][f"ods.{self.name}"]
        assert outcome["status"] == "committed", outcome
        self.ledger.commit(self.plan, spec.committed(outcome["version"], outcome["location"]))
        self.ledger.release(self.run_ref)
        written = size_of(Path(outcome["location"].removeprefix("file:")))
        return seconds, outcome, written


def link_into(files: list[str], directory: Path) -> list[str]:
    """The capture files, linked into another target's run directory (a merge reads only its own run's files)."""
    directory.mkdir(parents=True, exist_ok=True)
    linked = []
    for name in files:
        target = directory / Path(name).name
        os.link(name, target)
        linked.append(str(target))
    return linked


class Table:
    """A source table and its two targets, partitioned and not."""

    def __init__(self, server, source, name: str, rows: int, width: int, work: Path):
        self.server, self.source, self.name, self.rows = server, source, name, rows
        server.execute(f"CREATE TABLE bench.{name} ({DDL})",
                       f"INSERT INTO bench.{name} SELECT {FILL} FROM bench.seq_1_to_{rows}")
        self.header = header_of(server, TableName("bench", name))
        layout = PartitionSpec.parse(f"truncate(id, {width})").resolve(self.header.columns)
        self.targets = {"partitioned": Target(f"{name}_part", self.header, layout, work),
                        "unpartitioned": Target(f"{name}_flat", self.header, None, work)}
        self.top = rows

    def load(self) -> dict[str, float]:
        t0 = time.perf_counter()
        outs = {kind: target.begin() for kind, target in self.targets.items()}
        snap = snapshot(self.source.hook, self.header, outs["partitioned"] / "snapshot")
        read = time.perf_counter() - t0
        seconds = {}
        for kind, target in self.targets.items():
            files = snap.files if kind == "partitioned" else link_into(snap.files, outs[kind] / "snapshot")
            seconds[kind] = read + target.merge(snap.watermark, files, None, ())[0]
        return seconds

    def tail_changes(self, rng: random.Random) -> None:
        """2,000 inserts at the tail, 2,000 updates among the newest 20,000 keys, 8 updates and 2 deletes of old
        rows at random."""
        top = self.top
        step = TAIL_WINDOW // TAIL_UPDATES
        old = rng.sample(range(1, self.rows - TAIL_WINDOW), OLD_UPDATES + OLD_DELETES)
        self.server.execute(
            f"INSERT INTO bench.{self.name} SELECT {FILL.replace('seq', f'(seq + {top})')}"
            f" FROM bench.seq_1_to_{TAIL_INSERTS}",
            f"UPDATE bench.{self.name} SET amount = amount + 1, status = 'tail' WHERE id > {top - TAIL_WINDOW}"
            f" AND id <= {top} AND id % {step} = {rng.randrange(step)}",
            f"UPDATE bench.{self.name} SET amount = amount + 1, status = 'old' WHERE id IN "
            f"({', '.join(map(str, old[:OLD_UPDATES]))})",
            f"DELETE FROM bench.{self.name} WHERE id IN ({', '.join(map(str, old[OLD_UPDATES:]))})",
        )
        self.top += TAIL_INSERTS

    def random_changes(self, rng: random.Random, count: int) -> None:
        ids = rng.sample(range(1, self.rows), count)
        for n in range(0, count, 500):
            self.server.execute(f"UPDATE bench.{self.name} SET amount = amount + 1, status = 'random' WHERE id IN "
                                f"({', '.join(map(str, ids[n:n + 500]))})")

    def incremental(self) -> dict[str, dict]:
        """One run of both targets over the same range: extraction and replay once, then each target's merge."""
        t0 = time.perf_counter()
        outs = {kind: target.begin() for kind, target in self.targets.items()}
        plans = {kind: target.plan for kind, target in self.targets.items()}
        assert plans["partitioned"].start == plans["unpartitioned"].start
        high = self.source.current_watermark()
        layout = self.targets["partitioned"].partitioning
        extracted = extract(self.source.hook, [self.header], plans["partitioned"].start, high,
                            outs["partitioned"] / "raw", partitionings={self.header.table: layout})
        extract_s = time.perf_counter() - t0
        out = outs["partitioned"]
        replayed = replay(extracted.files[self.header.table], out / "upsert.parquet", out / "delete.parquet")
        replay_s = time.perf_counter() - t0 - extract_s
        left = extracted.left_partitions.get(self.header.table, ())
        found = {}
        for kind, target in self.targets.items():
            upserts, deletes = [str(replayed.upsert_file)], str(replayed.delete_file)
            if kind != "partitioned":
                upserts = link_into(upserts, outs[kind])
                deletes = link_into([deletes], outs[kind])[0]
            merge_s, outcome, written = target.merge(extracted.end, upserts, deletes, left)
            found[kind] = {"seconds": extract_s + replay_s + merge_s, "extract": extract_s, "replay": replay_s,
                           "merge": merge_s, "written": written, "outcome": outcome, "left": len(left)}
        return found


def describe(name: str, run: dict) -> str:
    outcome = run["outcome"]
    parts = (f", partitions {outcome['rewritten_partitions']} rewritten of {outcome['partitions']}"
             if outcome.get("partitions") is not None else "")
    return (f"{name}: {run['seconds']:.1f} s (extract {run['extract']:.1f}, replay {run['replay']:.1f}, merge "
            f"{run['merge']:.1f}), wrote {run['written'] / 1e6:.1f} MB{parts}; {outcome['rows']:,} rows")


def main() -> None:
    small_rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    big_rows = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000
    width = int(sys.argv[3]) if len(sys.argv) > 3 else 20_000
    work = Path(tempfile.mkdtemp(prefix="partition-bench-"))
    try:  # the 10 M-row table's server, capture files and warehouse take about 4 GB
        run(work, small_rows, big_rows, width)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work: Path, small_rows: int, big_rows: int, width: int) -> None:
    rng = random.Random(42)
    with ThrowawayServer.start(work / "mariadb", {"max_binlog_size": 256 * 1024 * 1024}) as server:
        login = server.create_user("bench")
        source = Source(server, login)
        server.execute("CREATE DATABASE bench")
        tables = {"small": Table(server, source, "small", small_rows, width, work),
                  "big": Table(server, source, "big", big_rows, width, work)}
        for label, table in tables.items():
            loaded = table.load()
            print(f"{label} table, {table.rows:,} rows: first load partitioned {loaded['partitioned']:.1f} s, "
                  f"unpartitioned {loaded['unpartitioned']:.1f} s", flush=True)

        runs: dict[str, dict[str, list[dict]]] = {label: {"partitioned": [], "unpartitioned": []} for label in tables}
        for round_ in range(2):
            for label, table in tables.items():
                table.tail_changes(rng)
                for kind, run in table.incremental().items():
                    runs[label][kind].append(run)
                    print(f"round {round_ + 1}, {describe(f'{label} {kind}', run)}", flush=True)

        for kind in ("partitioned", "unpartitioned"):
            wall = (statistics.median(r["seconds"] for r in runs["big"][kind])
                    / statistics.median(r["seconds"] for r in runs["small"][kind]))
            written = (statistics.median(r["written"] for r in runs["big"][kind])
                       / statistics.median(r["written"] for r in runs["small"][kind]))
            target = " (targets: wall <= 1.5x, bytes <= 2x)" if kind == "partitioned" else ""
            print(f"{kind}: big / small incremental run: wall {wall:.2f}x, bytes written {written:.2f}x{target}")

        big = tables["big"]
        big.random_changes(rng, 2_000)
        spread = big.incremental()
        partitions = spread["partitioned"]["outcome"]["partitions"]
        expected = partitions * (1 - pow(2.718281828459045, -2_000 / partitions))
        print(f"2,000 updates at random in the big table: {describe('partitioned', spread['partitioned'])} "
              f"(N(1 - e^(-c/N)) = {expected:.0f}; the merge's phases {spread['partitioned']['outcome']['phases']}); "
              f"{describe('unpartitioned', spread['unpartitioned'])}", flush=True)

        for table in tables.values():
            count = server.execute(f"SELECT COUNT(*) FROM bench.{table.name}")[0][0]
            for target in table.targets.values():
                rows = json.loads((Path(target.ledger.table.run(target.run_ref.key).root) / "result.json")
                                  .read_text())["tables"][f"ods.{target.name}"]["rows"]
                assert rows == count, (target.name, rows, count)
        print("every Hive table's row count equals its source's")


if __name__ == "__main__":
    main()
