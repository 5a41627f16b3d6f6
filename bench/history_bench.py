"""What a table's changelog (``changelog: true``, net mode) costs its merge, on a throwaway MariaDB with Spark in
local mode.

    .venv/bin/python bench/history_bench.py [rows] [changed fraction] [rounds] [partition width]

One source table (default 2,000,000 rows, merge_bench's columns) is loaded, from the same snapshot files, into
pairs of Hive tables that differ only in the changelog: ``plain`` has none, ``logged`` writes
``<table>_changelog``. One pair is unpartitioned; a second is partitioned by ``truncate(id, W)`` (W default
20,000; 0 leaves that pair out). Then, for each round (default 3), a fraction of the rows (default 1%) is
changed (updates, deletes, inserts), captured once (extract → replay), and the same capture files are merged
into every target, each pair's two merges back to back, the one that goes first alternating by round (the
machine is shared: the two sides of a ratio are measured next to each other, and the medians are reported).

It prints, per round and target, the merge job's wall time (spark-submit to exit) and its phases, the
``changes`` phase of the logged table (computing and writing its changes), and the changelog rows written
against the keys the capture changed; then the medians, and the ratio logged / plain both as the median of the
rounds' ratios (each round's two merges ran next to each other) and as the ratio of the medians. Target: the
merge job's wall time with the changelog <= 1.3x the same merge without it (the median of the rounds' ratios).
After the last round every table's row count is checked against the source, and each round's changelog rows by
change type against the capture.
"""

from __future__ import annotations

import inspect
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from airflow_cdc_provider.core.changelog import ChangelogSpec, changelog_table  # noqa: E402
from airflow_cdc_provider.core.partitioning import Partitioning, PartitionSpec  # noqa: E402
from airflow_cdc_provider.stages.extract import TableRange, extract  # noqa: E402
from airflow_cdc_provider.stages.replay import replay  # noqa: E402
from airflow_cdc_provider.stages.snapshot import snapshot  # noqa: E402
from bench.merge_bench import bench_table, change  # noqa: E402
from bench.partition_bench import link_into  # noqa: E402
from bench.targets import Target  # noqa: E402

TARGET_RATIO = 1.3
# Replay writes each key's binlog coordinate into its files for the changelog's _source_* columns when asked to;
# a replay without that parameter writes none, and the changelog's _source_* columns are NULL.
POSITIONS = "positions" in inspect.signature(replay).parameters


def change_types(outcome: dict) -> dict[str, int]:
    """The rows of the version's changelog partition by ``_change_type``, read back from its files."""
    location = outcome["changelog"]["location"].removeprefix("file:")
    table = pq.read_table(location, columns=["_change_type"])
    counts = pc.value_counts(table.column("_change_type").combine_chunks()).to_pylist()
    return {c["values"]: c["counts"] for c in counts}


class Pair:
    """A plain and a logged target of one layout."""

    def __init__(self, label: str, header, partitioning: Partitioning | None, work: Path):
        self.label = label
        self.plain = Target(f"{label}_plain", header, work, partitioning)
        self.logged = Target(f"{label}_logged", header, work, partitioning,
                             changelog=ChangelogSpec(table=changelog_table(f"{label}_logged")))
        self.rounds: list[dict] = []

    def targets(self, round_: int) -> list[tuple[str, Target]]:
        """The two, in the order this round merges them: plain first in even rounds, logged first in odd."""
        order = [("plain", self.plain), ("logged", self.logged)]
        return order if round_ % 2 == 0 else order[::-1]


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    fraction = float(sys.argv[2]) if len(sys.argv) > 2 else 0.01
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    width = int(sys.argv[4]) if len(sys.argv) > 4 else 20_000
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    print(f"{rows:,} rows, {fraction:.2%} changed per round, {rounds} rounds, "
          + (f"pairs unpartitioned and truncate(id, {width})" if width else "an unpartitioned pair only")
          + f"; target: logged / plain merge wall time <= {TARGET_RATIO}x", flush=True)
    if not POSITIONS:
        print("replay at this commit has no `positions` parameter: replayed without it, so the capture files carry "
              "no binlog coordinates and the changelog's _source_* columns are NULL (their cost is not measured)",
              flush=True)
    work = Path(tempfile.mkdtemp(prefix="history-bench-"))
    try:  # the server, the capture files and four tables' versions and changelogs: about 1 GB per million rows
        run(work, rows, fraction, rounds, width)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work: Path, rows: int, fraction: float, rounds: int, width: int) -> None:
    with bench_table(work, rows) as (server, source, header):
        pairs = [Pair("flat", header, None, work)]
        layout = None
        if width:
            layout = PartitionSpec.parse(f"truncate(id, {width})").resolve(header.columns)
            pairs.append(Pair("part", header, layout, work))
        targets = [t for pair in pairs for _, t in pair.targets(0)]

        # The first load: one snapshot, its files linked into every target's run directory.
        t0 = time.perf_counter()
        outs = [target.begin() for target in targets]
        snap = snapshot(source.hook, header, outs[0] / "snapshot")
        print(f"snapshot of {snap.rows:,} rows {time.perf_counter() - t0:.1f} s; first loads:", flush=True)
        for i, target in enumerate(targets):
            files = snap.files if i == 0 else link_into(snap.files, outs[i] / "snapshot")
            seconds, outcome, _ = target.merge(snap.watermark, files, None, ())
            logged = f", changelog {outcome['changelog']['rows']:,} rows" if outcome.get("changelog") else ""
            print(f"  {target.name}: merge {seconds:.1f} s {outcome['phases']}{logged}", flush=True)

        for round_ in range(rounds):
            changed = change(server, rows, fraction, round_)
            inserts = changed - int(changed * 0.7) - int(changed * 0.15)
            t0 = time.perf_counter()
            outs = [target.begin() for target in targets]
            assert len({str(t.plan.start) for t in targets}) == 1, "the targets are at different watermarks"
            high = source.current_watermark()
            extracted = extract(source.hook, [TableRange(header, outs[0] / "raw", partitioning=layout or None)],
                                targets[0].plan.start, high)
            positions = {"positions": True} if POSITIONS else {}
            replayed = replay(extracted.files[header.table], outs[0] / "upsert.parquet", outs[0] / "delete.parquet",
                              **positions)
            capture_s = time.perf_counter() - t0
            keys = replayed.upserts + replayed.deletes
            # Every update changes its row and every delete and insert is of a key the table had or had not: the
            # net changes are two images per updated key and one per deleted or inserted key.
            expected = {"insert": inserts, "update_preimage": replayed.upserts - inserts,
                        "update_postimage": replayed.upserts - inserts, "delete": replayed.deletes}
            left = extracted.left_partitions.get(header.table, ())
            print(f"round {round_ + 1}: {changed:,} rows changed, captured in {capture_s:.1f} s "
                  f"({keys:,} keys: {replayed.upserts:,} upserts, {replayed.deletes:,} deletes)", flush=True)
            for pair in pairs:
                found: dict = {}
                for kind, target in pair.targets(round_):
                    i = targets.index(target)
                    upserts, deletes = [str(replayed.upsert_file)], str(replayed.delete_file)
                    if i:
                        upserts = link_into(upserts, outs[i])
                        deletes = link_into([deletes], outs[i])[0]
                    seconds, outcome, job = target.merge(extracted.end, upserts, deletes, left)
                    session = job["session_seconds"]
                    found[kind] = {"wall": seconds, "in_job": sum(outcome["phases"].values()), "session": session,
                                   "phases": outcome["phases"]}
                    if kind == "logged":
                        types = change_types(outcome)
                        assert outcome["changelog"]["rows"] == sum(types.values()), (outcome["changelog"], types)
                        assert types == {k: v for k, v in expected.items() if v}, (types, expected)
                        found[kind].update(changes=outcome["phases"].get("changes", 0.0),
                                           changelog_rows=outcome["changelog"]["rows"], keys=keys)
                plain, logged = found["plain"], found["logged"]
                logged["ratio"] = logged["wall"] / plain["wall"]
                logged["in_job_ratio"] = logged["in_job"] / plain["in_job"]
                pair.rounds.append(found)
                first = "plain" if round_ % 2 == 0 else "logged"
                print(f"  {pair.label} ({first} first): plain {plain['wall']:.1f} s (session {plain['session']:.1f}, "
                      f"{plain['phases']}); logged {logged['wall']:.1f} s (session {logged['session']:.1f}, "
                      f"{logged['phases']}); logged / plain {logged['ratio']:.2f}x wall, "
                      f"{logged['in_job_ratio']:.2f}x after the session; changes {logged['changes']:.1f} s, "
                      f"{logged['changelog_rows']:,} changelog rows for {keys:,} changed keys", flush=True)

        count = server.execute("SELECT COUNT(*) FROM bench.orders")[0][0]
        for target in targets:
            assert target.outcome["rows"] == count, (target.name, target.outcome["rows"], count)
        print(f"every table's row count equals the source's ({count:,}); every round's changelog rows by type "
              "match the capture's updates, inserts and deletes")
        for pair in pairs:
            def median(side: str, figure: str, of: list[dict] = pair.rounds) -> float:
                return statistics.median(r[side][figure] for r in of)

            ratio = median("logged", "ratio")
            plain_wall, logged_wall = median("plain", "wall"), median("logged", "wall")
            verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
            print(f"{pair.label}, medians of {rounds} rounds: merge wall plain {plain_wall:.1f} s, logged "
                  f"{logged_wall:.1f} s; logged / plain {ratio:.2f}x as the median of the rounds' ratios (target <= "
                  f"{TARGET_RATIO}x: {verdict}), {logged_wall / plain_wall:.2f}x as the ratio of the medians; after "
                  f"the Spark session plain {median('plain', 'in_job'):.1f} s, logged {median('logged', 'in_job'):.1f}"
                  f" s ({median('logged', 'in_job_ratio'):.2f}x); changes phase {median('logged', 'changes'):.1f} s; "
                  f"changelog rows {median('logged', 'changelog_rows'):,.0f} for {median('logged', 'keys'):,.0f} "
                  "changed keys")


if __name__ == "__main__":
    main()
