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

from airflow_cdc_testing.server import ThrowawayServer  # noqa: E402

from airflow_cdc_provider.core.identifiers import TableName  # noqa: E402
from airflow_cdc_provider.core.partitioning import PartitionSpec  # noqa: E402
from airflow_cdc_provider.stages.extract import TableRange, extract  # noqa: E402
from airflow_cdc_provider.stages.replay import replay  # noqa: E402
from airflow_cdc_provider.stages.snapshot import snapshot  # noqa: E402
from bench.capture_bench import Source, header_of  # noqa: E402
from bench.merge_bench import DDL, FILL  # noqa: E402
from bench.targets import Target, size_of  # noqa: E402

TAIL_INSERTS, TAIL_UPDATES, TAIL_WINDOW, OLD_UPDATES, OLD_DELETES = 2_000, 2_000, 20_000, 8, 2


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
        self.targets = {"partitioned": Target(f"{name}_part", self.header, work, layout),
                        "unpartitioned": Target(f"{name}_flat", self.header, work)}
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
        table = TableRange(self.header, outs["partitioned"] / "raw", partitioning=layout)
        extracted = extract(self.source.hook, [table], plans["partitioned"].start, high)
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
            merge_s, outcome, _ = target.merge(extracted.end, upserts, deletes, left)
            written = size_of(Path(outcome["location"].removeprefix("file:")))
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
